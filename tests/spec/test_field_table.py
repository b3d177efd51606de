"""One field table (issue 23): the Architecture/Workload dataclass defaults, the batch
defaults (dse.spec.columns) and the choice lists agree with dse.spec.fields, field by field."""

from __future__ import annotations

from dataclasses import MISSING, fields

from dse.spec import arch as A
from dse.spec import choices
from dse.spec import columns as C
from dse.spec.fields import FIELDS
from dse.spec.workload import Workload


def test_every_dataclass_field_is_in_the_table_with_the_same_default() -> None:
    for cls in (A.Architecture, Workload):
        for f in fields(cls):
            assert f.name in FIELDS, f"{cls.__name__}.{f.name} has no entry in dse.spec.fields"
            want = None if f.default is MISSING else f.default
            assert FIELDS[f.name].default == want, f"{cls.__name__}.{f.name}"


def test_batch_defaults_and_derived_defaults_read_the_same_fields() -> None:
    for name, value in C.DEFAULTS.items():
        if name in FIELDS:
            assert FIELDS[name].default == value, name
    assert set(C.REQUIRED) == {n for n in C.ARCH_FIELDS if n not in C.DEFAULTS}
    for name, source in C.DERIVED_FROM.items():
        assert FIELDS[name].default is None and source in C.REQUIRED


def test_choice_fields_read_the_one_list() -> None:
    def of(name: str) -> tuple[str, ...]:
        c = FIELDS[name].choices
        return tuple(c() if callable(c) else c)

    assert of("weight_dtype") == choices.WEIGHT_DTYPES == tuple(choices.DTYPE_BYTES)
    # every KV dtype is a storage dtype; nvfp4 is a weight dtype only
    assert (
        of("kv_dtype") == choices.KV_DTYPES == tuple(d for d in choices.DTYPE_BYTES if d != "nvfp4")
    )
    assert of("norm") == choices.NORMS
    assert of("engine") == choices.ENGINES
    assert A.DTYPE_BYTES is choices.DTYPE_BYTES


def test_a_constant_column_is_judged_as_its_value_and_as_a_varied_one() -> None:
    """A column holding one value (a field left at its default) is judged once: the same
    verdict and typed value as a column that varies, for good and bad values alike."""
    import numpy as np

    cases = [
        ("n_layers", [32, 0, 1.5, 2**40, 7], True),
        ("sliding_window", [0, 4096, -1], True),
        ("qk_rope_head_dim", [64, 63], True),
        ("tied_embeddings", [True, False], True),
        ("prompt_tokens", [1.0, 4096.0, 0.5, float("inf")], True),
    ]
    for name, values, _ in cases:
        f = FIELDS[name]
        for v in values:
            const, bad_c = f.parse_array(np.full(5, v))
            varied, bad_v = f.parse_array(np.array([v] * 5 + [values[0]]))
            assert (bad_c == bad_v[:5]).all(), (name, v)
            if not bad_c.any():
                assert (const == varied[:5]).all() and const.dtype == varied.dtype, (name, v)


def test_a_constant_text_column_is_judged_as_its_value_and_as_a_varied_one() -> None:
    """Texts too (choices, patterns, versions): a column of one text is judged once, without
    np.unique's sort (an exact sweep's fixed fields), with the verdict and text of a column
    that varies."""
    import numpy as np

    cases = [
        ("weight_dtype", ["bfloat16", "fp8", "fp3", ""]),
        ("engine", ["vllm", "sglang", "tgi-nope"]),
        ("attention_pattern", ["full", "sliding*3,full", "sliding,sliding,sliding,full", "bogus"]),
        ("ffn_pattern", ["ffn", "dense,ffn", "ffn*3", "bogus"]),
        ("engine_version", ["0.11.1", "0.6.3", "banana"]),
    ]
    for name, values in cases:
        f = FIELDS[name]
        for v in values:
            const, bad_c = f.parse_array(np.full(5, v))
            varied, bad_v = f.parse_array(np.array([v] * 5 + [values[0]]))
            assert bad_c.tolist() == bad_v[:5].tolist(), (name, v)
            assert const.tolist() == varied[:5].tolist() and const.dtype.kind == "U", (name, v)
            assert bool(bad_c.all()) == (not f.parse(v)[0]), (name, v)  # the scalar rule


def test_every_default_passes_its_own_rule() -> None:
    """`as_columns` fills a column left out with its default unchecked: each default must be a
    value its field accepts, typed as the check types it."""
    import numpy as np

    for name, default in C.DEFAULTS.items():
        if default is None:
            continue
        if name in C.PATTERN_FIELDS:  # a pattern's default is its canonical text
            assert FIELDS[name].parse(default) == (True, default), name
            continue
        filled = np.full(3, np.asarray(default).item())
        typed = FIELDS[name].parse_array(filled)
        assert not typed[1].any(), (name, default)
        assert typed[0].dtype == filled.dtype, (name, typed[0].dtype, filled.dtype)
