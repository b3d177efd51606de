"""A few configurations' operator power in one power-model call (`dse.predict.op_power.batched`,
issue 37) predicts what one call per operator predicts: every output of varied small batches and
single rows (dense and MoE, both engines, fp8, tensor parallel, every GPU) against the same rows
with the batching switched off (`Pricer.batch_power`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from dse.predict import load_artifact, predict
from dse.predict.op_power import batched, board_limited, op_power_w, resolve
from dse.predict.ops import forward_ops
from dse.predict.pricing import Pricer
from dse.spec import columns as C
from dse.spec.hardware import get_gpu
from tests.predict.test_golden_small import golden_configs

RTOL = 1e-6  # the same rows through the power MLP in another batch: float32 round-off at most


def _same(a: dict, b: dict, what: str) -> None:
    assert set(a) == set(b), what
    for k, v in a.items():
        x, y = np.asarray(v), np.asarray(b[k])
        if x.dtype.kind == "f":
            assert not np.isnan(x).any() or np.isnan(y).any(), f"{what} {k}: NaN (read early)"
            np.testing.assert_allclose(x, y, rtol=RTOL, atol=1e-15, equal_nan=True, err_msg=k)
        else:
            assert (x == y).all(), f"{what} {k}: {x} != {y}"


def _unbatched(monkeypatch: pytest.MonkeyPatch, cfg: dict[str, np.ndarray]) -> dict:
    with monkeypatch.context() as m:
        m.setattr(Pricer, "batch_power", False)
        return predict(cfg)


@pytest.fixture(scope="module")
def cfg() -> dict[str, np.ndarray]:
    if load_artifact("h100_sxm")[0] is None:
        pytest.skip("shipped artifacts not found")
    return golden_configs(200, seed=37)


def test_small_batches_predict_as_with_one_power_call_per_operator(
    cfg: dict[str, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    # 200 rows over 5 GPUs x 2 engines: groups of ~20 rows, each a few-configuration batch
    _same(predict(cfg), _unbatched(monkeypatch, cfg), "200 rows")


@pytest.mark.parametrize("i", [0, 3, 7, 11, 19, 42, 77, 123, 150, 199])
def test_one_row_predicts_as_with_one_power_call_per_operator(
    cfg: dict[str, np.ndarray], monkeypatch: pytest.MonkeyPatch, i: int
) -> None:
    row = {k: v[i : i + 1] for k, v in cfg.items()}
    _same(predict(row), _unbatched(monkeypatch, row), f"row {i}")


def test_batched_power_fills_each_call_as_its_own_evaluation() -> None:
    art, _ = load_artifact("h100_sxm")
    if art is None:
        pytest.skip("shipped artifacts not found")
    gpu = get_gpu("h100_sxm")
    cols, _ = C.as_columns({k: v[:9] for k, v in golden_configs(9, seed=5).items()})
    ops = [op for op in forward_ops(cols, "prefill") if np.ndim(op.flops) == 1][:6]
    rng = np.random.default_rng(0)
    lats = [10 ** rng.uniform(-6, -2, 9) for _ in ops]
    lats[-1] = 10 ** rng.uniform(-6, -2, (3, 9))  # per-node times of (9,) work: broadcast
    lats[1] = np.asarray(3e-5)  # one time for every row's work
    each = [op_power_w(art, op, gpu, t) for op, t in zip(ops, lats, strict=True)]
    with batched():
        pending = [op_power_w(art, op, gpu, t) for op, t in zip(ops, lats, strict=True)]
        assert all(np.isnan(p).all() for p in pending)  # not evaluated yet
        limited = board_limited(gpu, pending[0][2:5])  # a view: limited when resolved
        assert limited.base is pending[0]
        resolve()
        after = op_power_w(art, ops[0], gpu, lats[0])  # a call after a resolve: resolved on exit
    for p, e in zip(pending, each, strict=True):
        np.testing.assert_allclose(p, np.minimum(e, gpu.board_power_w) if p is pending[0] else e,
                                   rtol=RTOL)  # fmt: skip
    np.testing.assert_allclose(after, each[0], rtol=RTOL)


def test_power_inputs_of_one_shape_equal_the_general_path() -> None:
    """`PowerModel`'s inputs of three float arrays of one shape (written straight into the
    matrix) are those of the general path (clip, broadcast, stack), out-of-range values too."""
    from dse.models.power import _inputs, _inputs_same_shape

    rng = np.random.default_rng(1)
    uc, um = rng.uniform(-0.5, 2.5, (2, 3, 40))
    lat = 10 ** rng.uniform(-8, 1, (3, 40))
    fast = _inputs_same_shape(uc, um, lat)
    general = _inputs(uc.tolist(), um.tolist(), lat.tolist())  # lists: not the fast path
    np.testing.assert_array_equal(fast, general)
    np.testing.assert_array_equal(_inputs(uc, um, lat), general)


def test_bulk_batch_defers_the_calls_of_few_rows_and_spreads_them_back() -> None:
    """`batched(few=False)` (a bulk batch's shape groups): a call with `groups` of at most
    `DEFER_ROWS` distinct rows is evaluated in `resolve`, once per group and spread back to
    every row; a call of more rows is evaluated at once (no copy of 10^4 rows' inputs)."""
    from dse.predict._rows import Groups
    from dse.predict.op_power import DEFER_ROWS

    art, _ = load_artifact("h100_sxm")
    if art is None:
        pytest.skip("shipped artifacts not found")
    gpu = get_gpu("h100_sxm")
    base, _ = C.as_columns({k: v[:6] for k, v in golden_configs(6, seed=11).items()})
    order = np.random.default_rng(2).integers(0, 6, 90)  # 6 configurations, 90 rows
    cols = base.take(order)
    op = next(o for o in forward_ops(cols, "prefill") if np.ndim(o.flops) == 1)
    lat = 10 ** np.random.default_rng(3).uniform(-6, -3, 6)
    groups = Groups(np.unique(order, return_index=True)[1], order.astype(np.intp))
    each = op_power_w(art, op, gpu, lat[order])
    wide = replace(op, flops=np.float64(2e9), bytes=np.float64(3e7))  # one size, many times
    times = 10 ** np.linspace(-6, -3, DEFER_ROWS + 1)
    big = op_power_w(art, wide, gpu, times)
    with batched(few=False):
        pending = op_power_w(art, op, gpu, lat[order], groups=groups)
        assert np.isnan(pending).all()  # deferred
        now = op_power_w(art, wide, gpu, times)
        assert not np.isnan(now).any()  # evaluated at once
        limited = board_limited(gpu, pending)
    np.testing.assert_allclose(pending, each, rtol=RTOL)
    np.testing.assert_allclose(limited, np.minimum(each, gpu.board_power_w), rtol=RTOL)
    np.testing.assert_array_equal(now, big)
