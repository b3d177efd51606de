"""Pareto maths on plain arrays: non-dominated filter, hypervolume, knee point, normalisation.

Every function takes an (n, m) array of objective values and returns arrays or floats; nothing
here knows about Optuna. Objectives are minimised unless `directions` says otherwise (a sequence
of "minimize" / "maximize", one per column, as Optuna spells them): maximised columns are
negated internally, and every result is in the caller's own values. The Study-facing helpers at
the bottom are one-line adapters. Rows holding NaN (an objective that could not be computed) are
never on a front.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, TypeAlias

import moocore
import numpy as np

# Reference point of the hypervolume, in normalised units (ideal -> 0, nadir -> 1): a point on
# the nadir still adds a sliver of volume, so the extremes of a front count.
REFERENCE_FACTOR = 1.1
DIRECTIONS = ("minimize", "maximize")

Directions: TypeAlias = Sequence[str] | None


def signs(directions: Directions, m: int) -> np.ndarray:
    """(m,) +1 for a minimised column, -1 for a maximised one (None: all minimised)."""
    if directions is None:
        return np.ones(m)
    d = list(directions)
    if len(d) != m:
        raise ValueError(f"directions must name {m} objectives, got {len(d)}: {d!r}")
    bad = [x for x in d if x not in DIRECTIONS]
    if bad:
        raise ValueError(f"directions must be 'minimize' or 'maximize', got {bad[0]!r}")
    return np.where(np.asarray(d) == "maximize", -1.0, 1.0)


def _signed(points: np.ndarray, directions: Directions) -> np.ndarray:
    """Points turned into an all-minimised problem (maximised columns negated)."""
    p = _points(points)
    return p if directions is None else p * signs(directions, p.shape[1])


class Normalisation(NamedTuple):
    """The ideal and nadir points that map objective values to [0, 1] (front-wise): 0 at the
    ideal and 1 at the nadir in every column, whichever its direction."""

    ideal: np.ndarray  # (m,), best value of each objective on the front (the caller's values)
    nadir: np.ndarray  # (m,), worst value of each objective on the front
    sign: np.ndarray | None = None  # (m,) -1 where maximised; None: all minimised

    def apply(self, points: np.ndarray) -> np.ndarray:
        s = np.ones(len(self.ideal)) if self.sign is None else np.asarray(self.sign, float)
        lo, hi = s * self.ideal, s * self.nadir
        span = np.where(hi > lo, hi - lo, 1.0)
        return (np.asarray(points, dtype=float) * s - lo) / span

    def as_dict(self) -> dict[str, list[float]]:
        return {"ideal": self.ideal.tolist(), "nadir": self.nadir.tolist()}


def _points(points: np.ndarray | Sequence[Sequence[float]]) -> np.ndarray:
    p = np.asarray(points, dtype=float)
    if p.ndim != 2:
        raise ValueError(f"points must be a 2-D array (n, m), got shape {p.shape}")
    return p


def nondominated(
    points: np.ndarray, *, keep_duplicates: bool = False, directions: Directions = None
) -> np.ndarray:
    """Boolean mask of the non-dominated rows (minimised, or as `directions` says).

    A row is dominated when another row is no worse in every objective and better in one.
    Identical rows do not dominate each other: with `keep_duplicates=False` only the first of
    each group of identical rows is kept, so a front holds one row per distinct point. Rows
    with a NaN or an infinity are never kept. moocore's dimension sweep: O(n log n) for two and
    three objectives (a million points in well under a second).
    """
    p = _signed(points, directions)
    mask = np.zeros(len(p), dtype=bool)
    ok = np.nonzero(np.isfinite(p).all(axis=1))[0]
    if len(ok) == 0:
        return mask
    q = p[ok]
    if q.shape[1] == 1:
        keep = q[:, 0] == q[:, 0].min()
        if not keep_duplicates:
            keep = np.arange(len(q)) == np.argmax(keep)
    else:
        rest = _not_dominated_by_pivot(q) if len(q) > PIVOT_MIN_ROWS else None
        if rest is None:
            keep = np.asarray(moocore.is_nondominated(q, keep_weakly=keep_duplicates), dtype=bool)
        else:
            keep = np.zeros(len(q), dtype=bool)
            keep[rest] = moocore.is_nondominated(q[rest], keep_weakly=keep_duplicates)
    mask[ok] = keep
    return mask


# Above this many points `nondominated` first drops those one of them dominates: a sweep's
# chunk of ~90,000 feasible points keeps 3-7, and ~93-99 % of them fall to one point (~1 ms
# against moocore's ~16 ms for them all on one core).
PIVOT_MIN_ROWS = 4096


def _not_dominated_by_pivot(q: np.ndarray) -> np.ndarray:
    """Indices of the rows of q (finite, minimised) that the pivot does not strictly dominate,
    ascending; the pivot is the row of least sum of objectives scaled to [0, 1] (a point of
    the front). A dropped row is dominated by a real row, so it is on no front, and the rows
    kept keep their order, so among identical ones the first stays first."""
    cols = [q[:, j] for j in range(q.shape[1])]  # whole columns: fast, unlike (n, m) reductions
    score = np.zeros(len(q))
    for c in cols:
        lo, hi = c.min(), c.max()
        score += (c - lo) / (hi - lo if hi > lo else 1.0)
    pivot = q[int(np.argmin(score))]
    no_better = np.ones(len(q), dtype=bool)
    worse = np.zeros(len(q), dtype=bool)
    for c, v in zip(cols, pivot, strict=True):
        no_better &= c >= v
        worse |= c > v
    return np.flatnonzero(~(no_better & worse))


def front_indices(
    points: np.ndarray, feasible: np.ndarray | None = None, directions: Directions = None
) -> np.ndarray:
    """Row indices of the (feasible) non-dominated rows, one per distinct point, sorted best
    first by the first objective (ascending when minimised, descending when maximised), then
    by row."""
    p = _signed(points, directions)
    mask = np.ones(len(p), dtype=bool) if feasible is None else np.asarray(feasible, dtype=bool)
    rows = np.nonzero(mask)[0]
    keep = rows[nondominated(p[rows])]
    return keep[np.lexsort((keep, p[keep, 0]))]


def merge_front(front: np.ndarray, new: np.ndarray, directions: Directions = None) -> np.ndarray:
    """The non-dominated points of two point sets (front first, so its rows win ties)."""
    both = np.vstack([_points(front).reshape(-1, np.shape(new)[1]), _points(new)])
    return both[nondominated(both, directions=directions)]


# Where a front does not spread in an objective (one point, or all equal there), the nadir is
# put this fraction of the ideal's magnitude above it: a point 1 % worse is then at 1.0.
DEGENERATE_SPAN = 0.01


def normalisation(front: np.ndarray, directions: Directions = None) -> Normalisation | None:
    """Ideal and nadir of a front (None when empty), in the front's own values (a maximised
    column's ideal is its largest value); a zero span is widened (DEGENERATE_SPAN) towards
    worse, so the stated nadir always differs from the ideal and reproduces the normalisation."""
    f = _points(front)
    f = f[np.isfinite(f).all(axis=1)]
    if len(f) == 0:
        return None
    s = signs(directions, f.shape[1])
    g = f * s
    ideal, nadir = g.min(axis=0), g.max(axis=0)
    flat = nadir <= ideal
    widen = np.where(np.abs(ideal) > 0, np.abs(ideal) * DEGENERATE_SPAN, 1.0)
    nadir = np.where(flat, ideal + widen, nadir)
    return Normalisation(ideal * s, nadir * s, None if directions is None else s)


def reference_point(m: int) -> np.ndarray:
    """The hypervolume reference point in normalised units: 1.1 x nadir (= 1.1 per axis)."""
    return np.full(m, REFERENCE_FACTOR)


def hypervolume(points: np.ndarray, norm: Normalisation) -> float:
    """Hypervolume dominated by `points` (any set: dominated points add nothing) in normalised
    units, bounded by the reference point; points beyond it add nothing. The directions are
    the normalisation's (`normalisation(front, directions)`)."""
    p = _points(points)
    if len(p) == 0:
        return 0.0
    z = norm.apply(p)
    ref = reference_point(p.shape[1])
    z = z[np.isfinite(z).all(axis=1) & (z < ref).all(axis=1)]
    if len(z) == 0:
        return 0.0
    z = z[nondominated(z)]
    return float(moocore.hypervolume(z, ref=ref))


def hypervolume_history(
    points: np.ndarray,
    feasible: np.ndarray,
    norm: Normalisation,
    checkpoints: Sequence[int],
    directions: Directions = None,
) -> list[list[float]]:
    """[[k, hypervolume of the feasible points among the first k rows], ...] for each k.

    The running front is merged one checkpoint segment at a time, so the cost is that of one
    pass plus one hypervolume per checkpoint.
    """
    p = _points(points)
    ok = np.asarray(feasible, dtype=bool) & np.isfinite(p).all(axis=1)
    out: list[list[float]] = []
    front = np.empty((0, p.shape[1]))
    start = 0
    for k in sorted({int(c) for c in checkpoints if 0 < c <= len(p)}):
        seg = p[start:k][ok[start:k]]
        if len(seg):
            front = merge_front(front, seg, directions)
        start = k
        out.append([k, hypervolume(front, norm)])
    return out


def checkpoints(n: int, count: int = 50) -> list[int]:
    """About `count` trial counts from 1 to n, geometric at first then even (for HV curves)."""
    if n <= 0:
        return []
    geo = np.unique(np.round(np.geomspace(1, n, count)).astype(int))
    lin = np.linspace(0, n, count + 1)[1:].round().astype(int)
    return sorted({int(v) for v in np.concatenate([geo, lin]) if v >= 1} | {n})


def knee_index(front: np.ndarray, directions: Directions = None) -> int:
    """Row of `front` at its knee: in normalised space, the point farthest from the hyperplane
    through the extreme points (for two objectives the line between the two ends), on the side
    of the ideal; the point nearest the ideal when that plane is degenerate."""
    f = _signed(front, directions)
    if len(f) == 0:
        raise ValueError("the front is empty: it has no knee point")
    z = Normalisation(f.min(axis=0), f.max(axis=0)).apply(f)
    extremes = z[np.argmin(z, axis=0)]  # (m, m): row i is the point best in objective i
    try:
        # Plane n . x = 1 through the extremes; the ideal (origin) lies on the side n . x < 1.
        normal = np.linalg.solve(extremes, np.ones(z.shape[1]))
        dist = (1.0 - z @ normal) / np.linalg.norm(normal)
        if np.all(np.isfinite(dist)) and dist.max() > 1e-12:
            return int(np.argmax(dist))
    except np.linalg.LinAlgError:
        pass
    return int(np.argmin(np.linalg.norm(z, axis=1)))
