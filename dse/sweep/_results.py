"""The results folder of a sweep (docs/results_format.md): tables, front, summary.

Every file is written to a temporary name and renamed into place, so a reader (or a sweep
killed while writing) never sees half a file.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from optuna.trial import FrozenTrial

from dse import __version__, pareto
from dse.files import atomic_path, write_atomic
from dse.spec.space import SearchSpace
from dse.sweep import _fronts as F
from dse.sweep._enumerate import ExactFront, evaluate_index
from dse.sweep._evaluate import objective_unit
from dse.sweep._trials import evaluation_table, trials_table

FORMAT_VERSION = 1


@dataclass
class Written:
    """What `write_results` produced (paths and the summary it wrote)."""

    folder: Path
    table: pd.DataFrame
    front: pd.DataFrame
    summary: dict[str, Any]


def objective_columns(space: SearchSpace) -> list[str]:
    return [f"obj.{n}" for n in space.objectives.names]


def directions(space: SearchSpace) -> tuple[str, ...] | None:
    """The objectives' directions ("minimize" / "maximize"), None where the space has none."""
    d = getattr(space.objectives, "directions", None)
    return tuple(d) if d else None


def mark_front(table: pd.DataFrame, space: SearchSpace) -> pd.DataFrame:
    """Set `on_front` (feasible, non-dominated, one trial per distinct configuration: its
    lowest number) and return the front rows sorted by the first objective, with `trials`
    (how many trials hit the configuration) and `indistinguishable` (a neighbour on the front
    lies inside the predictor's band in every objective)."""
    front, rows = F.front_table(table, space.objectives.names, directions(space))
    on = np.zeros(len(table), dtype=bool)
    on[rows] = True
    table["on_front"] = on
    return front


def write_table(table: pd.DataFrame, path: Path) -> None:
    with atomic_path(path) as tmp:
        if path.suffix == ".parquet":
            table.to_parquet(tmp, index=False)
        else:
            table.to_csv(tmp, index=False)


def exact_front_table(space: SearchSpace, exact: ExactFront) -> pd.DataFrame:
    """The exact front as rows with the trial-table columns (`number` = configuration index)."""
    cols, ev = evaluate_index(space, exact.index)
    table = evaluation_table(space, cols, ev, exact.index)
    table["on_front"] = True
    return table


def write_results(
    folder: Path,
    space: SearchSpace,
    trials: Sequence[FrozenTrial],
    *,
    study_name: str,
    sampler: str,
    seed: int,
    trials_requested: int,
    storage: str,
    elapsed_s: float,
    exact: ExactFront | None = None,
    exact_table: pd.DataFrame | None = None,
    artifacts: dict[str, str] | None = None,
    extra: dict[str, Any] | None = None,
) -> Written:
    """Write trials.parquet/.csv, front.csv, summary.json (and exact_front.csv) into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    table = trials_table(trials, space)
    front = mark_front(table, space)
    names = list(space.objectives.names)
    m = len(names)
    dirs = directions(space)  # the normalisation carries them into every hypervolume
    values = table[objective_columns(space)].to_numpy(dtype=float)
    feasible = table["feasible"].to_numpy(dtype=bool)
    front_values = front[objective_columns(space)].to_numpy(dtype=float)
    # Normalise by the exact front when it is known, so every sampler of a space is scored
    # against the same ideal and nadir; otherwise by this study's own front.
    norm = exact.normalisation if exact is not None else pareto.normalisation(front_values, dirs)
    hv = pareto.hypervolume(front_values, norm) if norm is not None else None
    history = (
        pareto.hypervolume_history(
            values, feasible, norm, pareto.checkpoints(len(table)), directions=dirs
        )
        if norm is not None
        else []
    )
    exact_hv = exact.hypervolume() if exact is not None else None
    if exact_table is None and exact is not None:
        exact_table = exact_front_table(space, exact)
    write_table(table, folder / "trials.parquet")
    write_table(table, folder / "trials.csv")
    write_table(front, folder / "front.csv")
    if exact_table is not None:
        write_table(exact_table, folder / "exact_front.csv")
    gpus = sorted({str(g) for g in table["gpu"].dropna()}) if len(table) else []
    arts = dict(artifacts or {})
    if "pred.artifact_id" in table:
        for gpu, ids in table.dropna(subset=["pred.artifact_id"]).groupby("gpu")[
            "pred.artifact_id"
        ]:
            arts[str(gpu)] = str(ids.iloc[-1])
    evaluated_rows = table[(table["state"] == "COMPLETE") | (table["invalid_reason"] != "")]
    evaluated_n = len(evaluated_rows)
    distinct = F.distinct_count(evaluated_rows)
    summary: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "dse_version": __version__,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "study": study_name,
        "space_file": space.source,
        "space": space.raw,
        "sampler": sampler,
        "seed": seed,
        "trials_requested": trials_requested,
        "objectives": [
            {"name": n, "unit": objective_unit(n), "direction": d}
            for n, d in zip(names, dirs or ("minimize",) * m, strict=True)
        ],
        "counts": {
            "trials": len(table),
            "complete": int((table["state"] == "COMPLETE").sum()) if len(table) else 0,
            "feasible": int(feasible.sum()),
            "front": len(front),
            # Distinct configurations among the evaluated trials; the rest were repeats of
            # one, told the stored values (the predictor saw each configuration once).
            "distinct_configurations": distinct,
            "repeats": int(evaluated_n - distinct),
            "front_trials": int(front["trials"].sum()) if len(front) else 0,
            "indistinguishable": int(front["indistinguishable"].sum()) if len(front) else 0,
        },
        "artifacts": dict(sorted(arts.items())),
        "gpus": gpus,
        "hypervolume": hv,
        "reference_point": pareto.reference_point(m).tolist() if norm is not None else None,
        "normalisation": norm.as_dict() if norm is not None else None,
        "hypervolume_history": history,
        "exact_hypervolume": exact_hv,
        "storage": storage,
        "elapsed_s": round(float(elapsed_s), 3),
    }
    summary.update(extra or {})  # `exact`: the enumeration's counts
    text = json.dumps(summary, indent=2, default=_json_default)
    write_atomic(folder / "summary.json", text + "\n")
    return Written(folder, table, front, summary)


def _json_default(v: Any) -> Any:
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    return str(v)


def read_summary(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "summary.json").read_text())
