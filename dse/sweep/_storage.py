"""Where a study lives: storage URLs, the default journal file, locks, and the study record.

- Default: `results/<study>/journal.log`, Optuna's JournalStorage on a file. The sweep loop runs
  on an in-memory study and appends each finished batch to the journal as one write (one JSON
  line per trial, then fsync), so the file only ever holds whole batches: a process killed at
  any moment leaves every completed batch and no half-written trial (docs/sweeps.md has the
  measurements behind this choice).
- `--storage URL`: `sqlite:///...`, `postgresql://...`, `mysql://...` open Optuna's RDBStorage
  (many processes, heartbeats so a dead worker's trials are retried); `journal:PATH` (or a path
  ending in .log) a journal file shared through file locks.

The study's user attributes hold what any process needs to join it: the search space as read,
a hash of what defines it, the sampler, seed, batch size and trial budget.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import BaseStorage
from optuna.storages.journal import BaseJournalBackend, JournalFileBackend, JournalStorage

from dse.errors import ConfigError, DSEError
from dse.space import SearchSpace

ATTR_PREFIX = "dse:"
FORMAT = 1
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


# ------------------------------------------------------------------ the journal file
class BatchedJournalBackend(BaseJournalBackend):
    """A journal file written one batch at a time.

    Logs appended by Optuna are kept in memory until `flush()` writes them with one write
    call and an fsync (JournalFileBackend.append_logs), so a crash never leaves part of a
    batch. Reads serve the file, then the pending logs, numbered as if already written. Only
    one process may write through this class (the sweep holds the folder lock).
    """

    def __init__(self, path: Path) -> None:
        recover(path)
        self._path = path
        self._inner = JournalFileBackend(str(path))
        self._pending: list[dict[str, Any]] = []
        self._n_file = 0  # logs on disk (log numbers below this are in the file)
        self._loaded = False  # the file was read once; after that only this process writes it

    def read_logs(self, log_number_from: int) -> Iterator[dict[str, Any]]:
        if not self._loaded or log_number_from < self._n_file:
            n = log_number_from
            for log in self._inner.read_logs(log_number_from):
                n += 1
                yield log
            self._n_file = max(self._n_file, n)
            self._loaded = True
        yield from self._pending[max(0, log_number_from - self._n_file) :]

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        self._pending.extend(logs)

    def flush(self) -> None:
        if self._pending:
            self._inner.append_logs(self._pending)
            self._n_file += len(self._pending)
            self._pending = []
            # The batch is on disk (fsync'd); only now does it count. A SIGKILL can cut even a
            # single large write() short (the kernel checks for fatal signals between pages), so
            # the journal's committed length is recorded beside it and restored on the next open.
            write_committed(self._path, self._path.stat().st_size)

    def discard(self) -> None:
        """Forget logs not yet written (a batch that will not be finished)."""
        self._pending = []


def committed_path(path: Path) -> Path:
    """The file that records how many bytes of the journal hold whole batches."""
    return path.with_name(path.name + ".committed")


def write_committed(path: Path, size: int) -> None:
    """Atomically record `size` as the journal's committed length (temp file, fsync, rename)."""
    target = committed_path(path)
    tmp = target.with_name(target.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(str(size))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, target)


def read_committed(path: Path) -> int | None:
    """The journal's committed length in bytes, or None when it was never recorded."""
    try:
        return int(committed_path(path).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def recover(path: Path) -> None:
    """Drop whatever a killed sweep wrote after its last whole batch, then any torn line."""
    committed = read_committed(path)
    if committed is not None and path.exists() and path.stat().st_size > committed:
        with open(path, "rb+") as f:
            f.truncate(committed)
            f.flush()
            os.fsync(f.fileno())
    repair_tail(path)


def repair_tail(path: Path) -> None:
    """Cut a torn last line (a write cut short by a crash) so the journal stays readable."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return
        size = f.seek(0, os.SEEK_END)
        block = 1 << 16
        pos = size
        while pos > 0:
            start = max(0, pos - block)
            f.seek(start)
            chunk = f.read(pos - start)
            cut = chunk.rfind(b"\n")
            if cut >= 0:
                f.truncate(start + cut + 1)
                return
            pos = start
        f.truncate(0)


class FolderLock:
    """An exclusive lock (the file `path`) held while a sweep writes a results folder or a
    journal (fcntl.flock: the kernel drops it when the process dies, so a killed sweep never
    leaves it stale)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            other = self.path.read_text().strip() or "?"
            raise ConfigError(
                f"{self.path.parent}: another dse process (pid {other}) is writing this study; "
                "wait for it to finish or use another --study/--out"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def check_writable(folder: Path) -> None:
    """Create `folder` if needed and prove a file can be written there (before any study)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(
            f"{folder}: results folder is not writable ({exc.strerror or exc})"
        ) from None


# ------------------------------------------------------------------ opening storages
def open_journal(
    spec: StorageSpec, batched: bool
) -> tuple[JournalStorage, BatchedJournalBackend | None]:
    assert spec.path is not None
    if not batched and not spec.path.parent.is_dir():
        raise StorageError(f"--storage {spec.url}: folder {spec.path.parent} does not exist")
    try:
        if batched:
            backend: BaseJournalBackend = BatchedJournalBackend(spec.path)
        else:
            if spec.path.exists():
                repair_tail(spec.path)
            backend = JournalFileBackend(str(spec.path))
        return JournalStorage(backend), backend if batched else None  # type: ignore[return-value]
    except (ValueError, json.JSONDecodeError, KeyError) as exc:
        raise StorageError(f"{spec.path}: not a readable Optuna journal ({exc})") from None
    except OSError as exc:
        raise StorageError(f"{spec.path}: cannot open journal ({exc.strerror or exc})") from None


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


# ------------------------------------------------------------------ the study record
def space_hash(space: SearchSpace) -> str:
    """Hash of what defines the study's trials: parameters and their values, constraints and
    objectives (not the sampler, seed or budget, which may change on resume)."""
    doc = {
        "params": [[p.name, [_jsonable(v) for v in p.values]] for p in space.params],
        "constraints": space.constraints,
        "objectives": list(space.objectives.names),
    }
    text = json.dumps(doc, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _jsonable(v: Any) -> Any:
    return v.item() if hasattr(v, "item") else v


@dataclass(frozen=True)
class StudyRecord:
    """What a study needs to be joined and resumed, stored in its user attributes."""

    space_file: str
    space_raw: dict[str, Any]
    space_hash: str
    sampler: str
    seed: int
    batch_size: int
    trials: int  # the budget: evaluated trials (complete or invalid) the study aims for

    def attrs(self) -> dict[str, Any]:
        return {
            f"{ATTR_PREFIX}format": FORMAT,
            f"{ATTR_PREFIX}space_file": self.space_file,
            f"{ATTR_PREFIX}space": self.space_raw,
            f"{ATTR_PREFIX}space_hash": self.space_hash,
            f"{ATTR_PREFIX}sampler": self.sampler,
            f"{ATTR_PREFIX}seed": self.seed,
            f"{ATTR_PREFIX}batch_size": self.batch_size,
            f"{ATTR_PREFIX}trials": self.trials,
        }

    @classmethod
    def from_attrs(cls, attrs: dict[str, Any], where: str) -> StudyRecord:
        try:
            return cls(
                space_file=str(attrs[f"{ATTR_PREFIX}space_file"]),
                space_raw=dict(attrs[f"{ATTR_PREFIX}space"]),
                space_hash=str(attrs[f"{ATTR_PREFIX}space_hash"]),
                sampler=str(attrs[f"{ATTR_PREFIX}sampler"]),
                seed=int(attrs[f"{ATTR_PREFIX}seed"]),
                batch_size=int(attrs[f"{ATTR_PREFIX}batch_size"]),
                trials=int(attrs[f"{ATTR_PREFIX}trials"]),
            )
        except (KeyError, TypeError, ValueError):
            raise ConfigError(
                f"{where}: this study was not created by `dse sweep` (its user attributes "
                "hold no dse search space)"
            ) from None


def json_safe(raw: Any) -> Any:
    """The YAML document as JSON-safe data (dates and other scalars as strings)."""
    return json.loads(json.dumps(raw, default=str))


def study_names(storage: BaseStorage) -> list[str]:
    return [s.study_name for s in storage.get_all_studies()]


def load_study(storage: BaseStorage, name: str, where: str) -> optuna.Study:
    if name not in study_names(storage):
        known = ", ".join(study_names(storage)) or "none"
        raise ConfigError(f"{where}: no study named {name!r} (studies there: {known})")
    return optuna.load_study(study_name=name, storage=storage)
