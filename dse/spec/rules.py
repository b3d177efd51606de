"""Validity rules of an architecture: which field values and combinations are possible.

One ordered rule list serves both entry points: `check_architecture` (every broken rule of one
configuration) and `check_columns` (the first broken rule of each row of a batch), so their
verdicts and messages agree by construction. Messages have the form '<field>: <rule>, got
<value>'. The accounting of a valid architecture (parameters, FLOPs, bytes, memory) is
`dse.spec.arch`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import fields
from typing import Any

import numpy as np

from dse.errors import ConfigError
from dse.spec import pattern as P
from dse.spec.arch import BOOL_FIELDS, Architecture, fp4_weights
from dse.spec.choices import KV_DTYPES, LINEAR_KINDS, NORMS, WEIGHT_DTYPES


def validate_architecture(a: Architecture, tensor_parallel: int = 1) -> Architecture:
    """Raise ConfigError naming the first broken rule and its value if `a` is impossible."""
    errors = check_architecture(a.to_dict(), tensor_parallel)
    if errors:
        raise ConfigError(errors[0])
    return a


_INT_MIN1 = ("d_model", "n_layers", "n_heads", "d_ff", "vocab_size", "n_experts", "top_k")
_DEFAULTS: dict[str, Any] = {
    f.name: f.default
    for f in fields(Architecture)
    if f.name not in ("d_model", "n_layers", "n_heads", "d_ff")
}


def check_architecture(a: Mapping[str, Any], tensor_parallel: Any = 1) -> list[str]:
    """Every rule broken by one scalar architecture, as messages '<field>: <rule>, got <value>'."""
    cols = {k: _one(v) for k, v in a.items()}
    return [
        text(0)
        for mask, text in _rules(cols, 1, np.array([tensor_parallel], dtype=object), None)
        if mask[0]
    ]


def _one(v: Any) -> np.ndarray:
    """A one-element object column holding v whole (a pattern list stays one element)."""
    out = np.empty(1, dtype=object)
    out[0] = v
    return out


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


def check_weight_dtype_on_gpu(
    weight_dtype: Any, gpu: Any, has_fp4: Any, fp4_gpus: Sequence[str] = ()
) -> np.ndarray:
    """Per row, '' or why the weight dtype cannot run on the row's GPU: an FP4 weight dtype
    (nvfp4) on a GPU without FP4 tensor cores (`has_fp4` False: the GPU spec has no
    `peak_fp4_flops_per_s`; every GPU before Blackwell). Hopper and Ampere have no FP4 MMA
    instruction and no table measured nvfp4 GEMMs there (a weight-only 4-bit kernel that
    dequantises to bf16 is another kernel; `weight_dtype: int4` is the nearest value priced
    there), so the
    configuration is invalid, as a broken architecture rule is: a sweep counts it infeasible
    with this reason, `dse predict` refuses it. `fp4_gpus`: the registry GPUs that have FP4
    tensor cores, named in the message."""
    wd = np.asarray(weight_dtype)
    n = wd.size
    gpus = np.broadcast_to(np.asarray(gpu), (n,))
    fp4 = np.broadcast_to(np.asarray(has_fp4, dtype=bool), (n,))
    bad = fp4_weights(wd.reshape(n)) & ~fp4
    msg = np.full(n, "", dtype=object)
    where = (
        f" (Blackwell and later: {', '.join(fp4_gpus)})" if fp4_gpus else " (Blackwell and later)"
    )
    for i in np.nonzero(bad)[0]:
        msg[i] = (
            f"weight_dtype: {wd.flat[i]} needs FP4 tensor cores, which {gpus[i]} lacks{where}, "
            f"got {_fmt(str(wd.flat[i]))}"
        )
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

    # 2. KV heads (None or 0: MHA). MLA's heads all read one latent: n_kv_heads plays no part
    # there (`dse.spec.inert`), so the rules between it and other fields skip MLA rows.
    r_kv = raw("n_kv_heads")
    kv = _num(r_kv)
    kv = np.where(_is_missing(r_kv) | (kv == 0), h, kv)
    kv_ok = _integral(kv) & (kv >= 1)
    yield ok & ~kv_ok, lambda i: f"n_kv_heads: must be an integer >= 1, got {_fmt(r_kv[i])}"
    kv_ok &= ok & ~(_int_col(raw("kv_lora_rank")) >= 1)
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
    for name in BOOL_FIELDS:
        r = raw(name)
        if r.dtype.kind == "b":
            continue
        if r.dtype.kind in "iuf":
            good = np.isin(r, (0, 1))
        else:
            good = np.array([_is_flag(x) for x in r], dtype=bool)
        yield ~good, lambda i, name=name, r=r: f"{name}: must be true or false, got {_fmt(r[i])}"
    for name, valid in (
        ("weight_dtype", WEIGHT_DTYPES),
        ("kv_dtype", KV_DTYPES),
        ("norm", NORMS),
        ("linear_kind", LINEAR_KINDS),
    ):
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
    yield from _attention_rules(raw, num, ok, tp, split, hd)


def _attention_rules(
    raw: Callable[[str], np.ndarray],
    num: Mapping[str, np.ndarray],
    ok: np.ndarray,
    tp: np.ndarray,
    split: np.ndarray,
    hd: np.ndarray,
) -> Iterator[tuple[np.ndarray, Callable[[int], str]]]:
    """7. The attention families (issue 21): the pattern, sliding windows, MLA, linear layers,
    the FFN pattern."""
    L, h = num["n_layers"], num["n_heads"]
    r_pat = raw("attention_pattern")
    text = _pattern_texts(r_pat)
    n = len(text)
    known = text != ""
    yield (
        ~known,
        lambda i: f"attention_pattern: {P.RULE}, got {_fmt(r_pat[i])}",
    )
    # (period, full, sliding, linear, mixers) per row; '' counts as full
    shape = tuple(np.broadcast_to(np.asarray(x), (n,)) for x in P.counts(text))
    per = np.asarray(shape[0], dtype=float)
    yield (
        ok & known & ~_divides(L, per),
        lambda i: (
            f"attention_pattern: its length ({_fmt(per[i])} layers) must divide "
            f"n_layers={_fmt(L[i])}, got {_fmt(text[i])}"
        ),
    )
    win = _int_col(raw("sliding_window"))
    sliding = known & (np.asarray(shape[2]) > 0)
    yield (
        sliding & ~(win >= 1),
        lambda i: (
            "sliding_window: must be an integer >= 1 when attention_pattern has sliding "
            f"layers, got {_fmt(raw('sliding_window')[i])}"
        ),
    )
    # MLA: K and V come up from the latent; a latent at least as wide as what it compresses
    # saves nothing (and the ranks below are per model, not per head).
    r = _int_col(raw("kv_lora_rank"))
    mla = r >= 1
    rope = _int_col(raw("qk_rope_head_dim"))
    nope_raw, v_raw = _int_col(raw("qk_nope_head_dim")), _int_col(raw("v_head_dim"))
    qr = _int_col(raw("q_lora_rank"))
    for name, col in (
        ("q_lora_rank", qr),
        ("qk_rope_head_dim", rope),
        ("qk_nope_head_dim", nope_raw),
        ("v_head_dim", v_raw),
    ):
        yield (
            ~mla & (col > 0),
            lambda i, name=name, col=col: (
                f"{name}: needs kv_lora_rank >= 1 (multi-head latent attention), got {_fmt(col[i])}"
            ),
        )
    implied = mla & (nope_raw == 0)
    yield (
        ok & implied & ~(rope < hd),
        lambda i: (
            f"qk_rope_head_dim: must be < head_dim={_fmt(hd[i])} (the rest of each query/key "
            f"head is qk_nope_head_dim) with MLA, got {_fmt(rope[i])}"
        ),
    )
    nope = np.where(nope_raw > 0, nope_raw, hd - rope)
    vd = np.where(v_raw > 0, v_raw, hd)
    kv_full = h * (nope + vd)
    yield (
        ok & mla & (r > kv_full),
        lambda i: (
            f"kv_lora_rank: must be <= n_heads x (qk_nope_head_dim + v_head_dim) = "
            f"{_fmt(kv_full[i])} (the keys and values it compresses), got {_fmt(r[i])}"
        ),
    )
    q_full = h * (nope + rope)
    yield (
        ok & mla & (qr > q_full),
        lambda i: (
            f"q_lora_rank: must be <= n_heads x (qk_nope_head_dim + qk_rope_head_dim) = "
            f"{_fmt(q_full[i])} (the queries it compresses), got {_fmt(qr[i])}"
        ),
    )
    for name in ("qkv_bias", "attn_output_gate"):
        flag = raw(name)
        on = (
            flag.astype(bool)
            if flag.dtype.kind in "biuf"
            else np.array([bool(x) if _is_flag(x) else False for x in flag], dtype=bool)
        )
        yield (
            mla & on,
            lambda i, name=name: f"{name}: must be false with kv_lora_rank (MLA), got True",
        )
    # Linear layers: key heads (B/C groups) are shared by whole groups of value heads.
    linear = known & (np.asarray(shape[3]) > 0)
    nv = _int_col(raw("linear_n_heads"))
    nv = np.where(nv > 0, nv, h)
    ng = _int_col(raw("linear_n_groups"))
    ng = np.where(ng > 0, ng, nv)
    grouped = raw("linear_kind") != "mamba1"  # Mamba-1's B and C are not grouped
    yield (
        ok & linear & grouped & (_mod(nv, ng) != 0),
        lambda i: f"linear_n_groups: must divide linear_n_heads={_fmt(nv[i])}, got {_fmt(ng[i])}",
    )
    yield (
        ok & linear & split & (_mod(nv, tp) != 0),
        lambda i: (
            f"linear_n_heads: must be divisible by tensor_parallel={_fmt(tp[i])}, got {_fmt(nv[i])}"
        ),
    )
    # FFNs: the pattern's kinds and length, the dense first layers of an MoE model (a dense
    # model ignores n_dense_layers), and no layer without a mixer and an FFN.
    moe = num["n_experts"] > 1
    nd = _int_col(raw("n_dense_layers"))
    yield (
        ok & moe & (nd >= L),
        lambda i: (
            f"n_dense_layers: must be < n_layers={_fmt(L[i])} (the rest are MoE), got {_fmt(nd[i])}"
        ),
    )
    r_ffn = raw("ffn_pattern")
    ffn_text = _pattern_texts(r_ffn, P.FFNS)
    ffn_known = ffn_text != ""
    yield ~ffn_known, lambda i: f"ffn_pattern: {P.FFNS.rule}, got {_fmt(r_ffn[i])}"
    f_per, f_own, f_dense = (
        np.broadcast_to(np.asarray(x), (n,)) for x in P.counts(ffn_text, P.FFNS)
    )
    ffn_per = f_per.astype(float)
    yield (
        ok & ffn_known & ~_divides(L, ffn_per),
        lambda i: (
            f"ffn_pattern: its length ({_fmt(ffn_per[i])} layers) must divide "
            f"n_layers={_fmt(L[i])}, got {_fmt(ffn_text[i])}"
        ),
    )
    yield (  # one spelling per model: a dense model's every FFN is its `ffn`
        ok & ~moe & ffn_known & (f_dense > 0),
        lambda i: (
            "ffn_pattern: a dense layer needs n_experts > 1 (every FFN of a dense model is its "
            f"dense FFN: write ffn), got {_fmt(ffn_text[i])}"
        ),
    )
    yield (
        ok & moe & (nd > 0) & ffn_known & (f_own != f_per),
        lambda i: (
            f"n_dense_layers: must be 0 when ffn_pattern is not 'ffn' (the pattern says which "
            f"layers are dense), got {_fmt(nd[i])}"
        ),
    )
    both_none = (np.asarray(shape[0]) > np.asarray(shape[4])) & (f_per > f_own + f_dense)
    empty = _empty_layers(text, ffn_text, both_none)
    yield (
        known & ffn_known & (empty >= 0),
        lambda i: (
            f"ffn_pattern: layer {int(empty[i])} has neither a mixer (attention_pattern "
            f"{_fmt(text[i])}) nor an FFN, got {_fmt(ffn_text[i])}"
        ),
    )


def _divides(L: np.ndarray, period: np.ndarray) -> np.ndarray:
    """True where the period divides n_layers (a batch of one-layer periods: all of it)."""
    if period.size and period.min() == period.max() == 1:
        return np.ones(period.shape, dtype=bool)
    return _mod(L, period) == 0


def _empty_layers(mixers: np.ndarray, ffns: np.ndarray, both_none: np.ndarray) -> np.ndarray:
    """The first layer without a mixer and an FFN of each row, -1 where there is none (looked
    at only where both patterns have `none` layers, each distinct pair once)."""
    out = np.full(len(mixers), -1, dtype=np.int64)
    for i in np.flatnonzero(both_none):
        layer = P.empty_layer(str(mixers[i]), str(ffns[i]))
        out[i] = -1 if layer is None else layer
    return out


def _int_col(r: np.ndarray) -> np.ndarray:
    """A count column as floats, 0 where missing (None) or not a number (the field table
    reports those)."""
    x = _num(r)
    return np.where(np.isfinite(x), x, 0.0)


def _pattern_texts(r: np.ndarray, kinds: P.Kinds = P.MIXERS) -> np.ndarray:
    """Canonical text of each row's pattern, '' where it is not one."""
    if r.dtype.kind in "US":
        first = r[0] if len(r) else kinds.default
        if (r == first).all():
            return np.full(len(r), P.canonical(str(first), kinds) or "")
        uniq, inv = np.unique(r, return_inverse=True)
        return np.array([P.canonical(str(u), kinds) or "" for u in uniq])[inv]
    return np.array(
        [kinds.default if x is None else (P.canonical(x, kinds) or "") for x in r.tolist()]
    )
