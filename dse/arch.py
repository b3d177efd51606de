"""Decoder-only transformer architectures: parameter, FLOP, byte and memory accounting.

Every function here works on a scalar `Architecture` and, unchanged, on a batch whose fields are
numpy arrays (`Architecture.from_columns`): the arithmetic broadcasts, so the sweep's hot path
evaluates thousands of configurations in one call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from dse.errors import ConfigError

# Bytes per element of each storage dtype. fp8 halves bf16's 16 bits.
DTYPE_BYTES: dict[str, float] = {
    "float32": 4.0,
    "bfloat16": 2.0,
    "float16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
}
NORMS = ("rmsnorm", "layernorm")


def dtype_bytes(dtype: Any) -> Any:
    """Bytes per element for a dtype name, or an array of names (vectorised)."""
    if isinstance(dtype, str):
        if dtype not in DTYPE_BYTES:
            raise ConfigError(
                f"unknown dtype {dtype!r}; valid dtypes: {', '.join(DTYPE_BYTES)}"
            )
        return DTYPE_BYTES[dtype]
    arr = np.asarray(dtype)
    uniq = np.unique(arr)
    bad = [u for u in uniq if u not in DTYPE_BYTES]
    if bad:
        raise ConfigError(f"unknown dtype {bad[0]!r}; valid dtypes: {', '.join(DTYPE_BYTES)}")
    out = np.empty(arr.shape, dtype=float)
    for u in uniq:
        out[arr == u] = DTYPE_BYTES[str(u)]
    return out


@dataclass(frozen=True)
class Architecture:
    """A decoder-only transformer (Llama / Mistral / Mixtral / Qwen2 family).

    Defaults follow Llama: SwiGLU FFN, RMSNorm, no biases, untied embeddings, bf16 weights and
    KV cache. `n_experts == 1` is a dense model; `n_experts > 1` makes every layer's FFN a
    mixture of `n_experts` experts of width `d_ff_expert`, `top_k` of them active per token.
    """

    d_model: Any
    n_layers: Any
    n_heads: Any
    d_ff: Any
    n_kv_heads: Any = None  # None: equal to n_heads (MHA); 1 is MQA
    head_dim: Any = None  # None: d_model // n_heads
    gated_mlp: Any = True  # SwiGLU (gate, up, down) vs plain two-matrix MLP
    vocab_size: Any = 32000
    tied_embeddings: Any = False
    n_experts: Any = 1
    top_k: Any = 1
    d_ff_expert: Any = None  # None: d_ff
    shared_expert_d_ff: Any = 0  # Qwen-MoE style always-on expert (0: none)
    shared_expert_gate: Any = False  # Qwen-MoE's sigmoid gate on the shared expert (d_model params)
    qkv_bias: Any = False  # Qwen2 has biases on q, k and v
    norm: Any = "rmsnorm"
    weight_dtype: Any = "bfloat16"
    kv_dtype: Any = "bfloat16"

    # ------------------------------------------------------------------ construction
    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Architecture:
        """Build from a flat mapping (YAML entry, CSV row); unknown keys are an error."""
        names = set(cls.field_names())
        unknown = [k for k in data if k not in names]
        if unknown:
            raise ConfigError(
                f"unknown architecture field {unknown[0]!r}; valid fields: {', '.join(sorted(names))}"
            )
        return cls(**{k: v for k, v in data.items() if v is not None}).resolved()

    @classmethod
    def from_columns(cls, cols: Mapping[str, Any], n: int | None = None) -> Architecture:
        """A batch: each field an array of length n (scalars broadcast). No validation."""
        names = cls.field_names()
        kw: dict[str, Any] = {}
        for name in names:
            if name in cols and cols[name] is not None:
                v = np.asarray(cols[name])
                if n is not None and v.ndim == 0:
                    v = np.full(n, v.item())
                kw[name] = v
        return cls(**kw).resolved()

    def resolved(self) -> Architecture:
        """Fill the defaults that depend on other fields (kv heads, head_dim, expert width)."""
        kv = self.n_heads if _is_none(self.n_kv_heads) else self.n_kv_heads
        hd = self.head_dim
        if _is_none(hd):
            hd = np.asarray(self.d_model) // np.maximum(np.asarray(self.n_heads), 1)
            hd = hd.item() if np.ndim(hd) == 0 else hd
        dffe = self.d_ff if _is_none(self.d_ff_expert) else self.d_ff_expert
        return replace(self, n_kv_heads=kv, head_dim=hd, d_ff_expert=dffe)

    def to_dict(self) -> dict[str, Any]:
        """Plain Python values (scalar architectures only)."""
        out = {}
        for name in self.field_names():
            v = getattr(self, name)
            out[name] = v.item() if isinstance(v, np.generic | np.ndarray) and np.ndim(v) == 0 else v
        return out

    def validate(self, tensor_parallel: int = 1) -> Architecture:
        """Raise ConfigError naming the rule and the values if this architecture is impossible."""
        errors = check_architecture(self.to_dict(), tensor_parallel)
        if errors:
            raise ConfigError(errors[0])
        return self

    @property
    def is_moe(self) -> Any:
        return np.asarray(self.n_experts) > 1


def _is_none(v: Any) -> bool:
    return v is None


# ---------------------------------------------------------------------- validity rules
def check_architecture(a: Mapping[str, Any], tensor_parallel: int = 1) -> list[str]:
    """Every rule broken by one scalar architecture, as messages '<field>: <rule>, got <value>'."""
    errs: list[str] = []
    d = dict(a)
    for name in ("d_model", "n_layers", "n_heads", "d_ff", "vocab_size", "n_experts", "top_k"):
        v = d.get(name)
        if v is None or not _is_int(v) or v < 1:
            errs.append(f"{name}: must be an integer >= 1, got {v!r}")
    if errs:
        return errs
    kv = d.get("n_kv_heads") or d["n_heads"]
    if not _is_int(kv) or kv < 1:
        errs.append(f"n_kv_heads: must be an integer >= 1, got {kv!r}")
    elif d["n_heads"] % kv:
        errs.append(f"n_kv_heads: must divide n_heads={d['n_heads']}, got {kv}")
    hd = d.get("head_dim")
    if hd is None:
        if d["d_model"] % d["n_heads"]:
            errs.append(
                f"n_heads: must divide d_model={d['d_model']} (or set head_dim), got {d['n_heads']}"
            )
        else:
            hd = d["d_model"] // d["n_heads"]
    if hd is not None and (not _is_int(hd) or hd < 8 or hd % 2):
        errs.append(f"head_dim: must be an even integer >= 8 (RoPE rotates pairs), got {hd!r}")
    if d["top_k"] > d["n_experts"]:
        errs.append(f"top_k: must be <= n_experts={d['n_experts']}, got {d['top_k']}")
    dffe = d.get("d_ff_expert") or d["d_ff"]
    if not _is_int(dffe) or dffe < 1:
        errs.append(f"d_ff_expert: must be an integer >= 1, got {dffe!r}")
    sff = d.get("shared_expert_d_ff", 0) or 0
    if not _is_int(sff) or sff < 0:
        errs.append(f"shared_expert_d_ff: must be an integer >= 0, got {sff!r}")
    for name in ("weight_dtype", "kv_dtype"):
        v = d.get(name, "bfloat16")
        if v not in DTYPE_BYTES:
            errs.append(f"{name}: must be one of {', '.join(DTYPE_BYTES)}, got {v!r}")
    if d.get("norm", "rmsnorm") not in NORMS:
        errs.append(f"norm: must be one of {', '.join(NORMS)}, got {d.get('norm')!r}")
    tp = tensor_parallel
    if tp > 1:
        if d["n_heads"] % tp:
            errs.append(f"n_heads: must be divisible by tensor_parallel={tp}, got {d['n_heads']}")
        if _is_int(kv) and kv % tp and tp % kv:
            # vLLM replicates KV heads when there are fewer than GPUs, so either direction works.
            errs.append(
                f"n_kv_heads: must divide or be divisible by tensor_parallel={tp}, got {kv}"
            )
        if d["n_experts"] == 1 and d["d_ff"] % tp:
            errs.append(f"d_ff: must be divisible by tensor_parallel={tp}, got {d['d_ff']}")
        if d["n_experts"] > 1 and _is_int(dffe) and dffe % tp:
            errs.append(f"d_ff_expert: must be divisible by tensor_parallel={tp}, got {dffe}")
    return errs


def check_columns(
    cols: Mapping[str, Any],
    n: int,
    tensor_parallel: Any = 1,
    head_dim_defaulted: Any = None,
) -> np.ndarray:
    """Vectorised validity: an array of n messages, '' where the configuration is valid.

    `head_dim_defaulted` marks rows whose head_dim was derived as d_model // n_heads: there
    n_heads must divide d_model.
    """
    c = {k: np.broadcast_to(np.asarray(v), (n,)) for k, v in cols.items() if v is not None}
    tp = np.broadcast_to(np.asarray(tensor_parallel), (n,)).astype(np.int64)
    msg = np.full(n, "", dtype=object)

    def flag(mask: np.ndarray, text: Any) -> None:
        idx = np.nonzero(mask & (msg == ""))[0]
        for i in idx:
            msg[i] = text(i) if callable(text) else text

    def col(name: str, default: Any) -> np.ndarray:
        return c[name] if name in c else np.full(n, default)

    d, h, ff = col("d_model", 0), col("n_heads", 0), col("d_ff", 0)
    kv = col("n_kv_heads", 0)
    kv = np.where(kv > 0, kv, h)
    e, k = col("n_experts", 1), col("top_k", 1)
    hd_given = "head_dim" in c
    for name, v in (("d_model", d), ("n_layers", col("n_layers", 0)), ("n_heads", h), ("d_ff", ff)):
        flag(v < 1, lambda i, name=name, v=v: f"{name}: must be an integer >= 1, got {v[i]}")
    flag(kv < 1, lambda i: f"n_kv_heads: must be an integer >= 1, got {kv[i]}")
    safe_kv = np.maximum(kv, 1)
    flag(h % safe_kv != 0, lambda i: f"n_kv_heads: must divide n_heads={h[i]}, got {kv[i]}")
    safe_h = np.maximum(h, 1)
    if not hd_given:
        defaulted = np.ones(n, dtype=bool)
        hd = d // safe_h
    else:
        hd = c["head_dim"]
        defaulted = (
            np.zeros(n, dtype=bool)
            if head_dim_defaulted is None
            else np.broadcast_to(np.asarray(head_dim_defaulted, dtype=bool), (n,))
        )
    flag(
        defaulted & (d % safe_h != 0),
        lambda i: f"n_heads: must divide d_model={d[i]} (or set head_dim), got {h[i]}",
    )
    flag((hd < 8) | (hd % 2 != 0), lambda i: f"head_dim: must be an even integer >= 8, got {hd[i]}")
    flag(k > e, lambda i: f"top_k: must be <= n_experts={e[i]}, got {k[i]}")
    flag(h % tp != 0, lambda i: f"n_heads: must be divisible by tensor_parallel={tp[i]}, got {h[i]}")
    flag(
        (safe_kv % tp != 0) & (tp % safe_kv != 0),
        lambda i: f"n_kv_heads: must divide or be divisible by tensor_parallel={tp[i]}, got {kv[i]}",
    )
    dffe = col("d_ff_expert", 0)
    dffe = np.where(dffe > 0, dffe, ff)
    width = np.where(e > 1, dffe, ff)
    flag(width % tp != 0, lambda i: f"d_ff: must be divisible by tensor_parallel={tp[i]}, got {width[i]}")
    return msg


def _is_int(v: Any) -> bool:
    return isinstance(v, int | np.integer) and not isinstance(v, bool)


# ---------------------------------------------------------------------- parameter counts
def param_breakdown(a: Architecture) -> dict[str, Any]:
    """Itemised parameter count (nanoGPT style); `total` and `active` are sums of the items.

    Keys: embedding, lm_head, final_norm, and per-model totals over layers of attention/qkv,
    attention/out, norms, mlp/* (dense) or moe/router, moe/experts, moe/shared (MoE).
    `active/*` items count only the experts a token uses (top_k of n_experts).
    """
    a = a.resolved()
    d, L, h = np.asarray(a.d_model), np.asarray(a.n_layers), np.asarray(a.n_heads)
    kv, hd, V = np.asarray(a.n_kv_heads), np.asarray(a.head_dim), np.asarray(a.vocab_size)
    e, k = np.asarray(a.n_experts), np.asarray(a.top_k)
    moe = e > 1
    n_mats = np.where(np.asarray(a.gated_mlp), 3, 2)  # SwiGLU: gate, up, down
    norm_w = np.where(np.asarray(a.norm) == "layernorm", 2, 1) * d  # weight (+ bias)

    qkv = d * (h + 2 * kv) * hd + np.where(np.asarray(a.qkv_bias), (h + 2 * kv) * hd, 0)
    out = h * hd * d
    dense_ffn = n_mats * d * np.asarray(a.d_ff)
    expert = n_mats * d * np.asarray(a.d_ff_expert)
    sff = np.asarray(a.shared_expert_d_ff)
    shared = np.where(sff > 0, n_mats * d * sff, 0) + np.where(np.asarray(a.shared_expert_gate), d, 0)
    router = d * e

    items = {
        "embedding": V * d,
        "lm_head": np.where(np.asarray(a.tied_embeddings), 0, V * d),
        "final_norm": norm_w,
        "attention/qkv": L * qkv,
        "attention/out": L * out,
        "norms": L * 2 * norm_w,
        "mlp": L * np.where(moe, 0, dense_ffn),
        "moe/router": L * np.where(moe, router, 0),
        "moe/experts": L * np.where(moe, e * expert, 0),
        "moe/shared": L * np.where(moe, shared, 0),
    }
    items = {key: _as_int(v) for key, v in items.items()}
    items["total"] = _as_int(sum(items.values()))
    items["active/moe/experts"] = _as_int(L * np.where(moe, k * expert, 0))
    items["active"] = _as_int(items["total"] - items["moe/experts"] + items["active/moe/experts"])
    return items


def _as_int(v: Any) -> Any:
    arr = np.asarray(v, dtype=np.int64)
    return int(arr) if arr.ndim == 0 else arr


def total_params(a: Architecture) -> Any:
    """Every stored parameter (all experts)."""
    return param_breakdown(a)["total"]


def active_params(a: Architecture) -> Any:
    """Parameters one token touches: all but the (n_experts - top_k) unused experts per layer."""
    return param_breakdown(a)["active"]


def matmul_params_per_token(a: Architecture) -> Any:
    """Active parameters that take part in a matrix multiply for one token.

    The embedding lookup is a gather (no FLOPs) and norm weights are elementwise, so both are
    excluded; a tied LM head multiplies by the embedding matrix, so it is counted once.
    """
    p = param_breakdown(a)
    V, d = np.asarray(a.vocab_size), np.asarray(a.d_model)
    lm = V * d  # the LM head multiply happens whether or not it is tied
    return _as_int(p["active"] - p["embedding"] - p["lm_head"] + lm - p["final_norm"] - p["norms"])


# ---------------------------------------------------------------------- FLOPs and bytes
def attention_flops_per_token(a: Architecture, context_len: Any) -> Any:
    """Score and weighted-sum FLOPs for one query token over `context_len` keys, whole model.

    QK^T and PV each cost 2 * head_dim FLOPs per (head, key): 4 * n_layers * n_heads * head_dim
    * context_len.
    """
    a = a.resolved()
    return 4 * np.asarray(a.n_layers) * np.asarray(a.n_heads) * np.asarray(a.head_dim) * np.asarray(
        context_len
    )


def forward_flops_per_token(a: Architecture, context_len: Any) -> Any:
    """Forward FLOPs for one token that attends to `context_len` keys: 2 x matmul params + attention."""
    return 2 * matmul_params_per_token(a) + attention_flops_per_token(a, context_len)


def prefill_flops(a: Architecture, prompt_tokens: Any, batch_size: Any = 1) -> Any:
    """Whole-prompt forward FLOPs under causal attention (token i sees i keys, i = 1..S).

    Sum over i of the attention term is 4 L H hd S(S+1)/2. Logits are computed for every prompt
    token here (training-style); the layer operator list of `dse.ops` computes them for the last
    token only, as serving engines do.
    """
    s = np.asarray(prompt_tokens)
    a = a.resolved()
    attn = 4 * np.asarray(a.n_layers) * np.asarray(a.n_heads) * np.asarray(a.head_dim) * s * (s + 1) / 2
    return np.asarray(batch_size) * (2 * matmul_params_per_token(a) * s + attn)


def kv_bytes_per_token(a: Architecture) -> Any:
    """KV-cache bytes one token adds, whole model: K and V, n_kv_heads x head_dim each, per layer."""
    a = a.resolved()
    return (
        2
        * np.asarray(a.n_layers)
        * np.asarray(a.n_kv_heads)
        * np.asarray(a.head_dim)
        * dtype_bytes(a.kv_dtype)
    )


def weight_bytes(a: Architecture) -> Any:
    """Bytes of all stored weights."""
    return total_params(a) * dtype_bytes(a.weight_dtype)


# Memory held back on every GPU besides weights, KV cache and activations: CUDA context, the
# engine's workspace and the NCCL buffers (aiconfigurator budgets 0.5-3.5 GB; 2 GiB is midway).
RESERVED_BYTES = 2 * 1024**3
# vLLM's default gpu_memory_utilization: the engine plans to use 90% of the device.
USABLE_FRACTION = 0.9


def memory_breakdown(
    a: Architecture,
    batch_size: Any,
    prompt_tokens: Any,
    output_tokens: Any,
    tensor_parallel: Any = 1,
) -> dict[str, Any]:
    """Bytes needed per GPU at a workload: weights, KV cache at full length, peak activations."""
    a = a.resolved()
    tp = np.asarray(tensor_parallel)
    w = weight_bytes(a) / tp
    kv = np.asarray(batch_size) * (np.asarray(prompt_tokens) + np.asarray(output_tokens)) * (
        kv_bytes_per_token(a) / tp
    )
    # Peak activation during prefill: the largest live tensors of one layer for all prompt tokens
    # (residual stream, QKV, the FFN's gate+up output) in 16-bit, plus the last tokens' logits.
    tokens = np.asarray(batch_size) * np.asarray(prompt_tokens)
    d = np.asarray(a.d_model)
    width = np.where(a.is_moe, np.asarray(a.top_k) * np.asarray(a.d_ff_expert), np.asarray(a.d_ff))
    qkv_w = (np.asarray(a.n_heads) + 2 * np.asarray(a.n_kv_heads)) * np.asarray(a.head_dim)
    act = 2.0 * tokens * (2 * d + (qkv_w + 2 * width) / tp) + 4.0 * np.asarray(
        batch_size
    ) * np.asarray(a.vocab_size) / tp
    total = w + kv + act + RESERVED_BYTES
    return {
        "weights": w,
        "kv_cache": kv,
        "activations": act,
        "reserved": np.full(np.shape(total), float(RESERVED_BYTES)) if np.ndim(total) else float(RESERVED_BYTES),
        "total": total,
    }


def fits_memory(mem_total_bytes: Any, capacity_bytes: Any) -> Any:
    """True where the per-GPU need fits in the usable part of the GPU's memory."""
    return np.asarray(mem_total_bytes) <= USABLE_FRACTION * np.asarray(capacity_bytes)
