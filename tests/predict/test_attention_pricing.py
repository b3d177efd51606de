"""Pricing of the attention families (issue 21): sliding layers by the attention models at the
bounded length, MLA and linear layers with their stand-ins named in `roofline_ops`."""

from __future__ import annotations

import numpy as np
import pytest

from dse.predict import predict
from dse.spec.catalogue import lookup_model

BASE = dict(d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8, d_ff=14336, vocab_size=128256,
            gpu="h100_sxm", batch_size=4, prompt_tokens=2048, output_tokens=128)  # fmt: skip
FLOATS = ("ttft_s", "tpot_s", "latency_s", "energy_j", "latency_lo_s", "latency_hi_s")


def test_a_window_covering_the_sequence_prices_exactly_as_full_attention() -> None:
    full = predict(BASE)
    wide = predict({**BASE, "attention_pattern": "sliding*3,full", "sliding_window": 4096})
    for k in FLOATS:
        assert wide[k][0] == full[k][0], k
    assert "breakdown.prefill.attention/core_sliding_s" not in wide


def test_a_short_window_costs_less_at_a_long_prompt() -> None:
    long = {**BASE, "prompt_tokens": 32768}
    full = predict(long)
    slide = predict({**long, "attention_pattern": "sliding*3,full", "sliding_window": 1024})
    assert slide["ttft_s"][0] < full["ttft_s"][0]
    assert slide["tpot_s"][0] < full["tpot_s"][0]
    assert slide["breakdown.prefill.attention/core_sliding_s"][0] > 0
    assert "attention/core" not in slide["roofline_ops"][0].split(",")  # measured models


@pytest.mark.parametrize(
    ("model", "stand_in"),
    [("DeepSeek-V3", "attention/mla_core"), ("Qwen3-Next-80B-A3B", "linear/scan")],
)
def test_unmeasured_layers_are_named_as_priced_by_the_stand_in(model: str, stand_in: str) -> None:
    cfg = {**lookup_model(model).to_dict(), "gpu": "h200_sxm", "tensor_parallel": 8,
           "prompt_tokens": 4096, "output_tokens": 64}  # fmt: skip
    out = predict(cfg)
    assert stand_in in out["roofline_ops"][0].split(",")
    assert np.isfinite(out["latency_s"][0]) and out["latency_s"][0] > 0


def test_mixed_batches_price_each_row_as_alone() -> None:
    rows = [BASE, {**BASE, "attention_pattern": "sliding,full", "sliding_window": 512,
                   "prompt_tokens": 8192}]  # fmt: skip
    both = predict({k: [r.get(k, "full" if k == "attention_pattern" else 0) for r in rows]
                    for k in rows[1]})  # fmt: skip
    for i, r in enumerate(rows):
        alone = predict(r)
        assert both["latency_s"][i] == pytest.approx(alone["latency_s"][0], rel=1e-9)


def test_level3_kv_fill_counts_windows_and_states() -> None:
    """Level 3's memory input (the batch's KV bytes at full length, which also decides the
    waves a batch queues in) holds a sliding layer's window, not the sequence, and a linear
    layer's constant state: the closed form per GPU."""
    from dse.predict.request import kv_memory
    from dse.spec import arch as A
    from dse.spec import columns as C
    from dse.spec.hardware import get_gpu

    base = {**BASE, "batch_size": 4, "prompt_tokens": 8192, "output_tokens": 64}
    sliding = {**base, "attention_pattern": "sliding*3,full", "sliding_window": 512}
    linear = {**base, "attention_pattern": "linear*3,full"}
    gpu = get_gpu("h100_sxm")
    need = {}
    for name, cfg in (("full", base), ("sliding", sliding), ("linear", linear)):
        cols, _ = C.as_columns({k: np.array([v]) for k, v in cfg.items()})
        need[name] = float(kv_memory(cols, gpu)[0][0])
    per_layer = 2 * 8 * 128 * 2  # K and V, 8 KV heads x 128, bf16
    t = 8192 + 64
    assert need["full"] == pytest.approx(4 * t * 32 * per_layer, rel=1e-12)
    assert need["sliding"] == pytest.approx(4 * (8 * t + 24 * 512) * per_layer, rel=1e-12)
    a = C.architecture(C.as_columns({k: np.array([v]) for k, v in linear.items()})[0])
    state = float(np.asarray(A.state_bytes(a, 1)).ravel()[0])
    assert state > 0
    assert need["linear"] == pytest.approx(4 * (8 * t * per_layer + state), rel=1e-12)
