"""Row helpers the Level-1 adapters share: price each distinct input row once (`unique_rows`,
`dedupe`, `Groups`, `evaluate_rows`, `at_rows`; `distinct_columns` for a whole phase's
operators and `unique_float_rows_by_part` for Level 2's feature rows, `dse.predict.pricing`)
and in bounded blocks of rows and columns (`row_blocks`,
`column_blocks`); `ColumnsAt`, configuration columns at some rows; `ColumnsRead`, columns
that note which are read.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dse.models.base import any_true, as_shape, broadcast_shape


class ColumnsAt(Mapping[str, np.ndarray]):
    """Configuration columns at some rows, gathered on first access (the columns an adapter
    reads of the configurations a Level-1 price is taken at)."""

    def __init__(self, cols: Mapping[str, np.ndarray], idx: np.ndarray) -> None:
        self._cols, self._idx, self._memo = cols, idx, {}

    def __getitem__(self, key: str) -> np.ndarray:
        if key not in self._memo:
            # take: what [idx] gives, ~4x faster on fixed-width strings (gpu, engine names)
            self._memo[key] = np.asarray(self._cols[key]).take(self._idx, axis=0)
        return self._memo[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._cols)

    def __len__(self) -> int:
        return len(self._cols)


class ColumnsRead(Mapping[str, np.ndarray]):
    """Configuration columns that note which of them are read (`read`; None once the whole
    mapping was iterated: every column may have been). What the operator lists are built from,
    so that a batch's shape groups can be keyed on those columns (`dse.predict.pricing.
    phase_groups`) rather than on the operators' own arrays."""

    def __init__(self, cols: Mapping[str, np.ndarray]) -> None:
        self._cols = cols
        self.read: set[str] | None = set()

    def __getitem__(self, key: str) -> np.ndarray:
        if self.read is not None:
            self.read.add(key)
        return self._cols[key]

    def __iter__(self) -> Iterator[str]:
        self.read = None
        return iter(self._cols)

    def __len__(self) -> int:
        return len(self._cols)


# ---------------------------------------------------------------------------- shared helpers
# Rows per call of a kernel model: its feature matrix (~16 float64 columns) stays in cache
# (a 5 x 10^5-row feature matrix built at once is 3x slower to write than in blocks).
BLOCK_ROWS = 16384
# Fewer rows than this are evaluated as they come: finding the distinct ones would not pay.
DEDUPE_MIN_ROWS = 64


def ndim_of(x: Any) -> int:
    """np.ndim(x), read off an array directly (np.ndim's dispatch costs ten times the
    attribute, and a one-configuration call asks it hundreds of times)."""
    return x.ndim if isinstance(x, np.ndarray) else np.ndim(x)


def shape_of(x: Any) -> tuple[int, ...]:
    """np.shape(x), read off an array directly (see `ndim_of`)."""
    return x.shape if isinstance(x, np.ndarray) else np.shape(x)


def unique_rows(*cols: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(flat index of one row per distinct row, inverse index) of integral columns that
    broadcast together (e.g. (n,) and (k, n)), or None when deduplication would not pay (most
    rows distinct) or the values are negative or do not pack into 63 bits."""
    shape = broadcast_shape(*(shape_of(c) for c in cols))
    n = math.prod(shape)
    if n < DEDUPE_MIN_ROWS:
        return None
    arrays = [np.asarray(c) for c in cols]
    if any(a.min() < 0 for a in arrays):
        return None
    import pandas as pd  # hash-based factorize: O(n), where np.unique sorts

    if n > 20_000:
        # A sample that is almost all distinct means the batch is too: skip the full pass.
        idx = np.unravel_index(np.arange(0, n, n // 4000), shape)
        h = np.zeros(len(idx[0]), dtype=np.uint64)
        for i, a in enumerate(arrays):  # a multiplicative hash of each sampled row (wraps)
            h = h * np.uint64(0x9E3779B97F4A7C15 + 2 * i) + at_rows(a, shape, idx).astype(np.uint64)
        if len(pd.unique(h)) > 0.97 * len(h):
            return None
    key = np.zeros(shape, dtype=np.int64)
    used = 0
    for a in arrays:
        bits = max(int(a.max()).bit_length(), 1)
        used += bits
        if used > 63:
            return None
        key <<= bits
        key |= a.astype(np.int64, copy=False)
    key = key.reshape(-1)
    if used <= 20:  # small key space: direct addressing beats hashing
        present = np.zeros(1 << used, dtype=bool)
        present[key] = True
        ranks = np.cumsum(present, dtype=np.int64) - 1
        codes, n_uniq = ranks[key], int(ranks[-1]) + 1
    else:
        if _over_half_distinct(key):
            return None
        codes, uniq = pd.factorize(key, sort=False)
        n_uniq = len(uniq)
    if n_uniq > 0.5 * n:
        return None
    rep = np.empty(n_uniq, dtype=np.intp)
    rep[codes] = np.arange(n)  # one (the last) row of each distinct key
    return rep, codes


# `_over_half_distinct`: keys of at least this many rows are probed (every step-th of ~PROBE_ROWS
# of them) and, where more than PROBE_DISTINCT of the probe is distinct, the first
# PREFIX_SHARE of the keys counted before the full factorize.
PROBE_MIN_ROWS = 4096
PROBE_ROWS = 512
PROBE_DISTINCT = 0.9
PREFIX_SHARE = 0.75


def _over_half_distinct(key: np.ndarray) -> bool:
    """True only when more than half of the 1-D keys are distinct, told without factorizing
    them all: the distinct keys of a prefix are distinct keys of the whole, so a prefix of
    3/4 of the keys with more than n/2 distinct ones settles it (what the full pass would
    answer, `unique_rows`'s None); False says nothing. Only keys whose probe (a strided
    sample) is mostly distinct are counted: elsewhere the count would not settle it and its
    cost would come on top of the full pass. An all-distinct batch's prefill keys (tokens =
    batch x prompt, 80-100% distinct) were factorized whole only to be dropped."""
    import pandas as pd

    n = len(key)
    if n < PROBE_MIN_ROWS:
        return False
    probe = key[:: n // PROBE_ROWS]
    if len(pd.unique(probe)) <= PROBE_DISTINCT * len(probe):
        return False
    return len(pd.unique(key[: int(PREFIX_SHARE * n)])) > 0.5 * n


def unique_float_rows(X: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(index of one row per distinct row, inverse index) of a 2-D float array, rows equal bit
    for bit; None when deduplication would not pay (few rows, or most distinct). Rows are
    hashed, then every row is checked against its representative, so a hash collision only
    costs the deduplication, never a wrong row."""
    n = len(X)
    if n < DEDUPE_MIN_ROWS or X.ndim != 2:
        return None
    import pandas as pd  # hash-based factorize: O(n)

    bits = np.ascontiguousarray(X, dtype=np.float64).view(np.uint64)
    if n > 2 * SAMPLE_ROWS:  # an almost all-distinct sample: the rows are too, skip the rest
        sample = bits[:: n // SAMPLE_ROWS]
        if len(pd.unique(_row_hash(sample.T))) > SAMPLE_DISTINCT * len(sample):
            return None
    h = _row_hash(bits.T)
    codes, uniq = pd.factorize(h, sort=False)
    if len(uniq) > 0.5 * n:
        return None
    rep = np.empty(len(uniq), dtype=np.intp)
    rep[codes] = np.arange(n)
    if not np.array_equal(bits[rep][codes], bits):
        return None
    return rep, codes


def unique_float_rows_by_part(
    X: np.ndarray, sizes: Sequence[int]
) -> tuple[np.ndarray, np.ndarray] | None:
    """`unique_float_rows` of each run of consecutive rows of X (`sizes`, in order: e.g. a
    Level-2 block's prefill rows, then its decode rows), joined: rows of two parts are never
    merged, and a part whose rows are mostly distinct keeps every row. A batch of workloads
    drawn freely has distinct prefill rows (tokens = batch x prompt) but decode rows that
    repeat (tokens = batch): over the whole X most rows are distinct, part by part they are
    not. None when no part is deduplicated."""
    if X.ndim == 2 and all(size < DEDUPE_MIN_ROWS for size in sizes):
        return None  # no part has rows enough to deduplicate (a few configurations' blocks)
    reps: list[np.ndarray] = []
    inverses: list[np.ndarray] = []
    start = kept = 0
    found = False
    for size in sizes:
        u = unique_float_rows(X[start : start + size])
        rep, inverse = (np.arange(size), np.arange(size)) if u is None else u
        found |= u is not None
        reps.append(rep + start)
        inverses.append(inverse + kept)
        start += size
        kept += len(rep)
    if not found:
        return None
    return np.concatenate(reps), np.concatenate(inverses)


# A phase's operators are priced once per distinct row (`distinct_columns`) when at most this
# fraction of the rows is distinct: below it the gathers and scatters around the pricing cost
# less than the rows saved (a sweep's grid); above it every row is priced as it comes.
DISTINCT_BELOW = 0.7
# Batches of more than twice as many rows first hash a sample of about this many: an almost
# all-distinct sample (more than SAMPLE_DISTINCT of it) skips the full pass (workloads drawn
# freely).
SAMPLE_ROWS = 4000
SAMPLE_DISTINCT = 0.97
SAMPLE_ARRAYS = (4, 16)


def _key_columns(
    arrays: Sequence[Any], n: int, memo: dict[int, tuple[Any, list[np.ndarray]]] | None = None
) -> list[np.ndarray]:
    """Every per-configuration array of `arrays` (last axis n) that is not the same on every
    row, as (n,) uint64 columns, each array once: numbers by their bits (a (k, n) array gives
    k columns), strings by their codes. `memo`: each array's columns by its id (the array kept
    with them, so that the id is not another's): the phases of a batch share most key arrays."""
    seen: set[int] = set()
    out: list[np.ndarray] = []
    for a in arrays:
        if not isinstance(a, np.ndarray) or a.ndim == 0 or a.shape[-1] != n or id(a) in seen:
            continue
        seen.add(id(a))
        if memo is None:
            out.extend(_array_key_columns(a, n))
            continue
        hit = memo.get(id(a))
        if hit is None or hit[0] is not a:
            hit = memo[id(a)] = (a, _array_key_columns(a, n))
        out.extend(hit[1])
    return out


def _array_key_columns(a: np.ndarray, n: int) -> list[np.ndarray]:
    """`_key_columns` of one array."""
    import pandas as pd  # hash-based factorize: O(n)

    out: list[np.ndarray] = []
    for row in a.reshape(-1, n):
        if row.strides[-1] == 0 or _constant(row):  # the same on every row
            continue
        if row.dtype.kind in "US":  # fixed-width strings: their bytes, 8 at a time
            b = np.ascontiguousarray(row).view(np.uint8).reshape(n, -1)
            pad = -b.shape[1] % 8
            if pad:
                b = np.concatenate([b, np.zeros((n, pad), dtype=np.uint8)], axis=1)
            out.extend(np.ascontiguousarray(b.view(np.uint64).T))
        elif row.dtype.kind in "OT":
            out.append(pd.factorize(row.astype(object), sort=False)[0].astype(np.uint64))
        elif row.dtype.itemsize == 8 and row.dtype.kind in "fiu":
            out.append(row.view(np.uint64))  # its bits, no copy (-0.0 apart from 0.0)
        else:
            out.append(row.astype(np.float64).view(np.uint64))
    return out


def _constant(row: np.ndarray) -> bool:
    """Whether every value of a 1-D array equals its first; fixed-width strings by their bytes,
    as the bytes of each value against the next one's (one flat comparison; equal strings of
    one dtype have equal bytes; comparing them as strings is ~10x slower)."""
    if row.dtype.kind in "US" and row.flags.c_contiguous and len(row) > 1:
        # UCS-4 text as its 4-byte code units: a quarter of the comparisons of its bytes
        # (~0.13 against ~0.28 ms for 94,000 rows of 14 characters)
        unit = np.uint32 if row.dtype.kind == "U" else np.uint8
        raw, width = row.view(unit), row.dtype.itemsize // np.dtype(unit).itemsize
        return bool((raw[width:] == raw[:-width]).all())
    return bool((row == row[0]).all())


def _row_hash(columns: Sequence[np.ndarray]) -> np.ndarray:
    """A multiplicative hash of each row of the columns (wraps)."""
    h = np.zeros(len(columns[0]), dtype=np.uint64)
    for j, c in enumerate(columns):
        h *= np.uint64(0x9E3779B97F4A7C15 + 2 * j)
        h += c
    return h


class KeyMemo:
    """What `distinct_columns` keeps between calls on arrays of one batch (the phases of one
    `Pricer.price_phases`): each key array's columns (`_key_columns`), and the last call's
    columns and answer. The phases of a sweep's batch key on the same configuration columns:
    the second phase's answer is the first's when its columns are, bit for bit, the same."""

    def __init__(self) -> None:
        self.columns: dict[int, tuple[Any, list[np.ndarray]]] = {}
        self.last: tuple[list[np.ndarray], Groups | None] | None = None

    def answer(self, columns: list[np.ndarray]) -> tuple[bool, Groups | None]:
        """(found, the answer of the last call) when its columns equal these, in order."""
        if self.last is None or len(self.last[0]) != len(columns):
            return False, None
        for a, b in zip(self.last[0], columns, strict=True):
            if a is not b and not np.array_equal(a, b):
                return False, None
        return True, self.last[1]


def distinct_columns(
    arrays: Sequence[Any], n: int, below: float = DISTINCT_BELOW, memo: KeyMemo | None = None
) -> Groups | None:
    """The rows of n configurations that agree on every per-configuration array of `arrays`
    (bit for bit; arrays of shape (n,) or (k, n), numbers or strings): `Groups` of one row per
    distinct row and each row's group, or None when at least `below` of the rows are distinct
    (deduplication would not pay) or n < DEDUPE_MIN_ROWS. Rows are hashed, then every row is
    checked against its representative, so a hash collision only costs the deduplication,
    never a wrong row. `memo`: see `KeyMemo` (the answer is the same with it or without)."""
    if n < DEDUPE_MIN_ROWS:
        return None
    import pandas as pd

    # the per-configuration arrays, each once (a sequence of values as an array)
    arrays = [a if isinstance(a, np.ndarray) else np.asarray(a) for a in arrays]
    arrays = list({id(a): a for a in arrays if a.ndim and a.shape[-1] == n}.values())
    if n > 2 * SAMPLE_ROWS:  # every step-th row, as strided views (no copies)
        step = n // SAMPLE_ROWS
        # node arrays (k, n) first: decode's KV lengths tell distinct workloads apart soonest
        sample = [a[..., ::step] for a in sorted(arrays, key=lambda a: -a.ndim)]
        m = len(range(0, n, step))
        # the sample's rows are distinct as soon as those of some of its arrays are: checked
        # after SAMPLE_ARRAYS[i] arrays (a batch of distinct workloads stops at the first);
        # one distinct only by later arrays is found by the full pass
        h, done = np.zeros(m, dtype=np.uint64), 0
        for check in SAMPLE_ARRAYS:
            part = _key_columns(sample[done:check], m)
            if part:
                h = _row_hash([h, *part])
            done = check
            if len(pd.unique(h)) > SAMPLE_DISTINCT * m:
                return None
    columns = _key_columns(arrays, n, None if memo is None else memo.columns)
    if memo is not None:
        found, last = memo.answer(columns)
        if found:  # the same columns in the same order: the same hashes, groups and checks
            return last
        out = _distinct_of(columns, n, below)
        memo.last = (columns, out)
        return out
    return _distinct_of(columns, n, below)


def _distinct_of(columns: list[np.ndarray], n: int, below: float) -> Groups | None:
    """`distinct_columns` of the key columns (`_key_columns`)."""
    import pandas as pd

    if not columns:  # every array the same on every row
        return Groups(np.zeros(1, dtype=np.intp), np.zeros(n, dtype=np.intp))
    codes, uniq = pd.factorize(_row_hash(columns), sort=False)
    if len(uniq) >= below * n:
        return None
    rep = np.empty(len(uniq), dtype=np.intp)
    rep[codes] = np.arange(n)  # one (the last) row of each distinct key
    back = rep[codes]
    for c in columns:
        if not np.array_equal(c[back], c):
            return None
    return Groups(rep, codes.astype(np.intp, copy=False))


def dedupe(
    fn: Callable[..., dict[str, np.ndarray]], *cols: np.ndarray, rows: bool = False
) -> dict[str, np.ndarray]:
    """fn(*cols) evaluated once per distinct row; outputs scattered back to cols' (broadcast)
    shape. With rows=True fn gets the flat row indices it evaluates first: fn(index, *cols)."""
    n = _few_rows_of(cols)
    if n is not None:  # (n,) columns of too few rows to deduplicate (`unique_rows`): as below,
        # without numpy's shape broadcasting (a few configurations' stacked operators)
        out = fn(np.arange(n), *cols) if rows else fn(*cols)
        return {k: np.asarray(v).reshape(n) for k, v in out.items()}
    shape = np.broadcast_shapes(*(np.shape(c) for c in cols))
    u = unique_rows(*cols)
    if u is None:
        args = tuple(as_shape(c, shape).ravel() for c in cols)
        out = fn(np.arange(int(np.prod(shape))), *args) if rows else fn(*args)
        return {k: np.asarray(v).reshape(shape) for k, v in out.items()}
    rep, inverse = u
    idx = np.unravel_index(rep, shape)
    args = tuple(as_shape(c, shape)[idx] for c in cols)
    out = fn(rep, *args) if rows else fn(*args)
    return {k: np.asarray(v)[inverse].reshape(shape) for k, v in out.items()}


def _few_rows_of(cols: Sequence[Any]) -> int | None:
    """n when every column is a 1-d array of the same n < DEDUPE_MIN_ROWS rows, else None."""
    n = None
    for c in cols:
        if not isinstance(c, np.ndarray) or c.ndim != 1 or (n is not None and len(c) != n):
            return None
        n = len(c)
    return n if n is not None and n < DEDUPE_MIN_ROWS else None


@dataclass(frozen=True)
class Groups:
    """Rows with equal keys: flat index of one row per group and each row's group (both None
    when every row is evaluated: deduplication would not pay)."""

    rows: np.ndarray | None
    inverse: np.ndarray | None

    @classmethod
    def of(cls, keys: list[np.ndarray]) -> Groups:
        u = unique_rows(*keys)
        return cls(None, None) if u is None else cls(u[0], u[1])


def evaluate_rows(
    fn: Callable[[tuple[np.ndarray, ...]], dict[str, np.ndarray]],
    keys: list[np.ndarray] | Groups,
    shape: tuple[int, ...],
    block: int | None = BLOCK_ROWS,
) -> dict[str, np.ndarray]:
    """fn evaluated once per distinct row of the integral `keys` (each broadcastable to
    `shape`; or their `Groups`), in blocks of `block` rows (None: all at once); fn gets the
    rows as an index tuple into `shape` and returns 1-D arrays, which come back scattered to
    every row, in `shape`."""
    g = keys if isinstance(keys, Groups) else Groups.of(keys)
    size = int(np.prod(shape))
    m = size if g.rows is None else len(g.rows)
    step = max(m, 1) if block is None else block
    parts: list[dict[str, np.ndarray]] = []
    for s in range(0, max(m, 1), step):
        r = np.arange(s, min(s + step, m)) if g.rows is None else g.rows[s : s + step]
        parts.append(fn(np.unravel_index(r, shape)))
    out = {
        k: np.concatenate([np.asarray(p[k]) for p in parts]) if len(parts) > 1 else parts[0][k]
        for k in parts[0]
    }
    if g.inverse is not None:
        out = {k: np.asarray(v)[g.inverse] for k, v in out.items()}
    return {k: np.asarray(v).reshape(shape) for k, v in out.items()}


def at_rows(v: Any, shape: tuple[int, ...], idx: tuple[np.ndarray, ...] | None) -> np.ndarray:
    """The values of v (broadcastable to `shape`) at the rows `idx` (no full broadcast copy);
    idx None: every row, in order (flat)."""
    if idx is None:
        a = np.asarray(v)
        if a.size == 1 and a.shape != shape:  # one value over the rows (a configuration's
            # width over its quadrature nodes): repeated, not broadcast (~4 us) then copied
            return a.reshape(1).repeat(math.prod(shape))
        return as_shape(a, shape).ravel()
    a = np.asarray(v)
    if a.shape == shape:
        return a[idx]
    if a.ndim == 1 and len(shape) > 1 and a.shape[0] == shape[-1]:  # (n,) over (k, n)
        return a[idx[-1]]
    return np.broadcast_to(a, shape)[idx]


# Column blocks of a GEMM wider than its table are rounded up to this many columns (a tile).
BLOCK_COLUMNS = 128


def column_blocks(n: np.ndarray, n_max: float) -> tuple[np.ndarray, np.ndarray]:
    """(blocks, columns per block) pricing an (m, n, k) GEMM as `blocks` GEMMs of
    (m, columns, k) inside a table of n <= n_max: ceil(n / n_max) equal blocks, each rounded up
    to a multiple of BLOCK_COLUMNS (never above n_max when n_max is one); one block of n
    columns where n <= n_max, so those GEMMs are priced exactly as before."""
    n = np.asarray(n, dtype=float)
    if not np.isfinite(n_max) or n_max <= 0 or not any_true(n > n_max):
        return np.ones_like(n), n
    blocks = np.maximum(np.ceil(n / n_max), 1.0)
    cols = np.ceil(n / blocks / BLOCK_COLUMNS) * BLOCK_COLUMNS
    cols = np.minimum(cols, max(np.floor(n_max / BLOCK_COLUMNS) * BLOCK_COLUMNS, BLOCK_COLUMNS))
    wide = n > n_max
    return np.where(wide, blocks, 1.0), np.where(wide, cols, n)


def row_blocks(size: np.ndarray, size_max: float) -> np.ndarray:
    """How many equal row blocks bring `size` (tokens, or elements) inside a measured maximum:
    ceil(size / size_max), 1 where it is inside already."""
    size = np.asarray(size, dtype=float)
    if not np.isfinite(size_max) or size_max <= 0:
        return np.ones_like(size)
    return np.maximum(np.ceil(size / size_max * (1 - 1e-12)), 1.0)
