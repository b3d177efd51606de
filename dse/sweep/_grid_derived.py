"""`dse.spec.columns.derived` of an enumerated space's chunks, each piece computed once per
distinct combination of the searched fields it reads, over the whole enumeration.

A discrete space is a grid: its chunks repeat the same architectures over and over (the
3-million-configuration benchmark: 43,008 architectures x 72 GPU / batch / TP cells, the
architecture varying fastest). `derived`'s pieces read few of the searched fields:

- the rules' verdict (`rule_codes`) and the parameter / KV sizes (`arch_sizes`): the
  architecture fields and tensor_parallel (and the GPU only with FP4 weights, a space this
  cache does not take);
- the memory terms of one sequence (`memory_per_sequence`: weights, one sequence's KV cache,
  the step's widths): those and the workload's tokens and engine, not the batch size nor the GPU;
- the memory of the whole batch (`memory_of_batch`, a few products per row) and the GPU's
  capacity and what compares with it (`capacity_columns`): every row, cheaply.

So each of the first two pieces is kept in a table indexed by the mixed-radix number of the
digits of the searched fields it reads, filled for the combinations a chunk brings that no
earlier chunk did, and read back per row by a gather (the benchmark: 129,024 combinations
each, all in its first chunk; `derived` 1.54 -> 0.31 s CPU over its 24 chunks). Every value
is a function of its own row (`derived` computes row by row), so the result equals
`derived`'s on the whole chunk, bit for bit (tests/sweep/test_grid_derived.py).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from dse.spec import arch as A
from dse.spec import columns as C
from dse.spec.space import SearchSpace

# Keys of a table at most this many (the memory table holds ~60 bytes a key: ~60 MB); a
# space whose fields span more combinations is evaluated by `derived`, chunk by chunk.
MAX_KEYS = 1 << 20
# The searched fields the rules and architecture sizes do not read (the workload's others and
# the GPU); `tensor_parallel` splits heads and widths, so the rules read it.
_NOT_ARCH = frozenset((*C.WORKLOAD_FIELDS, "gpu")) - {"tensor_parallel"}

Piece = Callable[[C.Configs, int], dict[str, np.ndarray]]


class _Table:
    """One piece's columns per combination of the digits of its fields (`pos` in the
    searched order, `sizes` their value counts)."""

    def __init__(self, pos: Sequence[int], sizes: Sequence[int], compute: Piece) -> None:
        self.pos, self.sizes, self.compute = list(pos), list(sizes), compute
        self.keys = math.prod(self.sizes)
        self.done = np.zeros(self.keys, dtype=bool)
        self.row = np.zeros(self.keys, dtype=np.int64)  # scratch: a row of the chunk per key
        self.cols: dict[str, np.ndarray] = {}

    def lookup(self, cols: C.Configs, digits: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        """The piece's columns of every row of `cols`, computed for its new combinations only."""
        key = (
            np.ravel_multi_index(tuple(digits[j] for j in self.pos), self.sizes)
            if self.pos
            else np.zeros(len(digits[0]) if digits else cols.n, dtype=np.int64)
        )
        new = np.flatnonzero(~self.done[key])
        if len(new):
            # one row per new combination (any: rows of one combination hold the same values
            # of the fields read), found by writing each row's number at its key, no sort
            self.row[key[new]] = new
            rows = new[self.row[key[new]] == new]
            if 2 * len(rows) >= cols.n:
                # most rows new (a table's first chunks): the whole chunk, not a copy of its
                # ~50 columns at those rows (~15 ms); a combination computed twice or again
                # is written with the same values
                rows, part = np.arange(cols.n), cols
            else:
                part = cols.take(rows)
            got = self.compute(part, len(rows))
            at = key[rows]
            for k, v in got.items():
                if k not in self.cols:
                    self.cols[k] = np.empty(self.keys, dtype=v.dtype)
                self.cols[k][at] = v
            self.done[at] = True
        return {k: v[key] for k, v in self.cols.items()}


class GridDerived:
    """`derived(cols, n, texts=False)` of a space's chunks given with their digits
    (`dse.sweep.space_index.space_digits`), the rules and sizes computed once per distinct
    combination of the fields they read. `GridDerived.of(space)` is None where it cannot
    help: weights that may be FP4 (the verdict then reads the GPU), or tables too large."""

    def __init__(self, space: SearchSpace) -> None:
        self.space = space
        self._lock = threading.Lock()
        searched = space.searched
        sizes = [len(p.values) for p in searched]
        arch = [j for j, p in enumerate(searched) if p.name not in _NOT_ARCH]
        work = [j for j, p in enumerate(searched) if p.name not in ("gpu", "batch_size")]
        self.arch = _Table(arch, [sizes[j] for j in arch], _arch_piece)
        self.memory = _Table(work, [sizes[j] for j in work], _memory_piece)

    @classmethod
    def of(cls, space: SearchSpace) -> GridDerived | None:
        if not space.searched or _may_be_fp4(space):
            return None
        sizes = {p.name: len(p.values) for p in space.searched}
        work = math.prod(v for k, v in sizes.items() if k not in ("gpu", "batch_size"))
        return cls(space) if work <= MAX_KEYS else None

    def __call__(self, cols: C.Configs, digits: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        return self.with_sizes(cols, digits)[0]

    def with_sizes(
        self, cols: C.Configs, digits: Sequence[np.ndarray]
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """(`derived`'s columns, the predictor's `request.KV_SIZE_COLUMNS`) of every row:
        the sizes Level 3's KV inputs read, kept in the memory table (they read its fields),
        for the predictor to take as columns rather than compute them chunk after chunk."""
        from dse.predict.request import KV_SIZE_COLUMNS  # the predictor: only when it runs

        n = cols.n
        # one chunk at a time: a Dask worker with several threads shares the tables, and a
        # table's scratch row numbers and fill flags hold one chunk's
        with self._lock:
            arch = self.arch.lookup(cols, digits)
            per_seq = self.memory.lookup(cols, digits)
        sizes = {k: per_seq.pop(k) for k in KV_SIZE_COLUMNS}
        memory, mem = C.memory_of_batch(cols, n, per_seq)
        cap = C.gpu_table(cols["gpu"], "hbm_capacity_bytes")
        # the keys in `derived`'s order (an unknown constraint's message lists them)
        return {**arch, **memory, **C.capacity_columns(mem, cap, n)}, sizes


def _arch_piece(part: C.Configs, n: int) -> dict[str, np.ndarray]:
    a = C.architecture(part).resolved()
    return {**C.rule_codes(part, n, texts=False), **C.arch_sizes(part, n, a)}


def _memory_piece(part: C.Configs, n: int) -> dict[str, np.ndarray]:
    from dse.predict.request import kv_sizes  # the predictor: only when it runs

    # a term that is one value for the whole part (vocab_size) as a column, to be stored
    a = C.architecture(part).resolved()  # shared by both accountings
    terms = {**C.memory_per_sequence(part, a), **kv_sizes(part, a=a)}
    return {k: np.broadcast_to(v, (n,)) for k, v in terms.items()}


def _may_be_fp4(space: SearchSpace) -> bool:
    """Whether some configuration of the space may hold FP4 weights (then `rule_codes`
    reads the GPU, which the architecture table's key leaves out)."""
    values: Any = [C.DEFAULTS["weight_dtype"]]
    if "weight_dtype" in space.fixed:
        values = [space.fixed["weight_dtype"]]
    for p in space.searched:
        if p.name == "weight_dtype":
            values = list(p.values)
    return bool(np.asarray(A.fp4_weights(np.asarray(values, dtype=object))).any())


_CACHE: list[tuple[SearchSpace, GridDerived | None]] = []
_CACHE_LOCK = threading.Lock()


def grid_derived(space: SearchSpace) -> GridDerived | None:
    """The space's `GridDerived`, kept for the process's next chunks of the same space (one
    space at a time: a Dask worker's scattered space is the same object chunk after chunk)."""
    with _CACHE_LOCK:
        if not _CACHE or _CACHE[0][0] is not space:
            _CACHE[:] = [(space, GridDerived.of(space))]
        return _CACHE[0][1]
