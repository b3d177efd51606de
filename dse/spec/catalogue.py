"""A catalogue of published decoder-only architectures, looked up by name.

Each entry is the subset of the model's Hugging Face `config.json` that fixes its shapes, written
here as data and turned into an `Architecture` by `dse.spec.hf.import_hf_config`, so the catalogue
and the config importer cannot disagree. Weights are taken as 16-bit (bfloat16), as served.
tests/spec/test_hf.py builds every entry whose model type transformers ships on the meta device and
checks that total_params plus the parameters the mapping leaves out equals its count.

Names are matched leniently: organisation prefixes ("meta-llama/"), case, "-hf", "-Instruct",
"-chat", "-it", "-Base", context suffixes ("-4k") and "Meta-Llama-3.1-8B-Instruct" /
"llama2-70b" spellings all resolve; see `lookup_model`.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from dse.errors import ConfigError
from dse.spec.arch import Architecture
from dse.spec.hf import import_hf_config


@dataclass(frozen=True)
class ModelCard:
    """One catalogue entry: the architecture and where it comes from.

    `exact` is True when total_params(arch) equals the Hugging Face model's parameter count;
    otherwise `unmodelled_params` is the difference (biases, position tables) and `notes` say
    what it is.
    """

    name: str
    hf_id: str
    config: Mapping[str, Any]
    arch: Architecture
    exact: bool
    unmodelled_params: int
    notes: tuple[str, ...]


# (name, Hugging Face id, config.json values, aliases, extra note). Values are copied from each
# model's config.json on the Hugging Face Hub (the hf_id's main branch); keys not listed take
# the model type's transformers default (e.g. num_key_value_heads = num_attention_heads).
# fmt: off
_LLAMA2_7B = {"hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
              "num_hidden_layers": 32, "num_key_value_heads": 32}
_LLAMA3_8B = {"hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
              "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256}
_LLAMA3_70B = {"hidden_size": 8192, "intermediate_size": 28672, "num_attention_heads": 64,
               "num_hidden_layers": 80, "num_key_value_heads": 8, "vocab_size": 128256}
_MISTRAL_7B = {"hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
               "num_hidden_layers": 32, "num_key_value_heads": 8}
_QWEN2_7B = {"hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28,
             "num_hidden_layers": 28, "num_key_value_heads": 4, "vocab_size": 152064}
_QWEN2_72B = {"hidden_size": 8192, "intermediate_size": 29568, "num_attention_heads": 64,
              "num_hidden_layers": 80, "num_key_value_heads": 8, "vocab_size": 152064}
_GEMMA_2B = {"hidden_size": 2048, "intermediate_size": 16384, "num_attention_heads": 8,
             "num_hidden_layers": 18, "num_key_value_heads": 1, "head_dim": 256,
             "vocab_size": 256000}
_GEMMA_7B = {"hidden_size": 3072, "intermediate_size": 24576, "num_attention_heads": 16,
             "num_hidden_layers": 28, "num_key_value_heads": 16, "head_dim": 256,
             "vocab_size": 256000}

_ENTRIES: tuple[tuple[str, str, dict[str, Any], tuple[str, ...], str], ...] = (
    # ---- Meta Llama
    ("LLaMA-7B", "huggyllama/llama-7b",
     {"model_type": "llama", **_LLAMA2_7B, "vocab_size": 32000}, ("Llama-1-7B",), ""),
    ("LLaMA-13B", "huggyllama/llama-13b",
     {"model_type": "llama", "hidden_size": 5120, "intermediate_size": 13824,
      "num_attention_heads": 40, "num_hidden_layers": 40, "vocab_size": 32000}, ("Llama-1-13B",), ""),
    ("LLaMA-30B", "huggyllama/llama-30b",
     {"model_type": "llama", "hidden_size": 6656, "intermediate_size": 17920,
      "num_attention_heads": 52, "num_hidden_layers": 60, "vocab_size": 32000}, ("Llama-1-30B",), ""),
    ("LLaMA-65B", "huggyllama/llama-65b",
     {"model_type": "llama", "hidden_size": 8192, "intermediate_size": 22016,
      "num_attention_heads": 64, "num_hidden_layers": 80, "vocab_size": 32000}, ("Llama-1-65B",), ""),
    ("Llama-2-7B", "meta-llama/Llama-2-7b-hf",
     {"model_type": "llama", **_LLAMA2_7B, "vocab_size": 32000}, (), ""),
    ("Llama-2-13B", "meta-llama/Llama-2-13b-hf",
     {"model_type": "llama", "hidden_size": 5120, "intermediate_size": 13824,
      "num_attention_heads": 40, "num_hidden_layers": 40, "num_key_value_heads": 40,
      "vocab_size": 32000}, (), ""),
    ("Llama-2-70B", "meta-llama/Llama-2-70b-hf",
     {"model_type": "llama", "hidden_size": 8192, "intermediate_size": 28672,
      "num_attention_heads": 64, "num_hidden_layers": 80, "num_key_value_heads": 8,
      "vocab_size": 32000}, (), ""),
    ("Llama-3-8B", "meta-llama/Meta-Llama-3-8B", {"model_type": "llama", **_LLAMA3_8B}, (), ""),
    ("Llama-3-70B", "meta-llama/Meta-Llama-3-70B", {"model_type": "llama", **_LLAMA3_70B}, (), ""),
    ("Llama-3.1-8B", "meta-llama/Llama-3.1-8B", {"model_type": "llama", **_LLAMA3_8B}, (), ""),
    ("Llama-3.1-70B", "meta-llama/Llama-3.1-70B", {"model_type": "llama", **_LLAMA3_70B}, (), ""),
    ("Llama-3.1-405B", "meta-llama/Llama-3.1-405B",
     {"model_type": "llama", "hidden_size": 16384, "intermediate_size": 53248,
      "num_attention_heads": 128, "num_hidden_layers": 126, "num_key_value_heads": 8,
      "vocab_size": 128256}, (), ""),
    ("Llama-3.2-1B", "meta-llama/Llama-3.2-1B",
     {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192,
      "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
      "head_dim": 64, "vocab_size": 128256, "tie_word_embeddings": True}, (), ""),
    ("Llama-3.2-3B", "meta-llama/Llama-3.2-3B",
     {"model_type": "llama", "hidden_size": 3072, "intermediate_size": 8192,
      "num_attention_heads": 24, "num_hidden_layers": 28, "num_key_value_heads": 8,
      "head_dim": 128, "vocab_size": 128256, "tie_word_embeddings": True}, (), ""),
    ("Llama-3.3-70B", "meta-llama/Llama-3.3-70B-Instruct",
     {"model_type": "llama", **_LLAMA3_70B}, (), ""),
    ("CodeLlama-7B", "codellama/CodeLlama-7b-hf",
     {"model_type": "llama", **_LLAMA2_7B, "vocab_size": 32016}, (), ""),
    ("CodeLlama-13B", "codellama/CodeLlama-13b-hf",
     {"model_type": "llama", "hidden_size": 5120, "intermediate_size": 13824,
      "num_attention_heads": 40, "num_hidden_layers": 40, "num_key_value_heads": 40,
      "vocab_size": 32016}, (), ""),
    ("CodeLlama-34B", "codellama/CodeLlama-34b-hf",
     {"model_type": "llama", "hidden_size": 8192, "intermediate_size": 22016,
      "num_attention_heads": 64, "num_hidden_layers": 48, "num_key_value_heads": 8,
      "vocab_size": 32000}, (), ""),
    ("CodeLlama-70B", "codellama/CodeLlama-70b-hf",
     {"model_type": "llama", "hidden_size": 8192, "intermediate_size": 28672,
      "num_attention_heads": 64, "num_hidden_layers": 80, "num_key_value_heads": 8,
      "vocab_size": 32016}, (), ""),
    # ---- Mistral AI
    ("Mistral-7B-v0.1", "mistralai/Mistral-7B-v0.1",
     {"model_type": "mistral", **_MISTRAL_7B, "vocab_size": 32000, "sliding_window": 4096},
     ("Mistral-7B",), ""),
    ("Mistral-7B-v0.2", "mistralai/Mistral-7B-Instruct-v0.2",
     {"model_type": "mistral", **_MISTRAL_7B, "vocab_size": 32000}, (), ""),
    ("Mistral-7B-v0.3", "mistralai/Mistral-7B-v0.3",
     {"model_type": "mistral", **_MISTRAL_7B, "vocab_size": 32768}, (), ""),
    ("Mistral-Nemo-12B", "mistralai/Mistral-Nemo-Base-2407",
     {"model_type": "mistral", "hidden_size": 5120, "intermediate_size": 14336,
      "num_attention_heads": 32, "num_hidden_layers": 40, "num_key_value_heads": 8,
      "head_dim": 128, "vocab_size": 131072}, ("Mistral-Nemo-2407", "Mistral-Nemo"), ""),
    ("Mistral-Small-24B", "mistralai/Mistral-Small-24B-Base-2501",
     {"model_type": "mistral", "hidden_size": 5120, "intermediate_size": 32768,
      "num_attention_heads": 32, "num_hidden_layers": 40, "num_key_value_heads": 8,
      "head_dim": 128, "vocab_size": 131072}, ("Mistral-Small-2501",), ""),
    ("Mistral-Large-2407", "mistralai/Mistral-Large-Instruct-2407",
     {"model_type": "mistral", "hidden_size": 12288, "intermediate_size": 28672,
      "num_attention_heads": 96, "num_hidden_layers": 88, "num_key_value_heads": 8,
      "head_dim": 128, "vocab_size": 32768}, ("Mistral-Large-123B", "Mistral-Large-2"), ""),
    ("Mixtral-8x7B", "mistralai/Mixtral-8x7B-v0.1",
     {"model_type": "mixtral", **_MISTRAL_7B, "vocab_size": 32000, "num_local_experts": 8,
      "num_experts_per_tok": 2}, (), ""),
    ("Mixtral-8x22B", "mistralai/Mixtral-8x22B-v0.1",
     {"model_type": "mixtral", "hidden_size": 6144, "intermediate_size": 16384,
      "num_attention_heads": 48, "num_hidden_layers": 56, "num_key_value_heads": 8,
      "vocab_size": 32000, "num_local_experts": 8, "num_experts_per_tok": 2}, (), ""),
    ("Mixtral-8x22B-Instruct-v0.1", "mistralai/Mixtral-8x22B-Instruct-v0.1",
     {"model_type": "mixtral", "hidden_size": 6144, "intermediate_size": 16384,
      "num_attention_heads": 48, "num_hidden_layers": 56, "num_key_value_heads": 8,
      "vocab_size": 32768, "num_local_experts": 8, "num_experts_per_tok": 2}, (),
     "the instruct model's v3 tokenizer has 32768 tokens (base: 32000)"),
    # ---- Qwen
    ("Qwen-72B", "Qwen/Qwen-72B",
     {"model_type": "qwen", "hidden_size": 8192, "intermediate_size": 49152,
      "num_attention_heads": 64, "num_hidden_layers": 80, "kv_channels": 128,
      "vocab_size": 152064, "no_bias": True}, ("Qwen1-72B",), ""),
    ("Qwen1.5-7B", "Qwen/Qwen1.5-7B",
     {"model_type": "qwen2", "hidden_size": 4096, "intermediate_size": 11008,
      "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
      "vocab_size": 151936}, (), ""),
    ("Qwen1.5-MoE-A2.7B", "Qwen/Qwen1.5-MoE-A2.7B",
     {"model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632,
      "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
      "num_experts": 60, "num_experts_per_tok": 4, "num_attention_heads": 16,
      "num_hidden_layers": 24, "num_key_value_heads": 16, "vocab_size": 151936}, (), ""),
    ("Qwen2-7B", "Qwen/Qwen2-7B", {"model_type": "qwen2", **_QWEN2_7B}, (), ""),
    ("Qwen2-72B", "Qwen/Qwen2-72B", {"model_type": "qwen2", **_QWEN2_72B}, (), ""),
    ("Qwen2-57B-A14B", "Qwen/Qwen2-57B-A14B",
     {"model_type": "qwen2_moe", "hidden_size": 3584, "intermediate_size": 18944,
      "moe_intermediate_size": 2560, "shared_expert_intermediate_size": 20480,
      "num_experts": 64, "num_experts_per_tok": 8, "num_attention_heads": 28,
      "num_hidden_layers": 28, "num_key_value_heads": 4, "vocab_size": 151936}, (), ""),
    ("Qwen2.5-7B", "Qwen/Qwen2.5-7B", {"model_type": "qwen2", **_QWEN2_7B}, (), ""),
    ("Qwen2.5-14B", "Qwen/Qwen2.5-14B",
     {"model_type": "qwen2", "hidden_size": 5120, "intermediate_size": 13824,
      "num_attention_heads": 40, "num_hidden_layers": 48, "num_key_value_heads": 8,
      "vocab_size": 152064}, (), ""),
    ("Qwen2.5-32B", "Qwen/Qwen2.5-32B",
     {"model_type": "qwen2", "hidden_size": 5120, "intermediate_size": 27648,
      "num_attention_heads": 40, "num_hidden_layers": 64, "num_key_value_heads": 8,
      "vocab_size": 152064}, (), ""),
    ("Qwen2.5-72B", "Qwen/Qwen2.5-72B", {"model_type": "qwen2", **_QWEN2_72B}, (), ""),
    ("Qwen3-8B", "Qwen/Qwen3-8B",
     {"model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288,
      "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8,
      "head_dim": 128, "vocab_size": 151936}, (), ""),
    ("Qwen3-32B", "Qwen/Qwen3-32B",
     {"model_type": "qwen3", "hidden_size": 5120, "intermediate_size": 25600,
      "num_attention_heads": 64, "num_hidden_layers": 64, "num_key_value_heads": 8,
      "head_dim": 128, "vocab_size": 151936}, (), ""),
    ("Qwen3-30B-A3B", "Qwen/Qwen3-30B-A3B",
     {"model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144,
      "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
      "num_attention_heads": 32, "num_hidden_layers": 48, "num_key_value_heads": 4,
      "head_dim": 128, "vocab_size": 151936}, (), ""),
    ("Qwen3-235B-A22B", "Qwen/Qwen3-235B-A22B",
     {"model_type": "qwen3_moe", "hidden_size": 4096, "intermediate_size": 12288,
      "moe_intermediate_size": 1536, "num_experts": 128, "num_experts_per_tok": 8,
      "num_attention_heads": 64, "num_hidden_layers": 94, "num_key_value_heads": 4,
      "head_dim": 128, "vocab_size": 151936}, (), ""),
    # ---- Google Gemma
    ("Gemma-2B", "google/gemma-2b", {"model_type": "gemma", **_GEMMA_2B}, (), ""),
    ("Gemma-7B", "google/gemma-7b", {"model_type": "gemma", **_GEMMA_7B}, (), ""),
    ("CodeGemma-2B", "google/codegemma-1.1-2b", {"model_type": "gemma", **_GEMMA_2B},
     ("CodeGemma-1.1-2B", "google/codegemma-2b"), ""),
    ("CodeGemma-7B", "google/codegemma-7b", {"model_type": "gemma", **_GEMMA_7B},
     ("CodeGemma-1.1-7B",), ""),
    ("Gemma-2-2B", "google/gemma-2-2b",
     {"model_type": "gemma2", "hidden_size": 2304, "intermediate_size": 9216,
      "num_attention_heads": 8, "num_hidden_layers": 26, "num_key_value_heads": 4,
      "head_dim": 256, "vocab_size": 256000, "sliding_window": 4096}, (), ""),
    ("Gemma-2-9B", "google/gemma-2-9b",
     {"model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336,
      "num_attention_heads": 16, "num_hidden_layers": 42, "num_key_value_heads": 8,
      "head_dim": 256, "vocab_size": 256000, "sliding_window": 4096}, (), ""),
    ("Gemma-2-27B", "google/gemma-2-27b",
     {"model_type": "gemma2", "hidden_size": 4608, "intermediate_size": 36864,
      "num_attention_heads": 32, "num_hidden_layers": 46, "num_key_value_heads": 16,
      "head_dim": 128, "vocab_size": 256000, "sliding_window": 4096}, (), ""),
    ("Gemma-3-1B", "google/gemma-3-1b-pt",
     {"model_type": "gemma3_text", "hidden_size": 1152, "intermediate_size": 6912,
      "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
      "num_hidden_layers": 26, "vocab_size": 262144, "sliding_window": 512}, (), ""),
    ("Gemma-3-27B", "google/gemma-3-27b-pt",
     {"model_type": "gemma3_text", "hidden_size": 5376, "intermediate_size": 21504,
      "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128,
      "num_hidden_layers": 62, "vocab_size": 262208, "sliding_window": 1024}, (),
     "the language model of the multimodal checkpoint (text_config; no vision tower)"),
    # ---- attention beyond GQA (issue 21): sliding/full mixes, MLA, linear-attention hybrids
    ("gpt-oss-20b", "openai/gpt-oss-20b",
     {"model_type": "gpt_oss", "hidden_size": 2880, "intermediate_size": 2880,
      "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
      "num_hidden_layers": 24, "num_local_experts": 32, "num_experts_per_tok": 4,
      "vocab_size": 201088, "sliding_window": 128}, (), ""),
    ("gpt-oss-120b", "openai/gpt-oss-120b",
     {"model_type": "gpt_oss", "hidden_size": 2880, "intermediate_size": 2880,
      "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
      "num_hidden_layers": 36, "num_local_experts": 128, "num_experts_per_tok": 4,
      "vocab_size": 201088, "sliding_window": 128}, (), ""),
    ("DeepSeek-V3", "deepseek-ai/DeepSeek-V3",
     {"model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
      "moe_intermediate_size": 2048, "num_attention_heads": 128, "num_key_value_heads": 128,
      "num_hidden_layers": 61, "n_routed_experts": 256, "n_shared_experts": 1,
      "num_experts_per_tok": 8, "first_k_dense_replace": 3, "kv_lora_rank": 512,
      "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
      "vocab_size": 129280, "n_group": 8, "topk_group": 4}, ("DeepSeek-V3-0324", "DeepSeek-R1"),
     "the multi-token-prediction layer (14B parameters) is not part of the served model"),
    ("Kimi-K2", "moonshotai/Kimi-K2-Instruct",
     {"model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
      "moe_intermediate_size": 2048, "num_attention_heads": 64, "num_key_value_heads": 64,
      "num_hidden_layers": 61, "n_routed_experts": 384, "n_shared_experts": 1,
      "num_experts_per_tok": 8, "first_k_dense_replace": 1, "kv_lora_rank": 512,
      "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
      "vocab_size": 163840, "n_group": 1, "topk_group": 1}, ("Kimi-K2-Base",), ""),
    ("Qwen3-Next-80B-A3B", "Qwen/Qwen3-Next-80B-A3B-Instruct",
     {"model_type": "qwen3_next", "hidden_size": 2048, "intermediate_size": 5120,
      "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
      "num_hidden_layers": 48, "num_experts": 512, "num_experts_per_tok": 10,
      "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
      "linear_num_value_heads": 32, "linear_num_key_heads": 16, "linear_key_head_dim": 128,
      "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "full_attention_interval": 4,
      "vocab_size": 151936}, (), ""),
    ("Bamba-9B", "ibm-ai-platform/Bamba-9B",
     {"model_type": "bamba", "hidden_size": 4096, "intermediate_size": 14336,
      "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
      "attn_layer_indices": [9, 18, 27], "mamba_n_heads": 128, "mamba_d_head": 64,
      "mamba_n_groups": 1, "mamba_d_state": 128, "mamba_d_conv": 4, "mamba_expand": 2,
      "vocab_size": 128256}, (), ""),
    # transformers' JambaConfig defaults are this checkpoint's config (its auto_docstring's)
    ("Jamba-v0.1", "ai21labs/Jamba-v0.1",
     {"model_type": "jamba", "hidden_size": 4096, "intermediate_size": 14336,
      "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
      "num_experts": 16, "num_experts_per_tok": 2, "expert_layer_period": 2,
      "expert_layer_offset": 1, "attn_layer_period": 8, "attn_layer_offset": 4,
      "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_dt_rank": 256,
      "vocab_size": 65536}, (), ""),
    # transformers' Llama4TextConfig defaults are this checkpoint's text_config (its
    # auto_docstring's): every layer MoE (16 experts, top 1, + the shared expert), chunked
    # attention of 8192 tokens with every 4th layer global NoPE
    ("Llama-4-Scout-17B-16E", "meta-llama/Llama-4-Scout-17B-16E",
     {"model_type": "llama4_text", "hidden_size": 5120, "intermediate_size": 8192,
      "intermediate_size_mlp": 16384, "num_attention_heads": 40, "num_key_value_heads": 8,
      "head_dim": 128, "num_hidden_layers": 48, "num_local_experts": 16,
      "num_experts_per_tok": 1, "interleave_moe_layer_step": 1, "attention_chunk_size": 8192,
      "no_rope_layer_interval": 4, "use_qk_norm": True, "vocab_size": 202048},
     ("Llama-4-Scout",),
     "the language model of the multimodal checkpoint (text_config; no vision tower)"),
    # ---- Microsoft Phi
    ("Phi-2", "microsoft/phi-2",
     {"model_type": "phi", "hidden_size": 2560, "intermediate_size": 10240,
      "num_attention_heads": 32, "num_hidden_layers": 32, "vocab_size": 51200,
      "partial_rotary_factor": 0.4}, (), ""),
    ("Phi-3-mini", "microsoft/Phi-3-mini-4k-instruct",
     {"model_type": "phi3", "hidden_size": 3072, "intermediate_size": 8192,
      "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
      "vocab_size": 32064, "sliding_window": 2047}, ("Phi-3-mini-128k-instruct",), ""),
    ("Phi-3-small", "microsoft/Phi-3-small-8k-instruct",
     {"model_type": "phi3small", "hidden_size": 4096, "ff_intermediate_size": 14336,
      "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
      "vocab_size": 100352}, ("Phi-3-small-128k-instruct",), ""),
    ("Phi-3-medium", "microsoft/Phi-3-medium-4k-instruct",
     {"model_type": "phi3", "hidden_size": 5120, "intermediate_size": 17920,
      "num_attention_heads": 40, "num_hidden_layers": 40, "num_key_value_heads": 10,
      "vocab_size": 32064, "sliding_window": 2047}, ("Phi-3-medium-128k-instruct",), ""),
    # ---- BigCode StarCoder2
    ("StarCoder2-3B", "bigcode/starcoder2-3b",
     {"model_type": "starcoder2", "hidden_size": 3072, "intermediate_size": 12288,
      "num_attention_heads": 24, "num_hidden_layers": 30, "num_key_value_heads": 2,
      "vocab_size": 49152, "sliding_window": 4096, "use_bias": True}, (), ""),
    ("StarCoder2-7B", "bigcode/starcoder2-7b",
     {"model_type": "starcoder2", "hidden_size": 4608, "intermediate_size": 18432,
      "num_attention_heads": 36, "num_hidden_layers": 32, "num_key_value_heads": 4,
      "vocab_size": 49152, "sliding_window": 4096, "use_bias": True}, (), ""),
    ("StarCoder2-15B", "bigcode/starcoder2-15b",
     {"model_type": "starcoder2", "hidden_size": 6144, "intermediate_size": 24576,
      "num_attention_heads": 48, "num_hidden_layers": 40, "num_key_value_heads": 4,
      "vocab_size": 49152, "sliding_window": 4096, "use_bias": True,
      "tie_word_embeddings": False}, (),
     "tie_word_embeddings=false not verified offline (15.96B published total suggests it)"),
    # ---- TII Falcon
    ("Falcon-7B", "tiiuae/falcon-7b",
     {"model_type": "falcon", "hidden_size": 4544, "num_attention_heads": 71,
      "num_hidden_layers": 32, "multi_query": True, "parallel_attn": True,
      "new_decoder_architecture": False, "bias": False, "alibi": False,
      "vocab_size": 65024}, (), ""),
    ("Falcon-40B", "tiiuae/falcon-40b",
     {"model_type": "falcon", "hidden_size": 8192, "num_attention_heads": 128,
      "num_kv_heads": 8, "num_hidden_layers": 60, "parallel_attn": True,
      "new_decoder_architecture": True, "bias": False, "alibi": False,
      "vocab_size": 65024}, (), ""),
    ("Falcon-180B", "tiiuae/falcon-180B",
     {"model_type": "falcon", "hidden_size": 14848, "num_attention_heads": 232,
      "num_kv_heads": 8, "num_hidden_layers": 80, "parallel_attn": True,
      "new_decoder_architecture": True, "bias": False, "alibi": False,
      "vocab_size": 65024}, (), ""),
    # ---- Older architectures in the measured data (approximate: biases, learned positions)
    ("BLOOM-176B", "bigscience/bloom",
     {"model_type": "bloom", "n_embed": 14336, "n_head": 112, "n_layer": 70,
      "vocab_size": 250880}, ("bloom-176b",), ""),
    ("BLOOM-7B1", "bigscience/bloom-7b1",
     {"model_type": "bloom", "hidden_size": 4096, "n_head": 32, "n_layer": 30,
      "vocab_size": 250880}, (), ""),
    ("OPT-6.7B", "facebook/opt-6.7b",
     {"model_type": "opt", "hidden_size": 4096, "ffn_dim": 16384, "num_attention_heads": 32,
      "num_hidden_layers": 32, "vocab_size": 50272, "max_position_embeddings": 2048,
      "word_embed_proj_dim": 4096, "do_layer_norm_before": True}, (), ""),
    ("GPT-J-6B", "EleutherAI/gpt-j-6b",
     {"model_type": "gptj", "n_embd": 4096, "n_layer": 28, "n_head": 16, "rotary_dim": 64,
      "vocab_size": 50400}, ("gpt-j-6b", "gptj-6b"), ""),
    ("Aquila-7B", "BAAI/Aquila-7B",
     {"model_type": "aquila", "hidden_size": 4096, "intermediate_size": 11008,
      "num_attention_heads": 32, "num_hidden_layers": 32, "vocab_size": 100008}, (), ""),
    ("InternLM-20B", "internlm/internlm-20b",
     {"model_type": "internlm", "hidden_size": 5120, "intermediate_size": 13824,
      "num_attention_heads": 40, "num_hidden_layers": 60, "vocab_size": 103168,
      "bias": False}, (),
     "bias=false not verified offline (q/k/v/o biases would add 1.2M parameters)"),
)
# fmt: on

# Names that appear in the measured data but have no Architecture, and why.
UNREPRESENTABLE: dict[str, str] = {
    "deci/decilm-7b": "DeciLM-7B varies the number of KV heads per layer "
    "(num_key_value_heads_per_layer); the Architecture has one n_kv_heads for all layers",
}

_DROP_TOKENS = {"hf", "instruct", "chat", "it", "base"}


def _light_key(name: str) -> str:
    """Lower case, no organisation, no '-hf' or pipeline-parallel folder suffix ('-pp1')."""
    s = str(name).strip().lower().replace("_", "-").replace(" ", "-").rsplit("/", 1)[-1]
    return "-".join(t for t in s.split("-") if t and t != "hf" and not re.fullmatch(r"pp\d+", t))


def _heavy_key(name: str) -> str:
    """Also drops Instruct/chat/it/Base, context suffixes ('4k') and the 'Meta-' prefix."""
    s = _light_key(name)
    s = re.sub(r"^meta-", "", s)
    s = re.sub(r"^llama(\d)", r"llama-\1", s)  # llama2-70b (Splitwise) -> llama-2-70b
    tokens = [t for t in s.split("-") if t not in _DROP_TOKENS and not re.fullmatch(r"\d+k", t)]
    return "-".join(tokens)


@cache
def _catalogue() -> tuple[dict[str, ModelCard], dict[str, str], dict[str, str]]:
    """(cards by name, light key -> name, heavy key -> name); first registration wins."""
    cards: dict[str, ModelCard] = {}
    light: dict[str, str] = {}
    heavy: dict[str, str] = {}
    for name, hf_id, config, _, note in _ENTRIES:
        imp = import_hf_config(config)
        notes = imp.notes + ((note,) if note else ())
        cards[name] = ModelCard(
            name, hf_id, config, imp.arch, imp.exact, imp.unmodelled_params, notes
        )
    for name, hf_id, *_ in _ENTRIES:  # canonical names and ids before aliases
        for spelling in (name, hf_id):
            light.setdefault(_light_key(spelling), name)
    for name, _, _, aliases, _ in _ENTRIES:
        for spelling in aliases:
            light.setdefault(_light_key(spelling), name)
    for key, name in list(light.items()):
        heavy.setdefault(_heavy_key(key), name)
    return cards, light, heavy


# Context length (tokens, `max_position_embeddings` / `n_positions` of the model's config.json,
# which vLLM and TensorRT-LLM take as the longest prompt + output they serve) of the catalogue
# models whose context is short enough to matter for measured runs. A run asked for more is not
# the run it says: argonne's 2048 + 2048-token runs of 2048-context models end after prefill
# (0.04 s at batch 1 on GH200, where a 2048-token decode takes seconds). Others: None, unchecked.
CONTEXT_TOKENS: dict[str, int] = {
    **dict.fromkeys(("LLaMA-7B", "LLaMA-13B", "LLaMA-30B", "LLaMA-65B"), 2048),
    **dict.fromkeys(("Llama-2-7B", "Llama-2-13B", "Llama-2-70B"), 4096),
    **dict.fromkeys(("Llama-3-8B", "Llama-3-70B"), 8192),
    **dict.fromkeys(("CodeLlama-7B", "CodeLlama-13B", "CodeLlama-34B", "CodeLlama-70B"), 16384),
    **dict.fromkeys(("Mistral-7B-v0.1", "Mixtral-8x7B", "Qwen1.5-7B"), 32768),
    **dict.fromkeys(("GPT-J-6B", "OPT-6.7B", "BLOOM-7B1", "Aquila-7B", "Phi-2", "Falcon-7B"), 2048),
    **dict.fromkeys(("Gemma-2B", "Gemma-7B"), 8192),
}


def context_tokens(name: str) -> int | None:
    """The context length of a catalogue model (see CONTEXT_TOKENS), None when not recorded or
    the name is not in the catalogue."""
    try:
        return CONTEXT_TOKENS.get(model_card(name).name)
    except ConfigError:
        return None


def model_names() -> list[str]:
    """Canonical names of every catalogue entry, in catalogue order."""
    return list(_catalogue()[0])


def model_card(name: str) -> ModelCard:
    """The catalogue entry for a model name (lenient spelling, see the module docstring)."""
    cards, light, heavy = _catalogue()
    key = _light_key(name)
    found = light.get(key) or heavy.get(_heavy_key(name))
    if found:
        return cards[found]
    for bad, why in UNREPRESENTABLE.items():
        if _heavy_key(bad) == _heavy_key(name):
            raise ConfigError(f"model {name!r} is not representable: {why}")
    # several spellings (keys) name one model: each model once, whatever its case
    close = list(
        {
            heavy[c].lower(): heavy[c]
            for c in difflib.get_close_matches(_heavy_key(name), list(heavy), n=12, cutoff=0.6)
        }.values()
    )[:3]
    hint = (
        f"; did you mean {', '.join(repr(c) for c in close)}?"
        if close
        else "; `dse arch --list` lists them"
    )
    raise ConfigError(f"unknown model {name!r}{hint}")


def lookup_model(name: str) -> Architecture:
    """The Architecture of a published model by name, e.g. 'meta-llama/Meta-Llama-3.1-8B-Instruct'."""
    return model_card(name).arch
