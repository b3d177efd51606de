"""The user docs list every architecture field with the limits `dse.spec.fields` declares, so a
field added to the table (or a changed limit) without its documentation fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dse.spec import fields as F

DOCS = Path(__file__).resolve().parents[2] / "docs"
ARCH_FIELDS = [f for f in F.FIELDS.values() if f.group == "architecture"]


def _rows(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.startswith("|")]


def _row_of(rows: list[str], name: str) -> str:
    hits = [r for r in rows if re.search(rf"`{name}`", r)]
    assert hits, f"no table row names `{name}`"
    return hits[0]


@pytest.mark.parametrize("f", ARCH_FIELDS, ids=lambda f: f.name)
def test_fields_md_states_kind_limits_and_default(f: F.Field) -> None:
    row = _row_of(_rows(DOCS / "fields.md"), f.name)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == f.kind, row
    if f.kind == "int":
        assert cells[3] == f"{int(f.min)} .. {int(f.max)}", row
        if f.even:
            assert "even" in cells[4], row
    if f.kind == "choice":
        assert ", ".join(f.options()) in cells[4], row
    if f.default is not None and f.kind in ("int", "choice", "pattern"):
        assert F.show(f.default).strip("'") in cells[5] or f.default == 0, row


@pytest.mark.parametrize("f", ARCH_FIELDS, ids=lambda f: f.name)
def test_architecture_md_fields_table_names_every_field(f: F.Field) -> None:
    text = (DOCS / "architecture.md").read_text()
    table = text.split("## Fields", 1)[1].split("\n## ", 1)[0]
    assert f"`{f.name}`" in table


def test_architecture_md_has_the_section_code_comments_point_to() -> None:
    # dse/spec/fields.py and dse/spec/arch.py send readers to docs/architecture.md
    # "Attention families".
    assert "\n## Attention families\n" in (DOCS / "architecture.md").read_text()
