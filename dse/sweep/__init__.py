"""Optuna multi-objective sweeps over a YAML search space: batched, persisted, resumable.

    run_sweep(SweepOptions(space_file=...)) -> SweepOutcome     # `dse sweep`
    run_worker(storage_url, study_name, max_trials=None) -> int # `dse worker`
    evaluate(space, cols) -> Evaluation                         # the objective, on arrays
    exact_front(space) -> ExactFront                            # exhaustive, vectorised
    list_studies(storage_url) -> list[StudyInfo]                # `dse studies`
    load_front(target, storage_url=None) -> FrontView           # `dse show`
    read_results(folder) -> (summary, trials)                   # the checked reader (results.py)

docs/sweeps.md explains the design and its measurements; docs/results_format.md the files.
"""

from __future__ import annotations

from dse.sweep._enumerate import ExactFront, exact_front
from dse.sweep._evaluate import Evaluation, check_predictor, evaluate
from dse.sweep._options import SweepOptions, SweepOutcome
from dse.sweep._run import run_sweep
from dse.sweep._shared import run_worker
from dse.sweep.results import (
    Catalogue,
    ResultsError,
    read_catalogue,
    read_results,
    read_summary,
    write_results,
)
from dse.sweep.space_index import space_columns
from dse.sweep.study_reader import FrontView, StudyInfo, list_studies, load_front
from dse.sweep.study_record import space_from_record

__all__ = [
    "Catalogue",
    "Evaluation",
    "ExactFront",
    "FrontView",
    "ResultsError",
    "StudyInfo",
    "SweepOptions",
    "SweepOutcome",
    "check_predictor",
    "evaluate",
    "exact_front",
    "list_studies",
    "load_front",
    "read_catalogue",
    "read_results",
    "read_summary",
    "run_sweep",
    "run_worker",
    "space_columns",
    "space_from_record",
    "write_results",
]
