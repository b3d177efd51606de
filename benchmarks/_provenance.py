"""Where a measurement came from: the checkout's commit (the benchmarks that record it)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def short_commit(repo: Path) -> str:
    """`git rev-parse --short HEAD` of `repo`, or "unknown" outside a git checkout."""
    try:
        out = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.stdout.strip() or "unknown"
