"""Pure builders: a loaded results folder -> one NamedTuple per figure of the report.

Tests compare these objects with the trials table; `_render` turns each into a plotly figure and
does nothing else (Optuna's two-step style, `optuna/visualization/_pareto_front.py`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

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
from dse.sweep import fronts as fronts

# More distinct configurations than this per cloud (dominated, infeasible) are drawn as a
# seeded random sample, and cloud points carry a short hover (no breakdown): the page's data
# then stops growing with trials past a few thousand (docs/reports.md has the sizes). The
# front is always drawn whole.
MAX_CLOUD_POINTS = 3_000
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
# Shown when the report placed the catalogue models itself (a results folder without
# catalogue.csv): their marks then follow today's artifacts, not the sweep's.
CURRENT_ARTIFACTS_NOTE = (
    "catalogue models placed now with the current predictor artifacts (this results folder "
    "predates catalogue.csv; run its `dse sweep` again to record them with the sweep)"
)
OFF_AXES_NOTE = "catalogue models off the axes (an arrow on the edge points to them): "
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


def column_values(t: pd.DataFrame, name: str) -> np.ndarray:
    if name not in t:
        return np.full(len(t), np.nan)
    return pd.to_numeric(t[name], errors="coerce").astype(float).to_numpy()


def axis_of(obj: ObjectiveColumn, values: np.ndarray) -> Axis:
    factor, label = unit_scale(values, obj.unit)
    return Axis(obj, factor, label)


def band(t: pd.DataFrame, obj: ObjectiveColumn) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) of an objective from the predictor's band columns, NaN where there are none
    (`dse.sweep.fronts.band`: the same band decides which front points are indistinguishable)."""
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
                out[phase][f] = out[phase].get(f, 0.0) + np.nan_to_num(column_values(t, c))
    return out


def hover_texts(t: pd.DataFrame, res: Results, status: str, brief: bool = False) -> list[str]:
    """Hover text per trial: objectives, every varying parameter, the predicted breakdown
    (`brief`: objectives and parameters only, for the clouds; ~150 characters a point)."""
    if t.empty:
        return []
    if brief:
        return _brief_hover(t, res, status)
    varying = res.varying
    objs = [(o, column_values(t, o.column)) for o in res.objectives]
    pred = {
        k: column_values(t, f"pred.{k}")
        for k in ("ttft_s", "tpot_s", "prefill_energy_j", "decode_energy_j", "avg_power_w")
    }
    sizes = {
        k: column_values(t, k) for k in ("total_params", "active_params", "kv_bytes_per_token")
    }
    fam = phase_blocks(t)
    t2wh = column_values(t, "t2wh.energy_j")
    oor = t["pred.out_of_range"].to_numpy() if "pred.out_of_range" in t else np.zeros(len(t), bool)
    reasons = t["invalid_reason"].astype(str).to_numpy() if "invalid_reason" in t else None
    cons = [c for c in t.columns if c.startswith("constraint.") and c != "constraint.valid"]
    cons_vals = {c: column_values(t, c) for c in cons}
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
    objs = [(o, column_values(t, o.column)) for o in res.objectives]
    params = {p: t[p].to_numpy() for p in res.searched}
    cons = [c for c in t.columns if c.startswith("constraint.") and c != "constraint.valid"]
    cons_vals = {c: column_values(t, c) for c in cons}
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
        column_values(t, x.column),
        column_values(t, y.column),
        x_lo,
        x_hi,
        y_lo,
        y_hi,
        oor,
        hover_texts(t, res, status, brief=status not in ("front", "study front")),
        t["trials"].to_numpy().astype(int) if "trials" in t else None,
        t["indistinguishable"].to_numpy().astype(bool) if "indistinguishable" in t else None,
        column_values(t, colour.column) if colour is not None else None,
    )


def _sample(t: pd.DataFrame, cap: int, what: str, notes: list[str]) -> pd.DataFrame:
    if len(t) <= cap:
        return t
    notes.append(f"{what}: {cap:,} of {len(t):,} drawn (seeded random sample)")
    return t.sample(n=cap, random_state=0).sort_values("number")


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
    has_xy = np.isfinite(column_values(t, xo.column)) & np.isfinite(column_values(t, yo.column))
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
    shown = np.concatenate([column_values(x, xo.column) for x in sets])
    shown_y = np.concatenate([column_values(x, yo.column) for x in sets])
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
        x=axis_of(xo, shown),
        y=axis_of(yo, shown_y),
        colour=axis_of(co, np.concatenate([column_values(x, co.column) for x in sets]))
        if co
        else None,
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
        from dse.sweep import catalogue as K

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
