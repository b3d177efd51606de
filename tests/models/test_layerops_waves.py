"""Wave steps of the layer-op model at a width no curve was measured at (dse.models.layer_ops):
the smooth part of a neighbour width's curve is read at the matched element count, its wave
sawtooth at the row's own token count, so that the steps stay where the waves start (every
2 x SMs tokens for every width). Artifacts fitted before keep their predictions."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dse.fitting import layer_ops as O
from dse.metrics import mape_pct
from dse.models.artifact import Artifact
from dse.models.layer_ops import LayerOpModel, _wave_split, layer_op_inputs

# Llama-2-7B's shape (d_model 4096, the only gated 4096-wide model in vidur's H100 rows)
LLAMA2_7B = {"d_model": 4096.0, "n_heads": 32.0, "n_kv_heads": 32.0, "d_ff": 11008.0}


def test_wave_split_sums_to_the_curve_and_keeps_the_steps_in_the_sawtooth() -> None:
    # a staircase of period 100 (flat within a wave, +1 per wave) over a rising smooth part
    tok = np.arange(10.0, 601.0, 10.0)
    val = np.ceil(tok / 100.0) + 0.001 * tok
    smooth, saw = _wave_split(tok, val, 100.0, 0.0, 200.0)
    np.testing.assert_allclose(smooth + saw, val)
    # the smooth part has no step: neighbouring points differ by far less than the step (1),
    # and away from the ends (windows cut short) it is the staircase's mean slope, 1 per wave
    assert np.abs(np.diff(smooth)).max() < 0.2
    inner = (tok >= 110.0) & (tok <= 500.0)
    np.testing.assert_allclose(np.diff(smooth[inner]), 0.1 + 0.01, atol=1e-9)
    # the sawtooth jumps at each wave boundary (100 -> 110 tokens, ...)
    jump = np.diff(saw)[np.isin(tok[:-1], (100.0, 200.0, 300.0, 400.0, 500.0))]
    assert (jump > 0.6).all()
    # no period: all smooth
    smooth, saw = _wave_split(tok, val, np.inf, 0.0, 200.0)
    np.testing.assert_array_equal(smooth, val)
    assert not saw.any()


@pytest.fixture(scope="module")
def h100_rows(data_dir) -> pd.DataFrame:
    from dse.data import load

    return O.layer_op_rows(load(data_dir, ["layer_op"])["layer_op"], "h100_sxm")


@pytest.mark.slow
def test_held_out_width_steps_at_its_own_wave_boundaries(h100_rows) -> None:
    held = h100_rows["model"].str.contains("Llama-2-7b").to_numpy()
    model = LayerOpModel("h100_sxm").fit(h100_rows[~held])
    # the fit has RMSNorm curves of width 8192 only (gated models): 4096 is read from them
    keys = list(model.keys_)
    norm = model.curve_key_ == keys.index("input_layernorm")
    assert set(model.curve_width_[norm]) == {8192.0}
    tok = np.array([264.0, 272.0, 528.0, 544.0])
    shape = {k: np.full(4, v) for k, v in {**LLAMA2_7B, "tensor_parallel": 1.0}.items()}
    us = model.predict(op="input_layernorm", num_tokens=tok, **shape)["latency_s"] * 1e6
    # measured: 4 -> 7 us from 264 to 272 tokens (a second wave of 264 blocks), 7 -> 9 us from
    # 528 to 544; the whole 8192-wide curve read at the same element count put the first step
    # at 528 -> 544 (ratios 1.02 and 1.66)
    assert us[1] / us[0] > 1.4
    assert us[3] / us[2] < 1.4
    g = h100_rows[held & (h100_rows["op"] == "input_layernorm").to_numpy()]
    pred = model.predict(**layer_op_inputs(g))["latency_s"]
    assert mape_pct(pred, g["latency_s"].to_numpy()) < 10.0  # 11.1% before, 8.3% now


def test_state_keys_the_wave_split_and_older_artifacts_read_whole_curves(h100_rows) -> None:
    model = LayerOpModel("h100_sxm").fit(h100_rows)
    assert not hasattr(model, "smooth")  # the unused smoothing weight is no longer kept
    state = model.to_state()
    assert bool(state["curve_wave_split"])
    back = LayerOpModel.from_state(state)
    kw = {
        "op": np.array(["input_layernorm", "mlp_act", "attn_rope", "add"] * 50),
        "num_tokens": np.linspace(1.0, 4000.0, 200),
        **{k: np.full(200, v) for k, v in LLAMA2_7B.items()},
        "d_model": np.full(200, 5120.0),  # no measured curve of this width
        "tensor_parallel": np.full(200, 2.0),
    }
    a, b = model.predict(**kw), back.predict(**kw)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    # a state without the key (fitted before) reads whole curves at the element count
    old = {k: v for k, v in state.items() if k != "curve_wave_split"}
    legacy = LayerOpModel.from_state(old)
    assert legacy.curve_parts_ is None
    assert not np.allclose(legacy.predict(**kw)["latency_s"], a["latency_s"])


# Predictions of the shipped h100_sxm artifact 808900393933 (fitted before the wave split) by the
# code that shipped it (commit 352fbc7): widths between, at and beyond the measured ones
def test_shipped_artifact_reads_measured_widths_as_without_the_wave_split() -> None:
    """The shipped h100_sxm layer-op model carries the wave split; a row of a measured width
    (Llama-2-7B's 4096) reads its own whole curve with or without it (the split only moves
    widths no curve was measured at), and an artifact without the key loads as before."""
    art = Artifact.load("h100_sxm")
    state = dict(art.models["layer_op.vidur"])
    model = LayerOpModel.from_state(state)
    old_form = {k: v for k, v in state.items() if k != "curve_wave_split"}
    old = LayerOpModel.from_state(old_form)
    assert old.curve_parts_ is None and "curve_wave_split" not in old.to_state()
    if "curve_wave_split" not in state:
        pytest.skip("shipped artifact fitted before the wave split")
    assert model.curve_parts_ is not None
    tokens = np.array([1.0, 16.0, 100.0, 264.0, 272.0, 300.0, 1000.0, 4096.0])
    for op in ("input_layernorm", "post_attention_layernorm", "add"):
        kw = {"op": op, "num_tokens": tokens, **LLAMA2_7B, "tensor_parallel": 1.0}
        np.testing.assert_array_equal(
            model.predict(**kw)["latency_s"], old.predict(**kw)["latency_s"]
        )
    # an unmeasured width (3072) is where the two readings differ
    kw = {"op": "input_layernorm", "num_tokens": tokens, "tensor_parallel": 1.0}
    kw.update(d_model=3072.0, n_heads=24.0, n_kv_heads=8.0, d_ff=8192.0)
    assert not np.array_equal(model.predict(**kw)["latency_s"], old.predict(**kw)["latency_s"])
