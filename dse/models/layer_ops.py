"""Level-1 model of the non-GEMM layer operators (vidur's per-operator rows): RMSNorm
(input_layernorm, post_attention_layernorm), RoPE (attn_rope), the MLP activation (mlp_act),
the residual add and the embedding lookup (emb).

Each of these kernels walks rows of a (tokens x width) tensor. Its time is a fixed launch cost,
plus a per-wave cost (one thread block per row: `ceil(tokens / rows_per_wave)` waves, each
costing time proportional to the row width, which dominates small batches), plus a memory term
(elements x seconds-per-element, the inverse effective bandwidth, which depends on the regime the
total element count falls in: launch-amortising, L2-resident, HBM-bound). Tensor-parallel size
enters as log2(tp) interactions because vidur's runs at higher tp are measurably faster for the
same shape (the surrounding kernels leave more of L2 warm). Per operator:

    t = c0 + c1 W + c2 W w + E * s(log E) + log2(tp) (c3 + c4 W w + c5 E)

with w the row width (elements), W = ceil(tokens / C) the waves, E = tokens * w, s a
piecewise-linear curve over log E (the regimes), C chosen per operator from multiples of the SM
count. Fitted by relative-error least squares (the percentage error MAPE scores), per GPU.

That formula (the structural base, evaluated with the waves' continuous envelope max(T / C, 1))
is then corrected by the measured curves themselves: for each measured (operator, tp, width) the
log ratio of vidur's times to the base over tokens (shapes measured for several models averaged,
a 3-point running mean against the 1 us timer steps, a running maximum so that more tokens never
cost less). A row reads the curves of its tp, linearly in tokens and in log width between the two
nearest measured widths (at the same element count, tokens x width / neighbour width), constant
beyond either end, so the base alone carries the extrapolation. The staircase of the waves then
comes from the measurements, and the items (launch, wave, memory, tp) are scaled to sum to it.
Steps are not interpolated across: each curve has a wave period (a multiple of the SM count,
chosen by how well it predicts the curve's own points from their neighbours) and a token count
between two measured points on either side of a wave boundary reads the point on its own side;
the same holds at a kernel switch by token count (the embedding's small-index kernel up to 16
tokens, which also gets its own per-token line in the base). No running mean crosses either.
A width between measured ones reads a neighbour curve with a period in two parts: its smooth
part (the curve's mean over 2 x SMs tokens around each point) at the same element count, its
wave sawtooth (the rest) at the row's own token count, because the waves start at the same token counts for every
width (one block per token) while the regime follows the elements (`_wave_split`; artifacts
fitted before read the whole curve at the element count, as they were validated).

Widths per operator (per GPU after tensor parallelism, as vidur shards them):
    input_layernorm / post_attention_layernorm / add / emb: d_model
    attn_rope: (n_heads + n_kv_heads) / tp * head_dim   (q and k rotated; head_dim = d_model/n_heads)
    mlp_act:   d_ff / tp, x 2/3 without a gated MLP (in SiLU-and-mul equivalents: SiLU-and-mul
               moves 3 d_ff/tp elements per token, GELU 2 d_ff/tp)
Models without a gated MLP (vidur: phi-2, also the only LayerNorm / parallel-block model) are a
separate family when the training rows have one; otherwise the gated coefficients are used.

One file (~1,400 lines) on purpose: the five operators share one wave model, one feature set
and one fit (the model contract's `fit` / `predict` / `to_state`); each operator's part is the
per-kind constants and shape rules a reader compares side by side. The curves have two
readers that must agree to round-off, kept beside each other: the stacked pass prediction runs
(`_stack_eval`) and the plain-Python row walk of a few rows (`_predict_rows`); the walk curve by
curve they replaced is the tests' reference (tests/models/test_layer_ops_stack.py).
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Self

import numpy as np

from dse.errors import ArtifactError, DataError
from dse.metrics import mape_pct
from dse.models import _curves
from dse.models import base as _base
from dse.models.base import RangeMiss, any_true, range_miss, within
from dse.models.threads import threaded_fit
from dse.spec.hardware import get_gpu

if TYPE_CHECKING:
    import pandas as pd

# Operators this model covers (vidur op names); the GEMM ops belong to the GEMM model.
LAYER_OPS: tuple[str, ...] = (
    "input_layernorm",
    "post_attention_layernorm",
    "attn_rope",
    "mlp_act",
    "add",
    "emb",
)
GEMM_OPS: tuple[str, ...] = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
# Rows-per-wave candidates in units of the GPU's SM count (blocks resident per SM); inf = no
# wave term (grid-stride kernels).
WAVE_CANDIDATES: tuple[float, ...] = (0.5, 1, 2, 3, 4, 6, 8, 16, np.inf)
# Knots of the per-element cost curve: every half decade of total elements, 1e3 .. 1e9.
LOG_E_KNOTS = np.log(10.0) * np.arange(3.0, 9.01, 0.5)
SMOOTH = 1e-3  # second-difference penalty weight (per row) on the cost curve
N_TP = 6  # tp terms after the curves: (1, W w, W) x (step 1->2, trend 2->)
N_SPLIT = 2  # then the kernel below a token-count switch: (1, tokens) x (tokens <= switch)
# Residual (log of measured / structural): the measured curves themselves, one per (operator,
# tp, width) over tokens, linear in tokens and in log width between measured ones (the structural
# formula carries what lies between or beyond). Kernel-specific bumps and the wave staircase are
# where the formula misses most, and vidur's token grid (every 16-32 tokens) resolves both.
CURVE_SMOOTH = 3  # running mean over this many neighbouring token counts of one curve
CURVE_NEAR = 0.1  # ... that lie within 10% (or 16 tokens) of each other
# A width between measured ones reads its neighbours at tokens x (width / neighbour)^this: 1 =
# the same element count (past a few waves these kernels cost what their elements cost:
# Llama-2-7B at T tokens ~ 70B at T / 2), 0 = the same token count (the same waves).
CURVE_E_MATCH = 1.0
# Operators whose width shrinks with tp (q/k heads, d_ff shards): their curves are keyed by width
# alone (one 11008-wide SiLU runs within 3% whether it is d_ff 11008 at tp 1 or 22016 at tp 2),
# so a held-out model finds measured widths nearby; the others (width d_model at every tp) keep
# one set of curves per tp (the same shape runs 5-10% faster in vidur's tp > 1 runs).
CURVES_BY_WIDTH_ONLY: tuple[str, ...] = ("attn_rope", "mlp_act")
# Wave boundaries in the measured curves: the row kernels (RMSNorm, SiLU-and-mul, RoPE) launch
# one block per token, so their time steps up where a new wave of blocks starts (H100: every
# 264 = 2 x 132 SMs tokens, A100 every 216), 3-4 us on a 6-10 us kernel. A held-out token count
# next to a step must read the measured point on its own side of the step, not a line across it.
# The period of each curve is chosen from these multiples of the SM count (inf = no steps) by
# how well it predicts the curve's own points from their neighbours (leave one point out).
CURVE_PERIODS: tuple[float, ...] = (np.inf, 1.0, 2.0)
# Kernel switches by token count: PyTorch's index_select (the embedding lookup) runs its
# small-index kernel, each thread looping over the indices, for <= 16 indices and its
# large-index kernel above (2, 3, 4, 7, 12 us at 1, 2, 4, 8, 16 tokens, then 4 us at 24).
KERNEL_SPLIT_TOKENS: dict[str, float] = {"emb": 16.0}
# what states with wave-step curves but no stored switches were built with (fixed: not the
# constant above, which may change)
_SPLITS_BEFORE_STORED: dict[str, float] = {"emb": 16.0}
# A width between measured ones reads its neighbours' wave sawtooth at its own token count (see
# _wave_split); False: the whole curve at the matched element count (artifacts fitted before)
CURVE_WAVE_SPLIT = True
WAVE_SPLIT_WINDOW = 2.0  # ... the smooth part: the curve's mean over this many x SMs tokens
WIDTH_ONLY_NO_TP = True  # ... and their structural base has no tp terms either
# Calls of at most this many rows walk them one by one in plain Python (`_predict_rows`): a
# one-configuration prediction prices ~16 layer-op rows, where the vectorised walk costs
# ~0.15 ms per operator family whatever its rows. The same numbers to round-off.
FEW_ROWS = 32
INPUTS = (
    "num_tokens",
    "d_model",
    "n_heads",
    "n_kv_heads",
    "d_ff",
    "tensor_parallel",
)


def op_geometry(op: np.ndarray, arrays: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(rows, width) each operator walks, per GPU after tensor parallelism (see module doc)."""
    t = np.asarray(arrays["num_tokens"], dtype=np.float64)
    d = np.asarray(arrays["d_model"], dtype=np.float64)
    h = np.asarray(arrays["n_heads"], dtype=np.float64)
    kv = np.asarray(arrays["n_kv_heads"], dtype=np.float64)
    ff = np.asarray(arrays["d_ff"], dtype=np.float64)
    tp = np.asarray(arrays["tensor_parallel"], dtype=np.float64)
    gated = np.asarray(arrays.get("gated_mlp", True), dtype=bool)

    def rope_w() -> np.ndarray:
        hd = d / h
        return (h / tp + np.maximum(kv / tp, 1.0)) * hd

    def act_w() -> np.ndarray:
        # the activation's width in SiLU-and-mul equivalents: that kernel moves 3 d_ff / tp
        # elements per token (reads gate and up, writes one), GELU 2 d_ff / tp (one, one)
        return ff / tp * np.where(gated, 1.0, 2.0 / 3.0)

    if np.ndim(op) == 0:  # one operator (the adapters' calls): its own width alone
        name = str(op)
        one = rope_w() if name == "attn_rope" else act_w() if name == "mlp_act" else d
        shape = np.broadcast_shapes(*(np.shape(a) for a in (d, h, kv, ff, tp, gated)))
        return t, np.array(np.broadcast_to(one, shape), dtype=np.float64)
    width = np.where(op == "attn_rope", rope_w(), np.where(op == "mlp_act", act_w(), d))
    return t, width


def _waves(t: np.ndarray, rows_per_wave: float, smooth: bool = False) -> np.ndarray:
    """Waves of a grid of t rows; `smooth`: max(t / C, 1), the staircase's continuous envelope
    (the reference the measured curves are stored against, so that they carry the staircase)."""
    if not np.isfinite(rows_per_wave):
        return t / 1000.0
    return np.maximum(t / rows_per_wave, 1.0) if smooth else np.ceil(t / rows_per_wave)


def _features(
    t: np.ndarray,
    width: np.ndarray,
    tp: np.ndarray,
    rows_per_wave: float,
    smooth: bool = False,
    split: float = 0.0,
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Design matrix (n, 1 + 2 knots + N_TP + N_SPLIT): launch, per-wave fixed and per-wave
    per-width costs at each element-count regime, tp terms, and the fixed and per-token cost of
    the kernel that runs up to `split` tokens (all zero without a switch). Units: microseconds,
    thousands of elements."""
    w_k = width * 1e-3
    if np.isfinite(rows_per_wave):
        waves = _waves(t, rows_per_wave, smooth)
        unit = rows_per_wave
    else:  # grid-stride kernel: "waves" are fractional tokens / 1000
        waves = t / 1000.0
        unit = 1000.0
    # the regime coordinate: elements of the whole waves the grid runs (constant within a wave,
    # so more tokens in the same wave never cost less)
    H = _curves.hat_basis(np.log(np.maximum(waves * unit * width, 1.0)), LOG_E_KNOTS)
    cols = [np.ones_like(t), waves[:, None] * H, (waves * w_k)[:, None] * H]
    for lt in _tp_levels(tp):
        cols += [lt, lt * waves * w_k, lt * waves]
    small = (t <= split).astype(np.float64)
    cols += [small, small * t]
    return np.column_stack(cols), {"waves": waves, "w_k": w_k}


def _tp_levels(tp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """log2(tp) split at 2: the step from tp 1 to 2 and the trend from 2 upwards (vidur's tp-1
    runs differ from all others more than tp 2 differs from 8)."""
    l2 = np.log2(np.maximum(tp, 1.0))
    return np.minimum(l2, 1.0), np.maximum(l2 - 1.0, 0.0)


def _segment(x: np.ndarray, period: float, split: float) -> np.ndarray:
    """Segment id of token counts x: the wave (ceil(x / period)) and the side of a kernel switch
    (x > split); neighbouring measured points in different segments are never averaged or
    interpolated across."""
    seg = np.ceil(x / period) if np.isfinite(period) else np.zeros_like(x)
    return seg + 1e6 * (x > split) if split > 0 else seg


def _running_mean(tok: np.ndarray, v: np.ndarray, seg: np.ndarray | None = None) -> np.ndarray:
    """Mean of each point and its CURVE_SMOOTH // 2 neighbours on either side, counting only
    neighbours within CURVE_NEAR of it and in its segment (a gap in the token grid, a wave step
    or a kernel switch is not smoothed across)."""
    acc, cnt = v.copy(), np.ones_like(v)
    for s in range(1, CURVE_SMOOTH // 2 + 1):
        near = (tok[s:] - tok[:-s]) <= np.maximum(CURVE_NEAR * tok[:-s], 16.0)
        if seg is not None:
            near &= seg[s:] == seg[:-s]
        acc[:-s] += np.where(near, v[s:], 0.0)
        cnt[:-s] += near
        acc[s:] += np.where(near, v[:-s], 0.0)
        cnt[s:] += near
    return acc / cnt


def _interp_seg(
    x: np.ndarray, tok: np.ndarray, val: np.ndarray, period: float, split: float
) -> np.ndarray:
    """Linear in tokens between measured points, constant beyond the ends; where the two
    neighbours lie in different segments (a wave step or a kernel switch between them), the
    value of the neighbour in x's own segment."""
    if len(tok) < 2 or (not np.isfinite(period) and split <= 0):
        return np.interp(x, tok, val)
    hi = np.searchsorted(tok, x, side="right")
    np.clip(hi, 1, len(tok) - 1, out=hi)
    lo = hi - 1
    t_lo = tok[lo]
    f = (x - t_lo) / (tok[hi] - t_lo)
    np.clip(f, 0.0, 1.0, out=f)  # constant beyond either end
    seg = _segment(tok, period, split)
    cross = np.flatnonzero(seg[lo] != seg[hi])
    if cross.size:  # across a step: the weight of the neighbour on x's side is 1
        s_x = _segment(x[cross], period, split)
        fc = f[cross]
        fc = np.where(s_x == seg[hi[cross]], 1.0, np.where(s_x == seg[lo[cross]], 0.0, fc))
        f[cross] = fc
    v_lo = val[lo]
    return v_lo + f * (val[hi] - v_lo)


def _loo_period(tok: np.ndarray, v: np.ndarray, n_sms: int, split: float) -> float:
    """The CURVE_PERIODS entry (in rows) that best predicts each interior point of a curve from
    its two neighbours (sum of absolute log errors); no period unless one does better."""
    if len(tok) < 4:
        return np.inf
    # each interior point from its two neighbours, as _interp_seg would read it held out
    lo, mid, hi = v[:-2], v[1:-1], v[2:]
    f = (tok[1:-1] - tok[:-2]) / (tok[2:] - tok[:-2])
    lin = lo + f * (hi - lo)
    best, best_err = np.inf, np.inf
    for mult in CURVE_PERIODS:
        period = mult * n_sms
        seg = _segment(tok, period, split)
        s_lo, s_x, s_hi = seg[:-2], seg[1:-1], seg[2:]
        cross = s_lo != s_hi
        pred = np.where(cross & (s_x == s_hi), hi, np.where(cross & (s_x == s_lo), lo, lin))
        err = float(np.abs(pred - mid).sum())
        if err < best_err - 1e-9:
            best, best_err = period, err
    return best


def _curve_table(
    t: np.ndarray,
    width: np.ndarray,
    tp: np.ndarray,
    log_y: np.ndarray,
    log_base: np.ndarray,
    n_sms: int,
    split: float = 0.0,
) -> list[tuple[float, float, np.ndarray, np.ndarray, float]]:
    """The measured curves: one (tp, width, tokens, log(measured / smooth base), period) per
    measured (tp, width), tokens sorted and unique. Rows of one shape from several models are
    averaged, a CURVE_SMOOTH-point running mean along tokens within a segment (wave, side of a
    kernel switch) softens the 1 us timer staircase, and a running maximum on each side of a
    kernel switch makes the curve monotone in tokens (more rows never take less time)."""
    out = []
    key = np.column_stack([tp, width])
    for p, w in np.unique(key, axis=0):
        sel = (tp == p) & (width == w)
        tok, inv = np.unique(t[sel], return_inverse=True)
        tok = tok.astype(np.float64)
        cnt = np.bincount(inv)
        ly = np.bincount(inv, weights=log_y[sel]) / cnt
        lb = np.bincount(inv, weights=log_base[sel]) / cnt
        period = _loo_period(tok, ly - lb, n_sms, split)
        # the running mean is of log time where the smooth base misses the curve's shape (flat
        # within a wave, not linear in tokens), but of the ratio to the base below a kernel
        # switch, where the base is the small kernel's per-token line (1, 2, 4, 8, 16 tokens: a
        # mean of log time there lags the steep curve)
        seg = _segment(tok, period, split)
        ly_mean = _running_mean(tok, ly, seg)
        if split > 0:
            ly_mean = np.where(tok <= split, lb + _running_mean(tok, ly - lb, seg), ly_mean)
        ly = ly_mean
        if split > 0:
            lo = tok <= split
            ly = np.concatenate([np.maximum.accumulate(ly[lo]), np.maximum.accumulate(ly[~lo])])
        else:
            ly = np.maximum.accumulate(ly)
        out.append((float(p), float(w), tok, ly - lb, float(period)))
    return out


def _wave_split(
    tok: np.ndarray, val: np.ndarray, period: float, split: float, window: float
) -> tuple[np.ndarray, np.ndarray]:
    """A curve's log ratio split into a smooth part (its mean over `window` tokens centred on
    each point, read as `_interp_seg` reads it: a window of whole waves averages the wave
    sawtooth out) and the wave sawtooth (the rest), both at the curve's measured token counts.
    A curve without a period is all smooth. A held-out width reads the smooth part at its
    neighbour's matched element count and the sawtooth at its own token count: the waves step at
    the same token counts for every width (one block per token), the regime (L2-resident,
    HBM-bound) follows the elements."""
    if not np.isfinite(period) or len(tok) < 2:
        return val, np.zeros_like(val)
    # the curve on a 1-token grid, integrated (trapezoids)
    g = np.arange(np.floor(tok[0]), np.ceil(tok[-1]) + 1.0)
    vg = _interp_seg(g, tok, val, period, split)
    cum = np.concatenate([[0.0], np.cumsum(0.5 * (vg[1:] + vg[:-1]))])
    lo = np.maximum(tok - 0.5 * window, g[0])
    hi = np.minimum(tok + 0.5 * window, g[-1])
    if split > 0:  # the window stays on the point's side of a kernel switch
        small = tok <= split
        hi = np.where(small, np.minimum(hi, split), hi)
        lo = np.where(small, lo, np.maximum(lo, min(split + 1.0, g[-1])))
    smooth = val.copy()
    ok = hi > lo
    smooth[ok] = (np.interp(hi[ok], g, cum) - np.interp(lo[ok], g, cum)) / (hi[ok] - lo[ok])
    return smooth, val - smooth


@dataclass(frozen=True)
class CurvePrep:
    """The measured curves of one operator family grouped by tp: the distinct tps, their log2,
    and per tp the curve indices sorted by width with their log widths."""

    tps: np.ndarray
    l2t: np.ndarray
    ent: list[np.ndarray]
    lw: list[np.ndarray]


def _curve_prep(c_tp: np.ndarray, c_width: np.ndarray) -> CurvePrep:
    tps = np.unique(c_tp)
    ents, lws = [], []
    for p in tps:
        ent = np.flatnonzero(c_tp == p)
        ent = ent[np.argsort(c_width[ent])]
        ents.append(ent)
        lws.append(np.log(c_width[ent]))
    return CurvePrep(tps, np.log2(tps), ents, lws)


# Token counts a stacked family's lookup table of knot intervals may hold (`CurveStack.lut`):
# a shipped family's curves share one grid of 4,097-32,769 tokens (16-128 kB).
LUT_MAX_TOKENS = 1 << 20


@dataclass(frozen=True)
class CurveStack:
    """One operator family's measured curves stacked end to end, for `_stack_eval`: every row
    of a batch reads its two neighbour curves in one pass of numpy calls, whatever the number
    of curves (the walk curve by curve cost a pass over the rows per curve, and a binary search
    per row and curve). Made once per family from the fitted state.

    Curve c's knots are tok[start[c] : last[c] + 1] (a one-knot curve gets a second knot of the
    same value one token on: np.interp reads it as a constant either way). A row's knot
    interval on its curve comes from `lut` when every knot is a whole token count (the measured
    curves are): knots up to token m of curve c = lut[lut_at[c] + m], m = floor(tokens), one
    table per distinct grid of knots; else from one searchsorted over `key`, which places the
    curves end to end (curve c's knots at base[c] + tok - tok[start[c]], one token apart from
    the curve before)."""

    split: float  # the family's kernel switch (tokens; 0: none)
    mids: np.ndarray | None  # midpoints between the measured tps in log2; None: one tp
    g_lw: np.ndarray  # (tp groups, widths) log widths, increasing, padded with +inf
    g_ent: np.ndarray  # (tp groups, widths) curve of each width, padded with the last one
    g_len: np.ndarray  # (tp groups,) widths measured at each tp
    c_w: np.ndarray  # (curves,) width of each curve
    per: np.ndarray  # (curves,) wave period in tokens (inf: none)
    seg_full: np.ndarray  # (curves,) read as `_interp_seg`'s segments (else as np.interp)
    start: np.ndarray  # (curves,) index of each curve's first knot
    last: np.ndarray  # (curves,) ... and of its last
    lut_at: np.ndarray | None  # (curves,) offset of each curve's table, less its first token
    lut: np.ndarray | None  # knots up to each whole token count (None: search `key`)
    base: np.ndarray  # (curves,) search key of each curve's first knot
    key: np.ndarray  # (knots,) search keys, increasing
    tok: np.ndarray  # (knots,) token counts
    val: np.ndarray  # (knots,) log ratios
    kseg: np.ndarray  # (knots,) segment of each knot (`_segment`, its curve's period)
    smooth: np.ndarray | None  # (knots,) `_wave_split` smooth part; None: whole curves
    saw: np.ndarray | None  # (knots,) ... and wave sawtooth
    kseg_s: np.ndarray  # (knots,) segment of each knot without a period (smooth reads)


def _curve_stack(
    c_tp: np.ndarray,
    c_w: np.ndarray,
    c_tok: list[np.ndarray],
    c_val: list[np.ndarray],
    c_per: np.ndarray,
    split: float,
    c_parts: list[tuple[np.ndarray, np.ndarray]] | None,
) -> CurveStack:
    prep = _curve_prep(c_tp, c_w)
    n_g = len(prep.tps)
    width_max = max((len(e) for e in prep.ent), default=1)
    g_lw = np.full((n_g, width_max), np.inf)
    g_ent = np.zeros((n_g, width_max), dtype=np.int64)
    for g, (ent, lw) in enumerate(zip(prep.ent, prep.lw, strict=True)):
        g_lw[g, : len(lw)] = lw
        g_ent[g, :] = ent[-1]
        g_ent[g, : len(ent)] = ent
    per = np.asarray(c_per, dtype=np.float64)
    seg_full = np.array([len(t) >= 2 for t in c_tok], dtype=bool) & (np.isfinite(per) | (split > 0))

    def two(a: np.ndarray, step: float = 0.0) -> np.ndarray:  # a one-knot curve: two knots
        a = np.asarray(a, dtype=np.float64)
        return np.array([a[0], a[0] + step]) if len(a) == 1 else a

    tok = [two(t, 1.0) for t in c_tok]
    lens = np.array([len(t) for t in tok], dtype=np.int64)
    start = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
    spans = np.array([t[-1] - t[0] + 1.0 for t in tok])
    base = np.concatenate([[0.0], np.cumsum(spans)[:-1]])
    lut_at = lut = None
    if tok and all(np.array_equal(t, np.floor(t)) for t in tok) and spans.sum() <= LUT_MAX_TOKENS:
        tables: dict[bytes, int] = {}  # curves on the same grid share its table
        parts, at, used = [], [], 0
        for t in tok:
            k = t.tobytes()
            if k not in tables:
                tables[k] = used
                m = np.arange(t[0], t[-1] + 1.0)
                parts.append(np.searchsorted(t, m, side="right"))
                used += len(m)
            at.append(tables[k] - int(t[0]))
        lut_at, lut = np.array(at, dtype=np.int64), np.concatenate(parts).astype(np.int64)

    def flat(arrays: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(arrays) if arrays else np.zeros(0)

    return CurveStack(
        split=float(split),
        mids=None if n_g <= 1 else 0.5 * (prep.l2t[1:] + prep.l2t[:-1]),
        g_lw=g_lw,
        g_ent=g_ent,
        g_len=np.array([len(e) for e in prep.ent], dtype=np.int64),
        c_w=np.asarray(c_w, dtype=np.float64),
        per=per,
        seg_full=seg_full,
        start=start,
        last=start + lens - 1,
        lut_at=lut_at,
        lut=lut,
        base=base,
        key=flat([b + (t - t[0]) for b, t in zip(base, tok, strict=True)]),
        tok=flat(tok),
        val=flat([two(v) for v in c_val]),
        kseg=flat([_segment(t, p, split) for t, p in zip(tok, per, strict=True)]),
        smooth=None if c_parts is None else flat([two(a) for a, _ in c_parts]),
        saw=None if c_parts is None else flat([two(b) for _, b in c_parts]),
        kseg_s=flat([_segment(t, np.inf, split) for t in tok]),
    )


def _stack_interval(st: CurveStack, ce: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Per entry, the flat index of the upper knot of x's interval on curve ce: as
    `searchsorted(tok_ce, x, side="right")` clipped to 1 .. len - 1, plus the curve's start."""
    s, e = st.start[ce], st.last[ce]
    t0 = st.tok[s]
    xc = np.minimum(np.maximum(x, t0), st.tok[e])  # beyond the ends: the end intervals
    if st.lut is not None and st.lut_at is not None:  # whole-token knots: knots <= floor(x)
        hi = s + st.lut[st.lut_at[ce] + xc.astype(np.int64)]
    else:
        hi = np.searchsorted(st.key, st.base[ce] + (xc - t0), side="right")
        # the key's sum may round across a knot (its knots lie >= 1 token apart): one step
        # back or on, by the knots themselves
        hi += (hi <= e) & (st.tok[np.minimum(hi, e)] <= xc)
        hi -= (hi > s) & (st.tok[np.maximum(hi - 1, s)] > xc)
    return np.minimum(np.maximum(hi, s + 1), e)


def _stack_read(
    st: CurveStack,
    hi: np.ndarray,
    x: np.ndarray,
    val: np.ndarray,
    kseg: np.ndarray,
    seg: np.ndarray,
    per: np.ndarray,
) -> np.ndarray:
    """The values `val` of each entry's curve at x (`hi`: `_stack_interval`), as `_interp_seg`
    reads them: where `seg`, linearly within a segment (period `per`, the family's split) and
    from x's own side across a step, else as np.interp does (the same formula, to the bit)."""
    lo = hi - 1
    t_lo, t_hi, v_lo, v_hi = st.tok[lo], st.tok[hi], val[lo], val[hi]
    dt = t_hi - t_lo
    out = None
    if seg.any():  # _interp_seg: the weight of the upper knot, 1 or 0 across a step
        f = np.minimum(np.maximum((x - t_lo) / dt, 0.0), 1.0)
        s_lo, s_hi = kseg[lo], kseg[hi]
        cross = s_lo != s_hi
        if cross.any():
            s_x = np.ceil(x / per)  # `_segment`, a period per entry (ceil(x / inf) = 0: none)
            if st.split > 0:
                s_x = s_x + 1e6 * (x > st.split)
            f = np.where(cross & (s_x == s_hi), 1.0, np.where(cross & (s_x == s_lo), 0.0, f))
        out = v_lo + f * (v_hi - v_lo)
    if not seg.all():  # np.interp: the end values at and beyond either end, a knot's on it
        lin = (v_hi - v_lo) / dt * (x - t_lo) + v_lo
        lin = np.where(x >= t_hi, v_hi, np.where(x <= t_lo, v_lo, lin))
        out = lin if out is None else np.where(seg, out, lin)
    return out


def _stack_eval(st: CurveStack, t: np.ndarray, width: np.ndarray, tp: np.ndarray) -> np.ndarray:
    """Every row's log correction (the walk curve by curve its tests hold it to, bit for bit)
    in one pass over the stacked curves (see `CurveStack`)."""
    n = len(t)
    if len(st.c_w) == 0:
        return np.zeros(n)
    x = np.log(np.maximum(width, 1.0))
    if st.mids is None:  # one measured tp: its widths
        n_w = int(st.g_len[0])
        lw, ent = st.g_lw[0, :n_w], st.g_ent[0, :n_w]
        x = np.minimum(np.maximum(x, lw[0]), lw[-1])
        j = np.searchsorted(lw, x, side="right") - 1
        j = np.minimum(np.maximum(j, 0), max(n_w - 2, 0))
        k = np.minimum(j + 1, n_w - 1)
        lw_j, lw_k, ce_j, ce_k = lw[j], lw[k], ent[j], ent[k]
    else:  # the nearest measured tp in log2 (midpoints between neighbours), then its widths
        ip = np.searchsorted(st.mids, np.log2(np.maximum(tp, 1.0)))
        n_w = st.g_len[ip]
        at = ip * st.g_lw.shape[1]  # flat index of the tp's first width (1-D gathers)
        lw, ent = st.g_lw.ravel(), st.g_ent.ravel()
        x = np.minimum(np.maximum(x, lw[at]), lw[at + n_w - 1])
        j = np.full(n, -1, dtype=np.int64)
        for c in range(st.g_lw.shape[1]):  # searchsorted(side="right") in each row's tp
            j += lw[at + c] <= x
        j = np.minimum(np.maximum(j, 0), np.maximum(n_w - 2, 0))
        k = np.minimum(j + 1, n_w - 1)
        lw_j, lw_k, ce_j, ce_k = lw[at + j], lw[at + k], ent[at + j], ent[at + k]
    span = lw_k - lw_j
    f = np.where(span > 0, (x - lw_j) / np.where(span > 0, span, 1.0), 0.0)
    # each row's neighbour curves with a weight (the lower one unless f = 1, the upper one
    # where it differs and f > 0), lower ones first: the order the walk curve by curve adds them in
    use_j, use_k = f < 1.0, (k != j) & (f > 0.0)
    if not use_k.any() and use_j.all():  # every row on a measured width (or beyond them all)
        return _stack_values(st, ce_j, t, width) * (1.0 - f)
    r_j, r_k = np.flatnonzero(use_j), np.flatnonzero(use_k)
    rows = np.concatenate([r_j, r_k])
    ce = np.concatenate([ce_j[r_j], ce_k[r_k]])
    part = _stack_values(st, ce, t[rows], width[rows]) * np.concatenate([(1.0 - f)[r_j], f[r_k]])
    v = np.zeros(n)
    v[r_j] += part[: len(r_j)]
    v[r_k] += part[len(r_j) :]
    return v


def _stack_values(st: CurveStack, ce: np.ndarray, t: np.ndarray, width: np.ndarray) -> np.ndarray:
    """Curve ce's log correction of each entry (a row and one of its neighbour curves), as
    the walk curve by curve reads one curve."""
    # the same element count on the neighbour curve: past a few waves these kernels cost what
    # their elements cost (Llama-2-7B at T tokens ~ 70B at T / 2)
    te = t * (width / st.c_w[ce]) ** CURVE_E_MATCH
    split = st.split
    if split > 0:  # ... on the row's own side of a kernel switch (a token count)
        te = np.where(t <= split, np.minimum(te, split), np.maximum(te, split + 1e-3))
    per = st.per[ce]
    moved = None
    if st.smooth is not None:  # a periodic curve read at another token count (below)
        moved = np.isfinite(per) & (te != t)
        if not moved.any():
            moved = None
    if moved is None:
        return _stack_read(
            st, _stack_interval(st, ce, te), te, st.val, st.kseg, st.seg_full[ce], per
        )
    out = np.empty(len(te))
    same = np.flatnonzero(~moved)
    if same.size:
        cs, ts_ = ce[same], te[same]
        hi = _stack_interval(st, cs, ts_)
        out[same] = _stack_read(st, hi, ts_, st.val, st.kseg, st.seg_full[cs], per[same])
    # the smooth part at the matched element count (no period: segments by the kernel switch
    # alone), the wave sawtooth at the row's own token count (a periodic curve has >= 4 knots)
    m = np.flatnonzero(moved)
    cm, tm, om = ce[m], te[m], t[m]
    assert st.smooth is not None and st.saw is not None
    sm = _stack_read(
        st,
        _stack_interval(st, cm, tm),
        tm,
        st.smooth,
        st.kseg_s,
        np.full(len(m), split > 0),
        np.full(len(m), np.inf),
    )
    sw = _stack_read(
        st, _stack_interval(st, cm, om), om, st.saw, st.kseg, np.ones(len(m), bool), per[m]
    )
    out[m] = sm + sw
    return out


# Rows past the measured elements read the curves and the base at the cap (tokens = the
# family's largest measured element count / width): when at least this many do, they are
# priced once per distinct (width, tp) (`_priced_once`; 96% of an all-distinct batch's prefill
# norms: ~750 evaluations instead of 20,000).
ONCE_MIN_ROWS = 64
ONCE_MAX_PAIRS = 32  # ... and share at most this many (width, tp) pairs


def _priced_once(
    over: np.ndarray, ws: np.ndarray, ps: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """(rows to price, each row's priced row) when the rows `over` the measured elements are
    many and share a few (width, tp): the other rows each, those once per (width, tp); None:
    price every row."""
    o = np.flatnonzero(over)
    if len(o) < ONCE_MIN_ROWS:
        return None
    wo, po = ws[o], ps[o]
    # the pairs one at a time (the first row not yet coded, every row equal to it): a few
    # passes over the rows cost less than sorting them (np.unique)
    code = np.full(len(o), -1, dtype=np.int64)
    first: list[int] = []
    pos = 0
    while len(first) < ONCE_MAX_PAIRS:
        code[(wo == wo[pos]) & (po == po[pos])] = len(first)
        first.append(pos)
        pos = int(np.argmax(code < 0))
        if code[pos] >= 0:  # every row coded
            break
    else:
        return None  # more pairs (or a NaN, which equals nothing)
    rest = np.flatnonzero(~over)
    back = np.empty(len(ws), dtype=np.int64)
    back[rest] = np.arange(len(rest))
    back[o] = len(rest) + code
    return np.concatenate([rest, o[first]]), back


def _fit_one(
    t: np.ndarray,
    width: np.ndarray,
    tp: np.ndarray,
    y_us: np.ndarray,
    n_sms: int,
    split: float = 0.0,
) -> tuple[float, np.ndarray, float]:
    """Best (rows_per_wave, coef, in-sample MAPE %) over the wave candidates."""
    nk = len(LOG_E_KNOTS)
    pen = np.zeros((2 * (nk - 2), 1 + 2 * nk + N_TP + N_SPLIT))
    pen[: nk - 2, 1 : 1 + nk] = _curves.second_difference(nk)
    pen[nk - 2 :, 1 + nk : 1 + 2 * nk] = _curves.second_difference(nk)
    pen *= np.sqrt(SMOOTH * len(y_us))
    best = None
    for mult in WAVE_CANDIDATES:
        c_rows = mult * n_sms
        X, _ = _features(t, width, tp, c_rows, split=split)
        # a feature with no variation (e.g. every row tp 1) would be unidentified: drop it
        keep = np.ptp(X, axis=0) > 0
        keep[0] = True
        coef = np.zeros(X.shape[1])
        lower = np.full(X.shape[1], -np.inf)
        lower[: 1 + 2 * nk] = 0.0  # launch and per-wave costs are >= 0
        lower[-1] = 0.0  # ... and so is the small kernel's per-token cost
        coef[keep] = _curves.relative_lstsq(X[:, keep], y_us, pen[:, keep], lower=lower[keep])
        err = mape_pct(X @ coef, y_us)
        if best is None or err < best[2] - 1e-9:
            best = (float(c_rows), coef, err)
    assert best is not None
    return best


def _base_items_us(
    c: np.ndarray,
    cr: float,
    ts: np.ndarray,
    ws: np.ndarray,
    ps: np.ndarray,
    wv: np.ndarray,
    split: float = 0.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Structural items (launch, per-wave, per-width memory, tp terms) in us for `wv` waves;
    the small kernel below a token-count switch counts as per-wave (per-row) work."""
    nk = len(LOG_E_KNOTS)
    w_k = ws * 1e-3
    unit = cr if np.isfinite(cr) else 1000.0
    le = np.log(np.maximum(wv * unit * ws, 1.0))
    per_wave = _curves.hat_eval(le, LOG_E_KNOTS, c[1 : 1 + nk])
    per_width = _curves.hat_eval(le, LOG_E_KNOTS, c[1 + nk : 1 + 2 * nk])
    la, lb = _tp_levels(ps)
    ct = c[1 + 2 * nk :]
    tp_us = la * (ct[0] + ct[1] * wv * w_k + ct[2] * wv) + lb * (
        ct[3] + ct[4] * wv * w_k + ct[5] * wv
    )
    wave_us = wv * per_wave
    if split > 0 and len(ct) >= N_TP + N_SPLIT:
        wave_us = wave_us + (ts <= split) * (ct[N_TP] + ct[N_TP + 1] * ts)
    return np.full_like(ts, c[0]), wave_us, wv * w_k * per_width, tp_us


def _segment1(x: float, period: float, split: float) -> float:
    """`_segment` of one token count."""
    seg = math.ceil(x / period) if math.isfinite(period) else 0.0
    return seg + 1e6 * (x > split) if split > 0 else seg


def _interp1(x: float, xs: list[float], ys: list[float]) -> float:
    """np.interp of one number over increasing `xs`, in plain Python (the same formula)."""
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    j = bisect_right(xs, x) - 1
    return (ys[j + 1] - ys[j]) / (xs[j + 1] - xs[j]) * (x - xs[j]) + ys[j]


def _interp1_pair(x: float, xs: list[float], ya: list[float], yb: list[float]) -> tuple[float, ...]:
    """`_interp1` of one number over two value lists on the same knots (one search)."""
    if x <= xs[0]:
        return ya[0], yb[0]
    if x >= xs[-1]:
        return ya[-1], yb[-1]
    j = bisect_right(xs, x) - 1
    f = x - xs[j]
    span = xs[j + 1] - xs[j]
    return (ya[j + 1] - ya[j]) / span * f + ya[j], (yb[j + 1] - yb[j]) / span * f + yb[j]


_KNOTS = LOG_E_KNOTS.tolist()


def _interp_seg1(
    x: float, tok: list[float], val: list[float], period: float, split: float
) -> float:
    """`_interp_seg` of one token count, over lists (a few rows: plain Python)."""
    if len(tok) < 2 or (not math.isfinite(period) and split <= 0):
        return _interp1(x, tok, val) if tok else float("nan")
    hi = min(max(bisect_right(tok, x), 1), len(tok) - 1)
    lo = hi - 1
    t_lo = tok[lo]
    f = min(max((x - t_lo) / (tok[hi] - t_lo), 0.0), 1.0)
    s_lo, s_hi = _segment1(tok[lo], period, split), _segment1(tok[hi], period, split)
    if s_lo != s_hi:  # across a step: the weight of the neighbour on x's side is 1
        s_x = _segment1(x, period, split)
        f = 1.0 if s_x == s_hi else (0.0 if s_x == s_lo else f)
    v_lo = val[lo]
    return v_lo + f * (val[hi] - v_lo)


@dataclass(frozen=True)
class _RowFamily:
    """One operator family's fitted state as Python numbers, for `_predict_rows`."""

    c: list[float]
    cr: float
    e_max: float
    by_width: bool
    split: float
    mids: list[float] | None  # midpoints between the measured tps in log2; None: one tp
    groups: list[tuple[list[int], list[float]]]  # per tp: curve indices by width, log widths
    c_w: list[float]
    tok: list[list[float]]
    val: list[list[float]]
    per: list[float]
    parts: list[tuple[list[float], list[float]]] | None
    # the coefficients `c` split as `_predict_rows` reads them (sliced once per model, not per
    # row): per-wave and per-width curves over LOG_E_KNOTS, then the tp and kernel-split terms
    c_wave: list[float]
    c_width: list[float]
    ct: list[float]


class LayerOpModel(_base.Model):
    """Latency of vidur's non-GEMM layer operators on one GPU (see module doc).

    predict(op, num_tokens, d_model, n_heads, n_kv_heads, d_ff, tensor_parallel, gated_mlp=True)
    -> latency_s, launch_s, t_wave_s, t_memory_s, t_tp_s (items sum to latency_s), waves,
    regime (index of the element-count knot nearest the shape), covered (bool).
    """

    kind: ClassVar[str] = "layer_op"  # the manifest's kind; dse.models.MODEL_CLASSES
    gpu_fields: ClassVar[tuple[str, ...]] = ("n_sms",)  # rows per wave, the wave sawtooth

    def __init__(self, gpu: str = "h100_sxm") -> None:
        self.gpu = gpu

    # ---- fitting --------------------------------------------------------------------------
    @threaded_fit
    def fit(self, df: pd.DataFrame) -> Self:
        """Fit on layer_op rows of one GPU (rows of other GPUs and GEMM ops are ignored)."""
        spec = get_gpu(self.gpu)
        self.gpu_spec_ = _base.gpu_constants(spec, self.gpu_fields)
        n_sms = spec.n_sms
        d = df[(df["gpu"] == self.gpu) & df["op"].isin(LAYER_OPS)]
        if d.empty:
            raise DataError(f"no layer_op rows for gpu {self.gpu!r} (ops {', '.join(LAYER_OPS)})")
        # token-count kernel switches this model's curves are built with (none in artifacts
        # fitted before them, which then predict as before: from_state)
        self.kernel_split_ = dict(KERNEL_SPLIT_TOKENS)
        keys, rows_pw, coefs = [], [], []
        c_key, c_tp, c_w, c_tok, c_val, c_period = [], [], [], [], [], []
        gated_all = d["gated_mlp"].to_numpy(bool) if "gated_mlp" in d else np.ones(len(d), bool)
        for op in LAYER_OPS:
            for gated in (True, False):
                sel = (d["op"].to_numpy() == op) & (gated_all == gated)
                if sel.sum() < 8:
                    continue
                g = d[sel]
                t, width = op_geometry(
                    g["op"].to_numpy(),
                    {**{c: g[c].to_numpy() for c in INPUTS}, "gated_mlp": np.full(len(g), gated)},
                )
                tp = g["tensor_parallel"].to_numpy(np.float64)
                if op in CURVES_BY_WIDTH_ONLY and WIDTH_ONLY_NO_TP:
                    tp = np.ones_like(tp)  # a function of (tokens, width) alone
                y_us = g["latency_s"].to_numpy() * 1e6
                split = KERNEL_SPLIT_TOKENS.get(op, 0.0)
                c_rows, coef, _ = _fit_one(t, width, tp, y_us, n_sms, split)
                X, _ = _features(t, width, tp, c_rows, smooth=True, split=split)
                log_base = np.log(np.maximum(X @ coef, 0.1))
                tp_c = np.ones_like(tp) if op in CURVES_BY_WIDTH_ONLY else tp
                curves = _curve_table(t, width, tp_c, np.log(y_us), log_base, n_sms, split)
                for p, w, tok, val, period in curves:
                    c_period.append(period)
                    c_key.append(len(keys))
                    c_tp.append(p)
                    c_w.append(w)
                    c_tok.append(tok)
                    c_val.append(val)
                keys.append(op if gated else f"{op}:nongated")
                rows_pw.append(c_rows)
                coefs.append(coef)
        self.keys_ = np.array(keys, dtype=str)
        self.rows_per_wave_ = np.array(rows_pw, dtype=np.float64)
        self.coef_ = np.array(coefs, dtype=np.float64)
        self.curve_key_ = np.array(c_key, dtype=np.int64)
        self.curve_tp_ = np.array(c_tp, dtype=np.float64)
        self.curve_width_ = np.array(c_w, dtype=np.float64)
        self.curve_period_ = np.array(c_period, dtype=np.float64)
        self.curve_tokens_ = c_tok
        self.curve_values_ = c_val
        self.curve_parts_ = self._wave_parts() if CURVE_WAVE_SPLIT else None
        rng = {c: d[c].to_numpy(np.float64) for c in INPUTS}
        t_all, w_all = op_geometry(d["op"].to_numpy(), {**rng, "gated_mlp": gated_all})
        rng["elements"] = t_all * w_all
        self.range_ = _base.fitted_range(rng)
        return self

    # ---- prediction -----------------------------------------------------------------------
    def _row_key_index(self, op: np.ndarray, gated: np.ndarray) -> np.ndarray:
        """Coefficient row per input row: the op's own family, else the gated one; -1 = none."""
        lookup = self._pack("lookup", lambda: {str(k): i for i, k in enumerate(self.keys_)})
        if op.size <= FEW_ROWS:  # a few rows: the same rule row by row, no string unique
            family = self._family_of(lookup)
            keys = [
                family(name, g)
                for name, g in zip(op.ravel().tolist(), gated.ravel().tolist(), strict=True)
            ]
            return np.array(keys, dtype=np.int64).reshape(op.shape)
        if op.size and op.strides == (0,):  # one operator for the whole batch (a broadcast
            # scalar): no string unique, no comparison of every row's name
            g_i = lookup.get(str(op[0]), -1)
            n_i = lookup.get(f"{op[0]}:nongated", g_i)
            return np.where(gated, g_i if g_i >= 0 else n_i, n_i).astype(np.int64)
        idx = np.full(op.shape, -1, dtype=np.int64)
        names = np.unique(op)
        for name in names:
            sel = op == name
            g_i = lookup.get(str(name), -1)
            n_i = lookup.get(f"{name}:nongated", g_i)
            idx[sel] = np.where(gated[sel], g_i if g_i >= 0 else n_i, n_i)
        return idx

    def _family_of(self, lookup: dict[str, int]) -> Callable[[str, bool], int]:
        """(operator name, gated) -> the family row the operator reads (its own, else the
        gated one; -1: none), as `_row_key_index`; each pair worked out once per model (the
        names and the fitted families alone decide it)."""
        memo: dict[tuple[str, bool], int] = self._pack("family_of", dict)

        def family(name: str, g: bool) -> int:
            i = memo.get((name, g))
            if i is None:
                g_i = lookup.get(name, -1)
                n_i = lookup.get(f"{name}:nongated", g_i)
                i = memo[(name, g)] = g_i if g and g_i >= 0 else n_i
            return i

        return family

    def _pack(self, key: Any, make: Callable[[], Any]) -> Any:
        """What prediction derives from the fitted state alone (the family lookup, each
        family's curves), made once per model: a one-row call would otherwise rebuild it. The
        cache is keyed to the state arrays' identities, so a refit or a reloaded state
        rebuilds it."""
        stamp = (id(self.keys_), id(self.coef_), id(getattr(self, "curve_key_", None)))
        packs = self.__dict__.get("_packs")
        if packs is None or packs[0] != stamp:
            packs = (stamp, {})
            self.__dict__["_packs"] = packs
        if key not in packs[1]:
            packs[1][key] = make()
        return packs[1][key]

    def _curves_of(self, i: int) -> tuple[Any, ...]:
        """Family i's measured curves: (indices, largest element count, by width only, kernel
        switch, tps, widths, tokens, values, periods, wave parts, CurvePrep)."""
        ce = np.flatnonzero(self.curve_key_ == i)
        family = str(self.keys_[i]).split(":")[0]
        c_tp, c_w = self.curve_tp_[ce], self.curve_width_[ce]
        return (
            ce,
            max(float(self.curve_tokens_[e][-1] * self.curve_width_[e]) for e in ce),
            family in CURVES_BY_WIDTH_ONLY,
            self.kernel_split_.get(family, 0.0),
            c_tp,
            c_w,
            [self.curve_tokens_[e] for e in ce],
            [self.curve_values_[e] for e in ce],
            self.curve_period_[ce],
            None if self.curve_parts_ is None else [self.curve_parts_[e] for e in ce],
            _curve_prep(c_tp, c_w),
        )

    def _stack_of(self, i: int) -> CurveStack:
        """Family i's measured curves stacked for `_stack_eval`."""
        _, _, _, split, c_tp, c_w, c_tok, c_val, c_per, c_parts, _ = self._pack(
            ("curves", i), lambda: self._curves_of(i)
        )
        return _curve_stack(c_tp, c_w, c_tok, c_val, c_per, split, c_parts)

    def _row_family(self, i: int) -> _RowFamily:
        _, e_max, by_width, split, _, c_w, c_tok, c_val, c_per, c_parts, prep = self._pack(
            ("curves", i), lambda: self._curves_of(i)
        )
        l2t = prep.l2t
        c = self.coef_[i].tolist()
        nk = len(LOG_E_KNOTS)
        return _RowFamily(
            c=c,
            cr=float(self.rows_per_wave_[i]),
            e_max=float(e_max),
            by_width=bool(by_width),
            split=float(split),
            mids=None if len(prep.tps) <= 1 else (0.5 * (l2t[1:] + l2t[:-1])).tolist(),
            groups=[(e.tolist(), w.tolist()) for e, w in zip(prep.ent, prep.lw, strict=True)],
            c_w=np.asarray(c_w, dtype=np.float64).tolist(),
            tok=[np.asarray(x, dtype=np.float64).tolist() for x in c_tok],
            val=[np.asarray(x, dtype=np.float64).tolist() for x in c_val],
            per=np.asarray(c_per, dtype=np.float64).tolist(),
            parts=None
            if c_parts is None
            else [
                (np.asarray(a, dtype=np.float64).tolist(), np.asarray(b, dtype=np.float64).tolist())
                for a, b in c_parts
            ],
            c_wave=c[1 : 1 + nk],
            c_width=c[1 + nk : 1 + 2 * nk],
            ct=c[1 + 2 * nk :],
        )

    def _curve_row(self, fam: _RowFamily, t: float, w: float, tp: float) -> float:
        """`_stack_eval` of one row, in Python floats."""
        if not fam.groups:
            return 0.0
        ip = 0 if fam.mids is None else bisect_left(fam.mids, math.log2(max(tp, 1.0)))
        ent, lw = fam.groups[ip]
        x = min(max(math.log(max(w, 1.0)), lw[0]), lw[-1])
        j = min(max(bisect_right(lw, x) - 1, 0), max(len(ent) - 2, 0))
        k = min(j + 1, len(ent) - 1)
        span = lw[k] - lw[j]
        f = (x - lw[j]) / span if span > 0 else 0.0
        split = fam.split
        v = 0.0
        for e, wgt, use in ((j, 1.0 - f, f < 1.0), (k, f, k != j and f > 0.0)):
            if not use:
                continue
            ce = ent[e]
            te = t * (w / fam.c_w[ce]) ** CURVE_E_MATCH
            if split > 0:
                te = min(te, split) if t <= split else max(te, split + 1e-3)
            tok, per = fam.tok[ce], fam.per[ce]
            if fam.parts is not None and math.isfinite(per) and te != t:
                smooth, saw = fam.parts[ce]
                val = _interp_seg1(te, tok, smooth, math.inf, split)
                val += _interp_seg1(t, tok, saw, per, split)
            else:
                val = _interp_seg1(te, tok, fam.val[ce], per, split)
            v += wgt * val
        return v

    def _predict_rows(
        self, idx: np.ndarray, t: np.ndarray, width: np.ndarray, tp: np.ndarray
    ) -> dict[str, np.ndarray]:
        """The items, factor and waves of `predict`, row by row in plain Python (few rows)."""
        n = len(idx)
        # Python lists, made arrays once at the end (not a numpy store per item)
        items = [[math.nan] * n for _ in range(4)]
        waves = [0.0] * n
        factor = [1.0] * n
        seen: dict[tuple[int, float, float, float], int] = {}
        # each family's state as Python numbers, made once per model (`_pack`, one look-up)
        fams: dict[int, _RowFamily] = self._pack("rows", dict)
        for r, (i, t_r, w, p) in enumerate(
            zip(idx.tolist(), t.tolist(), width.tolist(), tp.tolist(), strict=True)
        ):
            if i < 0:
                continue
            # a row like an earlier one (the input and final norm, the two residual adds)
            same = seen.setdefault((i, t_r, w, p), r)
            if same != r:
                for col in items:
                    col[r] = col[same]
                factor[r], waves[r] = factor[same], waves[same]
                continue
            fam = fams.get(i)
            if fam is None:
                fam = fams[i] = self._row_family(i)
            if fam.by_width and WIDTH_ONLY_NO_TP:
                p = 1.0
            t_fit = min(t_r, max(fam.e_max / w, 1.0))
            grow = t_r / t_fit
            cr, c, split = fam.cr, fam.c, fam.split
            if math.isfinite(cr):
                wv, wvs, unit = float(math.ceil(t_fit / cr)), max(t_fit / cr, 1.0), cr
            else:
                wv = wvs = t_fit / 1000.0
                unit = 1000.0
            # _base_items_us at the smooth waves
            w_k = w * 1e-3
            le = math.log(max(wvs * unit * w, 1.0))
            per_wave, per_width = _interp1_pair(le, _KNOTS, fam.c_wave, fam.c_width)
            l2 = math.log2(max(p, 1.0))
            la, lb = min(l2, 1.0), max(l2 - 1.0, 0.0)
            ct = fam.ct
            tp_us = la * (ct[0] + ct[1] * wvs * w_k + ct[2] * wvs) + lb * (
                ct[3] + ct[4] * wvs * w_k + ct[5] * wvs
            )
            wave_us = wvs * per_wave
            if split > 0 and len(ct) >= N_TP + N_SPLIT:
                wave_us = wave_us + (1.0 if t_fit <= split else 0.0) * (
                    ct[N_TP] + ct[N_TP + 1] * t_fit
                )
            curve = self._curve_row(fam, t_fit, w, 1.0 if fam.by_width else p)
            f = math.exp(curve) * grow
            for col, v in zip(items, (c[0], wave_us, wvs * w_k * per_width, tp_us), strict=True):
                col[r] = v * 1e-6 * f
            factor[r] = f
            waves[r] = wv * grow
        keys = ("launch_s", "t_wave_s", "t_memory_s", "t_tp_s")
        out = dict(zip(keys, np.array(items, dtype=np.float64), strict=True))
        return {**out, "factor": np.array(factor), "waves": np.array(waves)}

    def predict(self, *, width: np.ndarray | None = None, **arrays: Any) -> dict[str, np.ndarray]:
        """Itemised latency per row; ops this model does not cover get NaN and covered=False.
        `width`: the rows' widths (`op_geometry`), when the caller has them."""
        n = _base.batch_size_of(arrays)
        op = _base.as_shape(np.asarray(arrays.get("op", "input_layernorm"), dtype=str), (n,))
        vals = {c: _base.as_float(c, arrays[c], n) for c in INPUTS}
        gated = _base.as_shape(np.asarray(arrays.get("gated_mlp", True), dtype=bool), (n,))
        if width is None:
            t, width = op_geometry(op, {**vals, "gated_mlp": gated})
        else:
            t = vals["num_tokens"]
        tp = vals["tensor_parallel"]
        idx = self._row_key_index(op, gated)
        if n <= FEW_ROWS:
            rows = self._predict_rows(idx, _base.as_shape(t, (n,)), _base.as_shape(width, (n,)), tp)
            return self._outputs(rows, rows.pop("factor"), rows.pop("waves"), t, width, idx)
        out = {k: np.full(n, np.nan) for k in ("launch_s", "t_wave_s", "t_memory_s", "t_tp_s")}
        waves = np.zeros(n)
        factor = np.ones(n)
        # one operator family for the whole batch (the adapters' calls): no unique, a slice
        whole = n > 0 and idx[0] >= 0 and bool((idx == idx[0]).all())
        for i in [int(idx[0])] if whole else np.unique(idx[idx >= 0]):
            sel = slice(None) if whole else idx == i
            c = self.coef_[i]
            cr = self.rows_per_wave_[i]
            ts, ws, ps = t[sel], width[sel], tp[sel]
            by_width = str(self.keys_[i]).split(":")[0] in CURVES_BY_WIDTH_ONLY
            if by_width and WIDTH_ONLY_NO_TP:
                ps = np.ones_like(ps)
            # beyond the largest measured element count every item grows linearly with the
            # tokens (the bandwidth-bound end of the measured curves; the structural base's
            # regime curve is not trusted past its data)
            _, e_max, _, split, *_ = self._pack(
                ("curves", int(i)), lambda i=i: self._curves_of(int(i))
            )
            cap = np.maximum(e_max / ws, 1.0)
            t_fit = np.minimum(ts, cap)
            grow = ts / t_fit
            # the rows read at the cap depend on (width, tp) alone: priced once per pair
            once = _priced_once(ts > cap, ws, ps)
            if once is not None:
                t_fit, ws, ps = t_fit[once[0]], ws[once[0]], ps[once[0]]
            wv = _waves(t_fit, cr)
            # the measured curves are stored against the smooth-wave base (see _curve_table),
            # whose items they scale: the staircase comes from the measurements
            items = _base_items_us(c, cr, t_fit, ws, ps, _waves(t_fit, cr, smooth=True), split)
            stack = self._pack(("stack", int(i)), lambda i=i: self._stack_of(int(i)))
            scale = np.exp(_stack_eval(stack, t_fit, ws, np.ones_like(ps) if by_width else ps))
            if once is not None:  # back to every row
                back = once[1]
                wv, scale, items = wv[back], scale[back], tuple(v[back] for v in items)
            factor[sel] = scale * grow
            for k, v in zip(("launch_s", "t_wave_s", "t_memory_s", "t_tp_s"), items, strict=True):
                out[k][sel] = v * 1e-6
            waves[sel] = wv * grow
        # the measured-curve factor scales every item, so the items still sum to the total
        for k in ("launch_s", "t_wave_s", "t_memory_s", "t_tp_s"):
            out[k] *= factor
        return self._outputs(out, factor, waves, t, width, idx)

    @staticmethod
    def _outputs(
        out: dict[str, np.ndarray],
        factor: np.ndarray,
        waves: np.ndarray,
        t: np.ndarray,
        width: np.ndarray,
        idx: np.ndarray,
    ) -> dict[str, np.ndarray]:
        """predict()'s outputs from the scaled items."""
        total = out["launch_s"] + out["t_wave_s"] + out["t_memory_s"] + out["t_tp_s"]
        # a fitted curve may dip below zero far outside its range; never predict under 0.1 us
        out["latency_s"] = np.maximum(total, 1e-7)
        out["residual_factor"] = factor
        out["waves"] = waves
        out["regime"] = _curves.nearest_knot(np.log(np.maximum(t * width, 1.0)), LOG_E_KNOTS)
        out["covered"] = idx >= 0
        return out

    # ---- state ----------------------------------------------------------------------------
    def to_state(self) -> dict[str, np.ndarray]:
        return {
            "gpu": np.array(self.gpu),
            "keys": self.keys_,
            "rows_per_wave": self.rows_per_wave_,
            "coef": self.coef_,
            "curve_key": self.curve_key_,
            "curve_tp": self.curve_tp_,
            "curve_width": self.curve_width_,
            "curve_period": self.curve_period_,
            "curve_len": np.array([len(x) for x in self.curve_tokens_], dtype=np.int64),
            "curve_tokens": np.concatenate(self.curve_tokens_),
            "curve_log_ratio": np.concatenate(self.curve_values_),
            "log_e_knots": LOG_E_KNOTS.copy(),
            # the kernel switches the curves were built with travel with them, so that a later
            # change of KERNEL_SPLIT_TOKENS cannot move a shipped artifact's predictions
            "kernel_split_ops": np.array(sorted(self.kernel_split_), dtype=str),
            "kernel_split_tokens": np.array(
                [self.kernel_split_[k] for k in sorted(self.kernel_split_)], dtype=np.float64
            ),
            # curves read as smooth part + wave sawtooth by a width between measured ones
            # (absent in artifacts fitted before, which read the whole curve at the element count)
            **({"curve_wave_split": np.array(True)} if self.curve_parts_ is not None else {}),
            **_base.gpu_constants_to_state(self.gpu_spec_),
            **_base.range_to_state(self.range_),
        }

    @classmethod
    def from_state(cls, state: Mapping[str, np.ndarray]) -> Self:
        if "res_coef" in state and "curve_key" not in state:
            raise ArtifactError(
                "layer_op state was fitted before the measured curves; re-fit with dse fit"
            )
        _base.need(
            state,
            ("gpu", "keys", "rows_per_wave", "coef", "log_e_knots", "curve_key", "curve_len"),
            "layer_op",
        )
        if np.shape(state["log_e_knots"]) != LOG_E_KNOTS.shape or not np.allclose(
            state["log_e_knots"], LOG_E_KNOTS
        ):
            raise ArtifactError(
                "layer_op state was fitted with other log_e_knots; re-fit with dse fit"
            )
        m = cls(str(state["gpu"]))
        m.gpu_spec_ = _base.gpu_constants_from_state(state, cls.gpu_fields, "layer_op")
        m.keys_ = np.asarray(state["keys"], dtype=str)
        m.rows_per_wave_ = np.asarray(state["rows_per_wave"], dtype=np.float64)
        m.coef_ = np.asarray(state["coef"], dtype=np.float64)
        m.range_ = _base.range_from_state(state)
        m.curve_key_ = np.asarray(state["curve_key"], dtype=np.int64)
        m.curve_tp_ = np.asarray(state["curve_tp"], dtype=np.float64)
        m.curve_width_ = np.asarray(state["curve_width"], dtype=np.float64)
        # artifacts fitted before the wave-step curves: no periods (plain linear interpolation)
        # and no kernel switches
        m.curve_period_ = np.asarray(
            state.get("curve_period", np.full(len(m.curve_key_), np.inf)), dtype=np.float64
        )
        if "kernel_split_ops" in state:
            ops = np.asarray(state["kernel_split_ops"], dtype=str)
            at = np.asarray(state["kernel_split_tokens"], dtype=np.float64)
            m.kernel_split_ = {str(o): float(t) for o, t in zip(ops, at, strict=True)}
        elif "curve_period" in state:
            m.kernel_split_ = dict(_SPLITS_BEFORE_STORED)  # session-3 states before this key
        else:
            m.kernel_split_ = {}
        ends = np.cumsum(np.asarray(state["curve_len"], dtype=np.int64))
        tok = np.asarray(state["curve_tokens"], dtype=np.float64)
        val = np.asarray(state["curve_log_ratio"], dtype=np.float64)
        m.curve_tokens_ = np.split(tok, ends[:-1])
        m.curve_values_ = np.split(val, ends[:-1])
        split = bool(np.asarray(state.get("curve_wave_split", False)))
        m.curve_parts_ = m._wave_parts() if split else None
        return m

    def _wave_parts(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """`_wave_split` of every curve (derived from the stored curves, not stored)."""
        # whole waves of every candidate period (1 and 2 x SMs: their least common multiple)
        window = WAVE_SPLIT_WINDOW * self.gpu_spec_["n_sms"]
        return [
            _wave_split(
                tok,
                val,
                float(self.curve_period_[e]),
                self.kernel_split_.get(str(self.keys_[self.curve_key_[e]]).split(":")[0], 0.0),
                window,
            )
            for e, (tok, val) in enumerate(zip(self.curve_tokens_, self.curve_values_, strict=True))
        ]

    def range_misses(
        self,
        op: str | np.ndarray,
        gated: np.ndarray,
        *,
        width: np.ndarray | None = None,
        **arrays: np.ndarray,
    ) -> dict[str, RangeMiss]:
        """How far operator rows lie outside what this model can price from its measurements:
        the row width against the widths measured for the operator's family (the one the row
        reads: gated, or the non-gated one), the element count against the elements measured
        (the regime coordinate of the per-element cost), and the tensor-parallel size. `op`:
        one operator name, or one per row. Token counts and head counts are not ranges of their
        own: past the measured tokens a curve is read at its end and the base carries the rest,
        at elements that were measured (a 16k-token prefill of a 4096-wide norm is 67M
        elements, inside)."""
        n = _base.batch_size_of(arrays)
        vals = {c: _base.as_float(c, arrays[c], n) for c in INPUTS}
        gated = _base.as_shape(np.asarray(gated, dtype=bool), (n,))
        ops = np.asarray(op)
        if width is None:
            t, width = op_geometry(ops, {**vals, "gated_mlp": gated})
        else:
            t = vals["num_tokens"]
        width = _base.as_shape(width, (n,))
        out: dict[str, RangeMiss] = {}
        for name, v in (("elements", t * width), ("tensor_parallel", vals["tensor_parallel"])):
            lo, hi = self.range_[name]
            if within(v, lo, hi):
                continue
            m = range_miss(v, lo, hi)
            if any_true(m.outside):
                out[name] = m
        # the family each row reads (as _row_key_index): its own, else the other one
        lookup = self._pack("lookup", lambda: {str(k): i for i, k in enumerate(self.keys_)})
        if n <= FEW_ROWS and self._widths_inside(ops, gated, width, lookup):
            return out
        width_miss: RangeMiss | None = None
        for name in [str(ops)] if ops.ndim == 0 else dict.fromkeys(ops.tolist()):
            of_op = True if ops.ndim == 0 else ops == name
            g_i = lookup.get(name, -1)
            n_i = lookup.get(f"{name}:nongated", g_i)
            g_i = n_i if g_i < 0 else g_i
            for i, rows in ((g_i, gated & of_op), (n_i, ~gated & of_op)):
                if i < 0 or not any_true(rows):
                    continue
                lo, hi = self._pack(("widths", i), lambda i=i: self._width_range(i))
                sub = width[rows]
                if lo > hi or within(sub, lo, hi):
                    continue
                m = range_miss(width, lo, hi).masked(rows)
                width_miss = m if width_miss is None else width_miss.worse(m)
        if width_miss is not None and any_true(width_miss.outside):
            out["width"] = width_miss
        return out

    def _widths_inside(
        self, ops: np.ndarray, gated: np.ndarray, width: np.ndarray, lookup: dict[str, int]
    ) -> bool:
        """Whether every row's width lies inside its family's measured widths (as
        `range_misses` reads them), row by row in plain Python: a few rows cost less so."""
        names = [str(ops)] * len(width) if ops.ndim == 0 else ops.tolist()
        family = self._family_of(lookup)
        ranges: dict[int, tuple[float, float]] = self._pack("width_ranges", dict)
        for name, g, w in zip(names, gated.tolist(), width.tolist(), strict=True):
            i = family(name, g)
            if i < 0:
                continue
            if i not in ranges:
                ranges[i] = self._pack(("widths", i), lambda i=i: self._width_range(i))
            lo, hi = ranges[i]
            if lo <= hi and not lo <= w <= hi:
                return False
        return True

    def _width_range(self, i: int) -> tuple[float, float]:
        """(narrowest, widest) width measured for family i; (inf, -inf) when none was."""
        w = self.curve_width_[self.curve_key_ == i]
        return (float(w.min()), float(w.max())) if len(w) else (np.inf, -np.inf)


def layer_op_inputs(df: pd.DataFrame) -> dict[str, np.ndarray]:
    """The predict() keyword arrays of a layer_op table."""
    out: dict[str, np.ndarray] = {c: df[c].to_numpy(np.float64) for c in INPUTS}
    out["op"] = df["op"].to_numpy(str)
    out["gated_mlp"] = (
        df["gated_mlp"].to_numpy(bool) if "gated_mlp" in df else np.ones(len(df), bool)
    )
    return out
