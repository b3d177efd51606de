"""The results folder of a sweep (docs/results_format.md): its one writer and its one reader.

    write_results(folder, space, trials, ...) -> Written   # `dse sweep`
    read_results(folder) -> (summary, trials)              # checked: `dse show/report/export`
    read_summary(folder) -> summary                        # checked: format version
    read_catalogue(folder, summary) -> Catalogue | None    # the catalogue models as placed

Every file is written to a temporary name and renamed into place, so a reader (or a sweep
killed while writing) never sees half a file. Every reader goes through `read_results` /
`read_summary`, so a folder one command refuses (another format version, a damaged trials
table) the others refuse with the same message.

The catalogue models that fit the space are placed against the front when the folder is
written (`catalogue.csv`, with the predictor artifacts used in summary.json's `catalogue`), so
a report of an old sweep shows what the predictor said then, not what today's artifacts say.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from optuna.trial import FrozenTrial

from dse import __version__, pareto
from dse.errors import ConfigError, DSEError
from dse.files import atomic_path, write_atomic
from dse.spec.space import SearchSpace, objective_unit
from dse.sweep import catalogue as K
from dse.sweep import fronts as F
from dse.sweep._enumerate import ExactFront, evaluate_index
from dse.sweep._evaluate import Predictor
from dse.sweep._trials import Parsed, evaluation_table, trials_table
from dse.sweep.catalogue import space_from_summary as space_from_summary

FORMAT_VERSION = 1
SUMMARY_FILE = "summary.json"
CATALOGUE_FILE = "catalogue.csv"
# Columns every results folder of format 1 has; the rest (pred.*, t2wh.*) are optional.
REQUIRED_COLUMNS = ("number", "state", "feasible", "on_front", "d_model", "n_layers", "gpu")
TRIALS_FILES = ("trials.parquet", "trials.csv")  # the first present is read
# catalogue.csv columns beside the evaluation table's: the model's catalogue name, the
# searched fields its architecture lies outside ("; "-joined), the dominating front trial
CATALOGUE_COLUMNS = ("model", "outside", "dominated_by")


class ResultsError(DSEError):
    """A results folder that is missing, empty, malformed or of another format version."""


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


def mark_front(
    table: pd.DataFrame, space: SearchSpace, ids: np.ndarray | None = None
) -> pd.DataFrame:
    """Set `on_front` (feasible, non-dominated, one trial per distinct configuration: its
    lowest number) and return the front rows sorted by the first objective, with `trials`
    (how many trials hit the configuration) and `indistinguishable` (a neighbour on the front
    lies inside the predictor's band in every objective)."""
    front, rows = F.front_table(table, space.objectives.names, directions(space), ids=ids)
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
    predictor: Predictor | None = None,
    parsed: Parsed | None = None,
) -> Written:
    """Write trials.parquet/.csv, front.csv, catalogue.csv, summary.json (and exact_front.csv)
    into `folder`; `predictor` places the catalogue models (None: the installed artifacts).
    `parsed`: the trials' JSON attributes already parsed (`_trials.trials_table`)."""
    folder.mkdir(parents=True, exist_ok=True)
    table = trials_table(trials, space, parsed)
    config = F.config_ids(table)  # the front's and the distinct count's (~30 ms, 2,000 rows)
    front = mark_front(table, space, config)
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
    catalogue = write_catalogue(folder, space, front, dirs, predictor)
    gpus = sorted({str(g) for g in table["gpu"].dropna()}) if len(table) else []
    arts = dict(artifacts or {})
    if "pred.artifact_id" in table:
        for gpu, ids in table.dropna(subset=["pred.artifact_id"]).groupby("gpu")[
            "pred.artifact_id"
        ]:
            arts[str(gpu)] = str(ids.iloc[-1])
    evaluated = ((table["state"] == "COMPLETE") | (table["invalid_reason"] != "")).to_numpy()
    evaluated_n = int(evaluated.sum())
    # a row's id depends on its own fields alone: the evaluated rows' ids count them
    distinct = len(np.unique(config[evaluated])) if evaluated_n else 0
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
        "catalogue": catalogue,
        "storage": storage,
        "elapsed_s": round(float(elapsed_s), 3),
    }
    summary.update(extra or {})  # `exact`: the enumeration's counts
    text = json.dumps(summary, indent=2, default=_json_default)
    write_atomic(folder / SUMMARY_FILE, text + "\n")
    return Written(folder, table, front, summary)


def record_own_exact_front(written: Written, space: SearchSpace, folder: Path) -> Written:
    """A finished exhaustive (or exact) study is its own exact front: record it as such.
    exact_front.csv is front.csv's bytes: `write_results` wrote `written.front` there (and
    nothing changes the table after), so it is copied, not formatted again."""
    with atomic_path(folder / "exact_front.csv") as tmp:
        shutil.copyfile(folder / "front.csv", tmp)
    summary = dict(written.summary)
    summary["exact_hypervolume"] = summary["hypervolume"]
    text = json.dumps(summary, indent=2, default=str) + "\n"
    write_atomic(folder / SUMMARY_FILE, text)
    return replace(written, summary=summary)


# ------------------------------------------------------------------ the catalogue models
@dataclass(frozen=True)
class Catalogue:
    """The catalogue models placed against a study's front, as `dse sweep` recorded them."""

    placed: list[K.Placed]
    note: str  # why none was placed, or "" (the report shows it)
    artifacts: dict[str, str]  # predictor artifact id per GPU the placements used


def write_catalogue(
    folder: Path,
    space: SearchSpace,
    front: pd.DataFrame,
    dirs: tuple[str, ...] | None,
    predictor: Predictor | None,
) -> dict[str, Any]:
    """Place the catalogue models that fit the space against `front` (`_catalogue.report_models`,
    one predictor call) and write them to catalogue.csv; returns summary.json's `catalogue`
    entry: the file (None when no model was placed), the models, the artifact ids, a note."""
    placed, note = K.report_models(
        space, front, dirs if dirs and "maximize" in dirs else None, predictor
    )
    path = folder / CATALOGUE_FILE
    if not placed:
        path.unlink(missing_ok=True)
        return {"file": None, "models": [], "artifacts": {}, "note": note}
    parts = []
    for p in placed:
        assert p.table is not None and p.dominated_by is not None
        part = p.table.copy()
        part.insert(0, "model", p.name)
        part.insert(1, "outside", "; ".join(p.outside))
        part.insert(2, "dominated_by", p.dominated_by)
        parts.append(part)
    rows = pd.concat(parts, ignore_index=True)
    write_table(rows, path)
    arts: dict[str, str] = {}
    if "pred.artifact_id" in rows:
        for gpu, ids in rows.dropna(subset=["pred.artifact_id"]).groupby("gpu")["pred.artifact_id"]:
            arts[str(gpu)] = str(ids.iloc[-1])
    return {
        "file": CATALOGUE_FILE,
        "models": [p.name for p in placed],
        "artifacts": dict(sorted(arts.items())),
        "note": note,
    }


def read_catalogue(folder: str | Path, summary: dict[str, Any]) -> Catalogue | None:
    """The catalogue models as `dse sweep` placed them (no prediction); None when the folder
    predates the record (summary.json has no `catalogue`). Raises ResultsError when the
    summary names a catalogue file that is missing or unreadable."""
    entry = summary.get("catalogue")
    if entry is None:
        return None
    where = Path(folder) / SUMMARY_FILE
    if not isinstance(entry, dict):
        raise ResultsError(f"{where}: catalogue: must be a JSON object, got {entry!r}")
    arts = {str(k): str(v) for k, v in (entry.get("artifacts") or {}).items()}
    note = str(entry.get("note") or "")
    if entry.get("file") is None:
        return Catalogue([], note, arts)
    path = Path(folder) / str(entry["file"])
    if not path.is_file():
        raise ResultsError(
            f"{path}: missing: summary.json's catalogue names it; run the same `dse sweep` "
            "again to write it"
        )
    rows = read_table(path)
    gone = [c for c in CATALOGUE_COLUMNS if c not in rows.columns]
    if gone:
        raise ResultsError(f"{path}: missing column(s) {', '.join(gone)}")
    # an empty column reads back as NaN
    rows["outside"] = [("" if pd.isna(v) else str(v)) for v in rows["outside"]]
    for flag in ("feasible", "pred.out_of_range", "loss_out_of_range"):
        if flag in rows:
            rows[flag] = as_bool(rows[flag])
    placed = []
    for name in pd.unique(rows["model"]):
        part = rows[rows["model"] == name]
        outside = [s for s in str(part["outside"].iloc[0]).split("; ") if s]
        dom = part["dominated_by"].to_numpy(dtype=np.int64)
        table = part.drop(columns=list(CATALOGUE_COLUMNS)).reset_index(drop=True)
        placed.append(K.Placed(str(name), [], outside, table, dom))
    return Catalogue(placed, note, arts)


def as_bool(s: pd.Series) -> pd.Series:
    """A flag column read back from CSV ("True" / "False" / 1 / 0) as booleans."""
    if s.dtype == bool:
        return s
    return s.map(lambda v: str(v).strip().lower() in ("true", "1", "1.0")).astype(bool)


def _json_default(v: Any) -> Any:
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    return str(v)


def read_summary(folder: str | Path) -> dict[str, Any]:
    """summary.json of a results folder, checked (`read_summary_checked`)."""
    return read_summary_checked(Path(folder) / SUMMARY_FILE)


def summary_study(folder: Path) -> str | None:
    """The study summary.json names; None when there is no readable one (no check of its
    format version: a folder of another dse still names the study it holds)."""
    try:
        name = json.loads((folder / SUMMARY_FILE).read_text()).get("study")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return None
    return name if isinstance(name, str) else None


# ------------------------------------------------------------------ reading a folder


def read_results(path: str | Path) -> tuple[dict[str, Any], pd.DataFrame]:
    """(summary, trials table) of a results folder written by `dse sweep` (format version 1),
    checked: the folder exists, summary.json is a JSON object of this format version, and the
    trials table reads, has the required columns and holds a trial. Raises ResultsError."""
    d = Path(path)
    if not d.exists():
        raise ResultsError(f"{d}: results folder does not exist (run `dse sweep SPACE.yaml` first)")
    if not d.is_dir():
        raise ResultsError(f"{d}: must be a results folder written by `dse sweep`, got a file")
    summary_file = d / SUMMARY_FILE
    trials_file = next((d / n for n in TRIALS_FILES if (d / n).is_file()), None)
    if trials_file is None and not summary_file.is_file():
        raise ResultsError(
            f"{d}: not a results folder: it has no summary.json and no trials.parquet or "
            "trials.csv (is the sweep still running, or was it given another --out?)"
        )
    if not summary_file.is_file():
        raise ResultsError(
            f"{d}: summary.json is missing: the folder is from an older dse or the sweep did not "
            "finish; run the same `dse sweep` again to resume and complete it"
        )
    summary = read_summary_checked(summary_file)
    if trials_file is None:
        raise ResultsError(
            f"{d}: trials.parquet and trials.csv are both missing (the sweep wrote its summary "
            "but no trials; run it again)"
        )
    trials = read_table(trials_file)
    missing = [c for c in REQUIRED_COLUMNS if c not in trials.columns]
    if missing:
        raise ResultsError(
            f"{trials_file}: missing column(s) {', '.join(missing)}; a results folder of format "
            f"{FORMAT_VERSION} has them (docs/results_format.md)"
        )
    if trials.empty:
        raise ResultsError(f"{trials_file}: holds no trials (the study finished none)")
    return summary, trials


def read_summary_checked(summary_file: Path) -> dict[str, Any]:
    """summary.json: a JSON object of this dse's format version."""
    try:
        summary = json.loads(summary_file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        detail = exc.strerror if isinstance(exc, OSError) else str(exc)
        raise ResultsError(
            f"{summary_file}: must be the JSON summary `dse sweep` writes, got unreadable text "
            f"({detail})"
        ) from None
    if not isinstance(summary, dict):
        raise ResultsError(f"{summary_file}: must hold a JSON object, got {type(summary).__name__}")
    version = summary.get("format_version")
    if version != FORMAT_VERSION:
        if version is None or (isinstance(version, int | float) and version < FORMAT_VERSION):
            raise ResultsError(
                f"{summary_file}: format_version must be {FORMAT_VERSION}, got {version!r}: the "
                "folder was written by an older dse; re-run its `dse sweep` with this version"
            )
        raise ResultsError(
            f"{summary_file}: format_version must be {FORMAT_VERSION}, got {version!r}: the "
            "folder was written by a newer dse; upgrade dse to read it"
        )
    return summary


def read_table(path: Path) -> pd.DataFrame:
    """A table of a results folder (parquet or CSV); ResultsError when it cannot be read."""
    try:
        if path.suffix == ".parquet":
            return pd.read_parquet(path)
        return pd.read_csv(path, keep_default_na=False, na_values=["", "nan", "NaN"])
    except Exception as exc:  # pyarrow and the CSV parser raise many types for a damaged file
        raise ResultsError(f"{path}: cannot be read ({type(exc).__name__}: {exc})") from None


def read_front(folder: Path, names: list[str]) -> pd.DataFrame:
    """front.csv of a results folder, checked: readable, with `number` and each objective's
    column (`names`: summary.json's objectives)."""
    path = folder / "front.csv"
    if not path.is_file():
        raise ConfigError(
            f"{path}: missing (the sweep did not finish writing its results); run the same "
            "`dse sweep` again to complete them"
        )
    try:
        front = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise ConfigError(
            f"{path}: must be the front table `dse sweep` writes, got an empty file"
        ) from None
    except (OSError, ValueError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(
            f"{path}: must be the front table `dse sweep` writes, got unreadable text ({first})"
        ) from None
    missing = [c for c in ("number", *(f"obj.{n}" for n in names)) if c not in front.columns]
    if missing:
        raise ConfigError(
            f"{path}: columns: must hold {', '.join(missing)} (as summary.json's objectives), "
            "got none of them"
            if len(missing) > 1
            else f"{path}: column {missing[0]}: required, got none"
        )
    return front
