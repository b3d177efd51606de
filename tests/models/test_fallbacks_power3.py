"""Power3.as_identical: the independent-sequence term is taken out before the clip to the
board power when the uncalibrated power is known, and exactly below the clip without it."""

from __future__ import annotations

import numpy as np

from dse.models.level3_power import Power3, protocol_x
from dse.spec.hardware import get_gpu


def _power3(protocol: float) -> Power3:
    pw = Power3()
    pw.coef_ = np.array([0.0, 1.0, 0.0])  # calibrated = uncalibrated, plus the term
    pw.protocol_ = protocol
    return pw


def test_below_the_board_power_both_ways_agree_with_identical_power() -> None:
    gpu = get_gpu("h100_sxm")
    pw = _power3(0.2)
    batch = np.array([1.0, 16.0, 64.0])
    p_model = np.full(3, 350.0)  # mid-span: no clip
    ind = pw.power_w(p_model, batch, gpu)
    ide = pw.power_w(p_model, batch, gpu, identical=True)
    np.testing.assert_allclose(pw.as_identical(ind, batch, gpu), ide)
    np.testing.assert_allclose(pw.as_identical(ind, batch, gpu, p_model_w=p_model), ide)


def test_at_the_board_power_clip_the_term_comes_out_before_the_clip() -> None:
    """A kernel mix modelled at 680 W on a 700 W board (H100: 70 W idle): independent
    sequences at batch 64 would draw 680 W + the 126 W term, clipped to 700 W; copies of one
    sequence draw 680 W, not 700 W minus the whole term (574 W): the clip ate 106 W of it."""
    gpu = get_gpu("h100_sxm")
    span = gpu.board_power_w - gpu.idle_power_w
    pw = _power3(0.2)
    batch = np.array([64.0])
    p_model = np.array([680.0])
    ind = pw.power_w(p_model, batch, gpu)
    assert ind[0] == gpu.board_power_w  # clipped
    exact = pw.as_identical(ind, batch, gpu, p_model_w=p_model)
    np.testing.assert_allclose(exact, pw.power_w(p_model, batch, gpu, identical=True))
    np.testing.assert_allclose(exact, 680.0)
    lower = pw.as_identical(ind, batch, gpu)  # from the clipped power alone
    np.testing.assert_allclose(lower, gpu.board_power_w - 0.2 * protocol_x(batch) * span)
    assert lower[0] < exact[0]
