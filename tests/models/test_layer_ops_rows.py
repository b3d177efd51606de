"""The layer-op model walks a few rows one by one in plain Python (`LayerOpModel._predict_rows`,
issue 18: a one-configuration prediction); it must give the vectorised walk's numbers."""

from __future__ import annotations

import numpy as np
import pytest

from dse.models import layer_ops as L
from dse.predict import load_artifact


@pytest.mark.parametrize("gpu", ["h100_sxm", "a100_sxm", "h200_sxm"])
def test_few_rows_equal_the_vectorised_walk(gpu: str) -> None:
    """Every output of 1,200 rows in chunks of 17 (<= FEW_ROWS) against the same rows in one
    batch: every operator and one the model lacks, token counts on and off the wave steps and
    the embedding's kernel switch, past the measured elements, widths between and beyond the
    measured ones, tp 1-16 (3: between measured ones), gated and not."""
    art, _ = load_artifact(gpu)
    if art is None or not art.names("layer_op"):
        pytest.skip(f"no shipped {gpu} layer-op model")
    model = art.model(art.names("layer_op")[0])
    rng = np.random.default_rng(0)
    n = 1200
    heads = rng.choice([8, 16, 32, 40, 64], n)
    tokens = rng.choice([1, 2, 3, 7, 16, 17, 24, 100, 264, 265, 1000, 4096, 9000, 70000], n)
    arrays = {
        "op": rng.choice([*L.LAYER_OPS, "not_an_op"], n),
        "num_tokens": tokens * rng.choice([1.0, 1.0, 1.37], n),
        "d_model": rng.choice([1024, 2048, 2560, 4096, 5120, 8192, 12288], n).astype(float),
        "n_heads": heads.astype(float),
        "n_kv_heads": np.minimum(rng.choice([1, 4, 8, 40], n), heads).astype(float),
        "d_ff": rng.choice([4096, 11008, 13824, 14336, 28672, 50000], n).astype(float),
        "tensor_parallel": rng.choice([1, 2, 3, 4, 8, 16], n).astype(float),
        "gated_mlp": rng.random(n) < 0.8,
    }
    assert n > L.FEW_ROWS >= 17
    batch = model.predict(**arrays)
    assert np.isnan(batch["latency_s"]).any() and np.isfinite(batch["latency_s"]).sum() > n // 2
    for s in range(0, n, 17):
        few = model.predict(**{k: v[s : s + 17] for k, v in arrays.items()})
        assert set(few) == set(batch)
        for k, v in few.items():
            np.testing.assert_allclose(
                np.asarray(v, dtype=float),
                np.asarray(batch[k][s : s + 17], dtype=float),
                rtol=1e-12,
                atol=0,
                equal_nan=True,
                err_msg=f"{gpu} {k} rows {s}..{s + 16}",
            )


def test_interp1_pair_is_two_interp1_bit_for_bit() -> None:
    """`_interp1_pair` (one knot search for the per-wave and per-width curves) gives what
    `_interp1` gives for each curve: below, on, between and beyond the knots."""
    rng = np.random.default_rng(1)
    knots = L._KNOTS
    xs = [knots[0] - 1.0, knots[-1] + 1.0, *knots, *rng.uniform(knots[0], knots[-1], 300)]
    for _ in range(5):
        ya, yb = rng.normal(size=len(knots)).tolist(), rng.normal(size=len(knots)).tolist()
        for x in xs:
            assert L._interp1_pair(x, knots, ya, yb) == (
                L._interp1(x, knots, ya),
                L._interp1(x, knots, yb),
            )
