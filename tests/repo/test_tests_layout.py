"""The tests/ folders mirror the package (tests/README.md): no test module lands at tests/ itself,
fixtures stay in tests/data, and file names are unique across folders (tests import a few values
from one another by module name, and pytest's default import mode needs unique names)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
FOLDERS = {
    "spec", "predict", "models", "fitting", "readers", "sweep", "report", "commands",
    "estimators", "profile", "repo",
}  # fmt: skip


def test_every_test_module_is_in_a_package_folder() -> None:
    flat = sorted(p.name for p in TESTS.glob("test_*.py"))
    assert flat == [], f"tests/: test modules go in a folder (tests/README.md), got {flat}"
    folders = {p.parent.name for p in TESTS.glob("*/test_*.py")}
    assert folders <= FOLDERS, f"tests/: unknown test folders {sorted(folders - FOLDERS)}"
    assert not list((TESTS / "data").rglob("test_*.py")), "tests/data holds fixtures only"


def test_test_file_names_are_unique_across_folders() -> None:
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert {n for n, k in names.items() if k > 1} == set()
