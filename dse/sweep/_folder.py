"""Reading a results folder back (docs/results_format.md): the checks every reader makes.

`dse show`, `dse report` and `dse export` read a folder through `read_folder`, so a folder one
of them refuses (another format version, a damaged trials table) the others refuse with the same
message. The writer is `dse.sweep._results`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from dse.errors import DSEError
from dse.sweep._results import FORMAT_VERSION

# Columns every results folder of format 1 has; the rest (pred.*, t2wh.*) are optional.
REQUIRED_COLUMNS = ("number", "state", "feasible", "on_front", "d_model", "n_layers", "gpu")
TRIALS_FILES = ("trials.parquet", "trials.csv")  # the first present is read


class ResultsError(DSEError):
    """A results folder that is missing, empty, malformed or of another format version."""


def read_folder(path: str | Path) -> tuple[dict[str, Any], pd.DataFrame]:
    """(summary, trials table) of a results folder written by `dse sweep` (format version 1),
    checked: the folder exists, summary.json is a JSON object of this format version, and the
    trials table reads, has the required columns and holds a trial. Raises ResultsError."""
    d = Path(path)
    if not d.exists():
        raise ResultsError(f"{d}: results folder does not exist (run `dse sweep SPACE.yaml` first)")
    if not d.is_dir():
        raise ResultsError(f"{d}: must be a results folder written by `dse sweep`, got a file")
    summary_file = d / "summary.json"
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
