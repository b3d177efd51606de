"""The predictor's fast paths give every row the numbers it would get alone: deduplicated
operator shapes, rows priced only where an operator runs, float32 MLPs, power once per group."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dse.models._nn import MLP
from dse.predict import load_artifact
from dse.predict._rows import unique_rows
from dse.predict.request import base_costs
from dse.spec import columns as C
from dse.spec.hardware import get_gpu

# A row's prediction in any batch equals its prediction alone within this relative tolerance:
# the MLP layers run in float32 (about 6e-8 relative per rounding), and the kernels a CPU's BLAS
# picks for a block of rows may sum in another order. Measured spread on one machine: 7e-8.
ROW_RTOL = 1e-6
# ... and, for an output near zero (a log-latency residual), within this absolute tolerance in
# output units: the float32 round-off of the last hidden layer (activations of order 1, about
# 6e-8 a rounding) does not shrink with the output. Measured on an AMD EPYC: 1.2e-7.
ROW_ATOL = 1e-6


def _reference_forward(m: MLP, X: np.ndarray) -> np.ndarray:
    """The fitted regressor in float64, as scikit-learn computes it."""
    h = (X - m.x_mean) / m.x_scale
    for i, (w, b) in enumerate(zip(m.coefs, m.intercepts, strict=True)):
        h = h @ w + b
        if i < len(m.coefs) - 1:
            h = np.tanh(h) if m.activation == "tanh" else np.maximum(h, 0.0)
    return h[:, 0] * m.y_scale + m.y_mean


@pytest.mark.parametrize("hidden", [(8,), (32, 32), (64, 64)])
def test_mlp_forward_is_float64_to_round_off_and_batch_invariant(hidden: tuple[int, ...]) -> None:
    rng = np.random.default_rng(0)
    k = 15
    sizes = (k, *hidden, 1)
    coefs = tuple(rng.normal(size=(a, b)) / np.sqrt(a) for a, b in itertools.pairwise(sizes))
    intercepts = tuple(rng.normal(size=b) * 0.1 for b in sizes[1:])
    x_mean = rng.normal(size=k) * 10
    x_scale = rng.uniform(0.5, 3.0, k)
    x_scale[5] = 3.5e-13  # a feature constant up to rounding in the training rows
    m = MLP(coefs, intercepts, x_mean, x_scale, 0.3, 0.5, "tanh")
    X = x_mean + x_scale * rng.normal(size=(9000, k))
    y = m.predict(X)
    np.testing.assert_allclose(y, _reference_forward(m, X), rtol=0, atol=2e-6)
    # A row's output does not depend on the batch it comes in (block padding, einsum output),
    # up to float32 round-off: which GEMM kernel OpenBLAS picks for a block size depends on the
    # CPU, so bit identity across batch layouts is not a property to promise (issue 18). A
    # padding row leaking into a result, or a block misaligned by one row, moves outputs by
    # orders of magnitude more than ROW_RTOL.
    for size in (1, 2, 7, 16, 17, 4095, 4097):
        idx = rng.choice(len(X), size, replace=False)
        np.testing.assert_allclose(
            m.predict(X[idx]), y[idx], rtol=ROW_RTOL, atol=ROW_ATOL, err_msg=str(size)
        )


def test_unique_rows_groups_equal_rows_over_the_node_axis() -> None:
    rng = np.random.default_rng(1)
    n = 5000
    a = rng.integers(0, 4, n)  # (n,), broadcast over 3 nodes
    b = rng.integers(0, 3, (3, n))
    rep, inverse = unique_rows(a, b)
    flat_a = np.broadcast_to(a, (3, n)).ravel()
    assert len(rep) == len(set(zip(flat_a.tolist(), b.ravel().tolist(), strict=True)))
    assert np.array_equal(flat_a[rep][inverse], flat_a)
    assert np.array_equal(b.ravel()[rep][inverse], b.ravel())
    # Mostly distinct rows: no deduplication.
    assert unique_rows(np.arange(n), np.zeros(n, dtype=int)) is None


def _configs(n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(2)
    moe = rng.random(n) < 0.3
    heads = rng.choice([16, 32], n)
    cols = {
        "d_model": rng.choice([2048, 4096], n),
        "n_layers": rng.choice([16, 32], n),
        "n_heads": heads,
        "n_kv_heads": np.minimum(rng.choice([2, 8], n), heads),
        "d_ff": rng.choice([8192, 14336], n),
        "n_experts": np.where(moe, 8, 1),
        "top_k": np.where(moe, 2, 1),
        "batch_size": rng.choice([1, 8, 32], n),
        "prompt_tokens": rng.choice([128, 1024], n),
        "output_tokens": rng.choice([64, 300], n),
        "tensor_parallel": rng.choice([1, 2], n),
        "kv_dtype": rng.choice(["bfloat16", "fp8"], n),
        "gpu": np.full(n, "h100_sxm"),
    }
    return cols


def test_levels_1_2_of_a_row_do_not_depend_on_its_batch() -> None:
    art, _ = load_artifact("h100_sxm")
    if art is None:
        pytest.skip("no shipped h100_sxm artifact")
    gpu = get_gpu("h100_sxm")
    cols, n = C.as_columns(_configs(400))  # grid values: operator shapes repeat, dedupe runs
    batch = base_costs(cols, n, gpu, art)
    for i in (0, 1, 57, 211, 399):
        one_cols, _ = C.as_columns({k: v[i : i + 1] for k, v in _configs(400).items()})
        one = base_costs(one_cols, 1, gpu, art)
        for phase in ("prefill", "decode"):
            a, b = getattr(one, phase), getattr(batch, phase)
            for name, v in a.items_s.items():
                np.testing.assert_allclose(
                    v[0], b.items_s[name][i], rtol=ROW_RTOL, atol=0, err_msg=f"{i} {phase} {name}"
                )
                np.testing.assert_allclose(
                    a.items_j[name][0],
                    b.items_j[name][i],
                    rtol=ROW_RTOL,
                    atol=0,
                    err_msg=f"{i} {phase} {name}",
                )


def test_fp8_and_bf16_kv_rows_of_one_shape_are_priced_apart() -> None:
    art, _ = load_artifact("h100_sxm")
    if art is None or not art.names("generation_attention"):
        pytest.skip("no shipped attention model")
    gpu = get_gpu("h100_sxm")
    raw = {k: np.repeat(v[:1], 100) for k, v in _configs(1).items()}
    raw["kv_dtype"] = np.array(["bfloat16", "fp8"] * 50)
    cols, n = C.as_columns(raw)
    dec = base_costs(cols, n, gpu, art).decode.items_s["attention/core"]
    assert abs(dec[0] / dec[1] - 1.0) > 100 * ROW_RTOL
    np.testing.assert_allclose(dec[::2], dec[0], rtol=ROW_RTOL, atol=0)
    np.testing.assert_allclose(dec[1::2], dec[1], rtol=ROW_RTOL, atol=0)


def test_full_prediction_of_a_row_does_not_depend_on_its_batch() -> None:
    """Levels 1-3 end to end: a batch of one gives what the same row gets inside a sweep's
    batch, to float32 round-off (a row priced with another row's operator shape, or a Level-3
    feature taken from a neighbour, would move it by percents)."""
    from dse.predict import predict

    if load_artifact("h100_sxm")[0] is None:
        pytest.skip("no shipped h100_sxm artifact")
    cfg = _configs(300)
    batch = predict(cfg)
    keys = [k for k, v in batch.items() if isinstance(v, np.ndarray) and v.dtype.kind == "f"]
    assert "latency_s" in keys and "energy_j" in keys
    # 20 rows of every kind the configs mix (dense / MoE, TP 1-8, batch sizes): a BLAS
    # matrix-vector product in Level 3 once moved a row's system overhead by one bit
    for i in range(0, 300, 15):
        one = predict({k: v[i : i + 1] for k, v in cfg.items()})
        for k in keys:
            np.testing.assert_allclose(
                one[k],
                batch[k][i : i + 1],
                rtol=ROW_RTOL,
                atol=0,
                equal_nan=True,
                err_msg=f"{i} {k}",
            )
