"""Errors of predictions against measurements, in percent: the package's one MAPE.

    mape_pct(pred, true)                     # rows whose error is a finite number
    mape_pct(pred, true, keep="positive")    # rows where both are finite and true > 0
    reported(mape_pct(...))                  # as manifests store it: 3 decimals, None for none

Which rows a mean counts is the one thing callers choose (`keep`); both rules drop NaN
predictions and measurements, so they differ only on measurements <= 0: "finite" scores a
negative measurement (|pred / true - 1| is still a number), "positive" does not.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

Keep = Literal["finite", "positive"]
KEEP: tuple[Keep, ...] = ("finite", "positive")


def ape_pct(pred: ArrayLike, true: ArrayLike) -> np.ndarray:
    """Absolute percentage error of each prediction, 100 |pred / true - 1| (NaN or inf where
    either side is not finite or true is 0)."""
    p = np.asarray(pred, dtype=np.float64)
    t = np.asarray(true, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return 100.0 * np.abs(p / t - 1.0)


def scored(pred: ArrayLike, true: ArrayLike, keep: Keep = "finite") -> np.ndarray:
    """The rows a MAPE averages under `keep` (a boolean mask)."""
    if keep == "finite":
        return np.isfinite(ape_pct(pred, true))
    if keep == "positive":
        p = np.asarray(pred, dtype=np.float64)
        t = np.asarray(true, dtype=np.float64)
        return np.isfinite(p) & np.isfinite(t) & (t > 0)
    raise ValueError(f"keep must be one of {', '.join(KEEP)}, got {keep!r}")


def mape_pct(pred: ArrayLike, true: ArrayLike, keep: Keep = "finite") -> float:
    """Mean absolute percentage error over the rows `keep` selects; NaN when none is."""
    e = ape_pct(pred, true)[scored(pred, true, keep)]
    return float(e.mean()) if e.size else float("nan")


def reported(value: float, ndigits: int = 3) -> float | None:
    """A metric as a manifest or report stores it: rounded, None (JSON null) for NaN."""
    return None if not np.isfinite(value) else round(float(value), ndigits)
