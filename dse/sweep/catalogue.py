"""Catalogue models beside a study's front: `dse show --compare NAME` and the report's markers
(placed when `dse sweep` writes the results folder, `dse.sweep.results.write_catalogue`).

A catalogue model (`dse.spec.catalogue`) fits a space when every architecture field the space fixes
(its YAML states one value) equals the model's. It is then evaluated exactly as the sweep
evaluates a trial (`dse.sweep._evaluate.evaluate` with the space's workload, GPU and
constraints), once per combination of the space's searched non-architecture fields (GPU, batch
size, ...), and compared with the front: is some front configuration at least as good in every
objective and better in one?
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dse.errors import DSEError
from dse.spec import columns as C
from dse.sweep import fronts as fronts

MAX_COMBINATIONS = 64  # workload x GPU combinations a model is placed at, at most
# Models placed on the report's scatter unprompted: those that fit and are feasible in the
# space, at most this many (the catalogue has a dozen Llama-3 sizes sharing one vocabulary).
MAX_REPORT_MODELS = 6


@dataclass
class Placed:
    """One catalogue model evaluated in a study's space."""

    name: str  # the catalogue's spelling, e.g. "Llama-3-8B"
    mismatches: list[str]  # fixed fields the model contradicts (empty: it fits)
    outside: list[str] = field(default_factory=list)  # searched fields off the space's values
    table: pd.DataFrame | None = None  # one row per combination: config, obj.*, feasible, ...
    dominated_by: np.ndarray | None = None  # per row: number of a dominating front row, -1

    @property
    def fits(self) -> bool:
        return not self.mismatches


def space_from_summary(summary: dict[str, Any]) -> Any:
    """The search space a results folder was swept over (summary.json's `space`)."""
    from dse.spec.space import parse_space
    from dse.yamlio import Located

    raw = summary.get("space")
    if not isinstance(raw, dict):
        raise DSEError("summary.json has no `space`: the folder predates dse's space record")
    return parse_space(Located(Path(str(summary.get("space_file", "space.yaml"))), raw, {}))


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(np.isclose(float(a), float(b), rtol=0, atol=0))
    except (TypeError, ValueError):
        return str(a) == str(b)


def mismatches(space: Any, arch: Any) -> list[str]:
    """Architecture fields the space fixes to a value the model does not have. Fields the model
    does not use are not compared: d_ff when every FFN layer is MoE (Mixtral's d_ff is only
    the default of d_ff_expert, which the catalogue resolves), the expert fields of a dense
    model and the other fields `dse.spec.inert` names for it."""
    from dse.spec.arch import ffn_layers
    from dse.spec.inert import inert_masks

    unused = {k for k, m in inert_masks(arch.to_dict(), 1).items() if bool(m[0])}
    if int(ffn_layers(arch)[0]) == 0:
        unused.add("d_ff")
    out = []
    for k, v in space.fixed.items():
        if k in unused:
            continue
        if k in C.ARCH_FIELDS and v is not None and not _same(getattr(arch, k), v):
            out.append(f"{k}: the space fixes {v}, the model has {getattr(arch, k)}")
    return out


def place(
    space: Any,
    name: str,
    front: pd.DataFrame,
    directions: tuple[str, ...] | None = None,
    predictor: Any = None,
) -> Placed:
    """Evaluate catalogue model `name` in `space` (when it fits) and compare it with `front`."""
    return place_many(space, [name], front, directions, predictor)[0]


def place_many(
    space: Any,
    names: list[str],
    front: pd.DataFrame,
    directions: tuple[str, ...] | None = None,
    predictor: Any = None,
) -> list[Placed]:
    """`place` for several models in one evaluation (one predictor call for all of them)."""
    from dse.spec.catalogue import lookup_model, model_card
    from dse.sweep._evaluate import evaluate
    from dse.sweep._trials import evaluation_table

    searched = {p.name: list(p.values) for p in space.searched}
    other = {k: v for k, v in searched.items() if k not in C.ARCH_FIELDS}
    combos = list(itertools.islice(itertools.product(*other.values()), MAX_COMBINATIONS))
    base = {k: v[0] for k, v in searched.items()}
    rows = [{**base, **dict(zip(other, c, strict=True))} for c in combos]
    out: list[Placed] = []
    fit: list[tuple[int, Any]] = []  # (position in out, architecture) of the models that fit
    for name in names:
        arch = lookup_model(name)
        label = model_card(name).name
        bad = mismatches(space, arch)
        outside = [
            f"{k}={getattr(arch, k)} (space: {v[0]}..{v[-1]})"
            for k, v in searched.items()
            if k in C.ARCH_FIELDS and not any(_same(getattr(arch, k), x) for x in v)
        ]
        out.append(Placed(label, bad, outside))
        if not bad:
            fit.append((len(out) - 1, arch))
    if not fit:
        return out
    per = len(rows)
    raw = space.raw_columns(rows * len(fit))
    n = per * len(fit)
    for k in C.ARCH_FIELDS:  # each model's architecture over the space's rows
        # Object arrays: a fixed-width string column would cut 'layernorm' to the width
        # of the space's own value.
        col = np.empty(n, dtype=object)
        for j, (_, arch) in enumerate(fit):
            col[j * per : (j + 1) * per] = getattr(arch, k)
        raw[k] = col if col.dtype.kind == "O" and isinstance(col[0], str) else _typed(col)
    cols = space.complete(raw, own=True)  # checked once, with the models' fields
    ev = evaluate(space, cols, predictor=predictor)
    table = evaluation_table(space, cols, ev, np.arange(n))
    names_o = list(space.objectives.names)
    for j, (pos, _) in enumerate(fit):
        part = table.iloc[j * per : (j + 1) * per].reset_index(drop=True)
        part["number"] = np.arange(per)
        out[pos].table = part
        out[pos].dominated_by = dominated_by(part, front, names_o, directions)
    return out


def _typed(col: np.ndarray) -> np.ndarray:
    """An object column of numbers / bools as a numeric array (what the evaluation expects)."""
    first = col[0]
    if isinstance(first, bool | np.bool_):
        return col.astype(bool)
    if isinstance(first, int | np.integer):
        return col.astype(np.int64)
    if isinstance(first, float | np.floating):
        return col.astype(float)
    return col


def dominated_by(
    rows: pd.DataFrame,
    front: pd.DataFrame,
    names: list[str],
    directions: tuple[str, ...] | None = None,
) -> np.ndarray:
    """Per row, the trial number of the front row that dominates it by the widest margin
    (largest smallest relative gain over the objectives), -1 when no front row dominates it."""
    cols = [f"obj.{n}" for n in names]
    out = np.full(len(rows), -1, dtype=np.int64)
    if not len(front) or not len(rows):
        return out
    f = fronts.oriented(front[cols].to_numpy(float), directions)
    r = fronts.oriented(rows[cols].to_numpy(float), directions)
    for i, p in enumerate(r):
        if not np.isfinite(p).all():
            continue
        dom = (f <= p).all(axis=1) & (f < p).any(axis=1)
        if dom.any():
            with np.errstate(divide="ignore", invalid="ignore"):
                gain = ((p - f[dom]) / np.abs(p)).min(axis=1)
            out[i] = int(front["number"].to_numpy()[np.flatnonzero(dom)[int(np.argmax(gain))]])
    return out


def fitting(space: Any) -> list[str]:
    """Catalogue names whose architecture fits the space's fixed fields."""
    from dse.spec.catalogue import lookup_model, model_names

    out = []
    for name in model_names():
        try:
            arch = lookup_model(name)
        except DSEError:
            continue
        if not mismatches(space, arch):
            out.append(name)
    return out


def report_models(
    space: Any,
    front: pd.DataFrame,
    directions: tuple[str, ...] | None = None,
    predictor: Any = None,
) -> tuple[list[Placed], str]:
    """Catalogue models to mark on the report's scatter: fitting, valid and feasible in the
    space (at most MAX_REPORT_MODELS, by closeness of active parameters to the front's), and
    a note; nothing, with the reason, when the space or the predictor cannot be used. Run when
    `dse sweep` writes the results folder (`results.write_catalogue`): the report reads them."""
    try:
        names = fitting(space)
    except DSEError as exc:
        return [], f"catalogue models not placed: {exc}"
    if not names:
        return [], ""
    try:
        every = place_many(space, names, front, directions, predictor)
    except DSEError as exc:
        return [], f"catalogue models not placed: {exc}"
    placed = [p for p in every if p.table is not None and p.table["feasible"].astype(bool).any()]
    if len(placed) > MAX_REPORT_MODELS and "active_params" in front and len(front):
        mid = float(np.median(front["active_params"].astype(float)))

        def distance(p: Placed) -> float:
            assert p.table is not None
            return abs(np.log(float(p.table["active_params"].iloc[0]) / mid))

        placed = sorted(placed, key=distance)[:MAX_REPORT_MODELS]
    return placed[:MAX_REPORT_MODELS], ""


def report_models_now(summary: dict[str, Any], front: pd.DataFrame) -> tuple[list[Placed], str]:
    """`report_models` for a results folder written before `dse sweep` recorded its placements
    (no catalogue.csv): predicted now, with the artifacts installed now."""
    try:
        space = space_from_summary(summary)
    except DSEError as exc:
        return [], f"catalogue models not placed: {exc}"
    directions = tuple(str(o.get("direction", "minimize")) for o in summary.get("objectives") or [])
    return report_models(space, front, directions if "maximize" in directions else None)
