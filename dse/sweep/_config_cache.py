"""The configurations a study has evaluated (`ConfigCache`), and one batch told through it: a
configuration evaluated before is told its stored outcome instead of being predicted again, and
one drawn twice in a batch is predicted once (`tell_cached`). Both engines use it.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import numpy as np
import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import TrialState

from dse.spec.space import SearchSpace
from dse.sweep._evaluate import Evaluation, Predictor, evaluate
from dse.sweep._progress import Progress
from dse.sweep._trials import evaluated, tell_batch
from dse.sweep.space_index import canonical_digits, param_digits


def evaluate_batch(
    study: optuna.Study,
    trials: list[optuna.Trial],
    rows: list[dict[str, Any]],
    space: SearchSpace,
    seen: ConfigCache,
    predictor: Predictor | None,
    progress: Progress,
    **tell_kw: Any,
) -> list[optuna.trial.FrozenTrial]:
    """Evaluate and tell one batch (`tell_cached`), and add its new configurations to the
    progress bar's front. Returns the finished trials in trial order."""
    told, ev = tell_cached(study, trials, rows, space, seen, predictor, **tell_kw)
    if ev is not None:
        progress.add(ev.objectives, ev.feasible)
    return told


class ConfigCache:
    """The first evaluated trial of each configuration of a study, by its searched-parameter
    values (the fixed fields are the space's, so these values are the whole configuration),
    the values of fields a configuration ignores left out (`dse.spec.inert`: n_kv_heads with
    MLA, sliding_window without sliding layers, ...).

    A trial whose configuration is here is told the stored objectives, constraints and user
    attributes instead of calling the predictor again: a sampler that proposes the same point
    twice spends no prediction on it, and results show one row per configuration."""

    def __init__(self, space: SearchSpace) -> None:
        self._space = space
        self._names = [p.name for p in space.searched]
        self._seen: dict[tuple[Any, ...], optuna.trial.FrozenTrial] = {}
        self.known = 0  # evaluated trials looked at (the shared loop refreshes past it)

    def key(self, params: dict[str, Any]) -> tuple[Any, ...] | None:
        return self.keys([params])[0]

    def keys(self, rows: list[dict[str, Any]]) -> list[tuple[Any, ...] | None]:
        """The key of each row: its canonical digits (`canonical_digits`), or its values where
        they are not the space's; None for a trial killed before it drew every parameter."""
        full = [all(k in r for k in self._names) for r in rows]
        digits = param_digits(self._space, rows)
        listed = [i for i, d in enumerate(digits) if d is not None]
        out: list[tuple[Any, ...] | None] = [
            None if not ok else ("values", *(r[k] for k in self._names))
            for r, ok in zip(rows, full, strict=True)
        ]
        if listed:
            canon = canonical_digits(self._space, np.asarray([digits[i] for i in listed]))
            for i, d in zip(listed, canon.tolist(), strict=True):
                out[i] = tuple(d)
        return out

    def add(self, trials: Any) -> None:
        done = [t for t in trials if evaluated(t)]
        self.known += len(done)
        for t, k in zip(done, self.keys([t.params for t in done]), strict=True):
            if k is not None:
                self._seen.setdefault(k, t)

    def get(self, key: tuple[Any, ...] | None) -> optuna.trial.FrozenTrial | None:
        return None if key is None else self._seen.get(key)

    def __len__(self) -> int:
        return len(self._seen)


def take_rows(ev: Evaluation, idx: list[int]) -> Evaluation:
    """The rows `idx` of an evaluation (every array field, and every dict of arrays, indexed),
    so a configuration drawn twice in one batch is predicted once and told twice."""
    pos = np.asarray(idx, dtype=np.int64)
    out: dict[str, Any] = {}
    for f in fields(ev):
        v = getattr(ev, f.name)
        if f.name == "n":
            out[f.name] = len(pos)
        elif isinstance(v, np.ndarray) and v.ndim >= 1 and len(v) == ev.n:
            out[f.name] = v[pos]
        elif isinstance(v, dict):
            out[f.name] = {
                k: (np.asarray(a)[pos] if np.ndim(a) >= 1 and len(a) == ev.n else a)
                for k, a in v.items()
            }
        else:
            out[f.name] = v
    return type(ev)(**out)


REPEAT_ATTR = "repeat_of"  # user attr of a repeated configuration: the trial it copies


def _tell_repeat(
    study: optuna.Study, trial: optuna.Trial, src: optuna.trial.FrozenTrial, on_copy: bool
) -> optuna.trial.FrozenTrial:
    """Tell `trial` the outcome stored on `src` (same configuration): constraints, user
    attributes and values (or FAIL, an invalid architecture), without a prediction."""
    for name, value in src.constraints.items():
        trial.set_constraint(name, value)
    big = {"pred", "t2wh"} if on_copy else set()
    for k, v in src.user_attrs.items():
        if k not in big and k not in ("worker", REPEAT_ATTR):
            trial.set_user_attr(k, v)
    trial.set_user_attr(REPEAT_ATTR, src.number)
    if src.state == TrialState.COMPLETE:
        told = study.tell(trial, src.values)
    else:
        told = study.tell(trial, state=TrialState.FAIL)
    for k in big & set(src.user_attrs):
        told.set_user_attr(k, src.user_attrs[k])
    return told


def tell_cached(
    study: optuna.Study,
    trials: list[optuna.Trial],
    rows: list[dict[str, Any]],
    space: SearchSpace,
    seen: ConfigCache,
    predictor: Predictor | None,
    *,
    skip_finished: bool = False,
    predictions_on_copies: bool = False,
) -> tuple[list[optuna.trial.FrozenTrial], Evaluation | None]:
    """Evaluate the configurations of a batch not evaluated before (each once, in one
    predictor call), tell every trial, and return (finished trials in trial order, the
    evaluation of the new configurations, None when all were repeats)."""
    keys = seen.keys(rows)
    # A trial without a full configuration (cannot happen from suggest_all) is its own key.
    ukeys = [k if k is not None else ("#", i) for i, k in enumerate(keys)]
    new = [i for i, k in enumerate(keys) if seen.get(k) is None]
    first: dict[Any, int] = {}  # new configuration -> its row in the evaluated batch
    uniq: list[int] = []  # trial positions predicted: the first of each new configuration
    for i in new:
        if ukeys[i] not in first:
            first[ukeys[i]] = len(uniq)
            uniq.append(i)
    ev = None
    told: dict[int, optuna.trial.FrozenTrial] = {}
    if new:
        ev = evaluate(space, space.columns_from([rows[i] for i in uniq]), predictor=predictor)
        pick = [first[ukeys[i]] for i in new]
        done = tell_batch(
            study,
            [trials[i] for i in new],
            take_rows(ev, pick) if len(pick) != len(uniq) else ev,
            skip_finished=skip_finished,
            predictions_on_copies=predictions_on_copies,
        )
        if len(done) == len(new):
            told.update(zip(new, done, strict=True))
        else:  # skipped trials (finished by another process): order is not needed then
            told.update({-1 - j: t for j, t in enumerate(done)})
    for i, k in enumerate(keys):
        src = seen.get(k)
        if src is None:
            continue
        try:
            told[i] = _tell_repeat(study, trials[i], src, predictions_on_copies)
        except UpdateFinishedTrialError:
            if not skip_finished:
                raise
    return [told[i] for i in sorted(told, key=lambda j: j if j >= 0 else len(rows) - j)], ev
