"""The `screened` sampler: each batch of trials is chosen from many configurations priced at once.

Optuna's samplers propose one trial at a time from the trials' history, at about 10^2 trials/s;
the predictor prices about 10^5 configurations/s in one vectorised call. `screened` spends the
predictor where the other samplers spend trials. Per batch it draws `SCREEN_PER_TRIAL` x batch
candidate configurations (a share uniform over the space; the rest mutations and crossovers of
the configurations on the study's current feasible front), prices them in one call (the same
`evaluate` that prices the trials), and proposes as the batch the candidates that rank best
among the front and the candidates together (Pareto rank; within the rank that does not fit
whole, the points farthest from their neighbours first, by crowding distance). The trials are
real: the sweep evaluates and records them as it does for any sampler, so a trial's values are
the predictor's, never the screen's.

Nothing is kept between batches: each batch's plan is rebuilt from the study's trials and the
batch's seed, so a study resumed after a crash continues exactly as the uninterrupted run would.
It needs a discrete space (every dse space is) but not an enumerable one: configurations are
digit vectors, one digit per searched parameter, never flat indices.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import moocore
import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial, TrialState

from dse import pareto
from dse.spec.space import SearchSpace
from dse.sweep._evaluate import Predictor, evaluate
from dse.sweep._planned import PlannedSampler
from dse.sweep.space_index import canonical_digits, digit_columns

# Candidates priced per trial asked: a batch of 64 trials screens 4,096 configurations, about
# 40 ms of predictor time beside the ~0.3 s the sweep spends evaluating and recording the batch
# (docs/sweeps.md: 32-256 per trial all reach the exact front of the 3M-configuration benchmark
# space within 1,000 trials; more only costs time).
SCREEN_PER_TRIAL = 64
SCREEN_MAX = 131_072  # ... at most one predictor chunk per batch (memory ~100 MB)
RANDOM_SHARE = 0.25  # candidates drawn uniformly over the space (the rest: from the front)
CROSSOVER_SHARE = 0.2  # candidates crossing two front configurations parameter by parameter
LOCAL_SHARE = 0.5  # a mutated parameter moves to a neighbouring value (else: any value)


def _key(v: Any) -> Any:
    """A parameter value as a hashable Python scalar (numpy scalars compare by value)."""
    return v.item() if hasattr(v, "item") else v


class ScreenedSampler(PlannedSampler):
    """Proposes each batch of trials from a vectorised screen of many candidate configurations
    (see the module doc). Built afresh for every batch, as the other samplers are."""

    name = "screened"

    def __init__(
        self,
        space: SearchSpace,
        dists: dict[str, BaseDistribution],
        seed: int,
        batch_size: int,
        predictor: Predictor | None = None,
    ) -> None:
        super().__init__(dists)
        self._space = space
        self._params = list(space.searched)
        self._sizes = np.array([len(p.values) for p in self._params], dtype=np.int64)
        self._digit_of = [{_key(v): i for i, v in enumerate(p.values)} for p in self._params]
        self._rng = np.random.default_rng(seed)
        self._batch = max(int(batch_size), 1)
        self._predictor = predictor
        self._plan: list[dict[str, Any]] = []
        self.screened = 0  # configurations priced by this sampler's screens

    # ---- Optuna's sampler interface -------------------------------------------------------
    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        if not self._params:
            return {}
        if not self._plan:
            trials = study.get_trials(deepcopy=False)
            self._plan = [self._params_of(d) for d in self.plan(trials, self._batch)]
            self._plan.reverse()  # popped from the end, in plan order
        return self._plan.pop()

    # ---- the plan of one batch ------------------------------------------------------------
    def plan(self, trials: Sequence[FrozenTrial], n: int) -> np.ndarray:
        """(n, params) digits of the configurations to try next, best candidates first."""
        seen, front = self._history(trials)
        cand = self._candidates(front, min(SCREEN_PER_TRIAL * n, SCREEN_MAX))
        cand = self._unseen(cand, seen)
        picks = np.empty((0, len(self._params)), dtype=np.int64)
        if len(cand):
            obj, ok, valid = self._price(cand)
            order = self._select(obj[ok], front[1], n)
            picks = cand[np.flatnonzero(ok)[order]]
            if len(picks) < n:  # too few feasible candidates: then valid ones (they show where
                # the constraints bind), then invalid ones, each in random order
                rest = np.flatnonzero(~ok)
                rest = rest[self._rng.permutation(len(rest))]
                rest = rest[np.argsort(~valid[rest], kind="stable")]
                picks = np.vstack([picks, cand[rest[: n - len(picks)]]])
        if len(picks) < n:  # the screen found too few new configurations: uniform draws
            seen |= {tuple(r) for r in picks.tolist()}
            extra = self._unseen(self._uniform(4 * (n - len(picks)) + 16), seen)
            picks = np.vstack([picks, extra[: n - len(picks)]])
        if len(picks) < n:  # a small, nearly exhausted space: repeats are told their values
            picks = np.vstack([picks, self._uniform(n - len(picks))])
        return picks[:n]

    def _history(
        self, trials: Sequence[FrozenTrial]
    ) -> tuple[set[tuple[int, ...]], tuple[np.ndarray, np.ndarray]]:
        """(digits of every trial's configuration, (digits, signed objectives) of the current
        feasible front of the completed trials)."""
        every: list[tuple[int, ...]] = []
        rows, objs = [], []
        for t in trials:
            d = self._digits_of(t.params)
            if d is None:
                continue
            every.append(d)
            if (
                t.state == TrialState.COMPLETE
                and t.values is not None
                and t.user_attrs.get("feasible", True)
            ):
                rows.append(d)
                objs.append(t.values)
        # as canonical digits, like the candidates (`_unseen`)
        seen: set[tuple[int, ...]] = set()
        if every:
            seen = {tuple(r) for r in canonical_digits(self._space, np.asarray(every)).tolist()}
        m = len(self._space.objectives.names)
        if not rows:
            return seen, (np.empty((0, len(self._params)), np.int64), np.empty((0, m)))
        dig = np.array(rows, dtype=np.int64)
        obj = self._signed(np.array(objs, dtype=float))
        keep = pareto.nondominated(obj)
        return seen, (dig[keep], obj[keep])

    def _digits_of(self, params: dict[str, Any]) -> tuple[int, ...] | None:
        out = []
        for p, lookup in zip(self._params, self._digit_of, strict=True):
            d = lookup.get(_key(params.get(p.name)))
            if d is None:  # a trial of another space (enqueued by hand): not a configuration here
                return None
            out.append(d)
        return tuple(out)

    def _params_of(self, digits: np.ndarray) -> dict[str, Any]:
        return {p.name: p.values[int(d)] for p, d in zip(self._params, digits, strict=True)}

    def _signed(self, obj: np.ndarray) -> np.ndarray:
        return obj * pareto.signs(self._space.objectives.directions, obj.shape[1])

    # ---- candidates -----------------------------------------------------------------------
    def _uniform(self, k: int) -> np.ndarray:
        return self._rng.integers(0, self._sizes, size=(k, len(self._sizes)))

    def _candidates(self, front: tuple[np.ndarray, np.ndarray], k: int) -> np.ndarray:
        """k candidate digit vectors: uniform draws, and mutations and crossovers of the front."""
        parents = front[0]
        if len(parents) == 0:
            return self._uniform(k)
        rng, n_par = self._rng, len(self._sizes)
        n_rand = int(k * RANDOM_SHARE)
        n_cross = int(k * CROSSOVER_SHARE) if len(parents) > 1 else 0
        n_mut = k - n_rand - n_cross
        # mutation: each parameter moves with probability 1.5 / parameters, and at least one does
        child = parents[rng.integers(len(parents), size=n_mut)].copy()
        move = rng.random((n_mut, n_par)) < 1.5 / n_par
        move[np.arange(n_mut), rng.integers(n_par, size=n_mut)] = True
        local = rng.random((n_mut, n_par)) < LOCAL_SHARE
        # a neighbouring value: +-1, +-2, ... with geometrically falling odds
        step = rng.geometric(0.5, size=(n_mut, n_par)) * rng.choice([-1, 1], size=(n_mut, n_par))
        near = np.clip(child + step, 0, self._sizes - 1)
        anywhere = rng.integers(0, self._sizes, size=(n_mut, n_par))
        child = np.where(move, np.where(local, near, anywhere), child)
        # crossover: each parameter from one of two front configurations
        a = parents[rng.integers(len(parents), size=n_cross)]
        b = parents[rng.integers(len(parents), size=n_cross)]
        cross = np.where(rng.random((n_cross, n_par)) < 0.5, a, b)
        return np.vstack([child, cross, self._uniform(n_rand)])

    def _unseen(self, cand: np.ndarray, seen: set[tuple[int, ...]]) -> np.ndarray:
        """The distinct rows of cand that are no trial's configuration yet (first occurrence
        order kept, so the plan does not depend on how np.unique sorts), each as its canonical
        digits (the fields it ignores at their first value: `canonical_digits`)."""
        if len(cand) == 0:
            return cand
        cand = canonical_digits(self._space, cand)
        _, first = np.unique(cand, axis=0, return_index=True)
        cand = cand[np.sort(first)]
        if not seen:
            return cand
        fresh = np.fromiter((tuple(r) not in seen for r in cand.tolist()), bool, len(cand))
        return cand[fresh]

    def _price(self, digits: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(signed objectives, feasible and finite, valid) of candidate configurations."""
        cols = digit_columns(self._space, digits)
        ev = evaluate(
            self._space, cols, predictor=self._predictor, with_tokens2wh=False, texts=False
        )
        self.screened += len(digits)
        obj = self._signed(np.asarray(ev.objectives, dtype=float))
        ok = np.asarray(ev.feasible, dtype=bool) & np.isfinite(obj).all(axis=1)
        return obj, ok, np.asarray(ev.valid, dtype=bool)

    # ---- selection ------------------------------------------------------------------------
    @staticmethod
    def _select(cand: np.ndarray, front: np.ndarray, n: int) -> np.ndarray:
        """Indices into cand of up to n candidates: by Pareto rank among the front and the
        candidates together (a candidate the front dominates ranks behind it), within the rank
        that does not fit whole by crowding distance (largest first), ties by position."""
        if len(cand) == 0:
            return np.empty(0, dtype=np.int64)
        pts = np.vstack([front, cand])
        rank = np.asarray(moocore.pareto_rank(pts), dtype=np.int64)[len(front) :]
        order = np.lexsort((np.arange(len(cand)), rank))
        if len(order) <= n:
            return order
        last = rank[order[n - 1]]
        whole = order[rank[order] < last]
        tied = np.flatnonzero(rank == last)
        crowd = _crowding(cand[tied])
        pick = tied[np.lexsort((tied, -crowd))][: n - len(whole)]
        return np.concatenate([whole, pick])


def _crowding(points: np.ndarray) -> np.ndarray:
    """NSGA-II's crowding distance of each point among `points` (boundary points: infinite)."""
    k, m = points.shape
    out = np.zeros(k)
    if k <= 2:
        return np.full(k, np.inf)
    for j in range(m):
        order = np.argsort(points[:, j], kind="stable")
        v = points[order, j]
        span = v[-1] - v[0]
        out[order[0]] = out[order[-1]] = np.inf
        if span > 0:
            out[order[1:-1]] += (v[2:] - v[:-2]) / span
    return out
