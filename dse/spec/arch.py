"""Decoder-only transformer architectures: parameter, FLOP, byte and memory accounting.

Every function here works on a scalar `Architecture` and, unchanged, on a batch whose fields are
numpy arrays (`Architecture.from_columns`): the arithmetic broadcasts, so the sweep's hot path
evaluates thousands of configurations in one call. Conventions (what counts as active, the FLOP
convention, the memory model, tensor-parallel rules) are written up in docs/architecture.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from dse.errors import ConfigError
from dse.spec.choices import DTYPE_BYTES, NORMS


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
        if (arr == first).all() and str(first) in DTYPE_BYTES:
            return np.full(arr.shape, DTYPE_BYTES[str(first)])
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
            if isinstance(v, float) and k not in _BOOL_FIELDS and v.is_integer():
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
        out = replace(self, n_kv_heads=kv, head_dim=hd, d_ff_expert=dffe)
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


def _default_where_zero(v: Any, default: Any) -> Any:
    """`default` where v is None or 0 (scalar or element-wise)."""
    if v is None:
        return default
    if np.ndim(v) == 0 and np.ndim(default) == 0:
        return default if v == 0 else v
    return np.where(np.asarray(v) == 0, np.asarray(default), np.asarray(v))


# ---------------------------------------------------------------------- validity rules
# One ordered rule list serves both entry points: `check_architecture` (every broken rule of one
# configuration) and `check_columns` (the first broken rule of each row), so their verdicts and
# messages agree by construction. Messages have the form '<field>: <rule>, got <value>'.
_INT_MIN1 = ("d_model", "n_layers", "n_heads", "d_ff", "vocab_size", "n_experts", "top_k")
_BOOL_FIELDS = ("gated_mlp", "tied_embeddings", "shared_expert_gate", "qkv_bias", "qk_norm")
_DEFAULTS: dict[str, Any] = {
    f.name: f.default
    for f in fields(Architecture)
    if f.name not in ("d_model", "n_layers", "n_heads", "d_ff")
}


def check_architecture(a: Mapping[str, Any], tensor_parallel: Any = 1) -> list[str]:
    """Every rule broken by one scalar architecture, as messages '<field>: <rule>, got <value>'."""
    cols = {k: np.array([v], dtype=object) for k, v in a.items()}
    return [
        text(0)
        for mask, text in _rules(cols, 1, np.array([tensor_parallel], dtype=object), None)
        if mask[0]
    ]


def check_columns(
    cols: Mapping[str, Any],
    n: int,
    tensor_parallel: Any = 1,
    head_dim_defaulted: Any = None,
) -> np.ndarray:
    """Vectorised validity: an array of n messages, '' where the configuration is valid.

    Each message is the first rule the row breaks, the same text `check_architecture` puts
    first. `head_dim_defaulted` marks rows whose head_dim column was derived as
    d_model // n_heads: there n_heads must divide d_model (rows without a head_dim column, or
    with None in it, are defaulted too).
    """
    c = {k: np.broadcast_to(np.asarray(v), (n,)) for k, v in cols.items() if v is not None}
    tp = np.broadcast_to(np.asarray(tensor_parallel), (n,))
    msg = np.full(n, "", dtype=object)
    done = np.zeros(n, dtype=bool)  # rows that already hold their first message
    for mask, text in _rules(c, n, tp, head_dim_defaulted):
        idx = np.nonzero(mask & ~done)[0]
        for i in idx:
            msg[i] = text(i)
        done[idx] = True
    return msg


def _fmt(v: Any) -> str:
    """A value as messages show it: ints plainly (also integral floats), strings quoted."""
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    if isinstance(v, str):
        return repr(v)
    return str(v)


def _num(raw: np.ndarray) -> np.ndarray:
    """Float view of a column; NaN where an entry is not a number (None, text, bool)."""
    if raw.dtype.kind in "iu":
        return raw.astype(float)
    if raw.dtype.kind == "f":
        return raw.astype(float)
    if raw.dtype.kind == "b":
        return np.full(raw.shape, np.nan)
    out = np.full(raw.shape, np.nan)
    for i, x in enumerate(raw):
        if isinstance(x, int | float | np.integer | np.floating) and not isinstance(
            x, bool | np.bool_
        ):
            out[i] = float(x)
    return out


def _is_missing(raw: np.ndarray) -> np.ndarray:
    if raw.dtype.kind != "O":
        return np.zeros(raw.shape, dtype=bool)
    return np.array([x is None for x in raw], dtype=bool)


def _is_flag(x: Any) -> bool:
    return isinstance(x, bool | np.bool_) or (isinstance(x, int | np.integer) and x in (0, 1))


def _integral(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.isfinite(x) & (x == np.floor(x))


def _mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a % b where b >= 1 (callers mask the rest); NaN-safe."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.fmod(a, np.where(b >= 1, b, 1.0))


def _rules(
    cols: Mapping[str, np.ndarray], n: int, tp_raw: np.ndarray, head_dim_defaulted: Any
) -> Iterator[tuple[np.ndarray, Callable[[int], str]]]:
    """Yield (broken mask, message of row i) for every rule, in message order."""

    def raw(name: str) -> np.ndarray:
        if name in cols:
            return np.broadcast_to(np.asarray(cols[name]), (n,))
        default = _DEFAULTS.get(name)
        # Native dtypes for defaults keep the checks below vectorised (no per-element Python).
        return np.broadcast_to(np.array([default], dtype=object if default is None else None), (n,))

    # 1. Positive integers; a row failing here skips the rules that divide by these fields.
    num = {}
    ok = np.ones(n, dtype=bool)
    for name in _INT_MIN1:
        r, x = raw(name), _num(raw(name))
        bad = ~(_integral(x) & (x >= 1))
        yield bad, lambda i, name=name, r=r: f"{name}: must be an integer >= 1, got {_fmt(r[i])}"
        num[name] = x
        ok &= ~bad
    d, h, ff = num["d_model"], num["n_heads"], num["d_ff"]
    e, k = num["n_experts"], num["top_k"]

    # 2. KV heads (None or 0: MHA).
    r_kv = raw("n_kv_heads")
    kv = _num(r_kv)
    kv = np.where(_is_missing(r_kv) | (kv == 0), h, kv)
    kv_ok = _integral(kv) & (kv >= 1)
    yield ok & ~kv_ok, lambda i: f"n_kv_heads: must be an integer >= 1, got {_fmt(r_kv[i])}"
    kv_ok &= ok
    yield (
        kv_ok & (_mod(h, kv) != 0),
        lambda i: f"n_kv_heads: must divide n_heads={_fmt(h[i])}, got {_fmt(kv[i])}",
    )

    # 3. head_dim: derived rows need n_heads | d_model; every head_dim is even (RoPE rotates pairs).
    r_hd = raw("head_dim")
    defaulted = _is_missing(r_hd) if "head_dim" in cols else np.ones(n, dtype=bool)
    if head_dim_defaulted is not None:
        defaulted = defaulted | np.broadcast_to(np.asarray(head_dim_defaulted, dtype=bool), (n,))
    divides = _mod(d, h) == 0
    yield (
        ok & defaulted & ~divides,
        lambda i: f"n_heads: must divide d_model={_fmt(d[i])} (or set head_dim), got {_fmt(h[i])}",
    )
    with np.errstate(invalid="ignore", divide="ignore"):
        hd = np.where(defaulted, np.floor(d / np.where(h >= 1, h, 1.0)), _num(r_hd))
    shown_hd = np.where(defaulted, hd.astype(object), r_hd)
    hd_ok = _integral(hd) & (hd >= 8) & (_mod(hd, np.full(n, 2.0)) == 0)
    yield (
        ok & (divides | ~defaulted) & ~hd_ok,
        lambda i: (
            f"head_dim: must be an even integer >= 8 (RoPE rotates pairs), got {_fmt(shown_hd[i])}"
        ),
    )

    # 4. Experts.
    yield ok & (k > e), lambda i: f"top_k: must be <= n_experts={_fmt(e[i])}, got {_fmt(k[i])}"
    r_dffe = raw("d_ff_expert")
    dffe = _num(r_dffe)
    dffe = np.where(_is_missing(r_dffe) | (dffe == 0), ff, dffe)
    dffe_ok = _integral(dffe) & (dffe >= 1)
    yield ok & ~dffe_ok, lambda i: f"d_ff_expert: must be an integer >= 1, got {_fmt(r_dffe[i])}"
    r_sff = raw("shared_expert_d_ff")
    sff = np.where(_is_missing(r_sff), 0.0, _num(r_sff))
    sff_ok = _integral(sff) & (sff >= 0)
    yield ~sff_ok, lambda i: f"shared_expert_d_ff: must be an integer >= 0, got {_fmt(r_sff[i])}"
    r_npl = raw("norms_per_layer")
    npl = _num(r_npl)
    yield (
        ~(_integral(npl) & (npl >= 1)),
        lambda i: f"norms_per_layer: must be an integer >= 1, got {_fmt(r_npl[i])}",
    )

    # 5. Flags and names.
    for name in _BOOL_FIELDS:
        r = raw(name)
        if r.dtype.kind == "b":
            continue
        if r.dtype.kind in "iuf":
            good = np.isin(r, (0, 1))
        else:
            good = np.array([_is_flag(x) for x in r], dtype=bool)
        yield ~good, lambda i, name=name, r=r: f"{name}: must be true or false, got {_fmt(r[i])}"
    for name, valid in (("weight_dtype", DTYPE_BYTES), ("kv_dtype", DTYPE_BYTES), ("norm", NORMS)):
        r = raw(name)
        good = (
            np.array([isinstance(x, str | np.str_) and str(x) in valid for x in r])
            if r.dtype.kind == "O"
            else np.isin(r.astype(str), list(valid))
        )
        yield (
            ~good,
            lambda i, name=name, r=r, valid=valid: (
                f"{name}: must be one of {', '.join(valid)}, got {_fmt(r[i])}"
            ),
        )

    # 6. Tensor parallelism: heads, KV heads (or replicas of them), FFN widths split evenly.
    tp = _num(np.asarray(tp_raw))
    tp_ok = _integral(tp) & (tp >= 1)
    yield ~tp_ok, lambda i: f"tensor_parallel: must be an integer >= 1, got {_fmt(tp_raw[i])}"
    split = ok & tp_ok & (tp > 1)
    yield (
        split & (_mod(h, tp) != 0),
        lambda i: f"n_heads: must be divisible by tensor_parallel={_fmt(tp[i])}, got {_fmt(h[i])}",
    )
    # vLLM replicates KV heads when there are fewer than GPUs, so either direction works.
    yield (
        split & kv_ok & (_mod(kv, tp) != 0) & (_mod(tp, kv) != 0),
        lambda i: (
            f"n_kv_heads: must divide or be divisible by tensor_parallel={_fmt(tp[i])}, got {_fmt(kv[i])}"
        ),
    )
    moe = e > 1
    yield (
        split & ~moe & (_mod(ff, tp) != 0),
        lambda i: f"d_ff: must be divisible by tensor_parallel={_fmt(tp[i])}, got {_fmt(ff[i])}",
    )
    yield (
        split & moe & dffe_ok & (_mod(dffe, tp) != 0),
        lambda i: (
            f"d_ff_expert: must be divisible by tensor_parallel={_fmt(tp[i])}, got {_fmt(dffe[i])}"
        ),
    )
    yield (
        split & moe & sff_ok & (sff > 0) & (_mod(sff, tp) != 0),
        lambda i: (
            f"shared_expert_d_ff: must be divisible by tensor_parallel={_fmt(tp[i])}, got {_fmt(sff[i])}"
        ),
    )


# ---------------------------------------------------------------------- parameter counts
def param_breakdown(a: Architecture) -> dict[str, Any]:
    """Itemised parameter count (nanoGPT style); `total` and `active` are sums of the items.

    Keys: embedding, lm_head, final_norm, and per-model totals over layers of attention/qkv
    (with the q, k, v biases), attention/out, attention/qk_norm, norms, mlp (dense), or
    moe/router, moe/experts, moe/shared (shared expert and its gate) for MoE.
    `active/moe/experts` counts only the experts a token uses (top_k of n_experts); `active` is
    `total` with that item in place of moe/experts.
    """
    a = a.resolved()
    d, L, h = np.asarray(a.d_model), np.asarray(a.n_layers), np.asarray(a.n_heads)
    kv, hd, V = np.asarray(a.n_kv_heads), np.asarray(a.head_dim), np.asarray(a.vocab_size)
    e, k = np.asarray(a.n_experts), np.asarray(a.top_k)
    moe = e > 1
    n_mats = np.where(np.asarray(a.gated_mlp), 3, 2)  # SwiGLU: gate, up, down
    norm_factor = np.where(np.asarray(a.norm) == "layernorm", 2, 1)  # weight (+ bias)
    norm_w = norm_factor * d

    qkv = d * (h + 2 * kv) * hd + np.where(np.asarray(a.qkv_bias), (h + 2 * kv) * hd, 0)
    out = h * hd * d
    qk_norm = np.where(np.asarray(a.qk_norm), 2 * norm_factor * hd, 0)  # one norm for q, one for k
    dense_ffn = n_mats * d * np.asarray(a.d_ff)
    expert = n_mats * d * np.asarray(a.d_ff_expert)
    sff = np.asarray(a.shared_expert_d_ff)
    shared = np.where(sff > 0, n_mats * d * sff, 0) + np.where(
        np.asarray(a.shared_expert_gate), d, 0
    )
    router = d * e  # one logit per expert, no bias

    items = {
        "embedding": V * d,
        "lm_head": np.where(np.asarray(a.tied_embeddings), 0, V * d),
        "final_norm": norm_w,
        "attention/qkv": L * qkv,
        "attention/out": L * out,
        "attention/qk_norm": L * qk_norm,
        "norms": L * np.asarray(a.norms_per_layer) * norm_w,
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

    The embedding lookup is a gather (no FLOPs), norm weights and biases are elementwise, so all
    are excluded; a tied LM head multiplies by the embedding matrix, so it is counted once.
    """
    a = a.resolved()
    p = param_breakdown(a)
    V, d = np.asarray(a.vocab_size), np.asarray(a.d_model)
    L, h, kv, hd = (np.asarray(x) for x in (a.n_layers, a.n_heads, a.n_kv_heads, a.head_dim))
    lm = V * d  # the LM head multiply happens whether or not it is tied
    bias = L * np.where(np.asarray(a.qkv_bias), (h + 2 * kv) * hd, 0)
    elementwise = p["final_norm"] + p["norms"] + p["attention/qk_norm"] + bias
    return _as_int(p["active"] - p["embedding"] - p["lm_head"] + lm - elementwise)


# ---------------------------------------------------------------------- FLOPs and bytes
def attention_flops_per_token(a: Architecture, context_len: Any) -> Any:
    """Score and weighted-sum FLOPs for one query token over `context_len` keys, whole model.

    QK^T and PV each cost 2 * head_dim FLOPs per (head, key): 4 * n_layers * n_heads * head_dim
    * context_len.
    """
    a = a.resolved()
    return (
        4
        * np.asarray(a.n_layers)
        * np.asarray(a.n_heads)
        * np.asarray(a.head_dim)
        * np.asarray(context_len)
    )


def forward_flops_per_token(a: Architecture, context_len: Any) -> Any:
    """Forward FLOPs for one token that attends to `context_len` keys: 2 x matmul params + attention."""
    return 2 * matmul_params_per_token(a) + attention_flops_per_token(a, context_len)


def prefill_flops(a: Architecture, prompt_tokens: Any, batch_size: Any = 1) -> Any:
    """Whole-prompt forward FLOPs under causal attention (token i sees i keys, i = 1..S).

    Sum over i of the attention term is 4 L H hd S(S+1)/2. Logits are computed for every prompt
    token here (training-style); the layer operator list of `dse.predict.ops` computes them for the last
    token only, as serving engines do.
    """
    s = np.asarray(prompt_tokens)
    a = a.resolved()
    attn = (
        4
        * np.asarray(a.n_layers)
        * np.asarray(a.n_heads)
        * np.asarray(a.head_dim)
        * s
        * (s + 1)
        / 2
    )
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


def kv_heads_per_gpu(a: Architecture, tensor_parallel: Any = 1) -> Any:
    """KV heads each GPU holds: n_kv_heads / tp, or 1 replica when there are fewer heads than GPUs."""
    a = a.resolved()
    return np.maximum(np.asarray(a.n_kv_heads) // np.asarray(tensor_parallel), 1)


def params_per_gpu(a: Architecture, tensor_parallel: Any = 1) -> Any:
    """Parameters one GPU stores under Megatron-style tensor parallelism, as vLLM shards them.

    Split tp ways: embedding and LM head (by vocabulary), q heads, the output projection, FFN and
    expert widths, the shared expert. Replicated: norms, router, shared-expert gate, and K/V
    projections when n_kv_heads < tp (each GPU keeps one KV head). Equals total_params at tp = 1.
    """
    a = a.resolved()
    p = param_breakdown(a)
    tp = np.asarray(tensor_parallel)
    d, L, h, hd = (np.asarray(x) for x in (a.d_model, a.n_layers, a.n_heads, a.head_dim))
    kv_gpu = kv_heads_per_gpu(a, tp)
    bias = np.where(np.asarray(a.qkv_bias), 1, 0)
    qkv_gpu = L * (d + bias) * (h / tp + 2 * kv_gpu) * hd
    gate = L * np.where(a.is_moe & np.asarray(a.shared_expert_gate), d, 0)
    split = (
        p["embedding"]
        + p["lm_head"]
        + p["attention/out"]
        + p["mlp"]
        + p["moe/experts"]
        + p["moe/shared"]
        - gate
    )
    replicated = p["final_norm"] + p["norms"] + p["attention/qk_norm"] + p["moe/router"] + gate
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


def kv_bytes_per_token_per_gpu(a: Architecture, tensor_parallel: Any = 1) -> Any:
    """KV-cache bytes one token adds on each GPU: K and V of the GPU's KV heads, every layer."""
    a = a.resolved()
    return (
        2
        * np.asarray(a.n_layers)
        * kv_heads_per_gpu(a, tensor_parallel)
        * np.asarray(a.head_dim)
        * dtype_bytes(a.kv_dtype)
    )


def kv_block_tokens(engine: Any = "vllm") -> Any:
    """Tokens per KV-cache block of each engine (vLLM's 16 for an engine not listed)."""
    e = np.asarray(engine)
    if e.ndim == 0:
        return KV_BLOCK_TOKENS.get(str(e), KV_BLOCK_TOKENS["vllm"])
    out = np.full(e.shape, KV_BLOCK_TOKENS["vllm"], dtype=np.int64)
    for name, block in KV_BLOCK_TOKENS.items():
        out[e == name] = block
    return out


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
    a = a.resolved()
    tp = np.asarray(tensor_parallel)
    w = params_per_gpu(a, tp) * dtype_bytes(a.weight_dtype)
    prompt, out = np.asarray(prompt_tokens), np.asarray(output_tokens)
    batch = np.asarray(batch_size)
    per_seq = kv_tokens_held(prompt + out, engine) * kv_bytes_per_token_per_gpu(a, tp)
    kv = batch * per_seq
    # The largest step: up to max(prompt + output, 2048) tokens (never more than the batch's
    # prompts) through one layer at a time. Live at its peak, in 16-bit: the residual stream and
    # its normed copy (2 d), QKV of this GPU's heads, and the FFN's gate + up output (2 widths /
    # tp; top_k expert widths per token for MoE); plus fp32 logits of the step's sequences.
    step = np.minimum(batch * prompt, np.maximum(prompt + out, MIN_STEP_TOKENS))
    seqs = np.minimum(batch, MAX_STEP_SEQS)
    d = np.asarray(a.d_model)
    width = np.where(a.is_moe, np.asarray(a.top_k) * np.asarray(a.d_ff_expert), np.asarray(a.d_ff))
    kv_gpu = kv_heads_per_gpu(a, tp)
    qkv_w = (np.asarray(a.n_heads) / tp + 2 * kv_gpu) * np.asarray(a.head_dim)
    act = 2.0 * step * (2 * d + qkv_w + 2 * width / tp) + 4.0 * seqs * np.asarray(a.vocab_size) / tp
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
