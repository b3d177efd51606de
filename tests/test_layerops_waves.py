"""Wave steps of the layer-op model at a width no curve was measured at (dse.surrogate.layerops):
the smooth part of a neighbour width's curve is read at the matched element count, its wave
sawtooth at the row's own token count, so that the steps stay where the waves start (every
2 x SMs tokens for every width). Artifacts fitted before keep their predictions."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dse.surrogate import _fitutil as U
from dse.surrogate import ops_models as O
from dse.surrogate.artifact import Artifact
from dse.surrogate.layerops import LayerOpModel, _wave_split, layer_op_inputs

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
    assert U.mape_pct(pred, g["latency_s"].to_numpy()) < 10.0  # 11.1% before, 8.3% now


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
SHIPPED_ID = "808900393933"
SHIPPED_ROWS = {
    "op": [
        "input_layernorm",
        "input_layernorm",
        "post_attention_layernorm",
        "mlp_act",
        "attn_rope",
        "emb",
        "add",
        "input_layernorm",
    ],
    "num_tokens": [300.0, 400.0, 272.0, 1000.0, 640.0, 8.0, 3000.0, 20000.0],
    "d_model": [5120.0, 4096.0, 6144.0, 5120.0, 3072.0, 5120.0, 8192.0, 12288.0],
    "n_heads": [40.0, 32.0, 48.0, 40.0, 24.0, 40.0, 64.0, 96.0],
    "n_kv_heads": [8.0, 32.0, 8.0, 8.0, 8.0, 8.0, 8.0, 8.0],
    "d_ff": [13824.0, 11008.0, 16384.0, 13824.0, 8192.0, 13824.0, 28672.0, 28672.0],
    "tensor_parallel": [1.0, 2.0, 1.0, 2.0, 1.0, 4.0, 8.0, 4.0],
}
SHIPPED_LATENCY_S = [
    6.088381951346148e-06,
    6.999999999999999e-06,
    6.04052353100546e-06,
    2.1487686019511752e-05,
    6.603854497789253e-06,
    6.5083784430692645e-06,
    4.503442571215948e-05,
    0.0007904701767486087,
]


def test_shipped_artifact_loads_without_the_wave_split() -> None:
    art = Artifact.load("h100_sxm")
    state = art.models["layer_op.vidur"]
    model = LayerOpModel.from_state(state)
    if "curve_wave_split" in state:  # refitted with this code
        assert model.curve_parts_ is not None
    else:
        assert model.curve_parts_ is None
        assert "curve_wave_split" not in model.to_state()
    out = model.predict(
        op="input_layernorm", num_tokens=np.array([1.0, 300.0]), **LLAMA2_7B, tensor_parallel=1.0
    )
    assert np.isfinite(out["latency_s"]).all()
    if art.artifact_id != SHIPPED_ID:
        pytest.skip(f"h100_sxm artifact refitted ({art.artifact_id}): no pinned predictions")
    rows = {k: np.asarray(v) for k, v in SHIPPED_ROWS.items()}
    np.testing.assert_allclose(model.predict(**rows)["latency_s"], SHIPPED_LATENCY_S, rtol=1e-12)
