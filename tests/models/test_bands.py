"""Kernel bands (issue 19): a band holds its prediction, widens outside the range by the rule of
every band, coverage is counted right, and the nested protocol that measures it never lets the
scored layout near its own band (no fit, residual or quantile of it)."""

from __future__ import annotations

import numpy as np
import pytest

from dse.fitting import bands
from dse.fitting.cv import (
    held_out_predict,
    leave_one_group_out,
    seeded_group_folds,
)
from dse.models.band import BAND_QUANTILES, OOR_BAND_WIDEN, Band, log_residuals, widen


# ---------------------------------------------------------------------------- the band
@pytest.mark.parametrize("shift", [-0.5, 0.0, 0.3])
def test_band_contains_its_prediction(shift: float) -> None:
    """Residuals all one sign (a biased model) still give a band around the prediction."""
    rng = np.random.default_rng(0)
    band = Band.from_residuals(shift + 0.05 * rng.standard_normal(500))
    assert band is not None and band.log_lo <= 0.0 <= band.log_hi
    pred = np.array([1e-6, 3e-4, 2.0])
    for degree in (0.0, 0.2, 5.0):
        lo, hi = band.bounds(pred, degree)
        assert np.all(lo <= pred) and np.all(pred <= hi)


def test_band_is_the_held_out_quantiles() -> None:
    r = np.linspace(-0.2, 0.3, 1001)
    band = Band.from_residuals(r)
    assert band.log_lo == pytest.approx(np.quantile(r, BAND_QUANTILES[0]))
    assert band.log_hi == pytest.approx(np.quantile(r, BAND_QUANTILES[1]))
    assert Band.from_residuals(r[:5]) is None  # too few held-out rows: no band
    assert Band.from_entry(band.to_entry()) == band


def test_band_widens_outside_the_range_as_every_band() -> None:
    """Half-widths x1 inside, x OOR_BAND_WIDEN from a factor 2 outside on (Level 3's rule)."""
    band = Band(-0.1, 0.2)
    lo, hi = band.bounds(np.ones(4), np.array([0.0, np.log(2) / 2, np.log(2), 3.0]))
    assert np.log(hi) == pytest.approx([0.2, 0.3, 0.2 * OOR_BAND_WIDEN, 0.2 * OOR_BAND_WIDEN])
    assert np.log(lo) == pytest.approx([-0.1, -0.15, -0.1 * OOR_BAND_WIDEN, -0.1 * OOR_BAND_WIDEN])
    assert widen(0.0) == 1.0


# ---------------------------------------------------------------------------- coverage
def test_coverage_of_known_quantiles() -> None:
    """Residuals -0.99 .. 1.00 in steps of 0.01 against the band [-0.505, 0.255]: 76 of 200
    rows lie inside (-0.50 .. 0.25); widening a row's band doubles it."""
    r = np.arange(-99, 101) / 100.0
    pred = np.full(len(r), 2e-3)
    y = pred * np.exp(r)
    lo, hi = np.full(len(r), -0.505), np.full(len(r), 0.255)
    got = bands.coverage_summary(y, pred, lo, hi)
    assert got["rows"] == 200 and got["coverage"] == pytest.approx(76 / 200)
    assert got["below"] == pytest.approx(49 / 200) and got["above"] == pytest.approx(75 / 200)
    # the rows above 0.25 are outside the fitted range by a factor 2: band [-1.01, 0.51] there
    degree = np.where(r > 0.25, np.log(2.0), 0.0)
    got = bands.coverage_summary(y, pred, lo, hi, degree)
    assert got["rows_out_of_range"] == 75
    assert got["coverage"] == pytest.approx((76 + 26) / 200)  # 0.26 .. 0.51 join the band
    assert got["coverage_unwidened"] == pytest.approx(76 / 200)
    assert got["coverage_in_range"] == pytest.approx(76 / 125)  # -0.99 .. 0.25 in range
    assert got["coverage_out_of_range"] == pytest.approx(26 / 75)
    strata = {"dtype": np.where(np.arange(200) < 100, "bf16", "fp8")}
    got = bands.coverage_summary(y, pred, lo, hi, None, strata)
    assert got["by"]["dtype"]["bf16"] == {"rows": 100, "coverage": pytest.approx(51 / 100)}
    assert got["by"]["dtype"]["fp8"] == {"rows": 100, "coverage": pytest.approx(25 / 100)}


# ---------------------------------------------------------------------------- the protocol
def _table(y: np.ndarray, groups: np.ndarray, fp, folds=leave_one_group_out) -> bands.BandTable:
    return bands.BandTable("t", y, groups, folds, fp, "test scheme")


def test_nested_never_uses_the_scored_groups_residuals() -> None:
    """Four groups a model prices exactly, a fifth it misses by x7.4 (log residual 2).
    Honestly, the fifth group's band comes from the other four: it covers none of its rows,
    while every other group's band holds the fifth's residuals and covers all of its own: 80%.
    Quantiles that leaked the scored group's own residuals would cover every row (100%)."""
    groups = np.repeat(np.arange(5), 20)
    r = np.where(groups == 4, 2.0, 0.0)
    y = np.exp(r)

    def fp(train: np.ndarray, test: np.ndarray) -> dict[str, np.ndarray]:
        return {"latency_s": np.ones(len(test))}  # the residuals do not depend on the fit

    got = bands.nested_coverage(_table(y, groups, fp))
    assert got["coverage"] == pytest.approx(0.8)
    assert got["above"] == pytest.approx(0.2)  # exactly the fifth group's rows
    assert got["cross_fold"]["coverage"] == pytest.approx(0.8)  # no own residual there either
    # what leaking would give: the quantiles of every row, the scored group's included
    leaky = Band.from_residuals(log_residuals(y, np.ones(len(y))))
    lo, hi = np.full(len(y), leaky.log_lo), np.full(len(y), leaky.log_hi)
    assert bands.coverage_summary(y, np.ones(len(y)), lo, hi)["coverage"] == pytest.approx(1.0)


def _reference_nested_logo(y: np.ndarray, groups: np.ndarray, model) -> float:
    """Nested leave-one-group-out written out plainly: outer prediction from a fit without the
    scored group g; its band from residuals of fits without g and the residual's own group."""
    hits = []
    labels = np.unique(groups)
    for g in labels:
        te = groups == g
        pred = model(~te)
        res = []
        for h in labels[labels != g]:
            res.append(np.log(y[groups == h] / model(~te & (groups != h))))
        band = Band.from_residuals(np.concatenate(res))
        r = np.log(y[te] / pred)
        hits.append((r >= band.log_lo) & (r <= band.log_hi))
    return float(np.mean(np.concatenate(hits)))


def test_nested_fits_never_see_the_scored_group() -> None:
    """A model that predicts the geometric mean of its training rows: the inner fits of the
    scored group must be fitted without it. The protocol matches a plain nested loop, and an
    inner CV fitted WITH the scored group (leaking its rows) gives another answer."""
    rng = np.random.default_rng(2)
    groups = np.repeat(np.arange(6), 15)
    y = np.exp(0.3 * groups + 0.1 * rng.standard_normal(len(groups)))  # groups differ

    def model(train_mask: np.ndarray) -> float:
        return float(np.exp(np.mean(np.log(y[train_mask]))))

    seen: list[tuple[set, set]] = []

    def fp(train: np.ndarray, test: np.ndarray) -> dict[str, np.ndarray]:
        mask = np.zeros(len(y), dtype=bool)
        mask[train] = True
        seen.append((set(groups[train]), set(groups[test])))
        return {"latency_s": np.full(len(test), model(mask))}

    got = bands.nested_coverage(_table(y, groups, fp))
    assert got["coverage"] == pytest.approx(_reference_nested_logo(y, groups, model))
    assert all(not (tr & te) for tr, te in seen)  # no fit ever predicted a group it fitted
    assert got["fits"] == 6 + 15  # the outer fits, then each pair of groups left out once
    # leaking: inner residuals of fits that kept the scored group (plain LOGO residuals)
    oof = np.array([model(groups != g) for g in groups])
    r = np.log(y / oof)
    leak = []
    for g in np.unique(groups):
        band = Band.from_residuals(r[groups != g])
        leak.append((r[groups == g] >= band.log_lo) & (r[groups == g] <= band.log_hi))
    assert float(np.mean(np.concatenate(leak))) != pytest.approx(got["coverage"])


def test_cached_cv_equals_the_plain_one() -> None:
    """Sharing fits between folds (the nested protocol's cache) changes no prediction."""
    rng = np.random.default_rng(3)
    groups = rng.integers(0, 9, 200)
    y = np.exp(rng.standard_normal(200))

    def fp(train: np.ndarray, test: np.ndarray) -> dict[str, np.ndarray]:
        return {"latency_s": np.full(len(test), y[train].mean()) * (1 + test / 1e4)}

    rule = seeded_group_folds(3, 0)
    plain = held_out_predict(groups, rule, fp)["latency_s"]
    cached = held_out_predict(groups, rule, fp, cache={})["latency_s"]
    np.testing.assert_array_equal(plain, cached)
    among = groups != 4
    inner = held_out_predict(groups, rule, fp, among=among)["latency_s"]
    assert np.isnan(inner[~among]).all() and np.isfinite(inner[among]).all()


def test_calibrate_is_the_cv_residuals_band() -> None:
    rng = np.random.default_rng(4)
    groups = np.repeat(np.arange(8), 10)
    y = np.exp(rng.standard_normal(80) * 0.1)

    def fp(train: np.ndarray, test: np.ndarray) -> dict[str, np.ndarray]:
        return {"latency_s": np.full(len(test), np.exp(np.log(y[train]).mean()))}

    table = _table(y, groups, fp)
    oof = bands.held_out(table)
    band = bands.calibrate(table, oof)
    assert band == Band.from_residuals(log_residuals(y, oof["latency_s"]), scheme="test scheme")
    measured = bands.calibrate(table, nested=True)
    assert measured == band and measured.held_out["rows"] == 80
    assert measured.held_out_coverage() == measured.held_out["coverage"]
