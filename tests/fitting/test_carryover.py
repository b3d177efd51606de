"""Carry-over detection (issue 33 item 4): measured power rows that follow the previous row of
their file more than their own work are flagged and left out of the power fit, with a count per
table; kernel power predictions stay between idle and the board limit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dse.fitting.carryover import detect_carryover, own_work_log_power
from dse.fitting.power import drop_carryover
from dse.models.artifact import Artifact
from dse.models.power import PowerModel
from dse.spec.hardware import get_gpu


def _table(
    planted: bool, n: int = 3000, seed: int = 0
) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """A synthetic power table in file order: own power rises with the work x; where planted,
    every 10th row is a long ~690 W kernel and the 4 rows after it decay from it (each row keeps
    60% of the previous row's excess over its own level), as in the H200 MoE token sweeps."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, n)
    own = 150 + 450 * x  # W, the kernel's own work
    hot = np.arange(n) % 10 == 0
    own[hot] = 690.0
    p = own * np.exp(rng.normal(0, 0.03, n))  # 3% measurement noise
    decayed = np.zeros(n, dtype=bool)
    after_hot = np.isin(np.arange(n) % 10, (1, 2, 3, 4)) & planted
    if planted:
        for i in range(1, n):
            if (i % 10) in (1, 2, 3, 4):
                p[i] = own[i] + 0.6 * (p[i - 1] - own[i])
                decayed[i] = p[i] > own[i] * 1.2
    df = pd.DataFrame({"x": x, "hot": hot.astype(float), "power_w": p})
    return df, decayed, after_hot


@pytest.mark.slow
def test_detector_flags_a_planted_decay_and_nothing_on_a_clean_table() -> None:
    for planted in (True, False):
        df, decayed, after_hot = _table(planted)
        own = own_work_log_power(df[["x", "hot"]], df["power_w"].to_numpy())
        co = detect_carryover(np.log(df["power_w"].to_numpy()), own)
        if planted:
            assert co.lag_corr > 0.3
            # most rows lifted > 20% by the previous row are caught, almost no row without
            # a planted decay
            assert co.flags[decayed].mean() > 0.8, co.flags[decayed].mean()
            assert co.flags[~after_hot].mean() < 0.05, co.flags[~after_hot].mean()
        else:
            assert abs(co.lag_corr) < 0.1
            assert not co.flags.any(), co.flags.sum()


def test_detector_is_silent_when_own_work_explains_the_rows() -> None:
    lp = np.log(np.linspace(100, 600, 50))
    co = detect_carryover(lp, lp)
    assert not co.flags.any()


@pytest.mark.slow
def test_drop_carryover_counts_per_file() -> None:
    """The manifest's per-table record: rows, rows flagged (= dropped), rule, noise floor."""
    parts = []
    for i, planted in enumerate((True, False)):
        df, _, _ = _table(planted, n=2000, seed=i)
        parts.append(
            pd.DataFrame(
                {
                    "file": f"t{i}.parquet",
                    "dtype": "bfloat16",
                    "m": (df["x"] * 1000).round(),
                    "n": 1024 * (1 + df["hot"]),
                    "k": 4096,
                    "latency_s": 1e-4 * (1 + df["x"]),
                    "power_w": df["power_w"],
                }
            )
        )
    rows = pd.concat(parts, ignore_index=True)
    kept, summary = drop_carryover(rows)
    assert set(summary) == {"t0.parquet", "t1.parquet"}
    s0, s1 = summary["t0.parquet"], summary["t1.parquet"]
    assert s0["rows"] == s1["rows"] == 2000
    assert s0["rows_flagged"] > 100 and s1["rows_flagged"] == 0
    assert len(kept) == 4000 - s0["rows_flagged"]
    assert "previous row" in str(s0["rule"]) and 0 < float(s0["noise_floor_pct"]) < 20


def test_power_model_output_between_idle_and_board_on_a_wide_grid() -> None:
    """Fitted on targets outside [idle, board] (NVML transients, carry-over), the prediction
    still never leaves it, for any utilisation or duration."""
    rng = np.random.default_rng(1)
    n = 2000
    uc, um = rng.uniform(0, 1.2, n), rng.uniform(0, 1.2, n)
    lat = 10 ** rng.uniform(-6, -1, n)
    frac = 1.4 * np.maximum(uc, um) - 0.2  # -0.2 .. 1.5 of the span: below idle, above board
    df = pd.DataFrame(
        {
            "compute_util": uc,
            "memory_util": um,
            "latency_s": lat,
            "idle_power_w": 75.0,
            "board_power_w": 700.0,
            "power_w": 75.0 + 625.0 * frac,
        }
    )
    model = PowerModel(seed=0).fit(df)
    g = np.meshgrid(
        np.linspace(0, 3, 25), np.linspace(0, 3, 25), np.logspace(-8, 1, 19), indexing="ij"
    )
    for name in ("h200_sxm", "h100_sxm", "a100_sxm"):
        gpu = get_gpu(name)
        p = model.predict(*g, gpu=gpu)["power_w"]
        assert p.size == 25 * 25 * 19
        assert p.min() >= gpu.idle_power_w - 1e-9 and p.max() <= gpu.board_power_w + 1e-9
        assert p.max() > gpu.board_power_w - 1.0  # the cap binds: the fit wanted more


def test_h200_gemm_power_between_idle_and_board_on_a_wide_grid() -> None:
    """The measured-power residual of the H200 GEMM models no longer pushes a kernel outside
    [idle, board] (it reached 1.29x the board limit in the golden set, issue 19)."""
    art = Artifact.load("h200_sxm")
    gpu = get_gpu("h200_sxm")
    m, n, k = np.meshgrid(2.0 ** np.arange(0, 17), 2.0 ** np.arange(6, 17), 2.0 ** np.arange(6, 17))
    for name in ("gemm.vllm.bfloat16", "gemm.vllm.fp8_block"):
        p = art.model(name).predict(m=m, n=n, k=k)["power_w"]
        assert np.isfinite(p).all() and p.size == 17 * 11 * 11
        assert p.min() >= gpu.idle_power_w - 1e-9, (name, p.min())
        assert p.max() <= gpu.board_power_w + 1e-9, (name, p.max())


@pytest.mark.slow
def test_fit_power_family_records_the_count_in_the_manifest_entry() -> None:
    """`dse fit`'s power family drops the flagged rows and records them per file (manifest
    `models.power.carryover`)."""
    from dse.fitting.context import FitContext
    from dse.fitting.power import fit_power_family

    df, _, _ = _table(True, n=2000)
    m = np.round(2 ** (df["x"] * 12)).astype(int)
    rows = pd.DataFrame(
        {
            "source": "aiconfigurator",
            "gpu": "h200_sxm",
            "file": "h200_sxm/gemm/vllm/0.22.0/gemm_perf.parquet",
            "dtype": "bfloat16",
            "m": m,
            "n": np.where(df["hot"] > 0, 16384, 4096),
            "k": 4096,
            "latency_s": 2e-5 * (1 + m / 64),
            "power_w": df["power_w"],
        }
    )
    lines: list[str] = []
    ctx = FitContext(Path("unused"), "h200_sxm", cv=False, log=lines.append)
    ctx._tables["gemm"] = rows  # the loaded table, in file order
    (fitted,) = fit_power_family(ctx)
    rec = fitted.info["carryover"]["h200_sxm/gemm/vllm/0.22.0/gemm_perf.parquet"]
    assert rec["rows"] == 2000 and rec["rows_flagged"] > 100
    assert fitted.info["rows"] == 2000 - rec["rows_flagged"]
    assert any("follow the previous row's power" in line for line in lines)
