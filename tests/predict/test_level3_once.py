"""Level 3 is applied once (issue 23): the predictor scales every operator by the factor of its
kind (level3.KERNEL_GROUPS) and adds the overheads; `Level3.correct` computes the same totals
from its design matrix. The two agree by algebra, not by luck: this pins it on the shipped
artifacts, on the golden configurations."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from dse.models.level3 import FACTOR_KEYS, KERNEL_GROUPS, group_kinds
from dse.predict import load_artifact, predict_columns
from dse.predict.request import LEVEL3_MODEL, _fitted_on, _model, base_costs, global_inputs
from dse.spec import columns as C
from dse.spec.hardware import get_gpu

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_golden_predictions import golden_configs


def test_every_factor_key_is_one_that_correct_returns() -> None:
    from dse.models.level3 import TERMS, EngineFit, Level3

    m = Level3()
    m.engines_ = {"vllm": EngineFit(np.ones(len(TERMS)), (), np.zeros(2), 1.0)}
    g = _golden_inputs("h100_sxm", 8)[1]
    out = m.correct(g)
    assert set(FACTOR_KEYS) <= set(out)
    assert set(KERNEL_GROUPS) == {"prefill", "decode"}
    assert group_kinds("decode", "dec_attn_factor") == ("attention_decode",)


def _golden_inputs(gpu: str, limit: int | None = None):  # type: ignore[no-untyped-def]
    cfg = golden_configs()
    cols, _ = C.as_columns(cfg)
    idx = np.flatnonzero(cols["gpu"].astype(str) == gpu)[:limit]
    part = {k: v[idx] for k, v in cols.items()}
    art, fitted_for = load_artifact(gpu)
    g_spec = get_gpu(gpu)
    base = base_costs(part, len(idx), g_spec, art, _fitted_on(art, fitted_for, g_spec))
    return part, global_inputs(part, base), art


@pytest.mark.slow
@pytest.mark.parametrize("gpu", ["h100_sxm", "h200_sxm", "a100_sxm", "gh200"])
def test_the_corrected_operators_sum_to_level3s_totals(gpu: str) -> None:
    part, g, art = _golden_inputs(gpu)
    lvl3 = _model(art, LEVEL3_MODEL)
    if lvl3 is None:
        pytest.skip(f"no shipped Level 3 for {gpu}")
    corr = lvl3.correct(g)
    pred = predict_columns(part, len(part["gpu"]), gpu=get_gpu(gpu), artifact=art)
    np.testing.assert_allclose(pred["ttft_s"], corr["ttft_s"], rtol=1e-10)
    has_decode = g.steps > 0
    np.testing.assert_allclose(
        pred["latency_s"], corr["ttft_s"] + np.where(has_decode, corr["decode_s"], 0.0), rtol=1e-10
    )
