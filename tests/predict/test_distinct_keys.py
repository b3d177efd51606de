"""All-distinct batches (issue 37, h-distinct2): keys told over half distinct from a prefix
(`dse.predict._rows._over_half_distinct`) give `unique_rows` the full pass's answer, and text
columns of one value (`dse.predict.pricing.gemm_peak`) price as one comparison per row does."""

from __future__ import annotations

import numpy as np
import pytest

from dse.predict import _rows
from dse.predict.pricing import gemm_peak
from dse.spec.hardware import get_gpu


def _full_pass(*cols: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """`unique_rows` without the prefix test (what it answered before)."""
    key = np.zeros(len(cols[0]), dtype=np.int64)
    for c in cols:
        key = key * (int(c.max()) + 1) + c
    uniq, codes = np.unique(key, return_inverse=True)
    return None if len(uniq) > 0.5 * len(key) else (uniq, codes)


@pytest.mark.parametrize("distinct", [0.02, 0.3, 0.49, 0.5, 0.51, 0.6, 0.8, 0.97, 1.0])
@pytest.mark.parametrize("layout", ["shuffled", "sorted", "pairs"])
def test_the_prefix_test_answers_as_the_full_pass(distinct: float, layout: str) -> None:
    rng = np.random.default_rng(int(distinct * 100))
    n = 20_000
    k = max(int(distinct * n), 1)
    # k distinct values, each at least once, the rest repeats; wide values (past 20 bits: the
    # hashed branch, not direct addressing)
    vals = np.concatenate([np.arange(k), rng.integers(0, k, n - k)]) * 1_000_003 + 7
    if layout == "shuffled":
        rng.shuffle(vals)
    elif layout == "sorted":
        vals.sort()
    else:  # each repeat next to its first (a probe of every step-th row sees no repeats)
        vals = np.sort(vals)[::-1].copy()
    cols = (vals, np.full(n, 5))  # a second column, one value
    got = _rows.unique_rows(*cols)
    want = _full_pass(*cols)
    assert (got is None) == (want is None)
    if got is not None:
        rep, codes = got
        # each row's representative holds the row's own values
        for c in cols:
            np.testing.assert_array_equal(c[rep][codes], c)
        assert len(rep) == k
    # True only where over half the keys are distinct
    if _rows._over_half_distinct(vals):
        assert len(np.unique(vals)) > 0.5 * n


def test_a_dtype_column_of_one_value_prices_as_each_row_does() -> None:
    gpu = get_gpu("h100_sxm")
    for name in ("fp8", "bfloat16", "nvfp4", "fp16"):
        col = np.full(500, name)
        want = np.full(500, float(gemm_peak(name, gpu)))
        np.testing.assert_array_equal(np.broadcast_to(gemm_peak(col, gpu), (500,)), want)
    mixed = np.array(["fp8", "bfloat16"] * 250)
    np.testing.assert_array_equal(
        gemm_peak(mixed, gpu), [gemm_peak(str(v), gpu) for v in mixed.tolist()]
    )
