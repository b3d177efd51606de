"""Shared fixtures: the measured-data folder beside the checkout (tests skip cleanly without it).

Applies to every folder under tests/ (the layout: tests/README.md).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent

# Test modules import the shared helpers at tests/ (sweep_results, benchmark_scripts) and a few
# values from one another (golden_configs, SMALL, KILL_SPACE) by module name, as they did when
# tests/ was one folder: tests/ and each test folder go on sys.path before any test module is
# imported, whatever the collection order. File names stay unique across the folders (pytest's
# default import mode needs that anyway); tests/data holds fixtures, not modules.
for _folder in [
    TESTS,
    *sorted(p for p in TESTS.iterdir() if p.is_dir() and p.name not in ("data", "__pycache__")),
]:
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))


def _data_dir() -> Path:
    env = os.environ.get("DSE_DATA")
    return Path(env) if env else REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """`../shared/data` (or $DSE_DATA); skips the test when it is absent."""
    d = _data_dir()
    if not d.is_dir():
        pytest.skip(f"measured data not found at {d}")
    return d
