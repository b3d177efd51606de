"""Writing the files a user opens (report.html, exported configurations): whole or not at all."""

from __future__ import annotations

from pathlib import Path

from dse.errors import DSEError
from dse.files import write_atomic


def write_text_atomic(path: Path, text: str, what: str = "") -> None:
    """Write `text` to `path` whole or not at all (`dse.files.write_atomic`); a failure is a
    DSEError naming the file. `what` names it in the error ("the report"), else the message
    says "write"."""
    try:
        write_atomic(path, text)
    except OSError as exc:
        target = f" {what}" if what else ""
        raise DSEError(f"{path}: cannot write{target} ({exc.strerror or exc})") from None
