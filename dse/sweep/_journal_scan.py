"""Damaged journals: every record checked (`scan_journal`), what was lost named by journal line,
the intact records rewritten (`rewrite_journal`) or served read-only (`read_journal`).
"""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.storages.journal import BaseJournalBackend, JournalStorage

from dse.files import atomic_path
from dse.sweep._journal_commit import committed_limit, write_committed
from dse.sweep.storage import StorageError


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
    _, why = parse_record(head.split(b"\n", 1)[0])
    raise StorageError(
        f"{path}:1: must be an Optuna journal (one JSON record a line), got no journal record "
        f"(line 1: {why or 'no op_code'}); nothing was changed"
    )


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


def parse_record(raw: bytes) -> tuple[dict[str, Any] | None, str]:
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
        log, why = parse_record(raw) if not last else (None, "cut short")
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
            log, _ = parse_record(raw)
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
