"""The frozen predictor's numbers do not move when its per-call cost is cut (issue 18).

tests/data/golden_small.npz holds every float output (less the `blocks.*` sums) of `dse.predict.predict` for the 500
configurations of `golden_configs()`, written with the code before the small-call work
(commit 47be5c9) by running this file: `PYTHONPATH=. python tests/predict/test_golden_small.py`.
Rewrite it only when a change is meant to move predictions (a new artifact), and say so.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden_small.npz"
N = 500
# Relative tolerance. On the machine that wrote the file the code gave these numbers to 1e-9
# (checked in the session that cut the per-call cost, docs/performance.md). A test on another
# CPU must allow for OpenBLAS's kernel choice in the float32 residual MLPs (up to ~1e-7 of an
# MLP output, issue 18), so 1e-6 here: any real change of a model term moves outputs by far more.
RTOL = 1e-6
# Absolute floor for outputs that are exactly 0 (breakdown items a configuration does not run).
ATOL_S = 1e-15


def golden_configs(n: int = N, seed: int = 18) -> dict[str, np.ndarray]:
    """Dense and MoE models on every registered GPU, both engines, 16-bit and fp8, batches that
    fit and batches that queue in waves (large batch x long context on 40 GB)."""
    rng = np.random.default_rng(seed)
    moe = rng.random(n) < 0.3
    heads = rng.choice([16, 32, 64], n)
    gpu = rng.choice(["h100_sxm", "a100_sxm", "a100_sxm_40gb", "h200_sxm", "gh200"], n)
    # fp8 only on Hopper (the A100 artifacts have no fp8 kernels, as the chip has none).
    hopper = np.isin(gpu, ["h100_sxm", "h200_sxm", "gh200"])
    fp8 = lambda: np.where(hopper & (rng.random(n) < 0.2), "fp8", "bfloat16")  # noqa: E731
    return {
        "d_model": rng.choice([2048, 3072, 4096, 5120, 8192], n),
        "n_layers": rng.choice(np.arange(8, 81, 4), n),
        "n_heads": heads,
        "n_kv_heads": np.minimum(rng.choice([1, 2, 4, 8, 16], n), heads),
        "head_dim": np.full(n, 128),
        "d_ff": rng.integers(32, 448, n) * 64,
        "vocab_size": rng.choice([32000, 128256, 151936], n),
        "n_experts": np.where(moe, rng.choice([8, 16, 64], n), 1),
        "top_k": np.where(moe, rng.choice([1, 2, 4], n), 1),
        "d_ff_expert": rng.choice([1408, 4096, 14336], n),
        "weight_dtype": fp8(),
        "kv_dtype": fp8(),
        "batch_size": rng.integers(1, 257, n),
        "prompt_tokens": rng.integers(16, 8193, n),
        "output_tokens": rng.integers(1, 2049, n),
        "tensor_parallel": rng.choice([1, 2, 4, 8], n),
        "engine": rng.choice(["vllm", "trtllm"], n),
        "gpu": gpu,
    }


def numeric_outputs() -> dict[str, np.ndarray]:
    from dse.predict import predict

    out = predict(golden_configs())
    # Floats only, less `blocks.*` (sums of the `breakdown.*` items) to keep the file small;
    # the out-of-range flags are compared through the band they widen.
    return {
        k: np.asarray(v)
        for k, v in out.items()
        if np.asarray(v).dtype.kind == "f" and not k.startswith("blocks.")
    }


def test_predictions_match_the_golden_file() -> None:
    if not GOLDEN.is_file():
        pytest.skip(f"{GOLDEN} not found")
    from dse.resources import surrogates_dir

    if not (surrogates_dir() / "h100_sxm" / "manifest.json").is_file():
        pytest.skip("shipped artifacts not found")
    gold = np.load(GOLDEN)
    now = numeric_outputs()
    assert set(now) == set(gold.files), "output keys changed"
    for k in gold.files:
        np.testing.assert_allclose(now[k], gold[k], rtol=RTOL, atol=ATOL_S, err_msg=k)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    GOLDEN.parent.mkdir(exist_ok=True)
    outs = numeric_outputs()
    np.savez_compressed(GOLDEN, **outs)
    print(f"wrote {GOLDEN} ({GOLDEN.stat().st_size:,} bytes, {len(outs)} keys)")
