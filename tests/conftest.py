"""Shared fixtures: the measured-data folder beside the checkout (tests skip cleanly without it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


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
