"""Configurations of a discrete search space as columns: by enumeration index or by digits.

Configuration k of a space is the mixed-radix number whose digits index the values of its
searched parameters (in `space.searched` order); `space_columns` decodes indices (the
enumeration of `exact` and `exhaustive`), `digit_columns` digit rows (the `screened` sampler,
on spaces of any size). `canonical_digits` / `canonical_index` map a configuration to the first
one in enumeration order that differs from it only in fields it ignores (`dse.spec.inert`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dse.spec.columns import CONFIG_FIELDS, DERIVED_FROM, Configs
from dse.spec.inert import DECIDING_FIELDS, INERT_FIELDS, inert_masks
from dse.spec.space import SearchSpace


def space_columns(
    space: SearchSpace, index: np.ndarray, digits: Sequence[np.ndarray] | None = None
) -> Configs:
    """Complete configuration columns of the configurations at `index` (enumeration order);
    `digits`: their `space_digits`, when the caller has them."""
    idx = np.asarray(index, dtype=np.int64)
    if not space.searched:
        return digit_columns(space, np.empty((len(idx), 0), dtype=np.int64))
    return _columns(space, space_digits(space, idx) if digits is None else digits, len(idx))


def constant_columns(space: SearchSpace) -> frozenset[str]:
    """Columns of `space_columns` that hold one value in every configuration of `space`: the
    configuration fields neither searched nor derived from another column by `as_columns`
    (DERIVED_FROM's, head_dim), i.e. the space's fixed fields and the field table's defaults,
    each checked value by value (`dse.spec.fields.check`: row by row, one column at a time).
    `Configs.take(rows, same=...)` shares their rows instead of gathering them."""
    varying = {p.name for p in space.searched} | set(DERIVED_FROM) | {"head_dim"}
    return frozenset(k for k in CONFIG_FIELDS if k not in varying)


def space_digits(space: SearchSpace, index: np.ndarray) -> tuple[np.ndarray, ...]:
    """The digits of the configurations at `index`: one array per searched parameter (in
    `space.searched` order), without stacking them into rows (~5 ms a 131,072-row chunk)."""
    idx = np.asarray(index, dtype=np.int64)
    return tuple(np.unravel_index(idx, [len(p.values) for p in space.searched]))


def digit_columns(space: SearchSpace, digits: np.ndarray) -> Configs:
    """Complete configuration columns of configurations given as (n, searched) digit rows, one
    digit per searched parameter (the index of its value): a space of any size, even one whose
    flat index would not fit in 64 bits."""
    digits = np.asarray(digits, dtype=np.int64)
    return _columns(space, [digits[:, j] for j in range(len(space.searched))], len(digits))


def _columns(space: SearchSpace, digits: Sequence[np.ndarray], n: int) -> Configs:
    """`digit_columns` of the digits given one array per searched parameter."""
    cols: dict[str, np.ndarray] = {k: np.full(n, v) for k, v in space.fixed.items()}
    for p, d in zip(space.searched, digits, strict=True):
        cols[p.name] = _value_column(p.name, p.values, d)
    return space.complete(cols, own=True)  # as_columns, keeping training_tokens


def _value_column(name: str, values: Any, digits: np.ndarray) -> np.ndarray:
    """A searched parameter's column: its values at `digits`. The GPU names (the one text
    field `as_columns` does not check against the field table, only converts with
    astype(str)) come as that str array already, as wide as the longest name present, so a
    chunk's names are neither converted from objects (~17 ms a 131,072-row chunk) nor scanned
    for missing ones by pandas (~6 ms); other texts stay objects, for the checker."""
    if name == "gpu" and all(isinstance(v, str) for v in values):
        present = np.bincount(digits, minlength=len(values)) > 0
        width = max((len(v) for v, here in zip(values, present, strict=True) if here), default=1)
        return np.asarray(values, dtype=f"<U{max(width, 1)}")[digits]
    return np.asarray(values, dtype=object if isinstance(values[0], str) else None)[digits]


def canonical_digits(space: SearchSpace, digits: np.ndarray) -> np.ndarray:
    """The digits with every inert searched field's digit set to 0 (`dse.spec.inert`: the
    fields a configuration ignores). Configurations that differ only in inert fields get the
    same digits: those of the first of them in enumeration order, the one a sweep keeps."""
    digits = np.asarray(digits, dtype=np.int64)
    searched = space.searched
    pos = {p.name: j for j, p in enumerate(searched)}
    inert = [(name, pos[name]) for name in INERT_FIELDS if name in pos]
    if not inert or not len(digits):
        return digits
    # The masks depend on the deciding fields only: judged once per distinct combination of
    # their values (a handful), then spread over the rows.
    deciding = [(name, pos[name]) for name in DECIDING_FIELDS if name in pos]
    sizes = [len(searched[j].values) for _, j in deciding]
    combo = (
        np.ravel_multi_index(tuple(digits[:, j] for _, j in deciding), sizes)
        if deciding
        else np.zeros(len(digits), dtype=np.int64)
    )
    uniq, inv = np.unique(combo, return_inverse=True)
    cols: dict[str, Any] = {k: v for k, v in space.fixed.items() if k in DECIDING_FIELDS}
    if deciding:
        for (name, j), d in zip(deciding, np.unravel_index(uniq, sizes), strict=True):
            values = searched[j].values
            typ = object if isinstance(values[0], str) else None
            cols[name] = np.asarray(values, dtype=typ)[d]
    masks = {k: v[inv.reshape(-1)] for k, v in inert_masks(cols, len(uniq)).items()}
    out = digits.copy()
    for name, j in inert:
        out[masks[name], j] = 0
    return out


def canonical_index(space: SearchSpace, index: np.ndarray) -> np.ndarray:
    """Per enumeration index, the index of the first configuration equal to it but for inert
    fields (itself where it is that first one)."""
    idx = np.asarray(index, dtype=np.int64)
    searched = space.searched
    if not searched or not _may_be_inert(space):
        return idx  # every configuration is its own first (the exact scan's common case)
    sizes = [len(p.values) for p in searched]
    digits = np.column_stack(np.unravel_index(idx, sizes))
    return np.ravel_multi_index(tuple(canonical_digits(space, digits).T), sizes).astype(np.int64)


def param_digits(space: SearchSpace, rows: list[dict[str, Any]]) -> list[tuple[int, ...] | None]:
    """The digits of configurations given as searched-parameter dicts (None for a row that
    lacks a parameter or holds a value the space does not list)."""
    lookup = [{_plain(v): i for i, v in enumerate(p.values)} for p in space.searched]
    names = [p.name for p in space.searched]
    out: list[tuple[int, ...] | None] = []
    for r in rows:
        try:
            out.append(tuple(lookup[j][_plain(r[k])] for j, k in enumerate(names)))
        except (KeyError, TypeError):
            out.append(None)
    return out


def _plain(v: Any) -> Any:
    """A parameter value as a hashable Python scalar (numpy scalars compare by value)."""
    return v.item() if hasattr(v, "item") else v


def _may_be_inert(space: SearchSpace) -> bool:
    """Whether some searched field is inert in some configuration of `space`. False when no
    deciding field (`DECIDING_FIELDS`) is searched and the fixed ones make no searched field
    inert (sweep_3m_space: n_kv_heads is searched, inert only under MLA, and kv_lora_rank is
    0 throughout): then `canonical_digits` changes no digit, and a chunk's indices are their
    own canonical ones without decoding them (~14 ms of a 131,072-row chunk)."""
    names = {p.name for p in space.searched}
    if not names & set(INERT_FIELDS):
        return False
    if names & set(DECIDING_FIELDS):
        return True
    fixed = {k: v for k, v in space.fixed.items() if k in DECIDING_FIELDS}
    if any(np.ndim(v) for v in fixed.values()):
        return True  # a fixed pattern given as a list: judged row by row, as before
    masks = inert_masks(fixed, 1)
    return any(bool(masks[k].any()) for k in names & set(INERT_FIELDS))
