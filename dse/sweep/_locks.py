"""A results folder held by one sweep: its name and place, the lock a writing sweep holds, the
write probe, and the claim that refuses a second study into a folder holding another.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from dse.errors import ConfigError
from dse.spec.space import SearchSpace
from dse.sweep._journal_commit import committed_path
from dse.sweep._journal_scan import parse_record
from dse.sweep.results import summary_study
from dse.sweep.storage import StorageSpec


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
    "catalogue.csv",
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
    name = summary_study(folder)
    if name is not None:
        return name
    journal = folder / "journal.log"
    if journal.is_file() and journal.stat().st_size:
        try:
            with open(journal, "rb") as f:
                first, _ = parse_record(f.readline())
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
