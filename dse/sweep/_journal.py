"""The default journal file, written one batch at a time (`BatchedJournalBackend`), and opening
a journal storage. A damaged journal is repaired on open (`_journal_commit`, `_journal_scan`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from optuna.storages.journal import BaseJournalBackend, JournalFileBackend, JournalStorage

from dse.sweep._journal_commit import recover, repair_tail, write_committed
from dse.sweep._journal_scan import (
    JournalScan,
    adopt_replay,
    refuse_foreign,
    rewrite_journal,
    scan_journal,
)
from dse.sweep._locks import folder_study
from dse.sweep.storage import StorageError, StorageSpec, warn


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
