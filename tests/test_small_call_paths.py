"""The few-row paths of issue 18's small calls compute what the general paths compute: the
ensemble run as one block-diagonal network (`dse.models._nn._StackedMembers`), the roofline
of a small batch's operators in one pass (`dse.predict.pricing.roofline_times`), Level 3's
linear stage and a row's independence from its batch."""

from __future__ import annotations

import numpy as np
import pytest

from dse.models._nn import STACK_MEMBERS_ROWS, MeanMLP
from dse.predict import load_artifact, predict
from dse.predict.ops import forward_ops
from dse.predict.pricing import roofline_op, roofline_times
from dse.spec import columns as C
from dse.spec.hardware import get_gpu
from tests.test_golden_small import golden_configs

# float32 products in another blocking: ~1e-7 of a log factor; a wrong member, weight block
# or scaler moves it by 1e-2 or more
LOG_ATOL = 2e-6


def _ensembles() -> list[tuple[str, MeanMLP]]:
    art, _ = load_artifact("h100_sxm")
    if art is None:
        pytest.skip("no shipped h100_sxm artifact")
    out = []
    for name in art.names():
        mlp = getattr(art.model(name), "mlp_", None)
        if isinstance(mlp, MeanMLP):
            out.append((name, mlp))
    assert out, "the shipped artifact has ensembles"
    return out


@pytest.mark.parametrize("n", [1, 7, 16, 17, STACK_MEMBERS_ROWS])
def test_stacked_members_give_each_members_own_prediction(n: int) -> None:
    rng = np.random.default_rng(n)
    for name, mlp in _ensembles():
        X = rng.normal(0.0, 2.0, (n, mlp.n_features))
        each = np.stack([m.predict(X) for m in mlp.members], axis=1)  # the members' own passes
        np.testing.assert_allclose(mlp.predict(X), each.mean(axis=1), atol=LOG_ATOL, err_msg=name)
        member = rng.integers(0, len(mlp.members), n)
        np.testing.assert_allclose(
            mlp.predict_member(X, member), each[np.arange(n), member], atol=LOG_ATOL, err_msg=name
        )


def test_stacked_members_give_a_row_its_value_in_any_batch() -> None:
    """A row predicted alone and among others of a small batch: the same value, to float32
    round-off (which BLAS kernel a CPU picks for the padded blocks is not ours to promise)."""
    rng = np.random.default_rng(3)
    for name, mlp in _ensembles():
        X = rng.normal(0.0, 2.0, (STACK_MEMBERS_ROWS, mlp.n_features))
        whole = mlp.predict(X)
        for i in (0, 5, STACK_MEMBERS_ROWS - 1):
            assert abs(mlp.predict(X[i : i + 1])[0] - whole[i]) <= LOG_ATOL, name


@pytest.mark.parametrize("gpu", ["h100_sxm", "h200_sxm", "a100_sxm"])
def test_roofline_of_a_small_batch_in_one_pass_equals_each_operators(gpu: str) -> None:
    cfg = golden_configs()
    cols, n = C.as_columns({k: v[:40] for k, v in cfg.items()})
    cols["weight_dtype"] = np.where(np.arange(n) % 3 == 0, "fp8", "bfloat16")  # fp8 peaks too
    g = get_gpu(gpu)
    for phase in ("prefill", "decode"):
        ops = forward_ops(cols, phase)
        for t, op in zip(roofline_times(ops, g), ops, strict=True):
            np.testing.assert_array_equal(t, roofline_op(op, g)[0], err_msg=f"{phase} {op.name}")


def test_one_row_predicts_as_in_a_batch() -> None:
    """A configuration alone (the few-row paths) and in a batch of 200 (the general paths)."""
    cfg = golden_configs()
    cols = {k: v[:200] for k, v in cfg.items()}
    whole = predict(cols)
    for i in (0, 17, 123, 199):
        one = predict({k: v[i : i + 1] for k, v in cols.items()})
        for k in ("latency_s", "ttft_s", "tpot_s", "energy_j"):
            np.testing.assert_allclose(one[k][0], whole[k][i], rtol=1e-6, err_msg=f"{i} {k}")
        assert one["out_of_range"][0] == whole["out_of_range"][i]
        assert one["roofline_ops"][0] == whole["roofline_ops"][i]
