"""Inert fields (`dse.spec.inert`): a configuration's value of a field it ignores changes
nothing computed from it, and a sweep counts configurations that differ only there as one
(the example space `examples/attention_families_8b.yaml` crossed n_kv_heads with MLA and
sliding_window with all-full patterns: 24 enumerated rows, 12 configurations)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from dse.spec import columns as C
from dse.spec.inert import INERT_FIELDS, inert_masks
from dse.spec.space import load_space
from dse.sweep import SweepOptions, evaluate, exact_front, run_sweep
from dse.sweep.fronts import config_ids
from dse.sweep.space_index import canonical_index, space_columns

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "attention_families_8b.yaml"
BASE = {"d_model": 2048, "n_layers": 16, "n_heads": 16, "n_kv_heads": 4, "d_ff": 5632,
        "vocab_size": 32000, "batch_size": 4, "prompt_tokens": 2048, "output_tokens": 64}  # fmt: skip
MLA = {"kv_lora_rank": 256, "qk_rope_head_dim": 64}
LINEAR = {"attention_pattern": "linear*3,full", "linear_kind": "mamba1", "linear_n_heads": 4096,
          "linear_head_dim": 1, "linear_state_dim": 16}  # fmt: skip
# (what the configuration is, the inert field, two of its values)
CASES: list[tuple[dict[str, Any], str, Any, Any]] = [
    (MLA, "n_kv_heads", 2, 16),
    ({**MLA, "tensor_parallel": 4}, "n_kv_heads", 1, 16),
    ({}, "sliding_window", 512, 4096),
    ({"attention_pattern": "linear,full", "linear_kind": "mamba2"}, "sliding_window", 0, 300),
    ({}, "linear_kind", "gated_deltanet", "mamba1"),
    ({}, "linear_n_heads", 8, 64),
    ({"attention_pattern": "sliding,full", "sliding_window": 512}, "linear_state_dim", 16, 256),
    ({}, "linear_norm", True, False),
    ({}, "linear_conv_width", 2, 8),
    (LINEAR, "linear_n_groups", 1, 7),
    ({}, "d_ff_expert", 1024, 8192),
    ({}, "shared_expert_d_ff", 0, 2048),
    ({}, "shared_expert_gate", False, True),
    ({"tensor_parallel": 2}, "n_dense_layers", 0, 3),
    (MLA, "rope", True, False),
    ({"attention_pattern": "linear", "linear_kind": "mamba2", "linear_n_groups": 4}, "rope", True,
     False),
]  # fmt: skip


def _pair(extra: dict[str, Any], field: str, a: Any, b: Any) -> dict[str, np.ndarray]:
    rows = [{**BASE, **extra, field: v} for v in (a, b)]
    return {k: np.array([r.get(k, C.DEFAULTS.get(k)) for r in rows]) for k in rows[0]}


def _space(tmp_path: Path, text: str) -> Any:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return load_space(path)


def _same(x: Any, y: Any) -> bool:
    x, y = np.asarray(x), np.asarray(y)
    if x.dtype.kind in "fc":
        # float32 round-off of the MLPs (the two rows may sit in other GEMM micro-tiles, whose
        # kernels depend on the CPU); an input that is not inert moves outputs by far more
        return bool(np.allclose(x, y, rtol=1e-6, atol=0, equal_nan=True))
    return bool(np.all(x == y))


@pytest.mark.parametrize(("extra", "field", "a", "b"), CASES, ids=lambda c: str(c)[:24])
def test_an_inert_field_changes_nothing_the_sweep_computes(
    extra: dict[str, Any], field: str, a: Any, b: Any, tmp_path: Path
) -> None:
    """Validity, sizes, memory, every prediction, tokens-to-Wh and the loss of the two
    configurations are equal, and `inert_masks` says the field is inert in both."""
    cols = _pair(extra, field, a, b)
    full, n = C.as_columns(cols)
    assert inert_masks(full, n)[field].all()
    space = _space(tmp_path, (
        "name: inert\nhardware: h100_sxm\nspace: {d_model: 2048, n_layers: 16, n_heads: 16, "
        "d_ff: 5632, training_tokens: 1.0e+12}\nobjectives:\n  loss: {source: chinchilla}\n"
        "  latency: {metric: request}\n  energy: {source: tokens2wh}\n"
    ))  # fmt: skip
    full = full.with_columns({"training_tokens": np.full(n, 10**12, dtype=np.int64)})
    ev = evaluate(space, full)
    assert ev.valid.all(), ev.invalid_reason
    blocks = {"objectives": ev.objectives, **ev.sizes, **ev.constraints}
    for name, block in (("pred", ev.pred), ("t2wh", ev.t2wh), ("quality", ev.quality)):
        blocks.update({f"{name}.{k}": v for k, v in block.items()})
    assert ev.t2wh and ev.quality
    for key, v in blocks.items():
        v = np.asarray(v)
        assert _same(v[0], v[1]), (key, v)
    derived = C.derived(full, n, messages=True)
    for key, v in derived.items():
        assert _same(np.asarray(v)[:1], np.asarray(v)[1:]), key


def test_the_fields_that_decide_are_not_inert() -> None:
    """A field is inert only where it should be: n_kv_heads counts without MLA, the window
    with sliding layers, the linear fields with linear layers, the experts in an MoE model."""
    cols = _pair({}, "n_experts", 1, 8)
    cols["top_k"] = np.array([1, 2])
    cols["attention_pattern"] = np.array(["sliding,full", "linear,full"])
    cols["sliding_window"] = np.array([512, 512])
    full, n = C.as_columns(cols)
    m = inert_masks(full, n)
    assert not m["n_kv_heads"].any()
    assert list(m["sliding_window"]) == [False, True]
    assert list(m["linear_n_heads"]) == [True, False]
    assert list(m["d_ff_expert"]) == [True, False]
    assert not m["rope"].any()  # both have attention layers
    assert set(m) == set(INERT_FIELDS)


def test_inert_masks_read_a_table_as_written_back() -> None:
    """Numbers as floats or text, patterns as text, missing cells: the same masks."""
    table = pd.DataFrame({
        "kv_lora_rank": ["512", 0.0, None], "attention_pattern": ["full", "sliding,full", np.nan],
        "linear_kind": [None, "mamba1", "mamba2"], "n_experts": [1.0, 8, "8"],
    })  # fmt: skip
    m = inert_masks({c: table[c].to_numpy() for c in table}, len(table))
    assert list(m["n_kv_heads"]) == [True, False, False]
    assert list(m["sliding_window"]) == [True, False, True]
    assert list(m["d_ff_expert"]) == [True, False, False]
    assert list(m["rope"]) == [True, False, False]  # MLA; GQA layers in the other two


# ---------------------------------------------------------------------- the sweep
def test_the_example_space_has_12_configurations_not_24(tmp_path: Path) -> None:
    space = load_space(EXAMPLE)
    idx = np.arange(space.size())
    twin = canonical_index(space, idx)
    assert space.size() == 24 and len(np.unique(twin)) == 12
    assert (twin <= idx).all() and (canonical_index(space, twin) == twin).all()
    # the twins are the same configuration but for inert fields
    cols = space_columns(space, idx)
    ids = config_ids(pd.DataFrame({k: cols[k] for k in C.CONFIG_FIELDS}))
    assert (ids == ids[twin]).all() and len(np.unique(ids)) == 12

    out = tmp_path / "r"
    assert not run_sweep(SweepOptions(space_file=EXAMPLE, out=out, quiet=True)).interrupted
    counts = json.loads((out / "summary.json").read_text())["counts"]
    assert counts["trials"] == 24
    assert counts["distinct_configurations"] == 12 and counts["repeats"] == 12
    trials = pd.read_parquet(out / "trials.parquet")
    front = pd.read_csv(out / "front.csv")
    assert front["trials"].sum() == counts["front_trials"]
    # no two front rows are one configuration
    assert len(np.unique(config_ids(front[[c for c in C.CONFIG_FIELDS if c in front]]))) == len(
        front
    )
    # every repeat is told its first trial's values (the exhaustive sweep predicts it once)
    obj = [c for c in trials if c.startswith("obj.")]
    by_number = trials.set_index("number")
    for number, t in zip(idx, twin, strict=True):
        assert np.allclose(by_number.loc[number, obj].to_numpy(float),
                           by_number.loc[t, obj].to_numpy(float), rtol=0, atol=0)  # fmt: skip


def _canonical_by_digits(space: Any, idx: np.ndarray) -> np.ndarray:
    """`canonical_index` without its shortcut: every index decoded, its digits canonical."""
    from dse.sweep.space_index import canonical_digits

    sizes = [len(p.values) for p in space.searched]
    digits = np.column_stack(np.unravel_index(idx, sizes))
    return np.ravel_multi_index(tuple(canonical_digits(space, digits).T), sizes)


@pytest.mark.parametrize(
    ("fixed", "moves"),
    [("", False), ("  kv_lora_rank: 256\n  qk_rope_head_dim: 64\n", True)],
    ids=["gqa", "mla"],
)
def test_canonical_index_skips_decoding_only_where_nothing_is_inert(
    tmp_path: Path, fixed: str, moves: bool
) -> None:
    """The exact scan's shortcut (no deciding field searched, none of the searched fields
    inert under the fixed ones: the indices are their own) gives the digits' answer, and is
    not taken where a fixed field makes a searched one inert (MLA: n_kv_heads)."""
    text = (REPO / "benchmarks" / "sweep_3m_space.yaml").read_text()
    text = text.replace("  vocab_size: 128256\n", "  vocab_size: 128256\n" + fixed)
    path = tmp_path / "s.yaml"
    path.write_text(text)
    space = load_space(path)
    rng = np.random.default_rng(0)
    idx = np.sort(rng.choice(space.size(), 20_000, replace=False))
    got = canonical_index(space, idx)
    np.testing.assert_array_equal(got, _canonical_by_digits(space, idx))
    assert bool((got != idx).any()) is moves


def test_check_counts_the_distinct_configurations(capsys: pytest.CaptureFixture[str]) -> None:
    from dse.cli import main

    assert main(["check", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "  configurations:      24\n" in out
    assert "  distinct:            12 (12 differ from another only in fields they ignore" in out


def test_the_exact_front_holds_no_repeated_configuration() -> None:
    space = load_space(EXAMPLE)
    front = exact_front(space)
    assert (canonical_index(space, front.index) == front.index).all()


SPACE_FAR = """
name: inert-far
hardware: h100_sxm
workload: {batch_size: 2, output_tokens: 16, tensor_parallel: 1}
space:
  n_kv_heads: {values: [4, 16]}
  d_model: 2048
  n_layers: 8
  n_heads: 16
  kv_lora_rank: {values: [128, 256]}
  qk_rope_head_dim: 64
  d_ff: {low: 2048, high: 21248, step: 64}
  tied_embeddings: {values: [false, true]}
objectives:
  latency: {metric: request}
  energy: {source: hymell}
study: {sampler: exhaustive, seed: 0}
"""


@pytest.mark.slow
def test_a_repeat_beyond_the_batch_is_told_the_stored_trial(tmp_path: Path) -> None:
    """n_kv_heads first: an MLA row's first twin lies 1,204 configurations earlier, past the
    exhaustive sweep's 1,024-configuration batch; it is copied from the stored trial."""
    path = tmp_path / "far.yaml"
    path.write_text(SPACE_FAR)
    space = load_space(path)
    idx = np.arange(space.size())
    twin = canonical_index(space, idx)
    assert (idx - twin).max() == space.size() // 2 > 1024
    out = tmp_path / "r"
    assert not run_sweep(SweepOptions(space_file=path, out=out, quiet=True)).interrupted
    trials = pd.read_parquet(out / "trials.parquet").set_index("number")
    counts = json.loads((out / "summary.json").read_text())["counts"]
    assert counts["repeats"] == int((twin != idx).sum())
    obj = [c for c in trials if c.startswith("obj.")]
    far = np.flatnonzero(idx - twin > 1024)
    assert len(far)
    for i in far[:50]:
        assert (
            trials.loc[i, obj].to_numpy(float) == trials.loc[twin[i], obj].to_numpy(float)
        ).all()


SPACE_RANDOM = """
name: inert-random
hardware: h100_sxm
workload: {batch_size: 2, prompt_tokens: 256, output_tokens: 16}
space:
  d_model: 2048
  n_layers: 8
  n_heads: 16
  d_ff: 5632
  n_kv_heads: {values: [2, 4, 8, 16]}
  kv_lora_rank: {values: [0, 128, 256]}
  qk_rope_head_dim: {values: [0, 64]}
  sliding_window: {values: [0, 64, 128]}
  attention_pattern: {values: [[full], [sliding, full]]}
objectives:
  latency: {metric: request}
  energy: {source: hymell}
study: {sampler: random, trials: 300, seed: 3}
"""


@pytest.mark.slow
def test_a_sampler_repeating_a_configuration_but_for_inert_fields_is_told_it(
    tmp_path: Path,
) -> None:
    """The random sampler draws 300 of 144 rows; rows equal but for inert fields are repeats
    (not predicted again) and the results show one row per configuration."""
    path = tmp_path / "random.yaml"
    path.write_text(SPACE_RANDOM)
    out = tmp_path / "r"
    assert not run_sweep(SweepOptions(space_file=path, out=out, quiet=True)).interrupted
    trials = pd.read_parquet(out / "trials.parquet")
    evaluated = trials[(trials["state"] == "COMPLETE") | (trials["invalid_reason"] != "")]
    ids = config_ids(evaluated)
    counts = json.loads((out / "summary.json").read_text())["counts"]
    assert counts["distinct_configurations"] == len(np.unique(ids))
    space = load_space(path)
    assert len(np.unique(canonical_index(space, np.arange(space.size())))) < space.size()
    # rows equal but for the fields they ignore have the same values
    obj = [c for c in trials if c.startswith("obj.")]
    for _, group in evaluated.groupby(ids):
        v = group[obj].to_numpy(float)
        assert np.array_equal(v, np.broadcast_to(v[:1], v.shape), equal_nan=True)
