"""The shipped H200 GEMM model against our own H200 measurements (benchmarks/measurements/).

These rows were measured on a lent H200 at shapes no fit saw (docs/blind_h200.md) and are never
fitted on. Run-to-run noise on that machine is 5.6% MAPE; the shipped model reached 5.4-7.6%.
The bounds below are loose enough for refits and tight enough that a broken GEMM model (a wrong
unit, a lost residual table, the roofline alone at ~45%) fails.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from benchmark_scripts import load_benchmark

ROOT = Path(__file__).resolve().parents[2]
AIC = ROOT / "benchmarks" / "measurements" / "h200_gemm_bf16_aic_2026-11-29.csv"


def _bench():
    return load_benchmark("gemm_blind_h200")


@pytest.fixture(scope="module")
def blind() -> dict:
    return _bench().evaluate(AIC, "h200_sxm", None)


def test_blind_rows_cover_the_three_sets(blind: dict) -> None:
    sets = {r["set"]: r["rows"] for r in blind["sets"]}
    assert sets == {"in_share": 50, "off_lattice": 680, "withheld": 120}
    assert blind["protocol"] == "aic"


@pytest.mark.parametrize("name", ["off_lattice", "withheld"])
def test_unseen_shapes_predicted_near_measurement_noise(blind: dict, name: str) -> None:
    row = next(r for r in blind["sets"] if r["set"] == name)
    assert row["latency_mape_pct"] < 12.0
    assert abs(row["bias_pct"]) < 8.0


def test_unseen_shapes_no_worse_than_seen_by_much(blind: dict) -> None:
    by = {r["set"]: r["latency_mape_pct"] for r in blind["sets"]}
    assert by["withheld"] < 2.0 * by["in_share"]
