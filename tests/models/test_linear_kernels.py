"""Linear-attention layers priced by measured kernels (issue 35): the reader of aiconfigurator's
linear_attention tables (`dse.data._linear_layers`), the kernel model
(`dse.models.linear_layers`) and the pricer's use of it (`dse.predict.adapters.price_linear_scan`).

Tests that read the share skip cleanly without ../shared/data; the reader's checks run on small
real parquet files written here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dse.data import load
from dse.errors import DataError
from dse.fitting import plausible

GDN_DIR = ("aiconfigurator", "aic-core", "src", "aiconfigurator_core", "systems", "data", "h100_sxm",
           "linear_attention", "vllm", "0.24.0")  # fmt: skip
H100_BW = 3.35e12  # bytes/s, the registry's H100 SXM HBM3


def _gdn_rows(n_batch: int = 8) -> pd.DataFrame:
    """A small GDN table as the vLLM collector writes it: conv and scan rows of one layout, at
    a plausible 1.5 TB/s (latency in ms)."""
    recs = []
    for b in 2 ** np.arange(n_batch):
        for kernel in ("causal_conv1d_fn", "chunk_gated_delta_rule_flashinfer"):
            t = int(b) * 1024
            nbytes = t * (2 * 2048 + 2048) * 2 * 2  # conv: 6144 channels in and out, bf16
            recs.append({"framework": "vLLM", "version": "0.24.0", "device": "NVIDIA H100 80GB HBM3",
                         "op_name": "gdn", "kernel_source": kernel, "phase": "context",
                         "batch_size": int(b), "seq_len": 1024, "num_tokens": t, "d_model": 2048,
                         "d_conv": 4, "num_k_heads": 16, "head_k_dim": 128, "num_v_heads": 16,
                         "head_v_dim": 128, "model_name": "x",
                         "latency": 1e3 * (5e-6 + nbytes / 1.5e12)})  # fmt: skip
    return pd.DataFrame(recs)


def _write(root: Path, df: pd.DataFrame) -> Path:
    d = root.joinpath(*GDN_DIR)
    d.mkdir(parents=True, exist_ok=True)
    df.to_parquet(d / "gdn_perf.parquet")
    return root


# ---------------------------------------------------------------------------- the reader
def test_reader_converts_ms_and_names_the_layout(tmp_path: Path) -> None:
    t = load(_write(tmp_path, _gdn_rows()), ["linear_layer"])["linear_layer"]
    raw = _gdn_rows()
    assert len(t) == len(raw)
    np.testing.assert_allclose(t["latency_s"], raw["latency"] / 1e3, rtol=1e-12)
    assert set(t["kernel"]) == {"conv", "scan"}
    assert (t["gpu"] == "h100_sxm").all() and (t["engine"] == "vllm").all()
    # q|k|v packed: 2 nk dk + nv dv channels
    assert (t["conv_channels"] == 2 * 16 * 128 + 16 * 128).all()
    assert (t[["n_heads", "n_groups", "state_dim", "head_dim"]].iloc[0].tolist()
            == [16, 16, 128, 128])  # fmt: skip


@pytest.mark.parametrize("factor", [1e-3, 1e3])  # seconds / microseconds written as ms
def test_reader_rejects_a_unit_slip_naming_the_file(tmp_path: Path, factor: float) -> None:
    raw = _gdn_rows()
    raw["latency"] = raw["latency"] * factor
    with pytest.raises(DataError, match=r"gdn_perf\.parquet: .*\(wrong units\?\)"):
        load(_write(tmp_path, raw), ["linear_layer"])


def test_reader_rejects_an_unknown_phase_and_a_token_mismatch(tmp_path: Path) -> None:
    raw = _gdn_rows()
    raw.loc[3, "phase"] = "prefill"
    with pytest.raises(DataError, match=r"gdn_perf\.parquet: column 'phase' row 3"):
        load(_write(tmp_path, raw), ["linear_layer"])
    raw = _gdn_rows()
    raw.loc[2, "num_tokens"] = 7
    with pytest.raises(DataError, match=r"gdn_perf\.parquet: row 2: num_tokens"):
        load(_write(tmp_path, raw), ["linear_layer"])


def test_rows_under_the_physical_floor_are_dropped_and_counted(tmp_path: Path) -> None:
    raw = _gdn_rows()
    t = load(_write(tmp_path, raw), ["linear_layer"])["linear_layer"]
    floor = plausible.floor_s("linear_layer", t)
    assert np.isfinite(floor).all() and (t["latency_s"] > floor).all()
    t.loc[5, "latency_s"] = floor[5] * 0.2  # 5x faster than HBM allows
    kept, report = plausible.screen("linear_layer", t)
    assert report["rows"] == 1 and len(kept) == len(t) - 1
    assert report["by_gpu_engine"] == {"h100_sxm/vllm": 1}


def test_the_shared_tables_read_with_their_engine_differences(data_dir: Path) -> None:
    t = load(data_dir, ["linear_layer"])["linear_layer"]
    h = t[t["gpu"] == "h100_sxm"]
    assert {"vllm", "sglang", "trtllm"} <= set(h["engine"])
    assert set(h["layer"]) == {"gdn", "mamba2"}
    # TensorRT-LLM's GDN collector convolves the key channels alone
    trt = h[(h["engine"] == "trtllm") & (h["layer"] == "gdn")]
    assert (trt["conv_channels"] == trt["n_groups"] * trt["state_dim"]).all()
    # the share's Mamba-2 rows are conv kernels only
    assert set(h.loc[h["layer"] == "mamba2", "kernel"]) == {"conv"}
    # ms -> s: H100 kernels take 1 us .. 1 s
    assert h["latency_s"].between(1e-6, 1.0).all()
    assert plausible.screen("linear_layer", t)[1]["rows"] == 0


# ---------------------------------------------------------------------------- the model
@pytest.fixture(scope="module")
def gdn_model(data_dir: Path):
    from dse.models.linear_layers import LinearLayerModel

    t = load(data_dir, ["linear_layer"])["linear_layer"]
    rows = t[(t["gpu"] == "h100_sxm") & (t["engine"] == "vllm") & (t["layer"] == "gdn")
             & (t["phase"] == "generation")]  # fmt: skip
    return LinearLayerModel("gdn", "generation", "h100_sxm", "vllm", max_iter=60).fit(rows)


def test_model_is_never_below_the_roofline_floor(gdn_model) -> None:
    rng = np.random.default_rng(0)
    n = 200  # inside and far outside the fitted range
    ins = {
        "batch_size": 2.0 ** rng.integers(0, 14, n),
        "seq_len": np.ones(n),
        "n_heads": 2.0 ** rng.integers(0, 8, n),
        "head_dim": rng.choice([64.0, 128.0, 256.0], n),
        "n_groups": 2.0 ** rng.integers(0, 4, n),
        "state_dim": rng.choice([64.0, 128.0, 256.0], n),
    }
    p = gdn_model.predict(**ins)
    assert (p["latency_s"] >= p["floor_s"]).all()
    assert (p["floor_s"] > 0).all()
    # the floor is the plain roofline of the kernels' work on H100
    np.testing.assert_allclose(p["latency_s"], p["conv_s"] + p["scan_s"], rtol=1e-12)
    assert p["floor_s"][0] >= p["bytes"][0] / H100_BW * (1 - 1e-9)


def test_model_state_round_trips_exactly(gdn_model) -> None:
    from dse.models.linear_layers import LinearLayerModel

    again = LinearLayerModel.from_state(gdn_model.to_state())
    ins = {"batch_size": np.array([1.0, 64.0]), "n_heads": np.array([4.0, 32.0]),
           "head_dim": 128.0, "n_groups": np.array([2.0, 16.0]), "state_dim": 128.0}  # fmt: skip
    a, b = gdn_model.predict(**ins), again.predict(**ins)
    assert np.array_equal(a["latency_s"], b["latency_s"])
    assert again.gpu_spec_ == gdn_model.gpu_spec_


# ---------------------------------------------------------------------------- the pricer
def _qwen3_next(**kw):
    from dse.spec.catalogue import lookup_model

    return {**lookup_model("Qwen3-Next-80B-A3B").to_dict(), "gpu": "h100_sxm",
            "tensor_parallel": 8, "prompt_tokens": 2048, "output_tokens": 64, **kw}  # fmt: skip


def _has_linear_models(gpu: str) -> bool:
    from dse.predict.artifacts import load_artifact

    art, _ = load_artifact(gpu)
    return art is not None and bool(art.names("linear_layer"))


@pytest.mark.parametrize("gpu", ["h100_sxm", "b200_sxm"])
def test_a_linear_hybrid_is_priced_by_the_measured_models(gpu: str) -> None:
    if not _has_linear_models(gpu):
        pytest.fail(f"the shipped {gpu} artifact has no linear_layer models")
    from dse.predict import predict

    out = predict(_qwen3_next(gpu=gpu))
    assert "linear/scan" not in out["roofline_ops"][0].split(",")
    assert out["breakdown.prefill.linear/scan_s"][0] > 0
    # a head width no table measured: the roofline, named, and the miss flagged
    wide = predict(_qwen3_next(gpu=gpu, linear_head_dim=512))
    assert "linear/scan" in wide["roofline_ops"][0].split(",")
    assert "linear/scan: head_dim" in wide["out_of_range_inputs"][0]


def _scan_price(cfg: dict, phase: str = "prefill"):
    from dse.predict.adapters import price_linear_scan
    from dse.predict.artifacts import load_artifact
    from dse.predict.ops import forward_ops
    from dse.spec.columns import as_columns
    from dse.spec.hardware import get_gpu

    cols = as_columns(cfg)
    cols = cols[0] if isinstance(cols, tuple) else cols
    op = next(o for o in forward_ops(cols, phase) if o.name == "linear/scan")
    art, _ = load_artifact("h100_sxm")
    return price_linear_scan(art, op, get_gpu("h100_sxm"), {"cols": cols, "phase": phase})


def test_a_batch_beyond_the_table_is_priced_as_blocks_inside_it() -> None:
    if not _has_linear_models("h100_sxm"):
        pytest.skip("the H100 artifact has no linear_layer models")
    one = _scan_price(_qwen3_next(batch_size=64))
    four = _scan_price(_qwen3_next(batch_size=256))  # the prefill tables stop at 64 sequences
    assert one.model == four.model == "linear_layer.gdn.context.vllm"
    assert four.latency_s[0] == pytest.approx(4 * one.latency_s[0], rel=1e-12)
    assert not four.out_of_range[0]


def test_mamba2_and_the_engine_choice() -> None:
    if not _has_linear_models("h100_sxm"):
        pytest.skip("the H100 artifact has no linear_layer models")
    # the share measured Mamba-2's conv alone: its mixer stays on the roofline
    assert _scan_price(_qwen3_next(linear_kind="mamba2")) is None
    assert _scan_price(_qwen3_next(engine="sglang")).model == "linear_layer.gdn.context.sglang"
    # TensorRT-LLM's GDN table is not fitted (its conv is not the engine's): vLLM's model
    assert _scan_price(_qwen3_next(engine="trtllm"), "decode").model == (
        "linear_layer.gdn.generation.vllm"
    )


@pytest.mark.parametrize(
    ("phase", "table_phase"), [("prefill", "context"), ("decode", "generation")]
)
def test_the_benchmarks_roofline_is_the_pricers(phase: str, table_phase: str) -> None:
    """benchmarks/linear_layers_cv.py scores the roofline dse priced linear/scan with: the same
    seconds as the operator's own FLOPs and bytes on the roofline (plus the launch)."""
    from benchmark_scripts import load_benchmark

    from dse.predict.ops import forward_ops
    from dse.roofline import LAUNCH_S, roofline_s
    from dse.spec.columns import as_columns
    from dse.spec.hardware import get_gpu

    cols = as_columns(_qwen3_next(batch_size=3, prompt_tokens=1000))
    cols = cols[0] if isinstance(cols, tuple) else cols
    op = next(o for o in forward_ops(cols, phase) if o.name == "linear/scan")
    g = get_gpu("h100_sxm")
    want = roofline_s(op.flops, op.bytes, g.peak_bf16_flops_per_s, g.hbm_bw_bytes_per_s) + LAUNCH_S
    keys = ("batch_size", "seq_len", "n_heads", "head_dim", "n_groups", "state_dim", "conv_width")
    rows = pd.DataFrame({k: np.broadcast_to(np.asarray(op.dims[k], float), (1,)) for k in keys})
    got = load_benchmark("linear_layers_cv").ops_roofline_s(rows, "h100_sxm", table_phase, False)
    np.testing.assert_allclose(got, want, rtol=1e-12)
