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
