"""Level 2 calibrates each distinct feature row once, phase by phase (issue 37,
`dse.predict._rows.unique_float_rows_by_part`): freely drawn workloads have distinct prefill
rows (tokens = batch x prompt) but decode rows that repeat (tokens = batch), which a
deduplication over both phases together missed. The outputs are those of the path without it,
row by row."""

from __future__ import annotations

import numpy as np
import pytest

from dse.predict import predict, pricing
from dse.predict._rows import unique_float_rows_by_part
from dse.predict.artifacts import load_artifact

RTOL = 1e-6  # a row's MLP outputs may differ by ~1e-7 between batches on another BLAS

# (d_model, n_layers, n_heads, n_kv_heads, d_ff, vocab_size): 7-13B dense decoders
MODELS = np.array(
    [
        (4096, 32, 32, 32, 11008, 32000),
        (4096, 32, 32, 8, 14336, 128256),
        (5120, 40, 40, 40, 13824, 32000),
        (4096, 32, 32, 8, 14336, 32000),
    ]
)


def free_workloads(n: int = 400, seed: int = 3) -> dict[str, np.ndarray]:
    """Four models on h100_sxm, prompts and outputs drawn freely, a few batch sizes and TPs:
    every prefill row its own, decode rows repeating."""
    rng = np.random.default_rng(seed)
    m = MODELS[rng.integers(0, len(MODELS), n)]
    names = ("d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "vocab_size")
    cols = {k: m[:, j] for j, k in enumerate(names)}
    cols |= {
        "head_dim": np.full(n, 128),
        "batch_size": rng.choice([1, 8, 32], n),
        "prompt_tokens": rng.integers(16, 8193, n),
        "output_tokens": rng.integers(2, 2049, n),
        "tensor_parallel": rng.choice([1, 2], n),
        "gpu": np.full(n, "h100_sxm"),
    }
    return cols


def test_parts_are_deduplicated_apart() -> None:
    rng = np.random.default_rng(0)
    distinct = rng.random((150, 3))
    repeating = distinct[np.arange(100) % 5]  # 5 distinct rows, each also a row of the first part
    X = np.concatenate([distinct, repeating])
    rep, inverse = unique_float_rows_by_part(X, [150, 100])
    assert len(rep) == 155  # every row of the distinct part, 5 of the repeating one
    np.testing.assert_array_equal(X[rep][inverse], X)  # bit for bit
    assert (rep[inverse[150:]] >= 150).all()  # never merged with the other part's rows
    # the same rows as one part: most are distinct (150 of 250)
    assert unique_float_rows_by_part(X, [250]) is None
    assert unique_float_rows_by_part(distinct, [75, 75]) is None


def test_free_workloads_take_the_per_phase_path_and_agree_row_by_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    art, _ = load_artifact("h100_sxm")
    if art is None:
        pytest.skip("no shipped artifact for h100_sxm")
    cols = free_workloads()
    n = len(cols["gpu"])
    seen: list[tuple[int, int]] = []
    real = pricing.unique_float_rows_by_part

    def spy(X: np.ndarray, sizes: list[int]) -> tuple[np.ndarray, np.ndarray] | None:
        u = real(X, sizes)
        seen.append((len(X), len(X) if u is None else len(u[0])))
        return u

    monkeypatch.setattr(pricing, "unique_float_rows_by_part", spy)
    new = predict(cols)
    # both Level-2 blocks over both phases (2n rows each), fewer rows calibrated: the decode
    # rows repeat; the prefill rows alone are n distinct ones
    assert len(seen) == 2
    for rows, kept in seen:
        assert rows == 2 * n
        assert n < kept < 1.5 * n
    monkeypatch.setattr(pricing, "unique_float_rows_by_part", lambda X, sizes: None)
    old = predict(cols)  # every feature row calibrated as it comes
    assert set(new) == set(old)
    for k, v in old.items():
        if np.asarray(v).dtype.kind == "f":
            np.testing.assert_allclose(new[k], v, rtol=RTOL, atol=1e-15, err_msg=k)
        else:
            np.testing.assert_array_equal(new[k], v, err_msg=k)
