"""Reading studies back: `dse studies` (what a storage holds) and `dse show` (a front)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import pandas as pd

from dse.errors import ConfigError
from dse.sweep._storage import StudyRecord, parse_storage, study_names


@dataclass(frozen=True)
class StudyInfo:
    name: str
    trials: int  # finished trials
    complete: int
    running: int
    budget: int | None
    sampler: str | None
    front: int | None  # feasible front size (None: not a dse study)
    objectives: tuple[str, ...]


@dataclass
class FrontView:
    name: str
    objectives: list[str]
    front: pd.DataFrame
    knee_row: int | None
    source: str


def open_for_reading(url: str) -> Any:
    """A storage opened to read (a journal file must exist; nothing is created)."""
    from dse.sweep._storage import StorageError, open_rdb

    spec = parse_storage(url, None)
    if spec.kind == "journal":
        assert spec.path is not None
        if not spec.path.is_file():
            raise StorageError(f"--storage {url}: no journal file at {spec.path}")
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        try:
            return JournalStorage(JournalFileBackend(str(spec.path)))
        except (ValueError, KeyError) as exc:
            raise StorageError(f"{spec.path}: not a readable Optuna journal ({exc})") from None
    return open_rdb(spec, heartbeat_s=None)


def _record(study: optuna.Study) -> StudyRecord | None:
    try:
        return StudyRecord.from_attrs(study.user_attrs, study.study_name)
    except ConfigError:
        return None


def study_table(study: optuna.Study) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """(trials table, front rows, objective names) of a dse study read from its storage."""
    from dse.sweep._record import trials_table
    from dse.sweep._results import mark_front
    from dse.sweep._run import space_from_record

    rec = _record(study)
    if rec is None:
        raise ConfigError(
            f"study {study.study_name!r} was not created by `dse sweep` (no search space in "
            "its user attributes)"
        )
    space = space_from_record(rec)
    table = trials_table(study.get_trials(deepcopy=False), space)
    front = mark_front(table, space)
    return table, front, list(space.objectives.names)


def list_studies(url: str) -> list[StudyInfo]:
    """Every study in a storage, with its size and (for dse studies) its front size."""
    storage = open_for_reading(url)
    out: list[StudyInfo] = []
    for name in study_names(storage):
        study = optuna.load_study(study_name=name, storage=storage)
        trials = study.get_trials(deepcopy=False)
        finished = [t for t in trials if t.state.is_finished()]
        complete = sum(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
        running = sum(t.state == optuna.trial.TrialState.RUNNING for t in trials)
        rec = _record(study)
        front = None
        objectives: tuple[str, ...] = tuple(study.metric_names or [])
        if rec is not None:
            _, f, names = study_table(study)
            front = len(f)
            objectives = tuple(names)
        out.append(
            StudyInfo(
                name=name,
                trials=len(finished),
                complete=complete,
                running=running,
                budget=rec.trials if rec else None,
                sampler=rec.sampler if rec else None,
                front=front,
                objectives=objectives,
            )
        )
    return out


def load_front(
    target: str, storage_url: str | None = None, results_root: Path = Path("results")
) -> FrontView:
    """The front of a results folder, of a study in a storage, or of results/<study>/."""
    from dse import pareto

    folder = Path(target)
    if storage_url is None and not (folder / "summary.json").is_file():
        if (results_root / target / "summary.json").is_file():
            folder = results_root / target
        elif (folder / "journal.log").is_file():
            storage_url = str(folder / "journal.log")
        elif (results_root / target / "journal.log").is_file():
            storage_url = str(results_root / target / "journal.log")
        else:
            raise ConfigError(
                f"{target}: neither a results folder (with summary.json) nor a study under "
                f"{results_root}/; give --storage URL to read a study from a database"
            )
    if storage_url is None:
        import json

        summary = json.loads((folder / "summary.json").read_text())
        names = [o["name"] for o in summary["objectives"]]
        front = pd.read_csv(folder / "front.csv")
        name, source = str(summary.get("study", folder.name)), str(folder)
    else:
        storage = open_for_reading(storage_url)
        name = target if storage_url and not Path(target).is_dir() else Path(target).name
        if name not in study_names(storage):
            known = study_names(storage)
            if len(known) == 1 and Path(target).is_dir():
                name = known[0]
            else:
                raise ConfigError(
                    f"{storage_url}: no study named {name!r} (studies there: "
                    f"{', '.join(known) or 'none'})"
                )
        study = optuna.load_study(study_name=name, storage=storage)
        _, front, names = study_table(study)
        source = storage_url
    cols = [f"obj.{n}" for n in names]
    knee = pareto.knee_index(front[cols].to_numpy(float)) if len(front) else None
    return FrontView(name, names, front, knee, source)
