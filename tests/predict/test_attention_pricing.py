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


def test_a_window_covering_the_sequence_prices_as_full_attention() -> None:
    """Where the attention models cannot tell a window longer than the sequence from none
    (vLLM on H100: no power head, no backend rule), a sliding layer costs what a full layer
    does; it is still its own operator, run with its window (issue 33)."""
    full = predict(BASE)
    wide = predict({**BASE, "attention_pattern": "sliding*3,full", "sliding_window": 4096})
    # rel 1e-6: the two rows' operators reach the power MLPs in other batch layouts (float32
    # round-off ~1e-8 on some CPUs' OpenBLAS kernels, nn.MLP.predict); a priced window moves
    # energy by percents
    for k in FLOATS:
        assert wide[k][0] == pytest.approx(full[k][0], rel=1e-6), k
    core = full["breakdown.prefill.attention/core_s"][0]
    assert wide["breakdown.prefill.attention/core_sliding_s"][0] == pytest.approx(0.75 * core)


def test_a_covering_window_reaches_the_power_head_and_backend_rule() -> None:
    """A sliding layer's window reaches the attention models even where it covers the
    sequence (issue 33): H200's power head reads it (same latency, other energy), and SGLang on
    H100 runs head_dim 256 with a window on Triton, named in the kernel models."""
    cfg = {**BASE, "gpu": "h200_sxm", "attention_pattern": "sliding", "sliding_window": 4096}
    full = predict({**cfg, "attention_pattern": "full", "sliding_window": 0})
    wide = predict(cfg)
    for phase in ("prefill", "decode"):
        t_full = full[f"breakdown.{phase}.attention/core_s"][0]
        assert wide[f"breakdown.{phase}.attention/core_sliding_s"][0] == pytest.approx(t_full)
    assert wide["energy_j"][0] != pytest.approx(full["energy_j"][0], rel=1e-6)
    hd256 = {**BASE, "n_heads": 16, "head_dim": 256, "engine": "sglang",
             "attention_pattern": "sliding,full", "sliding_window": 4096}  # fmt: skip
    models = str(predict(hd256, models=True)["kernel_models"][0])
    assert "context_attention.sglang[triton]" in models
    assert "generation_attention.sglang[triton]" in models
    assert "context_attention.sglang[fa3]" in models  # the full layers


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


def test_a_model_fitted_without_windows_prices_the_bounded_call() -> None:
    """A100's attention models saw no window (fitted range of window_size [0, 0]): a sliding
    layer stays in their range as the full kernel at the bounded length, prefill count-scaled
    by the band's query-key pairs over the triangle's, decode over min(kv_len, window) keys."""
    from dse.models.artifact import Artifact
    from dse.predict.adapters import ADAPTERS
    from dse.predict.ops import forward_ops
    from dse.spec import columns as C
    from dse.spec.arch import sliding_keys_sum
    from dse.spec.hardware import get_gpu

    cfg = {**BASE, "gpu": "a100_sxm", "attention_pattern": "sliding", "sliding_window": 512,
           "prompt_tokens": 4096}  # fmt: skip
    cols, _ = C.as_columns({k: np.array([v]) for k, v in cfg.items()})
    art, gpu = Artifact.load("a100_sxm"), get_gpu("a100_sxm")
    heads = dict(batch_size=4.0, num_heads=32.0, num_kv_heads=8.0, head_dim=128.0)
    for phase, length, name in (("prefill", "isl", "context_attention.vllm"),
                                ("decode", "kv_len", "generation_attention.vllm")):  # fmt: skip
        ops = forward_ops(cols, phase, None if phase == "prefill" else np.array([4096.0]))
        op = next(o for o in ops if o.name == "attention/core_sliding")
        price = ADAPTERS[op.kind](art, op, gpu, None)
        want = art.model(name).predict(**heads, **{length: 512.0})["latency_s"]
        if phase == "prefill":
            want = want * sliding_keys_sum(4096.0, 512.0) / (512 * 513 / 2)
        assert price.latency_s == pytest.approx(want, rel=1e-9), phase
        assert not price.out_of_range.any() and "window_size" not in (price.misses or {})
