"""Hat-basis curves and penalised least squares: the piecewise-linear curves the all-reduce and
layer-op models fit and evaluate (numpy; scipy at fit time only).
"""

from __future__ import annotations

import numpy as np


def hat_basis(x: np.ndarray, knots: np.ndarray) -> np.ndarray:
    """Tent functions over `knots` (sorted, >= 2): row i interpolates x_i linearly between its two
    neighbouring knots; x outside [knots[0], knots[-1]] is clamped to the end knot.

    Shape (len(x), len(knots)); each row sums to 1, so `hat_basis(x, k) @ v` is the piecewise-linear
    function through (k, v), constant beyond the ends.
    """
    x = np.asarray(x, dtype=np.float64).ravel()
    k = np.asarray(knots, dtype=np.float64)
    xc = np.clip(x, k[0], k[-1])
    i = np.clip(np.searchsorted(k, xc, side="right") - 1, 0, len(k) - 2)
    f = (xc - k[i]) / (k[i + 1] - k[i])
    out = np.zeros((x.size, k.size))
    rows = np.arange(x.size)
    out[rows, i] = 1.0 - f
    out[rows, i + 1] += f
    return out


def hat_eval(x: np.ndarray, knots: np.ndarray, values: np.ndarray) -> np.ndarray:
    """`hat_basis(x, knots) @ values` without building the basis (fast path for prediction)."""
    return np.interp(np.asarray(x, dtype=np.float64), knots, values)


def nearest_knot(x: np.ndarray, knots: np.ndarray) -> np.ndarray:
    """Index of the knot nearest to each x (clamped): the "regime" an input falls in."""
    k = np.asarray(knots, dtype=np.float64)
    mid = 0.5 * (k[1:] + k[:-1])
    return mid.searchsorted(np.asarray(x, dtype=np.float64)).astype(np.int64)


def second_difference(n: int) -> np.ndarray:
    """(n-2, n) second-difference operator: the roughness penalty of a piecewise-linear curve."""
    if n < 3:
        return np.zeros((0, n))
    return np.diff(np.eye(n), 2, axis=0)


def relative_lstsq(
    X: np.ndarray,
    y: np.ndarray,
    penalty: np.ndarray | None = None,
    weight: np.ndarray | None = None,
    lower: np.ndarray | None = None,
) -> np.ndarray:
    """Coefficients c minimising sum(w * ((X c - y) / y)^2) + |penalty c|^2, optionally with
    c >= lower (-inf = free).

    Relative residuals make the fit minimise percentage error, which is what MAPE scores; the
    penalty rows (e.g. a scaled second difference) keep sparse knots smooth; the bounds keep
    physical terms (launch, per-wave, per-element costs) non-negative so the fit extrapolates
    sanely when two features are nearly collinear in the training rows.
    """
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    w = np.ones_like(y) if weight is None else np.sqrt(np.asarray(weight, dtype=np.float64))
    A = X * (w / y)[:, None]
    b = w.copy()
    if penalty is not None and len(penalty):
        A = np.vstack([A, penalty])
        b = np.concatenate([b, np.zeros(len(penalty))])
    coef, *_ = np.linalg.lstsq(A, b, rcond=None)
    if lower is None or np.all(coef >= np.asarray(lower) - 1e-12):
        return coef
    lo = np.asarray(lower, dtype=np.float64)
    if not lo.any():
        # every coefficient >= 0: non-negative least squares (Lawson-Hanson), the same minimum
        # several times faster than the bounded solver (the all-reduce fit refits every
        # held-out octave to choose its smoothing weight)
        from scipy.optimize import nnls  # fitting only; prediction never imports scipy

        return nnls(A, b, maxiter=50 * A.shape[1])[0]
    from scipy.optimize import lsq_linear

    return lsq_linear(A, b, bounds=(lo, np.inf), method="bvls").x
