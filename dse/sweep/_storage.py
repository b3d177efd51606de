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
import itertools
import json
import os
import re
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import BaseStorage
from optuna.storages.journal import BaseJournalBackend, JournalFileBackend, JournalStorage

from dse.errors import ConfigError, DSEError
from dse.files import atomic_path, write_atomic
from dse.spec.space import SearchSpace

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

    Opening it first drops what a killed sweep left after its last whole batch (`recover`),
    then checks every record (`scan_journal`): a journal damaged anywhere is rewritten with
    its intact records (`rewrite_journal`; the damaged file is kept beside it) and what was
    lost is printed on stderr, before anything new is appended.
    """

    def __init__(self, path: Path) -> None:
        refuse_foreign(path)
        notes = recover(path)
        scan = scan_journal(path, name_hint=folder_study(path.parent))
        if scan.losses and not scan.usable:
            warn(notes)
            first = scan.losses[0]
            raise StorageError(
                f"{path}:{first.line}: must be an Optuna journal (one JSON record a line), got "
                f"no usable record in {scan.lines} lines (line {first.line}: {first.why})"
            )
        if scan.losses:
            notes += scan.messages()
            kept = rewrite_journal(path, scan)
            notes.append(
                f"{path}: rewritten with its {scan.usable} readable records; the damaged "
                f"file is kept as {kept.name}"
            )
        warn(notes)
        self._path = path
        self._inner = JournalFileBackend(str(path))
        self._pending: list[dict[str, Any]] = []
        self._n_file = 0  # logs on disk (log numbers below this are in the file)
        self._loaded = False  # the file was read once; after that only this process writes it
        self._scan: JournalScan | None = scan  # replayed already: adopted by `adopt`

    def adopt(self, storage: JournalStorage) -> None:
        """Give `storage` the scan's replay of the file (instead of replaying it again)."""
        assert self._scan is not None
        adopt_replay(storage, self._scan)
        self._n_file = self._scan.usable
        self._loaded = True
        self._scan = None

    def read_logs(self, log_number_from: int) -> Iterator[dict[str, Any]]:
        if self._scan is not None:  # the storage being built: `adopt` gives it the file
            return
        if not self._loaded or log_number_from < self._n_file:
            n = log_number_from
            try:
                for log in self._inner.read_logs(log_number_from):
                    n += 1
                    yield log
            except (ValueError, KeyError) as exc:  # changed under us after the scan
                raise StorageError(
                    f"{self._path}:{n + 1}: record unreadable ({exc}); run the command again "
                    "to recover the journal's intact records"
                ) from None
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


class RecoveredBackend(BaseJournalBackend):
    """The intact records of a journal (`scan_journal`), served read-only."""

    def __init__(self, scan: JournalScan) -> None:
        self._scan = scan
        self._path = scan.path
        self.building = False  # True while the storage is built (it adopts the scan's replay)

    def read_logs(self, log_number_from: int) -> Iterator[dict[str, Any]]:
        # A snapshot: nothing new after the scan (whose replay the storage adopts).
        if self.building or log_number_from >= self._scan.usable:
            return
        yield from itertools.islice(self._scan.logs(), log_number_from, None)

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        raise StorageError(f"{self._path}: opened to read; nothing may be written to it here")


def adopt_replay(storage: JournalStorage, scan: JournalScan) -> None:
    """Install the scan's replay as `storage`'s state, as Optuna's own snapshot restore does
    (JournalStorage.restore_replay_result): the records are then not parsed a second time.
    The replay ignores no record it would not ignore anyway: none was written by `storage`."""
    r = scan.replay
    r._worker_id_prefix = storage._worker_id_prefix
    r._worker_id_to_owned_trial_id = {}
    r._last_created_trial_id_by_this_process = -1
    r.log_number_read = scan.usable
    storage._replay_result = r


def refuse_foreign(path: Path) -> None:
    """Refuse, before anything is cut or rewritten, a file that is no journal at all (no
    Optuna record in its first MiB): recovery is for a damaged journal, not for another file."""
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 20)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StorageError(f"{path}: cannot read journal ({exc.strerror or exc})") from None
    if not head or b'"op_code"' in head:
        return
    _, why = _parse(head.split(b"\n", 1)[0])
    raise StorageError(
        f"{path}:1: must be an Optuna journal (one JSON record a line), got no journal record "
        f"(line 1: {why or 'no op_code'}); nothing was changed"
    )


def warn(notes: list[str]) -> None:
    """Say on stderr what a journal lost (one line per note)."""
    import sys

    for note in notes:
        print(f"dse: warning: {note}", file=sys.stderr)


OP_MARK = b'{"op_code"'
TAIL_BYTES = 4096  # the committed record also hashes this many bytes before the committed end


def committed_path(path: Path) -> Path:
    """The file that records how many bytes of the journal hold whole batches."""
    return path.with_name(path.name + ".committed")


def _tail_hash(path: Path, size: int) -> str:
    with open(path, "rb") as f:
        f.seek(max(0, size - TAIL_BYTES))
        return hashlib.sha256(f.read(size - max(0, size - TAIL_BYTES))).hexdigest()[:16]


def write_committed(path: Path, size: int) -> None:
    """Atomically record `size` as the journal's committed length (temp file, fsync, rename),
    with a hash of the bytes just before it: a journal that grew by an append is cut back to
    it on the next open, one changed elsewhere (the hash differs) is left to `scan_journal`."""
    write_atomic(committed_path(path), f"{size} {_tail_hash(path, size)}")


def _read_committed_record(path: Path) -> tuple[int, str | None] | None:
    try:
        parts = committed_path(path).read_text().split()
        return int(parts[0]), (parts[1] if len(parts) > 1 else None)
    except (FileNotFoundError, ValueError, IndexError):
        return None


def read_committed(path: Path) -> int | None:
    """The journal's committed length in bytes, or None when it was never recorded."""
    rec = _read_committed_record(path)
    return None if rec is None else rec[0]


def committed_limit(path: Path) -> int | None:
    """How many bytes of the journal a reader should trust: the committed length when the
    journal still holds those bytes unchanged (a sweep may be appending past it), else all."""
    rec = _read_committed_record(path)
    if rec is None or not path.exists():
        return None
    size, tail = rec
    if path.stat().st_size < size:
        return None
    if tail is not None and _tail_hash(path, size) != tail:
        return None
    return size


def recover(path: Path) -> list[str]:
    """Drop whatever a killed sweep wrote after its last whole batch, then any torn line.
    Returns what was dropped, as `JOURNAL:LINE: what` notes."""
    notes: list[str] = []
    limit = committed_limit(path)
    if limit is not None and path.stat().st_size > limit:
        with open(path, "rb+") as f:
            f.seek(limit)
            extra = f.read()
            line = _count_lines(path, limit) + 1
            f.truncate(limit)
            f.flush()
            os.fsync(f.fileno())
        notes.append(
            f"{path}:{line}: {extra.count(OP_MARK)} records of a batch that was not "
            f"finished ({len(extra)} bytes after the last whole batch) dropped; they run again"
        )
    cut = repair_tail(path)
    if cut is not None:
        notes.append(f"{path}:{cut}: last record cut short (a write interrupted), dropped")
    return notes


def _count_lines(path: Path, size: int) -> int:
    n = 0
    with open(path, "rb") as f:
        left = size
        while left > 0:
            chunk = f.read(min(left, 1 << 20))
            if not chunk:
                break
            n += chunk.count(b"\n")
            left -= len(chunk)
    return n


def repair_tail(path: Path) -> int | None:
    """Cut a torn last line (a write cut short by a crash) so the journal stays readable;
    returns the line number that was cut, or None when the journal ended whole."""
    if not path.exists() or path.stat().st_size == 0:
        return None
    with open(path, "rb+") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return None
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
                return _count_lines(path, start + cut + 1) + 1
            pos = start
        f.truncate(0)
        return 1


# ------------------------------------------------------------------ damaged journals
@dataclass(frozen=True)
class Loss:
    """One journal line that could not be used, and what it took with it."""

    line: int
    what: str  # "record unreadable (...), skipped"
    detail: str = ""  # which study, trial or attribute it affected
    why: str = ""  # why the line is unusable ("not JSON at column 12: ...")

    def message(self, path: Path) -> str:
        return f"{path}:{self.line}: {self.what}" + (f": {self.detail}" if self.detail else "")


@dataclass
class JournalScan:
    """What a journal's replay should see: every usable line, placeholders for lost
    creations, and a Loss per unusable line. The records are read again from the file on
    demand (`logs()`), so a scan holds no copy of a large journal."""

    path: Path
    limit: int | None  # bytes of the file scanned (None: all)
    losses: list[Loss]
    lines: int  # lines read
    usable: int  # records the replay gets (placeholders included)
    skip: set[int]  # lines (1-based) left out
    holders: dict[int, dict[str, Any]]  # line -> the placeholder record replayed instead
    replay: Any = field(default=None, repr=False)  # the scan's replay of those records

    def messages(self) -> list[str]:
        return [loss.message(self.path) for loss in self.losses]

    def logs(self) -> Iterator[dict[str, Any]]:
        for line, (raw, _) in enumerate(_read_lines(self.path, self.limit), 1):
            if line in self.holders:
                yield self.holders[line]
            elif line not in self.skip:
                yield json.loads(raw)

    def write(self, f: Any) -> None:
        """Write the usable lines (verbatim) and the placeholders to the binary file `f`."""
        for line, (raw, _) in enumerate(_read_lines(self.path, self.limit), 1):
            if line in self.holders:
                f.write(json.dumps(self.holders[line], separators=(",", ":")).encode() + b"\n")
            elif line not in self.skip:
                f.write(raw + b"\n")


def _read_lines(path: Path, limit: int | None) -> Iterator[tuple[bytes, bool]]:
    """(line without its newline, whether it is torn: no newline) for the first `limit`
    bytes of `path`; nothing when the file does not exist."""
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below, also on early exit
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StorageError(f"{path}: cannot read journal ({exc.strerror or exc})") from None
    with f:
        left = limit
        for raw in f:
            if left is not None:
                if left <= 0:
                    break
                raw = raw[:left]
                left -= len(raw)
            if raw.endswith(b"\n"):
                yield raw[:-1], False
            else:
                yield raw, True


RECOVERY_WORKER = "dse-recovery"  # worker id of the placeholder records a rewrite adds
LOST_ATTR = "dse:lost"  # a placeholder trial's user attribute: the journal line it stands for
_OP = re.compile(rb'\s*\{\s*"op_code"\s*:\s*(\d+)')
_SID = re.compile(rb'"study_id"\s*:\s*(\d+)')
_TID = re.compile(rb'"trial_id"\s*:\s*(\d+)')
_ATTR = re.compile(rb'"(?:user|system)_attr"\s*:\s*\{\s*"((?:[^"\\]|\\.){1,200})"')
_OPS = {
    0: "a study's creation",
    1: "a study's deletion",
    2: "user attribute",
    3: "system attribute",
    4: "a trial's creation",
    5: "a parameter",
    6: "its state and values",
    7: "an intermediate value",
    8: "user attribute",
    9: "system attribute",
    10: "a discard of trials",
}


def _parse(raw: bytes) -> tuple[dict[str, Any] | None, str]:
    """A journal line as a record, or (None, why it is unreadable)."""
    if not raw.strip():
        return None, "empty line"
    try:
        log = json.loads(raw)
    except UnicodeDecodeError:
        return None, "not UTF-8 text"
    except json.JSONDecodeError as exc:
        return None, f"not JSON at column {exc.colno}: {exc.msg}"
    except RecursionError:
        return None, "not JSON: nested too deeply"
    if (
        not isinstance(log, dict)
        or type(log.get("op_code")) is not int
        or log["op_code"] not in _OPS
        or not isinstance(log.get("worker_id"), str)
    ):
        return None, "not an Optuna journal record"
    return log, ""


def scan_journal(path: Path, limit: int | None = None, name_hint: str | None = None) -> JournalScan:
    """Every usable record of the journal at `path` (its first `limit` bytes), and a Loss for
    each line that is not.

    A line that is not a whole JSON record, or whose operation Optuna cannot apply, is
    skipped. Ids stay consistent: a lost trial creation is replaced by a failed trial marked
    `dse:lost` (later trials keep their ids and numbers; later records about the lost trial
    are skipped and named), a lost study creation by a study named `name_hint` (the results
    folder's summary.json) or `lost-study-line-N`, so its later records still apply. A line
    whose operation cannot be told is assumed to have created nothing.
    """
    from optuna.storages.journal._storage import JournalStorageReplayResult

    replay = JournalStorageReplayResult(f"dse-scan-{os.getpid()}-{id(path)}-")
    usable = 0
    skip: set[int] = set()
    holders: dict[int, dict[str, Any]] = {}
    losses: list[Loss] = []
    lost_trials: dict[int, int] = {}  # trial id -> line its creation was lost at
    last_study: int | None = None  # study of the last trial created
    n_lines = 0

    def study_label(sid: int | None) -> str:
        st = replay._studies.get(sid) if sid is not None else None
        return f"study {st.study_name!r}" if st is not None else "an unknown study"

    def trial_label(tid: int | None) -> str:
        t = replay._trials.get(tid) if tid is not None else None
        if t is None:
            return f"trial id {tid}" if tid is not None else "an unknown trial"
        return f"trial {t.number} of {study_label(replay._trial_id_to_study_id.get(tid))}"

    for line, (raw, last) in enumerate(_read_lines(path, limit), 1):
        n_lines = line
        log, why = _parse(raw) if not last else (None, "cut short")
        if log is not None:
            try:
                replay.apply_logs([log])
            except Exception as exc:  # a JSON record Optuna cannot apply (fields damaged)
                if isinstance(exc, json.JSONDecodeError):  # a field holding JSON text
                    why = f"not a usable journal record: a field is not JSON ({exc.msg})"
                else:
                    why = f"not a usable journal record: {type(exc).__name__}: {exc}"
            else:
                op = log["op_code"]
                tid = log.get("trial_id")
                if op in (5, 6, 7, 8, 9) and tid in lost_trials:
                    losses.append(
                        Loss(
                            line,
                            "record skipped",
                            f"it updates {trial_label(tid)}, whose creation was lost at line "
                            f"{lost_trials[tid]}",
                        )
                    )
                if op == 4:
                    last_study = log.get("study_id")
                usable += 1
                continue
        skip.add(line)
        source = raw if log is None else json.dumps(log).encode()
        what = "last record cut short, skipped" if last else f"record unreadable ({why}), skipped"
        if why == "empty line" and not last:
            losses.append(Loss(line, "empty line, skipped", "nothing lost", why))
            continue
        m = _OP.match(source)
        op = int(m.group(1)) if m and int(m.group(1)) in _OPS else None
        ms, mt, ma = _SID.search(source), _TID.search(source), _ATTR.search(source)
        sid = int(ms.group(1)) if ms else None
        tid = int(mt.group(1)) if mt else None
        key = ma.group(1).decode("utf-8", "replace") if ma else None
        if sid is None and op in (0, 2, 3, 4):
            sid = last_study if last_study is not None else _only(replay._studies)
        if op == 4 and last:  # nothing follows it: no placeholder needed to keep numbers
            number = len(replay._study_id_to_trial_ids.get(sid, [])) if sid is not None else None
            trial = f"trial {number} of {study_label(sid)}" if number is not None else "a trial"
            losses.append(
                Loss(line, what, why=why, detail=f"{trial} lost (a resumed sweep runs it again)")
            )
        elif op == 4:
            if sid is None or sid not in replay._studies:
                losses.append(
                    Loss(
                        line,
                        what,
                        why=why,
                        detail="a trial of an unknown study lost (later trials keep theirs)",
                    )
                )
                continue
            number = len(replay._study_id_to_trial_ids[sid])
            new_id = len(replay._trials)
            holder = _lost_trial(sid, f"{path.name}:{line}")
            replay.apply_logs([holder])
            lost_trials[new_id] = line
            last_study = sid
            holders[line] = holder
            usable += 1
            losses.append(
                Loss(
                    line,
                    what,
                    why=why,
                    detail=f"trial {number} of {study_label(sid)} lost (kept as a failed trial marked "
                    f"{LOST_ATTR}, so later trials keep their numbers; a resumed sweep runs one "
                    "more)",
                )
            )
        elif op == 0:
            sid = replay._next_study_id
            later, n_obj = _lookahead(path, limit, line, sid)
            names = later | {st.study_name for st in replay._studies.values()}
            name = name_hint if name_hint and name_hint not in names else f"lost-study-line-{line}"
            holder = {
                "op_code": 0,
                "worker_id": RECOVERY_WORKER,
                "study_name": name,
                "directions": [1] * n_obj,
            }
            replay.apply_logs([holder])
            holders[line] = holder
            usable += 1
            losses.append(
                Loss(
                    line,
                    what,
                    why=why,
                    detail=f"the creation of a study lost; its later records are kept under the name "
                    f"{name!r} ({n_obj} objectives, assumed minimised)",
                )
            )
        elif op in (2, 3):
            attr = f"its {_OPS[op]} {key!r}" if key else f"a {_OPS[op]} (name unreadable)"
            losses.append(Loss(line, what, why=why, detail=f"{study_label(sid)} lost {attr}"))
        elif op in (5, 6, 7, 8, 9):
            attr = f" {key!r}" if key and op in (8, 9) else ""
            losses.append(
                Loss(line, what, why=why, detail=f"{trial_label(tid)} lost {_OPS[op]}{attr}")
            )
        elif op is not None:
            losses.append(Loss(line, what, why=why, detail=f"{_OPS[op]} lost"))
        else:
            losses.append(
                Loss(
                    line,
                    what,
                    why=why,
                    detail="what it recorded cannot be told (assumed to create nothing)",
                )
            )
    return JournalScan(path, limit, losses, n_lines, usable, skip, holders, replay)


def _only(studies: dict[int, Any]) -> int | None:
    return next(iter(studies)) if len(studies) == 1 else None


def _lookahead(path: Path, limit: int | None, after: int, sid: int) -> tuple[set[str], int]:
    """For a lost study creation at line `after`: the study names created later (so the
    placeholder's name takes no one's), and the objectives of study `sid` from its first trial
    with values (2 when none has)."""
    names: set[str] = set()
    n_obj: int | None = None
    for line, (raw, _) in enumerate(_read_lines(path, limit), 1):
        if line <= after:
            continue
        m = _OP.match(raw)
        op = int(m.group(1)) if m else None
        if op == 0 or (op == 4 and n_obj is None):
            log, _ = _parse(raw)
            if log is None:
                continue
            if op == 0 and isinstance(log.get("study_name"), str):
                names.add(log["study_name"])
            elif log.get("study_id") == sid:
                values = log.get("values")
                if isinstance(values, list) and values:
                    n_obj = len(values)
                elif log.get("value") is not None:
                    n_obj = 1
    return names, n_obj or 2


def _lost_trial(sid: int, where: str) -> dict[str, Any]:
    """A CREATE_TRIAL record of a failed trial that stands for one whose record was lost
    (started and finished at the time of the recovery: the lost times are unknown)."""
    from datetime import UTC, datetime

    now = datetime.now(UTC).isoformat(timespec="microseconds")
    return {
        "op_code": 4,
        "worker_id": RECOVERY_WORKER,
        "study_id": sid,
        "datetime_start": now,
        "datetime_complete": now,
        "state": int(optuna.trial.TrialState.FAIL),
        "value": None,
        "values": None,
        "distributions": {},
        "params": {},
        "user_attrs": {LOST_ATTR: where},
        "system_attrs": {},
        "intermediate_values": {},
    }


def rewrite_journal(path: Path, scan: JournalScan) -> Path:
    """Replace a damaged journal by its usable records; keep the damaged file beside it as
    `<name>.damaged-<UTC time>` (a hard link, so the switch is one atomic rename). Returns
    the kept file's path."""
    from datetime import UTC, datetime

    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    kept = path.with_name(f"{path.name}.damaged-{stamp}")
    k = 1
    while kept.exists():
        k += 1
        kept = path.with_name(f"{path.name}.damaged-{stamp}-{k}")
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            scan.write(f)
        try:  # keep the damaged file before the repaired one replaces it
            os.link(path, kept)
        except OSError:
            import shutil

            shutil.copy2(path, kept)
    write_committed(path, path.stat().st_size)
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return kept


def read_journal(path: Path, name_hint: str | None = None) -> tuple[JournalStorage, JournalScan]:
    """A journal opened to read, damaged or not: its intact records (up to the committed
    length, so a sweep appending meanwhile is not mistaken for damage) and what was lost.
    A file with no usable record at all is a StorageError naming its first line."""
    scan = scan_journal(path, committed_limit(path), name_hint)
    if scan.losses and not scan.usable:
        first = scan.losses[0]
        raise StorageError(
            f"{path}:{first.line}: must be an Optuna journal (one JSON record a line), got "
            f"no usable record in {scan.lines} lines (line {first.line}: {first.why})"
        )
    try:
        backend = RecoveredBackend(scan)
        backend.building = True
        storage = JournalStorage(backend)
        adopt_replay(storage, scan)
        backend.building = False
        return storage, scan
    except Exception as exc:  # the scan applied each record; this is a bug, not user input
        raise StorageError(f"{path}: not a readable Optuna journal ({exc})") from None


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


RESULT_FILES = (
    "summary.json",
    "front.csv",
    "trials.csv",
    "trials.parquet",
    "exact_front.csv",
    "report.html",
)


def study_folder(
    study: str | None, space: SearchSpace, out: Path | None, root: Path = Path("results")
) -> tuple[str, Path]:
    """The study's name (`--study`, else the YAML's `name`, else the file's stem) and its
    results folder (`--out`, else ROOT/<name>, which must resolve inside ROOT)."""
    from dse.yamlio import NAME_RULE, safe_name

    if study is not None:
        if not safe_name(study):
            raise ConfigError(f"--study: {NAME_RULE}, got {study!r}")
        name = study
    else:
        name = space.name
        if not safe_name(name):
            given = "name" in (space.raw or {})
            what = "name" if given else "name (none given: the file's name is used)"
            raise ConfigError(
                f"{space.source}: {what}: {NAME_RULE}, got {name!r}; give --study NAME"
            )
    if out is not None:
        return name, out
    folder = root / name
    base = root.resolve()
    if not folder.resolve().is_relative_to(base):
        raise ConfigError(
            f"{folder}: the results folder must stay under {root}/, got one that resolves to "
            f"{folder.resolve()} (a link?); give --out FOLDER"
        )
    return name, folder


def folder_study(folder: Path) -> str | None:
    """The study a results folder holds: summary.json's, else its default journal's first."""
    summary = folder / "summary.json"
    if summary.is_file():
        try:
            name = json.loads(summary.read_text()).get("study")
        except (OSError, ValueError, AttributeError):
            name = None
        if isinstance(name, str):
            return name
    journal = folder / "journal.log"
    if journal.is_file() and journal.stat().st_size:
        try:
            with open(journal, "rb") as f:
                first, _ = _parse(f.readline())
        except OSError:
            first = None
        if first is not None and first.get("op_code") == 0:
            return str(first.get("study_name"))
    return None


def claim_folder(folder: Path, name: str, spec: StorageSpec, replace: bool) -> None:
    """Refuse a second study into a results folder that holds another one (unless `replace`:
    then the folder's results, and its default journal, are removed first). Resuming the
    study the folder holds is always allowed. Call with the folder lock held."""
    held = folder_study(folder)
    if held is None or (held == name and not replace):
        return
    if not replace:
        raise ConfigError(
            f"{folder}: holds study {held!r}; use another --out or --study, or --replace to "
            f"overwrite it, got study {name!r}"
        )
    default = (folder / "journal.log").resolve()
    doomed = [folder / f for f in RESULT_FILES]
    if spec.path is not None and spec.path == default:
        doomed += [default, committed_path(default)]
    for f in doomed:
        with contextlib.suppress(FileNotFoundError):
            f.unlink()


# ------------------------------------------------------------------ opening storages
def open_journal(
    spec: StorageSpec, batched: bool
) -> tuple[JournalStorage, BatchedJournalBackend | None]:
    assert spec.path is not None
    if not batched and not spec.path.parent.is_dir():
        raise StorageError(f"--storage {spec.url}: folder {spec.path.parent} does not exist")
    try:
        if batched:
            batched_backend = BatchedJournalBackend(spec.path)
            storage = JournalStorage(batched_backend)
            batched_backend.adopt(storage)
            return storage, batched_backend
        else:
            if spec.path.exists():
                repair_tail(spec.path)
            backend = JournalFileBackend(str(spec.path))
        return JournalStorage(backend), None
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


def restore_record(
    study: optuna.Study, rec: StudyRecord, where: str, flush: Callable[[], None]
) -> None:
    """Put back the study-record attributes a damaged journal lost (named by the recovery),
    from the command being resumed, when every one that survived agrees with it (its space,
    as hash or as read, sampler, seed and batch size); otherwise refuse the resume."""
    have = study.user_attrs
    want = rec.attrs()
    dse_keys = [k for k in have if k.startswith(ATTR_PREFIX)]
    missing = [k for k in want if k not in have]
    if not missing or not dse_keys:
        return  # whole, or not a dse study at all (from_attrs says so)
    for key in ("space_hash", "space", "sampler", "seed", "batch_size"):
        k = f"{ATTR_PREFIX}{key}"
        if k in have and have[k] != want[k]:
            shown = "the search space" if key in ("space", "space_hash") else f"{key}={have[k]!r}"
            raise ConfigError(
                f"{where}: study {study.study_name!r}: its record lost {', '.join(missing)}, "
                f"and {shown} it kept differs from this command's; resume it with the space and "
                "settings that created it, or use another --study name"
            )
    for k in missing:
        study.set_user_attr(k, want[k])
    flush()
    warn(
        [
            f"{where}: study {study.study_name!r}: its record lost {', '.join(missing)}; "
            "restored from this command (what survived agrees with it)"
        ]
    )


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
