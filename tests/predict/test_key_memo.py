"""`_rows.KeyMemo`: the phases of one batch share their shape groups' key work; the answer of
`distinct_columns` is the same with the memo as without it."""

from __future__ import annotations

import numpy as np

from dse.predict._rows import Groups, KeyMemo, distinct_columns


def _same(a: Groups | None, b: Groups | None) -> bool:
    if a is None or b is None:
        return a is b
    return np.array_equal(a.rows, b.rows) and np.array_equal(a.inverse, b.inverse)


def test_key_memo_gives_distinct_columns_answer() -> None:
    rng = np.random.default_rng(0)
    n = 20_000
    d = rng.choice([2048, 4096, 8192], n)
    tp = rng.choice([1, 2, 4], n)
    ff = rng.choice(np.arange(8192, 16385, 1024), n)
    tokens = np.full(n, 1024)  # constant: no column
    weights = np.ones((5, n))
    memo = KeyMemo()
    first = distinct_columns([None, tp > 1, d, tp, ff, tokens], n, memo=memo)
    assert first is not None and _same(first, distinct_columns([tp > 1, d, tp, ff, tokens], n))
    # the next phase: its own (equal) mask, the same key arrays, constant extras
    again = distinct_columns([weights, tp > 1, d, tp, ff, tokens, np.full(n, 255)], n, memo=memo)
    assert again is first
    # other columns: computed anew, as without the memo
    other = distinct_columns([tp > 1, d, tp, ff % 3072], n, memo=memo)
    assert other is not first and _same(other, distinct_columns([tp > 1, d, tp, ff % 3072], n))
    # mostly distinct rows: None, with the memo as without
    wide = rng.integers(0, 1 << 40, n)
    assert distinct_columns([d, wide], n, memo=memo) is None
    assert distinct_columns([d, wide], n, memo=memo) is None


def test_key_memo_does_not_mix_up_arrays_of_a_reused_id() -> None:
    """An array freed and another made at its address is keyed on its own columns."""
    n = 10_000
    memo = KeyMemo()
    a = np.arange(n) % 7
    got = distinct_columns([a], n, memo=memo)
    assert got is not None and len(got.rows) == 7
    del a
    b = np.arange(n) % 11  # may take the freed array's id
    got = distinct_columns([b], n, memo=memo)
    assert got is not None and len(got.rows) == 11
