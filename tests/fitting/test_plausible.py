"""Physical floors (dse.fitting.plausible): rows faster than physics allows are found, counted
and named, and `dse fit` / `dse validate` leave them out."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dse.fitting import plausible as P
from dse.spec.hardware import get_gpu


def _gemm_rows(latency_s: list[float]) -> pd.DataFrame:
    n = len(latency_s)
    return pd.DataFrame(
        {
            "source": "hand",
            "gpu": "h100_sxm",
            "engine": "vllm",
            "dtype": "bfloat16",
            "m": [4096] * n,
            "n": [4096] * n,
            "k": [4096] * n,
            "latency_s": latency_s,
        }
    )


def test_gemm_floor_is_the_compute_roofline() -> None:
    h100 = get_gpu("h100_sxm")
    floor = 2 * 4096**3 / h100.peak_flops_per_s("bfloat16")  # compute-bound: 139 us
    rows = _gemm_rows([floor * 0.5, floor * 0.9, floor * 2.0])
    np.testing.assert_allclose(P.floor_s("gemm", rows), floor, rtol=1e-12)
    assert P.implausible("gemm", rows).tolist() == [True, False, False]
    kept, report = P.screen("gemm", rows)
    assert len(kept) == 2 and report["rows"] == 1 and report["of_rows"] == 3
    assert report["by_gpu_engine"] == {"h100_sxm/vllm": 1}
    assert "m=4096 n=4096 k=4096" in report["examples"][0]


def test_fp8_rows_use_the_fp8_peak() -> None:
    rows = _gemm_rows([1.0]).assign(dtype="fp8")
    h100 = get_gpu("h100_sxm")
    assert P.floor_s("gemm", rows)[0] == pytest.approx(2 * 4096**3 / h100.peak_fp8_flops_per_s)


def test_memory_bound_floor_and_collective_floor() -> None:
    # m = 1: the 4096 x 4096 bf16 weight (32 MiB) read once at HBM bandwidth
    rows = _gemm_rows([1.0]).assign(m=1)
    nbytes = (4096 + 4096 * 4096) * 2 + 4096 * 2
    assert P.floor_s("gemm", rows)[0] == pytest.approx(
        nbytes / get_gpu("h100_sxm").hbm_bw_bytes_per_s
    )
    ar = pd.DataFrame(
        {"gpu": "h100_sxm", "n_gpus": [8, 8], "message_bytes": [1 << 30, 1 << 30],
         "n_nodes": [1, 2], "latency_s": [1e-6, 1e-6]}
    )  # fmt: skip
    floor = P.floor_s("allreduce", ar)
    assert floor[0] == pytest.approx((1 << 30) * 7 / 8 / get_gpu("h100_sxm").nvlink_bw_bytes_per_s)
    assert np.isnan(floor[1])  # multi-node: no floor, never flagged
    assert P.implausible("allreduce", ar).tolist() == [True, False]


def test_end_to_end_floor_streams_the_weights_every_decode_step() -> None:
    rows = pd.DataFrame(
        {
            "gpu": "h100_sxm",
            "engine": "trtllm",
            "model": ["meta-llama/Llama-2-7b-hf", "meta-llama/Llama-2-7b-hf", "no/such-model"],
            "n_gpus": [1, 2, 1],
            "batch_size": 1,
            "input_tokens": 1024,
            "output_tokens": 1024,
            "latency_s": [0.05, 0.05, 0.05],  # ended after prefill: 1023 steps cannot fit in 50 ms
        }
    )
    floor = P.floor_s("e2e", rows)
    # Llama-2-7B streams about 6.5e9 parameters (fp16) per step: over 4 ms per step on 1 GPU
    step = 6.4e9 * 2 / get_gpu("h100_sxm").hbm_bw_bytes_per_s
    assert floor[0] > 1023 * step
    assert floor[1] == pytest.approx(floor[0] / 2, rel=1e-9)  # each GPU its 1/TP share
    assert np.isnan(floor[2])  # unknown model: no floor
    assert P.implausible("e2e", rows).tolist() == [True, True, False]
    ttft = P.floor_s("e2e_ttft", rows)
    assert 0 < ttft[0] < floor[0] / 100


def test_fit_context_leaves_out_implausible_rows(tmp_path: Path) -> None:
    from dse.fitting.context import FitContext

    lines: list[str] = []
    ctx = FitContext(tmp_path, "h100_sxm", log=lines.append)
    floor = 2 * 4096**3 / get_gpu("h100_sxm").peak_flops_per_s("bfloat16")
    ctx._tables.clear()
    rows = _gemm_rows([floor * 0.1, floor * 3])
    import dse.data

    orig = dse.data.load
    try:
        dse.data.load = lambda root, kinds: {"gemm": rows}  # type: ignore[assignment]
        got = ctx.table("gemm")
    finally:
        dse.data.load = orig  # type: ignore[assignment]
    assert len(got) == 1 and ctx.implausible["gemm"]["rows"] == 1
    assert any("1 of 2 rows implausible" in line for line in lines)


# ---------------------------------------------------------------------------- the real data
def test_real_data_runs_that_ended_after_prefill_are_flagged(data_dir: Path) -> None:
    """argonne GH200 vLLM, 2048 tokens in and out: 20 runs measured 0.04 to 3.2 s, 0.006 to
    0.053 of the time streaming the weights once per decode step takes (the runs ended after
    prefill). The 13 H100 TensorRT-LLM rows of issue 19 are in the kept-back share, not here."""
    from dse.data import load

    e2e = load(data_dir, ["e2e"])["e2e"]
    bad = P.implausible("e2e", e2e)
    vllm = (e2e["gpu"] == "gh200") & (e2e["engine"] == "vllm")
    assert int((bad & vllm).sum()) == 20
    assert (e2e.loc[bad & vllm, "input_tokens"] == 2048).all()
    # the engines Level 3 models keep every other row: the fastest sits at 1.2 x its floor
    modelled = e2e["engine"].isin(("vllm", "trtllm")).to_numpy()
    assert int((bad & modelled).sum()) == 20


def test_real_data_validate_reports_them(data_dir: Path) -> None:
    from dse.fitting.validate import validate

    lines: list[str] = []
    report = validate(data_dir, gpus=["gh200"], kinds=["e2e"], log=lines.append)
    imp = report["implausible_rows"]["e2e"]
    assert imp["rows"] == 23 and imp["by_gpu_engine"] == {"gh200/llama.cpp": 3, "gh200/vllm": 20}
    assert any("model=bigscience/bloom-7b1" in ex for ex in imp["examples"])
    scored = sum(r["rows"] for r in report["results"])
    assert scored == 260 - 23  # argonne's 260 GH200 rows less the implausible ones
    assert any("23 of 260 rows implausible" in line for line in lines)
    # ... and the table a user reads says so, not only the log and the JSON.
    from dse.fitting.validate import format_table

    table = format_table(report)
    assert (
        "not scored, faster than the physical floor: e2e 23 of 260 rows "
        "(gh200/llama.cpp 3, gh200/vllm 20;" in table
    )


# ---------------------------------------------------------------------------- profiled devices
AIC = "aiconfigurator/aic-core/src/aiconfigurator_core/systems/data"
SLOW_MATMUL = 1e9  # FLOP/s: the device's measured bf16 matmul peak (what gpu.yaml's fields say)


def _slow_matmul_device(root: Path) -> dict:
    """A profile folder of device 'slowmm' (real files, the layouts `dse profile` writes)
    whose bf16 attention runs 10x faster than its bf16 matmul peak, as on an AVX2-only EPYC
    (SDPA 8 GFLOP/s, matmul 0.5): GEMM rows at 0.3-1 x the matmul peak, context attention rows
    at 10 x it. Returns the gpu.yaml mapping (no kernel_peaks: what a profile wrote before)."""
    import yaml

    base = root / AIC / "slowmm"
    mnk = [(m, n, k) for m in (64, 256, 1024) for n in (512, 2048) for k in (512, 2048)]
    rate = np.linspace(0.3, 1.0, len(mnk)) * SLOW_MATMUL
    gemm = pd.DataFrame(mnk, columns=["m", "n", "k"]).assign(
        gemm_dtype="bfloat16", kernel_source="torch.matmul"
    )
    gemm["latency"] = 2.0 * gemm["m"] * gemm["n"] * gemm["k"] / rate * 1e3  # ms
    shapes = [(b, s, h) for b in (1, 2, 4) for s in (256, 512, 1024, 2048) for h in (8, 16)]
    ctx = pd.DataFrame(shapes, columns=["batch_size", "isl", "num_heads"]).assign(
        attn_dtype="bfloat16", kv_cache_dtype="bfloat16", num_key_value_heads=8, head_dim=64,
        step=0, window_size=0, beam_width=1, kernel_source="sdpa_flash",
    )  # fmt: skip
    causal = 4.0 * ctx["batch_size"] * ctx["num_heads"] * 64 * ctx["isl"] ** 2 / 2.0
    ctx["latency"] = causal / (10.0 * SLOW_MATMUL) * 1e3  # ms
    for folder, stem, frame in [("gemm", "gemm_perf", gemm), ("attention", "context_attention_perf", ctx)]:  # fmt: skip
        path = base / folder / "pytorch" / "2.5" / f"{stem}.parquet"
        path.parent.mkdir(parents=True)
        frame.to_parquet(path, index=False)
    spec = {
        "name": "slowmm", "display_name": "AVX2-like CPU (profiled)",
        "peak_bf16_flops_per_s": SLOW_MATMUL, "peak_fp8_flops_per_s": None,
        "hbm_bw_bytes_per_s": 2e10, "hbm_capacity_bytes": 6.4e10, "board_power_w": None,
        "idle_power_w": None, "nvlink_bw_bytes_per_s": 0.0, "n_sms": 16,
        "compute_capability": 0.0, "measured_power": False,
        "fields_from": "measured (no datasheet known for this device)",
    }  # fmt: skip
    (root / "gpu.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return spec


@pytest.fixture
def forget_slowmm():
    """`dse.data.load` registers the folder's GPU for the process: unregister it after."""
    from dse.spec import hardware

    yield
    hardware._EXTRA.pop("slowmm", None)


def test_a_profiled_device_bounds_each_kernel_kind_by_its_own_measured_rates(
    tmp_path: Path, forget_slowmm: None
) -> None:
    """Issue 32: attention faster than the device's matmul peak is not "faster than physics".
    The readers take the tables (no bound from the measured matmul peak: the old check refused
    a median 10 x above 1.3 x it), the floors computed from the spec's one matmul peak flag
    every attention row (the old behaviour, kept for a spec without kernel_peaks), and with
    the kernel_peaks `dse profile` now writes no row is flagged, whatever the kinds' speeds."""
    from dse.data import load
    from dse.profile.spec import with_kernel_peaks, write_spec
    from dse.spec.hardware import load_spec

    spec = _slow_matmul_device(tmp_path)
    tables = load(tmp_path, ["gemm", "context_attention"])  # registers 'slowmm'
    assert len(tables["context_attention"]) == 24 and len(tables["gemm"]) == 12
    # one matmul peak for every kind: each attention row ~10 x faster than its floor allows
    assert P.implausible("context_attention", tables["context_attention"]).all()
    assert not P.implausible("gemm", tables["gemm"]).any()

    write_spec(tmp_path, with_kernel_peaks(tmp_path, spec))
    gpu = load_spec(tmp_path / "gpu.yaml")
    att = gpu.kernel_peak("context_attention", "bfloat16")
    mm = gpu.kernel_peak("gemm", "bfloat16")
    assert att is not None and mm is not None and att.flops_per_s > 5 * mm.flops_per_s
    assert mm.flops_per_s == pytest.approx(SLOW_MATMUL, rel=0.05)  # its fastest GEMM row
    assert gpu.peak_bf16_flops_per_s == SLOW_MATMUL  # the predictor's field is unchanged
    tables = load(tmp_path, ["gemm", "context_attention"])  # registers the new spec
    for kind, rows in tables.items():
        floor = P.floor_s(kind, rows)
        assert np.isfinite(floor).all() and not P.implausible(kind, rows).any(), kind
        # every row at or above its own floor: its kind's fastest row exactly at it
        ratio = rows["latency_s"].to_numpy() / floor
        assert ratio.min() == pytest.approx(1.0, rel=1e-9), kind
    # a measured kind stays bounded by its own rates: GEMMs 8 x faster than any measured are
    fast = tables["gemm"].assign(latency_s=tables["gemm"]["latency_s"] / 8.0)
    assert P.implausible("gemm", fast).any()
    # a dtype (or kind) the device did not measure: the fastest rate of any kind bounds it (a
    # floor must never be too high), here the attention's
    f8 = pd.DataFrame({"gpu": "slowmm", "dtype": "fp8", "m": [1024], "n": [2048],
                       "k": [2048], "latency_s": [2.0 * 1024 * 2048 * 2048 / att.flops_per_s]})  # fmt: skip
    assert P.kind_rates(gpu, "gemm", "fp8")[0] == pytest.approx(att.flops_per_s)
    assert P.floor_s("gemm", f8)[0] == pytest.approx(f8["latency_s"][0], rel=1e-9)
