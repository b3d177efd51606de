"""Trials <-> arrays: telling an evaluated batch to Optuna, and reading trials back as a table.

Each trial keeps, as user attributes, everything the results need, so nothing is recomputed
later (the predictor may change; the study records what it said):
- `pred`: the predictor's output for this configuration, as a JSON object in a string;
- `t2wh`: the tokens-to-Wh estimate (corrected preset), likewise, when the estimator exists;
- `quality`: the scaling law's loss, parameters counted and out-of-range flag, likewise, when
  a loss objective or constraint asks for it (columns `loss`, `loss_out_of_range`, ...);
- `sizes`: total_params, active_params, kv_bytes_per_token, memory_bytes;
- `feasible`: every constraint <= 0 (also readable where constraints are not, e.g. in
  optuna-dashboard 0.21, which predates Optuna 5's named constraints);
- `worker`: host:pid of the process that evaluated it (shared storages only);
- `invalid_reason`: why the architecture cannot exist (only on invalid configurations).
Predictions are strings rather than nested objects because Optuna deep-copies a trial's
attributes on every tell: a string is copied for free, a 100-key dict is not (measured in
docs/sweeps.md). Constraint values go through `Trial.set_constraint`; invalid configurations are
told as FAIL (their objectives cannot be computed) with the `valid` constraint violated.
"""

from __future__ import annotations

import datetime
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import optuna
import pandas as pd
from optuna.distributions import BaseDistribution, IntDistribution
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import FrozenTrial, TrialState

from dse.spec.space import SearchSpace
from dse.sweep._evaluate import QUALITY_COLUMNS, QUALITY_TEXT, SIZE_KEYS, Evaluation

STATES = {TrialState.COMPLETE: "COMPLETE", TrialState.FAIL: "FAIL", TrialState.PRUNED: "PRUNED"}


def suggest_all(trial: optuna.Trial, dists: dict[str, BaseDistribution]) -> dict[str, Any]:
    """Draw every searched parameter of a trial (from the sampler, or its enqueued values)."""
    out: dict[str, Any] = {}
    for name, d in dists.items():
        if isinstance(d, IntDistribution):
            out[name] = trial.suggest_int(name, d.low, d.high, step=d.step, log=d.log)
        else:
            out[name] = trial.suggest_categorical(name, d.choices)  # type: ignore[attr-defined]
    return out


# Types json.loads gives back as they were dumped (a float's repr round-trips exactly, NaN and
# infinities included): a row of these alone is equal to the parse of its text.
_PLAIN = frozenset({float, int, str, bool, type(None)})

# JSON text of a user attribute -> the dict it was dumped from (== json.loads(text)): filled by
# `created_trials` for the exact sweep's trials, read by `trials_table`, so the ~80 numbers of
# each trial's predictions are not parsed back right after they were printed (~0.2 s of the
# 3-million-configuration space's ~2,000 recorded trials).
Parsed = dict[str, dict[str, Any]]


def _rows(table: dict[str, np.ndarray], n: int, parsed: Parsed | None = None) -> list[str | None]:
    """One JSON object per row; rows whose values are all missing give None. `parsed`: also
    remember each text's row (when every value is of a `_PLAIN` type, so equal to its parse)."""
    if not table:
        return [None] * n
    keys = list(table)
    cols = [np.asarray(table[k]).tolist() for k in keys]
    keep = (
        parsed is not None
        and all(type(k) is str for k in keys)
        and all(set(map(type, c)) <= _PLAIN for c in cols)
    )
    out: list[str | None] = []
    for i in range(n):
        row = {k: c[i] for k, c in zip(keys, cols, strict=True)}
        text = json.dumps(row, separators=(",", ":"))
        out.append(text)
        if keep:
            parsed[text] = row  # type: ignore[index]
    return out


def tell_batch(
    study: optuna.Study,
    trials: Sequence[optuna.Trial],
    ev: Evaluation,
    *,
    skip_finished: bool = False,
    predictions_on_copies: bool = False,
) -> list[FrozenTrial]:
    """Record constraints, predictions and objectives of an evaluated batch; return the
    finished trials (as Optuna's `tell` returns them, deep copies). With `skip_finished`, a
    trial that another process has finished meanwhile (a shared study failing it as stale) is
    skipped. With `predictions_on_copies`, `pred` and `t2wh` go on the returned copies only
    (the ones persisted), not on the live study's trials: samplers never read them, and the
    in-memory study of a long sweep then holds no copy of the predictions."""
    n = len(trials)
    pred = _rows(ev.pred, n)
    t2wh = _rows(ev.t2wh, n)
    quality = _rows(ev.quality, n)
    cons = {k: np.asarray(v, dtype=float).tolist() for k, v in ev.constraints.items()}
    sizes = {k: np.asarray(ev.sizes[k], dtype=float).tolist() for k in SIZE_KEYS}
    objectives = ev.objectives.tolist()
    finished: list[FrozenTrial] = []
    for i, trial in enumerate(trials):
        row = _Row(
            constraints={k: v[i] if math.isfinite(v[i]) else 1.0 for k, v in cons.items()},
            sizes={k: v[i] for k, v in sizes.items()},
            pred=pred[i],
            t2wh=t2wh[i],
            values=objectives[i] if ev.valid[i] else None,
            invalid_reason=str(ev.invalid_reason[i]),
            quality=quality[i],
        )
        try:
            if predictions_on_copies:
                told = _tell_one(study, trial, replace(row, pred=None, t2wh=None))
                if row.pred is not None and row.values is not None:
                    told.set_user_attr("pred", row.pred)
                if row.t2wh is not None and row.values is not None:
                    told.set_user_attr("t2wh", row.t2wh)
                finished.append(told)
            else:
                finished.append(_tell_one(study, trial, row))
        except UpdateFinishedTrialError:
            if not skip_finished:
                raise
    return finished


@dataclass(frozen=True)
class _Row:
    constraints: dict[str, float]
    sizes: dict[str, float]
    pred: str | None
    t2wh: str | None
    values: list[float] | None  # None: invalid configuration, told FAIL
    invalid_reason: str
    quality: str | None = None  # small (four numbers): kept on the live trials too


def _tell_one(study: optuna.Study, trial: optuna.Trial, row: _Row) -> FrozenTrial:
    for name, value in row.constraints.items():
        trial.set_constraint(name, value)
    trial.set_user_attr("sizes", row.sizes)
    # Also as a flag: optuna-dashboard 0.21 does not read Optuna 5's named constraints.
    trial.set_user_attr("feasible", row.values is not None and max(row.constraints.values()) <= 0)
    if row.values is None:
        trial.set_user_attr("invalid_reason", row.invalid_reason)
        return study.tell(trial, state=TrialState.FAIL)
    if row.pred is not None:
        trial.set_user_attr("pred", row.pred)
    if row.t2wh is not None:
        trial.set_user_attr("t2wh", row.t2wh)
    if row.quality is not None:
        trial.set_user_attr("quality", row.quality)
    return study.tell(trial, row.values)


def evaluated(trial: FrozenTrial) -> bool:
    """Counts toward the budget: complete, or told FAIL because the configuration is invalid
    (a FAIL without that mark is a trial whose worker died; it is retried)."""
    return trial.state == TrialState.COMPLETE or (
        trial.state == TrialState.FAIL and "invalid_reason" in trial.user_attrs
    )


def trials_table(
    trials: Sequence[FrozenTrial], space: SearchSpace, parsed: Parsed | None = None
) -> pd.DataFrame:
    """One row per finished trial, columns as docs/results_format.md (without `on_front`).
    `parsed`: JSON attributes already parsed (`created_trials`), used instead of parsing them."""
    done = [t for t in trials if t.state in STATES]
    done.sort(key=lambda t: t.number)
    names = list(space.objectives.names)
    n = len(done)
    searched = [p.name for p in space.searched]
    table: dict[str, Any] = {
        "number": np.asarray([t.number for t in done], dtype=np.int64),
        "state": [STATES[t.state] for t in done],
    }
    # Configuration columns: params of the trial over the space's fixed values.
    if n:
        rows = [{name: t.params.get(name) for name in searched} for t in done]
        complete = [r for r in rows if all(v is not None for v in r.values())]
        # A trial failed by a dead worker may lack params: fill what it has.
        cols = space.columns_from(rows) if len(complete) == n else _partial_columns(space, rows)
    else:
        cols = {k: np.asarray([], dtype=object) for k in space.config_fields}
    values = np.full((n, len(names)), np.nan)
    for i, t in enumerate(done):
        if t.state == TrialState.COMPLETE and t.values is not None:
            values[i] = t.values
    cons_names: list[str] = []
    for t in done:
        for k in t.constraints:
            if k not in cons_names:
                cons_names.append(k)
    cons = np.full((n, len(cons_names)), np.nan)
    for i, t in enumerate(done):
        for j, k in enumerate(cons_names):
            if k in t.constraints:
                cons[i, j] = t.constraints[k]
    complete_mask = np.asarray([t.state == TrialState.COMPLETE for t in done], dtype=bool)
    feasible = complete_mask & (np.nan_to_num(cons, nan=1.0) <= 0).all(axis=1)
    table["feasible"] = feasible
    table["on_front"] = np.zeros(n, dtype=bool)
    for k in space.config_fields:
        table[k] = cols[k]
    for j, name in enumerate(names):
        table[f"obj.{name}"] = values[:, j]
    for j, k in enumerate(cons_names):
        table[f"constraint.{k}"] = cons[:, j]
    table["invalid_reason"] = [str(t.user_attrs.get("invalid_reason", "")) for t in done]
    sizes = [t.user_attrs.get("sizes") or {} for t in done]
    for k in SIZE_KEYS:
        table[k] = np.asarray([s.get(k, np.nan) for s in sizes], dtype=float)
    if space.loss_laws:
        table.update(_quality_columns([_loads(t.user_attrs.get("quality"), parsed) for t in done]))
    df = pd.DataFrame(table)
    for attr, prefix in (("pred", "pred."), ("t2wh", "t2wh.")):
        extra = _parsed_column_block(done, attr, prefix, parsed)
        if extra is not None:
            extra.index = df.index
            df = pd.concat([df, extra], axis=1)
    return df


def _quality_columns(rows: Sequence[dict[str, Any]]) -> dict[str, np.ndarray]:
    """The trials table's loss columns from per-trial quality records ({} where none: an
    invalid configuration, whose loss is NaN and flag False)."""
    out: dict[str, np.ndarray] = {}
    for col, key in QUALITY_COLUMNS.items():
        got = [r.get(key) for r in rows]
        if key == "out_of_range":
            out[col] = np.asarray([bool(v) for v in got], dtype=bool)
        elif key in QUALITY_TEXT:
            out[col] = np.asarray(["" if v is None else str(v) for v in got], dtype=object)
        else:
            out[col] = np.asarray([np.nan if v is None else float(v) for v in got], dtype=float)
    return out


PARSE_CHUNK = 8192  # trials whose JSON attributes are parsed at once (bounds the dicts alive)


def _parsed_column_block(
    trials: Sequence[FrozenTrial], attr: str, prefix: str, parsed: Parsed | None = None
) -> pd.DataFrame | None:
    """The JSON user attribute `attr` of every trial as typed columns, parsed chunk by chunk
    so a 100,000-trial study never holds all the intermediate dicts at once."""
    parts = []
    for start in range(0, len(trials), PARSE_CHUNK):
        chunk = [
            _loads(t.user_attrs.get(attr), parsed) for t in trials[start : start + PARSE_CHUNK]
        ]
        parts.append(pd.DataFrame.from_records(chunk))
    if not parts or all(p.shape[1] == 0 for p in parts):
        return None
    block = _tidy(pd.concat(parts, ignore_index=True))
    block.columns = [f"{prefix}{c}" for c in block.columns]
    return block


def _loads(value: Any, parsed: Parsed | None = None) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, dict):
        return value
    if parsed is not None and isinstance(value, str):
        got = parsed.get(value)
        if got is not None:
            return got
    return json.loads(value)


def _tidy(df: pd.DataFrame) -> pd.DataFrame:
    """Numbers as float (NaN where missing), flags as nullable booleans, text as strings."""
    for c in df.columns:
        col = df[c]
        if col.dtype == object:
            nonnull = col.dropna()
            if len(nonnull) and all(isinstance(v, bool) for v in nonnull):
                df[c] = col.astype("boolean")
            elif len(nonnull) and all(
                isinstance(v, int | float) and not isinstance(v, bool) for v in nonnull
            ):
                df[c] = col.astype(float)
    return df


def _partial_columns(space: SearchSpace, rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Configuration columns when some trials miss parameters (killed before drawing them)."""
    n = len(rows)
    full = [r for r in rows if all(v is not None for v in r.values())]
    fields = space.config_fields
    out: dict[str, np.ndarray] = {k: np.full(n, None, dtype=object) for k in fields}
    if full:
        idx = np.asarray([i for i, r in enumerate(rows) if all(v is not None for v in r.values())])
        cols = space.columns_from(full)
        for k in fields:
            out[k][idx] = cols[k]
    for k, v in space.fixed.items():
        out[k][:] = v
    for i, r in enumerate(rows):
        for k, v in r.items():
            if v is not None:
                out[k][i] = v
    return out


def evaluation_table(
    space: SearchSpace, cols: dict[str, np.ndarray], ev: Evaluation, numbers: np.ndarray
) -> pd.DataFrame:
    """The same columns as `trials_table`, straight from an evaluation (no Optuna trials):
    used for the exact front of `--reference exact`, where `number` is the configuration's
    index in the space's enumeration."""
    n = ev.n
    table: dict[str, Any] = {
        "number": np.asarray(numbers, dtype=np.int64),
        "state": np.where(ev.valid, "COMPLETE", "FAIL").tolist(),
        "feasible": ev.feasible.copy(),
        "on_front": np.zeros(n, dtype=bool),
    }
    for k in space.config_fields:
        table[k] = np.asarray(cols[k])
    for j, name in enumerate(space.objectives.names):
        table[f"obj.{name}"] = ev.objectives[:, j]
    for k, v in ev.constraints.items():
        table[f"constraint.{k}"] = v
    table["invalid_reason"] = ev.invalid_reason.astype(str)
    for k in SIZE_KEYS:
        table[k] = ev.sizes[k]
    if ev.quality:
        valid = ev.valid
        for col, key in QUALITY_COLUMNS.items():
            v = np.asarray(ev.quality[key])
            if key == "out_of_range":
                table[col] = v.astype(bool) & valid
            elif key in QUALITY_TEXT:
                table[col] = np.where(valid, v.astype(str), "").astype(object)
            else:
                table[col] = np.where(valid, v.astype(float), np.nan)
    df = pd.DataFrame(table)
    for prefix, src in (("pred.", ev.pred), ("t2wh.", ev.t2wh)):
        if src:
            extra = pd.DataFrame({f"{prefix}{k}": np.asarray(v) for k, v in src.items()})
            df = pd.concat([df, _tidy(extra)], axis=1)
    return df


def created_trials(
    dists: dict[str, BaseDistribution],
    params: list[dict[str, Any]],
    ev: Evaluation,
    repeat_of: Sequence[int | None] | None = None,
    parsed: Parsed | None = None,
) -> list[FrozenTrial]:
    """Finished trials built directly (`optuna.trial.create_trial`), with the same parameters,
    constraints, attributes and state `tell_batch` records: for the exhaustive sweep, whose
    configurations need no sampler (about ten times faster than ask/suggest/tell).
    `repeat_of`: per trial, the number of the trial whose configuration it repeats (None: it
    is the first), stored as the user attribute `repeat_of`. `parsed`: filled with the parse of
    each JSON attribute written (for `trials_table`)."""
    n = len(params)
    pred = _rows(ev.pred, n, parsed)
    t2wh = _rows(ev.t2wh, n, parsed)
    quality = _rows(ev.quality, n, parsed)
    cons = {k: np.asarray(v, dtype=float).tolist() for k, v in ev.constraints.items()}
    sizes = {k: np.asarray(ev.sizes[k], dtype=float).tolist() for k in SIZE_KEYS}
    objectives = ev.objectives.tolist()
    out: list[FrozenTrial] = []
    for i in range(n):
        c = {k: v[i] if math.isfinite(v[i]) else 1.0 for k, v in cons.items()}
        valid = bool(ev.valid[i])
        attrs: dict[str, Any] = {
            "sizes": {k: v[i] for k, v in sizes.items()},
            "feasible": valid and max(c.values()) <= 0,
        }
        if valid:
            if pred[i] is not None:
                attrs["pred"] = pred[i]
            if t2wh[i] is not None:
                attrs["t2wh"] = t2wh[i]
            if quality[i] is not None:
                attrs["quality"] = quality[i]
        else:
            attrs["invalid_reason"] = str(ev.invalid_reason[i])
        if repeat_of is not None and repeat_of[i] is not None:
            attrs["repeat_of"] = repeat_of[i]
        out.append(
            finished_trial(
                TrialState.COMPLETE if valid else TrialState.FAIL,
                objectives[i] if valid else None,
                params[i],
                dists,
                attrs,
                c,
            )
        )
    return out


def finished_trial(
    state: TrialState,
    values: list[float] | None,
    params: dict[str, Any],
    dists: dict[str, BaseDistribution],
    user_attrs: dict[str, Any],
    constraints: dict[str, float],
) -> FrozenTrial:
    """`optuna.trial.create_trial` of a finished trial whose distributions are of today's kinds
    (`_samplers.distributions`: Int/Float/Categorical), without its conversion of deprecated
    kinds: that compares each distribution with itself, choice by choice (~40 us a trial of
    sweep_3m_space's six categorical parameters, ~0.08 s of the exact sweep's ~2,000 trials).
    The same trial otherwise: the same fields, constraints and checks (tests/sweep)."""
    now = datetime.datetime.now()
    trial = FrozenTrial(
        number=-1,
        trial_id=-1,
        state=state,
        value=None,
        values=values,
        datetime_start=now,
        datetime_complete=now,
        params=params,
        distributions=dict(dists),
        user_attrs=user_attrs,
        system_attrs={},
        intermediate_values={},
    )
    for key, value in constraints.items():
        trial.set_constraint(key, value)
    trial._validate()
    return trial
