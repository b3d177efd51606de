"""Whether an array holds one value throughout, fast for fixed-width text columns.

A sweep's chunk carries many text columns that hold one value in every row (the engine, the
dtypes, the patterns, `batching`), and the predictor asks of each whether it does before taking
its one-value path. numpy compares fixed-width strings character by character: ~1.6-2 ms for
94,000 rows of 4-8 characters, one core, ~15 ms of a sweep chunk's ~130 ms prediction over a
dozen such checks. Equal fixed-width strings have equal bytes (numpy pads them with zeros), so
comparing each value's bytes with the next one's gives the same answer in ~0.1 ms.

A one-configuration prediction asks the same questions of one-element arrays, where numpy's
reductions cost more than the answer: `any_true`, `all_true` and `filled` read or make those
as Python values.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# Up to this many values `any_true` / `all_true` read them as Python values, and `where`
# selects as np.where does: numpy's reductions and `where`'s checks cost more than they save
# on a few configurations' rows (a one-configuration prediction asks dozens of each).
FEW = 64


def filled(shape: int | tuple[int, ...], value: float) -> np.ndarray:
    """`np.full(shape, value)` of a Python float: an empty float64 array filled (np.full's
    generic path costs twice as much, and a one-configuration prediction makes dozens)."""
    out = np.empty(shape)
    out.fill(value)
    return out


def any_true(a: np.ndarray) -> bool:
    """`a.any()` as a bool; a few values (one configuration's rows) read as Python values (a
    numpy reduction costs ~2 us, and a one-configuration prediction asks dozens of these)."""
    if a.size == 1:
        return bool(a)
    return any(a.ravel().tolist()) if a.size <= FEW else bool(a.any())


def all_true(a: np.ndarray) -> bool:
    """`a.all()` as a bool; a few values read as Python values (see `any_true`)."""
    if a.size == 1:
        return bool(a)
    return all(a.ravel().tolist()) if a.size <= FEW else bool(a.all())


def all_equal(a: Any) -> bool:
    """Whether every entry of a non-empty array equals its first (`(a == a.flat[0]).all()`,
    the same answer): fixed-width strings by their bytes, one flat comparison."""
    arr = np.asarray(a)
    if arr.dtype.kind in "US" and arr.size > 1 and arr.flags.c_contiguous:
        # a text's UCS-4 characters as 4-byte words (bytes of an "S" text one by one)
        word = np.uint32 if arr.dtype.kind == "U" else np.uint8
        raw = arr.reshape(-1).view(word)
        width = arr.dtype.itemsize // raw.itemsize
        return bool((raw[width:] == raw[:-width]).all())
    return bool((arr == arr.flat[0]).all())


def equals(a: Any, value: str) -> np.ndarray:
    """`a == value` of a text column (bool, a's shape), the comparison made once when the
    column holds one value (`all_equal`)."""
    arr = np.asarray(a)
    if arr.dtype.kind in "US" and arr.size > 1 and all_equal(arr):
        return np.full(arr.shape, bool(arr.flat[0] == value))
    return np.asarray(arr == value)


def where(cond: Any, a: Any, b: Any) -> np.ndarray:
    """`np.where(cond, a, b)` of numbers or texts (arrays or scalars), the same array: a condition that
    holds everywhere or nowhere (a dense sweep's MLA and MoE masks, a batch that decodes in
    every row) copies that side, broadcast and promoted as `np.where` would, rather than
    selecting element by element (~1 ms of 94,000 rows, ~10x a copy)."""
    c = np.asarray(cond)
    if c.size <= FEW:  # a few rows: np.where costs less than the checks below (~4 us)
        return np.where(c, a, b)
    da, db = np.asarray(a).dtype, np.asarray(b).dtype
    if da.kind in "biuf" and db.kind in "biuf":
        dtype = np.result_type(a, b)  # as np.where promotes (Python numbers weakly)
    elif da.kind == db.kind == "U":  # texts: the wider of the two
        dtype = np.promote_types(da, db)
    else:
        return np.asarray(np.where(cond, a, b))
    if c.dtype != bool:
        return np.asarray(np.where(cond, a, b))
    if c.all():
        side = a
    elif not c.any():
        side = b
    else:
        return np.where(c, a, b)
    out = np.empty(np.broadcast_shapes(c.shape, np.shape(a), np.shape(b)), dtype)
    out[...] = side
    return out
