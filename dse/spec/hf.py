"""Hugging Face `config.json` <-> `Architecture`: a pure mapping of dictionaries.

`from_hf_config` reads the fields every decoder-only config carries (hidden_size,
num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim, intermediate_size,
vocab_size, tie_word_embeddings, the MoE fields, biases, dtype); `to_hf_config` writes a config
that `transformers.AutoConfig` loads and from which `AutoModelForCausalLM.from_config` builds a
model with exactly `dse.spec.arch.total_params` parameters. Nothing here imports transformers or
torch: they are test-only dependencies (tests/spec/test_hf.py checks the counts on the meta device).

Model types whose parameters the Architecture counts exactly: llama, mistral, mixtral, qwen2,
qwen2_moe, qwen3, qwen3_moe, gemma, gemma2, phi3, falcon (without biases), the attention
families of issue 21 (gemma3_text's sliding:full pattern, deepseek_v3's latent attention and
dense first layers, qwen3_next's Gated DeltaNet layers, bamba's Mamba-2 layers; sliding
windows of mistral, mixtral, phi3, starcoder2 and gemma2 via `layer_types` / `sliding_window`),
the Mamba hybrids (nemotron_h's one-block-per-layer Mamba-2 / attention / MLP / MoE pattern,
jamba's Mamba-1 layers with periodic attention and MoE, falcon_h1's parallel attention +
Mamba-2 layers: `attention_pattern` and `ffn_pattern`), and the custom-code Llama look-alikes
aquila, internlm (without biases) and qwen (Qwen-1). bloom, opt, gptj, phi, starcoder2,
phi3small and gpt_oss carry biases (or learned positions, attention sinks) the Architecture has
no field for: `import_hf_config` says how many parameters that leaves out, and `from_hf_config`
accepts them only with `approximate=True`. llama4_text (Llama 4's language model, also a
llama4 config's text_config) counts every parameter but is approximate too
(`APPROXIMATE_TYPES`): its chunked local attention is priced as sliding windows of
attention_chunk_size and RoPE on every layer. `to_hf_config` exports full-attention GQA models
only.

One file (~1,200 lines) on purpose: one small importer per model type (~35 types) over a shared
`_Reader`, registered by name; a new model type is one function added here, and splitting by
family would spread the reader's conventions over many modules.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dse.errors import ConfigError
from dse.spec.arch import Architecture
from dse.spec.pattern import FFNS, HF_LAYER_TYPES, from_layer_types
from dse.spec.pattern import canonical as canonical_pattern
from dse.spec.rules import check_architecture

# torch dtype names in config.json ("dtype" since transformers 5, "torch_dtype" before).
_TORCH_DTYPES = {
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
}

# Model types exported by `to_hf_config` and the class transformers instantiates for each.
_CAUSAL_LM_CLASS = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "mixtral": "MixtralForCausalLM",
    "qwen2_moe": "Qwen2MoeForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
}

# tie_word_embeddings when config.json omits it: transformers' default for the model type.
_TIED_DEFAULT = {
    "gemma": True,
    "gemma2": True,
    "gemma3_text": True,
    "falcon": True,
    "starcoder2": True,
    "bloom": True,
    "opt": True,
    "phi3small": True,  # ties the LM head to the embedding in its custom code
}


# `rope: false` means no position encoding at all (NoPE: nemotron_h, jamba). Models with ALiBi
# (bloom, falcon with `alibi`) or learned position embeddings (opt) keep `rope: true`: the
# RoPE-sized elementwise pass stands in for their positional work (ALiBi's bias over the
# scores, the position-embedding add), and the shipped Level 3 was fitted on argonne's BLOOM
# and OPT rows priced so.


# Model types whose layers the Architecture cannot hold, and why (none at present: Nemotron-H,
# Jamba and Falcon-H1, refused before, are read since the hybrid patterns).
UNREPRESENTABLE_TYPES: dict[str, str] = {}

# Model types whose parameters are all counted but whose layers are priced approximately
# (`exact` False even with no unmodelled parameters; the importer's notes say how).
APPROXIMATE_TYPES = frozenset({"llama4_text"})


@dataclass(frozen=True)
class HFImport:
    """An architecture read from a config.json, with what the Architecture does not capture.

    `unmodelled_params` is the number of parameters the Hugging Face model has beyond
    `total_params(arch)` (biases outside q/k/v, learned position tables, the LM-head bias);
    `exact` is True when it is 0 and the layers are priced as the model runs them (not for
    APPROXIMATE_TYPES: Llama 4's chunked attention). `notes` also name behaviour that changes
    no parameter count but that the accounting ignores (sliding windows, ALiBi, parallel
    attention blocks).
    """

    arch: Architecture
    model_type: str
    exact: bool
    unmodelled_params: int
    notes: tuple[str, ...]
    source: str = "config"  # the file read, for messages


def hf_model_types() -> list[str]:
    """Every config.json model_type `import_hf_config` reads."""
    return sorted(_IMPORTERS)


def read_hf_config(source: Mapping[str, Any] | str | Path) -> tuple[dict[str, Any], str]:
    """The config dict and a label for messages: a mapping as is, or a config.json path/folder."""
    if isinstance(source, Mapping):
        return dict(source), "config"
    path = Path(source)
    if path.is_dir():
        path = path / "config.json"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file (expected a Hugging Face config.json)") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"{path}: must hold a JSON object, got {type(cfg).__name__}")
    return cfg, str(path)


def from_hf_config(
    source: Mapping[str, Any] | str | Path, *, approximate: bool = False
) -> Architecture:
    """The Architecture of a Hugging Face config (a dict, a config.json path, or its folder).

    Model types with parameters the Architecture cannot represent raise ConfigError unless
    `approximate` is True (see `import_hf_config` for what is left out).
    """
    imp = import_hf_config(source)
    if not imp.exact and not approximate:
        raise ConfigError(
            f"{imp.source}: model_type {imp.model_type!r} is only approximately representable "
            f"({imp.unmodelled_params:,} parameters not modelled: {'; '.join(imp.notes)}); "
            "pass approximate=True to accept it"
        )
    return imp.arch


def import_hf_config(source: Mapping[str, Any] | str | Path) -> HFImport:
    """Map a config.json onto an Architecture and say what the mapping leaves out."""
    cfg, where = read_hf_config(source)
    cfg = _text_config(cfg)
    model_type = cfg.get("model_type")
    if model_type in UNREPRESENTABLE_TYPES:
        raise ConfigError(
            f"{where}: model_type {model_type!r} is not representable: "
            f"{UNREPRESENTABLE_TYPES[model_type]}"
        )
    if model_type not in _IMPORTERS:
        raise ConfigError(
            f"{where}: model_type: must be one of {', '.join(hf_model_types())}, got {model_type!r}"
        )
    r = _Reader(cfg, where, model_type)
    kw, unmodelled, notes = _IMPORTERS[model_type](r)
    kw.setdefault(
        "tied_embeddings", r.flag("tie_word_embeddings", _TIED_DEFAULT.get(model_type, False))
    )
    kw["weight_dtype"], kw["kv_dtype"] = r.dtypes()
    errors = check_architecture(kw)
    if errors:
        raise ConfigError(f"{where}: {errors[0]}")
    arch = Architecture(**kw).resolved()
    exact = unmodelled == 0 and model_type not in APPROXIMATE_TYPES
    return HFImport(arch, model_type, exact, int(unmodelled), tuple(notes), where)


def _text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The language model's part of a multimodal config (`text_config`), else the config."""
    inner = cfg.get("text_config")
    if isinstance(inner, dict) and cfg.get("model_type") == "llama4":
        return {"model_type": "llama4_text", **inner}  # Llama4Config's text_config class
    if isinstance(inner, dict) and "model_type" in inner and "hidden_size" in inner:
        return inner
    return cfg


class _Reader:
    """Typed access to config keys with messages naming the file and the key."""

    def __init__(self, cfg: Mapping[str, Any], where: str, model_type: str) -> None:
        self.cfg, self.where, self.model_type = cfg, where, model_type

    def integer(self, *keys: str, default: Any = ..., minimum: int = 1) -> Any:
        """The first of `keys` present (aliases, e.g. n_embed / hidden_size) as an int."""
        for key in keys:
            if key in self.cfg and self.cfg[key] is not None:
                v = self.cfg[key]
                ok = isinstance(v, int) and not isinstance(v, bool)
                ok = ok or (isinstance(v, float) and v.is_integer())
                if not ok or v < minimum:
                    raise ConfigError(
                        f"{self.where}: {key}: must be an integer >= {minimum}, got {v!r}"
                    )
                return int(v)
        if default is ...:
            raise ConfigError(
                f"{self.where}: missing key {keys[0]!r} (required for model_type {self.model_type!r})"
            )
        return default

    def flag(self, key: str, default: bool) -> bool:
        v = self.cfg.get(key)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise ConfigError(f"{self.where}: {key}: must be true or false, got {v!r}")
        return v

    def get(self, key: str, default: Any = None) -> Any:
        v = self.cfg.get(key)
        return default if v is None else v

    def dtypes(self) -> tuple[str, str]:
        """(weight dtype, KV-cache dtype): the torch dtype, or the quantisation's weight format.

        Serving engines keep the KV cache in the activation dtype unless told otherwise.
        """
        raw = self.cfg.get("dtype") or self.cfg.get("torch_dtype") or "bfloat16"
        name = str(raw).removeprefix("torch.")
        if name not in _TORCH_DTYPES:
            key = "dtype" if self.cfg.get("dtype") else "torch_dtype"
            raise ConfigError(
                f"{self.where}: {key}: must be one of {', '.join(sorted(set(_TORCH_DTYPES.values())))}, got {raw!r}"
            )
        act = _TORCH_DTYPES[name]
        weight = act
        q = self.cfg.get("quantization_config")
        if isinstance(q, Mapping):
            # NVIDIA ModelOpt's checkpoints say quant_algo: NVFP4; llm-compressor's format:
            # nvfp4-pack-quantized (4-bit values + an fp8 scale per 16: `weight_dtype: nvfp4`)
            algo = str(q.get("quant_algo", "")).upper()
            if algo == "NVFP4" or str(q.get("format", "")).lower().startswith("nvfp4"):
                weight = "nvfp4"
            elif str(q.get("quant_method", "")).startswith("fp8"):
                weight = "fp8"
            elif q.get("bits") == 4 or q.get("load_in_4bit"):
                weight = "int4"
            elif q.get("bits") == 8 or q.get("load_in_8bit"):
                weight = "int8"
        return weight, act


# ---------------------------------------------------------------------- per model type
# Each importer returns (Architecture keyword arguments, parameters not modelled, notes).
_Import = tuple[dict[str, Any], int, list[str]]


def _llama_core(r: _Reader, *, head_dim_default: int | None = None) -> dict[str, Any]:
    d = r.integer("hidden_size")
    h = r.integer("num_attention_heads")
    hd = r.integer("head_dim", default=head_dim_default if head_dim_default else d // h)
    return {
        "d_model": d,
        "n_layers": r.integer("num_hidden_layers"),
        "n_heads": h,
        "n_kv_heads": r.integer("num_key_value_heads", default=h),
        "head_dim": hd,
        "d_ff": r.integer("intermediate_size"),
        "vocab_size": r.integer("vocab_size"),
    }


def _window_note(r: _Reader) -> list[str]:
    """Kept for model types whose window is not imported (none at present)."""
    return []


def _sliding(r: _Reader, kw: dict[str, Any], every_layer: bool = True) -> list[str]:
    """Import the attention pattern: `layer_types` when the config lists them (transformers 5
    writes them), else every layer sliding when the model type applies `sliding_window` to all
    layers (Mistral, Mixtral, Phi-3, StarCoder2) and it is set. Qwen2-style configs only slide
    with use_sliding_window, from layer max_window_layers on."""
    window = r.get("sliding_window")
    types = r.get("layer_types")
    if types is not None:
        text = from_layer_types(types)
        if text is None or len(types) != kw["n_layers"]:
            raise ConfigError(
                f"{r.where}: layer_types: must list num_hidden_layers={kw['n_layers']} of "
                f"{', '.join(HF_LAYER_TYPES)}, got {types!r}"
            )
    elif not (isinstance(window, int) and window > 0):
        return []
    elif "use_sliding_window" in r.cfg or not every_layer:
        if not r.flag("use_sliding_window", False):
            return []
        first = r.integer("max_window_layers", default=kw["n_layers"], minimum=0)
        kinds = ["full"] * min(first, kw["n_layers"]) + ["sliding"] * max(kw["n_layers"] - first, 0)
        text = canonical_pattern(kinds)
    else:
        text = "sliding"
    if text != "full":
        kw["attention_pattern"] = text
        kw["sliding_window"] = r.integer("sliding_window")
    return []


def _import_llama(r: _Reader) -> _Import:
    kw = _llama_core(r)
    L, d, ff = kw["n_layers"], kw["d_model"], kw["d_ff"]
    unmodelled, notes = 0, []
    if r.flag("attention_bias", False):
        # Llama's attention_bias puts biases on q, k, v and the output projection.
        kw["qkv_bias"] = True
        unmodelled += L * d
        notes.append("attention_bias: the output-projection bias is not modelled")
    if r.flag("mlp_bias", False):
        unmodelled += L * (2 * ff + d)
        notes.append("mlp_bias: gate/up/down biases are not modelled")
    return kw, unmodelled, notes + _window_note(r)


def _import_mistral(r: _Reader) -> _Import:
    kw = _llama_core(r)
    return kw, 0, _sliding(r, kw)


def _import_mixtral(r: _Reader) -> _Import:
    kw = _llama_core(r)
    kw["n_experts"] = r.integer("num_local_experts")
    kw["top_k"] = r.integer("num_experts_per_tok")
    kw["d_ff_expert"] = kw["d_ff"]  # every Mixtral layer is MoE; intermediate_size is per expert
    return kw, 0, _sliding(r, kw)


def _import_qwen2(r: _Reader) -> _Import:
    kw = _llama_core(r)
    kw["qkv_bias"] = True  # Qwen2 always has q, k, v biases (and none on o_proj)
    return kw, 0, _sliding(r, kw, every_layer=False)


def _check_all_layers_moe(r: _Reader) -> None:
    if r.get("mlp_only_layers", []) or r.integer("decoder_sparse_step", default=1) != 1:
        raise ConfigError(
            f"{r.where}: mlp_only_layers / decoder_sparse_step: every layer must be MoE "
            f"(a mix of dense and MoE layers is not representable), got "
            f"mlp_only_layers={r.get('mlp_only_layers', [])}, "
            f"decoder_sparse_step={r.get('decoder_sparse_step', 1)}"
        )


def _import_qwen2_moe(r: _Reader) -> _Import:
    kw = _llama_core(r)
    _check_all_layers_moe(r)
    kw["n_experts"] = r.integer("num_experts")
    kw["top_k"] = r.integer("num_experts_per_tok")
    kw["d_ff_expert"] = r.integer("moe_intermediate_size")
    kw["shared_expert_d_ff"] = r.integer("shared_expert_intermediate_size", default=0, minimum=0)
    kw["shared_expert_gate"] = True  # Qwen2-MoE always builds the sigmoid gate (d_model -> 1)
    kw["qkv_bias"] = r.flag("qkv_bias", True)
    return kw, 0, _sliding(r, kw, every_layer=False)


def _import_qwen3(r: _Reader) -> _Import:
    kw = _llama_core(r, head_dim_default=128)  # Qwen3Config's head_dim default
    kw["qk_norm"] = True
    unmodelled, notes = 0, []
    if r.flag("attention_bias", False):
        kw["qkv_bias"] = True
        unmodelled += kw["n_layers"] * kw["d_model"]
        notes.append("attention_bias: the output-projection bias is not modelled")
    return kw, unmodelled, notes + _sliding(r, kw, every_layer=False)


def _import_qwen3_moe(r: _Reader) -> _Import:
    kw, unmodelled, notes = _import_qwen3(r)
    if "head_dim" not in r.cfg:
        kw["head_dim"] = kw["d_model"] // kw["n_heads"]  # Qwen3-MoE has no head_dim default
    _check_all_layers_moe(r)
    kw["n_experts"] = r.integer("num_experts")
    kw["top_k"] = r.integer("num_experts_per_tok")
    kw["d_ff_expert"] = r.integer("moe_intermediate_size")
    return kw, unmodelled, notes


def _import_gemma(r: _Reader) -> _Import:
    kw = _llama_core(r, head_dim_default=256)  # GemmaConfig's head_dim default
    return kw, 0, []  # GeGLU is gated like SwiGLU: gate, up, down


def _import_gemma2(r: _Reader) -> _Import:
    kw = _llama_core(r, head_dim_default=256)
    kw["norms_per_layer"] = 4  # pre- and post-norms around attention and around the FFN
    notes = ["attention and final logits are soft-capped (no parameters)"]
    if r.get("sliding_window") and r.get("layer_types") is None:
        # Gemma 2 alternates: even layers (0, 2, ...) slide, odd ones attend to everything.
        kw["attention_pattern"] = "sliding,full"
        kw["sliding_window"] = r.integer("sliding_window")
    else:
        _sliding(r, kw)
    return kw, 0, notes


def _import_gemma3(r: _Reader) -> _Import:
    """Gemma 3's language model: Gemma 2's sandwich norms, q/k norms, and every
    sliding_window_pattern-th layer full (5 sliding : 1 full)."""
    kw = _llama_core(r, head_dim_default=256)
    kw["norms_per_layer"] = 4
    kw["qk_norm"] = True
    if r.get("layer_types") is None:
        every = r.integer("sliding_window_pattern", default=6)
        kinds = ["full" if (i + 1) % every == 0 else "sliding" for i in range(kw["n_layers"])]
        kw["attention_pattern"] = canonical_pattern(kinds)
        kw["sliding_window"] = r.integer("sliding_window", default=4096)
    else:
        _sliding(r, kw)
    return kw, 0, []


def _import_gpt_oss(r: _Reader) -> _Import:
    """gpt-oss: MoE on every layer, alternating sliding (128 tokens) and full attention, q/k/v
    biases; the output-projection, router and expert biases and the per-head attention sinks
    have no field (counted as unmodelled)."""
    kw = _llama_core(r, head_dim_default=64)
    kw["qkv_bias"] = True
    kw["n_experts"] = r.integer("num_local_experts")
    kw["top_k"] = r.integer("num_experts_per_tok", "experts_per_token")
    kw["d_ff_expert"] = kw["d_ff"]
    if r.get("layer_types") is None:
        kinds = ["sliding" if i % 2 == 0 else "full" for i in range(kw["n_layers"])]
        kw["attention_pattern"] = canonical_pattern(kinds)
        kw["sliding_window"] = r.integer("sliding_window", default=128)
    else:
        _sliding(r, kw)
    L, d, e, ff, h = kw["n_layers"], kw["d_model"], kw["n_experts"], kw["d_ff"], kw["n_heads"]
    unmodelled = L * (d + h + e + e * (2 * ff + d))
    notes = [
        "output-projection, router and expert biases and the attention sinks are not modelled",
        "the experts' clamped SwiGLU is counted as SwiGLU",
    ]
    return kw, unmodelled, notes


def _llama4_layers(r: _Reader, L: int) -> tuple[list[bool], list[bool], list[bool]]:
    """(RoPE, chunked, MoE) per layer, as Llama4TextConfig derives them: no_rope_layers (1:
    RoPE) else every no_rope_layer_interval-th layer NoPE; layer_types else a RoPE layer
    chunked when attention_chunk_size is set; moe_layers else every
    interleave_moe_layer_step-th layer (from step - 1)."""
    rope_raw = r.get("no_rope_layers") or [
        int((i + 1) % r.integer("no_rope_layer_interval", default=4) != 0) for i in range(L)
    ]
    if (
        not isinstance(rope_raw, list)
        or len(rope_raw) < L
        or any(v not in (0, 1) for v in rope_raw)
    ):
        raise ConfigError(
            f"{r.where}: no_rope_layers: must list a 0 or 1 for each of the "
            f"num_hidden_layers={L} layers, got {rope_raw!r}"
        )
    rope = [bool(v) for v in rope_raw[:L]]
    chunk = r.cfg.get("attention_chunk_size", 8192)  # null: no chunked layers
    types = r.get("layer_types") or [
        "chunked_attention" if rope[i] and chunk is not None else "full_attention" for i in range(L)
    ]
    if (
        not isinstance(types, list)
        or len(types) != L
        or any(t not in ("chunked_attention", "full_attention") for t in types)
    ):
        raise ConfigError(
            f"{r.where}: layer_types: must list num_hidden_layers={L} of chunked_attention, "
            f"full_attention, got {types!r}"
        )
    step = r.integer("interleave_moe_layer_step", default=1)
    moe_raw = r.cfg.get("moe_layers")
    if moe_raw is None:
        moe_raw = list(range(step - 1, L, step))
    if not isinstance(moe_raw, list) or any(not isinstance(i, int) for i in moe_raw):
        raise ConfigError(
            f"{r.where}: moe_layers: must be a list of layer indices, got {moe_raw!r}"
        )
    return rope, [t == "chunked_attention" for t in types], [i in moe_raw for i in range(L)]


def _import_llama4_text(r: _Reader) -> _Import:
    """Llama 4's language model (Scout, Maverick; a llama4 config's text_config): GQA with
    chunked local attention on the RoPE layers and global NoPE attention on every 4th, MoE
    layers of num_local_experts experts of intermediate_size (fused gate_up_proj, sigmoid top-k
    router, no bias) plus an ungated shared expert of intermediate_size, interleaved with dense
    SwiGLU layers of intermediate_size_mlp when interleave_moe_layer_step > 1 (Maverick).
    Approximate: the chunked layers are priced as sliding ones, RoPE on every layer."""
    kw = _llama_core(r, head_dim_default=128)  # Llama4TextConfig's head_dim default
    if "num_key_value_heads" not in r.cfg:
        kw["n_kv_heads"] = 8  # Llama4TextConfig's default
    L, d = kw["n_layers"], kw["d_model"]
    rope, chunked, moe = _llama4_layers(r, L)
    experts = r.integer("num_local_experts", default=16)
    notes: list[str] = []
    if any(chunked):
        kw["attention_pattern"] = canonical_pattern(["sliding" if c else "full" for c in chunked])
        kw["sliding_window"] = r.integer("attention_chunk_size")
        notes.append(
            "chunked local attention priced as a sliding window of attention_chunk_size: KV "
            "memory the same bound, prefill attention work up to 2x the chunked kernel's"
        )
    kw["rope"] = any(rope)
    if any(rope) and not all(rope):
        notes.append("RoPE priced on every attention layer (Llama-4's global layers have none)")
    if r.flag("use_qk_norm", True) and any(rope):
        notes.append(
            "the weightless L2 norm of q and k on the RoPE layers is not priced (qk_norm false: "
            "dse's qk_norm has weights)"
        )
    if r.flag("attn_temperature_tuning", True) and not all(rope):
        notes.append("the NoPE layers' attention temperature tuning is not priced (no parameters)")
    if any(moe) and experts > 1:
        kw["n_experts"] = experts
        kw["top_k"] = r.integer("num_experts_per_tok", default=1)
        kw["d_ff_expert"] = kw["d_ff"]  # intermediate_size: each expert's and the shared one's
        kw["shared_expert_d_ff"] = kw["d_ff"]
        kw["shared_expert_gate"] = False  # the shared expert's output is added ungated
        if not all(moe):
            kw["d_ff"] = r.integer("intermediate_size_mlp", default=16384)
            kw["ffn_pattern"] = canonical_pattern(["ffn" if m else "dense" for m in moe], FFNS)
    elif any(moe):  # one expert: every MoE layer is two SwiGLU MLPs of intermediate_size
        raise ConfigError(
            f"{r.where}: num_local_experts: must be > 1 (an MoE layer of one expert plus the "
            f"shared expert is not representable), got {experts}"
        )
    else:  # no MoE layer: every layer a dense MLP of intermediate_size_mlp
        kw["d_ff"] = r.integer("intermediate_size_mlp", default=16384)
    unmodelled = 0
    if r.flag("attention_bias", False):
        kw["qkv_bias"] = True
        unmodelled += L * d
        notes.append("attention_bias: the output-projection bias is not modelled")
    return kw, unmodelled, notes


def _import_deepseek_v3(r: _Reader) -> _Import:
    """DeepSeek-V3 (and Kimi K2's layout): multi-head latent attention, the first
    first_k_dense_replace layers dense, then routed + shared experts (no shared gate)."""
    d = r.integer("hidden_size")
    h = r.integer("num_attention_heads")
    rope = r.integer("qk_rope_head_dim")
    nope = r.integer("qk_nope_head_dim")
    q_rank = r.get("q_lora_rank")
    kw: dict[str, Any] = {
        "d_model": d,
        "n_layers": r.integer("num_hidden_layers"),
        "n_heads": h,
        "n_kv_heads": h,  # every head gets its own K and V up from the shared latent
        "head_dim": nope + rope,
        "d_ff": r.integer("intermediate_size"),
        "vocab_size": r.integer("vocab_size"),
        "kv_lora_rank": r.integer("kv_lora_rank"),
        "q_lora_rank": 0 if q_rank is None else r.integer("q_lora_rank"),
        "qk_rope_head_dim": rope,
        "qk_nope_head_dim": nope,
        "v_head_dim": r.integer("v_head_dim"),
        "n_experts": r.integer("n_routed_experts"),
        "top_k": r.integer("num_experts_per_tok"),
        "d_ff_expert": r.integer("moe_intermediate_size"),
        "shared_expert_d_ff": r.integer("n_shared_experts", default=0, minimum=0)
        * r.integer("moe_intermediate_size"),
        "n_dense_layers": r.integer("first_k_dense_replace", default=0, minimum=0),
    }
    if r.integer("moe_layer_freq", default=1) != 1:
        raise ConfigError(
            f"{r.where}: moe_layer_freq: must be 1 (every layer after the dense ones MoE), "
            f"got {r.get('moe_layer_freq')}"
        )
    if r.flag("attention_bias", False):
        raise ConfigError(
            f"{r.where}: attention_bias: must be false (MLA has no biases here), got true"
        )
    return kw, 0, ["the router's score-correction bias is a buffer (no parameters)"]


def _import_qwen3_next(r: _Reader) -> _Import:
    """Qwen3-Next: 3 Gated DeltaNet layers to 1 gated full-attention layer
    (full_attention_interval), q/k norms, MoE with a gated shared expert on every layer."""
    kw = _llama_core(r, head_dim_default=256)
    kw["qk_norm"] = True
    kw["attn_output_gate"] = True
    if r.get("layer_types") is None:
        every = r.integer("full_attention_interval", default=4)
        kinds = ["full" if (i + 1) % every == 0 else "linear" for i in range(kw["n_layers"])]
        kw["attention_pattern"] = canonical_pattern(kinds)
    else:
        _sliding(r, kw)
    _check_all_layers_moe(r)
    kw["n_experts"] = r.integer("num_experts")
    kw["top_k"] = r.integer("num_experts_per_tok")
    kw["d_ff_expert"] = r.integer("moe_intermediate_size")
    kw["shared_expert_d_ff"] = r.integer("shared_expert_intermediate_size", default=0, minimum=0)
    kw["shared_expert_gate"] = True
    kw["linear_kind"] = "gated_deltanet"
    kw["linear_n_heads"] = r.integer("linear_num_value_heads")
    kw["linear_head_dim"] = r.integer("linear_value_head_dim")
    kw["linear_n_groups"] = r.integer("linear_num_key_heads")
    kw["linear_state_dim"] = r.integer("linear_key_head_dim")
    kw["linear_conv_width"] = r.integer("linear_conv_kernel_dim", default=4)
    if r.flag("attention_bias", False):
        raise ConfigError(f"{r.where}: attention_bias: must be false, got true")
    return kw, 0, []


def _import_bamba(r: _Reader) -> _Import:
    """Bamba: Mamba-2 layers with a few attention layers (attn_layer_indices), a SwiGLU FFN
    after every mixer."""
    kw = _llama_core(r)
    L, d = kw["n_layers"], kw["d_model"]
    attn = set(r.get("attn_layer_indices") or [])
    if r.get("layer_types") is None:
        kw["attention_pattern"] = canonical_pattern(
            ["full" if i in attn else "linear" for i in range(L)]
        )
    else:
        _sliding(r, kw)
    heads = r.integer("mamba_n_heads", default=128)
    inner = r.integer("mamba_expand", default=2) * d
    d_head = r.get("mamba_d_head", "auto")
    kw["linear_kind"] = "mamba2"
    kw["linear_n_heads"] = heads
    kw["linear_head_dim"] = inner // heads if d_head == "auto" else r.integer("mamba_d_head")
    kw["linear_n_groups"] = r.integer("mamba_n_groups", default=1)
    kw["linear_state_dim"] = r.integer("mamba_d_state", default=256)
    kw["linear_conv_width"] = r.integer("mamba_d_conv", default=4)
    if not r.flag("mamba_conv_bias", True) or r.flag("mamba_proj_bias", False):
        raise ConfigError(
            f"{r.where}: mamba_conv_bias / mamba_proj_bias: must be true / false (Mamba-2's "
            f"defaults), got {r.get('mamba_conv_bias')} / {r.get('mamba_proj_bias')}"
        )
    return kw, 0, []


# Nemotron-H's block letters (hybrid_override_pattern) and its layers_block_type names ->
# (mixer, FFN) of the layer: each block is exactly one of a Mamba-2 mixer, an attention mixer,
# an MLP or an MoE FFN ("mlp" is the model's FFN in a dense model, a dense one beside experts).
_NEMOTRON_BLOCKS: dict[str, tuple[str, str]] = {
    "linear_attention": ("linear", "none"),
    "full_attention": ("full", "none"),
    "mlp": ("none", "dense"),
    "moe": ("none", "ffn"),
}
_NEMOTRON_LETTERS = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}


def _nemotron_blocks(r: _Reader) -> list[str]:
    """The block types of a Nemotron-H config: layers_block_type, else hybrid_override_pattern
    (M Mamba-2, * attention, - MLP, E MoE), else NemotronHConfig's default."""
    types = r.get("layers_block_type")
    if types is None:
        text = r.get("hybrid_override_pattern")
        if text is None:
            return ["linear_attention", "moe", "full_attention", "mlp"]
        if not isinstance(text, str) or not text or set(text) - set(_NEMOTRON_LETTERS):
            raise ConfigError(
                f"{r.where}: hybrid_override_pattern: must be a text of the letters M, *, -, E "
                f"(Mamba-2, attention, MLP, MoE), got {text!r}"
            )
        return [_NEMOTRON_LETTERS[c] for c in text]
    if not isinstance(types, list) or not types or any(t not in _NEMOTRON_BLOCKS for t in types):
        raise ConfigError(
            f"{r.where}: layers_block_type: must be a list of {', '.join(_NEMOTRON_BLOCKS)}, "
            f"got {types!r}"
        )
    return list(types)


def _import_nemotron_h(r: _Reader) -> _Import:
    """Nemotron-H (Nemotron-H-8B/47B, Nemotron-Nano-v2, Nemotron-3-Nano): each block is one of
    a Mamba-2 mixer, a GQA attention mixer (no RoPE: rope false; no biases), a plain MLP (up,
    relu^2, down) or an MoE FFN of plain experts with a shared one; one RMSNorm per block."""
    blocks = _nemotron_blocks(r)
    moe = "moe" in blocks
    mixers = [_NEMOTRON_BLOCKS[b][0] for b in blocks]
    ffns = [_NEMOTRON_BLOCKS[b][1] for b in blocks]
    if not moe:  # a dense model's MLP layers have its one FFN
        ffns = ["ffn" if f == "dense" else f for f in ffns]
    d = r.integer("hidden_size")
    h = r.integer("num_attention_heads")
    heads = r.integer("mamba_num_heads", default=128)
    kw: dict[str, Any] = {
        "d_model": d,
        "n_layers": len(blocks),
        "n_heads": h,
        "n_kv_heads": r.integer("num_key_value_heads", default=8),
        "head_dim": r.integer("head_dim", default=128),  # NemotronHConfig's default
        "d_ff": r.integer("intermediate_size", default=21504),
        "gated_mlp": False,
        "vocab_size": r.integer("vocab_size", default=131072),
        # transformers' NemotronH keeps the LM head apart whatever tie_word_embeddings says
        "tied_embeddings": False,
        "norms_per_layer": 1,
        "attention_pattern": canonical_pattern(mixers),
        "ffn_pattern": canonical_pattern(ffns, FFNS),
        "linear_kind": "mamba2",
        "linear_n_heads": heads,
        "linear_head_dim": r.integer("mamba_head_dim", default=64),
        "linear_n_groups": r.integer("n_groups", "mamba_n_groups", default=8),
        "linear_state_dim": r.integer("ssm_state_size", default=128),
        "linear_conv_width": r.integer("conv_kernel", "mamba_d_conv", default=4),
        "rope": False,  # NemotronHAttention applies no position encoding
    }
    if moe:
        if r.get("moe_latent_size") is not None:
            raise ConfigError(
                f"{r.where}: moe_latent_size: must be null (experts on a latent projection of "
                f"the hidden state are not representable), got {r.get('moe_latent_size')!r}"
            )
        kw["n_experts"] = r.integer("n_routed_experts", "num_local_experts", default=8)
        kw["top_k"] = r.integer("num_experts_per_tok", default=2)
        kw["d_ff_expert"] = r.integer("moe_intermediate_size", default=7688)
        kw["shared_expert_d_ff"] = r.integer(
            "moe_shared_expert_intermediate_size", default=7688, minimum=0
        )
    conv_bias = r.cfg.get("use_conv_bias", r.cfg.get("mamba_conv_bias", True))
    if conv_bias is not True:
        raise ConfigError(
            f"{r.where}: use_conv_bias: must be true (Mamba-2's conv has a bias), got {conv_bias!r}"
        )
    L_lin = mixers.count("linear")
    unmodelled, notes = 0, []
    if r.flag("use_bias", False):  # Mamba-2's in_proj and out_proj biases
        inner, ng, ds = heads * kw["linear_head_dim"], kw["linear_n_groups"], kw["linear_state_dim"]
        unmodelled += L_lin * (2 * inner + 2 * ng * ds + heads + d)
        notes.append("use_bias: the Mamba-2 in_proj and out_proj biases are not modelled")
    if r.flag("mlp_bias", False):  # up and down biases of the MLPs and the shared experts
        unmodelled += blocks.count("mlp") * (kw["d_ff"] + d)
        unmodelled += blocks.count("moe") * (kw.get("shared_expert_d_ff", 0) + d)
        notes.append("mlp_bias: the MLP and shared-expert biases are not modelled")
    if r.flag("tie_word_embeddings", False):
        notes.append("tie_word_embeddings is ignored: transformers' NemotronH has its own LM head")
    if r.integer("num_nextn_predict_layers", default=0, minimum=0):
        notes.append("the multi-token-prediction layers are not part of the served model")
    return kw, unmodelled, notes


def _import_jamba(r: _Reader) -> _Import:
    """Jamba: Mamba-1 layers with an attention layer every attn_layer_period-th (from
    attn_layer_offset), an MoE FFN every expert_layer_period-th (from expert_layer_offset) and
    a dense SwiGLU FFN of intermediate_size on the others; attention without RoPE (rope false)."""
    d = r.integer("hidden_size")
    h = r.integer("num_attention_heads")
    L = r.integer("num_hidden_layers", default=32)
    a_per = r.integer("attn_layer_period", default=8)
    a_off = r.integer("attn_layer_offset", default=4, minimum=0)
    e_per = r.integer("expert_layer_period", default=2)
    e_off = r.integer("expert_layer_offset", default=1, minimum=0)
    for key, off, per in (
        ("attn_layer_offset", a_off, a_per),
        ("expert_layer_offset", e_off, e_per),
    ):
        if off >= per:
            raise ConfigError(
                f"{r.where}: {key}: must be < its period {per} (transformers refuses it), got {off}"
            )
    experts = r.integer("num_experts", "num_local_experts", default=16)
    inner = r.integer("mamba_expand", default=2) * d
    kw: dict[str, Any] = {
        "d_model": d,
        "n_layers": L,
        "n_heads": h,
        "n_kv_heads": r.integer("num_key_value_heads", default=8),  # JambaConfig's default
        "head_dim": r.integer("head_dim", default=d // h),
        "d_ff": r.integer("intermediate_size", default=14336),
        "vocab_size": r.integer("vocab_size", default=65536),
        "attention_pattern": canonical_pattern(
            ["full" if i % a_per == a_off else "linear" for i in range(L)]
        ),
        # Mamba-1: inner = expand x d_model channels, each its own head (width 1) with a
        # d_state-element state; its norms of dt, B and C are linear_norm.
        "linear_kind": "mamba1",
        "linear_n_heads": inner,
        "linear_head_dim": 1,
        "linear_state_dim": r.integer("mamba_d_state", default=16),
        "linear_conv_width": r.integer("mamba_d_conv", default=4),
        "rope": False,  # JambaAttention applies no position encoding
    }
    if experts > 1:
        kw["n_experts"] = experts
        kw["top_k"] = r.integer("num_experts_per_tok", default=2)
        kw["d_ff_expert"] = kw["d_ff"]
        kw["ffn_pattern"] = canonical_pattern(
            ["ffn" if i % e_per == e_off else "dense" for i in range(L)], FFNS
        )
    rank = r.get("mamba_dt_rank", "auto")
    if rank != "auto" and r.integer("mamba_dt_rank") != -(-d // 16):
        raise ConfigError(
            f"{r.where}: mamba_dt_rank: must be 'auto' or ceil(hidden_size / 16) = {-(-d // 16)} "
            f"(the rank the accounting uses), got {rank!r}"
        )
    if not r.flag("mamba_conv_bias", True):
        raise ConfigError(
            f"{r.where}: mamba_conv_bias: must be true (Mamba's conv has a bias), got false"
        )
    unmodelled, notes = 0, []
    if r.flag("mamba_proj_bias", False):
        n_mamba = L - sum(i % a_per == a_off for i in range(L))
        unmodelled += n_mamba * (2 * inner + d)
        notes.append("mamba_proj_bias: the Mamba in_proj and out_proj biases are not modelled")
    return kw, unmodelled, notes


def _import_falcon_h1(r: _Reader) -> _Import:
    """Falcon-H1: every layer runs GQA attention and a Mamba-2 mixer side by side on the same
    normed input (their outputs summed), then a SwiGLU FFN; muP multipliers scale activations
    (no parameters)."""
    kw = _llama_core(r)
    if "num_key_value_heads" not in r.cfg:
        kw["n_kv_heads"] = 8  # FalconH1Config's default
    d = kw["d_model"]
    # The Mamba width: mamba_d_ssm (FalconH1Config's default 1024), or expand x d when null.
    if "mamba_d_ssm" in r.cfg and r.cfg["mamba_d_ssm"] is None:
        inner = r.integer("mamba_expand", default=2) * d
    else:
        inner = r.integer("mamba_d_ssm", default=1024)
    heads = r.integer("mamba_n_heads", default=128)
    d_head = r.get("mamba_d_head", "auto")
    d_head = inner // heads if d_head == "auto" else r.integer("mamba_d_head")
    if heads * d_head != inner:
        raise ConfigError(
            f"{r.where}: mamba_n_heads x mamba_d_head: must equal the Mamba width {inner} "
            f"(mamba_d_ssm, or mamba_expand x hidden_size), got {heads} x {d_head}"
        )
    kw.update(
        attention_pattern="full+linear",
        linear_kind="mamba2",
        linear_n_heads=heads,
        linear_head_dim=d_head,
        linear_n_groups=r.integer("mamba_n_groups", default=1),
        linear_state_dim=r.integer("mamba_d_state", default=256),
        linear_conv_width=r.integer("mamba_d_conv", default=4),
        linear_norm=r.flag("mamba_rms_norm", False),
    )
    if not r.flag("mamba_conv_bias", True):
        raise ConfigError(
            f"{r.where}: mamba_conv_bias: must be true (Mamba-2's conv has a bias), got false"
        )
    L = kw["n_layers"]
    unmodelled, notes = (
        0,
        ["muP multipliers scale the embedding, attention, SSM, MLP and LM head (no parameters)"],
    )
    if r.flag("attention_bias", False):
        kw["qkv_bias"] = True
        unmodelled += L * d
        notes.append("attention_bias: the output-projection bias is not modelled")
    if r.flag("mlp_bias", False):
        unmodelled += L * (2 * kw["d_ff"] + d)
        notes.append("mlp_bias: gate/up/down biases are not modelled")
    if r.flag("mamba_proj_bias", False):
        unmodelled += L * (2 * inner + 2 * kw["linear_n_groups"] * kw["linear_state_dim"] + heads)
        notes.append("mamba_proj_bias: the Mamba-2 in_proj bias is not modelled")
    if r.flag("projectors_bias", False):
        unmodelled += L * d
        notes.append("projectors_bias: the Mamba-2 out_proj bias is not modelled")
    return kw, unmodelled, notes


def _import_phi3(r: _Reader) -> _Import:
    kw = _llama_core(r)  # fused qkv_proj and gate_up_proj hold the same weights as Llama's
    return kw, 0, _sliding(r, kw)


def _import_aquila(r: _Reader) -> _Import:
    kw = _llama_core(r)
    return kw, 0, ["custom code (trust_remote_code): a Llama layout"]


def _import_internlm(r: _Reader) -> _Import:
    kw = _llama_core(r)
    notes = ["custom code (trust_remote_code): a Llama layout"]
    unmodelled = 0
    if r.flag("bias", True):  # InternLMConfig's default: biases on q, k, v and o
        kw["qkv_bias"] = True
        unmodelled = kw["n_layers"] * kw["d_model"]
        notes.append("bias: the output-projection bias is not modelled")
    return kw, unmodelled, notes


def _import_qwen(r: _Reader) -> _Import:
    """Qwen-1 (QWenLMHeadModel): fused c_attn with bias, w1/w2 of intermediate_size / 2 each."""
    d = r.integer("hidden_size")
    h = r.integer("num_attention_heads")
    kw = {
        "d_model": d,
        "n_layers": r.integer("num_hidden_layers"),
        "n_heads": h,
        "head_dim": r.integer("kv_channels", default=d // h),
        "d_ff": r.integer("intermediate_size") // 2,
        "vocab_size": r.integer("vocab_size"),
        "qkv_bias": True,
    }
    unmodelled, notes = 0, ["custom code (trust_remote_code)"]
    if not r.flag("no_bias", True):
        unmodelled = kw["n_layers"] * (d + 2 * kw["d_ff"] + d)
        notes.append("no_bias=false: output and MLP biases are not modelled")
    return kw, unmodelled, notes


def _import_falcon(r: _Reader) -> _Import:
    d = r.integer("hidden_size", "n_embed")
    h = r.integer("num_attention_heads", "n_head")
    new_arch = r.flag("new_decoder_architecture", False)
    parallel = r.flag("parallel_attn", True)
    if new_arch:
        kv = r.integer("num_kv_heads", "n_head_kv", default=h)
    else:
        kv = 1 if r.flag("multi_query", True) else h
    if not parallel:
        n_norms = 2
    else:
        n_norms = r.integer("num_ln_in_parallel_attn", default=2 if new_arch else 1)
    ff = r.integer("ffn_hidden_size", default=4 * d)
    L = r.integer("num_hidden_layers", "n_layer")
    kw = {
        "d_model": d,
        "n_layers": L,
        "n_heads": h,
        "n_kv_heads": kv,
        "d_ff": ff,
        "vocab_size": r.integer("vocab_size"),
        "gated_mlp": False,
        "norm": "layernorm",
        "norms_per_layer": n_norms,
    }
    notes = ["parallel attention and MLP blocks"] if parallel else []
    if r.flag("alibi", False):  # priced as RoPE (see the note on `rope` above)
        notes.append("ALiBi position biases instead of RoPE (priced as a RoPE-sized pass)")
    unmodelled = 0
    if r.flag("bias", False):
        kw["qkv_bias"] = True
        unmodelled = L * (d + ff + d)
        notes.append("bias: output-projection and MLP biases are not modelled")
    return kw, unmodelled, notes


def _import_starcoder2(r: _Reader) -> _Import:
    kw = _llama_core(r)
    kw.update(gated_mlp=False, norm="layernorm")
    unmodelled, notes = 0, []
    if r.flag("use_bias", True):
        kw["qkv_bias"] = True
        unmodelled = kw["n_layers"] * (kw["d_model"] + kw["d_ff"] + kw["d_model"])
        notes.append("use_bias: output-projection and MLP biases are not modelled")
    return kw, unmodelled, notes + _sliding(r, kw)


def _import_bloom(r: _Reader) -> _Import:
    d = r.integer("hidden_size", "n_embed")
    L = r.integer("n_layer", "num_hidden_layers")
    kw = {
        "d_model": d,
        "n_layers": L,
        "n_heads": r.integer("n_head", "num_attention_heads"),
        "d_ff": 4 * d,
        "vocab_size": r.integer("vocab_size"),
        "gated_mlp": False,
        "norm": "layernorm",
        "qkv_bias": True,  # ALiBi: priced as RoPE (the note on `rope`)
    }
    # Per layer: output-projection bias d, fc1 bias 4d, fc2 bias d; plus the embedding LayerNorm.
    unmodelled = L * (d + 4 * d + d) + 2 * d
    notes = [
        "output-projection and MLP biases and the embedding LayerNorm are not modelled",
        "ALiBi position biases instead of RoPE",
    ]
    return kw, unmodelled, notes


def _import_opt(r: _Reader) -> _Import:
    d = r.integer("hidden_size")
    if r.integer("word_embed_proj_dim", default=d) != d:
        raise ConfigError(
            f"{r.where}: word_embed_proj_dim: must equal hidden_size={d} "
            f"(projected embeddings are not representable), got {r.get('word_embed_proj_dim')}"
        )
    if not r.flag("do_layer_norm_before", True):
        raise ConfigError(
            f"{r.where}: do_layer_norm_before: must be true (post-norm OPT-350m is not "
            "representable), got false"
        )
    L, ff = r.integer("num_hidden_layers"), r.integer("ffn_dim")
    bias = r.flag("enable_bias", True)
    kw = {
        "d_model": d,
        "n_layers": L,
        "n_heads": r.integer("num_attention_heads"),
        "d_ff": ff,
        "vocab_size": r.integer("vocab_size"),
        "gated_mlp": False,
        "norm": "layernorm",
        "qkv_bias": bias,  # learned positions: priced as RoPE
    }
    positions = (r.integer("max_position_embeddings") + 2) * d  # OPT offsets positions by 2
    unmodelled = positions + (L * (d + ff + d) if bias else 0)
    notes = ["learned position embeddings instead of RoPE"]
    if bias:
        notes.append("output-projection and MLP biases are not modelled")
    return kw, unmodelled, notes


def _import_gptj(r: _Reader) -> _Import:
    d = r.integer("n_embd", "hidden_size")
    L = r.integer("n_layer", "num_hidden_layers")
    ff = r.integer("n_inner", default=4 * d)
    V = r.integer("vocab_size")
    kw = {
        "d_model": d,
        "n_layers": L,
        "n_heads": r.integer("n_head", "num_attention_heads"),
        "d_ff": ff,
        "vocab_size": V,
        "gated_mlp": False,
        "norm": "layernorm",
        "norms_per_layer": 1,
    }
    notes = [
        "parallel attention and MLP blocks",
        "MLP biases and the LM-head bias are not modelled",
        f"rotary embedding on {r.integer('rotary_dim', default=d)} of each head's dimensions",
    ]
    return kw, L * (ff + d) + V, notes


def _import_phi(r: _Reader) -> _Import:
    kw = _llama_core(r)
    kw.update(gated_mlp=False, norm="layernorm", norms_per_layer=1, qkv_bias=True)
    if r.flag("qk_layernorm", False):
        kw["qk_norm"] = True
    L, d, ff = kw["n_layers"], kw["d_model"], kw["d_ff"]
    notes = [
        "parallel attention and MLP blocks",
        "output-projection, MLP and LM-head biases are not modelled",
    ]
    return kw, L * (d + ff + d) + kw["vocab_size"], notes


def _import_phi3small(r: _Reader) -> _Import:
    d = r.integer("hidden_size")
    L, ff = r.integer("num_hidden_layers"), r.integer("ff_intermediate_size")
    kw = {
        "d_model": d,
        "n_layers": L,
        "n_heads": r.integer("num_attention_heads"),
        "n_kv_heads": r.integer("num_key_value_heads"),
        "d_ff": ff,
        "vocab_size": r.integer("vocab_size"),
        "gated_mlp": True,  # GeGeLU: up_proj yields 2 x ff (gate and linear halves)
        "norm": "layernorm",
        "qkv_bias": True,
    }
    notes = [
        "custom code (trust_remote_code)",
        "output-projection and MLP biases are not modelled",
        "block-sparse attention every other layer is counted as dense",
    ]
    return kw, L * (d + 2 * ff + d), notes


_IMPORTERS = {
    "llama": _import_llama,
    "mistral": _import_mistral,
    "mixtral": _import_mixtral,
    "qwen2": _import_qwen2,
    "qwen2_moe": _import_qwen2_moe,
    "qwen3": _import_qwen3,
    "qwen3_moe": _import_qwen3_moe,
    "gemma": _import_gemma,
    "gemma2": _import_gemma2,
    "gemma3_text": _import_gemma3,
    "gpt_oss": _import_gpt_oss,
    "llama4_text": _import_llama4_text,
    "deepseek_v3": _import_deepseek_v3,
    "qwen3_next": _import_qwen3_next,
    "bamba": _import_bamba,
    "nemotron_h": _import_nemotron_h,
    "jamba": _import_jamba,
    "falcon_h1": _import_falcon_h1,
    "phi3": _import_phi3,
    "aquila": _import_aquila,
    "internlm": _import_internlm,
    "qwen": _import_qwen,
    "falcon": _import_falcon,
    "starcoder2": _import_starcoder2,
    "bloom": _import_bloom,
    "opt": _import_opt,
    "gptj": _import_gptj,
    "phi": _import_phi,
    "phi3small": _import_phi3small,
}


# ---------------------------------------------------------------------- export
# Fields of the attention families (issue 21) at their plain full-attention values.
_PLAIN_ATTENTION: dict[str, Any] = {
    "attention_pattern": "full",
    "ffn_pattern": "ffn",
    "kv_lora_rank": 0,
    "attn_output_gate": False,
    "n_dense_layers": 0,
}


def hf_model_type_for(arch: Architecture) -> str:
    """The model_type `to_hf_config` writes for an architecture (ConfigError when none fits).

    Dense: llama, or qwen2 with q/k/v biases, or qwen3 with q/k norms. MoE: mixtral, or
    qwen2_moe with a gated shared expert (or q/k/v biases), or qwen3_moe with q/k norms.
    """
    a = arch.resolved().to_dict()
    _require_scalar(a)

    def refuse(field: str, rule: str) -> ConfigError:
        return ConfigError(f"{field}: {rule} to export a Hugging Face config, got {a[field]!r}")

    # The exported model types are full-attention GQA models: a field of another attention
    # family would be dropped, and the export would describe another model.
    for field, plain in _PLAIN_ATTENTION.items():
        if a[field] != plain:
            raise refuse(field, f"must be {plain!r} (exported model types have full GQA attention)")
    if not a["rope"]:
        raise refuse("rope", "must be true (every exported model type applies RoPE)")
    if not a["gated_mlp"]:
        raise refuse("gated_mlp", "must be true (every exported model type has a SwiGLU FFN)")
    if a["norm"] != "rmsnorm":
        raise refuse("norm", "must be 'rmsnorm'")
    if a["norms_per_layer"] != 2:
        raise refuse("norms_per_layer", "must be 2 (pre-attention and pre-FFN)")
    if a["qk_norm"] and a["qkv_bias"]:
        raise refuse("qkv_bias", "must be false with qk_norm (Qwen3 biases o_proj as well)")
    moe = a["n_experts"] > 1
    shared = a["shared_expert_d_ff"] > 0 or a["shared_expert_gate"]
    if not moe:
        if shared:
            raise refuse("shared_expert_d_ff", "must be 0 for a dense model")
        return "qwen3" if a["qk_norm"] else "qwen2" if a["qkv_bias"] else "llama"
    if shared or a["qkv_bias"]:
        if a["qk_norm"]:
            raise refuse("qk_norm", "must be false with a shared expert (Qwen2-MoE)")
        if not a["shared_expert_gate"]:
            raise refuse(
                "shared_expert_gate",
                "must be true (Qwen2-MoE, the only exported type with a shared expert, gates it)",
            )
        return "qwen2_moe"
    return "qwen3_moe" if a["qk_norm"] else "mixtral"


def to_hf_config(arch: Architecture) -> dict[str, Any]:
    """A config.json dict for `arch` that transformers loads with the same parameter count.

    Carried: every field except kv_dtype, and weight_dtype only as a torch dtype (fp8/int8/int4/
    nvfp4 weights export as bfloat16: nvfp4 is no torch dtype, and a quantised checkpoint's
    quantization_config is its quantiser's to write). For Mixtral, whose layers are all MoE, d_ff is not carried:
    importing sets it to d_ff_expert.
    """
    errors = check_architecture(arch.to_dict())
    if errors:
        raise ConfigError(f"cannot export an invalid architecture: {errors[0]}")
    model_type = hf_model_type_for(arch)
    a = arch.resolved().to_dict()
    dtype = a["weight_dtype"] if a["weight_dtype"] in _TORCH_DTYPES else "bfloat16"
    cfg: dict[str, Any] = {
        "architectures": [_CAUSAL_LM_CLASS[model_type]],
        "model_type": model_type,
        "hidden_size": a["d_model"],
        "num_hidden_layers": a["n_layers"],
        "num_attention_heads": a["n_heads"],
        "num_key_value_heads": a["n_kv_heads"],
        "head_dim": a["head_dim"],
        "intermediate_size": a["d_ff"],
        "vocab_size": a["vocab_size"],
        "tie_word_embeddings": bool(a["tied_embeddings"]),
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "torch_dtype": dtype,
    }
    if model_type == "mixtral":
        cfg["intermediate_size"] = a["d_ff_expert"]
        cfg["num_local_experts"] = a["n_experts"]
        cfg["num_experts_per_tok"] = a["top_k"]
    elif model_type in ("qwen2_moe", "qwen3_moe"):
        cfg["num_experts"] = a["n_experts"]
        cfg["num_experts_per_tok"] = a["top_k"]
        cfg["moe_intermediate_size"] = a["d_ff_expert"]
        cfg["decoder_sparse_step"] = 1
        cfg["mlp_only_layers"] = []
        if model_type == "qwen2_moe":
            cfg["shared_expert_intermediate_size"] = a["shared_expert_d_ff"]
            cfg["qkv_bias"] = bool(a["qkv_bias"])
    if model_type in ("qwen3", "qwen3_moe"):
        cfg["attention_bias"] = False
    return cfg


def _require_scalar(a: Mapping[str, Any]) -> None:
    for k, v in a.items():
        if hasattr(v, "shape") and getattr(v, "ndim", 0) > 0:
            raise ConfigError(f"{k}: must be a single value to export, got an array")
