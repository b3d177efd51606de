"""Rewrite one '## ' section of a docs page in place (the benchmarks that own a section)."""

from __future__ import annotations

from pathlib import Path


def replace_section(doc: Path, heading: str, text: str, title: str) -> None:
    """Replace the section that starts with the whole line `heading` (up to the next '## '
    heading) by `text`, or append `text` if the page has no such section; a missing page
    starts as '# title'. The whole heading line is matched, since labelled sections share a
    prefix ("## HYMELL end to end" and "## HYMELL end to end: all Level-1 models")."""
    old = doc.read_text() if doc.is_file() else f"# {title}\n"
    marker = heading + "\n"
    if marker in old:
        head, rest = old.split(marker, 1)
        nxt = rest.find("\n## ")
        tail = rest[nxt + 1 :] if nxt >= 0 else ""
        new = head + text.rstrip() + "\n" + ("\n" + tail if tail else "")
    else:
        new = old.rstrip() + "\n\n" + text.rstrip() + "\n"
    doc.write_text(new)


def replace_between(doc: Path, mark: str, text: str) -> None:
    """Replace what lies between the lines `<!-- mark:start -->` and `<!-- mark:end -->` of a
    docs page by `text` (a generated block inside a hand-written section); the page must hold
    both markers."""
    start, end = f"<!-- {mark}:start -->", f"<!-- {mark}:end -->"
    old = doc.read_text()
    if start not in old or end not in old:
        raise SystemExit(f"{doc}: markers {start} / {end} not found")
    head, rest = old.split(start, 1)
    _, tail = rest.split(end, 1)
    doc.write_text(head + start + "\n" + text.rstrip() + "\n" + end + tail)
