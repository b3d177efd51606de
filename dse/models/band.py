"""The error band of a prediction: a pair of log factors from held-out log residuals (the 5% and
95% quantiles of log(measured / predicted) on rows whose layout the fit did not see: split-
conformal), widened outside the fitted range.

A prediction p with band (lo, hi) and range degree d (0 inside, |log(value / bound)| outside:
`dse.models.base.RangeMiss.degree`) lies in [p exp(lo w(d)), p exp(hi w(d))], where w grows
from 1 inside to OOR_BAND_WIDEN from a factor 2 outside on (`widen`). Level 3's end-to-end band
and every Level-1 / Level-2 kernel band follow this one rule.

    band = Band.from_residuals(np.log(y / oof_pred))   # at fit time, on held-out residuals
    lo, hi = band.bounds(pred, degree)                 # at prediction time, per row
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

BAND_QUANTILES = (0.05, 0.95)  # a nominal 90% band
OOR_BAND_WIDEN = 2.0  # band half-widths (log) are multiplied by this outside the fitted range
# A band needs held-out residuals of at least this many rows (fewer: no band, it says so).
MIN_BAND_ROWS = 20


def widen(degree: Any) -> np.ndarray:
    """The factor a band's log half-widths are multiplied by at range degree `degree`: 1 inside,
    rising linearly in the log distance to OOR_BAND_WIDEN at a factor 2 outside a bound, and
    OOR_BAND_WIDEN beyond."""
    d = np.asarray(degree, dtype=float)
    return 1.0 + (OOR_BAND_WIDEN - 1.0) * np.minimum(d / np.log(2.0), 1.0)


def degree_of(misses: Mapping[str, Any], n: int) -> np.ndarray:
    """Per row, the farthest distance outside the fitted range over the inputs of `misses`
    (input -> `dse.models.base.RangeMiss`, as `range_misses` returns them): 0 inside."""
    out = np.zeros(n)
    for miss in misses.values():
        out = np.maximum(out, np.broadcast_to(np.asarray(miss.degree, dtype=float), (n,)))
    return out


def log_residuals(y: Any, pred: Any) -> np.ndarray:
    """log(measured / predicted) per row; NaN where either side is not a positive number."""
    y, p = np.asarray(y, dtype=float), np.asarray(pred, dtype=float)
    ok = np.isfinite(y) & np.isfinite(p) & (y > 0) & (p > 0)
    out = np.full(y.shape, np.nan)
    out[ok] = np.log(y[ok] / p[ok])
    return out


def inside(y: Any, lo: Any, hi: Any) -> np.ndarray:
    """True where a measured value lies in [lo, hi] (False where any side is not finite)."""
    y, lo, hi = (np.asarray(v, dtype=float) for v in (y, lo, hi))
    with np.errstate(invalid="ignore"):
        return np.isfinite(y) & np.isfinite(lo) & np.isfinite(hi) & (y >= lo) & (y <= hi)


@dataclass(frozen=True)
class Band:
    """A kernel model's band: log factors `log_lo` <= 0 <= `log_hi` (the band always holds its
    own prediction), with where they came from. `held_out` is the coverage the band reached on
    layouts it was not calibrated on (the nested protocol of `dse.fitting.bands`; None: not
    measured)."""

    log_lo: float
    log_hi: float
    rows: int = 0
    scheme: str = ""
    held_out: Mapping[str, Any] | None = field(default=None, compare=False)

    @classmethod
    def from_residuals(cls, logres: Any, **kw: Any) -> Band | None:
        """The BAND_QUANTILES of finite log residuals, widened to hold 0 (a biased model's band
        still contains its prediction); None for fewer than MIN_BAND_ROWS residuals."""
        r = np.asarray(logres, dtype=float)
        r = r[np.isfinite(r)]
        if r.size < MIN_BAND_ROWS:
            return None
        lo, hi = np.quantile(r, BAND_QUANTILES)
        return cls(min(float(lo), 0.0), max(float(hi), 0.0), rows=int(r.size), **kw)

    def bounds(self, pred: Any, degree: Any = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """(lo, hi) around predictions `pred` at range degrees `degree` (broadcast)."""
        p = np.asarray(pred, dtype=float)
        w = widen(degree)
        return p * np.exp(self.log_lo * w), p * np.exp(self.log_hi * w)

    def held_out_coverage(self, strata: Mapping[str, Any] | None = None) -> float | None:
        """The held-out coverage measured for this band: of the stratum named in `strata`
        (e.g. {"dtype": "fp8"}, when the band's table mixes dtypes and that one was measured on
        its own), else of all its rows; None when not measured."""
        if not self.held_out:
            return None
        for col, value in (strata or {}).items():
            sub = (self.held_out.get("by") or {}).get(col, {}).get(str(value))
            if sub and sub.get("coverage") is not None:
                return float(sub["coverage"])
        cov = self.held_out.get("coverage")
        return None if cov is None else float(cov)

    def to_entry(self) -> dict[str, Any]:
        """The manifest entry (`models.<name>.band`): plain JSON."""
        return {
            "quantiles": list(BAND_QUANTILES),
            "log_lo": self.log_lo,
            "log_hi": self.log_hi,
            "factor_lo": float(np.exp(self.log_lo)),  # for the reader: x0.93 .. x1.08
            "factor_hi": float(np.exp(self.log_hi)),
            "rows": self.rows,
            "scheme": self.scheme,
            "held_out": None if self.held_out is None else dict(self.held_out),
        }

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any] | None) -> Band | None:
        """The band a manifest entry recorded (None for none, or one without quantiles)."""
        if not entry or entry.get("log_lo") is None or entry.get("log_hi") is None:
            return None
        return cls(
            float(entry["log_lo"]),
            float(entry["log_hi"]),
            rows=int(entry.get("rows") or 0),
            scheme=str(entry.get("scheme") or ""),
            held_out=entry.get("held_out"),
        )
