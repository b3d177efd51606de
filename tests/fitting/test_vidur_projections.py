"""benchmarks/vidur_projections.py (issue 33): vidur's projection GEMMs scored per operator on
`dse validate`'s path with each model held out of Level 2. The held-out model's rows never reach
the fit, and Level 2 is the only fit behind those items that reads vidur's rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from benchmark_scripts import load_benchmark

from dse.data import load
from dse.fitting.artifacts import LEVEL_PREFIXES, without_levels
from dse.fitting.layer_ops import predict_layer_op_rows
from dse.fitting.level2 import _level2_tables, _x
from dse.models.artifact import Artifact

GPU = "h100_sxm"
HELD = "microsoft/phi-2"  # the smallest of H100's four vidur models: the quickest fold

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def vp():
    return load_benchmark("vidur_projections")


@pytest.fixture(scope="module")
def layer_ops(data_dir: Path):
    rows = load(data_dir, ["layer_op"])["layer_op"]
    # two of the four TP sizes: a small subset keeps each fold's fit to a few seconds
    return rows[(rows["gpu"] == GPU) & rows["tensor_parallel"].isin([1, 2])]


def test_held_out_rows_never_reach_the_fit(vp, layer_ops) -> None:
    shipped = Artifact.load(GPU)
    tables, _ = _level2_tables(GPU, layer_ops, without_levels(shipped, LEVEL_PREFIXES))
    fold = vp.fit_fold(tables, [HELD], shipped)
    others = {str(m) for m in layer_ops["model"].unique()} - {HELD}
    assert HELD in set(layer_ops["model"]) and fold.trained_on == others
    # every GEMM row of the other models (two GEMMs a block row), none of the held-out one's
    want = sum(
        int((np.isfinite(t[c]) & (t[c] > 0) & (t["model"] != HELD)).sum())
        for t in tables.values()
        for c in ("measured_gemm1_s", "measured_gemm2_s")
    )
    assert fold.gemm_rows == want
    steps = vp.fit_fold(tables, [HELD], shipped, wave_steps=True)  # the candidate's folds too
    assert steps.trained_on == others and steps.gemm_rows == want
    assert all(b.wave_steps for b in steps.blocks.values())
    assert not any(b.wave_steps for b in fold.blocks.values())  # as shipped
    # the held-out model's measurements changed (x2) leave the fold's calibration unchanged
    doubled = {
        b: t.assign(
            measured_gemm1_s=np.where(t["model"] == HELD, 2, 1) * t["measured_gemm1_s"],
            measured_gemm2_s=np.where(t["model"] == HELD, 2, 1) * t["measured_gemm2_s"],
        )
        for b, t in tables.items()
    }
    again = vp.fit_fold(doubled, [HELD], shipped)
    for block, rows in tables.items():
        X = _x(rows)
        np.testing.assert_allclose(
            again.blocks[block].log_factor(X), fold.blocks[block].log_factor(X), rtol=1e-12
        )
    # ... where a fit that saw them moves (the check above is not vacuous)
    saw = vp.fit_fold(doubled, [], shipped)
    X = _x(tables["ffn_dense"])
    assert (
        np.abs(saw.blocks["ffn_dense"].log_factor(X) - fold.blocks["ffn_dense"].log_factor(X)).max()
        > 0.01
    )


def test_held_out_score_on_validates_path(vp, layer_ops) -> None:
    d, folds = vp.held_out_predictions(layer_ops, GPU, only=[HELD])
    assert [f.held_out for f in folds] == [(HELD,)] and HELD not in folds[0].trained_on
    assert set(d["model"]) == {HELD} and set(d["op"]) == set(vp.OPS)
    assert np.isfinite(d["pred_s"]).all() and np.isfinite(d["in_sample_s"]).all()
    # the in-sample column is what `dse validate` gives with the shipped artifact
    shipped = predict_layer_op_rows(Artifact.load(GPU), "layer_op", d)["latency_pred_s"]
    np.testing.assert_allclose(d["in_sample_s"], shipped, rtol=1e-12)
    s = vp.summary(d)
    assert set(vp.OPS.values()) <= set(s) and 0 < s["all"] < 50  # a percentage, not a ratio


def test_projection_items_do_not_read_the_layer_op_model(layer_ops) -> None:
    """Only Level 2 has to be refitted per fold: the layer-op model (fitted on vidur's rows
    too) prices RoPE and the activation, never a projection item."""
    art = Artifact.load(GPU)
    rows = layer_ops[layer_ops["op"].isin(["attn_pre_proj", "mlp_down_proj"])]
    rows = rows.sample(200, random_state=0)
    a = predict_layer_op_rows(art, "layer_op", rows)["latency_pred_s"].to_numpy(float)
    b = predict_layer_op_rows(without_levels(art, ("layer_op.",)), "layer_op", rows)
    np.testing.assert_allclose(a, b["latency_pred_s"].to_numpy(float), rtol=1e-12)
