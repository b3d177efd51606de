"""Where a measurement came from: the checkout's commit (the benchmarks that record it)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def _git(repo: Path, *args: str) -> str | None:
    """The stripped stdout of `git -C repo ARGS`, or None where git or the checkout is not."""
    try:
        out = subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip()


def short_commit(repo: Path) -> str:
    """`git rev-parse --short HEAD` of `repo`, or "unknown" outside a git checkout."""
    return _git(repo, "rev-parse", "--short", "HEAD") or "unknown"


def checkout_label(repo: Path) -> str:
    """The commit of `repo`, with " + changes" when tracked files differ from it; the path
    outside a git checkout."""
    sha = _git(repo, "rev-parse", "--short", "HEAD")
    dirty = _git(repo, "status", "--porcelain", "--untracked-files=no")
    if not sha or dirty is None:
        return str(repo)
    return f"{sha}{' + changes' if dirty else ''}"
