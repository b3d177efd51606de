"""Small batches price the operators of one adapter in one model call (dse.predict.stacking,
issue 18); what they predict must be what the per-operator path predicts for the same rows."""

from __future__ import annotations

import numpy as np
import pytest

from dse.predict import load_artifact
from dse.predict.ops import forward_ops
from dse.predict.pricing import Pricer, op_runs
from dse.predict.stacking import STACK_AT_MOST, stack_ops
from dse.spec import columns as C
from dse.spec.hardware import get_gpu
from tests.predict.test_golden_small import golden_configs

# Float outputs agree to float32 round-off of the residual MLPs (their products see other
# matrix shapes when stacked); a row priced with another operator's shape moves by percents.
RTOL = 1e-6


def _rows(cfg: dict[str, np.ndarray], idx: np.ndarray) -> dict[str, np.ndarray]:
    return {k: v[idx] for k, v in cfg.items()}


# The out-of-range text merges operators whose misses agree over the whole batch, so its
# wording (not its misses) depends on the batch; every other output is the row's own.
BATCH_WORDED = ("out_of_range_inputs",)


def _assert_same(small: dict, ref: dict, j: np.ndarray | None, what: str, in_batch: bool) -> None:
    for k, v in small.items():
        a = np.asarray(v)
        b = np.asarray(ref[k]) if j is None else np.asarray(ref[k])[j]
        if a.dtype.kind == "f":
            np.testing.assert_allclose(
                a, b, rtol=RTOL, atol=1e-15, equal_nan=True, err_msg=f"{what} {k}"
            )
        elif not (in_batch and k in BATCH_WORDED):
            assert (a == b).all(), f"{what} {k}: {a} != {b}"


def _per_operator(monkeypatch: pytest.MonkeyPatch, cfg: dict[str, np.ndarray]) -> dict:
    """The same rows through the per-operator path (stacking switched off)."""
    from dse.predict import predict

    with monkeypatch.context() as m:
        m.setattr(Pricer, "stack_at_most", 0)
        return predict(cfg)


@pytest.fixture(scope="module")
def batch() -> tuple[dict[str, np.ndarray], dict]:
    from dse.predict import predict

    if load_artifact("h100_sxm")[0] is None:
        pytest.skip("shipped artifacts not found")
    cfg = golden_configs()  # ~100 configurations per GPU: above STACK_AT_MOST, not stacked
    return cfg, predict(cfg)


@pytest.mark.slow
def test_one_row_predictions_equal_the_per_operator_path(batch, monkeypatch) -> None:
    """Every output (floats, flags, the out-of-range text, provenance) of 42 configurations
    predicted one at a time, stacked and not: dense and MoE, every GPU, both engines, fp8,
    queued batches; and against the same rows inside the 500-row batch (provenance is per
    row: a bf16 row is not listed as borrowing the sibling tables its batch's fp8 rows use)."""
    from dse.predict import predict

    cfg, big = batch
    assert len(cfg["gpu"]) // 5 > STACK_AT_MOST
    for i in range(0, 500, 12):
        one = _rows(cfg, np.array([i]))
        got = predict(one)
        _assert_same(got, _per_operator(monkeypatch, one), None, f"row {i}", in_batch=False)
        _assert_same(got, big, np.array([i]), f"row {i} in the batch", in_batch=True)


def test_small_mixed_batches_equal_the_per_operator_path(batch, monkeypatch) -> None:
    """Batches of 2-9 configurations mixing dense and MoE rows (the MoE block then runs in
    some configurations only, and is priced on those) and GPUs."""
    from dse.predict import predict

    cfg, big = batch
    rng = np.random.default_rng(3)
    for size in (2, 5, 9):
        idx = np.sort(rng.choice(500, size, replace=False))
        sub = _rows(cfg, idx)
        got = predict(sub)
        _assert_same(got, _per_operator(monkeypatch, sub), None, f"rows {idx}", in_batch=False)
        _assert_same(got, big, idx, f"rows {idx} in the batch", in_batch=True)


def test_a_one_row_pricing_stacks_gemms_and_layer_ops() -> None:
    """The stacked path is the one a one-configuration call takes: every GEMM and layer
    operator of both phases gets its price from one stacked call per adapter."""
    art, _ = load_artifact("h100_sxm")
    if art is None:
        pytest.skip("shipped artifacts not found")
    cols, n = C.as_columns(_rows(golden_configs(), np.array([0])))
    gpu = get_gpu("h100_sxm")
    pricer = Pricer(gpu, art, None, cols)
    phases = [
        (forward_ops(cols, "prefill"), "prefill", None),
        (forward_ops(cols, "decode"), "decode", None),
    ]
    pre = pricer._stacked(phases, n, [op_runs(ops, n) for ops, _, _ in phases])
    for p, (ops, _, _) in enumerate(phases):
        want = {j for j, op in enumerate(ops) if op.kind in ("gemm", "elementwise", "embedding")}
        want = {j for j in want if (ops[j].count > 0).all()}
        assert want and want <= set(pre[p]), (p, want - set(pre[p]))


def test_stack_ops_lays_operators_end_to_end() -> None:
    cols, n = C.as_columns(_rows(golden_configs(), np.arange(3)))
    gemms = [op for op in forward_ops(cols, "prefill") if op.kind == "gemm"]
    s = stack_ops(gemms, n)
    assert s is not None and s.flops.shape == (len(gemms) * n,)
    for i, op in enumerate(gemms):
        np.testing.assert_array_equal(
            s.dims["n"][i * n : (i + 1) * n], np.broadcast_to(op.dims["n"], (n,))
        )
        np.testing.assert_array_equal(s.bytes[i * n : (i + 1) * n], np.broadcast_to(op.bytes, (n,)))
