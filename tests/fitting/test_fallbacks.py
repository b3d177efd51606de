"""Fallbacks for rows an artifact has no table for: GEMMs borrowed from the sibling chip's
artifact (H200 per-tensor fp8 priced by H100's table, times moved by the roofline ratio), the
same for all-reduce rows in `dse validate`, and the provenance each one carries."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dse.errors import ArtifactError
from dse.metrics import mape_pct
from dse.models.artifact import Artifact
from dse.models.gemm import gemm_work
from dse.predict.adapters import price_gemm
from dse.predict.gemm_choice import Gemm, sibling_factor
from dse.predict.ops import Op
from dse.spec.hardware import get_gpu


def _without(art: Artifact, *names: str) -> Artifact:
    """A copy of `art` lacking some models (what a GPU with fewer measured tables looks like)."""
    manifest = dict(art.manifest)
    manifest["models"] = {k: v for k, v in art.manifest["models"].items() if k not in names}
    models = {k: v for k, v in art.models.items() if k not in names}
    return Artifact(manifest=manifest, models=models)


def _gemm_rows(data_dir: Path, gpu: str, engine: str, dtype: str) -> pd.DataFrame:
    from dse.data import load

    t = load(data_dir, ["gemm"])["gemm"]
    r = t[(t["gpu"] == gpu) & (t["engine"] == engine) & (t["dtype"] == dtype)]
    return r[(r[["m", "n", "k"]] > 0).all(axis=1)]


def test_h200_per_tensor_fp8_is_priced_by_the_h100_table_not_by_fp8_block() -> None:
    h200 = Gemm.load("h200_sxm")
    assert h200.sibling is not None and h200.sibling.gpu == "h100_sxm"
    fp8 = h200.choose("fp8")
    assert fp8.borrowed and fp8.label == "gemm.vllm.fp8@h100_sxm"
    # The engine-own fp8 kernels: the sibling's table of the asked engine, never vLLM's here.
    assert h200.choose("fp8_block", "trtllm").label == "gemm.trtllm.fp8_block@h100_sxm"
    assert h200.choose("fp8", "trtllm").label == "gemm.trtllm.fp8@h100_sxm"
    # bf16 (cuBLAS in both engines): this chip's table of another engine comes first.
    assert h200.choose("bf16", "trtllm").label == "gemm.vllm.bfloat16"
    assert h200.choose("fp8_block").label == "gemm.vllm.fp8_block"  # its own table
    # `resolve` stays within the artifact; without a sibling the old dtype fallback is kept.
    assert h200.resolve("fp8") == "gemm.vllm.fp8_block"
    alone = Gemm(h200.artifact, find_sibling=False)
    assert alone.sibling is None and alone.choose("fp8").label == "gemm.vllm.fp8_block"
    # H100 has every table: nothing is borrowed, and A100 (no fp8 tensor cores) still refuses.
    assert not Gemm.load("h100_sxm").choose("fp8", "trtllm").borrowed
    with pytest.raises(ArtifactError):
        Gemm.load("a100_sxm").choose("fp8")


def test_sibling_factor_is_the_bandwidth_ratio_only_where_memory_bound() -> None:
    h100, h200 = get_gpu("h100_sxm"), get_gpu("h200_sxm")
    # A large square GEMM is compute-bound on both (one peak): no change.
    f, b_in, b_out = gemm_work(8192, 8192, 8192, "fp8")
    assert sibling_factor(f, b_in + b_out, "fp8", h200, h100) == pytest.approx(1.0)
    # A decode GEMV streams the weight: time falls with the bandwidth (launch floor aside).
    f, b_in, b_out = gemm_work(1, 16384, 16384, "fp8")
    got = sibling_factor(f, b_in + b_out, "fp8", h200, h100)
    ratio = h100.hbm_bw_bytes_per_s / h200.hbm_bw_bytes_per_s
    assert ratio < got < 1.0 and got == pytest.approx(ratio, rel=0.1)


def test_borrowed_prediction_is_the_siblings_moved_by_the_roofline() -> None:
    h200 = Gemm.load("h200_sxm")
    m, n, k = np.array([1.0, 16.0, 4096.0]), np.array([8192.0] * 3), np.array([8192.0] * 3)
    got = h200.predict(m, n, k, "fp8")
    raw = h200.sibling.model("gemm.vllm.fp8").predict(m, n, k)
    f, b_in, b_out = gemm_work(m, n, k, "fp8")
    fac = sibling_factor(f, b_in + b_out, "fp8", get_gpu("h200_sxm"), get_gpu("h100_sxm"))
    np.testing.assert_allclose(got["latency_s"], raw["latency_s"] * fac)
    np.testing.assert_allclose(got["energy_j"], got["power_w"] * got["latency_s"])
    h200_gpu = get_gpu("h200_sxm")  # power on H200 (its idle and board), not the sibling's
    assert np.all((got["power_w"] > h200_gpu.idle_power_w) & (got["power_w"] <= 700.0))
    assert fac[0] < 0.9 and fac[2] == pytest.approx(1.0, abs=0.02)  # GEMV moves, GEMM not
    # The predictor's adapter prices the same and names the borrowed table.
    w = np.ones(3)
    op = Op(
        "ffn/down", "gemm", "ffn", w, 2 * m * n * k, f, {"m": m, "n": n, "k": k, "dtype": "fp8"}
    )
    price = price_gemm(h200.artifact, op, get_gpu("h200_sxm"))
    assert price.model == "gemm.vllm.fp8@h100_sxm"
    np.testing.assert_allclose(price.latency_s, got["latency_s"])


@pytest.mark.slow
def test_sibling_borrowing_measured_on_the_share(data_dir: Path) -> None:
    """The evidence behind borrowing (docs/accuracy.md): H100's vLLM bf16 table priced onto
    H200's bf16 rows (an H200 artifact without its own) scores 8.0%, half the unscaled 15.4%;
    the dtype fallback it replaces, H100's fp8_block table on H100's per-tensor fp8 rows,
    scores hundreds of percent (vLLM's block-fp8 kernels carry a 50-85 us floor)."""
    h100, h200 = Artifact.load("h100_sxm"), Artifact.load("h200_sxm")
    rows = _gemm_rows(data_dir, "h200_sxm", "vllm", "bfloat16")
    lacking = Gemm(_without(h200, "gemm.vllm.bfloat16"), sibling=h100)
    assert lacking.choose("bf16").label == "gemm.vllm.bfloat16@h100_sxm"
    m, n, k = (rows[c].to_numpy(float) for c in "mnk")
    true = rows["latency_s"].to_numpy(float)
    borrowed = mape_pct(lacking.predict(m, n, k, "bf16")["latency_s"], true)
    unscaled = mape_pct(h100.model("gemm.vllm.bfloat16").predict(m, n, k)["latency_s"], true)
    assert borrowed < 10.0 and borrowed < 0.7 * unscaled
    # Energy with H200's power (its own fp8_block table's measured-power residual) beats the
    # H100 table's own power on H200's measured energy (18.5% against 23.7%).
    e_true = rows["energy_j"].to_numpy(float)
    e_borrowed = mape_pct(lacking.predict(m, n, k, "bf16")["energy_j"], e_true)
    raw = h100.model("gemm.vllm.bfloat16").predict(m, n, k)
    f, b_in, b_out = gemm_work(m, n, k, "bf16")
    fac = sibling_factor(f, b_in + b_out, "bf16", get_gpu("h200_sxm"), get_gpu("h100_sxm"))
    assert e_borrowed < 20.0 and e_borrowed < mape_pct(
        raw["power_w"] * raw["latency_s"] * fac, e_true
    )
    fp8 = _gemm_rows(data_dir, "h100_sxm", "vllm", "fp8")
    m, n, k = (fp8[c].to_numpy(float) for c in "mnk")
    as_block = mape_pct(
        h100.model("gemm.vllm.fp8_block").predict(m, n, k)["latency_s"], fp8["latency_s"]
    )
    assert as_block > 10 * borrowed


@pytest.mark.slow
def test_validate_names_the_borrowed_allreduce_model(data_dir: Path) -> None:
    """H200 all-reduce rows whose model the H200 artifact lacks are priced by H100's (same
    NVLink and NVSwitch) and the result says so; an artifact with its own model is untouched."""
    from dse.fitting.validate import validate

    h100, h200 = Artifact.load("h100_sxm"), Artifact.load("h200_sxm")
    kw = {"gpus": ["h200_sxm"], "kinds": ["allreduce"]}
    own = validate(data_dir, artifacts={"h200_sxm": h200, "h100_sxm": h100}, **kw)["results"]
    lacking = _without(h200, "allreduce.nccl.nccl")
    got = validate(data_dir, artifacts={"h200_sxm": lacking, "h100_sxm": h100}, **kw)["results"]
    alone = validate(data_dir, artifacts={"h200_sxm": lacking}, **kw)["results"]

    def entry(results: list[dict], dtype: str) -> dict:
        return next(r for r in results if r["op"] == "all_reduce" and r["dtype"] == dtype)

    assert "fallback" not in entry(own, "float16")
    e = entry(got, "float16")
    assert e["fallback"] == "allreduce.nccl.nccl@h100_sxm" and e["fallback_rows"] == e["rows"]
    assert e["unpredicted_rows"] == 0 and e["latency_mape_pct"] < 5.0
    assert entry(alone, "float16")["unpredicted_rows"] == e["rows"]  # no sibling given: none
    assert entry(got, "int8") == entry(own, "int8")  # its own model still prices it


@pytest.mark.slow
def test_validate_names_a_gemm_priced_by_another_table(data_dir: Path, tmp_path: Path) -> None:
    """A surrogates folder whose H200 artifact lacks the bf16 table prices H200 bf16 GEMMs with
    the H100 table stored next to it, and `dse validate` names it."""
    from dse.fitting.validate import validate

    h100, h200 = Artifact.load("h100_sxm"), Artifact.load("h200_sxm")
    _without(h200, "gemm.vllm.bfloat16").save(tmp_path / "h200_sxm")
    h100.save(tmp_path / "h100_sxm")
    lacking = Artifact.load(tmp_path / "h200_sxm")
    res = validate(data_dir, gpus=["h200_sxm"], kinds=["gemm"], artifacts={"h200_sxm": lacking})
    by = {r["dtype"]: r for r in res["results"]}
    assert by["bfloat16"]["fallback"] == "gemm.vllm.bfloat16@h100_sxm"
    assert by["bfloat16"]["unpredicted_rows"] == 0 and by["bfloat16"]["latency_mape_pct"] < 10
    assert "fallback" not in by["fp8_block"]


def test_predictor_names_the_borrowed_artifact() -> None:
    """An H200 fp8 prediction priced with H100's GEMM tables says so: which operators, and the
    id of the H100 artifact that priced them (provenance); bf16 borrows nothing, in a batch of
    its own or beside fp8 rows (like `roofline_ops`, the fields describe each row)."""
    from dse.predict import predict
    from dse.resources import surrogates_dir

    root = surrogates_dir()
    if not (root / "h200_sxm").is_dir() or not (root / "h100_sxm").is_dir():
        pytest.skip("shipped h100_sxm / h200_sxm artifacts absent")
    cfg = {
        "d_model": [4096],
        "n_layers": [32],
        "n_heads": [32],
        "n_kv_heads": [8],
        "d_ff": [14336],
        "vocab_size": [128256],
        "batch_size": [8],
        "prompt_tokens": [512],
        "output_tokens": [64],
        "gpu": ["h200_sxm"],
    }
    fp8 = predict({**cfg, "weight_dtype": ["fp8"]})
    h100_id = Artifact.load(root / "h100_sxm").artifact_id
    assert "ffn/down=gemm.vllm.fp8@h100_sxm" in fp8["borrowed_ops"][0].split(",")
    assert fp8["borrowed_artifacts"][0] == f"h100_sxm:{h100_id}"
    assert fp8["artifact_gpu"][0] == "h200_sxm"
    bf16 = predict({**cfg, "weight_dtype": ["bfloat16"]})
    assert bf16["borrowed_ops"][0] == "" and bf16["borrowed_artifacts"][0] == ""
    both = predict({**{k: v * 2 for k, v in cfg.items()}, "weight_dtype": ["bfloat16", "fp8"]})
    assert both["borrowed_ops"][0] == "" and both["borrowed_artifacts"][0] == ""
    assert both["borrowed_ops"][1] == fp8["borrowed_ops"][0]
    assert both["borrowed_artifacts"][1] == f"h100_sxm:{h100_id}"
