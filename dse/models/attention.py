"""Level-1 (Level-2 input) models of the attention kernels, per GPU and engine (vLLM FlashAttention,
TensorRT-LLM): context (prefill: `batch_size` sequences of `isl` new tokens, causal) and
generation (decode: one new token per sequence over `kv_len` cached tokens), MHA and GQA,
any head_dim, bf16 or fp8 KV cache, optional sliding window.

Work per call (per GPU, heads already divided by tensor parallelism):
  context:    FLOPs = 4 b h hd P, P = query-key pairs per head: s(s+1)/2 causal, or
              w(w+1)/2 + (s - w) w with a window w < s;
              bytes = b s hd (2 h x 2 [read q, write o] + 2 kv (2 + kv_bytes) [read k, v; write cache])
  generation: FLOPs = 4 b h hd L', L' = min(kv_len + 1, w);
              bytes = 2 b L' kv hd kv_bytes [read the cache] + 4 b h hd [q in, o out]
The time is `dse.models._hybrid`'s roofline base times a residual MLP factor; where the
training rows carry measured board power (H200), a second MLP predicts log power from the same
inputs, the sliding window (`POWER_INPUTS`) and the log latency (`_hybrid.LogPowerHead`: fitted
to gradient-boosted trees' median of log power, clipped to the GPU's idle and board power) and
the model returns energy = power x latency.

One file on purpose: `AttentionModel._design_rows` (a few rows in Python floats) mirrors
`_design_arrays` (vectorised) step by step, and the two stay side by side so that a change to
one is made to the other (tests/models/test_attention_rows.py holds them equal bit for bit).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Self

import numpy as np

from dse.errors import ArtifactError, ConfigError, DataError
from dse.models import base as _base
from dse.models._hybrid import (
    SMOOTH_MAX_P,
    apply_residual,
    fit_hybrid_heads,
    fit_roofline,
    hybrid_state,
    load_hybrid,
)
from dse.models.attention_backend import SGLANG_BACKENDS, backend_onehot, sglang_backend
from dse.models.threads import threaded_fit
from dse.spec.hardware import get_gpu

if TYPE_CHECKING:
    import pandas as pd

PHASES = ("context", "generation")
# Residual MLP 64 x 64 x 64, 300 epochs, <= 30000 rows a fit. Held-out error on H100 (5 group
# folds by head configuration; context TRT-LLM / vLLM, decode TRT-LLM / vLLM): 32 x 32 / 150 /
# 15000 rows 2.5 / 5.4 / 11.0 / 4.8%, 64 x 64 2.0 / 4.8 / 6.7 / 2.3%, this 1.9 / 4.7 / 4.7 / 2.3%
# (docs/accuracy.md); ~30 s a fit on one core, and its forward pass is ~20% slower than 32 x 32.
HIDDEN = (64, 64, 64)
MAX_ITER = 300
MAX_ROWS = 30000
# Residual MLPs from consecutive seeds, averaged (_hybrid.fit_residual_ensemble), per phase.
# The members disagree most on head configurations none of them saw, so their mean
# extrapolates better: H100 prefill vLLM held out 4.74 -> 4.46 -> 4.31% with 1 / 2 / 3 members
# (docs/accuracy.md; 3.31 -> 3.04% with 1 / 2 once the MLP sees `_kernel_features`), decode
# vLLM 2.25 -> 2.03 -> 1.92%. Prefill: two, not three: each member costs ~4% of an
# all-distinct full prediction (prefill runs once per configuration). Decode: three, as many
# as the quadrature has strata (`_hybrid.STRATA`). Decode runs at every quadrature node of
# every configuration (~30% of a full prediction), so the predictor evaluates one member per
# node (`dse.predict.request.node_strata`: each member carries a third of the integral's weight) at
# one member's cost; a direct `predict` (e.g. `dse validate`) averages all three.
MEMBERS = {"context": 2, "generation": 3}
# Rows up to which `AttentionModel.design` runs row by row in Python floats (`_design_rows`):
# one configuration's prefill (1 row) or decode nodes (5), or a few configurations'.
DESIGN_ROWS = 16
KV_BYTES = {"fp8": 1.0, "int8": 1.0, "fp8_block": 1.0}  # anything else: 2 bytes (bf16 / fp16)


def kv_bytes_of(kv_dtype: Any, n: int) -> np.ndarray:
    """Bytes per KV-cache element from dtype names (or numbers already in bytes)."""
    a = np.asarray(kv_dtype)
    if a.dtype.kind in "fiu":
        return np.broadcast_to(a.astype(np.float64), (n,)).copy()
    names = np.broadcast_to(a.astype(str), (n,))
    out = _base.filled(n, 2.0)
    for name, nb in KV_BYTES.items():
        out[names == name] = nb
    return out


def _is_fp8(dtype: Any, n: int) -> np.ndarray:
    if isinstance(dtype, str):  # one dtype for the batch (the adapters' default): no np.char
        return np.full(n, dtype.startswith("fp8"))
    a = _base.as_shape(np.asarray(dtype).astype(str), (n,))
    return np.char.startswith(a, "fp8")


def attention_work(phase: str, v: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(FLOPs, bytes) of one call (see module doc)."""
    b, h, kv, hd = v["batch_size"], v["num_heads"], v["num_kv_heads"], v["head_dim"]
    w, kvb = v["window_size"], v["kv_bytes"]
    if phase == "context":
        s = v["isl"]
        ww = np.where(w > 0, np.minimum(w, s), s)
        pairs = np.where(w > 0, ww * (ww + 1) / 2 + (s - ww) * ww, s * (s + 1) / 2)
        flops = 4.0 * b * h * hd * pairs
        bytes_ = b * s * hd * (4.0 * h + 2.0 * kv * (2.0 + kvb))
    else:
        L = v["kv_len"] + 1.0
        span = np.where(w > 0, np.minimum(L, w), L)
        flops = 4.0 * b * h * hd * span
        bytes_ = 2.0 * b * span * kv * hd * kvb + 4.0 * b * h * hd
    return flops, bytes_


def work_items(phase: str, v: Mapping[str, np.ndarray]) -> np.ndarray:
    """The base's per-item overhead count: context, thread blocks (128 query rows x head x
    sequence); generation, query heads x sequences (per-sequence setup dominates short caches)."""
    if phase == "context":
        return v["batch_size"] * v["num_heads"] * np.ceil(v["isl"] / 128.0)
    return v["batch_size"] * v["num_heads"]


# FlashAttention-3 forward tile rows (kBlockM) on sm90 for a 16-bit / fp8 cache, by head_dim
# bound (hopper/tile_size.h, tile_size_fwd_sm90): 192 rows up to head_dim 96, 128 above.
FA3_TILE_M_HD = (96.0, 192.0, 128.0)  # (head_dim bound, rows at or below it, rows above it)
# TensorRT-LLM decode: the XQA kernels take GQA with at most this many query heads per KV head
# and a head_dim that is a multiple of 16 up to 256; everything else (MHA included: XQA skips
# "vanilla MHA") runs the older masked-multihead-attention (MMHA) kernel
# (decoderXQAImplJIT/kernelUtils.cpp, supportConfigHMMA / supportConfigQGMMA).
XQA_MAX_GROUP = 32
XQA_MAX_HEAD_DIM = 256
# The residual MLP's input set: 1 without, 2 with `_kernel_features`. Those inputs describe
# Hopper kernels (FlashAttention-3's PackGQA and tiles, TensorRT-LLM's XQA-QGMMA), so GPUs of
# compute capability 9.0 and up are fitted with set 2, older ones with set 1: on A100 (vLLM's
# FlashAttention-2) set 2 scored worse held out (docs/accuracy.md, attention section).
# Set 3 is set 2 without log batch, log query heads and log KV heads (`SWAP_VARIANT_COLUMNS`),
# for TensorRT-LLM decode on Hopper: its kernels launch one block per (sequence, KV head) (XQA)
# or (sequence, query head) (MMHA), so b sequences of h heads cost what b/2 sequences of 2h
# heads (same group) do. Measured on the H100 table, pairs (h, kv, b) and (2h, 2kv, b/2) at
# the same cache length differ by 1.5% mean (0.7% above 50 us), against 5.8% for vLLM decode
# and 6.2% for vLLM prefill, whose costs depend on batch and heads apart. With only the
# invariant inputs, a held-out head configuration is priced from its measured siblings (e.g.
# (96, 8) from (24, 2) at 4x the batch): held out 3.03 -> 2.75% (3 MLPs; one MLP, seeds 0 / 1:
# 3.47 -> 3.34%, 3.69 -> 3.30%). TensorRT-LLM prefill (1.7% apart) went 1.78 -> 1.84%, so it
# keeps set 2 (docs/accuracy.md, attention section).
FEATURE_SET = 2
KERNEL_FEATURES_MIN_CC = 9.0
SWAP_INVARIANT = {("generation", "trtllm")}  # (phase, engine) fitted with set 3 on Hopper
SWAP_VARIANT_COLUMNS = (0, 3, 4)  # _features' log batch, log heads, log KV heads


def feature_set_for(gpu: str, phase: str = "context", engine: str = "vllm") -> int:
    """The input set a model of (`phase`, `engine`) fitted for `gpu` uses (see FEATURE_SET)."""
    if get_gpu(gpu).compute_capability < KERNEL_FEATURES_MIN_CC:
        return 1
    return 3 if (phase, engine) in SWAP_INVARIANT else FEATURE_SET


def _non_pow2(x: np.ndarray) -> np.ndarray:
    """1.0 where x (> 0) is not a power of two."""
    return (np.log2(x) % 1.0 > 1e-9).astype(np.float64)


def trtllm_decode_kernel(v: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(xqa, qgmma) masks of TensorRT-LLM's decode kernel choice: XQA for GQA with <= 32 query
    heads per KV head and head_dim % 16 == 0, <= 256 (QGMMA, the Hopper XQA, for an fp8 cache;
    HMMA for a 16-bit one); the rest MMHA."""
    h, kv, hd = v["num_heads"], v["num_kv_heads"], v["head_dim"]
    group = h / kv
    xqa = (group > 1) & (group <= XQA_MAX_GROUP) & (hd % 16 == 0) & (hd <= XQA_MAX_HEAD_DIM)
    return xqa, xqa & (v["kv_bytes"] < 2.0)


def _kernel_features(
    phase: str, engine: str, v: Mapping[str, np.ndarray], bytes_: np.ndarray, n_sms: int
) -> list[np.ndarray]:
    """Kernel-choice inputs the shape sizes alone do not give the MLP (held-out H100 head
    configurations, 5 group folds, one MLP; docs/accuracy.md):
    - prefill: query heads per KV head not a power of two. FlashAttention-3 packs the query
      heads of a KV head into its tile rows (PackGQA, always on for vLLM's variable-length
      batches), and non-power-of-two groups ran 2-8% slower than their log-ratio neighbours;
      and FA3's tile rows (192 up to head_dim 96, else 128) not a multiple of the group, so a
      tile ends inside a token's heads. vLLM prefill 4.74 -> 3.31%. (The same group flag on
      vLLM decode helped in 4 of 5 Hopper fits over seeds, broke the fifth (H200 2.59 ->
      3.73%) and was worse on A100 in every seed: not used there.)
    - TensorRT-LLM decode: XQA (GQA, <= 32 heads per KV head) against MMHA (MHA and wider
      groups), which reads a KV head once per query head; one block per KV head and sequence
      (XQA) or per query head and sequence (MMHA): 4.75 -> 3.47%."""
    if phase == "context":
        group = v["num_heads"] / v["num_kv_heads"]
        bound, small, large = FA3_TILE_M_HD
        tile_m = np.where(v["head_dim"] <= bound, small, large)
        return [_non_pow2(group), ((tile_m % group) > 1e-9).astype(np.float64)]
    if engine != "trtllm":
        return []
    b, h, kv = v["batch_size"], v["num_heads"], v["num_kv_heads"]
    xqa, qgmma = trtllm_decode_kernel(v)
    # MMHA: every query head's block streams its KV head's cache, so it reads what MHA would
    # (sharing only through L2); XQA: one block per KV head reads it once (`bytes_`)
    _, mmha_bytes = attention_work(phase, {**v, "num_kv_heads": h})
    ctas = np.where(xqa, b * kv, b * h)
    waves = np.ceil(ctas / n_sms)
    return [
        (~xqa).astype(np.float64),
        qgmma.astype(np.float64),
        np.log(np.where(xqa, bytes_, mmha_bytes)),
        np.log(ctas / n_sms),
        ctas / (waves * n_sms),
    ]


def _features(
    phase: str,
    v: Mapping[str, np.ndarray],
    flops,
    bytes_,
    log_t0,
    n_sms: int,
    engine: str = "vllm",
    feature_set: int = FEATURE_SET,
) -> np.ndarray:
    """MLP inputs: log shape sizes, dtype flags, log work, log base time, the wave
    quantisation of the kernel's thread blocks over the SMs (the main nonlinearity the
    roofline misses: a grid of 1.1 waves costs nearly 2), and the kernel-choice inputs of
    `_kernel_features` (feature set 2; artifacts fitted before them, set 1, go without).
    Set 3 is set 2 less log batch, log heads and log KV heads (see FEATURE_SET)."""
    b, h, kv, hd = v["batch_size"], v["num_heads"], v["num_kv_heads"], v["head_dim"]
    length = v["isl"] if phase == "context" else v["kv_len"] + 1.0
    w = v["window_size"]
    span = np.where(w > 0, np.minimum(w, length), length)
    if phase == "context":
        # FlashAttention: one block per 128 query rows per head per sequence
        ctas = b * h * np.ceil(length / 128.0)
        crit = np.log(np.ceil(ctas / n_sms)) + np.log(span) + np.log(hd)
    else:
        # decode: one block per (sequence, KV head) before split-KV
        ctas = b * kv
        crit = np.log(np.ceil(ctas / n_sms)) + np.log(span) + np.log(hd) + np.log(h / kv)
    waves = np.ceil(ctas / n_sms)
    # features as rows, returned transposed (column-major n x k): a cheap stack, and the MLP
    # forward pass standardises it block by block without a strided copy (nn.MLP.predict)
    # SWAP_VARIANT_COLUMNS (0, 3, 4): log batch, log heads, log KV heads; set 3 goes without
    sized = feature_set < 3
    # (np.array of the (n,) rows: np.stack's per-array expand_dims cost ~1 us each)
    return np.array(
        [
            *([np.log(b)] if sized else []),
            np.log(length),
            np.log(span),
            *([np.log(h), np.log(kv)] if sized else []),
            np.log(hd),
            np.log(h / kv),
            v["kv_bytes"],
            v["fp8"],
            np.log(flops),
            np.log(bytes_),
            log_t0,
            np.log(ctas / n_sms),
            ctas / (waves * n_sms),
            crit,
            *(_kernel_features(phase, engine, v, bytes_, n_sms) if feature_set >= 2 else ()),
        ]
    ).T


# The power head's own inputs beyond the residual features (`_hybrid.LogPowerHead.inputs`): the
# sliding window as a flag and log(1 + window tokens). The residual features see the window only
# through the span min(window, length), so a window longer than the KV cache is invisible there,
# yet vLLM's windowed decode draws other power at equal shape and latency: on H200 vLLM decode
# `dse fit`'s CV (3 folds by head configuration) reads held-out power 22.77 -> 19.09% with them,
# prefill 14.17 -> 14.07% (experiments/attention_power_head.py, "log_head_window").
POWER_INPUTS = ("window_flag", "log1p_window")


def power_inputs(v: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`POWER_INPUTS` of inputs `v` (`AttentionModel._inputs`)."""
    w = np.maximum(v["window_size"], 0.0)  # tokens; 0 (or a negative "none"): no window
    return {"window_flag": (w > 0).astype(np.float64), "log1p_window": np.log1p(w)}


class AttentionModel(_base.Model):
    """Context or generation attention latency (and power/energy where measured) for one engine
    on one GPU. See module doc.

    predict(batch_size, isl | kv_len, num_heads, num_kv_heads, head_dim, kv_cache_dtype="bfloat16",
    window_size=0, dtype="bfloat16") -> latency_s, base_s, t_compute_s, t_memory_s, launch_s,
    t_items_s (per-block / per-head overhead),
    regime (1 compute-bound), residual_factor, flops, bytes; plus power_w, energy_j when fitted.
    `stratum` (optional, ints 0-2 per row): the decode quadrature's strata; a 3-member residual
    then takes row i from member stratum[i] alone (`_hybrid.apply_residual`).
    """

    kind: ClassVar[str] = "attention"
    gpu_fields: ClassVar[tuple[str, ...]] = ("n_sms",)  # the waves of CTAs over the SMs
    phase_default: ClassVar[str] = "context"
    _parameter_constraints: ClassVar[dict[str, Any]] = {"phase": PHASES}

    def __init__(
        self,
        phase: str | None = None,
        gpu: str = "h100_sxm",
        engine: str = "vllm",
        seed: int = 0,
        max_rows: int = MAX_ROWS,
        max_iter: int = MAX_ITER,
        backend_input: bool = True,
    ) -> None:
        """`phase`: "context" or "generation" (None: the class's `phase_default`); checked by
        `fit` and `from_state`. `backend_input`: an SGLang model on a GPU with a backend rule
        (`dse.models.attention_backend`) takes the backend SGLang runs as one-hot inputs."""
        self.phase = phase or self.phase_default
        self.gpu = gpu
        self.engine = engine
        self.seed = seed
        self.max_rows = max_rows
        self.max_iter = max_iter
        self.backend_input = backend_input

    @property
    def length_key(self) -> str:
        return "isl" if self.phase == "context" else "kv_len"

    def _inputs(self, arrays: Mapping[str, Any]) -> dict[str, np.ndarray]:
        n = _base.batch_size_of(arrays)
        keys = ("batch_size", self.length_key, "num_heads", "num_kv_heads", "head_dim")
        missing = [k for k in keys if k not in arrays]
        if missing:
            raise DataError(f"{self.phase} attention needs inputs {missing}")
        v = {k: _base.as_float(k, arrays[k], n) for k in keys}
        v["window_size"] = _base.as_float("window_size", arrays.get("window_size", 0.0), n)
        if "kv_cache_dtype" in arrays:
            v["kv_bytes"] = kv_bytes_of(arrays["kv_cache_dtype"], n)
        else:  # the Level-1 adapters pass a 0/1 fp8 flag instead of the dtype name
            fp8_kv = _base.as_float("kv_fp8", arrays.get("kv_fp8", 0.0), n)
            v["kv_bytes"] = np.where(fp8_kv > 0, 1.0, 2.0)
        v["fp8"] = _is_fp8(arrays.get("dtype", "bfloat16"), n).astype(np.float64)
        return v

    def _n_sms(self) -> float:
        return self.gpu_spec_["n_sms"]

    def _peak(self) -> tuple[float, float]:
        """(bf16 peak FLOP/s, HBM bytes/s) of the GPU: fit time only (the fitted roofline
        keeps them)."""
        g = get_gpu(self.gpu)
        return g.peak_bf16_flops_per_s, g.hbm_bw_bytes_per_s

    # ---- fitting --------------------------------------------------------------------------
    @threaded_fit
    def fit(self, df: pd.DataFrame) -> Self:
        """Fit on the rows of `df` for this GPU and engine (kind context_/generation_attention)."""
        self._validate_params()
        d = df[(df["gpu"] == self.gpu) & (df["engine"] == self.engine)]
        if "kind" in d:
            d = d[d["kind"] == f"{self.phase}_attention"]
        if len(d) < 50:
            raise DataError(
                f"{self.phase} attention for {self.gpu}/{self.engine}: {len(d)} rows, need >= 50"
            )
        arrays = {c: d[c].to_numpy() for c in d.columns if c in _INPUT_COLUMNS}
        v = self._inputs(arrays)
        y = d["latency_s"].to_numpy(np.float64)
        self.feature_set_ = feature_set_for(self.gpu, self.phase, self.engine)
        rule = self.engine == "sglang" and self.gpu in SGLANG_BACKENDS and self.backend_input
        self.backends_ = SGLANG_BACKENDS[self.gpu][1] if rule else ()
        self.gpu_spec_ = _base.gpu_constants(get_gpu(self.gpu), self.gpu_fields)
        out, X = self.design(v, y)
        p = d["power_w"].to_numpy(np.float64) if "power_w" in d else np.full(len(d), np.nan)
        g = get_gpu(self.gpu)
        self.mlp_, self.power_mlp_ = fit_hybrid_heads(
            X,
            y,
            out["base_s"],
            p,
            members=MEMBERS[self.phase],
            hidden=HIDDEN,
            max_iter=self.max_iter,
            max_rows=self.max_rows,
            seed=self.seed,
            power_bounds_w=(g.idle_power_w, g.board_power_w),
            power_inputs=power_inputs(v),
        )
        rng = {
            k: v[k]
            for k in (
                "batch_size",
                self.length_key,
                "num_heads",
                "num_kv_heads",
                "head_dim",
                "window_size",
                "kv_bytes",
            )
        }
        self.range_ = _base.fitted_range(rng)
        return self

    # ---- prediction -----------------------------------------------------------------------
    def design(
        self, v: Mapping[str, np.ndarray], y: np.ndarray | None = None
    ) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """(roofline parts with FLOPs and bytes, residual-MLP features) of inputs `v` (`_inputs`).
        Given measured latencies `y` (fitting), the roofline is fitted on them first."""
        if y is None and self._rows_design_applies(v):
            return self._design_rows(v)
        return self._design_arrays(v, y)

    def _rows_design_applies(self, v: Mapping[str, np.ndarray]) -> bool:
        """Whether `_design_rows` makes this design: a few rows (one configuration's prefill,
        or its decode's quadrature nodes), no backend input, and not TensorRT-LLM decode's
        kernel-choice inputs (those stay vectorised)."""
        return (
            len(v["batch_size"]) <= DESIGN_ROWS
            and not getattr(self, "backends_", ())
            and (self.phase == "context" or self.engine != "trtllm" or self.feature_set_ < 2)
        )

    def _design_rows(self, v: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """`design` of a few rows (no fitting) in Python floats: `attention_work`,
        `work_items`, `Roofline.parts` and `_features`' arithmetic in the same order, row by
        row, instead of ~70 numpy calls on arrays of a few values (~60 us a call). The powers
        and logs are numpy's own kernels over every row at once (`math`'s differ from them in
        the last bit on some values): the same bits as `_design_arrays`
        (tests/models/test_attention_rows.py)."""
        context = self.phase == "context"
        b_, h_, kv_, hd_, w_, kvb_, fp8_ = (
            v[k].tolist()
            for k in (
                "batch_size",
                "num_heads",
                "num_kv_heads",
                "head_dim",
                "window_size",
                "kv_bytes",
                "fp8",
            )
        )
        len_ = v["isl" if context else "kv_len"].tolist()
        roof = self.roof_
        n_sms = self._n_sms()
        peak = roof.peak_flops_per_s * roof.eff_compute
        bw = roof.bw_bytes_per_s * roof.eff_memory
        rows = []  # per row: (flops, bytes, t_compute, t_memory, t_items, length, span, ctas)
        for b, h, kv, hd, w, kvb, fp8, x in zip(
            b_, h_, kv_, hd_, w_, kvb_, fp8_, len_, strict=True
        ):
            if context:  # `attention_work`, `work_items`, `_features`' ctas: as there
                ww = min(w, x) if w > 0 else x
                pairs = ww * (ww + 1) / 2 + (x - ww) * ww if w > 0 else x * (x + 1) / 2
                flops = 4.0 * b * h * hd * pairs
                byts = b * x * hd * (4.0 * h + 2.0 * kv * (2.0 + kvb))
                items = b * h * float(math.ceil(x / 128.0))
                length = x
                ctas = b * h * float(math.ceil(length / 128.0))
            else:
                length = x + 1.0
                span = min(length, w) if w > 0 else length
                flops = 4.0 * b * h * hd * span
                byts = 2.0 * b * span * kv * hd * kvb + 4.0 * b * h * hd
                items = b * h
                ctas = b * kv
            span = min(w, length) if w > 0 else length
            t_c = flops * (0.5 if fp8 > 0 else 1.0) / peak
            rows.append((flops, byts, t_c, byts / bw, items * roof.item_s, length, span, ctas))
        n = len(rows)
        p = SMOOTH_MAX_P
        both = np.power(np.array([r[2:4] for r in rows]), p).tolist()
        core = np.power(np.array([c + m for c, m in both]), 1.0 / p).tolist()
        base = [roof.launch_s + r[4] + c for r, c in zip(rows, core, strict=True)]
        # every log `_features` takes, one numpy call: per row b, length, span, h, kv, hd,
        # h / kv, flops, bytes, base, ctas / SMs, waves
        waves = [float(math.ceil(r[7] / n_sms)) for r in rows]
        logs = np.log(
            np.array(
                [
                    (b, r[5], r[6], h, kv, hd, h / kv, r[0], r[1], t0, r[7] / n_sms, wv)
                    for b, h, kv, hd, r, t0, wv in zip(
                        b_, h_, kv_, hd_, rows, base, waves, strict=True
                    )
                ]
            )
        ).T.tolist()
        lb, ll, ls, lh, lkv, lhd, lg, lf, lby, lt0, lc, lw = logs
        crit = [  # log waves + log span + log head_dim (+ log group in decode), as there
            lw[i] + ls[i] + lhd[i] if context else lw[i] + ls[i] + lhd[i] + lg[i] for i in range(n)
        ]
        sized = self.feature_set_ < 3
        cols = [
            *([lb] if sized else []),
            ll,
            ls,
            *([lh, lkv] if sized else []),
            lhd,
            lg,
            kvb_,
            fp8_,
            lf,
            lby,
            lt0,
            lc,
            [r[7] / (wv * n_sms) for r, wv in zip(rows, waves, strict=True)],
            crit,
        ]
        if self.feature_set_ >= 2 and context:  # `_kernel_features` of prefill
            group = [h / kv for h, kv in zip(h_, kv_, strict=True)]
            bound, small, large = FA3_TILE_M_HD
            pow2 = np.log2(np.array(group)).tolist()
            cols.append([float(x % 1.0 > 1e-9) for x in pow2])
            cols.append(
                [
                    float(((small if hd <= bound else large) % g) > 1e-9)
                    for hd, g in zip(hd_, group, strict=True)
                ]
            )
        # the float outputs as the rows of one array (one numpy call, not six; the rows do
        # not overlap, so scaling one in place leaves the others as they are)
        per_row = [(r[2], r[3], r[4], t0, r[0], r[1]) for r, t0 in zip(rows, base, strict=True)]
        t_c, t_m, t_i, base_s, flops, byts = np.array(per_row).T.copy()
        out = {
            "t_compute_s": t_c,
            "t_memory_s": t_m,
            "launch_s": _base.filled(n, roof.launch_s),
            "t_items_s": t_i,
            "base_s": base_s,
            "regime": np.array([r[2] >= r[3] for r in rows], dtype=np.int64),
            "flops": flops,
            "bytes": byts,
        }
        return out, np.array(cols, dtype=np.float64).T

    def _design_arrays(
        self, v: Mapping[str, np.ndarray], y: np.ndarray | None = None
    ) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """`design`, vectorised over the rows (any number; fitting)."""
        flops, bytes_ = attention_work(self.phase, v)
        # fp8 attention runs on the fp8 tensor cores: count its FLOPs at half weight
        flops_eff = flops * np.where(v["fp8"] > 0, 0.5, 1.0)
        items = work_items(self.phase, v)
        if y is not None:
            peak, bw = self._peak()
            self.roof_ = fit_roofline(flops_eff, bytes_, y, peak, bw, items)
        out = self.roof_.parts(flops_eff, bytes_, items)
        X = _features(
            self.phase,
            v,
            flops,
            bytes_,
            np.log(out["base_s"]),
            self._n_sms(),
            self.engine,
            self.feature_set_,
        )
        if getattr(self, "backends_", ()):  # the kernel SGLang runs (attention_backend)
            cols = backend_onehot(self.gpu, self.phase, v)
            X = np.column_stack([X, *cols])
        out["flops"] = flops
        out["bytes"] = bytes_
        return out, X

    def predict(self, **arrays: Any) -> dict[str, np.ndarray]:
        v = self._inputs(arrays)
        out, X = self.design(v)
        stratum = arrays.get("stratum")
        if stratum is not None:
            stratum = _base.as_shape(stratum, (len(X),))
        # the window inputs only where the head reads them (heads fitted before them do not)
        extra = power_inputs(v) if getattr(self.power_mlp_, "inputs", ()) else None
        apply_residual(out, X, self.mlp_, self.power_mlp_, stratum, extra)
        return out

    def backend_of(self, **arrays: Any) -> np.ndarray | None:
        """Per row, the attention backend whose measured rows price it (SGLang's rule,
        `dse.models.attention_backend`); None for a model without a backend input."""
        if not getattr(self, "backends_", ()):
            return None
        return sglang_backend(self.gpu, self.phase, self._inputs(arrays))

    # ---- state ----------------------------------------------------------------------------
    def to_state(self) -> dict[str, np.ndarray]:
        return {
            "phase": np.array(self.phase),
            "gpu": np.array(self.gpu),
            "engine": np.array(self.engine),
            "feature_set": np.array(self.feature_set_, dtype=np.int64),
            **({"backends": np.array(self.backends_)} if self.backends_ else {}),
            **_base.gpu_constants_to_state(self.gpu_spec_),
            **hybrid_state(self),
        }

    @classmethod
    def from_state(cls, state: Mapping[str, np.ndarray]) -> Self:
        _base.need(state, ("phase", "gpu", "engine", "roofline"), "attention")
        phase = str(state["phase"])
        klass = ContextAttentionModel if phase == "context" else GenerationAttentionModel
        if not issubclass(klass, cls) and cls is not AttentionModel:
            raise ArtifactError(f"state of a {phase} attention model given to {cls.__name__}")
        m = klass(phase, str(state["gpu"]), str(state["engine"]))
        try:
            m._validate_params()
        except ConfigError as exc:
            raise ArtifactError(f"attention model state: {exc}") from None
        load_hybrid(m, state)
        m.gpu_spec_ = _base.gpu_constants_from_state(state, cls.gpu_fields, "attention")
        # artifacts saved before the kernel-choice inputs have no "feature_set": set 1
        m.feature_set_ = int(state["feature_set"]) if "feature_set" in state else 1
        # artifacts fitted before the backend input have no "backends": none
        m.backends_ = tuple(map(str, state["backends"])) if "backends" in state else ()
        if m.backends_ and m.backends_ != SGLANG_BACKENDS.get(m.gpu, ("", ()))[1]:
            raise ArtifactError(
                f"attention model state: backends {m.backends_} are not the rule's for {m.gpu}"
            )
        return m


class ContextAttentionModel(AttentionModel):
    """Prefill (causal FlashAttention) latency: see AttentionModel."""

    kind: ClassVar[str] = "context_attention"  # the manifest's kind; dse.models.MODEL_CLASSES

    phase_default: ClassVar[str] = "context"


class GenerationAttentionModel(AttentionModel):
    """Decode attention over the KV cache: see AttentionModel."""

    kind: ClassVar[str] = "generation_attention"  # the manifest's kind; dse.models.MODEL_CLASSES

    phase_default: ClassVar[str] = "generation"


_INPUT_COLUMNS = (
    "batch_size",
    "isl",
    "kv_len",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "kv_cache_dtype",
    "window_size",
    "dtype",
)


def attention_inputs(df: pd.DataFrame) -> dict[str, np.ndarray]:
    """predict() keyword arrays of an attention table."""
    return {c: df[c].to_numpy() for c in _INPUT_COLUMNS if c in df.columns}
