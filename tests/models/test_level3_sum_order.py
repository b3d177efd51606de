"""Level 3's structured stage column by column (`level3._structured`, `_row_sum_order`)
against the design matrix's row sums (`design(g) @ theta` as `_rows_dot`).

The column-by-column sum follows numpy's row-sum order, so with numpy 2.4 the two agree bit
for bit (measured, docs/performance.md h-exactpred). The tests allow what another order of the
same terms may move a sum by (1e-12 of the sum of the terms' magnitudes): a numpy release that
sums rows in another order must not fail them, a wrong or missing term does."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dse.models import level3 as L3


def _same_sum(got: np.ndarray, want: np.ndarray, scale: np.ndarray) -> bool:
    """Equal within a reordering of the terms: |got - want| <= 1e-12 x sum |terms| per row,
    inf, NaN and zeros where `want` has them."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    fin = np.isfinite(want)
    if not np.array_equal(got[~fin], want[~fin], equal_nan=True):
        return False
    return bool(np.all(np.abs(got[fin] - want[fin]) <= 1e-12 * scale[fin]))


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
    with np.errstate(invalid="ignore"):
        scale = np.abs(X).sum(axis=1)
    assert _same_sum(L3._row_sum_order(terms), X.sum(axis=1), scale)


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
        assert _same_sum(ttft, L3._rows_dot(x_ttft, theta), np.abs(x_ttft) @ np.abs(theta))
        assert _same_sum(dec, L3._rows_dot(x_dec, theta), np.abs(x_dec) @ np.abs(theta))


def test_few_rows_take_the_design_matrix(monkeypatch: pytest.MonkeyPatch) -> None:
    """Up to FEW_ROWS rows `_structured` and `_parts` build the design matrix (fewer numpy
    calls for one-row predictions); the two ways give the same sums on the same rows."""
    rng = np.random.default_rng(11)
    g = _inputs(40, rng)
    # every term >= 0 (decode time above its attention and communication parts): any order
    # of the additions is then within ~14 ulp, far inside the tolerance
    g = dataclasses.replace(
        g,
        t_dec_s=g.t_dec_attn_s + g.t_dec_comm_s + g.t_dec_s,
        t_dec_roof_s=g.t_dec_attn_roof_s + g.t_dec_comm_roof_s + g.t_dec_roof_s,
    )
    theta = rng.uniform(0.0, 2.0, len(L3.TERMS))
    fit = L3.EngineFit(theta, (), np.array([-0.1, 0.1]), 1.0)
    parts = {}
    for few in (10**9, 0):
        monkeypatch.setattr(L3, "FEW_ROWS", few)
        parts[few] = L3._parts(fit, g)
    assert parts[0].keys() == parts[10**9].keys()
    for k, v in parts[0].items():
        w = parts[10**9][k]
        assert np.allclose(v, w, rtol=1e-12, atol=0.0, equal_nan=True), k
