"""The share's new aiconfigurator tables (issue 35): B200 SXM (vLLM 0.24.0, TensorRT-LLM 1.3.0rc20,
SGLang 0.5.14, NCCL 2.29.2; GEMM incl. nvfp4) and SGLang 0.5.14 on H100, read through the public
reader with their units checked table by table. Skips without the share."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dse import data
from dse.errors import DataError
from dse.spec.hardware import get_gpu

SYSTEMS = "aiconfigurator/aic-core/src/aiconfigurator_core/systems/data"
B200_ENGINES = {"vllm": "0.24.0", "trtllm": "1.3.0rc20", "sglang": "0.5.14"}


@pytest.fixture(scope="module")
def new_tables(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, pd.DataFrame]:
    """The B200 tables and H100's SGLang tables only (links to the share's files: reading every
    GPU's tables would take minutes)."""
    root = tmp_path_factory.mktemp("share")
    base = data_dir / SYSTEMS
    files = list((base / "b200_sxm").rglob("*.parquet"))
    files += [p for p in (base / "h100_sxm").rglob("*.parquet") if "/sglang/" in str(p)]
    if not files:
        pytest.skip("no B200 / SGLang tables in this share")
    for src in files:
        dst = root / SYSTEMS / src.relative_to(base)
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.symlink_to(src)
    return data.read_aiconfigurator(root)


def _rows(tables: dict[str, pd.DataFrame], kind: str, gpu: str, engine: str) -> pd.DataFrame:
    df = tables[kind]
    return df[(df["gpu"] == gpu) & (df["engine"] == engine)]


@pytest.mark.slow
def test_every_b200_engine_has_gemm_attention_moe(new_tables: dict[str, pd.DataFrame]) -> None:
    for engine, version in B200_ENGINES.items():
        gemm = _rows(new_tables, "gemm", "b200_sxm", engine)
        assert set(gemm["engine_version"]) == {version}
        assert {"bfloat16", "fp8", "fp8_block", "nvfp4"} <= set(gemm["dtype"]), engine
        for kind in ("context_attention", "generation_attention", "moe"):
            assert len(_rows(new_tables, kind, "b200_sxm", engine)) > 1000, (engine, kind)
        # about 20 MoE layouts per engine (H100's tables: 8-14)
        moe = _rows(new_tables, "moe", "b200_sxm", engine)
        layouts = moe[["hidden_size", "inter_size", "topk", "num_experts"]].drop_duplicates()
        assert len(layouts) >= 15, engine
    nccl = _rows(new_tables, "allreduce", "b200_sxm", "nccl")
    assert set(nccl["engine_version"]) == {"2.29.2"} and set(nccl["n_gpus"]) == {2, 4, 8}


def test_h100_sglang_tables(new_tables: dict[str, pd.DataFrame]) -> None:
    for kind in ("gemm", "context_attention", "generation_attention", "moe", "allreduce"):
        got = _rows(new_tables, kind, "h100_sxm", "sglang")
        assert len(got) > 100, kind
        assert set(got["engine_version"]) == {"0.5.14"}, kind
    gemm = _rows(new_tables, "gemm", "h100_sxm", "sglang")
    one = gemm[(gemm["dtype"] == "bfloat16") & (gemm[["m", "n", "k"]] == 4096).all(axis=1)]
    # ms per call -> s: 0.178 ms, ~770 TFLOP/s (vLLM's cuBLAS: 0.166 ms, README)
    assert float(one["latency_s"].iloc[0]) == pytest.approx(0.178e-3, rel=0.02)


def test_b200_gemm_rates_are_physical(new_tables: dict[str, pd.DataFrame]) -> None:
    """ms -> s and the shapes are right: a bf16 4096^3 GEMM runs at 50-100% of B200's bf16 peak,
    a bf16 GEMV (m=1, n=k=8192) streams its weights at 50-100% of the 7.7 TB/s HBM, and nvfp4's
    best rate passes the fp8 peak (only fp4 tensor cores can) without passing fp4's."""
    spec = get_gpu("b200_sxm")
    for engine in B200_ENGINES:
        gemm = _rows(new_tables, "gemm", "b200_sxm", engine)
        bf16 = gemm[gemm["dtype"] == "bfloat16"]
        cube = bf16[(bf16[["m", "n", "k"]] == 4096).all(axis=1)]
        rate = 2.0 * 4096**3 / cube["latency_s"].min()
        assert 0.5 < rate / spec.peak_bf16_flops_per_s < 1.0, engine
        gemv = bf16[(bf16["m"] == 1) & (bf16["n"] == 8192) & (bf16["k"] == 8192)]
        bw = 8192 * 8192 * 2 / gemv["latency_s"].min()
        assert 0.5 < bw / spec.hbm_bw_bytes_per_s < 1.0, engine
        fp4 = gemm[gemm["dtype"] == "nvfp4"]
        best = (2.0 * fp4["m"] * fp4["n"] * fp4["k"] / fp4["latency_s"]).max()
        assert spec.peak_fp8_flops_per_s < best < spec.peak_fp4_flops_per_s, engine


def test_b200_allreduce_bandwidth_is_nvlink5(new_tables: dict[str, pd.DataFrame]) -> None:
    """message_size counts elements: elements x bytes per element over the time gives NVLink 5's
    rate on two GPUs (up to 900 GB/s per direction), never above it."""
    ar = new_tables["allreduce"]
    b200 = ar[(ar["gpu"] == "b200_sxm") & (ar["n_gpus"] == 2)]
    algbw = (b200["message_bytes"] / b200["latency_s"]).groupby(b200["engine"]).max()
    assert set(algbw.index) == {"nccl", "vllm", "trtllm", "sglang"}
    nvlink = get_gpu("b200_sxm").nvlink_bw_bytes_per_s
    assert ((algbw > 0.4 * nvlink) & (algbw < nvlink)).all(), algbw.to_dict()


def test_b200_is_in_the_registry_with_fp4() -> None:
    b200, h100 = get_gpu("b200_sxm"), get_gpu("h100_sxm")
    assert b200.peak_flops_per_s("nvfp4") == pytest.approx(9.0e15)
    assert b200.peak_flops_per_s("fp8") == pytest.approx(4.5e15)
    assert b200.peak_flops_per_s("bfloat16") == pytest.approx(2.25e15)
    assert idle_within_board(b200.idle_power_w, b200.board_power_w)
    # no fp4 tensor cores before Blackwell: fp4 is priced at the fp8 rate
    assert h100.peak_fp4_flops_per_s is None
    assert h100.peak_flops_per_s("nvfp4") == h100.peak_fp8_flops_per_s


def idle_within_board(idle_w: float, board_w: float) -> bool:
    return bool(np.isfinite(idle_w) and 0 < idle_w < 0.2 * board_w)


def test_sglang_is_an_engine_value() -> None:
    """`engine: sglang` passes the field table's check (the one list of engines); a typo is a
    located error naming the choices."""
    from dse.spec import fields

    assert fields.check("engine", "sglang") == "sglang"
    with pytest.raises(Exception, match="sglang"):
        fields.check("engine", "sglan", "space.yaml:3")


def test_b200_nvfp4_table_in_seconds_is_a_located_error(tmp_path: Path) -> None:
    """An nvfp4 GEMM table whose latency came in seconds instead of ms (read 1000x too fast:
    4.4 EFLOP/s, far above 1.3x B200's 9 PFLOP/s fp4 peak) names the file and the rate rule."""
    rel = f"{SYSTEMS}/b200_sxm/gemm/sglang/0.5.14/gemm_perf.parquet"
    (tmp_path / rel).parent.mkdir(parents=True)
    n = 20
    pd.DataFrame(
        {
            "gemm_dtype": ["nvfp4"] * n,
            "m": [8192] * n,
            "n": [8192] * n,
            "k": [8192] * n,
            "latency": [0.25e-3] * n,  # 0.25 ms written in seconds
        }
    ).to_parquet(tmp_path / rel)
    with pytest.raises(DataError) as err:
        data.read_aiconfigurator(tmp_path)
    assert rel in str(err.value) and "FLOP/s" in str(err.value)


def test_nvfp4_gemm_reads_4_5_bits_per_element() -> None:
    """An nvfp4 GEMM's operands are 4-bit values plus one fp8 scale per 16 elements: 4.5 bits
    (0.5625 bytes) per element of x and W; its roofline runs at B200's fp4 peak."""
    from dse.models.gemm import canonical_dtype, gemm_work

    assert canonical_dtype("fp4") == "nvfp4"
    flops, b_in, b_out = gemm_work(16, 4096, 8192, "nvfp4")
    assert float(flops) == 2.0 * 16 * 4096 * 8192
    assert float(b_in) == pytest.approx((16 * 8192 + 4096 * 8192) * 4.5 / 8)
    assert float(b_out) == 16 * 4096 * 2.0  # bf16 output
    _, bf16_in, _ = gemm_work(16, 4096, 8192, "bfloat16")
    assert float(b_in) / float(bf16_in) == pytest.approx(4.5 / 16)
