"""The numeric verdict (`rules.check_codes`) against the text one (`rules.check_columns`).

A sweep's scans judge every configuration by code and format a message only for the rows a
caller shows; both paths must agree, row by row, on which rows are invalid and why.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from dse.spec import columns as C
from dse.spec import rules as R

# Per field: the first value is valid (drawn most often, so valid rows occur), the others
# break a rule alone or in combination with other fields.
CHOICES: dict[str, list] = {
    "d_model": [4096, 0, 96, 4100, 5120, 4096.5],
    "n_layers": [32, -1, 1, 6, 30],
    "n_heads": [32, 8, 12, 40, 48, 128],
    "n_kv_heads": [8, 0, 1, 3, 4, 32],
    "d_ff": [14336, 11004, 0],
    "vocab_size": [32000, 0],
    "n_experts": [1, 8, 0],
    "top_k": [1, 2, 9],
    "d_ff_expert": [0, 1404, 1408],
    "shared_expert_d_ff": [0, 5632, 5636, -1],
    "norms_per_layer": [2, 0],
    "gated_mlp": [True, False],
    "weight_dtype": ["bfloat16", "fp8", "fp4"],
    "kv_dtype": ["bfloat16", "fp8", "fp4"],
    "norm": ["rmsnorm", "batchnorm"],
    "linear_kind": ["gated_deltanet", "mamba1", "mamba"],
    "attention_pattern": ["full", "sliding,full", "linear*3,full", "bogus", "none,full"],
    "sliding_window": [4096, 0],
    "kv_lora_rank": [0, 512, 8192],
    "q_lora_rank": [0, 1536, 9000],
    "qk_rope_head_dim": [0, 64, 128],
    "qk_nope_head_dim": [0, 128],
    "v_head_dim": [0, 128],
    "qkv_bias": [False, True],
    "attn_output_gate": [False, True],
    "linear_n_heads": [0, 32, 12],
    "linear_n_groups": [0, 5, 8],
    "n_dense_layers": [0, 1, 40],
    "ffn_pattern": ["ffn", "dense,ffn", "none,ffn", "bogus", "ffn*3"],
    "head_dim": [128, 7, 64],
}
# Values only an object column can hold (a CSV cell, YAML): None, text, floats, flags as ints.
OBJECT_EXTRA: dict[str, list] = {
    "d_model": [None, "4096"],
    "n_heads": [32.0, None],
    "n_kv_heads": [None],
    "gated_mlp": [1, 2, "yes"],
    "weight_dtype": [None, 8],
    "attention_pattern": [None, ["sliding", "full"]],
    "head_dim": [None],
}
TP = [1, 2, 4, 8, 3, 0]


def _grid(n: int, seed: int, objects: bool) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """(columns, tensor_parallel, head_dim_defaulted): each field valid in ~85% of rows."""
    rng = np.random.default_rng(seed)

    def draw(values: list) -> np.ndarray:
        p = np.full(len(values), 0.15 / max(len(values) - 1, 1))
        p[0] = 0.85 if len(values) > 1 else 1.0
        pick = rng.choice(len(values), n, p=p)
        if not objects:
            return np.array(values)[pick]
        out = np.empty(n, dtype=object)
        for i, j in enumerate(pick):
            out[i] = values[j]
        return out

    cols = {k: draw(v + (OBJECT_EXTRA.get(k, []) if objects else [])) for k, v in CHOICES.items()}
    return cols, draw(TP), rng.random(n) < 0.5


def _pattern(template: str) -> re.Pattern[str]:
    """A template as a regex: each '{}' is a shown value."""
    return re.compile(re.escape(template).replace(r"\{\}", "(.+)") + r"\Z")


@pytest.mark.parametrize(("objects", "n"), [(False, 4000), (True, 1500)])
def test_codes_and_texts_agree_row_by_row(objects: bool, n: int) -> None:
    cols, tp, defaulted = _grid(n, seed=3, objects=objects)
    code = R.check_codes(cols, n, tp, head_dim_defaulted=defaulted)
    text = R.check_columns(cols, n, tp, head_dim_defaulted=defaulted)
    templates = R.reasons()
    assert code.shape == (n,) and code.dtype.kind == "i"
    # Same rows invalid ...
    np.testing.assert_array_equal(code == 0, text == "")
    # ... for the same reason: each message is its code's template with the values filled in
    # (and no other template matches it: the codes are not merely both non-zero).
    patterns = [_pattern(t) for t in templates]
    for i in np.flatnonzero(code):
        assert patterns[code[i] - 1].match(text[i]), (i, templates[code[i] - 1], text[i])
        assert not any(p.match(text[i]) for p in patterns[: code[i] - 1]), text[i]
    # The text of chosen rows alone is the batch's text of those rows.
    rows = np.flatnonzero(code)[::7]
    np.testing.assert_array_equal(
        R.messages(cols, rows, tp, head_dim_defaulted=defaulted), text[rows]
    )
    # The grid is wide: valid rows, and many different rules broken.
    assert 0.05 < (code == 0).mean() < 0.95
    assert len(np.unique(code[code > 0])) >= (20 if objects else 25)


def test_codes_are_the_same_for_native_and_object_columns() -> None:
    """A rule's code is its place in the rule list whatever the columns' dtypes (a bool
    column skips no rule)."""
    n = 2000
    cols, tp, defaulted = _grid(n, seed=5, objects=False)
    as_objects = {k: v.astype(object) for k, v in cols.items()}
    native = R.check_codes(cols, n, tp, head_dim_defaulted=defaulted)
    objects = R.check_codes(as_objects, n, tp.astype(object), head_dim_defaulted=defaulted)
    np.testing.assert_array_equal(native, objects)
    assert int(native.max()) <= len(R.reasons())


def test_one_configuration_gets_its_code_and_message() -> None:
    cfg = {"d_model": 4100, "n_layers": 32, "n_heads": 32, "d_ff": 14336}
    cols = {k: np.array([v]) for k, v in cfg.items()}
    code = R.check_codes(cols, 1)
    assert R.reasons()[code[0] - 1] == "n_heads: must divide d_model={} (or set head_dim), got {}"
    assert R.messages(cols, [0])[0] == R.check_architecture(cfg)[0]
    assert (
        R.check_architecture(cfg)[0]
        == "n_heads: must divide d_model=4100 (or set head_dim), got 32"
    )


def test_derived_without_texts_keeps_the_verdict() -> None:
    """`derived(texts=False)`, what a sweep's scans call: the same codes, no messages."""
    n = 600
    rng = np.random.default_rng(11)
    cfg = {
        "d_model": rng.choice([2048, 2560, 3072, 4096, 6144], n),
        "n_layers": rng.choice([16, 30, 32], n),
        "n_heads": rng.choice([16, 32, 48, 64], n),
        "n_kv_heads": rng.choice([1, 2, 4, 8, 12], n),
        "d_ff": rng.choice([8192, 11008, 14336], n),
        "tensor_parallel": rng.choice([1, 2, 4, 8], n),
        "attention_pattern": rng.choice(["full", "sliding*3,full", "sliding,full"], n),
        "sliding_window": rng.choice([0, 4096], n),
    }
    cols, n = C.as_columns(cfg)
    with_text = C.derived(cols, n)
    bare = C.derived(cols, n, texts=False)
    assert "invalid" not in bare
    np.testing.assert_array_equal(bare["invalid_code"], with_text["invalid_code"])
    np.testing.assert_array_equal(with_text["invalid_code"] == 0, with_text["invalid"] == "")
    hd = cols["head_dim_defaulted"]
    check = {k: cols[k] for k in (*C.ATTENTION_FIELDS, "d_model", "n_layers", "n_heads")}
    check |= {k: cols[k] for k in ("d_ff", "n_kv_heads", "n_experts", "top_k", "d_ff_expert")}
    check["head_dim"] = cols["head_dim"]
    expected = R.check_columns(check, n, cols["tensor_parallel"], head_dim_defaulted=hd)
    np.testing.assert_array_equal(with_text["invalid"], expected)
    assert 0 < (bare["invalid_code"] == 0).sum() < n


def test_the_gpu_rule_comes_after_the_architecture_rules() -> None:
    """nvfp4 weights on a GPU without FP4 tensor cores: the last code of `reasons()`, its message
    only where the architecture itself is valid (an architecture rule is told first), and the
    same verdict with and without texts."""
    n = 400
    rng = np.random.default_rng(5)
    cfg = {
        "d_model": rng.choice([4096, 4100], n),
        "n_layers": np.full(n, 32),
        "n_heads": np.full(n, 32),
        "d_ff": np.full(n, 14336),
        "gpu": rng.choice(["h100_sxm", "b200_sxm", "a100_sxm"], n),
        "weight_dtype": rng.choice(["bfloat16", "fp8", "nvfp4"], n),
    }
    cols, n = C.as_columns(cfg)
    with_text = C.derived(cols, n)
    bare = C.derived(cols, n, texts=False)
    np.testing.assert_array_equal(bare["invalid_code"], with_text["invalid_code"])
    code = with_text["invalid_code"]
    arch_bad = cfg["d_model"] == 4100
    off = (cfg["weight_dtype"] == "nvfp4") & (cfg["gpu"] != "b200_sxm")
    gpu_code = R.weight_dtype_off_gpu_code()
    assert R.reasons()[gpu_code - 1] == R.WEIGHT_DTYPE_OFF_GPU
    np.testing.assert_array_equal(code == gpu_code, off & ~arch_bad)
    np.testing.assert_array_equal(code == 0, ~off & ~arch_bad)
    for i in np.flatnonzero(off & ~arch_bad):
        text = with_text["invalid"][i]
        assert text.startswith(f"weight_dtype: nvfp4 needs FP4 tensor cores, which {cfg['gpu'][i]}")
        assert "b200_sxm" in text
    assert all(t.startswith("n_heads: must divide") for t in with_text["invalid"][arch_bad])
    assert (off & ~arch_bad).sum() > 0 and (code == 0).sum() > 0
