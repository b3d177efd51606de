"""A journal's committed length: the bytes that hold whole batches, recorded beside it after each
flush, and the cut back to them (and of a torn last line) when a killed sweep left more.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from dse.files import write_atomic

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
