"""Issue 36: no module of dse/ grows past ~600 lines without the reason written at its top (a
paragraph of its docstring saying "on purpose" and why), so a long file is a decision a reader
can check, not an accident."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 600  # lines


def long_modules_without_a_reason(package: Path) -> list[str]:
    """Modules of `package` over LIMIT lines whose docstring does not say why ("on purpose")."""
    out = []
    for path in sorted(package.rglob("*.py")):
        text = path.read_text()
        if text.count("\n") <= LIMIT:
            continue
        doc = ast.get_docstring(ast.parse(text)) or ""
        if "on purpose" not in doc:
            out.append(f"{path.relative_to(package.parent)} ({text.count(chr(10))} lines)")
    return out


def test_every_long_module_says_why() -> None:
    missing = long_modules_without_a_reason(ROOT / "dse")
    assert not missing, "modules over 600 lines without 'on purpose' in their docstring: " + (
        ", ".join(missing)
    )


@pytest.mark.parametrize("doc", ['"""Short."""', '"""Long.\n\nOne file on purpose: why."""'])
def test_the_rule_sees_a_long_module(tmp_path: Path, doc: str) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "big.py").write_text(doc + "\n" + "x = 1\n" * (LIMIT + 1))
    (pkg / "small.py").write_text('"""Small."""\nx = 1\n')
    found = long_modules_without_a_reason(pkg)
    assert found == ([] if "on purpose" in doc else [f"pkg/big.py ({LIMIT + 2} lines)"])
