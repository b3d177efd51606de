"""The roofline, written once (dse/roofline.py): hand-worked numbers on an H100 SXM."""

from __future__ import annotations

import numpy as np
import pytest

from dse.predict.ops import Op
from dse.predict.pricing import roofline_op, transfer_factor
from dse.roofline import (
    ACTIVE_POWER_FRACTION,
    ALLREDUCE_FLOOR_S,
    LAUNCH_S,
    ring_allreduce_s,
    roofline_s,
    standin_power_w,
)
from dse.spec.hardware import get_gpu


def test_a_square_gemm_is_compute_bound_and_a_gemv_memory_bound_on_h100() -> None:
    h100 = get_gpu("h100_sxm")  # 989.4 TFLOP/s bf16 dense, 3.35 TB/s HBM3
    # 4096^3 bf16 GEMM: 2 * 4096^3 = 137.4 GFLOP -> 138.9 us; 3 * 4096^2 * 2 B = 100.7 MB -> 30 us.
    f, b = 2.0 * 4096**3, 3 * 4096**2 * 2.0
    t = roofline_s(f, b, h100.peak_bf16_flops_per_s, h100.hbm_bw_bytes_per_s)
    assert t == pytest.approx(137_438_953_472 / 989.4e12)
    assert t == pytest.approx(138.9e-6, rel=1e-3)
    # A decode GEMV (m = 1) over an 8192 x 8192 bf16 weight: 134 MB at 3.35 TB/s = 40.1 us.
    f, b = 2.0 * 8192 * 8192, 8192 * 8192 * 2.0
    t = roofline_s(f, b, h100.peak_bf16_flops_per_s, h100.hbm_bw_bytes_per_s)
    assert t == pytest.approx(8192 * 8192 * 2.0 / 3.35e12)
    assert t == pytest.approx(40.06e-6, rel=1e-3)
    # Vectorised; operand order kept (max of compute and memory time).
    ts = roofline_s(np.array([f, 0.0]), np.array([0.0, b]), 1e15, 1e12)
    np.testing.assert_allclose(ts, [f / 1e15, b / 1e12])


def test_an_operator_adds_the_launch_floor_and_reports_its_utilisation() -> None:
    h100 = get_gpu("h100_sxm")
    op = Op(
        "ffn/down",
        "gemm",
        "ffn",
        np.ones(1),
        np.array([2.0 * 8192 * 8192]),
        np.array([8192 * 8192 * 2.0]),
        {"dtype": np.array(["bfloat16"])},
    )
    t, util = roofline_op(op, h100)
    t_roof = 8192 * 8192 * 2.0 / 3.35e12
    np.testing.assert_allclose(t, t_roof + LAUNCH_S)
    np.testing.assert_allclose(util, t_roof / (t_roof + LAUNCH_S))


def test_ring_allreduce_moves_two_g_minus_one_over_g_of_the_message() -> None:
    # 64 MiB over 8 GPUs at 450 GB/s: 2 * 7/8 * 64 MiB / 450e9 = 261 us, plus the 10 us floor.
    t = ring_allreduce_s(64 * 2**20, 8, 450e9)
    assert t == pytest.approx(2 * 7 / 8 * 64 * 2**20 / 450e9 + ALLREDUCE_FLOOR_S)
    # One GPU moves nothing: the floor only.
    assert ring_allreduce_s(64 * 2**20, 1, 450e9) == pytest.approx(ALLREDUCE_FLOOR_S)


def test_standin_power_spans_idle_to_three_quarters_of_the_board() -> None:
    h100 = get_gpu("h100_sxm")  # 70 W idle, 700 W board
    p = standin_power_w(h100, np.array([0.0, 1.0]))
    np.testing.assert_allclose(p, [70.0, 70.0 + ACTIVE_POWER_FRACTION * 630.0])


def test_transfer_factor_is_the_bandwidth_ratio_where_memory_bound() -> None:
    h100, h200 = get_gpu("h100_sxm"), get_gpu("h200_sxm")
    big = 1e11  # bytes: 21 ms on an H200, the 5 us launch floor is 2e-4 of it
    op = Op(
        "ffn/down",
        "gemm",
        "ffn",
        np.ones(1),
        np.array([1.0]),
        np.array([big]),
        {"dtype": np.array(["bfloat16"])},
    )
    got = transfer_factor(op, h200, h100)
    expect = (big / h200.hbm_bw_bytes_per_s + LAUNCH_S) / (big / h100.hbm_bw_bytes_per_s + LAUNCH_S)
    np.testing.assert_allclose(got, expect)
    assert float(got[0]) == pytest.approx(3.35 / 4.8, rel=1e-3)
