"""Decoder-only transformer architectures: parameter, FLOP, byte and memory accounting.

Every function here works on a scalar `Architecture` and, unchanged, on a batch whose fields are
numpy arrays (`Architecture.from_columns`): the arithmetic broadcasts, so the sweep's hot path
evaluates thousands of configurations in one call. Conventions (what counts as active, the FLOP
convention, the memory model, tensor-parallel rules) are written up in docs/architecture.md.

One file (~850 lines) on purpose: parameters, FLOPs, bytes and the memory rule are one
accounting over one `Architecture`, whose terms (KV heads per GPU, MLA and linear dimensions,
the layer pattern) each count uses; the validity rules are `dse.spec.rules`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from dse._same import all_equal, any_true, equals, filled
from dse.errors import ConfigError
from dse.spec import pattern as P
from dse.spec.choices import DTYPE_BYTES, FP4_WEIGHT_DTYPES


def dtype_bytes(dtype: Any) -> Any:
    """Bytes per element for a dtype name, or an array of names (vectorised)."""
    if isinstance(dtype, str):
        if dtype not in DTYPE_BYTES:
            raise ConfigError(f"unknown dtype {dtype!r}; valid dtypes: {', '.join(DTYPE_BYTES)}")
        return DTYPE_BYTES[dtype]
    arr = np.asarray(dtype)
    if arr.size and arr.dtype.kind in "US":
        # Fast path: one dtype for the whole batch (sorting 10^5 strings for np.unique is slow).
        first = arr.flat[0]
        if (arr.size == 1 or all_equal(arr)) and str(first) in DTYPE_BYTES:
            return filled(arr.shape, DTYPE_BYTES[str(first)])
    uniq = np.unique(arr)
    bad = [u for u in uniq if u not in DTYPE_BYTES]
    if bad:
        raise ConfigError(f"unknown dtype {bad[0]!r}; valid dtypes: {', '.join(DTYPE_BYTES)}")
    out = np.empty(arr.shape, dtype=float)
    for u in uniq:
        out[arr == u] = DTYPE_BYTES[str(u)]
    return out


def fp4_weights(weight_dtype: Any) -> np.ndarray:
    """Per entry, whether the weight dtype runs on FP4 tensor cores only (nvfp4), vectorised; a
    comparison per FP4 dtype (fast on fixed-width and object columns alike, unlike np.isin of
    an object column's text)."""
    wd = np.asarray(weight_dtype)
    hit = np.zeros(wd.shape, dtype=bool)
    for d in FP4_WEIGHT_DTYPES:
        hit |= equals(wd, d)  # one comparison for a column of one dtype (a sweep's)
    return hit


# Fields that hold true / false (never coerced to int when read back as floats).
BOOL_FIELDS = (
    "gated_mlp",
    "tied_embeddings",
    "shared_expert_gate",
    "qkv_bias",
    "qk_norm",
    "attn_output_gate",
    "linear_norm",
    "rope",
)


@dataclass(frozen=True)
class Architecture:
    """A decoder-only transformer (Llama / Mistral / Mixtral / Qwen / Gemma family).

    Defaults follow Llama: SwiGLU FFN, RMSNorm, no biases, untied embeddings, bf16 weights and
    KV cache. `n_experts == 1` is a dense model; `n_experts > 1` makes every layer's FFN a
    mixture of `n_experts` experts of width `d_ff_expert`, `top_k` of them active per token
    (`d_ff` is then only the default of `d_ff_expert`).
    """

    d_model: Any
    n_layers: Any
    n_heads: Any
    d_ff: Any
    n_kv_heads: Any = None  # None (or 0): equal to n_heads (MHA); 1 is MQA
    head_dim: Any = None  # None: d_model // n_heads (Mistral-Nemo and Gemma set it explicitly)
    gated_mlp: Any = True  # SwiGLU / GeGLU (gate, up, down) vs plain two-matrix MLP
    vocab_size: Any = 32000
    tied_embeddings: Any = False
    n_experts: Any = 1
    top_k: Any = 1
    d_ff_expert: Any = None  # None (or 0): d_ff
    shared_expert_d_ff: Any = 0  # Qwen-MoE style always-on expert (0: none)
    shared_expert_gate: Any = False  # Qwen-MoE's sigmoid gate on the shared expert (d_model params)
    qkv_bias: Any = False  # Qwen2 has biases on q, k and v (not on the output projection)
    norm: Any = "rmsnorm"
    weight_dtype: Any = "bfloat16"
    kv_dtype: Any = "bfloat16"
    # Norms of d_model per layer: 2 pre-norm (Llama), 1 parallel block (Falcon-7B, GPT-J),
    # 4 sandwich (Gemma-2: extra norms after attention and after the FFN).
    norms_per_layer: Any = 2
    qk_norm: Any = (
        False  # per-head norm of q and k (Qwen3, Gemma-3): 2 x head_dim weights per layer
    )
    # ---- attention beyond GQA (issue 21, docs/architecture.md "Attention families"). Defaults:
    # every layer full GQA attention, so an architecture that sets none of these is unchanged.
    # Layer kinds repeated over the layers (`dse.spec.pattern`): full | sliding | linear.
    attention_pattern: Any = "full"
    sliding_window: Any = 0  # tokens a sliding layer attends to (and caches); 0: none
    attn_output_gate: Any = False  # Qwen3-Next: q_proj also yields a sigmoid gate per head dim
    # MLA (DeepSeek-V2/V3, Kimi K2): K and V are projected up from a cached latent of
    # kv_lora_rank, plus one shared RoPE key of qk_rope_head_dim; 0: no MLA.
    kv_lora_rank: Any = 0
    q_lora_rank: Any = 0  # queries through a latent of this rank (0: projected directly)
    qk_rope_head_dim: Any = 0
    qk_nope_head_dim: Any = 0  # 0: head_dim - qk_rope_head_dim
    v_head_dim: Any = 0  # 0: head_dim
    # Linear-attention / SSM layers (pattern kind "linear"): value heads x head dim, and key
    # heads (Gated DeltaNet) or B/C groups (Mamba-2) x state dim; the recurrent state of one
    # head is state_dim x head_dim. 0: n_heads, head_dim, linear_n_heads, linear_head_dim.
    linear_kind: Any = "gated_deltanet"
    linear_n_heads: Any = 0
    linear_head_dim: Any = 0
    linear_n_groups: Any = 0
    linear_state_dim: Any = 0
    linear_conv_width: Any = 4  # causal depthwise conv before the mixer (tokens)
    # MoE models whose first layers keep a dense FFN of d_ff (DeepSeek's first_k_dense_replace).
    n_dense_layers: Any = 0
    # ---- hybrids (docs/architecture.md "Attention families"). The FFN of each layer, repeated
    # over the layers like attention_pattern (`dse.spec.pattern`): ffn (the model's: experts
    # when n_experts > 1, else dense) | dense (d_ff, also in an MoE model: Jamba) | none (the
    # layer is its mixer: Nemotron-H). Default: every layer the model's FFN.
    ffn_pattern: Any = "ffn"
    # The linear layers' norms: the gated RMSNorm of Gated DeltaNet / Mamba-2, Jamba's RMSNorms
    # of Mamba-1's dt, B and C; false: none (Falcon-H1's mamba_rms_norm=false, plain Mamba-1).
    linear_norm: Any = True
    # RoPE on the q and k of the GQA attention layers (full and sliding); false: no position
    # encoding there (NoPE: Nemotron-H, Jamba; ALiBi, learned positions). MLA's decoupled RoPE
    # part is qk_rope_head_dim. No parameters: only the pricing's `attention/rope` follows it.
    rope: Any = True

    # ------------------------------------------------------------------ construction
    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Architecture:
        """Build from a flat mapping (YAML entry, CSV row); unknown keys are an error.

        Integral floats (4096.0, as YAML writes 4.096e3) become ints.
        """
        names = set(cls.field_names())
        unknown = [k for k in data if k not in names]
        if unknown:
            raise ConfigError(
                f"unknown architecture field {unknown[0]!r}; valid fields: {', '.join(sorted(names))}"
            )
        kw = {}
        for k, v in data.items():
            if v is None:
                continue
            if k in P.KINDS_OF and not isinstance(v, str):
                # a YAML list -> its text; a bad one is reported as given
                v = P.canonical(v, P.KINDS_OF[k]) or v
            if isinstance(v, float) and k not in BOOL_FIELDS and v.is_integer():
                v = int(v)
            kw[k] = v
        return cls(**kw).resolved()

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
        """Fill the defaults that depend on other fields (kv heads, head_dim, expert width).

        None and 0 both mean "default" for n_kv_heads and d_ff_expert, as in the validity rules.
        """
        if self.__dict__.get("_resolved"):  # already resolved (the accounting calls it often)
            return self
        kv = _default_where_zero(self.n_kv_heads, self.n_heads)
        hd = self.head_dim
        if _is_none(hd):
            d, h = np.asarray(self.d_model), np.maximum(np.asarray(self.n_heads), 1)
            hd = d // h
            if np.ndim(hd) == 0:
                # A scalar whose n_heads does not divide d_model keeps head_dim unset, so that
                # validate() reports the rule instead of silently flooring d_model / n_heads.
                hd = None if int(d) % int(h) else hd.item()
        dffe = _default_where_zero(self.d_ff_expert, self.d_ff)
        # dataclasses.replace without its per-field __init__ (~50 fields, a one-configuration
        # call resolves once): the fields copied, three changed, nothing derived kept
        out = object.__new__(Architecture)
        out.__dict__.update(
            {k: v for k, v in self.__dict__.items() if k not in ("_memo", "_resolved")},
            n_kv_heads=kv,
            head_dim=hd,
            d_ff_expert=dffe,
        )
        if hd is not None:  # a head_dim left unset stays to be resolved (and reported) again
            object.__setattr__(out, "_resolved", True)
        return out

    def to_dict(self) -> dict[str, Any]:
        """Plain Python values (scalar architectures only)."""
        out = {}
        for name in self.field_names():
            v = getattr(self, name)
            out[name] = (
                v.item() if isinstance(v, np.generic | np.ndarray) and np.ndim(v) == 0 else v
            )
        return out

    @property
    def is_moe(self) -> Any:
        return np.asarray(self.n_experts) > 1


def _is_none(v: Any) -> bool:
    return v is None


def _default_where_zero(v: Any, default: Any) -> Any:
    """`default` where v is None or 0 (scalar or element-wise)."""
    if v is None:
        return default
    if np.ndim(v) == 0 and np.ndim(default) == 0:
        return default if v == 0 else v
    return np.where(np.asarray(v) == 0, np.asarray(default), np.asarray(v))


# ---------------------------------------------------------------------- parameter counts
def _memo(a: Architecture, key: str, make: Callable[[], Any]) -> Any:
    """make(), kept on a resolved architecture (frozen: its fields cannot change), so that the
    accounting functions that each need it derive it once per architecture."""
    if not a.__dict__.get("_resolved"):
        return make()
    memo = a.__dict__.setdefault("_memo", {})
    if key not in memo:
        memo[key] = make()
    return memo[key]


def layer_kinds(a: Architecture) -> tuple[Any, Any, Any]:
    """(full, sliding, linear) mixer counts of the pattern (`dse.spec.pattern`); a parallel
    full+linear layer counts in two of them, a `none` layer in none."""
    return _memo(a, "layer_kinds", lambda: P.layer_counts(a.attention_pattern, a.n_layers))


def mixer_layers(a: Architecture) -> Any:
    """Layers with a mixer: n_layers but the attention_pattern's `none` layers."""
    return P.mixer_layers(a.attention_pattern, a.n_layers)


def ffn_layers(a: Architecture) -> tuple[Any, Any]:
    """(dense-FFN layers, MoE layers). The ffn_pattern's `ffn` layers have the model's FFN (MoE
    when n_experts > 1, the first n_dense_layers of them dense), its `dense` layers a dense FFN
    of d_ff, its `none` layers none. A model of the default pattern: (n_layers, 0) dense,
    (n_dense_layers, n_layers - n_dense_layers) MoE."""
    # kept on a resolved architecture (`_memo`): the parameter and memory accounting of one
    # batch ask it three times
    return _memo(a, "ffn_layers", lambda: _ffn_layers(a))


def _ffn_layers(a: Architecture) -> tuple[Any, Any]:
    f, dense = P.ffn_counts(a.ffn_pattern, a.n_layers)
    moe = np.asarray(a.n_experts) > 1
    nd = np.minimum(np.where(moe, np.asarray(a.n_dense_layers), 0), f)
    return dense + np.where(moe, nd, f), np.where(moe, f - nd, 0)


# Mamba-1's dt is projected through a rank of ceil(d_model / MAMBA1_DT_RANK_DIVISOR) (mamba_ssm
# and transformers' dt_rank="auto"; Jamba's configs use it).
MAMBA1_DT_RANK_DIVISOR = 16


def mamba1_dt_rank(a: Architecture) -> Any:
    """The rank of Mamba-1's dt projection: ceil(d_model / 16)."""
    return -(-np.asarray(a.d_model) // MAMBA1_DT_RANK_DIVISOR)


def mla_dims(a: Architecture) -> tuple[Any, Any, Any, Any]:
    """(is MLA, qk_nope_head_dim, qk_rope_head_dim, v_head_dim), the defaults resolved:
    nope = head_dim - rope, v = head_dim. For a GQA model (no MLA) nope = head_dim, rope = 0,
    v = head_dim: the same query/key and value widths as its heads."""
    a = a.resolved()
    return _memo(a, "mla_dims", lambda: _mla_dims(a))


def _mla_dims(a: Architecture) -> tuple[Any, Any, Any, Any]:
    hd = np.asarray(a.head_dim)
    mla = np.asarray(a.kv_lora_rank) > 0
    rope = np.where(mla, np.asarray(a.qk_rope_head_dim), 0)
    nope_raw, v_raw = np.asarray(a.qk_nope_head_dim), np.asarray(a.v_head_dim)
    nope = np.where(mla & (nope_raw > 0), nope_raw, hd - rope)
    v = np.where(mla & (v_raw > 0), v_raw, hd)
    return mla, nope, rope, v


def linear_dims(a: Architecture) -> tuple[Any, Any, Any, Any, Any]:
    """(value heads, head dim, key heads / groups, state dim, conv channels) of a linear layer,
    defaults resolved. conv channels = 2 groups x state (keys/queries, or B and C) + the
    values: what the causal conv filters (Gated DeltaNet: q, k, v; Mamba-2: x, B, C; Mamba-1:
    x alone, its B and C come after the conv)."""
    a = a.resolved()
    return _memo(a, "linear_dims", lambda: _linear_dims(a))


def _linear_dims(a: Architecture) -> tuple[Any, Any, Any, Any, Any]:
    nv = _or(a.linear_n_heads, a.n_heads)
    dv = _or(a.linear_head_dim, a.head_dim)
    ng = _or(a.linear_n_groups, nv)
    ds = _or(a.linear_state_dim, dv)
    conv = np.where(equals(a.linear_kind, "mamba1"), 0, 2 * ng * ds) + nv * dv
    return nv, dv, ng, ds, conv


def _or(v: Any, default: Any) -> Any:
    v = np.asarray(v)
    return np.where(v > 0, v, np.asarray(default))


def param_breakdown(a: Architecture) -> dict[str, Any]:
    """Itemised parameter count (nanoGPT style); `total` and `active` are sums of the items.

    Keys: embedding, lm_head, final_norm, and per-model totals over layers of attention/qkv
    (with the q, k, v biases; MLA: the query and KV down/up projections), attention/out,
    attention/qk_norm, attention/latent_norm (MLA's norms of the q and KV latents), norms,
    the linear-attention layers' linear/in_proj, linear/conv, linear/heads (per-head decay,
    step and skip scalars), linear/norm, linear/out, and mlp (dense), or moe/router,
    moe/experts, moe/shared (shared expert and its gate) for MoE (`n_dense_layers` dense).
    `active/moe/experts` counts only the experts a token uses (top_k of n_experts); `active` is
    `total` with that item in place of moe/experts.
    """
    a = a.resolved()
    # kept on the resolved architecture: `dse.spec.columns.derived` and the memory accounting
    # (`params_per_gpu`) both need it (~40 array operations a call on a sweep's chunk)
    return dict(_memo(a, "param_breakdown", lambda: _param_breakdown(a)))


def _param_breakdown(a: Architecture) -> dict[str, Any]:
    """`param_breakdown` of a resolved architecture, computed."""
    d, L, h = np.asarray(a.d_model), np.asarray(a.n_layers), np.asarray(a.n_heads)
    kv, hd, V = np.asarray(a.n_kv_heads), np.asarray(a.head_dim), np.asarray(a.vocab_size)
    e, k = np.asarray(a.n_experts), np.asarray(a.top_k)
    moe = e > 1
    n_mats = np.where(np.asarray(a.gated_mlp), 3, 2)  # SwiGLU: gate, up, down
    norm_factor = np.where(equals(a.norm, "layernorm"), 2, 1)  # weight (+ bias)
    norm_w = norm_factor * d
    Lf, Ls, Ll = layer_kinds(a)
    La = Lf + Ls  # attention layers (full or sliding); L itself when the pattern is "full"
    Ld, Lm = ffn_layers(a)  # dense-FFN and MoE layers (L and 0 for a dense model)

    # q (doubled by Qwen3-Next's output gate), k, v and their biases
    q_w = h * np.where(np.asarray(a.attn_output_gate), 2, 1)
    qkv = d * (q_w + 2 * kv) * hd + np.where(np.asarray(a.qkv_bias), (q_w + 2 * kv) * hd, 0)
    out = h * hd * d
    # MLA: q = [d -> q_lora -> h (nope + rope)] or d -> h (nope + rope); the KV latent and the
    # shared RoPE key d -> kv_lora + rope; K (nope) and V up from the latent kv_lora -> h (nope
    # + v); the output h v -> d.
    mla, nope, rope, vd = mla_dims(a)
    r, qr = np.asarray(a.kv_lora_rank), np.asarray(a.q_lora_rank)
    q_mla = np.where(qr > 0, d * qr + qr * h * (nope + rope), d * h * (nope + rope))
    kv_mla = d * (r + rope) + r * h * (nope + vd)
    qkv = np.where(mla, q_mla + kv_mla, qkv)
    out = np.where(mla, h * vd * d, out)
    latent_norm = np.where(mla, norm_factor * (r + np.where(qr > 0, qr, 0)), 0)
    qk_norm = np.where(np.asarray(a.qk_norm), 2 * norm_factor * hd, 0)  # one norm for q, one for k
    dense_ffn = n_mats * d * np.asarray(a.d_ff)
    expert = n_mats * d * np.asarray(a.d_ff_expert)
    sff = np.asarray(a.shared_expert_d_ff)
    shared = np.where(sff > 0, n_mats * d * sff, 0) + np.where(
        np.asarray(a.shared_expert_gate), d, 0
    )
    router = d * e  # one logit per expert, no bias
    # Linear layers: in_proj makes queries/keys (or C/B), values, the output gate z and the
    # per-head scalars (Gated DeltaNet: beta and the decay a; Mamba-2: dt); the causal conv
    # (Mamba with a bias); per head A_log and dt_bias (+ Mamba-2's skip D); the gated RMSNorm
    # (Gated DeltaNet: one head_dim weight shared by the heads; Mamba-2: the whole width).
    # Mamba-1 (inner = nv x dv channels, each its own head): in_proj d -> x, z; x_proj
    # inner -> dt (rank R), B, C; dt_proj R -> inner (its bias with the heads); per channel
    # A_log (one per state element), D and the dt bias; Jamba's norms of dt, B and C.
    if any_true(np.asarray(Ll)):
        nv, dv, _, ds, conv_ch = linear_dims(a)
        kind = np.asarray(a.linear_kind)
        mamba, mamba1 = kind == "mamba2", kind == "mamba1"
        inner, R = nv * dv, mamba1_dt_rank(a)
        cw = np.asarray(a.linear_conv_width)
        lin_in = np.where(
            mamba1,
            d * 2 * inner + inner * (R + 2 * ds) + R * inner,
            d * (conv_ch + inner + np.where(mamba, 1, 2) * nv),
        )
        lin_conv = conv_ch * cw + np.where(mamba | mamba1, conv_ch, 0)
        lin_heads = np.where(mamba1, inner * (ds + 2), np.where(mamba, 3, 2) * nv)
        lin_norm = np.where(mamba1, R + 2 * ds, np.where(mamba, inner, dv))
        lin_norm = np.where(np.asarray(a.linear_norm), lin_norm, 0)
        lin_out = inner * d
    else:  # no linear layer in the batch: its items are Ll x 0 (the same zeros, fewer calls)
        lin_in = lin_conv = lin_heads = lin_norm = lin_out = 0

    items = {
        "embedding": V * d,
        "lm_head": np.where(np.asarray(a.tied_embeddings), 0, V * d),
        "final_norm": norm_w,
        "attention/qkv": La * qkv,
        "attention/out": La * out,
        "attention/qk_norm": La * qk_norm,
        "attention/latent_norm": La * latent_norm,
        "linear/in_proj": Ll * lin_in,
        "linear/conv": Ll * lin_conv,
        "linear/heads": Ll * lin_heads,
        "linear/norm": Ll * lin_norm,
        "linear/out": Ll * lin_out,
        "norms": L * np.asarray(a.norms_per_layer) * norm_w,
        "mlp": Ld * dense_ffn,
        "moe/router": Lm * np.where(moe, router, 0),
        "moe/experts": Lm * np.where(moe, e * expert, 0),
        "moe/shared": Lm * np.where(moe, shared, 0),
    }
    items = {key: _as_int(v) for key, v in items.items()}
    items["total"] = _as_int(sum(items.values()))
    items["active/moe/experts"] = _as_int(Lm * np.where(moe, k * expert, 0))
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

    The embedding lookup is a gather (no FLOPs), norm weights and biases are elementwise, so all
    are excluded; a tied LM head multiplies by the embedding matrix, so it is counted once. A
    linear layer's depthwise conv weights count (2 FLOPs per weight and token, as a matmul);
    its per-head scalars, norm and conv bias do not.
    """
    a = a.resolved()
    p = param_breakdown(a)
    V, d = np.asarray(a.vocab_size), np.asarray(a.d_model)
    h, kv, hd = (np.asarray(x) for x in (a.n_heads, a.n_kv_heads, a.head_dim))
    Lf, Ls, Ll = layer_kinds(a)
    mla = mla_dims(a)[0]
    lm = V * d  # the LM head multiply happens whether or not it is tied
    q_w = h * np.where(np.asarray(a.attn_output_gate), 2, 1)
    bias = (Lf + Ls) * np.where(np.asarray(a.qkv_bias) & ~mla, (q_w + 2 * kv) * hd, 0)
    kind = np.asarray(a.linear_kind)
    conv_bias = Ll * np.where((kind == "mamba2") | (kind == "mamba1"), linear_dims(a)[4], 0)
    elementwise = (
        p["final_norm"]
        + p["norms"]
        + p["attention/qk_norm"]
        + bias
        + p["attention/latent_norm"]
        + p["linear/heads"]
        + p["linear/norm"]
        + conv_bias
    )
    return _as_int(p["active"] - p["embedding"] - p["lm_head"] + lm - elementwise)


# ---------------------------------------------------------------------- FLOPs and bytes
# A linear-attention / SSM layer's recurrent step costs about this many FLOPs per state element
# (state_dim x head_dim per head) and token: decay and rank-1 update of the state (~4: Gated
# DeltaNet's delta rule reads S^T k, then writes S + beta k (v - S^T k)^T; Mamba-2's
# exp(dt A) h + dt B x^T) and the read-out S^T q / C h (2).
LINEAR_STATE_FLOPS = 6
# Prefill runs the chunked form (flash-linear-attention's chunk_gated_delta_rule, Mamba-2's SSD)
# in chunks of this many tokens: within a chunk each token attends causally to C / 2 tokens on
# average, QK^T and PV at 2 (state_dim + head_dim) FLOPs per key: C (state_dim + head_dim).
LINEAR_CHUNK_TOKENS = 64


def linear_flops_per_token(a: Architecture, prefill: bool = False) -> Any:
    """Mixer FLOPs of ONE linear layer for one token, past the projections and the conv:
    the state step (LINEAR_STATE_FLOPS per state element) and, in chunked prefill, the
    intra-chunk attention (LINEAR_CHUNK_TOKENS (state_dim + head_dim) per head). Mamba-1's
    prefill is a parallel scan of the same steps (selective_scan: no chunks, no attention)."""
    nv, dv, _, ds, _ = linear_dims(a)
    step = LINEAR_STATE_FLOPS * nv * ds * dv
    if not prefill:
        return step
    chunked = ~equals(a.linear_kind, "mamba1")
    return step + np.where(chunked, LINEAR_CHUNK_TOKENS * nv * (ds + dv), 0)


def _per_key_flops(a: Architecture) -> tuple[Any, Any]:
    """(is MLA, QK^T + PV FLOPs per (layer, query, key)) of an MLA model, as FlashAttention
    runs it on the up-projected heads: 2 h (qk_nope + qk_rope) + 2 h v_head_dim."""
    mla, nope, rope, vd = mla_dims(a)
    return mla, 2 * np.asarray(a.n_heads) * (nope + rope + vd)


def attention_flops_per_key(a: Architecture) -> tuple[Any, Any]:
    """(full layers', sliding layers') QK^T + PV FLOPs per (query, key), summed over the
    layers of each kind: 4 n_heads head_dim per layer (MLA: 2 n_heads (qk_nope + qk_rope +
    v_head_dim)). A query at context c costs full x c + sliding x min(c, sliding_window) plus
    the linear layers' state step (`attention_flops_per_token`)."""
    a = a.resolved()
    Lf, Ls, _ = layer_kinds(a)
    h, hd = np.asarray(a.n_heads), np.asarray(a.head_dim)
    mla, per_key = _per_key_flops(a)
    per_layer = np.where(mla, per_key, 4 * h * hd)
    return Lf * per_layer, Ls * per_layer


def attention_flops_per_token(a: Architecture, context_len: Any) -> Any:
    """Score and weighted-sum FLOPs for one query token over `context_len` keys, whole model.

    QK^T and PV each cost 2 * head_dim FLOPs per (head, key): 4 * n_layers * n_heads * head_dim
    * context_len over full layers; a sliding layer sees min(context_len, sliding_window) keys;
    MLA heads are (qk_nope + qk_rope) wide for QK^T and v_head_dim for PV; a linear layer
    costs its state step (`linear_flops_per_token`), whatever the context.
    """
    a = a.resolved()
    Lf, Ls, Ll = layer_kinds(a)
    h, hd = np.asarray(a.n_heads), np.asarray(a.head_dim)
    c = np.asarray(context_len)
    mla, per_key = _per_key_flops(a)
    full = np.where(mla, Lf * per_key * c, 4 * Lf * h * hd * c)
    window = np.minimum(c, np.asarray(a.sliding_window))
    sliding = Ls * np.where(mla, per_key, 4 * h * hd) * window
    return full + sliding + Ll * linear_flops_per_token(a)


def forward_flops_per_token(a: Architecture, context_len: Any) -> Any:
    """Forward FLOPs for one token that attends to `context_len` keys: 2 x matmul params + attention."""
    return 2 * matmul_params_per_token(a) + attention_flops_per_token(a, context_len)


def sliding_keys_sum(s: Any, window: Any) -> Any:
    """sum over i = 1..s of min(i, window): the keys a causal sliding layer scores over a prompt
    of s tokens (s (s + 1) / 2 while s <= window)."""
    s, w = np.asarray(s), np.asarray(window)
    return np.where(s <= w, s * (s + 1) / 2, w * (w + 1) / 2 + (s - w) * w)


def prefill_flops(a: Architecture, prompt_tokens: Any, batch_size: Any = 1) -> Any:
    """Whole-prompt forward FLOPs under causal attention (token i sees i keys, i = 1..S).

    Sum over i of the attention term is 4 L H hd S(S+1)/2 for full layers; a sliding layer's is
    `sliding_keys_sum`; a linear layer costs S chunked-scan steps (`linear_flops_per_token`).
    Logits are computed for every prompt token here (training-style); the layer operator list of
    `dse.predict.ops` computes them for the last token only, as serving engines do.
    """
    s = np.asarray(prompt_tokens)
    a = a.resolved()
    Lf, Ls, Ll = layer_kinds(a)
    h, hd = np.asarray(a.n_heads), np.asarray(a.head_dim)
    mla, per_key = _per_key_flops(a)
    attn = np.where(mla, Lf * per_key * s * (s + 1) / 2, 4 * Lf * h * hd * s * (s + 1) / 2)
    keys = sliding_keys_sum(s, np.asarray(a.sliding_window))
    attn = attn + Ls * np.where(mla, per_key, 4 * h * hd) * keys
    attn = attn + Ll * s * linear_flops_per_token(a, prefill=True)
    return np.asarray(batch_size) * (2 * matmul_params_per_token(a) * s + attn)


def _kv_layer_bytes(a: Architecture, kv_heads: Any) -> Any:
    """KV-cache bytes one token adds to ONE attention layer holding `kv_heads` heads: K and V
    of head_dim each, or MLA's latent + RoPE key (kv_lora_rank + qk_rope_head_dim, shared by
    every head, so never split across GPUs)."""
    mla, _, rope, _ = mla_dims(a)
    kvb = dtype_bytes(a.kv_dtype)
    latent = (np.asarray(a.kv_lora_rank) + rope) * kvb
    return np.where(mla, latent, 2 * np.asarray(kv_heads) * np.asarray(a.head_dim) * kvb)


def kv_bytes_per_token(a: Architecture) -> Any:
    """KV-cache bytes one token adds, whole model, while the context is shorter than any window:
    K and V, n_kv_heads x head_dim each, per attention layer (full and sliding); MLA's latent.
    Linear layers add none (a constant state, `state_bytes`); `kv_cache_bytes` is the cache
    of a sequence, sliding layers capped at their window."""
    a = a.resolved()
    Lf, Ls, _ = layer_kinds(a)
    mla = mla_dims(a)[0]
    gqa = (
        2
        * np.asarray(Lf + Ls)
        * np.asarray(a.n_kv_heads)
        * np.asarray(a.head_dim)
        * dtype_bytes(a.kv_dtype)
    )
    return np.where(mla, (Lf + Ls) * _kv_layer_bytes(a, a.n_kv_heads), gqa)


def weight_bytes(a: Architecture) -> Any:
    """Bytes of all stored weights."""
    return total_params(a) * dtype_bytes(a.weight_dtype)


def kv_heads_per_gpu(a: Architecture, tensor_parallel: Any = 1) -> Any:
    """KV heads each GPU holds: n_kv_heads / tp, or 1 replica when there are fewer heads than GPUs."""
    a = a.resolved()
    return np.maximum(np.asarray(a.n_kv_heads) // np.asarray(tensor_parallel), 1)


def state_bytes(a: Architecture, tensor_parallel: Any = 1) -> Any:
    """Bytes of one sequence's constant state in the linear layers, per GPU: the recurrent state
    (value heads x state_dim x head_dim; Mamba-1: inner channels x state_dim) and the conv's
    last conv_width - 1 inputs (conv channels), both in kv_dtype (vLLM keeps Mamba / Gated DeltaNet caches in the model dtype by
    default), heads split across GPUs like attention heads (a replica when fewer)."""
    a = a.resolved()
    _, _, Ll = layer_kinds(a)
    one_shape = np.ndim(Ll) == 1 and np.shape(tensor_parallel) in ((), np.shape(Ll))
    if one_shape and not any_true(np.asarray(Ll)):
        # no linear layer (a few configurations of most models): Ll x 0 x bytes, the zeros
        # (and dtype, and shape) the products below give, without their ~20 array operations
        return np.asarray(Ll) * 0 * dtype_bytes(a.kv_dtype)
    nv, dv, ng, ds, _ = linear_dims(a)
    tp = np.asarray(tensor_parallel)
    nv_gpu, ng_gpu = np.maximum(nv // tp, 1), np.maximum(ng // tp, 1)
    grouped = ~equals(a.linear_kind, "mamba1")  # Mamba-1 convolves x alone
    conv_gpu = np.where(grouped, 2 * ng_gpu * ds, 0) + nv_gpu * dv
    per_layer = nv_gpu * ds * dv + (np.asarray(a.linear_conv_width) - 1) * conv_gpu
    return Ll * per_layer * dtype_bytes(a.kv_dtype)


def params_per_gpu(a: Architecture, tensor_parallel: Any = 1) -> Any:
    """Parameters one GPU stores under Megatron-style tensor parallelism, as vLLM shards them.

    Split tp ways: embedding and LM head (by vocabulary), q heads, the output projection, FFN and
    expert widths, the shared expert, MLA's q and KV up-projections, the linear layers' heads.
    Replicated: norms, router, shared-expert gate, K/V projections when n_kv_heads < tp (each
    GPU keeps one KV head), MLA's KV down-projection (the latent every head reads) and the
    Gated DeltaNet norm (one head_dim weight). Equals total_params at tp = 1.
    """
    a = a.resolved()
    p = param_breakdown(a)
    tp = np.asarray(tensor_parallel)
    d, h, hd = (np.asarray(x) for x in (a.d_model, a.n_heads, a.head_dim))
    Lf, Ls, _ = layer_kinds(a)
    kv_gpu = kv_heads_per_gpu(a, tp)
    bias = np.where(np.asarray(a.qkv_bias), 1, 0)
    q_w = h * np.where(np.asarray(a.attn_output_gate), 2, 1)
    qkv_gpu = (Lf + Ls) * (d + bias) * (q_w / tp + 2 * kv_gpu) * hd
    # MLA: the KV down-projection d -> kv_lora + rope (and q's d -> q_lora) on every GPU.
    mla, _, rope, _ = mla_dims(a)
    r, qr = np.asarray(a.kv_lora_rank), np.asarray(a.q_lora_rank)
    down = (Lf + Ls) * (d * (r + rope) + np.where(qr > 0, d * qr, 0))
    qkv_gpu = np.where(mla, (p["attention/qkv"] - down) / tp + down, qkv_gpu)
    moe_layers = ffn_layers(a)[1]
    gate = moe_layers * np.where(a.is_moe & np.asarray(a.shared_expert_gate), d, 0)
    mamba = equals(a.linear_kind, "mamba2")
    lin_norm_split = np.where(mamba, p["linear/norm"], 0)
    linear = p["linear/in_proj"] + p["linear/conv"] + p["linear/heads"] + p["linear/out"]
    split = (
        p["embedding"]
        + p["lm_head"]
        + p["attention/out"]
        + p["mlp"]
        + p["moe/experts"]
        + p["moe/shared"]
        - gate
        + linear
        + lin_norm_split
    )
    replicated = (
        p["final_norm"]
        + p["norms"]
        + p["attention/qk_norm"]
        + p["moe/router"]
        + gate
        + p["attention/latent_norm"]
        + (p["linear/norm"] - lin_norm_split)
    )
    return split / tp + qkv_gpu + replicated


# ---------------------------------------------------------------------------- memory rule
# What a serving engine allocates per GPU (docs/architecture.md, "Memory"), as vLLM and
# TensorRT-LLM do it with their defaults:
# - the usable part of the device: vLLM's gpu_memory_utilization defaults to 0.9 of total HBM
#   (vllm/config CacheConfig, v0.4 .. v0.10). TensorRT-LLM gives its KV cache 0.9 of the memory
#   still free after weights and activations (KvCacheConfig.free_gpu_memory_fraction = 0.9),
#   a larger budget: vLLM's 90% of the device is the stricter rule and serves for both.
USABLE_FRACTION = 0.9
# - the KV cache is paged in blocks of this many tokens, allocated as a sequence's tokens arrive
#   (vLLM CacheConfig block_size 16 on CUDA; TensorRT-LLM KvCacheConfig tokens_per_block 32).
KV_BLOCK_TOKENS: dict[str, int] = {"vllm": 16, "trtllm": 32}
# - the largest forward step: vLLM without chunked prefill schedules (and profiles at start-up)
#   up to max_num_batched_tokens = max(max_model_len, 2048) tokens per step (SchedulerConfig);
#   max_model_len is taken as the workload's prompt + output (the least it can be started with).
MIN_STEP_TOKENS = 2048
# ... and up to max_num_seqs = 256 sequences per step, each with fp32 logits.
MAX_STEP_SEQS = 256
# - CUDA graphs of the decode batch sizes, cuBLAS workspace and NCCL buffers: vLLM logs
#   0.2-0.6 GiB for graph capture on 7-70B models; 512 MiB.
RESERVED_BYTES = 512 * 1024**2
# A configuration within this fraction of the usable memory (or whose whole batch does not fit
# at once) gets a warning: another engine version or setting may preempt or refuse it.
MEMORY_WARN_MARGIN = 0.05


def kv_rates_per_gpu(a: Architecture, tensor_parallel: Any = 1) -> tuple[Any, Any]:
    """(bytes per token of the full layers, of the sliding layers) on each GPU."""
    a = a.resolved()
    Lf, Ls, _ = layer_kinds(a)
    heads = kv_heads_per_gpu(a, tensor_parallel)
    mla = mla_dims(a)[0]
    full = 2 * np.asarray(Lf) * heads * np.asarray(a.head_dim) * dtype_bytes(a.kv_dtype)
    one = _kv_layer_bytes(a, heads)
    return np.where(mla, Lf * one, full), Ls * one


def kv_cache_bytes_per_gpu(
    a: Architecture, tokens: Any, tensor_parallel: Any = 1, engine: Any = None
) -> Any:
    """One sequence's KV cache and state on each GPU at `tokens` tokens: full layers hold every
    token, sliding layers at most sliding_window, linear layers their constant `state_bytes`.
    With `engine`, token slots are whole blocks (`kv_tokens_held`), the window's too."""
    a = a.resolved()
    full, sliding = kv_rates_per_gpu(a, tensor_parallel)
    t = np.asarray(tokens)
    in_window = np.minimum(t, np.asarray(a.sliding_window))
    if engine is not None:
        t, in_window = kv_tokens_held(t, engine), kv_tokens_held(in_window, engine)
    return t * full + in_window * sliding + state_bytes(a, tensor_parallel)


def kv_block_tokens(engine: Any = "vllm") -> Any:
    """Tokens per KV-cache block of each engine (vLLM's 16 for an engine not listed)."""
    e = np.asarray(engine)
    if e.ndim == 0:
        return KV_BLOCK_TOKENS.get(str(e), KV_BLOCK_TOKENS["vllm"])
    out = np.full(e.shape, KV_BLOCK_TOKENS["vllm"], dtype=np.int64)
    for name, block in KV_BLOCK_TOKENS.items():
        out[e == name] = block
    return out


def qkv_width_per_gpu(a: Architecture, tensor_parallel: Any = 1) -> Any:
    """Elements per token one attention layer's QKV projection writes on each GPU: this GPU's
    query heads and KV heads (a replica when fewer than GPUs) x head_dim; MLA: its queries and
    up-projected K and V heads, and the latent + RoPE key whole (n_kv_heads plays no part)."""
    a = a.resolved()
    tp = np.asarray(tensor_parallel)
    h = np.asarray(a.n_heads)
    gqa = (h / tp + 2 * kv_heads_per_gpu(a, tp)) * np.asarray(a.head_dim)
    mla, nope, rope, vd = mla_dims(a)
    latent = h / tp * (2 * nope + rope + vd) + np.asarray(a.kv_lora_rank) + rope
    return np.where(mla, latent, gqa)


def kv_tokens_held(tokens: Any, engine: Any = "vllm") -> Any:
    """Token slots a sequence of `tokens` holds: rounded up to whole blocks of the engine."""
    block = kv_block_tokens(engine)
    return -(-np.asarray(tokens) // block) * block


def memory_breakdown(
    a: Architecture,
    batch_size: Any,
    prompt_tokens: Any,
    output_tokens: Any,
    tensor_parallel: Any = 1,
    engine: Any = "vllm",
) -> dict[str, Any]:
    """Bytes per GPU an engine allocates for a workload (see the constants above).

    Keys: weights (this GPU's shard), kv_cache (every sequence of the batch holding its
    prompt + output tokens at once, in whole blocks), kv_cache_one (one such sequence),
    activations (the largest step's peak: one layer's live tensors, not all layers'), reserved
    (CUDA graphs, workspaces), total (weights + kv_cache + activations + reserved: the whole
    batch resident) and required (total with one sequence's KV cache: less than this cannot
    run; between the two the engine runs fewer sequences at a time, preempting or queueing).
    """
    parts = memory_per_sequence(a, prompt_tokens, output_tokens, tensor_parallel, engine)
    return memory_of_batch(parts, batch_size, prompt_tokens, output_tokens, tensor_parallel)


def memory_per_sequence(
    a: Architecture,
    prompt_tokens: Any,
    output_tokens: Any,
    tensor_parallel: Any = 1,
    engine: Any = "vllm",
) -> dict[str, Any]:
    """`memory_breakdown`'s terms that do not depend on the batch size: weights (this GPU's
    shard, bytes), kv_cache_one (one sequence's KV cache, bytes), and the widths of the
    largest step's live tensors (d_model, qkv_width on this GPU, ffn_width, vocab_size)."""
    a = a.resolved()
    tp = np.asarray(tensor_parallel)
    prompt, out = np.asarray(prompt_tokens), np.asarray(output_tokens)
    # Full layers hold every token (in whole blocks), sliding layers their window, linear
    # layers a constant state (`kv_cache_bytes_per_gpu`); for a model of full layers only the
    # two last terms are 0.
    return {
        "weights": params_per_gpu(a, tp) * dtype_bytes(a.weight_dtype),
        "kv_cache_one": kv_cache_bytes_per_gpu(a, prompt + out, tp, engine),
        "d_model": np.asarray(a.d_model),
        "qkv_width": qkv_width_per_gpu(a, tp),
        "ffn_width": np.where(
            a.is_moe, np.asarray(a.top_k) * np.asarray(a.d_ff_expert), np.asarray(a.d_ff)
        ),
        "vocab_size": np.asarray(a.vocab_size),
    }


def memory_of_batch(
    parts: Mapping[str, Any],
    batch_size: Any,
    prompt_tokens: Any,
    output_tokens: Any,
    tensor_parallel: Any = 1,
) -> dict[str, Any]:
    """`memory_breakdown` from its batch-independent terms (`memory_per_sequence`)."""
    tp = np.asarray(tensor_parallel)
    w, per_seq = parts["weights"], parts["kv_cache_one"]
    prompt, out = np.asarray(prompt_tokens), np.asarray(output_tokens)
    batch = np.asarray(batch_size)
    kv = batch * per_seq
    # The largest step: up to max(prompt + output, 2048) tokens (never more than the batch's
    # prompts) through one layer at a time. Live at its peak, in 16-bit: the residual stream and
    # its normed copy (2 d), QKV of this GPU's heads, and the FFN's gate + up output (2 widths /
    # tp; top_k expert widths per token for MoE); plus fp32 logits of the step's sequences.
    step = np.minimum(batch * prompt, np.maximum(prompt + out, MIN_STEP_TOKENS))
    seqs = np.minimum(batch, MAX_STEP_SEQS)
    d, qkv_w, width = parts["d_model"], parts["qkv_width"], parts["ffn_width"]
    act = 2.0 * step * (2 * d + qkv_w + 2 * width / tp) + 4.0 * seqs * parts["vocab_size"] / tp
    fixed = w + act + RESERVED_BYTES
    total = fixed + kv
    return {
        "weights": w,
        "kv_cache": kv,
        "kv_cache_one": per_seq,
        "activations": act,
        "reserved": np.full(np.shape(total), float(RESERVED_BYTES))
        if np.ndim(total)
        else float(RESERVED_BYTES),
        "total": total,
        "required": fixed + per_seq,
    }


def usable_bytes(capacity_bytes: Any) -> Any:
    """Bytes of a GPU the engine plans with (USABLE_FRACTION of its HBM)."""
    return USABLE_FRACTION * np.asarray(capacity_bytes, dtype=float)


def fits_memory(mem_bytes: Any, capacity_bytes: Any) -> Any:
    """True where a per-GPU need fits in the usable part of the GPU's memory. Pass
    `memory_breakdown(...)["required"]` to ask whether the configuration can run at all (the
    rule `dse predict` and `fits_memory` constraints apply), `["total"]` to ask whether its
    whole batch fits at once."""
    return np.asarray(mem_bytes) <= usable_bytes(capacity_bytes)


def memory_margin(mem: Mapping[str, Any], capacity_bytes: Any) -> Any:
    """Usable memory left with the whole batch resident, as a fraction of the usable memory:
    1 - total / usable (negative: the engine cannot hold every sequence at once)."""
    return 1.0 - np.asarray(mem["total"], dtype=float) / usable_bytes(capacity_bytes)


def _gib(b: Any) -> str:
    return f"{float(b) / 2**30:.1f} GiB"


def memory_messages(
    mem: Mapping[str, Any], capacity_bytes: Any, gpu: Any
) -> tuple[np.ndarray, np.ndarray]:
    """(refusal, warning) text per configuration, '' where there is none, from a batched
    `memory_breakdown`: refused when even one sequence does not fit, warned when the whole
    batch does not fit at once or leaves less than MEMORY_WARN_MARGIN of the usable memory."""
    cap = np.asarray(capacity_bytes, dtype=float)
    total = np.asarray(mem["total"], dtype=float)
    n = max(np.size(total), np.size(cap))
    bc = lambda k: np.broadcast_to(np.asarray(mem[k], dtype=float), (n,))  # noqa: E731
    w, kv, one, req, tot = (
        bc(k) for k in ("weights", "kv_cache", "kv_cache_one", "required", "total")
    )
    cap = np.broadcast_to(cap, (n,))
    use = usable_bytes(cap)
    names = np.broadcast_to(np.asarray(gpu), (n,))
    refuse = np.full(n, "", dtype=object)
    warn = np.full(n, "", dtype=object)
    margin = 1.0 - tot / use
    for i in np.flatnonzero(req > use):
        refuse[i] = (
            f"does not fit in memory: needs {_gib(req[i])} per GPU for weights "
            f"({_gib(w[i])}), activations, engine buffers and one sequence's KV cache; "
            f"{names[i]} has {_gib(use[i])} usable ({USABLE_FRACTION:.0%} of "
            f"{_gib(cap[i])}); raise tensor_parallel, shorten the sequences "
            "or use a smaller dtype"
        )
    for i in np.flatnonzero((req <= use) & (margin < 0)):
        seqs = max(int((use[i] - (req[i] - one[i])) // one[i]), 1)
        warn[i] = (
            f"memory: the batch's KV cache ({_gib(kv[i])} per GPU) does not fit at once next to "
            f"the weights ({_gib(w[i])}) in {_gib(use[i])} usable: an engine holds about "
            f"{seqs} sequences at a time and queues or preempts the rest"
        )
    for i in np.flatnonzero((margin >= 0) & (margin < MEMORY_WARN_MARGIN)):
        warn[i] = (
            f"memory: needs {_gib(tot[i])} per GPU, within {100 * margin[i]:.1f}% of the "
            f"{_gib(use[i])} usable; another engine version or setting may preempt sequences"
        )
    return refuse, warn
