"""Reading studies back: `dse studies` (what a storage holds) and `dse show` (a front)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import pandas as pd

from dse.errors import ConfigError, DSEError
from dse.sweep.results import read_front, read_results, summary_study
from dse.sweep.storage import parse_storage, study_names
from dse.sweep.study_record import StudyRecord


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
    trials: pd.DataFrame | None = None  # every trial of the study (None: not read)
    directions: tuple[str, ...] | None = None  # "minimize" / "maximize" per objective


def open_for_reading(url: str, name_hint: str | None = None, say_losses: bool = True) -> Any:
    """A storage opened to read (a journal file must exist; nothing is created or written).
    A damaged journal is read as its intact records, and what was lost is said on stderr."""
    from dse.sweep._journal_scan import read_journal
    from dse.sweep.storage import StorageError, open_rdb, warn

    spec = parse_storage(url, None)
    if spec.kind == "journal":
        assert spec.path is not None
        if spec.path.is_dir():
            raise StorageError(f"--storage {url}: is a folder, expected a journal file")
        if not spec.path.is_file():
            raise StorageError(f"--storage {url}: no journal file at {spec.path}")
        if name_hint is None:  # a lost study creation takes its results folder's name
            name_hint = summary_study(spec.path.parent)
        storage, scan = read_journal(spec.path, name_hint)
        if say_losses:
            warn(scan.messages())
        return storage
    return open_rdb(spec, heartbeat_s=None)


def stale_results(folder: Path) -> list[str]:
    """Notes when a results folder's summary.json is older than the journal beside it (a
    sweep killed, or failing, after it appended trials): what the journal lost, if anything,
    and how many trials the results miss. Empty when the results are up to date (the journal
    is then not read: a sweep writes its results after its last journal write)."""
    journal, summary = folder / "journal.log", folder / "summary.json"
    try:
        if journal.stat().st_mtime_ns <= summary.stat().st_mtime_ns:
            return []
    except OSError:
        return []
    from dse.sweep._journal_scan import read_journal
    from dse.sweep.storage import StorageError

    name = summary_study(folder)
    try:
        storage, scan = read_journal(journal, name)
    except StorageError as exc:
        return [str(exc)]
    notes = scan.messages()
    try:
        counted = json.loads(summary.read_text())["counts"]["trials"]
    except (OSError, ValueError, KeyError, TypeError):
        counted = None
    trials = None
    for st in storage.get_all_studies():
        if st.study_name == name:
            trials = sum(
                t.state.is_finished() for t in storage.get_all_trials(st._study_id, deepcopy=False)
            )
    if trials is not None and trials != counted:
        notes.append(
            f"{summary}: older than journal.log, which holds {trials} finished trials of study "
            f"{name!r} (the summary counts {counted}): a sweep stopped before writing its "
            "results; run the same `dse sweep` again to bring them up to date"
        )
    elif notes:
        notes.append(f"{summary}: written before journal.log was damaged")
    return notes


def _record(study: optuna.Study) -> StudyRecord | None:
    try:
        return StudyRecord.from_attrs(study.user_attrs, study.study_name)
    except ConfigError:
        return None


def study_table(study: optuna.Study) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """(trials table, front rows, objective names) of a dse study read from its storage."""
    from dse.sweep._trials import trials_table
    from dse.sweep.results import mark_front
    from dse.sweep.study_record import space_from_record

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
            try:
                _, f, names = study_table(study)
            except DSEError as exc:  # a record that no longer parses (damaged, older dse)
                from dse.sweep.storage import warn

                warn([f"{url}: study {name!r}: no front ({exc})"])
            else:
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
    if storage_url is None and folder.is_file():
        raise ConfigError(
            f"{target}: is a file; give a results folder, a study name under {results_root}/, "
            "or --storage URL"
        )
    if storage_url is None and not (folder / "summary.json").is_file():
        if (results_root / target / "summary.json").is_file():
            folder = results_root / target
        elif (folder / "journal.log").is_file():
            storage_url = str(folder / "journal.log")
        elif (results_root / target / "journal.log").is_file():
            storage_url = str(results_root / target / "journal.log")
        elif folder.is_dir():
            raise ConfigError(
                f"{target}: must be a results folder written by `dse sweep`, got a folder with "
                "no summary.json and no journal.log"
            )
        else:
            raise ConfigError(
                f"{target}: neither a results folder (with summary.json) nor a study under "
                f"{results_root}/; give --storage URL to read a study from a database"
            )
    notes: list[str] = []
    if storage_url is None:
        from dse.sweep.storage import warn

        notes = stale_results(folder)
        if notes and any("older than journal.log" in n for n in notes):
            warn([*notes, f"{folder}: showing the front of journal.log instead"])
            storage_url = str(folder / "journal.log")
        else:
            warn(notes)
    trials: pd.DataFrame | None = None
    if storage_url is None:
        summary, trials = read_results(folder)  # the checks `dse report` makes
        _check_objectives(summary, folder / "summary.json")
        names = [str(o["name"]) for o in summary["objectives"]]
        dirs = [str(o.get("direction", "minimize")) for o in summary["objectives"]]
        front = read_front(folder, names)
        name, source = str(summary.get("study", folder.name)), str(folder)
    else:
        hint = summary_study(folder) if folder.is_dir() else None
        storage = open_for_reading(storage_url, hint, say_losses=not notes)
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
        trials, front, names = study_table(study)
        dirs = [d.name.lower() for d in study.directions]  # "minimize" / "maximize"
        source = storage_url
    cols = [f"obj.{n}" for n in names]
    knee = pareto.knee_index(front[cols].to_numpy(float), dirs) if len(front) else None
    return FrontView(name, names, front, knee, source, trials, tuple(dirs))


def _check_objectives(summary: dict[str, Any], path: Path) -> None:
    """summary.json names the study's objectives (what `dse show` prints)."""
    objectives = summary.get("objectives")
    if (
        not isinstance(objectives, list)
        or not all(isinstance(o, dict) and isinstance(o.get("name"), str) for o in objectives)
        or not objectives
    ):
        got = "no objective names"
        raise ConfigError(
            f"{path}: objectives: must list the study's objectives by name, got {got}"
        )
