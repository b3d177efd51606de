"""Level 1, GEMM: a regime-aware analytical model with fitted coefficients and a tabulated
learned residual, predicting time and energy of y = x[m, k] @ W[n, k]^T per GPU, engine, dtype.

Three stages, each in log space, all evaluated with numpy only:

1. Roofline with fitted efficiencies and launch floor (4 coefficients):
       t_c' = 2mnk / (eta_c * peak),  t_m' = (B_in + B_out) / (eta_m * bw)
       t_base = t_launch + (t_c'^p + t_m'^p)^(1/p)          (p: fitted overlap sharpness)
   A quantised dtype may add the activation quantisation its engine runs before the GEMM (2
   more coefficients, kept only where they explain the table: `QUANT_GAIN`):
       t_q = 3mk / (eta_q * bw) + m * t_row                 (reads bf16 x, writes 1-byte x)
   The regime follows from FLOPs and arithmetic intensity through these times:
       0 launch-bound       t_launch >= max(t_c', t_m')   (small F: the launch floor dominates)
       1 memory-bound       t_m' >= 2 t_c'                (AI <= AI*/2, AI* = fitted ridge point)
       2 balanced, memory-dominant    t_c' <= t_m' < 2 t_c'
       3 balanced, compute-dominant   t_m' < t_c' <= 2 t_m'
       4 compute-bound      t_c' > 2 t_m'
2. Per-regime linear correction on physical features: log t_c', log t_m', log PF (PF = mn/k),
   log B_in, log B_out, wave-quantisation efficiency over the GPU's SMs for 128x128 and
   128x256 output tiles, and the padding of m to 16 rows.
3. Residual: gradient-boosted trees (scikit-learn, fit time only) on a wider physical feature
   set, evaluated on the measurement lattice of (log2 m, log2 n, log2 k) and stored as a table;
   prediction interpolates it multilinearly (exact on lattice points, clamped outside). What the
   trees leave on the training rows is smoothed over neighbouring weight shapes (Gaussian in
   log2 n and log2 k, at each measured m) and added to the table: an unseen (n, k) inherits
   the shape-specific error its neighbours showed, which the trees' features do not explain.

Energy: power = the family power model f(compute_util, memory_util) scaled by the GPU's idle and
board power (`dse.models.power`); where the fit saw measured power (H200) a second tabulated
residual (trees + the same neighbour smoothing) corrects it. energy_j = power_w * latency_s.

One file (~730 lines) on purpose: the three stages (fitted roofline, regimes, residual table)
and their fit are one model contract (`fit` / `predict` / `to_state`) over one feature set.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Self

import numpy as np

from dse.errors import ArtifactError, ConfigError
from dse.models.base import Model
from dse.models.power import PowerModel
from dse.models.threads import threaded_fit
from dse.spec.hardware import get_gpu

if TYPE_CHECKING:
    import pandas as pd

REGIMES: tuple[str, ...] = (
    "launch-bound",
    "memory-bound",
    "balanced memory-dominant",
    "balanced compute-dominant",
    "compute-bound",
)
# Spellings the data and callers use -> the dtype names the models are fitted under.
DTYPE_ALIASES: dict[str, str] = {
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "bfloat16",  # same tensor-core rate and element size as bf16
    "fp16": "bfloat16",
    "half": "bfloat16",
    "fp8": "fp8",
    "float8": "fp8",
    "fp8_e4m3": "fp8",
    "fp8_block": "fp8_block",
    "nvfp4": "nvfp4",
    "fp4": "nvfp4",
}
# nvfp4 (Blackwell): 4-bit e2m1 values with one fp8 (e4m3) scale per 16 elements of x and W,
# 0.5 + 1/16 = 0.5625 bytes (4.5 bits) per element, scales included (NVIDIA's NVFP4 format).
IN_BYTES: dict[str, float] = {"bfloat16": 2.0, "fp8": 1.0, "fp8_block": 1.0, "nvfp4": 0.5625}
OUT_BYTES = 2.0  # every kernel here writes bf16 output
SCALE_BLOCK = 128  # fp8_block: one fp32 scale per 1x128 activation and 128x128 weight block
INPUTS: tuple[str, ...] = ("m", "n", "k")
# Neighbour smoothing of the tree residual over weight shapes: Gaussian width in octaves of n
# and k, and a prior weight (in rows) that shrinks the correction where few neighbours were
# measured. Chosen by cross-validation over held-out (n, k) shapes on the H100 and H200 tables.
SMOOTH_OCTAVES = 0.5
SMOOTH_PRIOR_ROWS = 1.0
POWER_SMOOTH_OCTAVES = 0.35  # power is noisier per row but its per-m session offsets are local
POWER_SMOOTH_PRIOR_ROWS = 0.0
# Boosting rounds of the power residual's trees (latency keeps `tree_iter`, 300): power's residual
# is wider (family power model x shape, session offsets) and wants more rounds at the same rate.
# H200 vLLM, CV by (n, k), fold 0 (experiments/h200_gemm_power_residual.py): 300 -> 600 rounds
# fp8_block energy 6.49 -> 6.33%; 150 rounds 6.28% on bf16 (300: 6.16%).
POWER_TREE_ITER = 600
# Residual trees: the average of BAGS fits, each on a seeded BAG_FRACTION of the weight shapes
# (latency) or rows (power). Session 3, CV by (n, k): H100 TRT-LLM bf16 3.03 -> 2.95%, vLLM
# 3.59 -> 3.54%, H200 energy 6.12 -> 6.07% (docs/accuracy.md); fit time about 3x.
BAGS = 4
BAG_FRACTION = 0.75
# Activation quantisation (stage 1's optional t_q): bytes per element of x it moves (reads bf16,
# writes one byte), and the share of the plain base's stage-1 cost (soft-L1 in log time) the
# two extra coefficients must reach to be kept. B200 vLLM per-tensor fp8 (its dynamic scale is
# a reduction over every row of x before the CUTLASS GEMM: 5 ns a row) 554 -> 224, nvfp4 232 ->
# 159; fp8_block (its ~180 us floor per call dwarfs it) moves by 1% and keeps the 4-coefficient
# base, bf16 (no quantisation) is not tried: their fits are unchanged. The regimes below are
# read from t_c', t_m' and the launch floor alone.
QUANT_BYTES = 3.0
QUANT_GAIN = 0.8
# Hampel clip of the fit's target (`GemmModel(despike=...)`, off by default): rows on either
# side along m whose median a row is held near.
DESPIKE_HALF_WINDOW = 2


def canonical_dtype(dtype: str) -> str:
    """'bf16', 'float16' -> 'bfloat16'; 'float8' -> 'fp8'; unknown names are a ConfigError."""
    key = str(dtype).strip().lower()
    if key not in DTYPE_ALIASES:
        raise ConfigError(f"unknown GEMM dtype {dtype!r}; valid: {', '.join(DTYPE_ALIASES)}")
    return DTYPE_ALIASES[key]


def gemm_work(m: Any, n: Any, k: Any, dtype: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(FLOPs, bytes read, bytes written) of one call; arrays broadcast."""
    dt = canonical_dtype(dtype)
    m, n, k = (np.asarray(v, dtype=np.float64) for v in (m, n, k))
    flops = 2.0 * m * n * k
    bytes_in = (m * k + n * k) * IN_BYTES[dt]
    if dt == "fp8_block":  # fp32 scales: m x k/128 for x, (n/128) x (k/128) for W
        kb = np.ceil(k / SCALE_BLOCK)
        bytes_in = bytes_in + 4.0 * (m * kb + np.ceil(n / SCALE_BLOCK) * kb)
    bytes_out = m * n * OUT_BYTES
    return flops, bytes_in, bytes_out


def _wave_eff(m: np.ndarray, n: np.ndarray, tm: int, tn: int, n_sms: float) -> np.ndarray:
    """Busy fraction of the last-wave-padded grid: tiles / (waves * SMs)."""
    tiles = np.ceil(m / tm) * np.ceil(n / tn)
    return tiles / (np.ceil(tiles / n_sms) * n_sms)


def _residual_features(m: np.ndarray, n: np.ndarray, k: np.ndarray, c: Mapping[str, float]):
    """Wider physical feature set of the learned residual (fit and tabulation time only)."""
    flops, b_in, b_out = gemm_work(m, n, k, c["dtype"])
    tc = flops / c["peak"]
    tm = (b_in + b_out) / c["bw"]
    lm, ln, lk = np.log2(m), np.log2(n), np.log2(k)
    cols = [lm, ln, lk, np.log(tc), np.log(tm), np.log(tm / tc), ln + lk, lm + ln, lm + lk]
    for a, b in ((64, 64), (64, 128), (128, 128), (128, 256), (256, 128)):
        tiles = np.ceil(m / a) * np.ceil(n / b)
        waves = np.ceil(tiles / c["n_sms"])
        # Split-K a library may use when the tiles leave SMs idle (bounded by k / 256).
        split = np.clip(np.floor(c["n_sms"] / tiles), 1, np.maximum(k / 256, 1))
        cols += [tiles / (waves * c["n_sms"]), np.log2(waves), np.log2(split)]
    cols.append(lm + ln - lk)  # log2 PF = mn / k
    # More CUTLASS/cuBLAS tile shapes (Hopper kernels also use 64x256, 256x64, 128x192, ...).
    for a, b in ((64, 256), (256, 64), (128, 64), (192, 128), (128, 192), (64, 32)):
        tiles = np.ceil(m / a) * np.ceil(n / b)
        waves = np.ceil(tiles / c["n_sms"])
        cols += [tiles / (waves * c["n_sms"]), np.log2(waves)]
    for a in (32, 64, 128):  # main-loop iterations over k for common k-tile depths
        cols.append(np.log2(np.ceil(k / a)))
    for a in (8, 16, 32, 64, 128, 256):
        cols.append(np.ceil(m / a) * a / m)
    for a in (64, 128, 256):
        cols.append(np.ceil(n / a) * a / n)
        cols.append(np.ceil(k / a) * a / k)
    return np.column_stack(cols)


def _smooth_over_shapes(
    axes: tuple[np.ndarray, ...],
    m: np.ndarray,
    n: np.ndarray,
    k: np.ndarray,
    r: np.ndarray,
    octaves: float,
    prior_rows: float,
) -> np.ndarray:
    """Residual r of rows (m, n, k), smoothed over weight shapes onto the table `axes` (log2).

    At each measured m: a normalised Gaussian average over (log2 n, log2 k) of width `octaves`,
    num / (weights + prior_rows) (prior_rows > 0 shrinks towards 0 where few shapes are near).
    Between measured m it is linear in log2 m; outside, held at the edge. n and k of the rows
    must lie on axes[1] and axes[2] (they are the rows' own unique values).
    """
    lm = np.log2(m)
    M = np.unique(lm)
    _, N, K = axes
    idx = (np.searchsorted(M, lm), np.searchsorted(N, np.log2(n)), np.searchsorted(K, np.log2(k)))
    total = np.zeros((len(M), len(N), len(K)))
    count = np.zeros_like(total)
    np.add.at(total, idx, r)
    np.add.at(count, idx, 1.0)
    wn = np.exp(-0.5 * ((N[:, None] - N[None, :]) / octaves) ** 2)
    wk = np.exp(-0.5 * ((K[:, None] - K[None, :]) / octaves) ** 2)
    num = np.einsum("jJ,lL,iJL->ijl", wn, wk, total)
    den = np.einsum("jJ,lL,iJL->ijl", wn, wk, count) + prior_rows
    smooth = num / np.maximum(den, 1e-300)
    # Onto the table's m axis: linear in log2 m between measured m (np.interp per column).
    flat = smooth.reshape(len(M), -1)
    out = np.empty((len(axes[0]), flat.shape[1]))
    for j in range(flat.shape[1]):
        out[:, j] = np.interp(axes[0], M, flat[:, j])
    return out.reshape(len(axes[0]), len(N), len(K))


def _despike(m: np.ndarray, n: np.ndarray, k: np.ndarray, y: np.ndarray, tol: float) -> np.ndarray:
    """Log times y with every row clipped to within `tol` (natural log) of the median of itself
    and its two measured neighbours on either side along m at its (n, k) (a Hampel clip): a
    single row 2-5x off its neighbours (B200 vLLM per-tensor fp8: 4.8% of rows) is moved to the
    edge of the band, a step that two or more rows share is kept."""
    import pandas as pd

    order = np.lexsort((m, k, n))
    ys = pd.Series(y[order])
    key = pd.Series(n[order] * 1e7 + k[order])
    med = ys.groupby(key.to_numpy()).transform(
        lambda s: s.rolling(2 * DESPIKE_HALF_WINDOW + 1, center=True, min_periods=1).median()
    )
    out = np.empty_like(y)
    out[order] = np.clip(ys.to_numpy(), med.to_numpy() - tol, med.to_numpy() + tol)
    return out


def _f16(a: np.ndarray) -> np.ndarray:
    """Round to float16 (how tables are stored) but compute in float64."""
    return a.astype(np.float16).astype(np.float64)


def _m_axis(m: np.ndarray) -> np.ndarray:
    """Token counts the residual is tabulated at: the measured ones plus a dense set (every m to
    32, every 16 to 512, every 64 to 4096) within the measured range, so the trees (with their
    padding and wave features) price unmeasured m, not a linear blend. Not beyond 4096: the
    tables measure only m = 8192, 16384, 32768 there, and trees asked between those points
    gave latencies falling by up to 40% as m grew (H100 vLLM fp8); there the residual is
    interpolated linearly in log2 m between measured m and the roofline carries the growth."""
    lo, hi = float(m.min()), float(m.max())
    dense = np.concatenate(
        [np.arange(1, 33), np.arange(48, 513, 16), np.arange(576, 4097, 64)]
    ).astype(np.float64)
    return np.unique(np.concatenate([np.unique(m), dense[(dense >= lo) & (dense <= hi)]]))


class _Grid:
    """Cell lookup on a 3-D table whose axes are log2 of integer sizes (m, n, k).

    The cell of a query comes from an integer lookup table over floor(size) (built once per
    model, clamped to the axis range): no binary search on the hot path. The residual is
    interpolated multilinearly in log2 space; outside the axes it is held at the edge value.
    """

    def __init__(self, axes: tuple[np.ndarray, ...]) -> None:
        self.axes = axes
        self.shape = tuple(len(a) for a in axes)
        self.luts = []
        for ax in axes:
            top = round(float(2.0 ** ax[-1]))
            # lut[x] = largest i <= len-2 with 2**ax[i] <= x (0 below the axis).
            ints = np.arange(top + 1, dtype=np.float64)
            with np.errstate(divide="ignore"):
                lx = np.log2(ints)
            i = np.searchsorted(ax, lx + 1e-12, side="right") - 1
            self.luts.append(np.clip(i, 0, max(len(ax) - 2, 0)).astype(np.intp))

    def cell(self, sizes: tuple[np.ndarray, ...], logs: tuple[np.ndarray, ...]):
        """(flat index of the lower corner, corner offsets, fractions) for each query."""
        idx, frac = [], []
        for ax, lut, x, lx in zip(self.axes, self.luts, sizes, logs, strict=True):
            if len(ax) == 1:
                idx.append(np.zeros(x.shape, dtype=np.intp))
                frac.append(np.zeros(x.shape))
                continue
            # np.clip as two ufuncs: its wrapper costs more than the work on a few queries
            i = lut[np.minimum(np.maximum(x, 0), len(lut) - 1).astype(np.intp)]
            lo = ax[i]
            t = (lx - lo) / (ax[i + 1] - lo)
            np.maximum(t, 0.0, out=t)
            np.minimum(t, 1.0, out=t)
            idx.append(i)
            frac.append(t)
        n0, n1, n2 = self.shape
        strides = (n1 * n2 if n0 > 1 else 0, n2 if n1 > 1 else 0, 1 if n2 > 1 else 0)
        return (idx[0] * n1 + idx[1]) * n2 + idx[2], strides, frac

    @staticmethod
    def interp(table: np.ndarray, cell) -> np.ndarray:
        base, (s0, s1, s2), (t0, t1, t2) = cell
        flat = table.ravel()

        def lerp(a: np.ndarray, b: np.ndarray, t: np.ndarray) -> np.ndarray:
            b -= a
            b *= t
            b += a
            return b

        def along_k(off: int) -> np.ndarray:
            # (the method, not np.take's wrapper)
            return lerp(flat.take(base + off), flat.take(base + off + s2), t2)

        lo = lerp(along_k(0), along_k(s1), t1)
        hi = lerp(along_k(s0), along_k(s0 + s1), t1)
        return lerp(lo, hi, t0)


class _Bag:
    """Average (log space) of several fitted regressors; fit and tabulation time only."""

    def __init__(self, fits: list[Any]) -> None:
        self.fits = fits

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.mean([f.predict(X) for f in self.fits], axis=0)


def _mape_shift(err: np.ndarray) -> float:
    """Constant c minimising mean |exp(c - err) - 1| (err = log measured - log predicted).

    The MAPE-optimal point is the exp(-err)-weighted median of err: below the median of the
    log errors, by about their variance."""
    e = np.sort(err)
    w = np.exp(-e)
    cw = np.cumsum(w)
    return float(e[np.searchsorted(cw, 0.5 * cw[-1])])


class GemmModel(Model):
    """One GPU, engine and dtype. `fit(df)` needs columns m, n, k, latency_s (+ power_w for the
    measured-power residual); `predict(m=, n=, k=)` returns an itemised dict of arrays.

    `power_model`: the family power model (`dse.models.power`, fitted) energy is priced with;
    None: latency only (power and energy NaN). `despike` > 0: the fit first clips each row's log
    time to within that of its m-neighbours' median (`_despike`; fit time only). `quant_gain`: a
    quantised dtype keeps the activation-quantisation term when stage 1's cost with it is below
    this share of the plain base's (`QUANT_GAIN`; 1: whenever it lowers it; fit time only)."""

    kind: ClassVar[str] = "gemm"  # the manifest's kind; dse.models.MODEL_CLASSES

    def __init__(
        self,
        gpu: str = "h100_sxm",
        dtype: str = "bfloat16",
        engine: str = "vllm",
        power_model: PowerModel | None = None,
        seed: int = 0,
        tree_iter: int = 300,
        tree_lr: float = 0.15,
        bags: int = BAGS,
        bag_frac: float = BAG_FRACTION,
        despike: float = 0.0,
        quant_gain: float = QUANT_GAIN,
    ) -> None:
        self.gpu = gpu
        self.dtype = dtype
        self.engine = engine
        self.power_model = power_model
        self.seed = seed
        self.tree_iter = tree_iter
        self.tree_lr = tree_lr
        self.bags = bags
        self.bag_frac = bag_frac
        self.despike = despike
        self.quant_gain = quant_gain

    # ---- fitting ------------------------------------------------------------------------
    def _constants(self) -> dict[str, Any]:
        spec = get_gpu(self.gpu)
        dt = canonical_dtype(self.dtype)
        return {
            "dtype": dt,
            "peak": float(spec.peak_flops_per_s(dt)),
            "bw": float(spec.hbm_bw_bytes_per_s),
            "n_sms": float(spec.n_sms),
            "idle_w": float(spec.idle_power_w),
            "board_w": float(spec.board_power_w),
        }

    @threaded_fit
    def fit(self, df: pd.DataFrame) -> Self:
        from scipy.optimize import least_squares

        c = self._constants()
        self.c_ = c
        m, n, k = (df[col].to_numpy(np.float64) for col in INPUTS)
        y = np.log(df["latency_s"].to_numpy(np.float64))
        if self.despike > 0:  # fit the table's typical time, not its single-row spikes
            y = _despike(m, n, k, y, self.despike)
        flops, b_in, b_out = gemm_work(m, n, k, c["dtype"])
        tc, tm = flops / c["peak"], (b_in + b_out) / c["bw"]

        # Stage 1: theta = log(t_launch), log(eta_c), log(eta_m), log(p) [, log(eta_q),
        # log(t_row)]; soft-L1 in log time, the log computed without overflow (a trial step to
        # p ~ 1e-3 made (1 + 1)^(1/p) inf on every row).
        def resid(th: np.ndarray) -> np.ndarray:
            return self._log_base(tc, tm, th, m, k, c["bw"]) - y

        th0 = np.array([np.log(np.quantile(df["latency_s"], 0.01)), np.log(0.7), np.log(0.8), 1.0])
        fit = least_squares(resid, th0, loss="soft_l1", f_scale=0.05, max_nfev=400)
        self.theta_ = fit.x
        if IN_BYTES[c["dtype"]] < 2.0:  # a quantised dtype: try the activation quantisation
            th1 = np.concatenate([fit.x, [np.log(0.5), np.log(1e-9)]])
            fit_q = least_squares(resid, th1, loss="soft_l1", f_scale=0.05, max_nfev=400)
            if fit_q.cost < self.quant_gain * fit.cost:
                self.theta_ = fit_q.x
        log_base = np.log(
            self._base(tc, tm, self.theta_, self._quant_s(m, k, self.theta_, c["bw"]))
        )
        regime = self._regime(tc, tm, self.theta_)

        # Stage 2: ridge per regime on the physical features (regimes with < 30 rows: zero).
        Z = np.column_stack(self._linear_features(m, n, k, tc, tm, b_in, b_out))
        r1 = y - log_base
        coef = np.zeros((len(REGIMES), Z.shape[1]))
        for g in range(len(REGIMES)):
            sel = regime == g
            if sel.sum() < 30:
                continue
            A, b = Z[sel], r1[sel]
            coef[g] = np.linalg.solve(A.T @ A + 1e-3 * np.eye(A.shape[1]), A.T @ b)
        self.coef_ = coef
        lin = np.einsum("ij,ij->i", Z, coef[regime])
        r2 = r1 - lin

        # Stage 3: boosted trees on the wide feature set, tabulated on the lattice.
        self.axes_ = (np.log2(_m_axis(m)), np.unique(np.log2(n)), np.unique(np.log2(k)))
        self.grid_ = _Grid(self.axes_)  # cell lookup (derived from the axes, not stored)
        X = _residual_features(m, n, k, c)
        shape_id = np.unique(np.column_stack([n, k]), axis=0, return_inverse=True)[1].ravel()
        # Trees bagged over weight shapes: each row's out-of-bag prediction comes from fits
        # that never saw its (n, k), so what is left of it is the error an unseen shape shows;
        # that is what the neighbour smoothing spreads, and what the MAPE shift is chosen on
        # (log predictions estimate the median; the MAPE-optimal point sits a little lower).
        trees, oob = self._trees(X, r2, shape_id, by_shape=True)
        left = r2 - oob
        shift = _mape_shift(left) if self.bags > 1 else 0.0
        table = (
            self._tabulate(trees)
            + _smooth_over_shapes(self.axes_, m, n, k, left, SMOOTH_OCTAVES, SMOOTH_PRIOR_ROWS)
            + shift
        )
        # float16 tables: log-residuals to 1e-3 (0.1 % in time), half the artifact size.
        self.table_ = _f16(table)
        self.range_ = {
            name: (float(v.min()), float(v.max()))
            for name, v in zip(INPUTS, (m, n, k), strict=True)
        }

        # Energy: measured power residual over the family power model, where the rows have it.
        self.power_table_ = None
        pw = df["power_w"].to_numpy(np.float64) if "power_w" in df else np.full(len(df), np.nan)
        ok = np.isfinite(pw)
        if self.power_model is not None and ok.mean() > 0.5:
            lat_fit = np.exp(log_base + lin + self._lookup(self.table_, m, n, k))
            p0 = self._generic_power(flops, b_in + b_out, lat_fit)
            rp = np.log(pw[ok]) - np.log(p0[ok])
            self.power_table_ = self._fit_power(X[ok], m[ok], n[ok], k[ok], shape_id[ok], rp)
        return self

    def _fit_power(
        self,
        X: np.ndarray,
        m: np.ndarray,
        n: np.ndarray,
        k: np.ndarray,
        shape_id: np.ndarray,
        rp: np.ndarray,
        loss: str = "squared_error",
        octaves: float = POWER_SMOOTH_OCTAVES,
        prior_rows: float = POWER_SMOOTH_PRIOR_ROWS,
        weight: np.ndarray | None = None,
        iters: int = POWER_TREE_ITER,
    ) -> np.ndarray:
        """The measured-power residual table (log W over the family power model) from rows with
        power: trees bagged over rows, their in-bag leftover smoothed over shapes, no shift
        (bagging over shapes, its out-of-bag leftover and shift made held-out H200 energy
        worse: 6.27% vs 6.07%)."""
        trees_p, _ = self._trees(
            X, rp, shape_id, by_shape=False, loss=loss, weight=weight, iters=iters
        )
        left_p = rp - trees_p.predict(X)
        smooth_p = _smooth_over_shapes(self.axes_, m, n, k, left_p, octaves, prior_rows)
        return _f16(self._tabulate(trees_p) + smooth_p)

    def _trees(
        self,
        X: np.ndarray,
        r: np.ndarray,
        shape_id: np.ndarray,
        by_shape: bool,
        loss: str = "squared_error",
        weight: np.ndarray | None = None,
        iters: int | None = None,
    ) -> tuple[Any, np.ndarray]:
        """Boosted trees on (X, r): one fit, or the average (log space) of `bags` fits on seeded
        subsamples of `bag_frac` of the rows, or of the (n, k) shapes when `by_shape`. Also
        returns each row's out-of-bag prediction (the average of the fits that did not see it;
        the in-sample prediction where every fit saw it). The average is tabulated, so bagging
        costs fit time only, nothing at prediction."""
        from sklearn.ensemble import HistGradientBoostingRegressor

        def one(seed: int) -> Any:
            return HistGradientBoostingRegressor(
                max_iter=self.tree_iter if iters is None else iters,
                learning_rate=self.tree_lr,
                loss=loss,
                max_leaf_nodes=31,
                min_samples_leaf=20,
                early_stopping=False,
                random_state=seed,
            )

        if self.bags <= 1:
            reg = one(self.seed).fit(X, r, sample_weight=weight)
            return reg, reg.predict(X)
        fits, oob_sum, oob_n = [], np.zeros(len(r)), np.zeros(len(r))
        for b in range(self.bags):
            rng = np.random.default_rng(self.seed + 1000 * b)
            if by_shape:
                keep = rng.random(shape_id.max() + 1) < self.bag_frac
                inbag = keep[shape_id]
            else:
                inbag = rng.random(len(r)) < self.bag_frac
            w = None if weight is None else weight[inbag]
            reg = one(self.seed + b).fit(X[inbag], r[inbag], sample_weight=w)
            fits.append(reg)
            if (~inbag).any():
                oob_sum[~inbag] += reg.predict(X[~inbag])
                oob_n[~inbag] += 1
        bag = _Bag(fits)
        oob = np.where(oob_n > 0, oob_sum / np.maximum(oob_n, 1), 0.0)
        if (oob_n == 0).any():
            oob[oob_n == 0] = bag.predict(X[oob_n == 0])
        return bag, oob

    def _tabulate(self, trees: Any) -> np.ndarray:
        gm, gn, gk = np.meshgrid(*(2.0**a for a in self.axes_), indexing="ij")
        X = _residual_features(gm.ravel(), gn.ravel(), gk.ravel(), self.c_)
        return trees.predict(X).reshape(gm.shape)

    # ---- the model ----------------------------------------------------------------------
    @staticmethod
    def _base(
        tc: np.ndarray, tm: np.ndarray, th: np.ndarray, tq: np.ndarray | None = None
    ) -> np.ndarray:
        """Stage 1's time: launch + overlap of compute and memory (+ quantisation `tq`)."""
        t_launch, eta_c, eta_m, p = np.exp(th[:4])
        a, b = tc / eta_c, tm / eta_m
        hi = np.maximum(a, b)
        # (a^p + b^p)^(1/p) computed as hi * (1 + (lo/hi)^p)^(1/p) to avoid under/overflow.
        smooth = hi * (1.0 + (np.minimum(a, b) / hi) ** p) ** (1.0 / p)
        return t_launch + smooth if tq is None else t_launch + smooth + tq

    @staticmethod
    def _quant_s(m: np.ndarray, k: np.ndarray, th: np.ndarray, bw: float) -> np.ndarray | None:
        """Activation quantisation time t_q (None for a 4-coefficient theta: no term, no array
        on the predict path); `bw` in bytes/s."""
        if len(th) <= 4:
            return None
        eta_q, t_row = np.exp(th[4:6])
        return QUANT_BYTES * m * k / (eta_q * bw) + m * t_row

    @classmethod
    def _log_base(
        cls, tc: np.ndarray, tm: np.ndarray, th: np.ndarray, m: np.ndarray, k: np.ndarray, bw: float
    ) -> np.ndarray:
        """log of `_base` without overflow for any finite theta (the fit's trial steps): the
        overlap's log is log hi + log1p((lo/hi)^p) / p, and the terms add by logaddexp."""
        log_launch, log_eta_c, log_eta_m, log_p = th[:4]
        la, lb = np.log(tc) - log_eta_c, np.log(tm) - log_eta_m
        lhi, llo = np.maximum(la, lb), np.minimum(la, lb)
        p = np.exp(log_p)
        log_smooth = lhi + np.log1p(np.exp(p * (llo - lhi))) / p
        out = np.logaddexp(log_launch, log_smooth)
        if len(th) > 4:
            log_eta_q, log_row = th[4:6]
            lq = np.logaddexp(np.log(QUANT_BYTES * m * k / bw) - log_eta_q, np.log(m) + log_row)
            out = np.logaddexp(out, lq)
        return out

    @staticmethod
    def _regime(tc: np.ndarray, tm: np.ndarray, th: np.ndarray) -> np.ndarray:
        t_launch, eta_c, eta_m, _ = np.exp(th[:4])
        a, b = tc / eta_c, tm / eta_m
        # The first condition that holds, as np.select([...], [0, 1, 2, 3], 4) picks it, with
        # nested where: np.select builds condition and choice lists (~10 us of fixed cost per call).
        i8 = np.int8
        return np.where(
            t_launch >= np.maximum(a, b),
            i8(0),
            np.where(
                b >= 2 * a, i8(1), np.where(b >= a, i8(2), np.where(a <= 2 * b, i8(3), i8(4)))
            ),
        ).astype(np.int8)

    def _linear_features(self, m, n, k, tc, tm, b_in, b_out) -> list[np.ndarray]:
        """Stage-2 (linear) features in column order: 1, log t_compute, log t_memory, log pf,
        log bytes_in, log bytes_out, wave_eff_128x128, wave_eff_128x256, pad_m16."""
        n_sms = self.c_["n_sms"]
        _, eta_c, eta_m, _ = np.exp(self.theta_[:4])
        return [
            np.ones_like(m),
            np.log(tc / eta_c),
            np.log(tm / eta_m),
            np.log(m * n / k),
            np.log(b_in),
            np.log(b_out),
            _wave_eff(m, n, 128, 128, n_sms),
            _wave_eff(m, n, 128, 256, n_sms),
            np.ceil(m / 16) * 16 / m,
        ]

    def _cell(self, m, n, k):
        return self.grid_.cell((m, n, k), (np.log2(m), np.log2(n), np.log2(k)))

    def _lookup(self, table: np.ndarray, m, n, k) -> np.ndarray:
        return _Grid.interp(table, self._cell(m, n, k))

    def _generic_power(self, flops, bytes_total, latency_s) -> np.ndarray:
        uc = flops / self.c_["peak"] / latency_s
        um = bytes_total / self.c_["bw"] / latency_s
        return self.power_model.predict(
            uc, um, latency_s, idle_power_w=self.c_["idle_w"], board_power_w=self.c_["board_w"]
        )["power_w"]

    def predict(self, m: Any, n: Any, k: Any) -> dict[str, np.ndarray]:
        """Itemised prediction per call; inputs broadcast, outputs are float arrays (regime int8).

        latency_s = roofline_s + correction_s, roofline_s = launch_s + overlap of the
        fitted-efficiency compute and memory times (+ the activation quantisation, where
        fitted); t_compute_s / t_memory_s are the spec-sheet ideal times (2mnk / peak, bytes /
        bandwidth) and *_util = ideal / latency; power_w from
        `power_model` (times the measured-power residual where fitted), energy_j = power * time.
        """
        lat, shape, cell = self._latency(m, n, k)
        latency = lat["latency_s"]
        power = self._power_of(lat["flops"], lat["bytes"], latency, cell)
        out = {"latency_s": latency, "energy_j": power * latency, "power_w": power}
        out.update((key, v) for key, v in lat.items() if key != "latency_s")
        return {key: v.reshape(shape) for key, v in out.items()}

    def latency_power(self, m: Any, n: Any, k: Any) -> dict[str, np.ndarray]:
        """`predict`'s latency_s and power_w alone (the same arithmetic): what the pricer reads,
        without the other items' ~20 numpy calls (a one-configuration call prices one stacked
        GEMM batch)."""
        core, shape, cell = self._core(m, n, k)
        latency, flops, b_in, b_out = core["latency_s"], core["flops"], core["b_in"], core["b_out"]
        power = self._power_of(flops, b_in + b_out, latency, cell)
        return {"latency_s": latency.reshape(shape), "power_w": power.reshape(shape)}

    def _power_of(
        self, flops: np.ndarray, bytes_total: np.ndarray, latency: np.ndarray, cell: Any
    ) -> np.ndarray:
        """Watts of each call: the family power model times the measured-power residual."""
        if self.power_model is None:
            return np.full_like(latency, np.nan)
        power = self._generic_power(flops, bytes_total, latency)
        if self.power_table_ is not None:
            # the measured-power residual may not push a kernel outside [idle, board] W
            power = np.clip(
                power * np.exp(_Grid.interp(self.power_table_, cell)),
                self.c_["idle_w"],
                self.c_["board_w"],
            )
        return power

    def _latency(
        self, m: Any, n: Any, k: Any
    ) -> tuple[dict[str, np.ndarray], tuple[int, ...], Any]:
        """(latency items on the flattened inputs, the broadcast shape, the table cells)."""
        core, shape, cell = self._core(m, n, k)
        latency, roof, tc, tm = (core[x] for x in ("latency_s", "roofline_s", "tc", "tm"))
        out = {
            "latency_s": latency,
            "t_compute_s": tc,
            "t_memory_s": tm,
            "launch_s": np.full_like(latency, np.exp(self.theta_[0])),
            "roofline_s": roof,
            "correction_s": latency - roof,
            "compute_util": tc / latency,
            "memory_util": tm / latency,
            "flops": core["flops"],
            "bytes": core["b_in"] + core["b_out"],
            "regime": core["regime"],
        }
        return out, shape, cell

    def _core(self, m: Any, n: Any, k: Any) -> tuple[dict[str, np.ndarray], tuple[int, ...], Any]:
        """(latency, roofline, ideal times, work and regime on the flattened inputs, the
        broadcast shape, the table cells): what `predict` and `latency_power` share."""
        m, n, k = (np.asarray(v, dtype=np.float64) for v in (m, n, k))
        if not m.shape == n.shape == k.shape:  # (np.broadcast_arrays returns them as they are
            m, n, k = np.broadcast_arrays(m, n, k)  # when their shapes agree: ~10 us saved)
        shape = m.shape
        m, n, k = m.ravel(), n.ravel(), k.ravel()
        c = self.c_
        flops, b_in, b_out = gemm_work(m, n, k, c["dtype"])
        tc, tm = flops / c["peak"], (b_in + b_out) / c["bw"]
        roof = self._base(tc, tm, self.theta_, self._quant_s(m, k, self.theta_, c["bw"]))
        regime = self._regime(tc, tm, self.theta_)
        # Stage 2 without an (n, 9) matrix: per feature, its coefficient for each row's regime.
        log_corr = self.coef_[:, 0][regime]
        feats = self._linear_features(m, n, k, tc, tm, b_in, b_out)
        for j in range(1, len(feats)):
            log_corr += feats[j] * self.coef_[:, j][regime]
        cell = self._cell(m, n, k)
        log_corr += _Grid.interp(self.table_, cell)
        latency = roof * np.exp(log_corr)
        core = {"latency_s": latency, "roofline_s": roof, "tc": tc, "tm": tm, "flops": flops}
        return {**core, "b_in": b_in, "b_out": b_out, "regime": regime}, shape, cell

    # ---- artifact protocol --------------------------------------------------------------
    def to_state(self) -> dict[str, np.ndarray]:
        c = self.c_
        state: dict[str, np.ndarray] = {
            "meta": np.array([self.gpu, c["dtype"], self.engine]),
            "constants": np.array([c["peak"], c["bw"], c["n_sms"], c["idle_w"], c["board_w"]]),
            "theta": self.theta_,
            "coef": self.coef_,
            "axis_m": self.axes_[0],
            "axis_n": self.axes_[1],
            "axis_k": self.axes_[2],
            "table": self.table_.astype(np.float16),
            "range": np.array([self.range_[i] for i in INPUTS]),
        }
        if self.power_table_ is not None:
            state["power_table"] = self.power_table_.astype(np.float16)
        if self.power_model is not None:
            state.update({f"power/{key}": v for key, v in self.power_model.to_state().items()})
        return state

    @classmethod
    def from_state(cls, state: Mapping[str, np.ndarray]) -> Self:
        try:
            gpu, dtype, engine = (str(v) for v in state["meta"])
            power = {key[6:]: v for key, v in state.items() if key.startswith("power/")}
            obj = cls(gpu, dtype, engine, PowerModel.from_state(power) if power else None)
            peak, bw, n_sms, idle_w, board_w = (float(v) for v in state["constants"])
            obj.c_ = {
                "dtype": dtype,
                "peak": peak,
                "bw": bw,
                "n_sms": n_sms,
                "idle_w": idle_w,
                "board_w": board_w,
            }
            obj.theta_ = np.asarray(state["theta"], dtype=np.float64)
            obj.coef_ = np.asarray(state["coef"], dtype=np.float64)
            obj.axes_ = tuple(np.asarray(state[f"axis_{a}"], np.float64) for a in INPUTS)
            # built here, not on first use: predict never changes a (shared, cached) model
            obj.grid_ = _Grid(obj.axes_)
            obj.table_ = np.asarray(state["table"], dtype=np.float64)
            pt = state.get("power_table")
            obj.power_table_ = None if pt is None else np.asarray(pt, dtype=np.float64)
            obj.range_ = {
                i: (float(lo), float(hi))
                for i, (lo, hi) in zip(INPUTS, state["range"], strict=True)
            }
        except KeyError as exc:
            raise ArtifactError(f"GEMM model state incomplete: {exc.args[0]!r} missing") from None
        return obj

    @property
    def measured_power(self) -> bool:
        return self.power_table_ is not None

    def coefficients(self) -> dict[str, Any]:
        """The analytical coefficients in physical units (for the manifest and docs)."""
        t_launch, eta_c, eta_m, p = np.exp(self.theta_[:4])
        quant = {}
        if len(self.theta_) > 4:  # the activation quantisation stage 1 kept
            eta_q, t_row = np.exp(self.theta_[4:6])
            quant = {"quant_efficiency": float(eta_q), "quant_row_s": float(t_row)}
        return {
            "launch_s": float(t_launch),
            "compute_efficiency": float(eta_c),
            "memory_efficiency": float(eta_m),
            "overlap_p": float(p),
            # Ridge point in FLOP/byte: above it the fitted compute time exceeds memory time.
            "ridge_flop_per_byte": float(eta_c * self.c_["peak"] / (eta_m * self.c_["bw"])),
            **quant,
        }


def regime_names(codes: Any) -> np.ndarray:
    """Regime codes (0..4) -> names, vectorised."""
    return np.asarray(REGIMES, dtype=object)[np.asarray(codes, dtype=np.intp)]
