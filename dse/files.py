"""Files written whole or not at all, and file hashes: the package's one atomic writer.

    write_atomic(path, text_or_bytes)
    with atomic_path(path) as tmp:          # for writers that want a path or their own handle
        table.to_parquet(tmp)

The new contents go to a temporary file in the target's folder, are flushed to disk (fsync),
get an ordinary file's permissions (0666 less the umask; mkstemp makes 0600) and replace the
target in one rename: a reader, or a run killed meanwhile, sees the old file or the new one,
never half of one. Errors are the OSError of the failing call; the temporary file is removed.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_CHUNK_BYTES = 1 << 20  # read size when hashing, 1 MiB


def _umask() -> int:
    """The process umask; from /proc on Linux, which reads it without setting it (setting it
    and back, the portable way, leaves a window where another thread's files get umask 0)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextmanager
def atomic_path(path: Path | str, sync: bool = True) -> Iterator[Path]:
    """A temporary path beside `path`; what the block writes there replaces `path` (fsynced,
    ordinary permissions, one rename) when the block ends without an error, else is removed.
    The folder of `path` is created if missing. `sync=False`: not fsynced (a killed process
    still leaves the old file or the new one; an operating-system crash may leave the new
    name without its data)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        if sync:
            with open(tmp, "rb") as fh:  # fsync flushes the file's data whatever the handle's mode
                os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_atomic(path: Path | str, data: str | bytes) -> None:
    """Write `data` (text as UTF-8, or bytes) to `path` whole or not at all."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with atomic_path(path) as tmp:
        tmp.write_bytes(raw)


def sha256_file(path: Path | str) -> str:
    """Hex SHA-256 of a file's bytes (read in 1 MiB chunks)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK_BYTES), b""):
            h.update(chunk)
    return h.hexdigest()
