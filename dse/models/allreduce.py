"""Level-1 model of one all-reduce inside a node, for 2, 4 or 8 GPUs (tensor parallelism).

For each GPU count n the time of a message of B bytes is

    t(B, n) = alpha(n) + B * c(log2 B, n)

alpha the latency floor (launch + synchronisation), c the inverse effective bus rate, a
piecewise-linear curve over log2 B with one knot per power of two: the size regimes in which
NCCL and the custom all-reduce kernels switch protocol (LL, LL128, Simple; one-shot vs two-shot)
and the rate saturates towards the NVLink limit. Both are >= 0; c is smoothed (second
difference); beyond the largest measured message the time grows at the curve's marginal rate
there (NCCL's effective bandwidth still improves with size), small ones sit at the floor.
Fitted per implementation (NCCL, vLLM custom graph / eager, TensorRT-LLM custom, vidur's NCCL
runs per cluster) by relative-error least squares. A GPU count between the fitted ones
interpolates log latency in log2(n); outside, the nearest fitted count is used and the row is
flagged.

Where an implementation is known to change kernel or library at a message size (vLLM's custom
all-reduce: one-stage / two-stage, and NCCL from 8 MiB, see `switch_bytes`), each regime gets its
own floor alpha and the rate curve is neither smoothed nor interpolated across the switch, so a
held-out size next to a switch is read from its own side.

Input: `message_bytes` is the payload of one rank (tokens x d_model x 2 for a bf16 residual
stream), `n_gpus` the group size.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Self

import numpy as np

from dse.errors import DataError
from dse.models import _curves, _derived
from dse.models import base as _base
from dse.models.threads import threaded_fit

if TYPE_CHECKING:
    import pandas as pd

SMOOTH = 1e-2  # second-difference penalty weight (per row) on the rate curve, when given
# Weights the fit chooses among (smooth=None) by leave-one-octave-out CV on its own training
# rows: more smoothing suits the H100 NCCL tables and the A100 vLLM graph table, less the A100
# NCCL ones (session 3 scanned this grid with one weight for every table: no single value was
# better everywhere). Chosen per table, held out one octave: 8 of 15 tables better by 0.05-0.56
# points, none worse by more than 0.04 (docs/accuracy.md).
SMOOTH_CHOICES = (3e-3, 1e-2, 3e-2, 1e-1)
INPUTS = ("message_bytes", "n_gpus")
KIB, MIB = 1024.0, 1024.0 * 1024.0
# vLLM's custom all-reduce (csrc/custom_all_reduce.cuh, distributed/.../custom_all_reduce.py):
# one-stage (every rank reads every peer's buffer) below 512 KiB on <= 4 GPUs and below
# 256 KiB on <= 8, two-stage (reduce-scatter + all-gather) above, always one-stage on 2 GPUs;
# messages of max_size = 8 MiB and more are handed to NCCL. In aiconfigurator's vLLM 0.14
# tables these are the jumps (A100, 8 GPUs: 11.4 us at 128 KiB, 17.1 at 256 KiB; 2 GPUs: 25 us
# at 4 MiB, 90 at 8 MiB, where the NCCL table has 87).
VLLM_CUSTOM_MAX_BYTES = 8.0 * MIB
# Beyond the largest fitted message: the curve's marginal rate (True) or its average (False,
# artifacts fitted before this option).
END_MARGINAL = True
# An int8 NCCL table takes its rate curve's shape from the float16 table of the same GPU at
# equal bytes (same protocol / channel switches, measured twice): its own curve is the float16
# curve plus a difference curve this much stiffer (second-difference weight per row) than
# SMOOTH. At equal bytes int8 runs 0.9-1.3x float16 (8 GPUs: 1.27x from 256 MiB, where float16
# reductions use NVLink SHARP and int8 cannot), a ratio that changes slowly with size; held out
# one octave the int8 tables score 4.7-5.0% with the borrowed shape, 5.1-5.4% alone, and any
# weight from 10 to 1000 gives within 0.1 point of that (docs/accuracy.md).
SHAPE_SMOOTH = 100.0


def switch_bytes(implementation: str, n_gpus: float) -> tuple[float, ...]:
    """Message sizes (bytes) where an implementation changes kernel or library: each starts a
    new regime with its own latency floor, and the rate curve is not smoothed across it. Known
    only for vLLM's custom all-reduce (see VLLM_CUSTOM_MAX_BYTES); NCCL's protocol and algorithm
    choice comes from its own tuning model and is left to the smooth rate curve."""
    if ".custom.vllm" not in f".{implementation}":  # e.g. vllm.custom.vllm_graph
        return ()
    if n_gpus <= 2:
        return (VLLM_CUSTOM_MAX_BYTES,)
    two_stage = 512 * KIB if n_gpus <= 4 else 256 * KIB
    return (two_stage, VLLM_CUSTOM_MAX_BYTES)


def shape_implementation(implementation: str) -> str | None:
    """The table whose rate-curve shape an implementation borrows (fitted jointly with it), or
    None: the int8 NCCL tables borrow the float16 table's (`nccl.nccl.int8` -> `nccl.nccl`)."""
    if implementation.endswith(".int8") and not switch_bytes(implementation, 8.0):
        return implementation.removesuffix(".int8")
    return None


def _segments(lb: np.ndarray, switches_log2: np.ndarray) -> np.ndarray:
    """Regime index of log2 sizes: the number of switches at or below each."""
    return np.searchsorted(np.sort(switches_log2), lb, side="right")


def _clip_to_segment(lb: np.ndarray, knots: np.ndarray, switches_log2: np.ndarray) -> np.ndarray:
    """log2 sizes clamped into the knot range of their own regime, so that a size between two
    knots of different regimes reads its regime's end knot (constant rate beyond it)."""
    if len(switches_log2) == 0:
        return lb
    seg_k = _segments(knots, switches_log2)
    seg = _segments(lb, switches_log2)
    out = lb.copy()
    for s in np.unique(seg):
        ks = knots[seg_k == s]
        if ks.size:
            out[seg == s] = np.clip(lb[seg == s], ks[0], ks[-1])
    return out


def _fit_curve(
    b: np.ndarray,
    y: np.ndarray,
    knots: np.ndarray,
    switches_log2: np.ndarray | None = None,
    smooth: float = SMOOTH,
) -> np.ndarray:
    """[alpha_s, c_0 .. c_k (s per GB), alpha of each later regime (s)] for one GPU count."""
    sw = np.zeros(0) if switches_log2 is None else np.asarray(switches_log2, dtype=np.float64)
    lb = np.log2(b)
    seg = _segments(lb, sw)
    H = _curves.hat_basis(_clip_to_segment(lb, knots, sw), knots)
    # one floor per regime (a new kernel, or NCCL, has its own launch and synchronisation cost)
    floors = [(seg == s).astype(np.float64) for s in range(len(sw) + 1)]
    X = np.column_stack([floors[0], (b * 1e-9)[:, None] * H, *floors[1:]])
    nk = len(knots)
    pen = np.zeros((max(nk - 2, 0), X.shape[1]))
    pen[:, 1 : 1 + nk] = _curves.second_difference(nk)
    if len(sw) and nk > 2:  # no smoothing across a regime switch
        seg_k = _segments(knots, sw)
        pen[seg_k[:-2] != seg_k[2:]] = 0.0
    pen *= np.sqrt(smooth * len(b))
    # tiny ridge keeps knots without data determined (the penalty extends the curve to them)
    ridge = np.zeros((nk, X.shape[1]))
    ridge[:, 1 : 1 + nk] = np.eye(nk) * 1e-6
    return _curves.relative_lstsq(X, y, np.vstack([pen, ridge]), lower=np.zeros(X.shape[1]))


def _fit_shaped_curve(
    b: np.ndarray,
    y: np.ndarray,
    b_shape: np.ndarray,
    y_shape: np.ndarray,
    knots: np.ndarray,
    smooth: float = SMOOTH,
) -> np.ndarray:
    """[alpha_s, c_0 .. c_k] of the own rows (b, y) for one GPU count, fitted jointly with the
    rows of the table it borrows its shape from (b_shape, y_shape): shape rows t = a' + B c,
    own rows t = alpha + B (c + d), c smoothed as in _fit_curve, d by SHAPE_SMOOTH."""
    nk = len(knots)
    H, Hs = _curves.hat_basis(np.log2(b), knots), _curves.hat_basis(np.log2(b_shape), knots)
    bh, bhs = (b * 1e-9)[:, None] * H, (b_shape * 1e-9)[:, None] * Hs
    # columns: alpha (own), alpha' (shape table), c (nk), d (nk)
    X = np.vstack(
        [
            np.column_stack([np.ones(len(b)), np.zeros(len(b)), bh, bh]),
            np.column_stack([np.zeros(len(b_shape)), np.ones(len(b_shape)), bhs, 0.0 * bhs]),
        ]
    )
    y_all = np.concatenate([y, y_shape])
    per_table = len(y_all) / 2.0  # each smoothing weight is per row of one table, as in _fit_curve
    pen = np.zeros((2 * max(nk - 2, 0), X.shape[1]))
    pen[: nk - 2, 2 : 2 + nk] = _curves.second_difference(nk) * np.sqrt(smooth * per_table)
    pen[nk - 2 :, 2 + nk :] = _curves.second_difference(nk) * np.sqrt(SHAPE_SMOOTH * per_table)
    ridge = np.zeros((2 * nk, X.shape[1]))
    ridge[:, 2:] = np.eye(2 * nk) * 1e-6
    lower = np.concatenate([np.zeros(2 + nk), np.full(nk, -np.inf)])
    coef = _curves.relative_lstsq(X, y_all, np.vstack([pen, ridge]), lower=lower)
    return np.concatenate([[coef[0]], np.maximum(coef[2 : 2 + nk] + coef[2 + nk :], 0.0)])


class AllReduceModel(_base.Model):
    """All-reduce latency of one implementation on one GPU (see module doc).

    predict(message_bytes, n_gpus) -> latency_s, alpha_s, t_transfer_s (sum to latency_s),
    bw_eff_bytes_per_s (message bytes / transfer time), regime (index of the nearest size knot),
    n_interpolated (GPU count not fitted: interpolated or nearest).
    """

    kind: ClassVar[str] = "allreduce"  # the manifest's kind; dse.models.MODEL_CLASSES

    def __init__(
        self,
        gpu: str = "h100_sxm",
        implementation: str = "nccl",
        smooth: float | None = None,
    ) -> None:
        """`smooth`: the rate curve's smoothing weight; None chooses it from SMOOTH_CHOICES by
        leave-one-octave-out CV on the training rows (`smooth_` after fit; SMOOTH for a
        subclass of another kind)."""
        self.gpu = gpu
        self.implementation = implementation
        self.smooth = smooth

    def _single_node(self, df: pd.DataFrame) -> pd.DataFrame:
        """Rows of this GPU, op all_reduce, one node."""
        d = df[df["gpu"] == self.gpu]
        if "op" in d:
            d = d[d["op"].astype(str) == "all_reduce"]
        if "n_nodes" in d:
            d = d[d["n_nodes"].fillna(1).to_numpy() == 1]
        return d

    @threaded_fit
    def fit(self, df: pd.DataFrame, shape_rows: pd.DataFrame | None = None) -> Self:
        """Fit on all-reduce rows of one implementation (op all_reduce, one node) of one GPU.

        `shape_rows`: rows of the table named by `shape_implementation(implementation)` (the
        float16 NCCL table for an int8 one); the fit then borrows their rate-curve shape, at
        the message-size octaves and GPU counts the own rows measured only. None: fit alone."""
        d = self._single_node(df)
        if d.empty:
            raise DataError(f"no single-node all_reduce rows for gpu {self.gpu!r}")
        b = d["message_bytes"].to_numpy(np.float64)
        y = d["latency_s"].to_numpy(np.float64)
        n = d["n_gpus"].to_numpy(np.float64)
        shape = None
        if shape_rows is not None:
            s = self._single_node(shape_rows)
            shape = tuple(
                s[c].to_numpy(np.float64) for c in ("message_bytes", "latency_s", "n_gpus")
            )
        smooth = self.smooth
        if smooth is None:
            # chosen for all-reduce tables only: on the other collectives (kind "collective") the
            # choice was mixed (H100 alltoall 9.2 -> 9.8%), so they keep the fixed weight
            smooth = self._choose_smooth(b, y, n, shape) if self.kind == "allreduce" else SMOOTH
        return self._fit_arrays(b, y, n, shape, smooth)

    def _fit_arrays(
        self,
        b: np.ndarray,
        y: np.ndarray,
        n: np.ndarray,
        shape: tuple[np.ndarray, np.ndarray, np.ndarray] | None,
        smooth: float,
    ) -> Self:
        """The fit on arrays (message bytes, latency s, GPU count; the shape table's alike)."""
        self.end_marginal_ = END_MARGINAL
        self.smooth_ = float(smooth)
        lb = np.log2(b)
        self.knots_ = np.arange(np.floor(lb.min()), np.ceil(lb.max()) + 0.5, 1.0)
        if len(self.knots_) < 2:
            self.knots_ = np.array([self.knots_[0], self.knots_[0] + 1.0])
        self.n_gpus_ = np.unique(n)
        sw = [switch_bytes(self.implementation, g) for g in self.n_gpus_]
        shaped = shape is not None and not any(sw)
        if shaped:
            # the shape table's rows at the octaves this table measured: a size only the shape
            # table measured is not borrowed (held out of both when cross-validating)
            bs, ys, ns = shape
            keep = np.isin(np.floor(np.log2(bs) + 1e-9), np.floor(lb + 1e-9))
            bs, ys, ns = bs[keep], ys[keep], ns[keep]
        n_sw = max((len(x) for x in sw), default=0)
        # switches per fitted GPU count, inf-padded (inf = none)
        self.switch_bytes_ = np.full((len(self.n_gpus_), n_sw), np.inf)
        self.alpha_switch_s_ = np.zeros((len(self.n_gpus_), n_sw))
        rows = []
        nk = len(self.knots_)
        for i, g in enumerate(self.n_gpus_):
            sel = n == g
            self.switch_bytes_[i, : len(sw[i])] = sw[i]
            if shaped and (ns == g).sum() >= 2:
                c = _fit_shaped_curve(b[sel], y[sel], bs[ns == g], ys[ns == g], self.knots_, smooth)
            else:
                sw_log2 = np.log2(np.asarray(sw[i], dtype=float))
                c = _fit_curve(b[sel], y[sel], self.knots_, sw_log2, smooth)
            rows.append(c[: 1 + nk])
            self.alpha_switch_s_[i, : len(sw[i])] = c[1 + nk :]
        coef = np.array(rows)
        self.alpha_s_ = coef[:, 0]
        self.c_s_per_gb_ = coef[:, 1:]
        self.range_ = _base.fitted_range({"message_bytes": b, "n_gpus": n})
        return self

    def _choose_smooth(
        self,
        b: np.ndarray,
        y: np.ndarray,
        n: np.ndarray,
        shape: tuple[np.ndarray, np.ndarray, np.ndarray] | None,
    ) -> float:
        """The weight of SMOOTH_CHOICES with the lowest leave-one-octave-out MAPE on these rows
        (every octave held out once, GPU counts together; as the benchmark scores the model)."""
        octave = np.floor(np.log2(b) + 1e-9)
        if len(np.unique(octave)) < 3:
            return SMOOTH
        best, best_err = SMOOTH, np.inf
        for w in SMOOTH_CHOICES:
            pred = np.empty(len(y))
            for o in np.unique(octave):
                te = octave == o
                m = AllReduceModel(self.gpu, self.implementation)
                m._fit_arrays(b[~te], y[~te], n[~te], shape, w)
                pred[te] = m.predict(message_bytes=b[te], n_gpus=n[te])["latency_s"]
            err = float(np.mean(np.abs(pred / y - 1.0)))
            if err < best_err:
                best, best_err = w, err
        return best

    def _switches(
        self, i: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[int, tuple[float, float]]]:
        """Curve i's regime switches (log2 bytes, sorted) and each regime's alpha floor, from
        the fitted state alone: made once per model and curve (a one-row call would rebuild
        them), kept outside the model (`_derived`) and rebuilt when the state arrays change."""
        state = (self.switch_bytes_, self.alpha_s_, self.alpha_switch_s_, self.knots_)
        return _derived.derived(self, state, ("switches", i), lambda: self._make_switches(i))

    def _make_switches(
        self, i: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[int, tuple[float, float]]]:
        sw = self.switch_bytes_[i]
        sw = np.log2(sw[np.isfinite(sw)])
        floors = np.concatenate([[self.alpha_s_[i]], self.alpha_switch_s_[i, : len(sw)]])
        # each regime's knot range (`_clip_to_segment`): regime -> (first, last knot)
        seg_k = _segments(self.knots_, sw)
        bounds = {}
        for r in np.unique(seg_k).tolist():
            ks = self.knots_[seg_k == r]
            bounds[r] = (ks[0], ks[-1])
        return sw, np.sort(sw), floors, bounds

    def _curve(self, b: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray]:
        lb = np.log2(b)
        sw, sw_sorted, floors, bounds = self._switches(i)
        if len(sw) == 0:
            c = np.interp(lb, self.knots_, self.c_s_per_gb_[i])
            alpha = np.full_like(b, self.alpha_s_[i])
        else:
            # `_clip_to_segment` with the regimes' knot ranges made once
            seg = sw_sorted.searchsorted(lb, side="right")  # `_segments`
            lc = lb.copy()
            present = set(seg.tolist()) if seg.size <= 64 else np.unique(seg).tolist()
            if len(present) == 1:  # one regime (a few messages): no masks, the same clip
                ends = bounds.get(int(present.pop()))
                if ends is not None:
                    lc = _base.clip(lb, ends[0], ends[1])
            else:
                for r in present:
                    ends = bounds.get(int(r))
                    if ends is not None:
                        lc[seg == r] = _base.clip(lb[seg == r], ends[0], ends[1])
            c = np.interp(lc, self.knots_, self.c_s_per_gb_[i])
            alpha = floors[seg]
        trans = b * 1e-9 * c
        if self.end_marginal_ and len(self.knots_) >= 2:
            # beyond the largest measured message the time grows at the marginal rate of the
            # curve's end, d(B c)/dB = c + dc/dlog2(B) / ln 2, not its average rate: NCCL's
            # effective bandwidth still improves there (H100, 2 GPUs: 256 -> 512 MiB takes 1.91x)
            k_end = self.knots_[-1]
            far = lb > k_end
            if _base.any_true(far):
                ce, cp = self.c_s_per_gb_[i][-1], self.c_s_per_gb_[i][-2]
                # ce - cp: dc per octave (knots one power of two apart); the marginal rate is
                # floored at a quarter of the end's average rate (a constant guard, not fitted)
                # so that a steeply falling curve end cannot make larger messages nearly free
                marg = max(ce + (ce - cp) / np.log(2.0), 0.25 * ce)
                b_end = 2.0**k_end
                trans = np.where(far, 1e-9 * (b_end * ce + (b - b_end) * marg), trans)
        return alpha, trans

    def predict(self, **arrays: Any) -> dict[str, np.ndarray]:
        b, g, alpha, trans = self._alpha_trans(arrays)
        latency = alpha + trans
        return {
            "latency_s": latency,
            "alpha_s": alpha,
            "t_transfer_s": trans,
            "bw_eff_bytes_per_s": b / np.maximum(trans, 1e-12),
            "regime": _curves.nearest_knot(np.log2(b), self.knots_),
            "n_interpolated": ~np.isin(g, self.n_gpus_),
        }

    def latency(self, **arrays: Any) -> dict[str, np.ndarray]:
        """`predict`'s latency_s alone (the same arithmetic): what the pricer reads, without the
        other items' numpy calls."""
        _, _, alpha, trans = self._alpha_trans(arrays)
        return {"latency_s": alpha + trans}

    def _alpha_trans(
        self, arrays: Mapping[str, Any]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(message bytes, GPU counts, alpha, transfer seconds) of `predict`'s rows."""
        n_rows = _base.batch_size_of(arrays)
        b = np.maximum(_base.as_float("message_bytes", arrays["message_bytes"], n_rows), 1.0)
        g = _base.as_float("n_gpus", arrays["n_gpus"], n_rows)
        fitted = self.n_gpus_
        alpha = np.empty(n_rows)
        trans = np.empty(n_rows)
        lg, lf = np.log2(np.maximum(g, 1.0)), np.log2(fitted)
        # neighbours in log2(n): exact hits get weight 1 on themselves
        j = _base.clip(lf.searchsorted(lg, side="right") - 1, 0, len(fitted) - 1)
        k = np.minimum(j + 1, len(fitted) - 1)
        span = lf[k] - lf[j]
        f = np.where(
            span > 0, _base.clip((lg - lf[j]) / np.where(span > 0, span, 1.0), 0.0, 1.0), 0.0
        )
        # the distinct neighbour pairs (k is j or j + 1): one vectorised pass, not a Python set
        # over every row (2% of a full prediction at 10^5 rows)
        code = j * 2 + (k - j)
        # a few rows: the same sorted distinct pairs by a Python set (np.unique sorts)
        pairs = sorted(set(code.tolist())) if code.size <= 64 else np.unique(code).tolist()
        for jj, kk in ((p // 2, p // 2 + p % 2) for p in pairs):
            # one pair (a few messages of one group size): every row, without the masks
            sel = slice(None) if len(pairs) == 1 else (j == jj) & (k == kk)
            a1, t1 = self._curve(b[sel], jj)
            if kk == jj:
                alpha[sel], trans[sel] = a1, t1
                continue
            a2, t2 = self._curve(b[sel], kk)
            w = f[sel]
            tot = np.exp((1 - w) * np.log(a1 + t1) + w * np.log(a2 + t2))
            # split the interpolated total in the neighbours' alpha : transfer proportion
            share = ((1 - w) * a1 + w * a2) / ((1 - w) * (a1 + t1) + w * (a2 + t2))
            alpha[sel], trans[sel] = tot * share, tot * (1 - share)
        return b, g, alpha, trans

    def to_state(self) -> dict[str, np.ndarray]:
        return {
            "gpu": np.array(self.gpu),
            "implementation": np.array(self.implementation),
            "knots_log2_bytes": self.knots_,
            "n_gpus": self.n_gpus_,
            "alpha_s": self.alpha_s_,
            "c_s_per_gb": self.c_s_per_gb_,
            "switch_bytes": self.switch_bytes_,
            "alpha_switch_s": self.alpha_switch_s_,
            "end_marginal": np.array(bool(self.end_marginal_)),
            "smooth": np.array(self.smooth_),
            **_base.range_to_state(self.range_),
        }

    @classmethod
    def from_state(cls, state: Mapping[str, np.ndarray]) -> Self:
        _base.need(
            state, ("gpu", "knots_log2_bytes", "n_gpus", "alpha_s", "c_s_per_gb"), "allreduce"
        )
        m = cls(str(state["gpu"]), str(state.get("implementation", "nccl")))
        m.knots_ = np.asarray(state["knots_log2_bytes"], dtype=np.float64)
        m.n_gpus_ = np.asarray(state["n_gpus"], dtype=np.float64)
        m.alpha_s_ = np.asarray(state["alpha_s"], dtype=np.float64)
        m.c_s_per_gb_ = np.asarray(state["c_s_per_gb"], dtype=np.float64).reshape(
            len(m.n_gpus_), len(m.knots_)
        )
        # artifacts fitted before the regime switches have none, and extrapolate beyond the
        # largest message at the end's average rate (as they were validated)
        m.end_marginal_ = bool(state.get("end_marginal", False))
        n_fit = len(m.n_gpus_)
        m.switch_bytes_ = np.asarray(
            state.get("switch_bytes", np.zeros((n_fit, 0))), dtype=np.float64
        ).reshape(n_fit, -1)
        m.alpha_switch_s_ = np.asarray(
            state.get("alpha_switch_s", np.zeros((n_fit, 0))), dtype=np.float64
        ).reshape(n_fit, -1)
        m.smooth_ = float(state.get("smooth", SMOOTH))  # provenance only: c is stored
        m.range_ = _base.range_from_state(state)
        return m


def implementation_key(df: pd.DataFrame) -> pd.Series:
    """The model name suffix of each all-reduce row: `<engine>.<implementation>[.<backend>]`
    plus `.int8` for int8 NCCL tables (e.g. nccl.nccl, vllm.custom.vllm_graph, nccl.h100_dgx)."""
    import pandas as pd  # fitting/validation only: prediction never imports pandas

    eng = df["engine"].astype(str)
    impl = (
        df["implementation"].astype(str) if "implementation" in df else pd.Series("nccl", df.index)
    )
    backend = df["backend"] if "backend" in df else pd.Series(np.nan, index=df.index)
    backend = backend.where(backend.notna(), "").astype(str)
    key = eng + "." + impl + np.where(backend != "", "." + backend, "")
    dtype = df["dtype"].astype(str)
    return pd.Series(np.where(dtype == "int8", key + ".int8", key), index=df.index)


class CollectiveModel(AllReduceModel):
    """Other NCCL collectives (all_gather, reduce_scatter, alltoall): the all-reduce form."""

    kind: ClassVar[str] = "collective"  # the manifest's kind; dse.models.MODEL_CLASSES

    op_name = "all_reduce"

    @threaded_fit
    def fit(self, df: pd.DataFrame, shape_rows: pd.DataFrame | None = None) -> Self:
        ops = df["op"].astype(str).unique() if "op" in df else []
        if len(ops) != 1:
            raise DataError(f"collective model needs rows of one op, got {list(ops)}")
        return super().fit(df.assign(op="all_reduce"), shape_rows)
