"""Exhaustive evaluation of a discrete space in vectorised chunks, and its exact Pareto front.

`exact_front(space)` walks the space in enumeration order, chunk by chunk (columns are built
from the configuration index, so the whole space is never materialised), evaluates each chunk
in one predictor call and keeps only the running front, so memory stays bounded by the chunk.
It is the reference of `--reference exact` and of the search-quality benchmark.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dse import pareto
from dse.space import SearchSpace
from dse.sweep._evaluate import Evaluation, Predictor, evaluate

CHUNK = 131_072  # configurations per predictor call: ~1 s of work, ~100 MB of arrays


def space_columns(space: SearchSpace, index: np.ndarray) -> dict[str, np.ndarray]:
    """Complete configuration columns of the configurations at `index` (enumeration order)."""
    idx = np.asarray(index, dtype=np.int64)
    n = len(idx)
    cols: dict[str, np.ndarray] = {k: np.full(n, v) for k, v in space.fixed.items()}
    searched = space.searched
    if searched:
        digits = np.unravel_index(idx, [len(p.values) for p in searched])
        for p, d in zip(searched, digits, strict=True):
            values = np.asarray(p.values, dtype=object if isinstance(p.values[0], str) else None)
            cols[p.name] = values[d]
    return space.complete(cols)  # as_columns, keeping training_tokens


@dataclass
class ExactFront:
    """The exact feasible front of a space and the counts behind it."""

    index: np.ndarray  # configuration indices on the front (one per distinct point), sorted
    objectives: np.ndarray  # (k, m) their objective values
    total: int  # configurations evaluated
    valid: int
    feasible: int
    elapsed_s: float = 0.0
    directions: tuple[str, ...] | None = None  # per objective; None: all minimised

    @property
    def normalisation(self) -> pareto.Normalisation | None:
        return pareto.normalisation(self.objectives, self.directions)

    def hypervolume(self) -> float | None:
        norm = self.normalisation
        return None if norm is None else pareto.hypervolume(self.objectives, norm)


def exact_front(
    space: SearchSpace,
    *,
    chunk: int = CHUNK,
    predictor: Predictor | None = None,
    progress: object | None = None,
) -> ExactFront:
    """Evaluate every configuration of `space` and return its exact feasible Pareto front.

    `progress`, if given, is a tqdm-like object whose `update(n)` is called per chunk.
    """
    import time

    t0 = time.perf_counter()
    total = space.size()
    m = len(space.objectives.names)
    front_idx = np.empty(0, dtype=np.int64)
    front_obj = np.empty((0, m))
    valid = feasible = 0
    for start in range(0, total, chunk):
        idx = np.arange(start, min(start + chunk, total), dtype=np.int64)
        cols = space_columns(space, idx)
        ev = evaluate(space, cols, predictor=predictor, with_tokens2wh=False)
        valid += int(ev.valid.sum())
        feasible += int(ev.feasible.sum())
        ok = ev.feasible & np.isfinite(ev.objectives).all(axis=1)
        # Earlier chunks first, so among equal points the lowest index stays.
        cand_idx = np.concatenate([front_idx, idx[ok]])
        cand_obj = np.vstack([front_obj, ev.objectives[ok]])
        keep = pareto.nondominated(cand_obj, directions=space.objectives.directions)
        front_idx, front_obj = cand_idx[keep], cand_obj[keep]
        if progress is not None:
            progress.update(len(idx))  # type: ignore[attr-defined]
    sign = pareto.signs(space.objectives.directions, m)  # best first in the first objective
    order = (
        np.lexsort((front_idx, sign[0] * front_obj[:, 0])) if len(front_idx) else np.empty(0, int)
    )
    return ExactFront(
        index=front_idx[order],
        objectives=front_obj[order],
        total=total,
        valid=valid,
        feasible=feasible,
        elapsed_s=time.perf_counter() - t0,
        directions=space.objectives.directions,
    )


def evaluate_index(
    space: SearchSpace, index: np.ndarray, predictor: Predictor | None = None
) -> tuple[dict[str, np.ndarray], Evaluation]:
    """Columns and full evaluation (tokens-to-Wh included) of chosen configurations."""
    cols = space_columns(space, index)
    return cols, evaluate(space, cols, predictor=predictor)
