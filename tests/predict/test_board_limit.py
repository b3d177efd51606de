"""Predicted kernel power never exceeds the GPU's board limit (issue 19): the fitted power
models are unbounded (H200 MoE and GEMM rows of the golden set came out at up to 1.61x /
1.29x the 700 W limit before the limit), so the pricer holds every operator's watts under it,
and `dse validate` scores kernel energies the same way."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from dse.predict import load_artifact
from dse.predict.request import base_costs
from dse.roofline import board_limited_w
from dse.spec.columns import as_columns
from dse.spec.hardware import get_gpu

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_golden_predictions import golden_configs


def test_board_limited_w_caps_only_above_the_limit() -> None:
    gpu = get_gpu("h200_sxm")
    p = np.array([10.0, 300.0, 700.0, 1130.0])
    assert np.array_equal(board_limited_w(gpu, p), [10.0, 300.0, 700.0, 700.0])


def test_no_operator_of_the_golden_configurations_runs_above_the_board_limit() -> None:
    cols = golden_configs()
    gpus = np.asarray(cols["gpu"])
    sel = gpus == "h200_sxm"  # the chip whose fitted power models overshoot the most
    part, n = as_columns({k: (np.asarray(v)[sel] if np.ndim(v) else v) for k, v in cols.items()})
    gpu = get_gpu("h200_sxm")
    artifact, fitted_for = load_artifact("h200_sxm")
    assert artifact is not None and fitted_for == "h200_sxm"
    cost = base_costs(part, n, gpu, artifact)
    checked = 0
    for phase in (cost.prefill, cost.decode):
        for name, seconds in phase.items_s.items():
            joules = phase.items_j[name]
            ran = np.asarray(seconds) > 0
            watts = np.asarray(joules)[ran] / np.asarray(seconds)[ran]
            checked += ran.sum()
            assert (watts <= gpu.board_power_w * (1 + 1e-9)).all(), (name, watts.max())
    assert checked > 10_000  # the check saw the MoE and GEMM operators that used to overshoot
