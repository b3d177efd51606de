"""Measured-data readers: the table contract, unit checks and README sanity figures."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dse import data
from dse.errors import DataError
from dse.hardware import gpu_names

AIC_GEMM = "aiconfigurator/aic-core/src/aiconfigurator_core/systems/data/{gpu}/gemm/{engine}/{ver}"


@pytest.fixture(scope="module")
def tables(data_dir: Path) -> dict[str, pd.DataFrame]:
    return data.load(data_dir)


def test_every_table_has_the_common_columns(tables: dict[str, pd.DataFrame]) -> None:
    for kind, df in tables.items():
        assert len(df) > 0, kind
        assert list(df.columns[: len(data.COMMON_COLUMNS)]) == list(data.COMMON_COLUMNS), kind
        assert (df["kind"] == kind).all()
        lat = df["latency_s"].to_numpy()
        assert np.isfinite(lat).all() and (lat > 0).all(), kind


def test_aiconfigurator_kinds_present(tables: dict[str, pd.DataFrame]) -> None:
    for kind in ("gemm", "context_attention", "generation_attention", "moe", "allreduce"):
        df = tables[kind]
        got = df[df["source"] == "aiconfigurator"]
        assert {"h100_sxm", "h200_sxm", "a100_sxm"} <= set(got["gpu"]), kind


def _gemm_latency_ms(tables, gpu: str, engine: str, m: int, n: int, k: int) -> float:
    g = tables["gemm"]
    row = g[
        (g["source"] == "aiconfigurator")
        & (g["gpu"] == gpu)
        & (g["engine"] == engine)
        & (g["dtype"] == "bfloat16")
        & (g["m"] == m)
        & (g["n"] == n)
        & (g["k"] == k)
    ]
    assert len(row) == 1
    return float(row["latency_s"].iloc[0]) * 1e3


def test_readme_gemm_sanity_figures(tables: dict[str, pd.DataFrame]) -> None:
    # README: H100 bf16 GEMM 4096^3 = 0.166 ms (~828 TFLOP/s); m=1, n=k=8192 = 0.052 ms.
    big = _gemm_latency_ms(tables, "h100_sxm", "vllm", 4096, 4096, 4096)
    assert big == pytest.approx(0.166, rel=0.01)
    assert 2 * 4096**3 / (big / 1e3) == pytest.approx(828e12, rel=0.01)
    gemv = _gemm_latency_ms(tables, "h100_sxm", "vllm", 1, 8192, 8192)
    assert gemv == pytest.approx(0.052, rel=0.02)
    # weights dominate the bytes: 8192^2 x 2 bytes / 0.052 ms ~ 2.6 TB/s
    assert 8192 * 8192 * 2 / (gemv / 1e3) == pytest.approx(2.6e12, rel=0.03)


def test_h200_energy_is_latency_times_power(tables: dict[str, pd.DataFrame]) -> None:
    for kind in ("gemm", "context_attention", "generation_attention", "moe"):
        df = tables[kind]
        h200 = df[(df["source"] == "aiconfigurator") & (df["gpu"] == "h200_sxm")]
        assert len(h200) > 0
        assert h200["power_w"].between(50, 800).all()
        np.testing.assert_allclose(h200["energy_j"], h200["latency_s"] * h200["power_w"])
        other = df[(df["source"] == "aiconfigurator") & (df["gpu"] != "h200_sxm")]
        assert other["power_w"].isna().all() and other["energy_j"].isna().all()


def test_main_gpus_use_registry_names(tables: dict[str, pd.DataFrame]) -> None:
    registry = set(gpu_names())
    g = tables["gemm"]
    assert set(g.loc[g["source"] == "aiconfigurator", "gpu"]) <= registry


def test_generation_attention_kv_len_is_the_step_column(tables: dict[str, pd.DataFrame]) -> None:
    ga = tables["generation_attention"]
    assert (ga["isl"] == 1).all()
    # steps were collected as 2^j - 1 cached tokens
    assert {1, 3, 127, 131071} <= set(ga["kv_len"])


def _copy_one(src_root: Path, dst_root: Path, rel: str) -> Path:
    dst = dst_root / rel
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src_root / rel, dst)
    return dst


def test_subset_folder_reads_only_what_is_there(data_dir: Path, tmp_path: Path) -> None:
    rel = AIC_GEMM.format(gpu="h100_sxm", engine="vllm", ver="0.24.0") + "/gemm_perf.parquet"
    _copy_one(data_dir, tmp_path, rel)
    got = data.load(tmp_path)
    assert list(got) == ["gemm"]
    assert set(got["gemm"]["file"]) == {rel}
    assert data.read_aiconfigurator(tmp_path / "nothing-here") == {}


def _write_gemm(tmp_path: Path, frame: pd.DataFrame) -> str:
    rel = AIC_GEMM.format(gpu="h100_sxm", engine="vllm", ver="9.9") + "/gemm_perf.parquet"
    path = tmp_path / rel
    path.parent.mkdir(parents=True)
    frame.to_parquet(path)
    return rel


def _gemm_frame(latency_ms: list[float]) -> pd.DataFrame:
    n = len(latency_ms)
    return pd.DataFrame(
        {
            "gemm_dtype": ["bfloat16"] * n,
            "m": [4096] * n,
            "n": [4096] * n,
            "k": [4096] * n,
            "latency": latency_ms,
        }
    )


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (_gemm_frame([0.166]).drop(columns="latency"), "missing column(s) latency"),
        (_gemm_frame([-0.166]), "latency must be a finite number > 0"),
        (_gemm_frame([float("nan")]), "latency must be a finite number > 0"),
        (_gemm_frame([0.166]).astype({"latency": str}).replace("0.166", "fast"), "cannot parse"),
        (_gemm_frame([166.0]), "wrong units"),  # microseconds written as milliseconds
        (_gemm_frame([0.000166]), "wrong units"),  # seconds written as milliseconds
    ],
)
def test_malformed_aiconfigurator_file_names_file_and_problem(
    tmp_path: Path, frame: pd.DataFrame, message: str
) -> None:
    rel = _write_gemm(tmp_path, frame)
    with pytest.raises(DataError) as err:
        data.load(tmp_path)
    assert rel in str(err.value)
    assert message in str(err.value)


def test_unreadable_parquet_is_a_data_error(tmp_path: Path) -> None:
    rel = AIC_GEMM.format(gpu="h200_sxm", engine="vllm", ver="0.1") + "/gemm_perf.parquet"
    (tmp_path / rel).parent.mkdir(parents=True)
    (tmp_path / rel).write_text("not parquet")
    with pytest.raises(DataError, match="cannot read parquet"):
        data.load(tmp_path)


def test_unknown_kind_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="unknown data kind"):
        data.load(tmp_path, kinds=["gemm", "nope"])
