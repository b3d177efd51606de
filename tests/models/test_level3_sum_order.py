"""Level 3's structured stage column by column (`level3._structured`, `_row_sum_order`)
against the design matrix's row sums (`design(g) @ theta` as `_rows_dot`), bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from dse.models import level3 as L3


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float64).view(np.uint64)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf - inf, NaN: as numpy warns
@pytest.mark.parametrize("k", [1, 2, 4, 7, 8, 9, 14, 15, 16, 17, 24, 31, 40])
def test_row_sum_order_is_numpys_row_sum(k: int) -> None:
    """Random terms (wide magnitudes, both signs, +-0.0, inf, NaN), some columns zero on
    every row (left out as None): the same bits as `X.sum(axis=1)` of the C-ordered matrix."""
    rng = np.random.default_rng(k)
    n = 4000
    X = rng.lognormal(0.0, 4.0, (n, k)) * rng.choice([-1.0, 1.0], (n, k))
    X[rng.random((n, k)) < 0.05] = 0.0
    X[rng.random((n, k)) < 0.05] = -0.0
    X[rng.random((n, k)) < 0.002] = np.inf
    X[rng.random((n, k)) < 0.002] = -np.inf
    X[rng.random((n, k)) < 0.002] = np.nan
    X[:5] = -0.0  # rows of -0.0 only
    zero = rng.random(k) < 0.3
    X[:, zero] = 0.0
    X = np.ascontiguousarray(X)
    terms = [None if zero[j] else X[:, j].copy() for j in range(k)]
    if all(t is None for t in terms):
        terms[0] = X[:, 0].copy()
    assert np.array_equal(_bits(L3._row_sum_order(terms)), _bits(X.sum(axis=1)))


def _inputs(n: int, rng: np.random.Generator) -> L3.GlobalInputs:
    def t() -> np.ndarray:
        return rng.lognormal(-3.0, 2.0, n)

    t_dec, attn, comm = t(), t(), t()
    f = {
        "engine": np.full(n, "vllm"),
        "t_pre_s": t(),
        "t_pre_roof_s": t(),
        "t_dec_s": t_dec,
        "t_dec_roof_s": t(),
        "t_dec_attn_s": attn,
        "t_dec_attn_roof_s": t(),
        "t_dec_comm_s": np.where(rng.random(n) < 0.3, 0.0, comm),
        "t_dec_comm_roof_s": t(),
        "steps": rng.integers(0, 500, n).astype(float),
        "batch": rng.integers(1, 128, n).astype(float),
        "prompt": rng.integers(1, 8192, n).astype(float),
        "output": rng.integers(1, 500, n).astype(float),
        "n_layers": rng.integers(1, 96, n).astype(float),
        "d_model": rng.integers(512, 16384, n).astype(float),
        "tp": rng.choice([1.0, 2.0, 4.0, 8.0], n),
        "n_experts": np.ones(n),
        "gqa": rng.choice([1.0, 4.0, 8.0], n),
        "kv_fill": rng.uniform(0.0, 2.5, n),
        "waves": rng.choice([1.0, 2.0, 3.0], n),
    }
    fields = set(L3.GlobalInputs.__dataclass_fields__)
    return L3.GlobalInputs(**{k: v for k, v in f.items() if k in fields})


@pytest.mark.parametrize("aware", [None, "some"])
def test_structured_equals_design_rows_dot(aware: str | None) -> None:
    rng = np.random.default_rng(3)
    n = 5000
    g = _inputs(n, rng)
    gqa_aware = None if aware is None else rng.random(n) < 0.5
    for theta in (
        rng.uniform(0.0, 2.0, len(L3.TERMS)),
        np.where(rng.random(len(L3.TERMS)) < 0.4, 0.0, rng.uniform(0.0, 1e-3, len(L3.TERMS))),
    ):
        x_ttft, x_dec = L3.design(g)
        if gqa_aware is not None:
            x_dec[:, L3.TERMS.index("a_attn_gqa")] *= ~gqa_aware
        ttft, dec = L3._structured(theta, g, gqa_aware)
        assert np.array_equal(_bits(ttft), _bits(L3._rows_dot(x_ttft, theta)))
        assert np.array_equal(_bits(dec), _bits(L3._rows_dot(x_dec, theta)))
