"""Attention families against transformers (issue 21): parameter counts on the meta device, the
layer pattern transformers builds, and KV-cache / state memory against closed forms.

Each config is the shape-defining part of a published config.json (or a tiny one of the same
model type); transformers builds the model on the meta device and its parameter count must equal
total_params plus what the mapping says it leaves out (gpt-oss's biases and sinks)."""

from __future__ import annotations

from typing import Any

import pytest

from dse.spec import arch as A
from dse.spec.hf import import_hf_config
from dse.spec.pattern import layer_counts

try:  # test-only dependencies
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    transformers.logging.set_verbosity_error()
    HAVE_HF = True
except ImportError:  # pragma: no cover
    HAVE_HF = False
needs_hf = pytest.mark.skipif(not HAVE_HF, reason="torch and transformers are not importable")

TINY = {"hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 100}  # fmt: skip
CONFIGS: dict[str, dict[str, Any]] = {
    # Mistral-7B-v0.1: every layer slides over 4096 tokens.
    "mistral sliding": {"model_type": "mistral", **TINY, "num_hidden_layers": 4,
                        "sliding_window": 16},
    # google/gemma-3-1b-it (text): 26 layers, every 6th full, window 512.
    "Gemma-3-1B": {"model_type": "gemma3_text", "hidden_size": 1152, "intermediate_size": 6912,
                   "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
                   "num_hidden_layers": 26, "vocab_size": 262144, "sliding_window": 512},
    "gemma3 tiny": {"model_type": "gemma3_text", **TINY, "head_dim": 16, "num_hidden_layers": 12,
                    "sliding_window": 32},
    # openai/gpt-oss-20b
    "gpt-oss-20b": {"model_type": "gpt_oss", "hidden_size": 2880, "intermediate_size": 2880,
                    "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
                    "num_hidden_layers": 24, "num_local_experts": 32, "num_experts_per_tok": 4,
                    "vocab_size": 201088, "sliding_window": 128},
    "gpt-oss tiny": {"model_type": "gpt_oss", **TINY, "head_dim": 16, "num_hidden_layers": 4,
                     "num_local_experts": 4, "num_experts_per_tok": 2},
    # deepseek-ai/DeepSeek-V3 (61 layers, 3 dense, MLA 512 / 1536 / 64 + 128 / 128)
    "DeepSeek-V3": {"model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
                    "moe_intermediate_size": 2048, "num_attention_heads": 128,
                    "num_key_value_heads": 128, "num_hidden_layers": 61, "n_routed_experts": 256,
                    "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
                    "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64,
                    "qk_nope_head_dim": 128, "v_head_dim": 128, "vocab_size": 129280,
                    "n_group": 8, "topk_group": 4},
    "deepseek tiny no q latent": {"model_type": "deepseek_v3", **TINY, "num_hidden_layers": 3,
                                  "moe_intermediate_size": 32, "n_routed_experts": 4,
                                  "n_shared_experts": 2, "num_experts_per_tok": 2,
                                  "first_k_dense_replace": 1, "kv_lora_rank": 16,
                                  "q_lora_rank": None, "qk_rope_head_dim": 8,
                                  "qk_nope_head_dim": 16, "v_head_dim": 12, "n_group": 2,
                                  "topk_group": 1},
    # Qwen/Qwen3-Next-80B-A3B-Instruct
    "Qwen3-Next-80B-A3B": {"model_type": "qwen3_next", "hidden_size": 2048,
                           "intermediate_size": 5120, "num_attention_heads": 16,
                           "num_key_value_heads": 2, "head_dim": 256, "num_hidden_layers": 48,
                           "num_experts": 512, "num_experts_per_tok": 10,
                           "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
                           "linear_num_value_heads": 32, "linear_num_key_heads": 16,
                           "linear_key_head_dim": 128, "linear_value_head_dim": 128,
                           "linear_conv_kernel_dim": 4, "full_attention_interval": 4,
                           "vocab_size": 151936},
    # ibm-ai-platform/Bamba-9B (Mamba-2 + 3 attention layers)
    "Bamba-9B": {"model_type": "bamba", "hidden_size": 4096, "intermediate_size": 14336,
                 "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
                 "attn_layer_indices": [9, 18, 27], "mamba_n_heads": 128, "mamba_d_head": 64,
                 "mamba_n_groups": 1, "mamba_d_state": 128, "mamba_d_conv": 4,
                 "mamba_expand": 2, "vocab_size": 128256},
}  # fmt: skip


def hf_model(cfg: dict[str, Any]) -> tuple[int, Any]:
    kw = {k: v for k, v in cfg.items() if k != "model_type"}
    conf = AutoConfig.for_model(cfg["model_type"], **kw)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(conf)
    return sum(p.numel() for p in model.parameters()), conf


@pytest.mark.slow
@needs_hf
@pytest.mark.parametrize("name", list(CONFIGS))
def test_params_and_pattern_equal_transformers(name: str) -> None:
    imp = import_hf_config(CONFIGS[name])
    n, conf = hf_model(CONFIGS[name])
    assert A.total_params(imp.arch) + imp.unmodelled_params == n
    # The pattern counts the layer kinds transformers builds.
    L, raw = conf.num_hidden_layers, conf.to_dict()
    window = raw.get("sliding_window")
    try:
        types = list(conf.layer_types)  # a property on some configs (Bamba)
    except AttributeError:  # Mistral: sliding_window applies to every layer; DeepSeek: none
        types = ["sliding_attention" if window else "full_attention"] * L
    kinds = {"full_attention": 0, "sliding_attention": 1, "linear_attention": 2, "mamba": 2}
    want = tuple(sum(kinds[t] == i for t in types) for i in range(3))
    got = tuple(int(x) for x in layer_counts(imp.arch.attention_pattern, imp.arch.n_layers))
    assert got == want
    if got[1]:
        assert imp.arch.sliding_window == window


@needs_hf
def test_published_totals() -> None:
    """Totals the model cards publish: DeepSeek-V3 671B (+ 14B of MTP weights not in the
    transformers model), gpt-oss-20b 20.9B, Qwen3-Next 80B."""
    assert A.total_params(import_hf_config(CONFIGS["DeepSeek-V3"]).arch) == pytest.approx(
        671e9, rel=0.002
    )
    imp = import_hf_config(CONFIGS["gpt-oss-20b"])
    assert A.total_params(imp.arch) + imp.unmodelled_params == pytest.approx(20.9e9, rel=0.005)
    assert A.total_params(import_hf_config(CONFIGS["Qwen3-Next-80B-A3B"]).arch) == pytest.approx(
        80e9, rel=0.01
    )


def test_exact_imports_are_exact() -> None:
    for name, cfg in CONFIGS.items():
        imp = import_hf_config(cfg)
        assert imp.exact == ("gpt" not in name), name


# ---------------------------------------------------------------------- KV and state memory
BASE = dict(d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8, d_ff=14336)


@pytest.mark.parametrize("tokens", [100, 4096, 32768])
def test_kv_cache_closed_forms(tokens: int) -> None:
    kvb = 2  # bfloat16
    # 3:1 sliding:full, window 4096: 8 full layers hold every token, 24 at most the window.
    a = A.Architecture(**BASE, attention_pattern="sliding*3,full", sliding_window=4096)
    per_layer = 2 * 8 * 128 * kvb
    want = 8 * per_layer * tokens + 24 * per_layer * min(tokens, 4096)
    assert A.kv_cache_bytes_per_gpu(a, tokens) == want
    assert A.kv_bytes_per_token(a) == 32 * per_layer  # the rate inside the window
    # MLA: kv_lora_rank + qk_rope_head_dim per token per layer, whatever the heads.
    m = A.Architecture(**{**BASE, "n_kv_heads": 32}, kv_lora_rank=512, qk_rope_head_dim=64)
    assert A.kv_cache_bytes_per_gpu(m, tokens) == 32 * (512 + 64) * kvb * tokens
    assert A.kv_cache_bytes_per_gpu(m, tokens, 8) == A.kv_cache_bytes_per_gpu(
        m, tokens
    )  # replicated
    # Linear layers: a constant state (heads x state x head dim + the conv's 3 last inputs).
    g = A.Architecture(**BASE, attention_pattern="linear*3,full", linear_n_heads=32,
                       linear_head_dim=128, linear_n_groups=16, linear_state_dim=128)  # fmt: skip
    state = 24 * (32 * 128 * 128 + 3 * (2 * 16 * 128 + 32 * 128)) * kvb
    assert A.state_bytes(g) == state
    assert A.kv_cache_bytes_per_gpu(g, tokens) == 8 * per_layer * tokens + state


def test_memory_rule_counts_windows_latents_and_states() -> None:
    plain = A.Architecture(**BASE)
    slide = A.Architecture(**BASE, attention_pattern="sliding*3,full", sliding_window=4096)
    mem = {k: A.memory_breakdown(x, 8, 32768, 256) for k, x in (("full", plain), ("slide", slide))}
    # vLLM's 16-token blocks: 33024 tokens held by full layers, 4096 by sliding ones.
    per_layer = 2 * 8 * 128 * 2
    assert mem["slide"]["kv_cache_one"] == 8 * per_layer * 33024 + 24 * per_layer * 4096
    assert mem["full"]["kv_cache_one"] == 32 * per_layer * 33024
    assert mem["slide"]["weights"] == mem["full"]["weights"]


def test_window_at_least_the_context_is_full_attention_in_the_accounting() -> None:
    plain = A.Architecture(**BASE)
    wide = A.Architecture(**BASE, attention_pattern="sliding", sliding_window=8192)
    for s in (1, 100, 8192):
        assert A.prefill_flops(wide, s) == A.prefill_flops(plain, s)
        assert A.attention_flops_per_token(wide, s) == A.attention_flops_per_token(plain, s)
        assert A.kv_cache_bytes_per_gpu(wide, s) == A.kv_cache_bytes_per_gpu(plain, s)
    assert A.prefill_flops(wide, 10000) < A.prefill_flops(plain, 10000)
    # sum_i min(i, w) by hand: w = 2, s = 5: 1 + 2 + 2 + 2 + 2.
    assert A.sliding_keys_sum(5, 2) == 9


def test_params_per_gpu_at_tp1_is_the_total() -> None:
    for cfg in CONFIGS.values():
        a = import_hf_config(cfg).arch
        assert A.params_per_gpu(a, 1) == pytest.approx(A.total_params(a), rel=1e-12)
