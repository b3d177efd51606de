"""Kernel bands on the measured share (skipped without ../shared/data): stored by the fit from
its own CV, recalibrated by `dse fit --bands-only` without touching the weights, reported by
`dse validate` per table."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dse.cli import main
from dse.fitting import bands
from dse.fitting.context import FitContext
from dse.fitting.layer_ops import fit_layer_op_family, layer_op_band_tables
from dse.models.artifact import WEIGHTS, Artifact
from dse.models.band import Band
from dse.resources import surrogates_dir

# slow: minutes on a 2-core VM (fits, sweeps, builds); `pytest -m "not slow"` leaves it out
pytestmark = pytest.mark.slow

GEMM = "aiconfigurator/aic-core/src/aiconfigurator_core/systems/data/{gpu}/gemm/{eng}/{ver}"


def _quiet(msg: str) -> None:
    pass


def test_fit_stores_the_band_of_its_cv_and_bands_only_reproduces_it(data_dir: Path) -> None:
    """The layer-op family's fit records the band of its leave-one-model-out residuals; the
    band step, rerunning that CV on the fitted artifact, calibrates the same band."""
    ctx = FitContext(data_dir, "a100_sxm", seed=0, log=_quiet)
    (fm,) = fit_layer_op_family(ctx)
    assert fm.band is not None and fm.band.log_lo < 0 < fm.band.log_hi
    assert fm.band.rows == fm.cv["rows"] and fm.band.held_out is None  # not measured by default
    art = Artifact.from_fitted("a100_sxm", [fm])
    assert Band.from_entry(art.manifest["models"]["layer_op.vidur"]["band"]) == fm.band
    ctx.keep = art
    (table,) = layer_op_band_tables(ctx)
    assert bands.calibrate(table) == fm.band


def test_bands_only_rewrites_the_manifest_alone(data_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "a100_sxm"
    shutil.copytree(surrogates_dir() / "a100_sxm", out)
    before = Artifact.load(out)
    weights = (out / WEIGHTS).read_bytes()
    fit = ["fit", "--data", str(data_dir), "--gpu", "a100_sxm", "--out", str(out)]
    rc = main([*fit, "--bands-only", "--only", "layer_op"])
    assert rc == 0
    after = Artifact.load(out)
    assert after.artifact_id == before.artifact_id and (out / WEIGHTS).read_bytes() == weights
    band = after.band("layer_op.vidur")
    assert band is not None and band.held_out is not None
    ho = band.held_out
    assert 0.0 < ho["coverage"] <= 1.0 and ho["groups"] == 7  # vidur's A100 models
    assert set(ho["by"]["op"]) >= {"input_layernorm", "mlp_act"}
    assert ho["fits"] == 7 + 21  # leave one model out nested in itself: each pair once
    # only the band entries changed
    strip = {
        n: {k: v for k, v in e.items() if k != "band"} for n, e in after.manifest["models"].items()
    }
    was = {
        n: {k: v for k, v in e.items() if k != "band"} for n, e in before.manifest["models"].items()
    }
    assert strip == was


@pytest.fixture
def gemm_slice(data_dir: Path, tmp_path: Path) -> Path:
    """200 rows of each dtype of the H100 vLLM GEMM table, in the shared layout."""
    root = tmp_path / "data"
    rel = GEMM.format(gpu="h100_sxm", eng="vllm", ver="0.24.0")
    raw = pd.read_parquet(data_dir / rel / "gemm_perf.parquet")
    part = raw.groupby("gemm_dtype", group_keys=False).sample(200, random_state=0)
    (root / rel).mkdir(parents=True)
    part.to_parquet(root / rel / "gemm_perf.parquet", index=False)
    return root


def test_validate_reports_each_tables_band(gemm_slice: Path, tmp_path: Path) -> None:
    """Rows priced by a model with a band get that band around them; the table reports the
    band's held-out coverage, the model, and the share of its own rows inside."""
    arts = tmp_path / "arts"
    shutil.copytree(surrogates_dir() / "h100_sxm", arts / "h100_sxm")
    art = Artifact.load(arts / "h100_sxm")
    held = {"coverage": 0.875, "rows": 1000}
    band = Band(-0.05, 0.07, rows=1000, scheme="test", held_out=held)
    for name in art.names("gemm"):
        art.manifest["models"][name].pop("band", None)
    art.manifest["models"]["gemm.vllm.bfloat16"]["band"] = band.to_entry()
    art.save_manifest(arts / "h100_sxm")
    out = tmp_path / "v.json"
    rc = main(["validate", "--data", str(gemm_slice), "--artifacts", str(arts), "--json", str(out)])
    assert rc == 0
    res = {r["dtype"]: r for r in json.loads(out.read_text())["results"]}
    bf16 = res["bfloat16"]
    assert bf16["band_coverage"] == pytest.approx(0.875)
    assert bf16["band_model"] == "gemm.vllm.bfloat16" and bf16["band_rows"] == 200
    # in-sample rows (the fit saw them) at a ~2% MAPE: nearly all inside a -5/+7% band
    assert 0.5 < bf16["band_scored_coverage"] <= 1.0
    assert res["fp8"]["band_coverage"] is None and res["fp8"]["band_rows"] == 0


def test_a_kernel_band_holds_its_prediction_on_the_share(gemm_slice: Path) -> None:
    """`Artifact.band_bounds` around the shipped GEMM model's predictions, with real rows far
    outside the fitted range widened: every prediction inside its band."""
    from dse.data import load
    from dse.fitting.gemm import predict_gemm_rows

    art = Artifact.load(surrogates_dir() / "h100_sxm")
    art.manifest["models"]["gemm.vllm.bfloat16"]["band"] = Band(-0.05, 0.07).to_entry()
    rows = load(gemm_slice, ["gemm"])["gemm"]
    rows = rows[rows["dtype"] == "bfloat16"].copy()
    rows.loc[rows.index[:20], "m"] = rows["m"].max() * 8  # far past the fitted m
    got = predict_gemm_rows(art, "gemm", rows)
    lat, lo, hi = (
        got[c].to_numpy(float) for c in ("latency_pred_s", "latency_lo_s", "latency_hi_s")
    )
    assert np.all(lo <= lat) and np.all(lat <= hi)
    width = np.log(hi / lo)
    assert width[:20] == pytest.approx(2 * 0.12)  # outside by a factor 2 or more: x2
    assert np.median(width[20:]) == pytest.approx(0.12)
