"""All-reduce fit choices: the int8 NCCL tables borrow the float16 table's rate-curve shape
(fitted jointly, at the octaves the int8 table measured only: held-out octaves, the no-leak
guard, the state), and the smoothing weight is chosen per table by leave-one-octave-out CV."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dse.fitting import allreduce
from dse.metrics import mape_pct
from dse.models.allreduce import (
    SMOOTH,
    SMOOTH_CHOICES,
    AllReduceModel,
    CollectiveModel,
    shape_implementation,
)

# slow: minutes on a 2-core VM (fits, sweeps, builds); `pytest -m "not slow"` leaves it out
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def groups(data_dir) -> dict[str, dict[str, pd.DataFrame]]:
    from dse.data import load

    table = load(data_dir, ["allreduce"])["allreduce"]
    return {g: allreduce.allreduce_groups(table, g) for g in ("h100_sxm", "h200_sxm")}


def test_only_int8_nccl_tables_borrow_a_shape() -> None:
    assert shape_implementation("nccl.nccl.int8") == "nccl.nccl"
    assert shape_implementation("nccl.nccl") is None
    assert shape_implementation("vllm.custom.vllm_graph") is None
    assert shape_implementation("nccl.h100_dgx") is None


@pytest.mark.parametrize("gpu", ["h100_sxm", "h200_sxm"])
def test_int8_held_out_octaves_better_with_the_float16_shape(groups, gpu):
    i8, f16 = groups[gpu]["allreduce.nccl.nccl.int8"], groups[gpu]["allreduce.nccl.nccl"]
    y = i8["latency_s"].to_numpy(float)
    # one fixed smoothing weight, so that only the borrowed shape differs
    alone = allreduce.cv_allreduce(i8, lambda: AllReduceModel(gpu, "nccl.nccl.int8", smooth=SMOOTH))
    shaped = allreduce.cv_allreduce(
        i8, lambda: AllReduceModel(gpu, "nccl.nccl.int8", smooth=SMOOTH), f16
    )
    # measured: H100 5.10 -> 4.72%, H200 5.44 -> 4.75% (docs/accuracy.md)
    assert mape_pct(shaped, y) < mape_pct(alone, y) - 0.2
    assert mape_pct(shaped, y) < 5.0


def test_a_size_only_the_shape_table_measured_is_not_borrowed(groups):
    i8, f16 = (
        groups["h100_sxm"]["allreduce.nccl.nccl.int8"],
        groups["h100_sxm"]["allreduce.nccl.nccl"],
    )
    held = allreduce.size_octaves(i8) == 21
    full = AllReduceModel("h100_sxm", "nccl.nccl.int8").fit(i8[~held], f16)
    cut = AllReduceModel("h100_sxm", "nccl.nccl.int8").fit(
        i8[~held], f16[allreduce.size_octaves(f16) != 21]
    )
    np.testing.assert_array_equal(full.c_s_per_gb_, cut.c_s_per_gb_)
    np.testing.assert_array_equal(full.alpha_s_, cut.alpha_s_)
    # ... and the borrowed shape does change the fit
    alone = AllReduceModel("h100_sxm", "nccl.nccl.int8", smooth=SMOOTH).fit(i8[~held])
    assert np.abs(alone.c_s_per_gb_ - full.c_s_per_gb_).max() > 0.01 * full.c_s_per_gb_.max()


def test_shaped_model_round_trips_and_stays_positive(groups):
    i8, f16 = (
        groups["h200_sxm"]["allreduce.nccl.nccl.int8"],
        groups["h200_sxm"]["allreduce.nccl.nccl"],
    )
    m = AllReduceModel("h200_sxm", "nccl.nccl.int8").fit(i8, f16)
    assert (m.c_s_per_gb_ >= 0).all() and (m.alpha_s_ >= 0).all()
    assert m.smooth_ in SMOOTH_CHOICES
    assert AllReduceModel.from_state(m.to_state()).smooth_ == m.smooth_
    b = 2.0 ** np.arange(8.0, 31.0, 0.5)
    for n in (2.0, 4.0, 8.0):
        out = m.predict(message_bytes=b, n_gpus=np.full_like(b, n))
        t = out["latency_s"]
        # time grows with size, but for dips at measured single-size bumps (H200, 8 GPUs: 29.6
        # us at 16 KiB between 17.4 and 22.4) that stay small
        assert (t[1:] / t[:-1]).min() > 0.85 and t[-1] > 100 * t[0]
        back = AllReduceModel.from_state(m.to_state()).predict(
            message_bytes=b, n_gpus=np.full_like(b, n)
        )
        np.testing.assert_array_equal(out["latency_s"], back["latency_s"])
    # the fit reproduces its own table to within a few percent
    y = i8["latency_s"].to_numpy(float)
    fit = m.predict(
        message_bytes=i8["message_bytes"].to_numpy(float), n_gpus=i8["n_gpus"].to_numpy(float)
    )
    assert mape_pct(fit["latency_s"], y) < 4.0


@pytest.fixture(scope="module")
def a100(data_dir) -> dict[str, pd.DataFrame]:
    from dse.data import load

    return allreduce.allreduce_groups(load(data_dir, ["allreduce"])["allreduce"], "a100_sxm")


def test_smoothing_weight_is_the_inner_cv_choice_and_helps_held_out(a100):
    rows = a100["allreduce.vllm.custom.vllm_graph"]
    y = rows["latency_s"].to_numpy(float)
    key = "vllm.custom.vllm_graph"
    # the choice on all rows is the weight whose own leave-one-octave-out CV scores best
    cv = {
        w: mape_pct(
            allreduce.cv_allreduce(rows, lambda w=w: AllReduceModel("a100_sxm", key, smooth=w)), y
        )
        for w in SMOOTH_CHOICES
    }
    chosen = AllReduceModel("a100_sxm", key).fit(rows)
    assert chosen.smooth_ == min(cv, key=cv.get)
    fixed = AllReduceModel("a100_sxm", key, smooth=chosen.smooth_).fit(rows)
    np.testing.assert_array_equal(chosen.c_s_per_gb_, fixed.c_s_per_gb_)
    # chosen inside every outer fold (never seeing the held-out octave): measured 4.59 -> 4.03%
    nested = mape_pct(allreduce.cv_allreduce(rows, lambda: AllReduceModel("a100_sxm", key)), y)
    assert nested < cv[SMOOTH] - 0.3


def test_other_collectives_keep_the_fixed_weight(a100):
    rows = a100["collective.all_gather.nccl.nccl"]
    m = CollectiveModel("a100_sxm", "nccl.nccl").fit(rows)
    assert m.smooth_ == SMOOTH
