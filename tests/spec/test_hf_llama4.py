"""Llama 4's language model (`llama4_text`, a `llama4` config's `text_config`) against
transformers: chunked local attention on the RoPE layers imported as sliding layers of
attention_chunk_size with every 4th layer full (global NoPE), MoE layers (fused experts of
intermediate_size, an ungated shared expert, a bias-free router) and, with
interleave_moe_layer_step > 1, dense layers of intermediate_size_mlp. Parameter counts equal
transformers' meta-device Llama4ForCausalLM exactly; the import is approximate (chunked
attention priced as sliding, RoPE on every layer), which `dse predict --hf-config` says."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dse.cli import main
from dse.errors import ConfigError
from dse.spec import arch as A
from dse.spec.catalogue import model_card
from dse.spec.hf import from_hf_config, import_hf_config

try:  # test-only dependencies
    import torch
    import transformers
    from transformers import Llama4Config, Llama4ForCausalLM, Llama4TextConfig

    transformers.logging.set_verbosity_error()
    HAVE_HF = True
except ImportError:  # pragma: no cover
    HAVE_HF = False
needs_hf = pytest.mark.skipif(not HAVE_HF, reason="torch and transformers are not importable")

TINY: dict[str, Any] = {"model_type": "llama4_text", "hidden_size": 64, "intermediate_size": 32,
        "intermediate_size_mlp": 96, "num_hidden_layers": 4, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 100, "num_local_experts": 4,
        "attention_chunk_size": 16}  # fmt: skip
CONFIGS: dict[str, dict[str, Any]] = {
    "scout-like (every layer MoE)": TINY,
    "interleave step 2 (maverick-like)": {**TINY, "interleave_moe_layer_step": 2},
    "8 layers, step 2, top 2": {**TINY, "num_hidden_layers": 8, "interleave_moe_layer_step": 2,
                                "num_experts_per_tok": 2},
    "moe_layers listed": {**TINY, "moe_layers": [0, 3]},
    "no chunking": {**TINY, "attention_chunk_size": None},
    "no_rope_layers listed": {**TINY, "no_rope_layers": [1, 0, 1, 0]},
    "no MoE layer": {**TINY, "moe_layers": []},
    "tied": {**TINY, "tie_word_embeddings": True},
    "attention bias": {**TINY, "attention_bias": True},
}  # fmt: skip
# (attention_pattern, sliding_window, ffn_pattern, d_ff, d_ff_expert)
EXPECTED: dict[str, tuple[str, int, str, int, int]] = {
    "scout-like (every layer MoE)": ("sliding*3,full", 16, "ffn", 32, 32),
    "interleave step 2 (maverick-like)": ("sliding*3,full", 16, "dense,ffn", 96, 32),
    "8 layers, step 2, top 2": ("sliding*3,full", 16, "dense,ffn", 96, 32),
    "moe_layers listed": ("sliding*3,full", 16, "ffn,dense*2,ffn", 96, 32),
    "no chunking": ("full", 0, "ffn", 32, 32),
    "no_rope_layers listed": ("sliding,full", 16, "ffn", 32, 32),
    "no MoE layer": ("sliding*3,full", 16, "ffn", 96, 96),
    "tied": ("sliding*3,full", 16, "ffn", 32, 32),
    "attention bias": ("sliding*3,full", 16, "ffn", 32, 32),
}
CHUNK_NOTE = "chunked local attention priced as a sliding window of attention_chunk_size"


def hf_model(cfg: dict[str, Any]) -> tuple[int, Any, Any]:
    conf = Llama4TextConfig(**{k: v for k, v in cfg.items() if k != "model_type"})
    with torch.device("meta"):
        model = Llama4ForCausalLM(conf)
    return sum(p.numel() for p in model.parameters()), conf, model


@needs_hf
@pytest.mark.parametrize("name", list(CONFIGS))
def test_params_equal_transformers(name: str) -> None:
    imp = import_hf_config(CONFIGS[name])
    n, _, _ = hf_model(CONFIGS[name])
    assert A.total_params(imp.arch) + imp.unmodelled_params == n
    assert imp.unmodelled_params == (4 * 64 if name == "attention bias" else 0)
    assert not imp.exact  # approximate: the chunked layers are priced as sliding ones


@needs_hf
@pytest.mark.parametrize("name", list(CONFIGS))
def test_layers_equal_the_ones_transformers_builds(name: str) -> None:
    a = import_hf_config(CONFIGS[name]).arch
    assert (a.attention_pattern, a.sliding_window, a.ffn_pattern, a.d_ff, a.d_ff_expert) == (
        EXPECTED[name]
    )
    _, conf, model = hf_model(CONFIGS[name])
    chunked = sum(t == "chunked_attention" for t in conf.layer_types)
    moe = sum(layer.is_moe_layer for layer in model.model.layers)
    full, sliding, _ = A.layer_kinds(a)
    dense, n_moe = A.ffn_layers(a)
    assert (int(sliding), int(full)) == (chunked, conf.num_hidden_layers - chunked)
    assert (int(n_moe), int(dense)) == (moe, conf.num_hidden_layers - moe)
    if moe:
        assert (a.n_experts, a.top_k) == (conf.num_local_experts, conf.num_experts_per_tok)
        assert (a.shared_expert_d_ff, a.shared_expert_gate) == (conf.intermediate_size, False)
    assert not a.qk_norm and a.rope  # the L2 q/k norm has no weights; RoPE priced everywhere


@needs_hf
def test_active_params_are_all_less_the_idle_experts() -> None:
    cfg = CONFIGS["8 layers, step 2, top 2"]
    a = import_hf_config(cfg).arch
    n, _, model = hf_model(cfg)
    # the fused expert tensors (gate_up_proj, down_proj); the shared expert is always on
    routed = sum(p.numel() for k, p in model.named_parameters() if k.split(".")[-2] == "experts")
    assert A.active_params(a) == n - routed * (a.n_experts - a.top_k) // a.n_experts


@needs_hf
def test_default_config_is_scout_and_counts_exactly() -> None:
    """Llama4TextConfig's defaults (documented for meta-llama/Llama-4-Scout-17B-16E): the
    language model's 107.8 B parameters (the published 109 B less the vision tower), 17 B
    active."""
    cfg = Llama4TextConfig().to_dict()
    imp = import_hf_config(cfg)
    n, _, _ = hf_model(cfg)
    assert A.total_params(imp.arch) == n == 107_769_861_120
    assert A.active_params(imp.arch) == pytest.approx(17e9, rel=0.02)
    assert (imp.arch.attention_pattern, imp.arch.sliding_window) == ("sliding*3,full", 8192)


def test_scout_catalogue_entry_is_the_default_config() -> None:
    card = model_card("Llama-4-Scout")
    assert card.name == "Llama-4-Scout-17B-16E" and not card.exact
    assert card.unmodelled_params == 0
    assert A.total_params(card.arch) == 107_769_861_120
    if HAVE_HF:
        assert card.arch == import_hf_config(Llama4TextConfig().to_dict()).arch


@needs_hf
def test_multimodal_llama4_config_reads_its_text_config() -> None:
    full = Llama4Config(text_config={k: v for k, v in TINY.items() if k != "model_type"})
    d = full.to_dict()
    assert d["model_type"] == "llama4"
    assert import_hf_config(d).arch == import_hf_config(TINY).arch
    # a hand-written llama4 config whose text_config names no model_type
    bare = {"model_type": "llama4", "text_config": {k: v for k, v in TINY.items()
                                                    if k != "model_type"}}  # fmt: skip
    assert import_hf_config(bare).arch == import_hf_config(TINY).arch


def test_notes_and_approximate_acceptance() -> None:
    imp = import_hf_config(TINY)
    assert any(CHUNK_NOTE in n for n in imp.notes)
    assert "RoPE priced on every attention layer (Llama-4's global layers have none)" in imp.notes
    assert any("L2 norm" in n for n in imp.notes)
    with pytest.raises(ConfigError, match="approximately representable"):
        from_hf_config(TINY)
    assert from_hf_config(TINY, approximate=True) == imp.arch


def test_bad_layer_lists_are_located() -> None:
    with pytest.raises(ConfigError, match="no_rope_layers"):
        import_hf_config({**TINY, "no_rope_layers": [1, 1]})
    with pytest.raises(ConfigError, match="layer_types"):
        import_hf_config({**TINY, "layer_types": ["sliding_attention"] * 4})
    with pytest.raises(ConfigError, match="num_local_experts"):
        import_hf_config({**TINY, "num_local_experts": 1})


def test_predict_hf_config_notes_the_approximation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(CONFIGS["interleave step 2 (maverick-like)"]))
    assert main(["predict", "--hf-config", str(path)]) == 0
    err = capsys.readouterr().err
    assert "model_type 'llama4_text' is approximate: every parameter is modelled" in err
    assert CHUNK_NOTE in err
    assert main(["arch", "--hf-config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "approximate: every parameter is modelled" in out
