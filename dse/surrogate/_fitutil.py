"""Small numerical helpers shared by the Level-1 operator models (layer ops, all-reduce,
attention, MoE): piecewise-linear bases, relative-error least squares, grouped folds, ranges.

Everything here is plain numpy, deterministic, and works on arrays of any length.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from dse.errors import ArtifactError, DataError

if TYPE_CHECKING:
    import pandas as pd


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
    return np.searchsorted(mid, np.asarray(x, dtype=np.float64)).astype(np.int64)


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


def ape_pct(pred: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Absolute percentage error of each prediction (NaN where either side is not finite)."""
    pred = np.asarray(pred, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    return 100.0 * np.abs(pred / y - 1.0)


def mape_pct(pred: np.ndarray, y: np.ndarray) -> float:
    """Mean absolute percentage error over finite entries (NaN for none)."""
    e = ape_pct(pred, y)
    e = e[np.isfinite(e)]
    return float(e.mean()) if e.size else float("nan")


def group_folds(groups: np.ndarray, n_folds: int, seed: int = 0) -> list[np.ndarray]:
    """Split the unique group labels into `n_folds` seeded folds; returns the held-out row masks.

    Every row of a group lands in the same fold, so a fold's rows come from shapes the fit of the
    other folds never saw.
    """
    labels, inv = np.unique(np.asarray(groups), return_inverse=True)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(labels))
    fold_of = np.empty(len(labels), dtype=np.int64)
    fold_of[order] = np.arange(len(labels)) % max(1, min(n_folds, len(labels)))
    row_fold = fold_of[inv]
    return [row_fold == f for f in range(max(1, min(n_folds, len(labels))))]


def group_labels(df: pd.DataFrame, columns: Sequence[str]) -> np.ndarray:
    """One integer label per distinct combination of `columns` (the CV group of a row)."""
    return df.groupby(list(columns), sort=True, dropna=False).ngroup().to_numpy()


def fitted_range(arrays: Mapping[str, np.ndarray]) -> dict[str, tuple[float, float]]:
    """(min, max) of every numeric input array (what the artifact records as the fitted range)."""
    out: dict[str, tuple[float, float]] = {}
    for key, a in arrays.items():
        v = np.asarray(a, dtype=np.float64)
        v = v[np.isfinite(v)]
        if v.size:
            out[key] = (float(v.min()), float(v.max()))
    return out


def range_to_state(rng: Mapping[str, tuple[float, float]], prefix: str = "range/") -> dict:
    """Fitted ranges as plain arrays: names in one string array, bounds in an (n, 2) array."""
    names = sorted(rng)
    return {
        f"{prefix}names": np.array(names, dtype=str),
        f"{prefix}bounds": np.array([rng[n] for n in names], dtype=np.float64).reshape(-1, 2),
    }


def range_from_state(state: Mapping[str, Any], prefix: str = "range/") -> dict:
    names = [str(n) for n in np.asarray(state[f"{prefix}names"]).ravel()]
    bounds = np.asarray(state[f"{prefix}bounds"], dtype=np.float64).reshape(-1, 2)
    return {n: (float(lo), float(hi)) for n, (lo, hi) in zip(names, bounds, strict=True)}


def as_float(name: str, value: Any, n: int | None = None) -> np.ndarray:
    """An input as a 1-d float array (scalars broadcast to n); NaN/inf is an error naming it."""
    a = np.asarray(value, dtype=np.float64)
    if a.ndim == 0 and n is not None:
        a = np.full(n, float(a))
    a = np.atleast_1d(a)
    if not np.all(np.isfinite(a)):
        raise DataError(f"input {name!r} must be finite numbers, got {a[~np.isfinite(a)][:3]}")
    return a


def batch_size_of(arrays: Mapping[str, Any]) -> int:
    """The common length of the array inputs (scalars count as length 1)."""
    sizes = {int(np.size(v)) for v in arrays.values() if np.ndim(v) > 0}
    if len(sizes) > 1:
        raise DataError(f"input arrays must have one length, got lengths {sorted(sizes)}")
    return sizes.pop() if sizes else 1


def need(state: Mapping[str, Any], keys: Iterable[str], what: str) -> None:
    """Raise ArtifactError naming the first missing array of a model's state."""
    for k in keys:
        if k not in state:
            raise ArtifactError(
                f"{what} state incomplete: array {k!r} missing; re-fit with dse fit"
            )


# ---------------------------------------------------------------------------- parallel fits
T = TypeVar("T")
_TASK_CTX: dict[str, Any] = {}
# BLAS / OpenMP thread counts of the worker processes (read when numpy / sklearn load there)
_WORKER_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _init_worker(ctx: Any) -> None:
    _TASK_CTX["ctx"] = ctx


def _run_task(item: tuple[Callable[..., Any], tuple[Any, ...]]) -> Any:
    fn, args = item
    try:
        return fn(_TASK_CTX["ctx"], *args)
    finally:
        sys.stdout.flush()  # the task's log line now, not when the worker exits


def map_tasks(ctx: Any, fn: Callable[..., T], tasks: Sequence[tuple[Any, ...]]) -> list[T]:
    """[fn(ctx, *task) for task in tasks], in `ctx.jobs` worker processes when that is above 1
    (`dse fit --jobs`). Results come back in task order; every task is seeded by itself (its
    fits take `ctx.seed`), so the results do not depend on the number of processes.

    Workers are spawned, not forked: a process forked after OpenMP or OpenBLAS started their
    thread pools (any earlier multi-threaded fit in the same process) can deadlock on a lock
    those threads held. Each worker gets `ctx` (with the tables already read) once, pickled,
    and runs one BLAS / OpenMP thread."""
    jobs = min(ctx.jobs, len(tasks))
    if jobs <= 1:
        return [fn(ctx, *t) for t in tasks]
    import multiprocessing as mp
    import os

    saved = {k: os.environ.get(k) for k in _WORKER_ENV}
    os.environ.update(_WORKER_ENV)  # inherited by the workers as they start
    try:
        with mp.get_context("spawn").Pool(jobs, _init_worker, (ctx,)) as pool:
            return pool.map(_run_task, [(fn, tuple(t)) for t in tasks], chunksize=1)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
