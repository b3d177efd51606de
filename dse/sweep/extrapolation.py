"""Which front rows are extrapolations, and by which input: the one summary `dse sweep`,
`dse show` and the report's banner print.

The trials table says it per row (docs/results_format.md): `pred.out_of_range` /
`pred.out_of_range_inputs` for the predictor ('; '-joined items '<part>: <input> <value> > <bound>
(x<value / bound>)', `dse.predict.flags`), `loss_out_of_range` / `loss_out_of_range_inputs`
for the loss scaling law ('<input> <value> > <bound> (x<ratio>)' or '<input> <value>: <why>',
`dse.estimators.quality`). Here each item becomes a short label ('level3 prompt', 'loss-law
tokens') and its factor ('x4'), counted over front rows. Nothing is said when no front row is
out of range.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

# (flag column, text column, label prefix) of each source of range flags.
SOURCES = {
    "predictor": ("pred.out_of_range", "pred.out_of_range_inputs", ""),
    "loss law": ("loss_out_of_range", "loss_out_of_range_inputs", "loss-law "),
}
# Labels listed in the one-line summary, at most (the rest are counted as "+N more").
MAX_LABELS = 6
# Inputs named per row in `dse show`'s column, at most (the trials table has them all).
MAX_ROW_ITEMS = 3
_FACTOR = re.compile(r"\(x([^)]*)\)\s*$")
_EMPTY = ("", "nan", "None")


@dataclass(frozen=True)
class Item:
    """One input outside its fitted range on one row."""

    source: str  # "predictor" | "loss law"
    name: str  # the input, named by its source: 'level3 prompt', 'operator width', 'tokens'
    factor: str  # value / bound as the text prints it ('4', '0.75'); '' when not a ratio

    @property
    def label(self) -> str:
        return SOURCES[self.source][2] + self.name

    @property
    def short(self) -> str:
        return self.label + (f" x{self.factor}" if self.factor else "")


def _input_name(rest: str) -> str:
    """The input of '<input> <value> > <bound> (x..)' or '<input> <value>: <why>': the words
    before the first number ('total params 1.2e12 > 5e9' -> 'total params')."""
    words: list[str] = []
    for w in rest.split():
        try:
            float(w.rstrip(":"))
        except ValueError:
            words.append(w.rstrip(":"))
            continue
        break
    return " ".join(words) or rest.strip()


def _part_name(part: str) -> str:
    """'level3' as is; a level-2 block or operators ('prefill+decode embedding, norm/input')
    as their level: the trials table keeps the full text."""
    if part == "level3":
        return "level3"
    ops = part.split(" ", 1)[1] if " " in part else part
    return "level2" if ops.startswith("level2.") else "operator"


def items(text: object, source: str) -> list[Item]:
    """The items of one row's `*_out_of_range_inputs` text, one per input (the largest factor
    kept where a text names an input twice)."""
    s = str(text).strip()
    if s in _EMPTY:
        return []
    out: dict[str, Item] = {}
    for raw in s.split("; "):
        raw = raw.strip()
        if not raw:
            continue
        m = _FACTOR.search(raw)
        factor = m.group(1) if m else ""
        if source == "predictor" and ": " in raw:
            part, rest = raw.rsplit(": ", 1)
            name = f"{_part_name(part)} {_input_name(rest)}"
        else:
            name = _input_name(raw)
        item = Item(source, name, factor)
        old = out.get(item.label)
        if old is None or _far(factor) > _far(old.factor):
            out[item.label] = item
    return list(out.values())


def _far(factor: str) -> float:
    """How far a factor lies from 1 (x4 and x0.25 alike), for keeping the larger of two."""
    try:
        f = float(factor)
    except ValueError:
        return 0.0
    return max(f, 1.0 / f) if f > 0 else 0.0


def row_items(rows: pd.DataFrame) -> list[list[Item]]:
    """Per row, every input out of range (predictor first, then the loss law)."""
    out: list[list[Item]] = [[] for _ in range(len(rows))]
    for source, (flag, text, _) in SOURCES.items():
        if flag not in rows:
            continue
        flags = rows[flag].astype(str).str.lower().isin(("true", "1", "1.0")).to_numpy()
        texts = rows[text].to_numpy() if text in rows else [""] * len(rows)
        for i in range(len(rows)):
            if flags[i]:
                found = items(texts[i], source)
                # A flag without a text still counts: the input is unknown.
                out[i].extend(found or [Item(source, "input", "")])
    return out


@dataclass(frozen=True)
class RangeSummary:
    """How many front rows are out of range, and by which inputs."""

    rows: int  # front rows
    outside: int  # rows with any input out of range
    by_source: dict[str, int]  # rows flagged by each source
    counts: list[tuple[Item, int]]  # (input, rows naming it), most rows first; factor unset

    def labels(self, source: str | None = None) -> list[tuple[str, int]]:
        """(label, rows) of one source (its own names, no prefix) or of all (labels)."""
        if source is None:
            return [(it.label, n) for it, n in self.counts]
        return [(it.name, n) for it, n in self.counts if it.source == source]

    def line(self) -> str:
        """'out of range: 10 of 10 front rows — level3 prompt (10), loss-law tokens (10)';
        '' when no front row is out of range."""
        if not self.outside:
            return ""
        shown = self.labels()[:MAX_LABELS]
        more = len(self.counts) - len(shown)
        which = ", ".join(f"{label} ({n})" for label, n in shown) + (
            f", +{more} more" if more > 0 else ""
        )
        return (
            f"out of range: {self.outside:,} of {self.rows:,} front rows — {which}; their "
            "predictions are extrapolations"
        )


def summarise(front: pd.DataFrame) -> RangeSummary:
    """`RangeSummary` of front rows (any table with the range columns)."""
    per_row = row_items(front)
    counts: dict[str, tuple[Item, int]] = {}
    by_source: dict[str, int] = {}
    for found in per_row:
        for source in {it.source for it in found}:
            by_source[source] = by_source.get(source, 0) + 1
        for it in found:
            key = Item(it.source, it.name, "")
            counts[key.label] = (key, counts.get(key.label, (key, 0))[1] + 1)
    ranked = sorted(counts.values(), key=lambda kv: -kv[1])
    return RangeSummary(len(front), sum(bool(f) for f in per_row), by_source, ranked)


def row_texts(rows: pd.DataFrame) -> tuple[list[str], list[str]]:
    """(per row, the inputs out of range with their factor, farthest first, at most
    MAX_ROW_ITEMS and '+N' more: 'level3 n_experts x4, operator num_experts x0.5', '' inside;
    the items every row has alike: ['level3 prompt x4', 'loss-law tokens x30']). A flag on
    every row tells no row apart, so it is said once, not per row."""
    per_row = row_items(rows)
    shared = set.intersection(*(set(f) for f in per_row)) if per_row else set()
    texts = []
    for found in per_row:
        own = sorted((it for it in found if it not in shared), key=lambda it: -_far(it.factor))
        more = len(own) - MAX_ROW_ITEMS
        texts.append(
            ", ".join(it.short for it in own[:MAX_ROW_ITEMS]) + (f", +{more}" if more > 0 else "")
        )
    common = [it.short for it in (per_row[0] if per_row else []) if it in shared]
    return texts, common
