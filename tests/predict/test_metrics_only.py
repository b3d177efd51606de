"""What the exact sweep's scan asks of the predictor, bit for bit what a full prediction gives:
`predict(metrics_only=True)` (the OUTPUT_KEYS alone, no flags, bands, breakdown or provenance),
the Level-3 KV sizes handed in as columns (`request.KV_SIZE_COLUMNS`), and the one-value checks
of text columns by their bytes and `np.where` of a one-valued condition (`dse._same`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dse._same import all_equal, equals, where
from dse.models.level3 import _whole_log
from dse.predict import predict
from dse.predict.request import KV_SIZE_COLUMNS, OUTPUT_KEYS, kv_sizes
from dse.spec.space import load_space
from dse.sweep.space_index import space_columns

REPO = Path(__file__).resolve().parents[2]


def _batch(rows: int) -> object:
    """`rows` configurations of the 3-million space, spread over it (one GPU a run of rows)."""
    space = load_space(REPO / "benchmarks/sweep_3m_space.yaml")
    idx = np.linspace(0, space.size() - 1, rows).astype(np.int64)
    return space_columns(space, idx)


@pytest.mark.parametrize("rows", [7, 3000])  # stacked, and grouped by shapes
def test_metrics_only_equals_the_full_prediction(rows: int) -> None:
    cols = _batch(rows)
    full = predict(cols, texts=False)
    lean = predict(cols, texts=False, metrics_only=True)
    assert tuple(lean) == OUTPUT_KEYS
    for k in OUTPUT_KEYS:
        assert lean[k].dtype == full[k].dtype, k
        assert np.array_equal(lean[k], full[k], equal_nan=True), k


def test_metrics_only_holds_for_a_mapping_with_repeats() -> None:
    """A plain mapping that repeats its rows takes `_raw_repeats`' early path (its distinct
    rows checked alone): `metrics_only` is honoured there too, with the same numbers."""
    cols = _batch(40)
    searched = ("d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "vocab_size", "gpu",
                "batch_size", "prompt_tokens", "output_tokens", "tensor_parallel")  # fmt: skip
    given = {k: np.tile(np.asarray(cols[k]), 3) for k in searched}
    full = predict(given, texts=False)
    lean = predict(given, texts=False, metrics_only=True)
    assert tuple(lean) == OUTPUT_KEYS
    for k in OUTPUT_KEYS:
        assert len(lean[k]) == 120, k
        assert np.array_equal(lean[k], full[k], equal_nan=True), k


def test_kv_sizes_given_as_columns_equal_computed_ones() -> None:
    cols = _batch(3000)
    given = cols.with_columns(kv_sizes(cols))
    assert all(k in given for k in KV_SIZE_COLUMNS)
    want = predict(cols, texts=False)
    got = predict(given, texts=False)
    for k, v in want.items():
        if v.dtype.kind == "f":
            assert np.array_equal(got[k], v, equal_nan=True), k


@pytest.mark.parametrize(
    "a",
    [
        np.array(["bfloat16"] * 5),
        np.array(["full", "ful"]),
        np.array(["ab", "a"]),
        np.array(["x", "x", "y"])[::2],  # a strided view: compared as values
        np.array([["x", "x"], ["x", "x"]]),
        np.array(["x", "x"], dtype=object),
        np.array(["", ""]),
        np.array(["a"]),
    ],
)
def test_one_value_checks_agree_with_numpy(a: np.ndarray) -> None:
    assert all_equal(a) == bool((a == a.flat[0]).all())
    for value in ("x", "bfloat16", "", "a"):
        want = np.asarray(a == value)
        got = equals(a, value)
        assert got.shape == want.shape and got.dtype == want.dtype
        assert np.array_equal(got, want)


_X = np.array([1.5, -0.0, np.nan, 3.0])


@pytest.mark.parametrize(
    "cond", [np.zeros(4, bool), np.ones(4, bool), np.array([True, False, True, False])]
)
@pytest.mark.parametrize(
    ("a", "b"),
    [(0.0, _X), (_X, 0.0), (_X, np.arange(4)), (2.0, 1.0), (_X.astype(np.float32), 0.0),
     (_X[None, :], 0.0), ("fp8", "bfloat16"), (np.array(["ab", "xyz"] * 2), "q")],
)  # fmt: skip
@pytest.mark.parametrize("reps", [1, 25])  # 4 rows (np.where itself), 100 (its shortcuts)
def test_where_is_numpys_bit_for_bit(cond: np.ndarray, a: object, b: object, reps: int) -> None:
    cond = np.tile(cond, reps)
    a, b = (np.tile(x, reps) if isinstance(x, np.ndarray) else x for x in (a, b))
    want = np.where(cond, a, b)
    got = where(cond, a, b)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got.view(np.uint8), np.ascontiguousarray(want).view(np.uint8))


@pytest.mark.parametrize("log", [np.log, np.log2])
def test_whole_log_is_the_log(log: object) -> None:
    rng = np.random.default_rng(1)
    for x in (
        rng.integers(1, 9000, 50_000).astype(float),  # whole numbers: by their table
        np.full(50_000, 1024.0),
        rng.integers(1, 5, 50_000) * 1.5,  # not whole: log itself
        np.r_[np.full(5000, 3.0), np.nan],
    ):
        got, want = _whole_log(x, log), log(x)  # type: ignore[operator]
        assert got.dtype == want.dtype
        assert np.array_equal(np.isnan(got), np.isnan(want))
        # Bit for bit on the machines we ran; within 1 ulp here, since numpy may take a short
        # table's logs on another loop than a long column's on some CPU. A wrong index or
        # range moves a log by >= 1/65536 of itself, ~10^11 ulp.
        ok = ~np.isnan(want)
        np.testing.assert_array_max_ulp(got[ok], want[ok], maxulp=1)
