"""Where a study lives: `--storage` URLs, opening an RDB storage, finding a study in one.

- Default: `results/<study>/journal.log`, Optuna's JournalStorage on a file. The sweep loop runs
  on an in-memory study and appends each finished batch to the journal as one write (one JSON
  line per trial, then fsync), so the file only ever holds whole batches: a process killed at
  any moment leaves every completed batch and no half-written trial (docs/sweeps.md has the
  measurements behind this choice; the journal itself is `_journal`).
- `--storage URL`: `sqlite:///...`, `postgresql://...`, `mysql://...` open Optuna's RDBStorage
  (many processes, heartbeats so a dead worker's trials are retried); `journal:PATH` (or a path
  ending in .log) a journal file shared through file locks.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import BaseStorage

from dse.errors import ConfigError, DSEError

RDB_SCHEMES = ("sqlite", "postgresql", "postgres", "mysql")
DEFAULT_HEARTBEAT_S = 10  # RDB trial heartbeat; a trial silent for 2 intervals is stale


class StorageError(DSEError):
    """A storage URL that cannot be used (unknown scheme, unreachable server, bad file)."""


@dataclass(frozen=True)
class StorageSpec:
    kind: str  # "journal" | "rdb"
    url: str  # as given (journal: journal:///abs/path)
    path: Path | None = None  # the journal file

    @property
    def display(self) -> str:
        return mask_url(self.url)

    @property
    def shared(self) -> bool:
        """True when other processes may write the study at the same time."""
        return self.kind == "rdb"


def mask_url(url: str) -> str:
    """The URL with any password replaced by ***, for messages and summaries."""
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)


def parse_storage(url: str | None, out_dir: Path | None) -> StorageSpec:
    """Turn `--storage` (None: the default journal in `out_dir`) into a StorageSpec."""
    if url is None:
        if out_dir is None:
            raise ConfigError("--storage is required here (there is no results folder)")
        path = (out_dir / "journal.log").resolve()
        return StorageSpec("journal", f"journal:///{str(path).lstrip('/')}", path)
    scheme = url.split("://", 1)[0].split("+", 1)[0].lower() if "://" in url else ""
    if scheme in RDB_SCHEMES:
        return StorageSpec("rdb", url)
    if url.startswith("journal:"):
        rest = url[len("journal:") :]
        rest = "/" + rest.lstrip("/") if rest.startswith("//") else rest
        if not rest:
            raise StorageError(f"--storage {url!r}: a journal URL needs a path (journal:PATH)")
        path = Path(rest).resolve()
        return StorageSpec("journal", f"journal:///{str(path).lstrip('/')}", path)
    if "://" not in url and (url.endswith(".log") or url.endswith(".jsonl")):
        path = Path(url).resolve()
        return StorageSpec("journal", f"journal:///{str(path).lstrip('/')}", path)
    raise StorageError(
        f"--storage {mask_url(url)!r}: unknown storage URL; use sqlite:///FILE.db, "
        "postgresql://USER@HOST/DB, mysql://..., journal:FILE.log, or leave it out for "
        "results/<study>/journal.log"
    )


def warn(notes: list[str]) -> None:
    """Say on stderr what a journal lost (one line per note)."""
    import sys

    for note in notes:
        print(f"dse: warning: {note}", file=sys.stderr)


def open_rdb(spec: StorageSpec, heartbeat_s: int | None = DEFAULT_HEARTBEAT_S) -> BaseStorage:
    """RDBStorage with heartbeats: a worker that dies leaves trials that others fail and
    re-queue (RetryHeartbeatStaleTrialCallback) so no configuration is lost."""
    url = spec.url
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    if url.startswith("postgresql://"):
        url = f"postgresql+{_postgres_driver()}://" + url[len("postgresql://") :]
    kwargs: dict[str, Any] = {}
    if heartbeat_s:
        kwargs = {
            "heartbeat_interval": int(heartbeat_s),
            "grace_period": 2 * int(heartbeat_s),
            "heartbeat_stale_trial_callback": optuna.storages.RetryHeartbeatStaleTrialCallback(),
        }
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rdb = optuna.storages.RDBStorage(url, engine_kwargs={"pool_pre_ping": True}, **kwargs)
        # The caching wrapper Optuna itself puts around an RDBStorage: every object of this
        # process (study, trials, claims) must go through the same one, or it loses track of
        # the trials claimed here.
        return optuna.storages.get_storage(rdb)
    except ImportError as exc:
        raise StorageError(
            f"--storage {spec.display}: the database driver is not installed ({exc})"
        ) from None
    except Exception as exc:  # sqlalchemy errors: unreachable server, bad credentials, ...
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise StorageError(f"--storage {spec.display}: cannot open ({first})") from None


def _postgres_driver() -> str:
    """SQLAlchemy 2.1 defaults postgresql:// to psycopg 3; use psycopg2 when only it exists."""
    import importlib.util

    if importlib.util.find_spec("psycopg") is not None:
        return "psycopg"
    return "psycopg2"


def study_names(storage: BaseStorage) -> list[str]:
    return [s.study_name for s in storage.get_all_studies()]


def load_study(storage: BaseStorage, name: str, where: str) -> optuna.Study:
    if name not in study_names(storage):
        known = ", ".join(study_names(storage)) or "none"
        raise ConfigError(f"{where}: no study named {name!r} (studies there: {known})")
    return optuna.load_study(study_name=name, storage=storage)
