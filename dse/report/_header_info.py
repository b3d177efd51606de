"""Pure builders of the report's header (what the study was, how to reproduce it) and its
front table."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from dse.report._results import (
    Results,
    fmt_quantity,
    plain,
)
from dse.spec import columns as C
from dse.sweep import extrapolation as extrapolation
from dse.sweep import fronts as fronts

MAX_TABLE_ROWS = 200


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
    """'level3 prompt ×10, operator width ×2' (`dse.sweep.extrapolation` labels and rows)."""
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
