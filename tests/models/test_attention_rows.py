"""An attention model's design of a few rows is made row by row in Python floats
(`AttentionModel._design_rows`, issue 37: a one-configuration prediction); it must be the
vectorised design (`_design_arrays`) bit for bit: the roofline parts, FLOPs, bytes and every
MLP input, for every shipped attention model (context and generation, every GPU and engine)."""

from __future__ import annotations

import numpy as np
import pytest

from dse.models import attention as AT
from dse.predict import load_artifact
from dse.spec.hardware import gpu_names


def _rows(rng: np.random.Generator, n: int, phase: str) -> dict[str, np.ndarray]:
    """`AttentionModel._inputs`-like rows: heads with and without GQA (groups of 1-8 and not
    powers of two), head_dim 64-256, windows none / shorter / longer than the length, fp8 and
    16-bit caches, prefill lengths on and off the 128-row tiles, decode lengths of nodes."""
    heads = rng.choice([8, 12, 24, 32, 40, 64, 96], n).astype(float)
    group = rng.choice([1, 2, 3, 4, 6, 8], n).astype(float)
    length = rng.choice([1, 16, 127, 128, 129, 700, 4096, 9000], n).astype(float)
    v = {
        "batch_size": rng.choice([1, 3, 8, 32, 128], n).astype(float),
        "num_heads": heads,
        "num_kv_heads": np.maximum(np.floor(heads / group), 1.0),
        "head_dim": rng.choice([64, 80, 96, 128, 256], n).astype(float),
        "window_size": rng.choice([0.0, 0.0, 64.0, 4096.0], n),
        "kv_bytes": rng.choice([1.0, 2.0], n),
        "fp8": rng.choice([0.0, 1.0], n),
    }
    if phase == "context":
        v["isl"] = length
    else:
        v["kv_len"] = np.rint(length * rng.uniform(0.5, 1.5, n))
    return v


@pytest.mark.parametrize("gpu", sorted(gpu_names()))
def test_rows_design_is_the_vectorised_design_bit_for_bit(gpu: str) -> None:
    art, _ = load_artifact(gpu)
    if art is None:
        pytest.skip(f"no shipped {gpu} artifact")
    names = [n for kind in ("context_attention", "generation_attention") for n in art.names(kind)]
    if not names:
        pytest.skip(f"no shipped {gpu} attention model")
    rng = np.random.default_rng(37)
    checked = 0
    for name in names:
        model = art.model(name)
        if not isinstance(model, AT.AttentionModel):
            continue
        for n in (1, 2, 5, AT.DESIGN_ROWS):
            for _ in range(40):
                v = _rows(rng, n, model.phase)
                if not model._rows_design_applies(v):
                    continue
                out, X = model._design_rows(v)
                want, X_want = model._design_arrays(v)
                assert set(out) == set(want), name
                for k, a in want.items():
                    assert out[k].dtype == a.dtype and out[k].shape == a.shape, f"{name} {k}"
                    np.testing.assert_array_equal(out[k], a, err_msg=f"{name} {k}")
                assert X.shape == X_want.shape, name
                np.testing.assert_array_equal(X, X_want, err_msg=name)
                checked += 1
    assert checked, f"{gpu}: no attention model takes the row-by-row design"


def test_rows_design_is_what_predict_uses_for_a_few_rows_only() -> None:
    """`design` takes the row-by-row path for up to DESIGN_ROWS rows and not past them."""
    art, _ = load_artifact("h100_sxm")
    assert art is not None
    model = art.model("context_attention.vllm")
    rng = np.random.default_rng(1)
    assert model._rows_design_applies(_rows(rng, AT.DESIGN_ROWS, "context"))
    assert not model._rows_design_applies(_rows(rng, AT.DESIGN_ROWS + 1, "context"))
