"""The shipped Level-3 power calibration (dse.models.level3_power.Power3 of every artifact) keeps
the physics over a grid far wider than its fitted range: calibrated per-GPU power between idle
and the board limit, never falling as the modelled power rises, for independent sequences and
copies of one sequence alike (issue 33)."""

from __future__ import annotations

import numpy as np
import pytest

from dse.models.level3_power import Power3
from dse.predict import load_artifact
from dse.spec.hardware import get_gpu

GPUS = ("h100_sxm", "a100_sxm", "h200_sxm", "gh200")


def _shipped(gpu: str) -> Power3:
    art, _ = load_artifact(gpu)
    if art is None or not art.has("level3.power"):
        pytest.skip(f"no shipped {gpu} artifact with a power calibration")
    return art.model("level3.power")


@pytest.mark.parametrize("gpu_name", GPUS)
def test_shipped_calibration_stays_between_idle_and_board_and_rises_with_the_model(
    gpu_name: str,
) -> None:
    """41 modelled powers (0 to 1.5x the board limit) x batch 1-4096, both protocols."""
    pw = _shipped(gpu_name)
    gpu = get_gpu(gpu_name)
    p, b = np.meshgrid(
        np.linspace(0.0, 1.5 * gpu.board_power_w, 41), 2.0 ** np.arange(0, 13), indexing="ij"
    )
    for identical in (False, True):
        out = pw.power_w(p, b, gpu, identical=identical)
        assert np.all(out >= gpu.idle_power_w) and np.all(out <= gpu.board_power_w)
        assert np.all(np.diff(out, axis=0) >= 0.0)  # never falls as the modelled power rises
        back = pw.as_identical(out, b, gpu)
        assert np.all(back >= gpu.idle_power_w) and np.all(back <= gpu.board_power_w)
    assert float(pw.coef_[1]) > 0.0  # a calibration (or IDENTITY), not batch size alone


def test_any_coefficients_keep_the_physics() -> None:
    """The clip holds whatever a fit returns: extreme coefficients and terms stay inside."""
    gpu = get_gpu("h100_sxm")
    p, b = np.meshgrid(np.linspace(0.0, 1050.0, 41), 2.0 ** np.arange(0, 13), indexing="ij")
    for coef, protocol in (([5.0, 3.0, 4.0], 2.0), ([-5.0, 0.1, -4.0], 0.0)):
        pw = Power3()
        pw.coef_, pw.protocol_ = np.array(coef), protocol
        out = pw.power_w(p, b, gpu)
        assert np.all(out >= gpu.idle_power_w) and np.all(out <= gpu.board_power_w)
