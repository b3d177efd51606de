"""Validity rules of an architecture: which field values and combinations are possible.

One ordered rule list (`_rules`) serves every entry point: `check_architecture` (every broken
rule of one configuration), `check_columns` (the first broken rule of each row of a batch, as
text) and `check_codes` (the same verdict as a number per row: 0 valid, k the k-th rule of
`reasons()`), so their verdicts and messages agree by construction. Each rule is a mask, a
message template and the values the message shows; the text of a row is formatted only when a
caller asks for it (`check_columns`, `messages`), never in the bulk scans of a sweep, which need
only the verdict. Messages have the form '<field>: <rule>, got <value>'. The accounting of a
valid architecture (parameters, FLOPs, bytes, memory) is `dse.spec.arch`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import fields
from functools import cache
from typing import Any

import numpy as np

from dse._same import equals
from dse.errors import ConfigError
from dse.spec import pattern as P
from dse.spec.arch import BOOL_FIELDS, Architecture, fp4_weights
from dse.spec.choices import KV_DTYPES, LINEAR_KINDS, NORMS, WEIGHT_DTYPES

# The one rule that reads the GPU: weights whose kernels need FP4 tensor cores (nvfp4) on a GPU
# without them. Its place in `reasons()` is last, after every architecture rule.
WEIGHT_DTYPE_OFF_GPU = "weight_dtype: {} needs FP4 tensor cores, which {} lacks{}, got {}"


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


# A rule as `_rules` yields it: (broken mask (n,), message template with one '{}' per shown
# value, the shown values: arrays of n values each, formatted by `_fmt`).
Rule = tuple[np.ndarray, str, tuple[Any, ...]]


def check_architecture(a: Mapping[str, Any], tensor_parallel: Any = 1) -> list[str]:
    """Every rule broken by one scalar architecture, as messages '<field>: <rule>, got <value>'."""
    cols = {k: _one(v) for k, v in a.items()}
    return [
        _text(template, shown, 0)
        for mask, template, shown in _rules(
            cols, 1, np.array([tensor_parallel], dtype=object), None
        )
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
    with None in it, are defaulted too). Bulk scans that need only the verdict call
    `check_codes` (no text).
    """
    msg = np.full(n, "", dtype=object)
    done = np.zeros(n, dtype=bool)  # rows that already hold their first message
    for mask, template, shown in _batch_rules(cols, n, tensor_parallel, head_dim_defaulted):
        idx = np.flatnonzero(mask & ~done)
        if len(idx):
            msg[idx] = _texts(template, shown, idx)
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
    bad = weight_dtype_off_gpu(wd.reshape(n), np.broadcast_to(has_fp4, (n,)))
    msg = np.full(n, "", dtype=object)
    where = (
        f" (Blackwell and later: {', '.join(fp4_gpus)})" if fp4_gpus else " (Blackwell and later)"
    )
    for i in np.nonzero(bad)[0]:
        msg[i] = WEIGHT_DTYPE_OFF_GPU.format(wd.flat[i], gpus[i], where, _fmt(str(wd.flat[i])))
    return msg


def weight_dtype_off_gpu_code() -> int:
    """`check_codes`-style code of `check_weight_dtype_on_gpu`'s rule: the last of `reasons()`."""
    return len(reasons())


def weight_dtype_off_gpu(weight_dtype: Any, has_fp4: Any) -> np.ndarray:
    """`check_weight_dtype_on_gpu`'s verdict with no text: True where the row's weights need
    FP4 tensor cores its GPU lacks (code `weight_dtype_off_gpu_code()` of `reasons()`)."""
    wd = np.asarray(weight_dtype)
    return fp4_weights(wd) & ~np.asarray(has_fp4, dtype=bool)


def check_codes(
    cols: Mapping[str, Any],
    n: int,
    tensor_parallel: Any = 1,
    head_dim_defaulted: Any = None,
) -> np.ndarray:
    """`check_columns`'s verdict as numbers, with no text: int16 (n,), 0 where the row is
    valid, else k >= 1 for the first rule it breaks, whose template is `reasons()[k - 1]`.
    `messages` turns the codes of chosen rows into `check_columns`'s text."""
    code = np.zeros(n, dtype=np.int16)
    done = np.zeros(n, dtype=bool)
    for k, (mask, _, _) in enumerate(
        _batch_rules(cols, n, tensor_parallel, head_dim_defaulted), start=1
    ):
        first = mask & ~done
        code[first] = k
        done |= first
    return code


def messages(
    cols: Mapping[str, Any],
    rows: Any,
    tensor_parallel: Any = 1,
    head_dim_defaulted: Any = None,
) -> np.ndarray:
    """`check_columns`'s messages of the chosen rows only (indices into the n rows of `cols`):
    the text for the rows a caller shows (the front, one configuration, examples), after
    `check_codes` judged them all. A row's verdict reads only that row's values."""
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)

    def take(v: Any) -> Any:
        a = np.asarray(v)
        return a if a.ndim == 0 else a[rows]

    part = {k: take(v) for k, v in cols.items() if v is not None}
    hdd = None if head_dim_defaulted is None else take(head_dim_defaulted)
    return check_columns(part, len(rows), take(tensor_parallel), hdd)


@cache
def reasons() -> tuple[str, ...]:
    """The message template of every rule in rule order ('{}' where a message shows a value):
    code k of `check_codes` is reasons()[k - 1]. The same for every batch (rules never depend
    on the batch for their place in the order). The last is `check_weight_dtype_on_gpu`'s,
    which reads the GPU registry, so `dse.spec.columns.derived` judges it after these."""
    rules = tuple(template for _, template, _ in _rules({}, 1, np.ones(1), None))
    return (*rules, WEIGHT_DTYPE_OFF_GPU)


def _batch_rules(
    cols: Mapping[str, Any], n: int, tensor_parallel: Any, head_dim_defaulted: Any
) -> Iterator[Rule]:
    c = {k: np.broadcast_to(np.asarray(v), (n,)) for k, v in cols.items() if v is not None}
    tp = np.broadcast_to(np.asarray(tensor_parallel), (n,))
    return _rules(c, n, tp, head_dim_defaulted)


def _text(template: str, shown: Sequence[Any], i: int) -> str:
    """The message of row i."""
    return template.format(*(_fmt(a[i]) for a in shown))


def _texts(template: str, shown: Sequence[Any], idx: np.ndarray) -> list[str]:
    """The messages of rows idx, each distinct set of shown values formatted once (a sweep's
    invalid rows repeat a few values: `dse check` counts hundreds of thousands of them)."""
    if not shown:
        return [template] * len(idx)
    arrays = [np.asarray(a) for a in shown]
    if any(a.dtype.kind == "O" for a in arrays):
        # mixed objects (None, lists, 1 and True, equal as keys but shown differently): each row
        return [_text(template, arrays, int(i)) for i in idx]
    memo: dict[tuple[Any, ...], str] = {}
    out = []
    for key in zip(*(a[idx].tolist() for a in arrays), strict=True):
        t = memo.get(key)
        if t is None:
            t = memo[key] = template.format(*(_fmt(v) for v in key))
        out.append(t)
    return out


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
) -> Iterator[Rule]:
    """Yield (broken mask, message template, shown values) for every rule, in message order.

    Every rule is yielded for every batch, in the same order (its place is its code in
    `check_codes`), and a row's verdict reads only that row's values.
    """

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
        yield bad, f"{name}: must be an integer >= 1, got {{}}", (r,)
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
    yield ok & ~kv_ok, "n_kv_heads: must be an integer >= 1, got {}", (r_kv,)
    kv_ok &= ok & ~(_int_col(raw("kv_lora_rank")) >= 1)
    yield (
        kv_ok & (_mod(h, kv) != 0),
        "n_kv_heads: must divide n_heads={}, got {}",
        (h, kv),
    )

    # 3. head_dim: derived rows need n_heads | d_model; every head_dim is even (RoPE rotates pairs).
    r_hd = raw("head_dim")
    defaulted = _is_missing(r_hd) if "head_dim" in cols else np.ones(n, dtype=bool)
    if head_dim_defaulted is not None:
        defaulted = defaulted | np.broadcast_to(np.asarray(head_dim_defaulted, dtype=bool), (n,))
    divides = _mod(d, h) == 0
    yield (
        ok & defaulted & ~divides,
        "n_heads: must divide d_model={} (or set head_dim), got {}",
        (d, h),
    )
    with np.errstate(invalid="ignore", divide="ignore"):
        hd = np.where(defaulted, np.floor(d / np.where(h >= 1, h, 1.0)), _num(r_hd))
    shown_hd = np.where(defaulted, hd.astype(object), r_hd)
    hd_ok = _integral(hd) & (hd >= 8) & (_mod(hd, np.full(n, 2.0)) == 0)
    yield (
        ok & (divides | ~defaulted) & ~hd_ok,
        "head_dim: must be an even integer >= 8 (RoPE rotates pairs), got {}",
        (shown_hd,),
    )

    # 4. Experts.
    yield ok & (k > e), "top_k: must be <= n_experts={}, got {}", (e, k)
    r_dffe = raw("d_ff_expert")
    dffe = _num(r_dffe)
    dffe = np.where(_is_missing(r_dffe) | (dffe == 0), ff, dffe)
    dffe_ok = _integral(dffe) & (dffe >= 1)
    yield ok & ~dffe_ok, "d_ff_expert: must be an integer >= 1, got {}", (r_dffe,)
    r_sff = raw("shared_expert_d_ff")
    sff = np.where(_is_missing(r_sff), 0.0, _num(r_sff))
    sff_ok = _integral(sff) & (sff >= 0)
    yield ~sff_ok, "shared_expert_d_ff: must be an integer >= 0, got {}", (r_sff,)
    r_npl = raw("norms_per_layer")
    npl = _num(r_npl)
    yield (
        ~(_integral(npl) & (npl >= 1)),
        "norms_per_layer: must be an integer >= 1, got {}",
        (r_npl,),
    )

    # 5. Flags and names.
    for name in BOOL_FIELDS:
        r = raw(name)
        if r.dtype.kind == "b":
            good = np.ones(n, dtype=bool)  # still yielded: a rule's place is its code
        elif r.dtype.kind in "iuf":
            good = np.isin(r, (0, 1))
        else:
            good = np.array([_is_flag(x) for x in r], dtype=bool)
        yield ~good, f"{name}: must be true or false, got {{}}", (r,)
    for name, valid in (
        ("weight_dtype", WEIGHT_DTYPES),
        ("kv_dtype", KV_DTYPES),
        ("norm", NORMS),
        ("linear_kind", LINEAR_KINDS),
    ):
        r = raw(name)
        if r.dtype.kind == "O":
            good = np.array([isinstance(x, str | np.str_) and str(x) in valid for x in r])
        elif r.dtype.kind in "US" and n and bool((r == r[0]).all()):
            good = np.full(n, str(r[0]) in valid)  # one name for the batch: looked up once
        else:
            good = np.isin(r.astype(str), list(valid))
        yield (
            ~good,
            _literal(f"{name}: must be one of {', '.join(valid)}") + ", got {}",
            (r,),
        )

    # 6. Tensor parallelism: heads, KV heads (or replicas of them), FFN widths split evenly.
    tp = _num(np.asarray(tp_raw))
    tp_ok = _integral(tp) & (tp >= 1)
    yield ~tp_ok, "tensor_parallel: must be an integer >= 1, got {}", (tp_raw,)
    split = ok & tp_ok & (tp > 1)
    yield (
        split & (_mod(h, tp) != 0),
        "n_heads: must be divisible by tensor_parallel={}, got {}",
        (tp, h),
    )
    # vLLM replicates KV heads when there are fewer than GPUs, so either direction works.
    yield (
        split & kv_ok & (_mod(kv, tp) != 0) & (_mod(tp, kv) != 0),
        "n_kv_heads: must divide or be divisible by tensor_parallel={}, got {}",
        (tp, kv),
    )
    moe = e > 1
    yield (
        split & ~moe & (_mod(ff, tp) != 0),
        "d_ff: must be divisible by tensor_parallel={}, got {}",
        (tp, ff),
    )
    yield (
        split & moe & dffe_ok & (_mod(dffe, tp) != 0),
        "d_ff_expert: must be divisible by tensor_parallel={}, got {}",
        (tp, dffe),
    )
    yield (
        split & moe & sff_ok & (sff > 0) & (_mod(sff, tp) != 0),
        "shared_expert_d_ff: must be divisible by tensor_parallel={}, got {}",
        (tp, sff),
    )
    yield from _attention_rules(raw, num, ok, tp, split, hd)


def _attention_rules(
    raw: Callable[[str], np.ndarray],
    num: Mapping[str, np.ndarray],
    ok: np.ndarray,
    tp: np.ndarray,
    split: np.ndarray,
    hd: np.ndarray,
) -> Iterator[Rule]:
    """7. The attention families (issue 21): the pattern, sliding windows, MLA, linear layers,
    the FFN pattern."""
    L, h = num["n_layers"], num["n_heads"]
    r_pat = raw("attention_pattern")
    text = _pattern_texts(r_pat)
    n = len(text)
    known = text != ""
    yield ~known, _literal(f"attention_pattern: {P.RULE}") + ", got {}", (r_pat,)
    # (period, full, sliding, linear, mixers) per row; '' counts as full
    shape = tuple(np.broadcast_to(np.asarray(x), (n,)) for x in P.counts(text))
    per = np.asarray(shape[0], dtype=float)
    yield (
        ok & known & ~_divides(L, per),
        "attention_pattern: its length ({} layers) must divide n_layers={}, got {}",
        (per, L, text),
    )
    win = _int_col(raw("sliding_window"))
    sliding = known & (np.asarray(shape[2]) > 0)
    yield (
        sliding & ~(win >= 1),
        "sliding_window: must be an integer >= 1 when attention_pattern has sliding layers, got {}",
        (raw("sliding_window"),),
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
            f"{name}: needs kv_lora_rank >= 1 (multi-head latent attention), got {{}}",
            (col,),
        )
    implied = mla & (nope_raw == 0)
    yield (
        ok & implied & ~(rope < hd),
        "qk_rope_head_dim: must be < head_dim={} (the rest of each query/key "
        "head is qk_nope_head_dim) with MLA, got {}",
        (hd, rope),
    )
    nope = np.where(nope_raw > 0, nope_raw, hd - rope)
    vd = np.where(v_raw > 0, v_raw, hd)
    kv_full = h * (nope + vd)
    yield (
        ok & mla & (r > kv_full),
        "kv_lora_rank: must be <= n_heads x (qk_nope_head_dim + v_head_dim) = "
        "{} (the keys and values it compresses), got {}",
        (kv_full, r),
    )
    q_full = h * (nope + rope)
    yield (
        ok & mla & (qr > q_full),
        "q_lora_rank: must be <= n_heads x (qk_nope_head_dim + qk_rope_head_dim) = "
        "{} (the queries it compresses), got {}",
        (q_full, qr),
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
            f"{name}: must be false with kv_lora_rank (MLA), got True",
            (),
        )
    # Linear layers: key heads (B/C groups) are shared by whole groups of value heads.
    linear = known & (np.asarray(shape[3]) > 0)
    nv = _int_col(raw("linear_n_heads"))
    nv = np.where(nv > 0, nv, h)
    ng = _int_col(raw("linear_n_groups"))
    ng = np.where(ng > 0, ng, nv)
    grouped = ~equals(raw("linear_kind"), "mamba1")  # Mamba-1's B and C are not grouped
    yield (
        ok & linear & grouped & (_mod(nv, ng) != 0),
        "linear_n_groups: must divide linear_n_heads={}, got {}",
        (nv, ng),
    )
    yield (
        ok & linear & split & (_mod(nv, tp) != 0),
        "linear_n_heads: must be divisible by tensor_parallel={}, got {}",
        (tp, nv),
    )
    # FFNs: the pattern's kinds and length, the dense first layers of an MoE model (a dense
    # model ignores n_dense_layers), and no layer without a mixer and an FFN.
    moe = num["n_experts"] > 1
    nd = _int_col(raw("n_dense_layers"))
    yield (
        ok & moe & (nd >= L),
        "n_dense_layers: must be < n_layers={} (the rest are MoE), got {}",
        (L, nd),
    )
    r_ffn = raw("ffn_pattern")
    ffn_text = _pattern_texts(r_ffn, P.FFNS)
    ffn_known = ffn_text != ""
    yield ~ffn_known, _literal(f"ffn_pattern: {P.FFNS.rule}") + ", got {}", (r_ffn,)
    f_per, f_own, f_dense = (
        np.broadcast_to(np.asarray(x), (n,)) for x in P.counts(ffn_text, P.FFNS)
    )
    ffn_per = f_per.astype(float)
    yield (
        ok & ffn_known & ~_divides(L, ffn_per),
        "ffn_pattern: its length ({} layers) must divide n_layers={}, got {}",
        (ffn_per, L, ffn_text),
    )
    yield (  # one spelling per model: a dense model's every FFN is its `ffn`
        ok & ~moe & ffn_known & (f_dense > 0),
        "ffn_pattern: a dense layer needs n_experts > 1 (every FFN of a dense model is its "
        "dense FFN: write ffn), got {}",
        (ffn_text,),
    )
    yield (
        ok & moe & (nd > 0) & ffn_known & (f_own != f_per),
        "n_dense_layers: must be 0 when ffn_pattern is not 'ffn' (the pattern says which "
        "layers are dense), got {}",
        (nd,),
    )
    both_none = (np.asarray(shape[0]) > np.asarray(shape[4])) & (f_per > f_own + f_dense)
    empty = _empty_layers(text, ffn_text, both_none)
    yield (
        known & ffn_known & (empty >= 0),
        "ffn_pattern: layer {} has neither a mixer (attention_pattern {}) nor an FFN, got {}",
        (empty, text, ffn_text),
    )


def _literal(text: str) -> str:
    """Text taken as is in a message template (braces doubled)."""
    return text.replace("{", "{{").replace("}", "}}")


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
