"""Reading a sweep's results folder (docs/results_format.md) and the array maths reports share.

Everything here is plain pandas / numpy: no plotly, so `dse export` can use it without importing
the plotting stack.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from dse.spec import columns as C
from dse.spec.space import objective_unit
from dse.sweep import fronts as fronts

# The folder's reader lives with its writer (`dse.sweep.results`); re-exported here.
from dse.sweep.results import FORMAT_VERSION as FORMAT_VERSION
from dse.sweep.results import REQUIRED_COLUMNS as REQUIRED_COLUMNS
from dse.sweep.results import (
    SUMMARY_FILE,
    Catalogue,
    as_bool,
    read_catalogue,
    read_results,
    read_table,
)
from dse.sweep.results import ResultsError as ResultsError


@dataclass(frozen=True)
class ObjectiveColumn:
    """One objective of the study: its name, SI unit and column in the trials table."""

    name: str  # e.g. "latency_request"
    unit: str  # "s", "J", "parameters", "bytes"

    @property
    def column(self) -> str:
        return f"obj.{self.name}"

    @property
    def label(self) -> str:
        return objective_label(self.name)

    @property
    def kind(self) -> str:
        """latency | energy | size | loss | throughput | user_speed ("" when not in the table)."""
        entry = objective_table().get(self.name)
        return entry.kind if entry else ""

    @property
    def short(self) -> str:
        """What the objective is in a word or two, for text on a plot ("TPOT", "loss")."""
        entry = objective_table().get(self.name)
        return entry.short if entry else self.name.replace("_", " ")


@dataclass(frozen=True)
class Results:
    """A loaded results folder: all trials, the summary, and the exact front when there is one."""

    path: Path
    trials: pd.DataFrame  # one row per finished trial (docs/results_format.md)
    summary: dict[str, Any]
    objectives: tuple[ObjectiveColumn, ...]
    exact_front: pd.DataFrame | None
    # The catalogue models `dse sweep` placed against the front (catalogue.csv); None for a
    # folder written before it recorded them (the report then places them itself, and says so).
    catalogue: Catalogue | None = None

    @property
    def feasible(self) -> pd.DataFrame:
        """Feasible trials with finite objective values."""
        t = self.trials
        ok = t["feasible"].astype(bool) & _finite_rows(t, [o.column for o in self.objectives])
        return t[ok]

    @property
    def directions(self) -> tuple[str, ...] | None:
        """ "minimize" / "maximize" per objective (summary.json), None: all minimised."""
        d = [
            o.get("direction") for o in self.summary.get("objectives") or [] if isinstance(o, dict)
        ]
        if len(d) == len(self.objectives) and any(x == "maximize" for x in d):
            return tuple(str(x or "minimize") for x in d)
        return None

    @cached_property
    def front(self) -> pd.DataFrame:
        """The study's front: feasible, non-dominated, one row per distinct configuration (its
        first trial), sorted by the first objective, with `trials` (how many trials hit the
        configuration) and `indistinguishable` (a neighbour lies inside the band in every
        objective). Recomputed from the trials, so a folder written before configurations
        were deduplicated shows one row per configuration too."""
        t = self.trials
        ok = t["feasible"].astype(bool) & _finite_rows(t, [o.column for o in self.objectives])
        front, _ = fronts.front_table(
            t, [o.name for o in self.objectives], self.directions, ok.to_numpy(dtype=bool)
        )
        return front

    @cached_property
    def config_ids(self) -> np.ndarray:
        """`dse.sweep.fronts.config_ids` of the trials: equal ids, equal configurations
        (kept: every Pareto figure of the report asks, and it is the costly part)."""
        return fronts.config_ids(self.trials)

    @cached_property
    def distinct(self) -> pd.DataFrame:
        """Feasible trials, one per distinct configuration (its first trial), with `trials`."""
        t = self.trials
        ids = self.config_ids
        counts = np.bincount(ids) if len(ids) else np.empty(0, dtype=np.int64)
        first = ~pd.Series(ids).duplicated().to_numpy()
        feas = self.feasible.index
        out = t[first & t.index.isin(feas)].copy()
        out["trials"] = counts[ids[first & t.index.isin(feas)]]
        return out

    @property
    def varying(self) -> list[str]:
        """Configuration fields that take more than one value across the trials."""
        return [c for c in C.CONFIG_FIELDS if c in self.trials and self.trials[c].nunique() > 1]

    @property
    def searched(self) -> list[str]:
        """The parameters the study searched: varying fields declared with several values in
        the space of summary.json; without it, varying fields that copy no earlier one (a dense
        model's d_ff_expert repeats d_ff)."""
        varying = self.varying
        declared = searched_fields(self.summary.get("space"))
        if declared is not None:
            keep = [c for c in varying if c in declared]
            if keep:
                return keep
        out: list[str] = []
        for c in varying:
            col = self.trials[c].astype(str)
            if not any(col.equals(self.trials[o].astype(str)) for o in out):
                out.append(c)
        return out

    @property
    def fixed(self) -> dict[str, Any]:
        """Configuration fields with a single value in every trial, as plain Python values."""
        t = self.trials
        return {
            c: plain(t[c].iloc[0])
            for c in C.CONFIG_FIELDS
            if c in t and len(t) and t[c].nunique() <= 1
        }


def searched_fields(raw: Any) -> set[str] | None:
    """Fields declared with more than one value in a search-space mapping (the YAML as read)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("space"), dict):
        return None

    def many(spec: Any) -> bool:
        if not isinstance(spec, dict):
            return False
        if "values" in spec:
            return isinstance(spec["values"], list) and len(spec["values"]) > 1
        try:
            return float(spec.get("low", 0)) < float(spec.get("high", 0))
        except (TypeError, ValueError):
            return False

    out = {"gpu"} if many(raw.get("hardware")) else set()
    for section in (raw.get("workload"), raw["space"], raw["space"].get("moe")):
        if isinstance(section, dict):
            out |= {str(k) for k, v in section.items() if many(v)}
    return out


def _finite_rows(t: pd.DataFrame, columns: list[str]) -> pd.Series:
    ok = pd.Series(True, index=t.index)
    for c in columns:
        ok &= np.isfinite(pd.to_numeric(t[c], errors="coerce").astype(float))
    return ok


def load_results(path: str | Path) -> Results:
    """Read and check a results folder written by `dse sweep` (format version 1): the checks
    of `dse.sweep.results.read_results`, which `dse show` makes too."""
    d = Path(path)
    summary, trials = read_results(d)
    summary_file = d / SUMMARY_FILE
    objectives = _objectives(summary, trials, summary_file)
    for flag in ("feasible", "on_front"):
        trials[flag] = as_bool(trials[flag])
    for flag in ("pred.out_of_range", "loss_out_of_range"):
        if flag in trials:
            trials[flag] = as_bool(trials[flag])
    exact = None
    exact_file = d / "exact_front.csv"
    if exact_file.is_file():
        exact = read_table(exact_file)
        gone = [o.column for o in objectives if o.column not in exact.columns]
        if gone:
            raise ResultsError(f"{exact_file}: missing objective column(s) {', '.join(gone)}")
    return Results(d, trials, summary, objectives, exact, read_catalogue(d, summary))


def _objectives(
    summary: dict[str, Any], trials: pd.DataFrame, where: Path
) -> tuple[ObjectiveColumn, ...]:
    spec = summary.get("objectives")
    if spec:
        out = []
        for i, o in enumerate(spec):
            name = o.get("name") if isinstance(o, dict) else o
            if not isinstance(name, str):
                raise ResultsError(f"{where}: objectives.{i}: must name an objective, got {o!r}")
            unit = (o.get("unit") if isinstance(o, dict) else None) or objective_unit(name)
            out.append(ObjectiveColumn(name, unit))
    else:  # summary without the list: the obj.* columns, in table order
        out = [
            ObjectiveColumn(c[4:], objective_unit(c[4:]))
            for c in trials.columns
            if c.startswith("obj.")
        ]
    if len(out) < 2:
        raise ResultsError(
            f"{where}: objectives: a study needs at least 2 objectives, got {[o.name for o in out]}"
        )
    gone = [o.column for o in out if o.column not in trials.columns]
    if gone:
        raise ResultsError(f"{where}: trials have no column(s) {', '.join(gone)}")
    return tuple(out)


class ObjectiveName(NamedTuple):
    """How a report names one objective of `dse.spec.space` (its `obj.<name>` column)."""

    kind: str  # the spec's objective kind: latency, energy, size, loss, throughput, user_speed
    short: str  # a word or two for text on a plot: "TPOT", "energy", "loss", "model size"
    label: str  # axis title: "Time per output token", "Energy per output token (HYMELL)"


_LATENCY_NAMES = {
    "request": ("latency", "Request latency"),
    "ttft": ("TTFT", "Time to first token"),
    "tpot": ("TPOT", "Time per output token"),
}
_ENERGY_LABELS = {"request": "Energy per request", "per_output_token": "Energy per output token"}
_SOURCE_LABELS = {"hymell": "HYMELL", "tokens2wh": "tokens-to-Wh"}
_SIZE_NAMES = {
    "active_params": ("active params", "Active parameters"),
    "total_params": ("model size", "Total parameters"),
    "kv_bytes_per_token": ("KV bytes", "KV-cache bytes per token"),
    "memory_bytes": ("memory", "Memory per GPU"),
}
_LOSS_LABELS = {
    "chinchilla": "Chinchilla",
    "besiroglu": "Besiroglu",
    "joint_moe": "joint MoE law",
    "shen2024": "Shen et al. linear-model law",
}
_THROUGHPUT_NAMES = {"per_gpu": ("throughput", "Throughput per GPU")}
_USER_SPEED_NAMES = {"tokens_per_s": ("user speed", "Output tokens per second per user")}


@cache
def objective_table() -> dict[str, ObjectiveName]:
    """Every objective a space can declare (`dse.spec.space.OBJECTIVE_KINDS` and its metric and
    source choices), by column name: its kind, short name and axis title. Built from the spec's
    own `Objective.name`, so a name here is exactly the column the sweep writes."""
    from dse.spec import space as S

    def name(kind: str, metric: str, source: str | None = None) -> str:
        return S.Objective(kind, metric, source).name

    out: dict[str, ObjectiveName] = {}
    for m in S.LATENCY_METRICS:
        short, label = _LATENCY_NAMES.get(m, ("latency", f"Latency ({m})"))
        out[name("latency", m)] = ObjectiveName("latency", short, label)
    for src in S.ENERGY_SOURCES:
        for m in S.ENERGY_METRICS:
            label = f"{_ENERGY_LABELS.get(m, 'Energy ' + m)} ({_SOURCE_LABELS.get(src, src)})"
            out[name("energy", m, src)] = ObjectiveName("energy", "energy", label)
    for m in S.SIZE_METRICS:
        short, label = _SIZE_NAMES.get(m, (m.replace("_", " "), m.replace("_", " ")))
        out[name("size", m)] = ObjectiveName("size", short, label)
    for law in S.LOSS_LAWS:
        label = f"Loss ({_LOSS_LABELS.get(law, law)})"
        out[name("loss", "loss", law)] = ObjectiveName("loss", "loss", label)
    for m in S.THROUGHPUT_METRICS:
        short, label = _THROUGHPUT_NAMES.get(m, ("throughput", f"Throughput ({m})"))
        out[name("throughput", m)] = ObjectiveName("throughput", short, label)
    for m in S.USER_SPEED_METRICS:
        short, label = _USER_SPEED_NAMES.get(m, ("user speed", f"User speed ({m})"))
        out[name("user_speed", m)] = ObjectiveName("user_speed", short, label)
    # Lifetime objectives (quality issue): joules of training alone, and training + serving.
    out[name("training_energy", "total")] = ObjectiveName(
        "training_energy", "training energy", "Training energy (6·N·D FLOPs)"
    )
    out[name("lifetime_energy", "total")] = ObjectiveName(
        "lifetime_energy", "lifetime energy", "Lifetime energy (training + serving)"
    )
    return out


def objective_label(name: str) -> str:
    """A readable axis title for an objective name ('energy_hymell_request' -> ...)."""
    entry = objective_table().get(name)
    return entry.label if entry else name.replace("_", " ")


# ---------------------------------------------------------------------- units
_PREFIXES = ((1e3, "k"), (1.0, ""), (1e-3, "m"), (1e-6, "µ"), (1e-9, "n"))


def unit_scale(values: Any, unit: str) -> tuple[float, str]:
    """(factor, label) to show `values` (SI) readably: multiply by factor, print label.

    Seconds and joules take SI prefixes chosen by the largest magnitude (2.1 s stays s, 0.04 J
    becomes 40 mJ); parameter counts become millions or billions; bytes KiB/MiB/GiB.
    """
    arr = np.asarray(values, dtype=float)
    arr = np.abs(arr[np.isfinite(arr)])
    top = float(arr.max()) if arr.size else 1.0
    if unit in ("s", "J", "W"):
        for base, prefix in _PREFIXES:
            if top >= base or base == _PREFIXES[-1][0]:
                if unit == "s" and base > 1:  # kiloseconds read worse than seconds
                    return 1.0, "s"
                return 1.0 / base, f"{prefix}{unit}"
    if unit == "parameters":
        if top >= 1e9:
            return 1e-9, "billion parameters"
        if top >= 1e6:
            return 1e-6, "million parameters"
        return 1.0, "parameters"
    if unit == "bytes":
        for base, label in ((1024**3, "GiB"), (1024**2, "MiB"), (1024, "KiB")):
            if top >= base:
                return 1.0 / base, label
        return 1.0, "bytes"
    return 1.0, unit


def fmt_quantity(value: Any, unit: str, digits: int = 3) -> str:
    """One value with its own prefix: fmt_quantity(0.0123, 's') == '12.3 ms'."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return str(value)
    if not math.isfinite(v):
        return "n/a"
    factor, label = unit_scale([v], unit)
    label = _SHORT.get(label, label)
    return f"{v * factor:.{digits}g} {label}".strip()


_SHORT = {"billion parameters": "B", "million parameters": "M"}


def plain(v: Any) -> Any:
    """A numpy / pandas scalar as a plain Python value (int, float, bool, str)."""
    if isinstance(v, np.generic):
        return v.item()
    return v


def objective_matrix(rows: pd.DataFrame, objectives: tuple[ObjectiveColumn, ...]) -> np.ndarray:
    """(n, k) float array of objective values."""
    return (
        np.column_stack(
            [
                pd.to_numeric(rows[o.column], errors="coerce").astype(float).to_numpy()
                for o in objectives
            ]
        )
        if len(rows)
        else np.zeros((0, len(objectives)))
    )
