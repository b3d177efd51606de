"""Writing the files a user opens (report.html, exported configurations): whole or not at all."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from dse.errors import DSEError


def write_text_atomic(path: Path, text: str, what: str = "") -> None:
    """Write `text` to `path` through a temporary file in the same folder and a rename, so a
    reader never sees half a file; with the permissions of an ordinary file (mkstemp makes
    0600). `what` names the file in the error ("the report"), else the message says "write"."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except OSError as exc:
        target = f" {what}" if what else ""
        raise DSEError(f"{path}: cannot write{target} ({exc.strerror or exc})") from None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
