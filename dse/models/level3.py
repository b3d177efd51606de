"""Level 3 of HYMELL: the whole request, corrected for what no kernel shows.

Kernel models (Levels 1-2) price what the GPU computes; a serving engine adds per-step host
work (scheduling, sampling, Python), launch gaps between kernels, synchronisation across
tensor-parallel ranks, and KV-cache preemption when the batch does not fit. Level 3 learns these
from whole-request measurements (argonne static batches), per engine, in two stages:

1. a physical overhead model, linear in named coefficients fitted with non-negative least
   squares on relative error:
       ttft   = a_pre * T_pre + o_step
       decode = a_dec * T_rest + a_attn * T_attn + a_comm * T_comm + steps * o_step
                + a_kv_overflow * T_dec * min(kv_fill - 1, 1)+
       o_step = c0 + c_batch * batch + c_layer * n_layers + c_tp * n_layers * log2(tp)
   (T_attn: attention over the KV cache, T_comm: all-reduces, T_rest: the other decode
   kernels), where every kernel term a * T is in fact a * T + a_roof * T_roofline: the
   engine's kernels may be nearer the fitted kernel model or the roofline (argonne's engines
   predate the kernel tables); a prior keeps a + a_roof near 1 and a_roof near 0 unless the
   data say otherwise
2. a small MLP ensemble on the remaining log ratio with global features (layers, d_model,
   batch, lengths, MoE, tensor parallelism, Level-1/2 times), clipped to +-LOG_CLIP, applied
   to both phases of configurations whose KV cache fits (MLP_MAX_FILL; past it, stage 1 alone).

The error band comes from held-out (leave-one-model-out) log residual quantiles of the whole
stack, widened for configurations outside the fitted range.

    lvl3 = Level3.from_state(state)
    out = lvl3.correct(g)   # g: GlobalInputs arrays; returns ttft_s, decode_s, factors, band

One file (~640 lines) on purpose: the two stages (the physical overhead model, the residual) and
their per-engine kinds are one model contract over one set of global inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import numpy as np

from dse._same import all_equal, equals, where
from dse.errors import ArtifactError
from dse.models._nn import MLP, fit_mlp, merge_ensemble
from dse.models.band import BAND_QUANTILES as BAND_QUANTILES  # the rule every band shares
from dse.models.band import OOR_BAND_WIDEN as OOR_BAND_WIDEN
from dse.models.base import Model, RangeMiss, any_true, clip, filled, range_miss, within
from dse.models.threads import threaded_fit

# Structured overhead terms (design-matrix columns), named for the manifest and the breakdown.
TERMS: tuple[str, ...] = (
    # Kernel time factors per group, each on the Level-1/2 model time and on the roofline time
    # of the same operators: the engine's kernels may be nearer either (argonne's engines
    # predate the kernel tables); a prior keeps each pair summing to 1.
    "a_pre",  # x prefill time (Levels 1-2)
    "a_pre_roof",  # x prefill roofline time
    "a_dec",  # x decode time of GEMMs, norms and elementwise operators
    "a_dec_roof",
    "a_attn",  # x decode time of attention over the KV cache
    "a_attn_roof",
    "a_comm",  # x decode time of tensor-parallel all-reduces
    "a_comm_roof",
    "c0_s",  # per step (prefill counts as one step)
    "c_batch_s",  # per step per sequence
    "c_layer_s",  # per step per layer
    "c_tp_s",  # per step per layer per doubling of tensor parallelism
    "a_kv_overflow",  # x decode time x KV overflow fraction (preemption, recompute)
    # x decode attention time x (query heads per KV head - 1): argonne's engines predate
    # GQA-aware decode kernels and read each KV head once per query head (partly from L2)
    "a_attn_gqa",
)
# Per-step overhead terms, in the column order of `step_overhead_terms`.
STEP_TERMS: tuple[str, ...] = ("c0_s", "c_batch_s", "c_layer_s", "c_tp_s")
STEP_IDX: tuple[int, ...] = tuple(TERMS.index(t) for t in STEP_TERMS)
# (model term, roofline term) of each kernel group.
PAIRS: tuple[tuple[str, str], ...] = (
    ("a_pre", "a_pre_roof"),
    ("a_dec", "a_dec_roof"),
    ("a_attn", "a_attn_roof"),
    ("a_comm", "a_comm_roof"),
)
# MLP inputs, in order (see `mlp_features`).
FEATURES: tuple[str, ...] = (
    "log_t_pre",
    "log_t_step",
    "log_batch",
    "log_prompt",
    "log_output",
    "log_layers",
    "log_d_model",
    "log2_tp",
    "moe",
    "log2_gqa",
    "kv_fill",
    "pre_share",
    "log_waves",
)
# Global inputs whose fitted range decides `out_of_range` (name -> GlobalInputs attribute).
RANGE_INPUTS: tuple[str, ...] = (
    "batch",
    "prompt",
    "output",
    "n_layers",
    "d_model",
    "tp",
    "n_experts",
    "kv_fill",
    "gqa",  # an MLP input (log2 of it) and the a_attn_gqa term's: recorded by fits after it
)
# Inputs Level 3 reads linearly (the rest in log coordinates): their distance outside the range
# is measured in units of the fitted span, so a KV fill of 1e-5 against a fitted minimum of
# 1e-4 is inside (both are "the cache is nearly empty").
LINEAR_INPUTS: tuple[str, ...] = ("kv_fill",)
# Kernel groups whose tie-break leans to the roofline rather than to the fitted kernel model:
# decode attention over the KV cache. argonne's engines predate the attention tables, and their
# decode attention reads the cache at about the roofline rate; leave-one-model-out, the fitted
# engines often hold no multi-head model (argonne's TensorRT-LLM: Llama-2-7B is the only one), so
# the data cannot choose the mix for it and the tie-break decides (held out: docs/accuracy.md).
TIE_TO_ROOF: tuple[str, ...] = ("a_attn",)
# The residual MLP learns and corrects only configurations whose KV cache fits (kv_fill <= 1):
# past it, the wave count and the engine's preemption swing with memory the engine keeps back
# (not recorded), a few models per engine cannot teach that, and the MLP's extrapolation made the
# held-out overflow rows worse than the structured stage alone (docs/accuracy.md).
MLP_MAX_FILL = 1.0
GQA_PRIOR = 0.3  # prior weight of a_attn_gqa towards 0, relative to the kernel-factor prior
LOG_CLIP = 0.35  # the MLP may move a prediction by at most x0.70 .. x1.42
# Which Level-3 kernel factor (a key of `Level3.correct`) scales an operator of each kind
# (`dse.predict.ops.Op.kind`), per phase; "*": every other kind. Written once: the predictor's factors
# per operator, the GlobalInputs parts (`t_dec_attn_s`, `t_dec_comm_s`) and the design matrix's
# column split (`rest = t_dec - attn - comm`) all follow it, so the corrected totals of
# `correct` equal the sum of the corrected operators (tests/predict/test_level3_once.py).
KERNEL_GROUPS: dict[str, dict[str, str]] = {
    "prefill": {"*": "pre_factor"},
    "decode": {
        "attention_decode": "dec_attn_factor",  # attention over the KV cache: a_attn
        "allreduce": "dec_comm_factor",  # tensor-parallel all-reduces: a_comm
        "*": "dec_factor",  # GEMMs, norms, elementwise: a_dec
    },
}
FACTOR_KEYS: tuple[str, ...] = tuple(k for g in KERNEL_GROUPS.values() for k in g.values())


def group_kinds(phase: str, factor: str) -> tuple[str, ...]:
    """The operator kinds of `phase` whose Level-3 factor is `factor` (named kinds only)."""
    return tuple(k for k, f in KERNEL_GROUPS[phase].items() if f == factor and k != "*")


def kind_factors(phase: str, corr: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Operator kind ("*": any other) -> the factor array of `corr` (a `correct` output) that
    scales its time and energy in `phase`. A missing factor is an error, not a silent 1."""
    return {kind: corr[key] for kind, key in KERNEL_GROUPS[phase].items()}


# The residual MLPs of Levels 2 and 3 (fit_mlp settings): tanh, L-BFGS (full batch: a few hundred
# rows fit in milliseconds and converge better than Adam), 500 iterations, gradient tolerance 1e-6.
RESIDUAL_MLP: dict[str, Any] = {
    "activation": "tanh",
    "solver": "lbfgs",
    "max_iter": 500,
    "tol": 1e-6,
    "constant_rtol": 0.0,
}


@dataclass
class GlobalInputs:
    """Per-configuration arrays Level 3 reads (one GPU's share of the work)."""

    engine: np.ndarray  # str
    t_pre_s: np.ndarray  # Level-1/2 prefill time
    t_dec_s: np.ndarray  # Level-1/2 time of all decode steps
    t_dec_attn_s: np.ndarray  # of which attention over the KV cache
    t_pre_roof_s: np.ndarray  # roofline time of the same operators
    t_dec_roof_s: np.ndarray
    t_dec_attn_roof_s: np.ndarray
    t_dec_comm_roof_s: np.ndarray
    t_dec_comm_s: np.ndarray  # of which tensor-parallel all-reduces
    steps: np.ndarray  # decode steps (output_tokens - 1)
    batch: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    n_layers: np.ndarray
    d_model: np.ndarray
    tp: np.ndarray
    n_experts: np.ndarray
    gqa: np.ndarray  # n_heads / n_kv_heads
    kv_fill: np.ndarray  # KV cache needed / KV memory available per GPU (> 1: preemption)
    waves: np.ndarray  # consecutive waves the batch runs in when its KV cache does not fit

    def value(self, name: str) -> np.ndarray:
        return np.asarray(getattr(self, name), dtype=float)

    def take(self, idx: np.ndarray) -> GlobalInputs:
        return GlobalInputs(**{k: np.asarray(v)[idx] for k, v in vars(self).items()})


def step_overhead_terms(g: GlobalInputs) -> np.ndarray:
    """(n, 4) overhead regressors per step of one sequence: the engine steps `waves` times as
    often when the batch runs in waves, each step for batch / waves sequences."""
    return _columns(_step_columns(g))


def _step_columns(g: GlobalInputs) -> list[np.ndarray]:
    """The columns of `step_overhead_terms`, each (n,)."""
    L = g.value("n_layers")
    w = g.value("waves")
    return [w, g.value("batch"), w * L, w * L * np.log2(np.maximum(g.value("tp"), 1.0))]


def kv_overflow(g: GlobalInputs) -> np.ndarray:
    """KV overflow beyond what the waves already count, in [0, 1]: preemption and recompute
    cost saturates (a few measured models only; unbounded it would extrapolate wildly)."""
    return clip(g.value("kv_fill") - 1.0, 0.0, 1.0)


def gqa_excess(g: GlobalInputs) -> np.ndarray:
    """Query heads per KV head minus one (0 for multi-head attention)."""
    return np.maximum(g.value("gqa"), 1.0) - 1.0


def design(g: GlobalInputs) -> tuple[np.ndarray, np.ndarray]:
    """Design matrices (n, len(TERMS)) of ttft and of the decode phase, so that
    ttft = X_ttft @ theta and decode = X_dec @ theta."""
    step = step_overhead_terms(g)
    steps = g.value("steps")[:, None]
    overflow = kv_overflow(g)
    rest = g.t_dec_s - g.t_dec_attn_s - g.t_dec_comm_s
    rest_roof = g.t_dec_roof_s - g.t_dec_attn_roof_s - g.t_dec_comm_roof_s
    n = len(g.t_pre_s)
    x_ttft = np.zeros((n, len(TERMS)))
    x_dec = np.zeros((n, len(TERMS)))
    x_ttft[:, TERMS.index("a_pre")] = g.t_pre_s
    x_ttft[:, TERMS.index("a_pre_roof")] = g.t_pre_roof_s
    x_ttft[:, list(STEP_IDX)] = step
    for term, col in (
        ("a_dec", rest),
        ("a_dec_roof", rest_roof),
        ("a_attn", g.t_dec_attn_s),
        ("a_attn_roof", g.t_dec_attn_roof_s),
        ("a_comm", g.t_dec_comm_s),
        ("a_comm_roof", g.t_dec_comm_roof_s),
        ("a_kv_overflow", g.t_dec_s * overflow),
        ("a_attn_gqa", g.t_dec_attn_s * gqa_excess(g)),
    ):
        x_dec[:, TERMS.index(term)] = col
    x_dec[:, list(STEP_IDX)] = steps * step
    return x_ttft, x_dec


def mlp_features(g: GlobalInputs, ttft_s: np.ndarray, decode_s: np.ndarray) -> np.ndarray:
    """(n, len(FEATURES)) inputs of the residual MLP, after the structured stage."""
    steps = np.maximum(g.value("steps"), 1.0)
    total = np.maximum(ttft_s + decode_s, 1e-12)
    cols = [
        np.log(np.maximum(g.t_pre_s, 1e-9)),
        np.log(np.maximum(g.t_dec_s / steps, 1e-9)),
        _whole_log(g.value("batch")),
        _whole_log(g.value("prompt")),
        _whole_log(np.maximum(g.value("output"), 1.0)),
        _whole_log(g.value("n_layers")),
        _whole_log(g.value("d_model")),
        _whole_log(np.maximum(g.value("tp"), 1.0), np.log2),
        (g.value("n_experts") > 1).astype(float),
        _whole_log(np.maximum(g.value("gqa"), 1.0), np.log2),
        clip(g.value("kv_fill"), 0.0, 4.0),
        ttft_s / total,
        _whole_log(g.value("waves")),
    ]
    return _columns(cols)


def _columns(cols: list[np.ndarray]) -> np.ndarray:
    """np.stack(cols, axis=1) of (n,) columns: the same C-ordered (n, k) array, made as the
    rows' array transposed and copied (np.stack expands each column first, ~1 us apiece)."""
    return np.array(cols, dtype=float).T.copy()


# A column of whole numbers between 1 and this (sizes, batch, TP, waves) has its log taken
# once per whole number of its range (`_whole_log`).
WHOLE_LOG_MAX = 1 << 16


def _whole_log(x: np.ndarray, log: Callable[[np.ndarray], np.ndarray] = np.log) -> np.ndarray:
    """`log(x)` of a float64 column, the same array: a long column of whole numbers in
    [1, WHOLE_LOG_MAX] (a sweep's batch sizes, widths, depths: a handful of values over
    ~10^5 rows) as the log of each whole number of its range, taken per row: the same numpy
    loop on the same values, ~5 cheap passes instead of ~55-150 instructions a row."""
    if x.dtype != np.float64 or x.ndim != 1 or len(x) < 4096:
        return log(x)
    lo, hi = float(x.min()), float(x.max())
    if not (lo >= 1.0 and hi <= WHOLE_LOG_MAX):  # NaN fails too
        return log(x)
    k = x.astype(np.intp)
    if not (k == x).all():
        return log(x)
    table = log(np.arange(int(lo), int(hi) + 1, dtype=np.float64))
    return table.take(k - int(lo))


@dataclass
class EngineFit:
    """Level-3 state of one engine."""

    theta: np.ndarray  # (len(TERMS),)
    mlps: tuple[MLP, ...]  # ensemble (may be empty: structured stage only)
    band_log: np.ndarray  # (2,) held-out log-residual quantiles (lo < 0 < hi, usually)
    cv_mape_pct: float

    def __post_init__(self) -> None:
        # The ensemble as one forward pass (exact); None when its members cannot be merged.
        # MLP.predict runs in float32 too, and a row's result does not depend on its batch
        # (Forward32's GEMV did: a batch of one and the same row in a sweep moved by ~1.5e-8).
        self.merged = merge_ensemble(self.mlps)


class Level3(Model):
    """End-to-end correction for every engine fitted on one GPU's measurements."""

    kind: ClassVar[str] = "level3_e2e"  # the manifest's kind; dse.models.MODEL_CLASSES

    def __init__(
        self,
        hidden: tuple[int, ...] = (8,),
        alpha: float = 3.0,
        n_ensemble: int = 5,
        use_mlp: bool = True,
        seed: int = 0,
        prior_weight: float = 20.0,
        ttft_weight: float = 1.0,
    ) -> None:
        self.hidden = hidden
        self.alpha = alpha
        self.n_ensemble = n_ensemble
        self.use_mlp = use_mlp
        self.seed = seed
        self.prior_weight = prior_weight
        self.ttft_weight = ttft_weight

    # ---- fitting --------------------------------------------------------------------------
    @threaded_fit
    def fit(
        self,
        g: GlobalInputs,
        latency_s: np.ndarray,
        groups: np.ndarray,
        ttft_s: np.ndarray | None = None,
    ) -> Self:
        """Fit every engine in `g` on measured batch latencies; `groups` (model names) drive the
        leave-one-group-out residuals behind the error band. `ttft_s` (NaN where unknown) adds
        measured time-to-first-token rows to the structured fit."""
        from threadpoolctl import threadpool_limits

        # Hundreds of rows: BLAS threads only contend (4-8x slower on a shared 2-core machine).
        with threadpool_limits(limits=1):
            return self._fit_all(g, latency_s, groups, ttft_s)

    def _fit_all(
        self,
        g: GlobalInputs,
        latency_s: np.ndarray,
        groups: np.ndarray,
        ttft_s: np.ndarray | None,
    ) -> Self:
        self.engines_: dict[str, EngineFit] = {}
        self.cv_: dict[str, dict[str, Any]] = {}
        self.range_ = {k: _range(g.value(k)) for k in RANGE_INPUTS}
        y = np.asarray(latency_s, dtype=float)
        tt = np.full_like(y, np.nan) if ttft_s is None else np.asarray(ttft_s, dtype=float)
        for engine in sorted(np.unique(g.engine)):
            idx = np.nonzero(equals(g.engine, engine))[0]
            gi, yi, ti, grp = g.take(idx), y[idx], tt[idx], np.asarray(groups)[idx]
            held = np.full(len(idx), np.nan)
            held_ttft = np.full(len(idx), np.nan)
            uniq = np.unique(grp)
            if len(uniq) > 1:
                for m in uniq:
                    tr, te = grp != m, grp == m
                    fit = self._fit_engine(gi.take(tr), yi[tr], ti[tr])
                    p = _parts(fit, gi.take(te))
                    held[te] = p["ttft_s"] + p["decode_s"]
                    held_ttft[te] = p["ttft_s"]
            final = self._fit_engine(gi, yi, ti)
            ok = np.isfinite(held)
            logres = np.log(yi[ok] / held[ok]) if ok.any() else np.zeros(1)
            final.band_log = np.quantile(logres, BAND_QUANTILES)
            final.cv_mape_pct = (
                float(np.mean(np.abs(held[ok] / yi[ok] - 1)) * 100) if ok.any() else float("nan")
            )
            self.engines_[str(engine)] = final
            self.cv_[str(engine)] = {
                "scheme": "leave-one-model-out",
                "rows": int(ok.sum()),
                "groups": len(uniq),
                "latency_mape_pct": final.cv_mape_pct,
                "held_out_pred_s": held,
                "held_out_ttft_s": held_ttft,
            }
            has_t = np.isfinite(ti) & np.isfinite(held_ttft)
            if has_t.any():
                self.cv_[str(engine)]["ttft_rows"] = int(has_t.sum())
                self.cv_[str(engine)]["ttft_mape_pct"] = float(
                    np.mean(np.abs(held_ttft[has_t] / ti[has_t] - 1)) * 100
                )
        return self

    def _fit_engine(self, g: GlobalInputs, y: np.ndarray, ttft: np.ndarray) -> EngineFit:
        theta = _fit_structured(g, y, ttft, self.prior_weight, self.ttft_weight)
        mlps: list[MLP] = []
        if self.use_mlp and len(y) >= 8:
            ttft_s, dec_s = _structured(theta, g)
            X = mlp_features(g, ttft_s, dec_s)
            r = np.log(y / (ttft_s + dec_s))
            fits = g.value("kv_fill") <= MLP_MAX_FILL  # see MLP_MAX_FILL
            if fits.sum() >= 8:
                X, r = X[fits], r[fits]
            for k in range(self.n_ensemble):
                mlps.append(
                    fit_mlp(
                        X,
                        r,
                        hidden=self.hidden,
                        alpha=self.alpha,
                        seed=self.seed + k,
                        **RESIDUAL_MLP,
                    )
                )
        return EngineFit(theta, tuple(mlps), np.zeros(2), float("nan"))

    # ---- prediction -----------------------------------------------------------------------
    def correct(
        self, g: GlobalInputs, gqa_aware: np.ndarray | None = None
    ) -> dict[str, np.ndarray]:
        """Corrected ttft_s and decode_s, the factor each Level-2 time was scaled by, the
        additive overhead seconds, and the band (log quantiles) per configuration.

        `gqa_aware` (bool per configuration; None: none): rows whose engine's decode attention
        reads each KV head once per group of query heads (vLLM 0.11.1's kernels), priced
        without the `a_attn_gqa` excess that argonne's engines showed."""
        n = len(g.t_pre_s)
        if n and (n == 1 or all_equal(g.engine)):  # one engine: no scatter
            fit, known = self._fit_of(str(g.engine[0]))
            return {
                **_parts(fit, g, gqa_aware),
                "band_lo": filled(n, float(fit.band_log[0])),
                "band_hi": filled(n, float(fit.band_log[1])),
                "engine_known": np.full(n, known),
            }
        out = {
            "ttft_s": np.zeros(n),
            "decode_s": np.zeros(n),
            "pre_factor": np.ones(n),
            "dec_factor": np.ones(n),
            "dec_attn_factor": np.ones(n),
            "dec_comm_factor": np.ones(n),
            "pre_overhead_s": np.zeros(n),
            "dec_overhead_s": np.zeros(n),
            "band_lo": np.zeros(n),
            "band_hi": np.zeros(n),
            "engine_known": np.zeros(n, dtype=bool),
        }
        for engine in np.unique(g.engine):  # several engines (or none): each on its rows
            idx = np.nonzero(equals(g.engine, engine))[0]
            fit, known = self._fit_of(str(engine))
            out["engine_known"][idx] = known
            aware = None if gqa_aware is None else np.asarray(gqa_aware)[idx]
            parts = _parts(fit, g.take(idx), aware)
            for k, v in parts.items():
                out[k][idx] = v
            out["band_lo"][idx] = fit.band_log[0]
            out["band_hi"][idx] = fit.band_log[1]
        return out

    def _fit_of(self, engine: str) -> tuple[EngineFit, bool]:
        """(the engine's fit, whether it has one): an engine without measurements takes the
        closest fitted one (vLLM when present)."""
        fit = self.engines_.get(engine)
        if fit is not None:
            return fit, True
        return self.engines_.get("vllm") or next(iter(self.engines_.values())), False

    def out_of_range(self, g: GlobalInputs) -> np.ndarray:
        """True where a global input lies outside what Level 3 was fitted on."""
        oor = np.zeros(len(g.t_pre_s), dtype=bool)
        for o in self.out_of_range_by(g).values():
            oor |= o
        return oor

    def out_of_range_by(self, g: GlobalInputs) -> dict[str, np.ndarray]:
        """Global input name -> True where it lies outside the fitted range (only inputs that
        are out somewhere)."""
        return {k: m.outside for k, m in self.range_misses(g).items()}

    def range_misses(self, g: GlobalInputs) -> dict[str, RangeMiss]:
        """Global input name -> its `RangeMiss` against the fitted range, for every input of
        the range (RANGE_INPUTS as the artifact recorded them) that leaves it somewhere by
        more than RANGE_TOL."""
        out = {}
        for k, (lo, hi) in self.range_.items():
            v = g.value(k)
            if within(v, lo, hi):
                continue
            miss = range_miss(v, lo, hi, linear=k in LINEAR_INPUTS)
            if any_true(miss.outside):
                out[k] = miss
        return out

    def predict(self, **arrays: Any) -> dict[str, np.ndarray]:
        g = GlobalInputs(**{k: arrays[k] for k in GlobalInputs.__dataclass_fields__})
        c = self.correct(g)
        return {"latency_s": c["ttft_s"] + c["decode_s"], **c}

    # ---- state ----------------------------------------------------------------------------
    def to_state(self) -> dict[str, np.ndarray]:
        names = sorted(self.engines_)
        st: dict[str, np.ndarray] = {
            "engines": np.array(names),
            "terms": np.array(TERMS),
            "features": np.array(FEATURES),
            "range_names": np.array(list(self.range_)),
            "range": np.array([self.range_[k] for k in self.range_], dtype=float),
        }
        for e in names:
            f = self.engines_[e]
            st[f"{e}.theta"] = f.theta
            st[f"{e}.band_log"] = f.band_log
            st[f"{e}.cv_mape_pct"] = np.array(f.cv_mape_pct)
            st[f"{e}.n_mlps"] = np.array(len(f.mlps), dtype=np.int64)
            for i, m in enumerate(f.mlps):
                st.update(m.to_state(f"{e}.mlp{i}."))
        return st

    @classmethod
    def from_state(cls, state: Mapping[str, np.ndarray]) -> Self:
        st = dict(state)
        stored = tuple(str(t) for t in st["terms"])
        # An artifact fitted before a term was added reads with that term at 0 (exactly the
        # model it was); unknown terms or other MLP features need a refit.
        if not set(stored) <= set(TERMS) or tuple(str(f) for f in st["features"]) != FEATURES:
            raise ArtifactError(
                "level-3 model was fitted with other terms/features than this dse computes; "
                "re-fit the artifact with `dse fit`"
            )
        where = np.array([TERMS.index(t) for t in stored])
        self = cls()
        self.range_ = {
            str(k): (float(lo), float(hi))
            for k, (lo, hi) in zip(st["range_names"], st["range"], strict=True)
        }
        self.engines_ = {}
        for e in (str(x) for x in st["engines"]):
            mlps = tuple(MLP.from_state(st, f"{e}.mlp{i}.") for i in range(int(st[f"{e}.n_mlps"])))
            theta = np.zeros(len(TERMS))
            theta[where] = np.asarray(st[f"{e}.theta"], dtype=float)
            self.engines_[e] = EngineFit(
                theta,
                mlps,
                np.asarray(st[f"{e}.band_log"], dtype=float),
                float(st[f"{e}.cv_mape_pct"]),
            )
        return self


def _range(v: np.ndarray) -> tuple[float, float]:
    return float(np.min(v)), float(np.max(v))


# Rows up to which `_structured` builds the design matrix rather than adding column by column
# (one-row calls: ~0.17 M instructions fewer, benchmarks/one_row_instructions.py)
FEW_ROWS = 64


def _rows_dot(X: np.ndarray, w: np.ndarray) -> np.ndarray:
    """X @ w as each row's own sum of products: a row's value does not depend on the batch it
    comes in beyond rounding (a BLAS matrix-vector product's blocking does), and a few rows
    cost two numpy calls, not two per column."""
    return (X * np.asarray(w, dtype=float)).sum(axis=1)


def _structured(
    theta: np.ndarray,
    g: GlobalInputs,
    gqa_aware: np.ndarray | None = None,
    step: list[np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(ttft, decode) seconds of the structured stage: `design(g) @ theta` row by row
    (`_rows_dot`). `step`: `_step_columns(g)`, when the caller has them."""
    theta = np.asarray(theta, dtype=float)
    # 0 x inf is NaN: the design's zeros must be multiplied. A few rows: the design matrix
    # (a dozen numpy calls, against ~40 column by column; the same bits either way)
    if len(g.t_pre_s) <= FEW_ROWS or not np.isfinite(theta).all():
        x_ttft, x_dec = design(g)
        if gqa_aware is not None:  # a GQA-aware engine reads each KV head once: no excess
            x_dec[:, TERMS.index("a_attn_gqa")] *= ~np.asarray(gqa_aware, dtype=bool)
        return _rows_dot(x_ttft, theta), _rows_dot(x_dec, theta)
    # Column by column (a (n, 14) design matrix is written with strided stores, then read
    # twice): each term the same product as `_rows_dot`'s, added in the order numpy's row sum
    # adds a row of len(TERMS) values (`_row_sum_order`), the design's zero columns left out.
    step = _step_columns(g) if step is None else step
    steps = g.value("steps")
    rest = g.t_dec_s - g.t_dec_attn_s - g.t_dec_comm_s
    rest_roof = g.t_dec_roof_s - g.t_dec_attn_roof_s - g.t_dec_comm_roof_s
    gqa = g.t_dec_attn_s * gqa_excess(g)
    if gqa_aware is not None:  # a GQA-aware engine reads each KV head once: no excess
        gqa = gqa * ~np.asarray(gqa_aware, dtype=bool)
    ttft = {"a_pre": _float(g.t_pre_s), "a_pre_roof": _float(g.t_pre_roof_s)}
    dec = {
        "a_dec": _float(rest),
        "a_dec_roof": _float(rest_roof),
        "a_attn": _float(g.t_dec_attn_s),
        "a_attn_roof": _float(g.t_dec_attn_roof_s),
        "a_comm": _float(g.t_dec_comm_s),
        "a_comm_roof": _float(g.t_dec_comm_roof_s),
        "a_kv_overflow": g.t_dec_s * kv_overflow(g),
        "a_attn_gqa": gqa,
    }
    for term, col in zip(STEP_TERMS, step, strict=True):
        ttft[term] = col
        dec[term] = steps * col
    return (
        _row_sum_order(
            [None if t not in ttft else ttft[t] * theta[i] for i, t in enumerate(TERMS)]
        ),
        _row_sum_order([None if t not in dec else dec[t] * theta[i] for i, t in enumerate(TERMS)]),
    )


def _float(v: Any) -> np.ndarray:
    """v as float64 (what a column of the float64 design matrix holds; no copy if it is)."""
    return np.asarray(v, dtype=float)


def _row_sum_order(terms: list[np.ndarray | None]) -> np.ndarray:
    """terms[0] + terms[1] + ... per row, added as numpy adds the values of one contiguous row
    (`X.sum(axis=1)` of a C-ordered (n, k) X, numpy 1.x-2.x pairwise summation): below 8 terms
    one after another; up to 128, eight running sums (term j into sum j % 8) joined as
    ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)), then the last k % 8 terms one by one;
    the reduction starts from 0.0. None: a term that is +-0.0 on every row, left out (x + 0.0
    is x but for -0.0, and a sum with a +0.0 term in it is never -0.0: the final + 0.0 gives
    the same sign). The terms are arrays of their own: the sums are made in them, in place."""
    k = len(terms)
    if k > 128:
        raise ValueError(f"{k} terms: numpy sums more than 128 in blocks")

    def add(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
        if a is None or b is None:
            return b if a is None else a
        a += b
        return a

    if k < 8:
        head, i = None, 0
    else:
        s = list(terms[:8])
        i = 8
        while i + 8 <= k:
            s = [add(s[j], terms[i + j]) for j in range(8)]
            i += 8
        head = add(add(add(s[0], s[1]), add(s[2], s[3])), add(add(s[4], s[5]), add(s[6], s[7])))
    for t in terms[i:]:
        head = add(head, t)
    if head is None:
        raise ValueError("no term to add")
    head += 0.0
    return head


def gqa_excess_of(g: GlobalInputs, gqa_aware: np.ndarray | None) -> np.ndarray:
    """`gqa_excess`, 0 on the rows of a GQA-aware engine (`gqa_aware`; None: none is)."""
    x = gqa_excess(g)
    return x if gqa_aware is None else np.where(gqa_aware, 0.0, x)


def _parts(
    fit: EngineFit, g: GlobalInputs, gqa_aware: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    if len(g.t_pre_s) == 1 and np.shape(g.steps) == (1,):
        return _parts_one(fit, g, gqa_aware)
    return _parts_arrays(fit, g, gqa_aware)


def _parts_one(
    fit: EngineFit, g: GlobalInputs, gqa_aware: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """`_parts` of one configuration (a one-row prediction) in Python floats: `design`,
    `_rows_dot` (its row sums replayed in numpy's order, `_row_sum_order`), `mlp_features` and
    the factors in the same order of operations, instead of ~100 numpy calls on one-element
    arrays. The logs and the exponential are numpy's own kernels (`math`'s differ from them in
    the last bit on some values), the MLP the same call: the same bits as `_parts_arrays`
    (tests/models/test_level3_one.py)."""
    th = fit.theta.tolist()
    v = {k: np.asarray(getattr(g, k), dtype=float).item(0) for k in _ONE_INPUTS}
    t_pre, t_dec, attn, comm = v["t_pre_s"], v["t_dec_s"], v["t_dec_attn_s"], v["t_dec_comm_s"]
    pre_roof, dec_roof = v["t_pre_roof_s"], v["t_dec_roof_s"]
    attn_roof, comm_roof = v["t_dec_attn_roof_s"], v["t_dec_comm_roof_s"]
    steps, w, L = v["steps"], v["waves"], v["n_layers"]
    # every log the stage takes, by numpy (`_step_columns`' and `mlp_features`')
    lg2_tp, lg2_gqa = np.log2([max(v["tp"], 1.0), max(v["gqa"], 1.0)]).tolist()
    step = [w, v["batch"], w * L, w * L * lg2_tp]  # `_step_columns`
    overflow = min(max(v["kv_fill"] - 1.0, 0.0), 1.0)  # `kv_overflow`
    gqa_x = max(v["gqa"], 1.0) - 1.0  # `gqa_excess`
    aware = gqa_aware is not None and bool(np.asarray(gqa_aware).reshape(-1)[0])
    rest = t_dec - attn - comm
    rest_roof = dec_roof - attn_roof - comm_roof
    x_ttft = dict.fromkeys(TERMS, 0.0)
    x_dec = dict.fromkeys(TERMS, 0.0)
    x_ttft["a_pre"], x_ttft["a_pre_roof"] = t_pre, pre_roof
    for term, x in zip(STEP_TERMS, step, strict=True):
        x_ttft[term] = x
        x_dec[term] = steps * x
    x_dec |= {
        "a_dec": rest,
        "a_dec_roof": rest_roof,
        "a_attn": attn,
        "a_attn_roof": attn_roof,
        "a_comm": comm,
        "a_comm_roof": comm_roof,
        "a_kv_overflow": t_dec * overflow,
        # a GQA-aware engine's row x False (0.0), as `_structured` multiplies it
        "a_attn_gqa": attn * gqa_x * (0.0 if aware else 1.0),
    }
    ttft = _row_sum_order([x_ttft[t] * c for t, c in zip(TERMS, th, strict=True)])
    dec = _row_sum_order([x_dec[t] * c for t, c in zip(TERMS, th, strict=True)])
    log_f = 0.0
    if fit.mlps:  # `mlp_features`
        logs = np.log(
            [
                max(t_pre, 1e-9),
                max(t_dec / max(steps, 1.0), 1e-9),
                v["batch"],
                v["prompt"],
                max(v["output"], 1.0),
                L,
                v["d_model"],
                w,
            ]
        ).tolist()
        total = max(ttft + dec, 1e-12)
        row = [
            *logs[:7],
            lg2_tp,
            float(v["n_experts"] > 1),
            lg2_gqa,
            min(max(v["kv_fill"], 0.0), 4.0),
            ttft / total,
            logs[7],
        ]
        X = np.array([row])
        out = fit.merged.predict(X) if fit.merged is not None else None
        if out is None:
            out = np.mean([m.predict(X) for m in fit.mlps], axis=0)
        log_f = min(max(float(out[0]), -LOG_CLIP), LOG_CLIP)
        if not v["kv_fill"] <= MLP_MAX_FILL:  # KV overflow: stage 1
            log_f = 0.0
    f = float(np.exp(log_f))
    t = dict(zip(TERMS, th, strict=True))
    over = t["a_kv_overflow"] * overflow
    o_step = _row_sum_order([x * t[name] for x, name in zip(step, STEP_TERMS, strict=True)])

    def factor(term: str, roof_s: float, model_s: float) -> float:  # `_factor`
        return t[term] + t[term + "_roof"] * roof_s / max(model_s, 1e-15)

    gqa_term = 0.0 if aware else gqa_x  # `gqa_excess_of`
    one = {
        "ttft_s": ttft * f,
        "decode_s": dec * f,
        "pre_factor": factor("a_pre", pre_roof, t_pre) * f,
        "dec_factor": (factor("a_dec", rest_roof, rest) + over) * f,
        "dec_attn_factor": (factor("a_attn", attn_roof, attn) + t["a_attn_gqa"] * gqa_term + over)
        * f,
        "dec_comm_factor": (factor("a_comm", comm_roof, comm) + over) * f,
        "pre_overhead_s": o_step * f,
        "dec_overhead_s": steps * o_step * f,
    }
    return dict(zip(one, np.array([list(one.values())]).T.copy(), strict=True))


# The `GlobalInputs` `_parts_one` reads: the phase times, the steps and waves, and the inputs
# whose range is checked (every one of them is an input of the MLP or a term).
_ONE_INPUTS = (
    "t_pre_s",
    "t_dec_s",
    "t_dec_attn_s",
    "t_dec_comm_s",
    "t_pre_roof_s",
    "t_dec_roof_s",
    "t_dec_attn_roof_s",
    "t_dec_comm_roof_s",
    "steps",
    "waves",
    *RANGE_INPUTS,
)


def _parts_arrays(
    fit: EngineFit, g: GlobalInputs, gqa_aware: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    th = fit.theta
    step = _step_columns(g)
    ttft_s, dec_s = _structured(th, g, gqa_aware, step)
    log_f = np.zeros_like(ttft_s)
    if fit.mlps:
        X = mlp_features(g, ttft_s, dec_s)
        if fit.merged is not None:
            log_f = fit.merged.predict(X)
        else:
            log_f = np.mean([m.predict(X) for m in fit.mlps], axis=0)
        log_f = clip(log_f, -LOG_CLIP, LOG_CLIP)
        log_f = where(g.value("kv_fill") <= MLP_MAX_FILL, log_f, 0.0)  # KV overflow: stage 1
    f = np.exp(log_f)
    over = th[TERMS.index("a_kv_overflow")] * kv_overflow(g)
    rest = g.t_dec_s - g.t_dec_attn_s - g.t_dec_comm_s
    rest_roof = g.t_dec_roof_s - g.t_dec_attn_roof_s - g.t_dec_comm_roof_s
    if len(step[0]) <= FEW_ROWS:
        o_step = _rows_dot(_columns(step), th[list(STEP_IDX)])
    else:
        o_step = _row_sum_order([c * w for c, w in zip(step, th[list(STEP_IDX)], strict=True)])
    return {
        "ttft_s": ttft_s * f,
        "decode_s": dec_s * f,
        "pre_factor": _factor(th, "a_pre", g.t_pre_roof_s, g.t_pre_s) * f,
        "dec_factor": (_factor(th, "a_dec", rest_roof, rest) + over) * f,
        "dec_attn_factor": (
            _factor(th, "a_attn", g.t_dec_attn_roof_s, g.t_dec_attn_s)
            + th[TERMS.index("a_attn_gqa")] * gqa_excess_of(g, gqa_aware)
            + over
        )
        * f,
        "dec_comm_factor": (_factor(th, "a_comm", g.t_dec_comm_roof_s, g.t_dec_comm_s) + over) * f,
        "pre_overhead_s": o_step * f,
        "dec_overhead_s": g.value("steps") * o_step * f,
    }


def _factor(th: np.ndarray, term: str, roof_s: np.ndarray, model_s: np.ndarray) -> np.ndarray:
    """The factor on a group's model time equal to a * model + a_roof * roofline."""
    a, a_roof = th[TERMS.index(term)], th[TERMS.index(term + "_roof")]
    return a + a_roof * roof_s / np.maximum(model_s, 1e-15)


def _fit_structured(
    g: GlobalInputs,
    y: np.ndarray,
    ttft: np.ndarray,
    prior_weight: float = 0.0,
    ttft_weight: float = 1.0,
) -> np.ndarray:
    """Non-negative least squares on relative error of the batch latency, of measured TTFT
    rows (where given, weighted), and a prior pulling a_pre and a_dec towards 1 (the kernels
    take as long in the engine as on the bench) with `prior_weight` in units of rows."""
    from scipy.optimize import nnls

    x_ttft, x_dec = design(g)
    X = (x_ttft + x_dec) / y[:, None]
    b = np.ones(len(y))
    has_t = np.isfinite(ttft)
    if has_t.any():
        X = np.vstack([X, ttft_weight * x_ttft[has_t] / ttft[has_t, None]])
        b = np.concatenate([b, np.full(int(has_t.sum()), ttft_weight)])
    if prior_weight > 0:
        # Kernel factors towards 1 (Levels 1-2 right), the overflow penalty towards 0; each
        # kernel group as a blend of the fitted kernel model and the roofline summing to 1 (the
        # data choose the mix; a weak pull breaks the tie when they agree, see TIE_TO_ROOF).
        w = np.sqrt(prior_weight)
        rows = []
        for model_term, roof_term in PAIRS:
            rows.append(({model_term: 1.0, roof_term: 1.0}, 1.0, w))
            # Tie-break: a weak pull of the other term towards 0 (towards the fitted kernel
            # model, or towards the roofline for the groups in TIE_TO_ROOF).
            tie = model_term if model_term in TIE_TO_ROOF else roof_term
            rows.append(({tie: 1.0}, 0.0, w * 0.1))
        rows.append(({"a_kv_overflow": 1.0}, 0.0, w))
        # The GQA re-read term towards 0, weakly: few models per engine, and KV overflow
        # (also attention-heavy) must not be explained by it (0.3: the best of 0, 0.3, 1, 3
        # on the held-out argonne latency and energy; docs/accuracy.md).
        rows.append(({"a_attn_gqa": 1.0}, 0.0, w * GQA_PRIOR))
        prior = np.zeros((len(rows), X.shape[1]))
        target = np.zeros(len(rows))
        for i, (coefs, value, weight) in enumerate(rows):
            for name, c in coefs.items():
                prior[i, TERMS.index(name)] = c * weight
            target[i] = value * weight
        X = np.vstack([X, prior])
        b = np.concatenate([b, target])
    # Scale columns to unit norm so NNLS treats seconds and factors alike.
    norm = np.linalg.norm(X, axis=0)
    norm = np.where(norm > 0, norm, 1.0)
    theta, _ = nnls(X / norm, b)
    return theta / norm


def fit_summary(model: Level3) -> dict[str, Any]:
    """JSON-able held-out errors and coefficients per engine (for the manifest)."""
    out: dict[str, Any] = {}
    for e, f in model.engines_.items():
        cv = model.cv_.get(e, {})
        out[e] = {
            "coefficients": dict(zip(TERMS, (float(v) for v in f.theta), strict=True)),
            "mlp_ensemble": len(f.mlps),
            "band_log_quantiles": [float(v) for v in f.band_log],
            "cv": {k: v for k, v in cv.items() if not k.startswith("held_out_")},
        }
    return out
