"""Hugging Face interoperability and the model catalogue.

Parameter counts are checked EXACTLY against transformers, building each model from its
config on the meta device (no weights are downloaded or allocated). torch and transformers are
test-only dependencies: without them the transformers tests skip with the reason, and the
pure-mapping tests still run.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from dse.errors import ConfigError
from dse.spec.arch import Architecture, active_params, total_params
from dse.spec.catalogue import UNREPRESENTABLE, lookup_model, model_card, model_names
from dse.spec.hf import (
    APPROXIMATE_TYPES,
    from_hf_config,
    hf_model_type_for,
    import_hf_config,
    to_hf_config,
)
from dse.spec.rules import validate_architecture

try:  # test-only dependencies
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    transformers.logging.set_verbosity_error()
    HAVE_HF = True
except ImportError:  # pragma: no cover - exercised on machines without torch
    HAVE_HF = False
needs_hf = pytest.mark.skipif(not HAVE_HF, reason="torch and transformers are not importable")

# Published config.json values (the shape-defining keys), written out here so that the test
# does not depend on dse.spec.catalogue.
PUBLISHED: dict[str, dict[str, Any]] = {
    "Llama-2-7B": {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
                   "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
                   "vocab_size": 32000, "torch_dtype": "float16"},
    "Llama-3-8B": {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
                   "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
                   "vocab_size": 128256, "rope_theta": 500000.0, "torch_dtype": "bfloat16"},
    "Llama-3-70B": {"model_type": "llama", "hidden_size": 8192, "intermediate_size": 28672,
                    "num_attention_heads": 64, "num_hidden_layers": 80, "num_key_value_heads": 8,
                    "vocab_size": 128256, "torch_dtype": "bfloat16"},
    "Mistral-7B": {"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
                   "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
                   "vocab_size": 32000, "sliding_window": 4096, "torch_dtype": "bfloat16"},
    "Mixtral-8x7B": {"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
                     "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
                     "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000,
                     "torch_dtype": "bfloat16"},
    "Qwen2-7B": {"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944,
                 "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
                 "vocab_size": 152064, "tie_word_embeddings": False, "torch_dtype": "bfloat16"},
    "Qwen1.5-MoE-A2.7B": {"model_type": "qwen2_moe", "hidden_size": 2048,
                          "intermediate_size": 5632, "moe_intermediate_size": 1408,
                          "shared_expert_intermediate_size": 5632, "num_experts": 60,
                          "num_experts_per_tok": 4, "num_attention_heads": 16,
                          "num_hidden_layers": 24, "num_key_value_heads": 16,
                          "vocab_size": 151936, "decoder_sparse_step": 1,
                          "mlp_only_layers": [], "torch_dtype": "bfloat16"},
    "Qwen3-30B-A3B": {"model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144,
                      "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
                      "num_attention_heads": 32, "num_hidden_layers": 48,
                      "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936},
    "Gemma-2-9B": {"model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336,
                   "num_attention_heads": 16, "num_hidden_layers": 42, "num_key_value_heads": 8,
                   "head_dim": 256, "vocab_size": 256000, "sliding_window": 4096},
}  # fmt: skip
# Counts published with the models (model cards / transformers' num_parameters()).
KNOWN_TOTALS = {
    "Llama-2-7B": 6_738_415_616,
    "Llama-3-8B": 8_030_261_248,
    "Llama-3-70B": 70_553_706_496,
    "Mistral-7B": 7_241_732_096,
    "Mixtral-8x7B": 46_702_792_704,
    "Qwen2-7B": 7_615_616_512,
    "Qwen1.5-MoE-A2.7B": 14_315_784_192,
}


def hf_count(cfg: dict[str, Any]) -> tuple[int, Any]:
    """transformers' parameter count of a config dict, built on the meta device."""
    kw = {k: v for k, v in cfg.items() if k not in ("model_type", "architectures")}
    conf = AutoConfig.for_model(cfg["model_type"], **kw)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(conf)
    return sum(p.numel() for p in model.parameters()), model  # shared (tied) tensors once


# ---------------------------------------------------------------------- counts vs transformers
@needs_hf
@pytest.mark.parametrize("name", list(PUBLISHED))
def test_total_params_equal_transformers(name: str) -> None:
    cfg = PUBLISHED[name]
    arch = from_hf_config(cfg)
    n, _ = hf_count(cfg)
    assert total_params(arch) == n
    if name in KNOWN_TOTALS:
        assert n == KNOWN_TOTALS[name]


@needs_hf
@pytest.mark.parametrize("name", ["Mixtral-8x7B", "Qwen1.5-MoE-A2.7B", "Qwen3-30B-A3B"])
def test_active_params_equal_transformers_minus_idle_experts(name: str) -> None:
    """Active = all parameters minus the (E - k) / E share of the routed expert tensors."""
    cfg = PUBLISHED[name]
    arch = from_hf_config(cfg).resolved()
    n, model = hf_count(cfg)
    # Routed expert tensors: "...mlp.experts.gate_up_proj" (fused) or "...experts.0.w1.weight";
    # the always-on shared expert ("shared_expert") is active for every token.
    routed = sum(p.numel() for key, p in model.named_parameters() if ".experts." in key)
    assert routed > 0
    idle = routed * (arch.n_experts - arch.top_k) // arch.n_experts
    assert active_params(arch) == n - idle


@pytest.mark.slow
@needs_hf
@pytest.mark.parametrize("name", model_names())
def test_catalogue_matches_transformers(name: str) -> None:
    """Every entry whose model type transformers ships: total + unmodelled == its count."""
    card = model_card(name)
    if card.config["model_type"] in ("qwen", "aquila", "internlm", "phi3small"):
        pytest.skip(
            f"{card.config['model_type']} is custom code (trust_remote_code), not in transformers"
        )
    n, _ = hf_count(dict(card.config))
    assert total_params(card.arch) + card.unmodelled_params == n
    assert card.exact == (
        card.unmodelled_params == 0 and card.config["model_type"] not in APPROXIMATE_TYPES
    )


# ---------------------------------------------------------------------- export
EXPORTABLE = {
    "dense MHA fp16": Architecture(d_model=1024, n_layers=4, n_heads=16, d_ff=2816, vocab_size=32000, weight_dtype="float16", kv_dtype="float16"),
    "dense GQA tied": Architecture(d_model=2048, n_layers=6, n_heads=32, n_kv_heads=8, d_ff=8192, vocab_size=128256, tied_embeddings=True),
    "head_dim set": Architecture(d_model=1280, n_layers=3, n_heads=16, n_kv_heads=4, head_dim=128, d_ff=3584, vocab_size=1000),
    "qkv bias": Architecture(d_model=896, n_layers=4, n_heads=14, n_kv_heads=2, d_ff=4864, vocab_size=151936, qkv_bias=True),
    "qk norm": Architecture(d_model=1024, n_layers=4, n_heads=16, n_kv_heads=8, head_dim=128, d_ff=3072, vocab_size=151936, qk_norm=True, tied_embeddings=True),
    "moe": Architecture(d_model=1024, n_layers=4, n_heads=16, n_kv_heads=4, d_ff=2048, d_ff_expert=2048, n_experts=8, top_k=2, vocab_size=32000),
    "moe shared": Architecture(d_model=1024, n_layers=4, n_heads=16, d_ff=2816, d_ff_expert=704, n_experts=16, top_k=4, shared_expert_d_ff=2816, shared_expert_gate=True, qkv_bias=True, vocab_size=1000),
    "moe qk norm": Architecture(d_model=1024, n_layers=4, n_heads=16, n_kv_heads=4, head_dim=64, d_ff=3072, d_ff_expert=384, n_experts=32, top_k=4, qk_norm=True, vocab_size=1000),
}  # fmt: skip
EXPECTED_TYPE = {
    "dense MHA fp16": "llama", "dense GQA tied": "llama", "head_dim set": "llama",
    "qkv bias": "qwen2", "qk norm": "qwen3", "moe": "mixtral", "moe shared": "qwen2_moe",
    "moe qk norm": "qwen3_moe",
}  # fmt: skip


@pytest.mark.parametrize("key", list(EXPORTABLE))
def test_round_trip_is_identity(key: str) -> None:
    a = EXPORTABLE[key].resolved()
    cfg = to_hf_config(a)
    assert cfg["model_type"] == EXPECTED_TYPE[key] == hf_model_type_for(a)
    assert cfg["num_key_value_heads"] == a.n_kv_heads
    assert from_hf_config(cfg) == a
    assert from_hf_config(json.loads(json.dumps(cfg))) == a  # survives JSON


@pytest.mark.parametrize(
    "name",
    ["Llama-3-8B", "Mistral-Nemo-12B", "Qwen2-7B", "Mixtral-8x7B", "Qwen1.5-MoE-A2.7B", "Qwen3-8B"],
)
def test_catalogue_round_trip(name: str) -> None:
    a = lookup_model(name)
    assert from_hf_config(to_hf_config(a)) == a


@needs_hf
@pytest.mark.parametrize("key", list(EXPORTABLE))
def test_exported_config_loads_with_exact_count(key: str, tmp_path: Path) -> None:
    a = EXPORTABLE[key]
    (tmp_path / "config.json").write_text(json.dumps(to_hf_config(a), indent=2))
    conf = AutoConfig.from_pretrained(tmp_path)
    assert conf.model_type == EXPECTED_TYPE[key]
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(conf)
    assert type(model).__name__ == to_hf_config(a)["architectures"][0]
    assert sum(p.numel() for p in model.parameters()) == total_params(a)
    assert from_hf_config(tmp_path) == a.resolved()  # the folder, read back


@needs_hf
def test_exported_large_model_count(tmp_path: Path) -> None:
    """Llama-3.1-405B round-trips through a saved config.json with its exact count."""
    a = lookup_model("Llama-3.1-405B")
    (tmp_path / "config.json").write_text(json.dumps(to_hf_config(a)))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(tmp_path))
    assert sum(p.numel() for p in model.parameters()) == total_params(a) == 405_853_388_800


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"gated_mlp": False}, "gated_mlp: must be true"),
        ({"norm": "layernorm"}, "norm: must be 'rmsnorm'"),
        ({"norms_per_layer": 4}, "norms_per_layer: must be 2"),
        ({"qk_norm": True, "qkv_bias": True}, "qkv_bias: must be false with qk_norm"),
        ({"n_kv_heads": 5}, "cannot export an invalid architecture: n_kv_heads: must divide n_heads=32, got 5"),
        ({"n_experts": 8, "top_k": 2, "shared_expert_d_ff": 1024}, "shared_expert_gate: must be true"),
        # attention families the exported model types cannot hold (issue 21): refused, not
        # exported as full attention
        ({"attention_pattern": "sliding*1,full", "sliding_window": 512}, "attention_pattern: must be 'full'"),
        ({"kv_lora_rank": 64, "qk_rope_head_dim": 64}, "kv_lora_rank: must be 0"),
        ({"attn_output_gate": True}, "attn_output_gate: must be False"),
    ],
)  # fmt: skip
def test_export_refuses_what_no_model_type_holds(change: dict, message: str) -> None:
    a = Architecture(d_model=4096, n_layers=2, n_heads=32, d_ff=1024, **change)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        to_hf_config(a)


# ---------------------------------------------------------------------- import
def test_import_reads_dtype_and_defaults() -> None:
    a = from_hf_config(PUBLISHED["Llama-2-7B"])
    assert (a.weight_dtype, a.kv_dtype) == ("float16", "float16")
    assert a.n_kv_heads == 32 and a.head_dim == 128 and not a.tied_embeddings
    gemma = from_hf_config({"model_type": "gemma", "hidden_size": 3072, "intermediate_size": 24576,
                            "num_attention_heads": 16, "num_hidden_layers": 28, "vocab_size": 256000})  # fmt: skip
    assert gemma.tied_embeddings and gemma.head_dim == 256  # Gemma's defaults
    fp8 = from_hf_config(
        {**PUBLISHED["Llama-3-8B"], "quantization_config": {"quant_method": "fp8"}}
    )
    assert (fp8.weight_dtype, fp8.kv_dtype) == ("fp8", "bfloat16")


def test_import_approximate_types() -> None:
    bloom = {
        "model_type": "bloom",
        "n_embed": 14336,
        "n_head": 112,
        "n_layer": 70,
        "vocab_size": 250880,
    }
    with pytest.raises(ConfigError, match="model_type 'bloom' is only approximately representable"):
        from_hf_config(bloom)
    imp = import_hf_config(bloom)
    assert not imp.exact and imp.unmodelled_params == 70 * 6 * 14336 + 2 * 14336
    assert from_hf_config(bloom, approximate=True) == imp.arch
    assert (
        total_params(imp.arch) + imp.unmodelled_params == 176_247_271_424
    )  # BLOOM's published count


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        ({"model_type": "gpt2", "n_embd": 768}, "config: model_type: must be one of aquila, bamba, bloom,"),
        ({"model_type": "llama", "hidden_size": 4096}, "config: missing key 'num_attention_heads'"),
        ({**PUBLISHED["Llama-3-8B"], "num_hidden_layers": "32"}, "num_hidden_layers: must be an integer >= 1, got '32'"),
        ({**PUBLISHED["Llama-3-8B"], "num_key_value_heads": 5}, "config: n_kv_heads: must divide n_heads=32, got 5"),
        ({**PUBLISHED["Llama-3-8B"], "torch_dtype": "float8"}, "torch_dtype: must be one of bfloat16, float16, float32, got 'float8'"),
        ({**PUBLISHED["Llama-3-8B"], "tie_word_embeddings": "no"}, "tie_word_embeddings: must be true or false, got 'no'"),
        ({**PUBLISHED["Qwen1.5-MoE-A2.7B"], "mlp_only_layers": [0]}, "every layer must be MoE"),
    ],
)  # fmt: skip
def test_import_errors(cfg: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        from_hf_config(cfg)


def test_import_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        from_hf_config(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match=r"bad.json: not valid JSON \(line 1"):
        from_hf_config(bad)
    arr = tmp_path / "list.json"
    arr.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="must hold a JSON object, got list"):
        from_hf_config(arr)
    (tmp_path / "config.json").write_text(json.dumps(PUBLISHED["Qwen2-7B"]))
    assert total_params(from_hf_config(tmp_path)) == KNOWN_TOTALS["Qwen2-7B"]


# ---------------------------------------------------------------------- catalogue names
# Every model name in the measured data (argonne All_results.csv "Model", ml-energy-v2 and
# vidur folders, splitwise perf_model.csv), written here so the test runs without the data.
DATA_NAMES = [
    "BAAI/Aquila-7B", "EleutherAI/gpt-j-6b", "Qwen/Qwen1.5-7B", "bigscience/bloom-7b1",
    "facebook/opt-6.7b", "huggyllama/llama-7b", "meta-llama/Llama-2-70b-hf",
    "meta-llama/Llama-2-7b-hf", "meta-llama/Meta-Llama-3-70B", "meta-llama/Meta-Llama-3-8B",
    "mistralai/Mixtral-8x7B-v0.1", "bigcode/starcoder2-15b", "bigcode/starcoder2-3b",
    "bigcode/starcoder2-7b", "codellama/CodeLlama-13b-hf", "codellama/CodeLlama-34b-hf",
    "codellama/CodeLlama-70b-hf", "codellama/CodeLlama-7b-hf", "google/codegemma-1.1-2b",
    "google/codegemma-7b", "google/gemma-2-27b-it", "google/gemma-2-2b-it", "google/gemma-2-9b-it",
    "meta-llama/Meta-Llama-3.1-405B-Instruct", "meta-llama/Meta-Llama-3.1-70B-Instruct",
    "meta-llama/Meta-Llama-3.1-8B-Instruct", "microsoft/Phi-3-medium-4k-instruct",
    "microsoft/Phi-3-mini-4k-instruct", "microsoft/Phi-3-small-8k-instruct",
    "mistralai/Mistral-7B-Instruct-v0.3", "mistralai/Mistral-Large-Instruct-2407",
    "mistralai/Mistral-Nemo-Instruct-2407", "mistralai/Mixtral-8x22B-Instruct-v0.1",
    "mistralai/Mixtral-8x22B-Instruct-v0.1-pp1", "mistralai/Mixtral-8x7B-Instruct-v0.1",
    "Qwen/Qwen-72B", "codellama/CodeLlama-34b-Instruct-hf", "internlm/internlm-20b",
    "microsoft/phi-2", "bloom-176b", "llama2-70b",
]  # fmt: skip
EXPECTED = {
    "meta-llama/Meta-Llama-3.1-8B-Instruct": "Llama-3.1-8B",
    "llama2-70b": "Llama-2-70B",
    "bloom-176b": "BLOOM-176B",
    "mistralai/Mistral-7B-Instruct-v0.3": "Mistral-7B-v0.3",
    "mistralai/Mistral-Nemo-Instruct-2407": "Mistral-Nemo-12B",
    "mistralai/Mixtral-8x22B-Instruct-v0.1-pp1": "Mixtral-8x22B-Instruct-v0.1",
    "mistralai/Mixtral-8x7B-Instruct-v0.1": "Mixtral-8x7B",
    "google/codegemma-1.1-2b": "CodeGemma-2B",
    "microsoft/Phi-3-small-8k-instruct": "Phi-3-small",
    "codellama/CodeLlama-34b-Instruct-hf": "CodeLlama-34B",
    "huggyllama/llama-7b": "LLaMA-7B",
    "google/gemma-2-27b-it": "Gemma-2-27B",
}


@pytest.mark.parametrize("name", DATA_NAMES)
def test_data_model_names_resolve(name: str) -> None:
    card = model_card(name)
    if name in EXPECTED:
        assert card.name == EXPECTED[name]
    assert validate_architecture(card.arch) is not None


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("Llama-3-8B", "Llama-3-8B"), ("llama-3-8b", "Llama-3-8B"),
        ("meta-llama/Meta-Llama-3-8B-Instruct", "Llama-3-8B"), ("Meta-Llama-3.1-70B", "Llama-3.1-70B"),
        ("Llama-2-13b-chat-hf", "Llama-2-13B"), ("mistral-7b", "Mistral-7B-v0.1"),
        ("Mixtral-8x22B-v0.1", "Mixtral-8x22B"), ("Qwen/Qwen2-72B-Instruct", "Qwen2-72B"),
        ("QWEN1.5-MOE-A2.7B-CHAT", "Qwen1.5-MoE-A2.7B"), ("phi-3-mini-128k-instruct", "Phi-3-mini"),
    ],
)  # fmt: skip
def test_lookup_tolerates_spellings(name: str, canonical: str) -> None:
    assert model_card(name).name == canonical
    assert lookup_model(name) == model_card(canonical).arch


def test_lookup_errors() -> None:
    with pytest.raises(
        ConfigError, match=r"unknown model 'Mixtral-8x9B'; did you mean 'Mixtral-8x7B'"
    ):
        lookup_model("Mixtral-8x9B")
    with pytest.raises(ConfigError, match="num_key_value_heads_per_layer"):
        lookup_model("Deci/DeciLM-7B")


def test_catalogue_is_valid_and_named_uniquely() -> None:
    names = model_names()
    assert len(names) == len(set(names)) >= 40
    for name in names:
        card = model_card(name)
        validate_architecture(card.arch)
        assert model_card(card.hf_id).name == name  # the Hugging Face id resolves to its entry
    required = ["Llama-2-7B", "Llama-2-13B", "Llama-2-70B", "Llama-3-8B", "Llama-3-70B",
                "Llama-3.1-8B", "Llama-3.1-70B", "Llama-3.1-405B", "Mistral-7B-v0.1",
                "Mistral-7B-v0.3", "Mistral-Nemo-12B", "Mistral-Large-2407", "Mixtral-8x7B",
                "Mixtral-8x22B", "Qwen2-7B", "Qwen2-72B", "Qwen1.5-MoE-A2.7B", "CodeLlama-7B",
                "CodeLlama-13B", "CodeLlama-34B", "CodeLlama-70B", "Phi-3-mini", "Phi-3-small",
                "Phi-3-medium", "Gemma-2-2B", "Gemma-2-9B", "Gemma-2-27B", "BLOOM-176B",
                "Falcon-7B", "Falcon-40B"]  # fmt: skip
    assert set(required) <= set(names)
    assert lookup_model("Mistral-7B-v0.3").vocab_size == 32768


def _org_model_folders(gpu_dir: Path) -> set[str]:
    """'org/model' for each <gpu_dir>/<org>/<model>/ folder."""
    if not gpu_dir.is_dir():
        return set()
    return {
        f"{org.name}/{m.name}"
        for org in gpu_dir.iterdir()
        if org.is_dir()
        for m in org.iterdir()
        if m.is_dir()
    }


def test_every_name_in_the_data_resolves(data_dir: Path) -> None:
    """Read the names from the data files themselves (skips without the data)."""
    names: set[str] = set()
    with open(data_dir / "argonne" / "Plots" / "All_results.csv", newline="") as f:
        names |= {row["Model"] for row in csv.DictReader(f)}
    with open(data_dir / "splitwise" / "data" / "perf_model.csv", newline="") as f:
        names |= {row["model"] for row in csv.DictReader(f)}
    energy = data_dir / "ml-energy-v2" / "data" / "llm_text_generation"
    for gpu_dir in [*energy.glob("*/*"), *(data_dir / "vidur/data/profiling/compute").glob("*")]:
        names |= _org_model_folders(gpu_dir)
    assert len(names) > 30
    unresolved = []
    for name in sorted(names):
        try:
            model_card(name)
        except ConfigError:
            unresolved.append(name)
    assert [n.lower() for n in unresolved] == sorted(UNREPRESENTABLE)
