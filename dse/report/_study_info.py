"""Pure builders of the study-wide figures: parallel coordinates, parameter importance,
hypervolume against trials, the exact front and the energy breakdown (one NamedTuple each;
`_render` draws them). The Pareto figure's builders and shared helpers are `_info`."""

from __future__ import annotations

import math
import warnings
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from dse.report._info import PHASES, Axis, axis_of, column_values, headline_pair
from dse.report._results import (
    ObjectiveColumn,
    Results,
    objective_matrix,
    plain,
    unit_scale,
)
from dse.sweep import fronts as fronts

MAX_PARALLEL_ROWS = 3_000
# Samplers that evaluate every configuration once in a fixed order: their "hypervolume against
# trials" only shows that order, and their front is the exact front.
ENUMERATING_SAMPLERS = ("exact", "exhaustive")
# Display order of the tokens-to-Wh components; others found in the table follow.
T2WH_COMPONENTS = (
    "compute",
    "params",
    "param_access",
    "kv_write",
    "attn_read",
    "activations",
    "allreduce",
    "static",
)


class Dimension(NamedTuple):
    label: str
    values: np.ndarray  # numeric position of each row on the axis
    tickvals: list[float] | None  # for categorical / boolean parameters
    ticktext: list[str] | None


class ParallelInfo(NamedTuple):
    dimensions: list[Dimension]  # one per varying parameter
    colours: list[tuple[Axis, np.ndarray]]  # per objective: axis and SI values per row
    n_rows: int
    notes: list[str]


class ImportanceInfo(NamedTuple):
    method: str  # "PED-ANOVA (Optuna)" or the fallback's name
    importances: dict[str, dict[str, float]]  # objective label -> parameter -> importance (sum 1)
    notes: list[str]


class HypervolumeInfo(NamedTuple):
    n_trials: np.ndarray
    hypervolume: np.ndarray
    exact: float | None
    final: float | None
    reference_point: list[float] | None


class ExactFrontInfo(NamedTuple):
    x: Axis
    y: Axis
    sampler_x: np.ndarray
    sampler_y: np.ndarray
    exact_x: np.ndarray
    exact_y: np.ndarray
    n_found: int  # exact-front points the sampler's front contains


class BreakdownInfo(NamedTuple):
    """Energy of front points split into components, and the two energy estimates side by side."""

    labels: list[str]  # one per front point ("#12")
    numbers: np.ndarray
    t2wh: dict[tuple[str, str], np.ndarray] | None  # (component, phase) -> J per point
    hymell: dict[str, np.ndarray] | None  # phase -> J per point (HYMELL prefill / decode)
    t2wh_total: np.ndarray | None
    hymell_total: np.ndarray | None
    unit: tuple[float, str]  # scale for the energy axis
    notes: list[str]


def _dimension(name: str, values: pd.Series) -> Dimension:
    if values.dtype.kind in "iuf" and values.dtype != bool:
        v = values.to_numpy().astype(float)
        ticks = np.unique(v)
        if len(ticks) <= 12:  # a few discrete values: tick exactly those
            return Dimension(name, v, ticks.tolist(), [f"{plain(t):g}" for t in ticks])
        return Dimension(name, v, None, None)
    cats = sorted(values.astype(str).unique())
    pos = {c: float(i) for i, c in enumerate(cats)}
    return Dimension(
        name,
        values.astype(str).map(pos).to_numpy().astype(float),
        list(pos.values()),
        cats,
    )


def parallel_info(res: Results) -> ParallelInfo | None:
    """Parallel coordinates of the varying parameters; None when fewer than one varies."""
    params = res.searched
    if not params:
        return None
    notes: list[str] = []
    rows = res.distinct  # one line per configuration
    if rows.empty:
        t = res.trials
        rows = t[np.isfinite(objective_matrix(t, res.objectives)).all(axis=1)]
        rows = rows[~pd.Series(fronts.config_ids(rows), index=rows.index).duplicated()]
        notes.append("no feasible trial: lines are infeasible trials")
    if len(rows) > MAX_PARALLEL_ROWS:
        on = rows["number"].isin(res.front["number"])
        front = rows[on]
        rest = rows[~on]
        keep = max(MAX_PARALLEL_ROWS - len(front), 0)
        rest = rest.sample(n=min(keep, len(rest)), random_state=0)
        notes.append(
            f"{len(front) + len(rest):,} of {len(rows):,} configurations drawn (front kept)"
        )
        rows = pd.concat([front, rest]).sort_values("number")
    dims = [_dimension(p, rows[p]) for p in params]
    colours = [
        (axis_of(o, column_values(rows, o.column)), column_values(rows, o.column))
        for o in res.objectives
    ]
    return ParallelInfo(dims, colours, len(rows), notes)


MIN_IMPORTANCE_TRIALS = 10
# PED-ANOVA over more trials than this is slow and no more telling: a seeded sample is used.
MAX_IMPORTANCE_ROWS = 5_000


def importance_info(res: Results) -> ImportanceInfo | None:
    """Importance of each varying parameter for each objective, over the feasible trials.

    Optuna's PED-ANOVA on an in-memory study rebuilt from the trials; with fewer than
    MIN_IMPORTANCE_TRIALS feasible trials, or when PED-ANOVA cannot separate the top
    quantile (all importances 0), the fallback is the correlation ratio eta^2 (share of the
    objective's variance explained by grouping on the parameter), normalised to sum 1.
    """
    params = res.searched
    if len(params) < 2:
        return None
    rows = res.distinct  # a repeated configuration would weigh its objective twice
    notes: list[str] = []
    if len(rows) < 2:
        return ImportanceInfo("none", {}, ["fewer than 2 feasible trials: no importance"])
    if len(rows) > MAX_IMPORTANCE_ROWS:
        notes.append(
            f"{MAX_IMPORTANCE_ROWS:,} of {len(rows):,} feasible trials used (seeded sample)"
        )
        rows = rows.sample(n=MAX_IMPORTANCE_ROWS, random_state=0).sort_values("number")
    out: dict[str, dict[str, float]] = {}
    methods: set[str] = set()
    study = _study(rows, params, res.objectives) if len(rows) >= MIN_IMPORTANCE_TRIALS else None
    for j, o in enumerate(res.objectives):
        imp = _ped_anova(study, j, params) if study is not None else None
        if imp is None:
            imp = correlation_ratio(rows, params, o.column)
            methods.add("eta2")
        else:
            methods.add("ped")
        out[o.label] = imp
    if methods == {"ped"}:
        method = "PED-ANOVA (Optuna)"
    elif methods == {"eta2"}:
        method = "correlation ratio η² (fallback)"
        notes.append(
            f"{len(rows)} feasible trials: too few for PED-ANOVA, shown as the share of each "
            "objective's variance explained by each parameter (η²)"
            if len(rows) < MIN_IMPORTANCE_TRIALS
            else "PED-ANOVA could not rank the parameters; shown as η² (variance explained)"
        )
    else:
        method = "PED-ANOVA (Optuna), η² where it could not rank"
    return ImportanceInfo(method, out, notes)


def _study(rows: pd.DataFrame, params: list[str], objectives: tuple[ObjectiveColumn, ...]) -> Any:
    import optuna
    from optuna.distributions import CategoricalDistribution, IntDistribution

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    dists: dict[str, Any] = {}
    for p in params:
        s = rows[p]
        if s.dtype.kind in "iu" or (s.dtype.kind == "f" and (s == s.round()).all()):
            dists[p] = IntDistribution(int(s.min()), int(s.max()))
        else:
            dists[p] = CategoricalDistribution(sorted({plain(v) for v in s}, key=str))
    study = optuna.create_study(directions=["minimize"] * len(objectives))
    values = objective_matrix(rows, objectives)
    cols = {p: rows[p].to_numpy() for p in params}
    trials = []
    for i in range(len(rows)):
        ps = {}
        for p in params:
            v = plain(cols[p][i])
            ps[p] = int(v) if isinstance(dists[p], IntDistribution) else v
        trials.append(
            optuna.trial.create_trial(values=list(values[i]), params=ps, distributions=dists)
        )
    study.add_trials(trials)
    return study


def _ped_anova(study: Any, j: int, params: list[str]) -> dict[str, float] | None:
    from optuna.importance import PedAnovaImportanceEvaluator, get_param_importances

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            imp = get_param_importances(
                study,
                evaluator=PedAnovaImportanceEvaluator(),
                params=params,
                target=lambda t: t.values[j],
            )
    except (ValueError, RuntimeError, ZeroDivisionError):
        return None
    total = sum(imp.values())
    if not math.isfinite(total) or total <= 0:
        return None
    return {p: float(imp.get(p, 0.0)) / total for p in params}


def correlation_ratio(rows: pd.DataFrame, params: list[str], column: str) -> dict[str, float]:
    """eta^2 of `column` grouped by each parameter, normalised to sum 1 (equal when all 0)."""
    y = column_values(rows, column)
    total = float(((y - y.mean()) ** 2).sum())
    raw = {}
    for p in params:
        if total <= 0:
            raw[p] = 0.0
            continue
        g = pd.DataFrame({"k": rows[p].astype(str).to_numpy(), "y": y}).groupby("k")["y"]
        between = float((g.count() * (g.mean() - y.mean()) ** 2).sum())
        raw[p] = between / total
    s = sum(raw.values())
    if s <= 0:
        return {p: 1.0 / len(params) for p in params}
    return {p: v / s for p, v in raw.items()}


def enumerated(res: Results) -> bool:
    """The sweep evaluated every configuration once, in a fixed order (sampler exact or
    exhaustive): trial order is storage order, and the sweep's front is the exact front."""
    return str(res.summary.get("sampler")) in ENUMERATING_SAMPLERS


def hypervolume_info(res: Results) -> HypervolumeInfo | None:
    """Hypervolume against trials from summary.json; None when the sweep recorded no history,
    or enumerated the space (`enumerated`: the curve would only show the order in which the
    configurations were stored, not a sampler's progress)."""
    if enumerated(res):
        return None
    s = res.summary
    hist = s.get("hypervolume_history") or []
    pts = [(float(a), float(b)) for a, b in hist if b is not None and math.isfinite(float(b))]
    if not pts:
        return None
    n, hv = np.array(pts).T
    exact = s.get("exact_hypervolume")
    final = s.get("hypervolume")
    return HypervolumeInfo(
        n,
        hv,
        float(exact) if exact is not None else None,
        float(final) if final is not None else None,
        s.get("reference_point"),
    )


def exact_front_info(res: Results) -> ExactFrontInfo | None:
    """The sampler's front against the exact front of the space (exact_front.csv), in the
    headline pair of objectives; None without exact_front.csv or when the sweep enumerated the
    space (its front is the exact front)."""
    if res.exact_front is None or enumerated(res):
        return None
    i, j = headline_pair(res)
    xo, yo = res.objectives[i], res.objectives[j]
    front = res.front
    ex = res.exact_front
    sx, sy = column_values(front, xo.column), column_values(front, yo.column)
    ex_x, ex_y = column_values(ex, xo.column), column_values(ex, yo.column)
    if len(res.objectives) == 2:
        found_pts = {(round(a, 12), round(b, 12)) for a, b in zip(sx, sy, strict=True)}
        n_found = sum(
            (round(a, 12), round(b, 12)) in found_pts for a, b in zip(ex_x, ex_y, strict=True)
        )
    else:
        k = objective_matrix(front, res.objectives).round(12)
        found_rows = {tuple(r) for r in k}
        n_found = sum(
            tuple(r) in found_rows for r in objective_matrix(ex, res.objectives).round(12)
        )
    allx = np.concatenate([sx, ex_x])
    ally = np.concatenate([sy, ex_y])
    o = np.argsort(ex_x, kind="stable")
    return ExactFrontInfo(
        axis_of(xo, allx), axis_of(yo, ally), sx, sy, ex_x[o], ex_y[o], int(n_found)
    )


def t2wh_components(columns: Any) -> list[str]:
    """Components of `t2wh.breakdown.<component>.<phase>_j` columns, in display order."""
    found = []
    for c in columns:
        if c.startswith("t2wh.breakdown.") and c.endswith("_j"):
            comp, _, phase = c[len("t2wh.breakdown.") : -2].rpartition(".")
            if phase in PHASES and comp not in found:
                found.append(comp)
    known = [c for c in T2WH_COMPONENTS if c in found]
    return known + [c for c in found if c not in known]


def breakdown_info(res: Results, max_points: int = 40) -> BreakdownInfo | None:
    """Energy components of the front points (knee-centred when the front is long)."""
    front = res.front
    if front.empty:
        return None
    notes: list[str] = []
    if len(front) > max_points:
        # Evenly spaced along the front (sorted by the first objective), ends included.
        idx = np.unique(np.linspace(0, len(front) - 1, max_points).round().astype(int))
        front = front.iloc[idx]
        notes.append(f"{len(idx)} of {len(res.front)} front points, evenly spaced along the front")
    t2wh: dict[tuple[str, str], np.ndarray] | None = {}
    for comp in t2wh_components(front.columns):
        for ph in PHASES:
            c = f"t2wh.breakdown.{comp}.{ph}_j"
            if c in front:
                t2wh[(comp, ph)] = np.nan_to_num(column_values(front, c))
    if not t2wh:
        t2wh = None
        notes.append("no tokens-to-Wh breakdown in the results (t2wh.breakdown.* columns)")
    hymell = None
    if "pred.prefill_energy_j" in front and "pred.decode_energy_j" in front:
        hymell = {ph: column_values(front, f"pred.{ph}_energy_j") for ph in PHASES}
    t2wh_total = column_values(front, "t2wh.energy_j") if "t2wh.energy_j" in front else None
    hymell_total = column_values(front, "pred.energy_j") if "pred.energy_j" in front else None
    if t2wh is None and hymell is None:
        return None
    scale_src = [v for v in (t2wh_total, hymell_total) if v is not None]
    unit = unit_scale(np.concatenate(scale_src) if scale_src else [1.0], "J")
    numbers = front["number"].to_numpy().astype(int)
    return BreakdownInfo(
        [f"#{n}" for n in numbers], numbers, t2wh, hymell, t2wh_total, hymell_total, unit, notes
    )
