"""Out-of-range text off the hot path (issue 37): `predict(..., texts=False)` and the sweep's
scans that keep only a front give the same numbers without building `out_of_range_inputs`."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dse.predict import predict
from dse.spec.space import load_space
from dse.sweep._evaluate import evaluate
from dse.sweep.space_index import space_columns


def _wide(n: int) -> dict[str, np.ndarray]:
    """Llama-2-7B-like rows with workloads drawn wide enough that many leave the fitted ranges,
    on two GPUs (the per-GPU merge of `predict`)."""
    rng = np.random.default_rng(37)
    cols = {
        "d_model": rng.choice([4096, 5120, 16384], n),
        "n_layers": np.full(n, 32),
        "n_heads": np.full(n, 32),
        "n_kv_heads": rng.choice([8, 32], n),
        "d_ff": rng.integers(64, 448, n) * 64,
        "batch_size": rng.integers(1, 513, n),
        "prompt_tokens": rng.integers(16, 65537, n),
        "output_tokens": rng.integers(2, 4097, n),
        "tensor_parallel": rng.choice([1, 2, 4, 8], n),
        "gpu": rng.choice(["h100_sxm", "a100_sxm"], n),
    }
    # every other row Llama-3 8B at a plain workload (inside every fitted range)
    inside = {"d_model": 4096, "n_kv_heads": 8, "d_ff": 14336, "batch_size": 8}
    inside |= {"prompt_tokens": 1024, "output_tokens": 256, "tensor_parallel": 1}
    for k, v in inside.items():
        cols[k][::2] = v
    return cols


def test_predict_without_texts_gives_the_same_numbers_and_no_text() -> None:
    cols = _wide(300)
    full = predict(cols)
    lean = predict(cols, texts=False)
    assert "out_of_range_inputs" not in lean
    assert set(full) - set(lean) == {"out_of_range_inputs"}
    assert full["out_of_range"].any() and not full["out_of_range"].all()
    for k, v in lean.items():
        assert np.array_equal(np.asarray(v), np.asarray(full[k])), k
    # the text is there exactly where the flag is
    assert np.array_equal(full["out_of_range_inputs"] != "", full["out_of_range"])


SPACE = """\
name: texts
hardware: h100_sxm
workload:
  batch_size: {values: [1, 8, 64, 512]}
  prompt_tokens: {values: [1024, 60000]}
  output_tokens: 256
  tensor_parallel: 1
space:
  d_model: {values: [4096, 16384]}
  n_layers: 32
  n_heads: 32
  n_kv_heads: 8
  d_ff: {values: [14336, 28672]}
  vocab_size: 128256
objectives:
  latency: {metric: tpot}
  energy: {source: hymell, metric: per_output_token}
study: {sampler: exact, trials: 10, seed: 3}
"""


def test_a_scan_without_texts_has_the_same_objectives(tmp_path: Path) -> None:
    """The exact and screened scans evaluate with texts=False; their objectives, feasibility
    and out-of-range flags are those of the full evaluation the front rows get later."""
    f = tmp_path / "s.yaml"
    f.write_text(SPACE)
    space = load_space(f)
    cols = space_columns(space, np.arange(space.size()))
    full = evaluate(space, cols)
    lean = evaluate(space, cols, with_tokens2wh=False, texts=False)
    assert "out_of_range_inputs" not in lean.pred
    assert (full.pred["out_of_range_inputs"] != "").any()
    np.testing.assert_array_equal(lean.objectives, full.objectives)
    np.testing.assert_array_equal(lean.feasible, full.feasible)
    np.testing.assert_array_equal(lean.pred["out_of_range"], full.pred["out_of_range"])
