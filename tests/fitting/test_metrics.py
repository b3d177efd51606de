"""dse.metrics: the one MAPE and its two row filters (issue 36)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dse.metrics import ape_pct, mape_pct, reported, scored


def test_hand_worked_mape() -> None:
    assert ape_pct([110.0, 90.0], [100.0, 100.0]) == pytest.approx([10.0, 10.0])
    assert mape_pct([110.0, 80.0], [100.0, 100.0]) == pytest.approx(15.0)


# rows: fine, negative measurement, zero measurement, NaN prediction, NaN measurement
PRED = np.array([1.0, 2.0, 3.0, np.nan, 5.0])
TRUE = np.array([2.0, -1.0, 0.0, 1.0, np.nan])


def test_finite_keeps_every_row_whose_error_is_a_number() -> None:
    assert scored(PRED, TRUE).tolist() == [True, True, False, False, False]
    # |1/2 - 1| = 50%, |2/-1 - 1| = 300%
    assert mape_pct(PRED, TRUE) == pytest.approx((50.0 + 300.0) / 2)


def test_positive_keeps_only_positive_measurements() -> None:
    assert scored(PRED, TRUE, keep="positive").tolist() == [True, False, False, False, False]
    assert mape_pct(PRED, TRUE, keep="positive") == pytest.approx(50.0)


def test_the_filters_agree_on_positive_measurements() -> None:
    rng = np.random.default_rng(0)
    true = rng.lognormal(0.0, 2.0, 200)
    pred = true * rng.lognormal(0.0, 0.3, 200)
    pred[::7] = np.nan
    assert mape_pct(pred, true) == pytest.approx(mape_pct(pred, true, keep="positive"), rel=1e-12)


def test_no_scored_row_is_nan_and_reported_as_none() -> None:
    assert math.isnan(mape_pct([np.nan], [1.0]))
    assert math.isnan(mape_pct([], []))
    assert reported(mape_pct([1.0], [0.0], keep="positive")) is None
    assert reported(12.34567) == 12.346
    assert reported(12.34567, 2) == 12.35


def test_unknown_filter_is_an_error() -> None:
    with pytest.raises(ValueError, match="keep must be one of finite, positive, got 'all'"):
        mape_pct([1.0], [1.0], keep="all")  # type: ignore[arg-type]
