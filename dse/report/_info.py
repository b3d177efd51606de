"""Pure builders: a loaded results folder -> one NamedTuple per figure of the report.

Tests compare these objects with the trials table; `_render` turns each into a plotly figure and
does nothing else (Optuna's two-step style, `optuna/visualization/_pareto_front.py`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from dse import pareto
from dse.pareto import knee_index
from dse.report._results import (
    ObjectiveColumn,
    Results,
    fmt_quantity,
    objective_matrix,
    plain,
    unit_scale,
)
from dse.spec import columns as C
from dse.sweep import _extrapolation as extrapolation
from dse.sweep import _fronts as fronts

# More distinct configurations than this per cloud (dominated, infeasible) are drawn as a
# seeded random sample, and cloud points carry a short hover (no breakdown): the page's data
# then stops growing with trials past a few thousand (docs/reports.md has the sizes). The
# front is always drawn whole.
MAX_CLOUD_POINTS = 3_000
MAX_PARALLEL_ROWS = 3_000
MAX_TABLE_ROWS = 200
# Draw the Pareto figure on log axes when the drawn trials span more than this factor on an
# axis: an infeasible cloud 50 times slower would otherwise squash the front into a corner.
LOG_AXES_SPAN = 20.0
# Axis ranges come from the study's drawn points, widened by RANGE_MARGIN of their span (in the
# axis's scale, log10 on log axes). A catalogue model within MODEL_REACH of that span beyond the
# points widens the range to include it; one farther off is drawn as an arrow on the edge with
# its value: a 1B model beside an 8-15B study would otherwise squeeze the study into a third of
# the width.
RANGE_MARGIN = 0.05
MODEL_REACH = 0.25
# Samplers that evaluate every configuration once in a fixed order: their "hypervolume against
# trials" only shows that order, and their front is the exact front.
ENUMERATING_SAMPLERS = ("exact", "exhaustive")
# Shown when the report placed the catalogue models itself (a results folder without
# catalogue.csv): their marks then follow today's artifacts, not the sweep's.
CURRENT_ARTIFACTS_NOTE = (
    "catalogue models placed now with the current predictor artifacts (this results folder "
    "predates catalogue.csv; run its `dse sweep` again to record them with the sweep)"
)
OFF_AXES_NOTE = "catalogue models off the axes (an arrow on the edge points to them): "
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
PHASES = ("prefill", "decode")


class Axis(NamedTuple):
    objective: ObjectiveColumn
    factor: float  # multiply SI values by this to draw them
    unit_label: str  # the unit after scaling, e.g. "ms"

    @property
    def title(self) -> str:
        return f"{self.objective.label} ({self.unit_label})"


class PointSet(NamedTuple):
    """Trials drawn as one trace. Values in SI units; bands NaN where the predictor gave none."""

    numbers: np.ndarray  # Optuna trial numbers
    x: np.ndarray
    y: np.ndarray
    x_lo: np.ndarray
    x_hi: np.ndarray
    y_lo: np.ndarray
    y_hi: np.ndarray
    out_of_range: np.ndarray  # bool: an input outside the predictor's fitted range
    hover: list[str]
    trials: np.ndarray | None = None  # trials that hit each configuration (front only)
    indistinguishable: np.ndarray | None = None  # bool: a neighbour inside the band (front)
    colour: np.ndarray | None = None  # SI value of the colour objective (3+ objectives)


class Marked(NamedTuple):
    label: str  # "knee", "best Request latency" (legend)
    number: int
    x: float
    y: float
    short: str = ""  # beside the marker: "knee", "best TPOT", "best loss"


class ModelMark(NamedTuple):
    """A catalogue model evaluated in the study's space (one per GPU x workload combination)."""

    label: str  # "Llama-3-8B" (+ " · h100_sxm, batch_size=16" when the space varies those)
    values: tuple[float, ...]  # SI value of each objective, in the study's objective order
    dominated_by: int  # trial number of a front configuration dominating it, -1 when none
    hover: str


class ModelPoint(NamedTuple):
    """A catalogue model in one figure's two objectives."""

    label: str
    x: float  # SI
    y: float
    dominated_by: int
    hover: str
    off_x: int  # -1 left of the x range, 1 right of it, 0 inside
    off_y: int  # -1 below the y range, 1 above it, 0 inside

    @property
    def off(self) -> bool:
        return bool(self.off_x or self.off_y)


class ParetoInfo(NamedTuple):
    """One pair of objectives on the axes; with 3+ objectives, the next as colour."""

    x: Axis
    y: Axis
    colour: Axis | None  # the objective drawn as colour; None for a 2-objective study
    front: PointSet  # feasible and non-dominated in (x, y), sorted by x
    front_name: str  # legend text that says which front this is
    study_front: PointSet | None  # 3+ objectives: every configuration on the study's front
    study_front_name: str  # its legend text ("" for a 2-objective study)
    dominated: PointSet  # feasible, on neither front (possibly a sample, see notes)
    infeasible: PointSet  # evaluated but breaking a constraint (possibly a sample)
    marks: list[Marked]  # knee and the best trial of each plotted objective
    models: list[ModelPoint]  # catalogue models; those with `off` lie outside the ranges
    x_range: tuple[float, float] | None  # SI; from the study's points (None: none drawn)
    y_range: tuple[float, float] | None
    has_bands: bool
    log_axes: bool  # start with logarithmic axes: the trials span more than LOG_AXES_SPAN
    n_invalid: int  # invalid architectures: never predicted, not drawn
    n_failed: int  # other trials that did not complete (crashed, pruned, still running)
    notes: list[str]
    directions: tuple[str, str] = ("minimize", "minimize")  # of x and y


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


class HeaderInfo(NamedTuple):
    title: str
    rows: list[tuple[str, str]]  # what the study was: space, GPU, workload, sampler, counts, ids
    fixed: dict[str, Any]  # configuration fields that never vary
    warnings: list[str]
    reproduce: str  # the command that reproduces the study


class FrontTable(NamedTuple):
    columns: list[str]
    rows: list[list[str]]
    n_total: int


# ---------------------------------------------------------------------- helpers
def _col(t: pd.DataFrame, name: str) -> np.ndarray:
    if name not in t:
        return np.full(len(t), np.nan)
    return pd.to_numeric(t[name], errors="coerce").astype(float).to_numpy()


def _axis(obj: ObjectiveColumn, values: np.ndarray) -> Axis:
    factor, label = unit_scale(values, obj.unit)
    return Axis(obj, factor, label)


def band(t: pd.DataFrame, obj: ObjectiveColumn) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) of an objective from the predictor's band columns, NaN where there are none
    (`dse.sweep._fronts.band`: the same band decides which front points are indistinguishable)."""
    return fronts.band(t, obj.name, obj.column)


def phase_blocks(t: pd.DataFrame) -> dict[str, dict[str, np.ndarray]]:
    """Predicted time per phase and block (attention, ffn, norm, ...), in s per request.

    The predictor's `pred.blocks.<phase>.<block>_s` when present; otherwise its operators
    `pred.breakdown.<phase>.<family>/<op>_s` summed by family.
    """
    out: dict[str, dict[str, np.ndarray]] = {p: {} for p in PHASES}
    prefix = (
        "pred.blocks."
        if any(c.startswith("pred.blocks.") for c in t.columns)
        else ("pred.breakdown.")
    )
    for c in t.columns:
        if c.startswith(prefix) and c.endswith("_s"):
            phase, _, op = c[len(prefix) : -2].partition(".")
            if phase in out:
                f = op.split("/", 1)[0]
                out[phase][f] = out[phase].get(f, 0.0) + np.nan_to_num(_col(t, c))
    return out


def hover_texts(t: pd.DataFrame, res: Results, status: str, brief: bool = False) -> list[str]:
    """Hover text per trial: objectives, every varying parameter, the predicted breakdown
    (`brief`: objectives and parameters only, for the clouds; ~150 characters a point)."""
    if t.empty:
        return []
    if brief:
        return _brief_hover(t, res, status)
    varying = res.varying
    objs = [(o, _col(t, o.column)) for o in res.objectives]
    pred = {
        k: _col(t, f"pred.{k}")
        for k in ("ttft_s", "tpot_s", "prefill_energy_j", "decode_energy_j", "avg_power_w")
    }
    sizes = {k: _col(t, k) for k in ("total_params", "active_params", "kv_bytes_per_token")}
    fam = phase_blocks(t)
    t2wh = _col(t, "t2wh.energy_j")
    oor = t["pred.out_of_range"].to_numpy() if "pred.out_of_range" in t else np.zeros(len(t), bool)
    reasons = t["invalid_reason"].astype(str).to_numpy() if "invalid_reason" in t else None
    cons = [c for c in t.columns if c.startswith("constraint.") and c != "constraint.valid"]
    cons_vals = {c: _col(t, c) for c in cons}
    params = {p: t[p].to_numpy() for p in varying}
    numbers = t["number"].to_numpy()
    out = []
    for i in range(len(t)):
        lines = [f"<b>trial {int(numbers[i])}</b> · {status}"]
        lines.append(" · ".join(f"{o.label}: {fmt_quantity(v[i], o.unit)}" for o, v in objs))
        if varying:
            lines.append(" ".join(f"{p}={plain(params[p][i])}" for p in varying))
        if math.isfinite(pred["ttft_s"][i]):
            lines.append(
                f"TTFT {fmt_quantity(pred['ttft_s'][i], 's')} · TPOT "
                f"{fmt_quantity(pred['tpot_s'][i], 's')} · power "
                f"{fmt_quantity(pred['avg_power_w'][i], 'W')}"
            )
            lines.append(
                f"energy prefill {fmt_quantity(pred['prefill_energy_j'][i], 'J')} · decode "
                f"{fmt_quantity(pred['decode_energy_j'][i], 'J')}"
                + (
                    f" · tokens-to-Wh {fmt_quantity(t2wh[i], 'J')}"
                    if math.isfinite(t2wh[i])
                    else ""
                )
            )
        for phase in PHASES:
            items = sorted(fam[phase].items(), key=lambda kv, i=i: -kv[1][i])
            items = [(k, v[i]) for k, v in items if v[i] > 0]
            if items:
                lines.append(
                    f"{phase}: " + ", ".join(f"{k} {fmt_quantity(v, 's')}" for k, v in items)
                )
        if math.isfinite(sizes["total_params"][i]):
            lines.append(
                f"params total {fmt_quantity(sizes['total_params'][i], 'parameters')} · active "
                f"{fmt_quantity(sizes['active_params'][i], 'parameters')} · KV "
                f"{fmt_quantity(sizes['kv_bytes_per_token'][i], 'bytes')}/token"
            )
        broken = [c[len("constraint.") :] for c in cons if cons_vals[c][i] > 0]
        if broken:
            lines.append("violates: " + ", ".join(broken))
        if reasons is not None and reasons[i] not in ("", "nan"):
            lines.append(f"invalid: {reasons[i]}")
        if "trials" in t and int(t["trials"].iloc[i]) > 1:
            lines.append(f"{int(t['trials'].iloc[i])} trials hit this configuration")
        if "indistinguishable" in t and bool(t["indistinguishable"].iloc[i]):
            lines.append("<i>indistinguishable from a front neighbour within the band</i>")
        if bool(oor[i]):
            which = ""
            if "pred.out_of_range_inputs" in t:
                v = str(t["pred.out_of_range_inputs"].iloc[i])
                which = f": {v}" if v not in ("", "nan", "None") else ""
            lines.append(f"<i>outside the predictor's fitted range{which}</i>")
        if "loss_out_of_range" in t and bool(t["loss_out_of_range"].iloc[i]):
            v = (
                str(t["loss_out_of_range_inputs"].iloc[i])
                if "loss_out_of_range_inputs" in t
                else ""
            )
            which = f": {v}" if v not in ("", "nan", "None") else ""
            lines.append(f"<i>outside the scaling law's fitted range{which}</i>")
        law = str(t["loss_law"].iloc[i]) if "loss_law" in t else ""
        if law not in ("", "nan", "None"):
            lines.append(f"loss law: {law}")  # `auto` may price rows with different laws
        out.append("<br>".join(lines))
    return out


def _brief_hover(t: pd.DataFrame, res: Results, status: str) -> list[str]:
    """Trial, objectives, searched parameters and the broken constraints: no breakdown."""
    objs = [(o, _col(t, o.column)) for o in res.objectives]
    params = {p: t[p].to_numpy() for p in res.searched}
    cons = [c for c in t.columns if c.startswith("constraint.") and c != "constraint.valid"]
    cons_vals = {c: _col(t, c) for c in cons}
    numbers = t["number"].to_numpy()
    out = []
    for i in range(len(t)):
        head = f"trial {int(numbers[i])} · {status}<br>" + " · ".join(
            fmt_quantity(v[i], o.unit) for o, v in objs
        )
        if params:
            head += "<br>" + " ".join(f"{p}={plain(c[i])}" for p, c in params.items())
        broken = [c[len("constraint.") :] for c in cons if cons_vals[c][i] > 0]
        if broken:
            head += "<br>violates: " + ", ".join(broken)
        out.append(head)
    return out


def _points(
    t: pd.DataFrame,
    res: Results,
    x: ObjectiveColumn,
    y: ObjectiveColumn,
    status: str,
    colour: ObjectiveColumn | None = None,
) -> PointSet:
    x_lo, x_hi = band(t, x)
    y_lo, y_hi = band(t, y)
    oor = (
        t["pred.out_of_range"].to_numpy().astype(bool)
        if "pred.out_of_range" in t
        else np.zeros(len(t), dtype=bool)
    )
    return PointSet(
        t["number"].to_numpy().astype(int),
        _col(t, x.column),
        _col(t, y.column),
        x_lo,
        x_hi,
        y_lo,
        y_hi,
        oor,
        hover_texts(t, res, status, brief=status not in ("front", "study front")),
        t["trials"].to_numpy().astype(int) if "trials" in t else None,
        t["indistinguishable"].to_numpy().astype(bool) if "indistinguishable" in t else None,
        _col(t, colour.column) if colour is not None else None,
    )


def _sample(t: pd.DataFrame, cap: int, what: str, notes: list[str]) -> pd.DataFrame:
    if len(t) <= cap:
        return t
    notes.append(f"{what}: {cap:,} of {len(t):,} drawn (seeded random sample)")
    return t.sample(n=cap, random_state=0).sort_values("number")


# ---------------------------------------------------------------------- builders
def headline_pair(res: Results) -> tuple[int, int]:
    """(x, y) objective indices of the report's first figure: the study's energy objective
    against its latency objective when it has both (the trade the README leads with), else the
    second objective against the first."""
    kinds = [o.kind for o in res.objectives]
    if "latency" in kinds and "energy" in kinds:
        return kinds.index("latency"), kinds.index("energy")
    return 0, 1


def objective_pairs(res: Results) -> list[tuple[int, int]]:
    """Every pair of objectives, the headline pair first, the others in objective order."""
    head = headline_pair(res)
    k = len(res.objectives)
    rest = [(a, b) for a in range(k) for b in range(a + 1, k) if {a, b} != set(head)]
    return [head, *rest]


def _colour_objective(res: Results, pair: tuple[int, int]) -> ObjectiveColumn | None:
    """The first objective not on the axes (None for a 2-objective study)."""
    return next((o for k, o in enumerate(res.objectives) if k not in pair), None)


def pareto_info(
    res: Results, pair: tuple[int, int] | None = None, models: Sequence[ModelMark] = ()
) -> ParetoInfo:
    """One Pareto figure: objective `pair[1]` against `pair[0]` (default `headline_pair`,
    energy against latency), with the next objective as colour in a study of three or more.

    Every cloud holds one point per distinct configuration (a repeat would be drawn on top of
    its first trial); the study's front is `res.front` (one row per configuration, with
    `trials`). `models` (from `model_marks`) are placed, not predicted, here."""
    i, j = pair if pair is not None else headline_pair(res)
    xo, yo = res.objectives[i], res.objectives[j]
    co = _colour_objective(res, (i, j))
    k = len(res.objectives)
    all_dirs = res.directions or ("minimize",) * k
    dirs2 = (all_dirs[i], all_dirs[j]) if res.directions else None
    t = res.trials
    complete = t["state"].astype(str) == "COMPLETE"
    has_xy = np.isfinite(_col(t, xo.column)) & np.isfinite(_col(t, yo.column))
    first = ~pd.Series(res.config_ids, index=t.index).duplicated()
    feas = res.distinct
    infeas = t[complete & ~t["feasible"] & has_xy & first]
    # Invalid architectures carry their reason (the sweep records them as FAIL or COMPLETE
    # with NaN objectives); any other unfinished trial counts as failed.
    reason = t["invalid_reason"].fillna("").astype(str) if "invalid_reason" in t else None
    invalid = (reason.ne("") & reason.ne("nan")) if reason is not None else complete & ~has_xy
    invalid |= complete & ~has_xy
    n_invalid = int(invalid.sum())
    n_failed = int((~complete & ~invalid).sum())
    notes: list[str] = []
    study = res.front
    if k == 2:
        front = study.sort_values(xo.column, kind="stable").reset_index(drop=True)
        front_name = f"Pareto front ({len(front):,})"
        study_set: pd.DataFrame | None = None
    else:
        # The study's front is k-dimensional; the line of this figure is the front of its two
        # axes alone, and the study's front is drawn whole, coloured by the next objective.
        xy = fronts.oriented(objective_matrix(feas, (xo, yo)), dirs2)
        front = feas.iloc[pareto.front_indices(xy)]
        front = front.sort_values(xo.column, kind="stable").reset_index(drop=True)
        front["indistinguishable"] = fronts.front_marks(front, [xo.name, yo.name])
        n_on = int(front["number"].isin(study["number"]).sum())
        n2 = len(front)
        front_name = (
            f"2-D front of this pair ({n2:,} of the {len(study):,} on the {k}-objective front)"
            if n_on == n2
            else f"2-D front of this pair ({n2:,}; {n_on:,} of them among the {len(study):,} "
            f"on the {k}-objective front)"
        )
        study_set = study
        notes.append(
            f"red line: the front of {xo.label} and {yo.label} alone ({n2:,} configurations); "
            f"outlined points: the study's {k}-objective front ({len(study):,}), coloured by "
            f"{co.label if co else 'the third objective'}"
        )
    drawn = feas["number"].isin(front["number"])
    if study_set is not None:
        drawn |= feas["number"].isin(study_set["number"])
    dom = _sample(feas[~drawn.to_numpy()], MAX_CLOUD_POINTS, "dominated configurations", notes)
    inf = _sample(infeas, MAX_CLOUD_POINTS, "infeasible configurations", notes)
    repeats = int(len(t[complete | invalid]) - first[complete | invalid].sum())
    if repeats:
        notes.append(
            f"{repeats:,} trials repeated a configuration already tried; each configuration is "
            "drawn once (the front table gives its trial count)"
        )
    sets = [front, dom, inf] + ([study_set] if study_set is not None else [])
    shown = np.concatenate([_col(x, xo.column) for x in sets])
    shown_y = np.concatenate([_col(x, yo.column) for x in sets])
    marks: list[Marked] = []
    if len(front):
        F = objective_matrix(front, (xo, yo))
        kn = knee_index(F, dirs2)
        marks.append(Marked("knee", int(front["number"].iloc[kn]), F[kn, 0], F[kn, 1], "knee"))
        for c, o in enumerate((xo, yo)):
            G = fronts.oriented(F, dirs2)  # best = smallest once maximised columns negated
            b = int(np.lexsort((G[:, 1 - c], G[:, c]))[0])
            marks.append(
                Marked(
                    f"best {o.label}",
                    int(front["number"].iloc[b]),
                    F[b, 0],
                    F[b, 1],
                    f"best {o.short}",
                )
            )
    else:
        notes.append(
            "no feasible trial: every evaluated configuration breaks a constraint; the "
            "infeasible ones are drawn so that the constraint that binds can be seen"
        )
    if n_invalid:
        notes.append(f"{n_invalid:,} invalid architectures were never predicted and are not drawn")
    if n_failed:
        notes.append(f"{n_failed:,} trials did not complete and are not drawn")
    n_close = int(front["indistinguishable"].sum()) if "indistinguishable" in front else 0
    if n_close:
        notes.append(
            f"{n_close} front point{'s are' if n_close > 1 else ' is'} indistinguishable from a "
            "neighbour (hollow markers): in every objective one lies inside the other's "
            "predicted error band"
        )
    pf = _points(front, res, xo, yo, "front", co)
    has_bands = bool(np.isfinite(np.concatenate([pf.x_lo, pf.y_lo])).any()) if len(front) else False
    n_oor = int(pf.out_of_range.sum())
    if n_oor:
        notes.append(
            f"{n_oor} front point{'s lie' if n_oor > 1 else ' lies'} outside the predictor's "
            "fitted range"
        )
    log_axes = _wide(shown) or _wide(shown_y)
    placed = [
        (m, m.values[i], m.values[j])
        for m in models
        if math.isfinite(m.values[i]) and math.isfinite(m.values[j])
    ]
    x_range = axis_range(shown, [x for _, x, _ in placed], log_axes)
    y_range = axis_range(shown_y, [y for _, _, y in placed], log_axes)
    points = [
        ModelPoint(m.label, x, y, m.dominated_by, m.hover, _side(x, x_range), _side(y, y_range))
        for m, x, y in placed
    ]
    off = [p for p in points if p.off]
    if off:
        notes.append(
            OFF_AXES_NOTE
            + "; ".join(
                f"{p.label} ({xo.label} {fmt_quantity(p.x, xo.unit)}, "
                f"{yo.label} {fmt_quantity(p.y, yo.unit)})"
                for p in off
            )
        )
    return ParetoInfo(
        x=_axis(xo, shown),
        y=_axis(yo, shown_y),
        colour=_axis(co, np.concatenate([_col(x, co.column) for x in sets])) if co else None,
        front=pf,
        front_name=front_name,
        study_front=(
            _points(study_set, res, xo, yo, "study front", co) if study_set is not None else None
        ),
        study_front_name=(
            f"on the {k}-objective front ({len(study_set):,})" if study_set is not None else ""
        ),
        dominated=_points(dom, res, xo, yo, "feasible, dominated", co),
        infeasible=_points(inf, res, xo, yo, "infeasible"),
        marks=marks,
        models=points,
        x_range=x_range,
        y_range=y_range,
        has_bands=has_bands,
        log_axes=log_axes,
        n_invalid=n_invalid,
        n_failed=n_failed,
        notes=notes,
        directions=(all_dirs[i], all_dirs[j]),
    )


def axis_range(
    values: np.ndarray, models: Sequence[float] = (), log: bool = False
) -> tuple[float, float] | None:
    """(lo, hi) of an axis, SI: the study's points widened by RANGE_MARGIN of their span, in
    log10 when `log`; a catalogue model value within MODEL_REACH of the span beyond the points
    widens it first, a farther one does not. None when no point can be drawn."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & ((v > 0) if log else True)]
    if not len(v):
        return None
    to = np.log10 if log else (lambda a: np.asarray(a, dtype=float))
    lo, hi = float(to(v.min())), float(to(v.max()))
    span = hi - lo if hi > lo else max(abs(lo) * 0.1, 1e-12 if not log else 0.05)
    m = np.asarray([x for x in models if math.isfinite(x) and (x > 0 or not log)], dtype=float)
    if len(m):
        near = to(m)
        near = near[(near >= lo - MODEL_REACH * span) & (near <= hi + MODEL_REACH * span)]
        if len(near):
            lo, hi = min(lo, float(near.min())), max(hi, float(near.max()))
            span = hi - lo if hi > lo else span
    lo, hi = lo - RANGE_MARGIN * span, hi + RANGE_MARGIN * span
    return (10.0**lo, 10.0**hi) if log else (lo, hi)


def _side(v: float, rng: tuple[float, float] | None) -> int:
    if rng is None:
        return 0
    return -1 if v < rng[0] else (1 if v > rng[1] else 0)


def model_marks(res: Results) -> tuple[list[ModelMark], str]:
    """Catalogue models that fit the space's fixed fields and are feasible in it, in the
    study's objectives, as `dse sweep` placed them (catalogue.csv), and a note on what was
    done. A folder written before the sweep recorded them has none: they are placed here, with
    the predictor artifacts installed now, and the note says so."""
    if res.catalogue is not None:
        placed, note = res.catalogue.placed, res.catalogue.note
    else:
        from dse.sweep import _catalogue as K

        placed, note = K.report_models_now(res.summary, res.front)
        if placed:
            note = "; ".join(x for x in (CURRENT_ARTIFACTS_NOTE, note) if x)
    marks: list[ModelMark] = []
    knee = None
    if len(res.front):
        # The study's knee, in all of its objectives (the one `dse sweep` prints).
        knee = res.front.iloc[
            knee_index(objective_matrix(res.front, res.objectives), res.directions)
        ]
    for p in placed:
        assert p.table is not None and p.dominated_by is not None
        t = p.table
        varying = [c for c in ("gpu", *C.WORKLOAD_FIELDS) if c in t and t[c].nunique() > 1]
        ok = t["feasible"].astype(bool).to_numpy()
        if varying and knee is not None:
            # One marker per model: at the knee's GPU and workload (the first feasible
            # placement when the model cannot run there), so a dozen models stay readable.
            same = np.ones(len(t), dtype=bool)
            for c in varying:
                same &= (t[c].astype(str) == str(knee[c])).to_numpy()
            pick = np.flatnonzero(ok & same)
            pick = pick[:1] if len(pick) else np.flatnonzero(ok)[:1]
            ok = np.isin(np.arange(len(t)), pick)
        for r in range(len(t)):
            if not ok[r]:
                continue
            where = ", ".join(f"{c}={plain(t[c].iloc[r])}" for c in varying)
            label = p.name + (f" · {where}" if where else "")
            dom = int(p.dominated_by[r])
            verdict = (
                f"dominated by front trial {dom}" if dom >= 0 else "not dominated by the front"
            )
            hover = (
                f"<b>{label}</b> (catalogue model)<br>"
                + " · ".join(
                    f"{o.label}: {fmt_quantity(t[o.column].iloc[r], o.unit)}"
                    for o in res.objectives
                )
                + f"<br>{verdict}"
                + (f"<br>outside the space: {', '.join(p.outside)}" if p.outside else "")
            )
            values = tuple(float(t[o.column].iloc[r]) for o in res.objectives)
            marks.append(ModelMark(label, values, dom, hover))
    return marks, note


def _wide(values: np.ndarray) -> bool:
    """True when positive values span more than LOG_AXES_SPAN (log axes read better)."""
    v = values[np.isfinite(values)]
    if len(v) < 2 or v.min() <= 0:
        return False
    return bool(v.max() / v.min() > LOG_AXES_SPAN)


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
    colours = [(_axis(o, _col(rows, o.column)), _col(rows, o.column)) for o in res.objectives]
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
    y = _col(rows, column)
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
    sx, sy = _col(front, xo.column), _col(front, yo.column)
    ex_x, ex_y = _col(ex, xo.column), _col(ex, yo.column)
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
    return ExactFrontInfo(_axis(xo, allx), _axis(yo, ally), sx, sy, ex_x[o], ex_y[o], int(n_found))


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
                t2wh[(comp, ph)] = np.nan_to_num(_col(front, c))
    if not t2wh:
        t2wh = None
        notes.append("no tokens-to-Wh breakdown in the results (t2wh.breakdown.* columns)")
    hymell = None
    if "pred.prefill_energy_j" in front and "pred.decode_energy_j" in front:
        hymell = {ph: _col(front, f"pred.{ph}_energy_j") for ph in PHASES}
    t2wh_total = _col(front, "t2wh.energy_j") if "t2wh.energy_j" in front else None
    hymell_total = _col(front, "pred.energy_j") if "pred.energy_j" in front else None
    if t2wh is None and hymell is None:
        return None
    scale_src = [v for v in (t2wh_total, hymell_total) if v is not None]
    unit = unit_scale(np.concatenate(scale_src) if scale_src else [1.0], "J")
    numbers = front["number"].to_numpy().astype(int)
    return BreakdownInfo(
        [f"#{n}" for n in numbers], numbers, t2wh, hymell, t2wh_total, hymell_total, unit, notes
    )


def header_info(res: Results) -> HeaderInfo:
    """What the study was, so that the report can be reproduced from what it shows."""
    s = res.summary
    t = res.trials
    counts = s.get("counts") or {}
    complete = int((t["state"].astype(str) == "COMPLETE").sum())
    feasible = len(res.feasible)
    n_front = len(res.front)
    fixed = res.fixed
    gpus = s.get("gpus") or sorted({str(g) for g in t["gpu"].unique()})
    wl = []
    for f in C.WORKLOAD_FIELDS:
        if f in t:
            vals = sorted({plain(v) for v in t[f].unique()}, key=str)
            wl.append(
                f"{f}={vals[0]}" if len(vals) == 1 else f"{f}∈{{{', '.join(map(str, vals))}}}"
            )
    arts = s.get("artifacts") or {}
    if not arts and "pred.artifact_id" in t:
        arts = {
            str(g): ", ".join(sorted({str(a) for a in grp.dropna().unique()}))
            for g, grp in t.groupby("gpu")["pred.artifact_id"]
        }
    hv = s.get("hypervolume")
    rows = [
        ("study", str(s.get("study", res.path.name))),
        (
            "space",
            f"{s.get('space_file', '?')}"
            + (
                f" — {s['space'].get('description')}"
                if isinstance(s.get("space"), dict) and s["space"].get("description")
                else ""
            ),
        ),
        ("GPU", ", ".join(map(str, gpus))),
        ("workload", " · ".join(wl)),
        (
            "objectives",
            ", ".join(
                f"{o.label} [{o.unit}]" + (" (maximised)" if d == "maximize" else "")
                for o, d in zip(
                    res.objectives,
                    res.directions or ("minimize",) * len(res.objectives),
                    strict=True,
                )
            )
            + ("" if res.directions else " (minimised)"),
        ),
        ("sampler", f"{s.get('sampler', '?')} · seed {s.get('seed', '?')}"),
        (
            "trials",
            f"{counts.get('trials', len(t)):,} finished of {s.get('trials_requested', '?')} "
            f"requested · {complete:,} complete · {feasible:,} feasible · "
            f"{_distinct_text(res)} · {n_front:,} on the front",
        ),
        ("artifacts", "; ".join(f"{k}: {v}" for k, v in arts.items()) or "not recorded"),
        (
            "hypervolume",
            (f"{hv:.6g}" if isinstance(hv, int | float) else "not recorded")
            + (
                f" (exact front: {s['exact_hypervolume']:.6g})"
                if isinstance(s.get("exact_hypervolume"), int | float)
                else ""
            )
            + (
                f" · reference point {s['reference_point']} (normalised)"
                if s.get("reference_point")
                else ""
            ),
        ),
        ("constraints", _constraints_text(s)),
        (
            "written",
            f"{s.get('created', '?')} by dse {s.get('dse_version', '?')} · "
            f"format {s.get('format_version')} · {s.get('elapsed_s', '?')} s · storage "
            f"{s.get('storage', 'n/a')}",
        ),
        ("results", str(res.path)),
    ]
    warn: list[str] = []
    if feasible == 0:
        warn.append(
            "No feasible trial: every configuration the sweep evaluated breaks a constraint. "
            "The Pareto figure shows the infeasible cloud; relax the constraints in the space."
        )
    rng = extrapolation.summarise(res.front) if n_front else None
    n_oor = rng.by_source.get("predictor", 0) if rng else 0
    if "pred.out_of_range" in t and n_oor:
        which = _counted(rng.labels("predictor") if rng else [])
        warn.append(
            f"{n_oor:,} of {n_front:,} front configurations have an input outside the "
            "predictor's fitted range"
            + (f" ({which})" if which else "")
            + (
                " (ringed in the Pareto figure)"
                if n_oor < n_front
                else "; every front point is, so none is ringed"
            )
            + ": their predictions are extrapolations."
        )
    n_law = rng.by_source.get("loss law", 0) if rng else 0
    if "loss_out_of_range" in t and n_law:
        which = _counted(rng.labels("loss law") if rng else [])
        warn.append(
            f"{n_law:,} of {n_front:,} front configurations lie outside the range the loss "
            "scaling law was fitted on"
            + (f" ({which})" if which else "")
            + ": their losses are extrapolations (docs/quality.md)."
        )
    if "pred.source" in t:
        srcs = sorted({str(v) for v in t["pred.source"].dropna().unique()} - {"nan", ""})
        if "roofline" in srcs:
            warn.append(
                "Predictions come from the roofline stand-in (pred.source == 'roofline'), not "
                "from a fitted HYMELL artifact."
            )
    reproduce = (
        f"dse sweep {s.get('space_file', 'SPACE.yaml')} --sampler {s.get('sampler', 'auto')} "
        f"--seed {s.get('seed', 0)} --trials {s.get('trials_requested', len(t))}"
    )
    title = f"dse report — {s.get('study', res.path.name)}"
    return HeaderInfo(title, rows, fixed, warn, reproduce)


def _counted(labels: list[tuple[str, int]]) -> str:
    """'level3 prompt ×10, operator width ×2' (`dse.sweep._extrapolation` labels and rows)."""
    return ", ".join(f"{k} ×{n}" for k, n in labels)


def _distinct_text(res: Results) -> str:
    c = res.summary.get("counts") or {}
    if "distinct_configurations" in c:
        return f"{c['distinct_configurations']:,} distinct configurations"
    return f"{fronts.distinct_count(res.trials):,} distinct configurations"


def _constraints_text(s: dict[str, Any]) -> str:
    space = s.get("space")
    cons = space.get("constraints") if isinstance(space, dict) else None
    if not cons:
        return "none"
    parts = []
    for k, v in cons.items():
        if isinstance(v, dict):
            b = [
                f"{bk} {bv:.4g}" if isinstance(bv, int | float) else f"{bk} {bv}"
                for bk, bv in v.items()
            ]
            parts.append(f"{k} ({', '.join(b)})")
        else:
            parts.append(f"{k}: {v}")
    return "; ".join(parts)


def front_table(res: Results) -> FrontTable:
    """The front as a table: trial, objectives, varying parameters, sizes."""
    front = res.front
    objs = res.objectives
    params = res.searched
    cols = [
        "trial",
        "trials",
        *(f"{o.label}" for o in objs),
        *params,
        "total params",
        "active params",
    ]
    rows = []
    for _, r in front.head(MAX_TABLE_ROWS).iterrows():
        close = bool(r.get("indistinguishable", False))
        rows.append(
            [
                str(int(r["number"])) + (" ≈" if close else ""),
                str(int(r.get("trials", 1))),
                *(fmt_quantity(r[o.column], o.unit) for o in objs),
                *(str(plain(r[p])) for p in params),
                fmt_quantity(r.get("total_params", math.nan), "parameters"),
                fmt_quantity(r.get("active_params", math.nan), "parameters"),
            ]
        )
    return FrontTable(cols, rows, len(front))
