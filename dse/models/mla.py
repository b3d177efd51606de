"""Level-1 models of DeepSeek-style latent attention (MLA) kernels, per GPU and engine, fitted on
aiconfigurator's `context_mla_perf` / `generation_mla_perf` tables (TensorRT-LLM, SGLang):
prefill ("context": `batch_size` sequences of `isl` new tokens, causal) and decode
("generation": one new token per sequence over `kv_len` cached tokens), `num_heads` query heads
per GPU (the tables vary them, 2-128: 128 heads split over tensor parallelism 1-64), bf16 or
fp8 latent cache.

Work per call (per GPU; r = kv_lora_rank, p = qk_rope_head_dim, n = qk_nope_head_dim,
v = v_head_dim, h heads, b sequences, kvb bytes per cached element):
  context (the engines expand the latent to per-head K and V and run FlashAttention with a
  head dim of n + p for scores and v for values):
              FLOPs = 2 b h P (n + p + v), P = s (s + 1) / 2 query-key pairs (causal);
              bytes = b s (2 h (2 (n + p) + 2 v) [read q, k, v; write o] + (r + p) kvb [write
              the latent cache])
  generation (the absorbed form: every head scores the r + p latent of each cached token and
  sums r-wide values; the latent is read once for all heads):
              FLOPs = 2 b h L (2 r + p), L = kv_len + 1;
              bytes = b L (r + p) kvb + 2 b h (2 r + p) [q in, o out]
The time is `dse.models._hybrid`'s fitted roofline of that work (efficiencies at most 1: never
faster than the peak or the bandwidth) times a small residual MLP (log shape sizes, the waves of
thread blocks over the SMs). The heads enter the base through the work (FLOPs, bytes, blocks),
decode's in tiles (`padded_heads`: the fit picks the tile), so a head count the tables lack is
priced by the physics and a residual learned on the neighbouring counts. Held out by head count
(every row of one count kept out of the fit): prefill 2.5-4.0% on H100 and B200, decode
4.1-10.2% (docs/accuracy.md, "MLA kernels"; `experiments/mla_heads_cv.py`).

Other latent ranks: the tables measure DeepSeek-V3's geometry only (kv_lora_rank 512,
qk_rope_head_dim 64, qk_nope_head_dim 128, v_head_dim 128; also DeepSeek-V2's, Kimi-K2's).
The work formulas above take any geometry, but the residual was fitted at that one, so every
geometry input is part of the fitted range (a single point): a configuration with another
rank (or rope / nope / value width) is outside it, and the predictor prices its MLA core on
the roofline and flags it (`dse.predict.adapters.price_mla`), rather than trusting a
correction never measured at that width.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Self

import numpy as np

from dse.errors import ArtifactError, ConfigError, DataError
from dse.models import base as _base
from dse.models._hybrid import (
    apply_residual,
    fit_hybrid_heads,
    fit_roofline,
    hybrid_state,
    load_hybrid,
)
from dse.models.attention import kv_bytes_of
from dse.models.threads import threaded_fit
from dse.spec.hardware import get_gpu

if TYPE_CHECKING:
    import pandas as pd

PHASES = ("context", "generation")
# The latent geometry of the measured tables (aiconfigurator's MLA collectors build DeepSeek-V3's
# attention layer): what `dse.data` writes as columns and a model's fitted range records.
DEEPSEEK_V3_GEOMETRY: dict[str, int] = {
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128,
    "v_head_dim": 128,
}
GEOMETRY = tuple(DEEPSEEK_V3_GEOMETRY)
# Residual MLP 32 x 32, 300 epochs, mean of 2 seeds: the tables are small (1,540-5,068 rows),
# and a fit takes ~10 s on one core. Held out by head count: docs/accuracy.md, "MLA kernels".
HIDDEN = (32, 32)
MAX_ITER = 300
MAX_ROWS = 20000
MEMBERS = 2
# Query rows per thread block of the context kernel (FlashAttention tiles of 128 rows per head
# and sequence), and the query heads per block the decode kernels may take (FlashMLA-style
# kernels process a tile of one sequence's heads per block, split along the cache: 64 rows on
# Hopper's TensorRT-LLM; B200's runs 128 heads at the cost of 2; 1: no tile): the fit picks the
# one whose roofline best prices head counts it did not see (`MLAModel._choose_tile`).
CONTEXT_TILE_ROWS = 128.0
DECODE_HEAD_TILES = (1.0, 64.0, 128.0)
# The base never runs faster than the GPU's bf16 peak and HBM bandwidth (its efficiencies <= 1):
# unbounded, the decode fits traded an impossible memory efficiency (1.35) for a tiny compute
# one. Rows that beat the bandwidth (small caches held in L2) are the residual's to learn.
MAX_EFF = 1.0


def mla_work(phase: str, v: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(FLOPs, bytes) of one MLA kernel call (see module doc)."""
    b, h, kvb = v["batch_size"], v["num_heads"], v["kv_bytes"]
    r, p = v["kv_lora_rank"], v["qk_rope_head_dim"]
    if phase == "context":
        s = v["isl"]
        qk, vd = v["qk_nope_head_dim"] + p, v["v_head_dim"]
        pairs = s * (s + 1.0) / 2.0
        flops = 2.0 * b * h * pairs * (qk + vd)
        bytes_ = b * s * (2.0 * h * (2.0 * qk + 2.0 * vd) + (r + p) * kvb)
        return flops, bytes_
    L = v["kv_len"] + 1.0
    flops = 2.0 * b * h * L * (2.0 * r + p)
    bytes_ = b * L * (r + p) * kvb + 2.0 * b * h * (2.0 * r + p)
    return flops, bytes_


def padded_heads(h: np.ndarray, tile: float) -> np.ndarray:
    """The query heads the tensor cores compute: decode packs a sequence's heads into the rows of
    a `tile`-row tile, so any count up to the tile costs what the tile does (H100 TensorRT-LLM,
    kv_len 131071, 64 sequences: 3.09 ms at 2 heads, 3.13 ms at 64, 3.57 ms at 128: 64 rows;
    B200's kernel takes 128 heads at the cost of 2). Prefill computes each head (tile 1)."""
    return np.ceil(h / tile) * tile


def work_items(phase: str, v: Mapping[str, np.ndarray], tile: float = 64.0) -> np.ndarray:
    """Thread blocks of one call: context, 128 query rows x head x sequence; generation, blocks
    of `tile` heads x sequence (before the split along the cache)."""
    if phase == "context":
        return v["batch_size"] * v["num_heads"] * np.ceil(v["isl"] / CONTEXT_TILE_ROWS)
    return v["batch_size"] * np.ceil(v["num_heads"] / tile)


def _features(
    phase: str, v: Mapping[str, np.ndarray], flops, bytes_, log_t0, n_sms: float, tile: float
) -> np.ndarray:
    """Residual MLP inputs: log sizes, the cache's bytes per element, log work and base time,
    and the wave quantisation of the thread blocks over the SMs (a grid of 1.1 waves costs
    nearly 2)."""
    b, h = v["batch_size"], v["num_heads"]
    length = v["isl"] if phase == "context" else v["kv_len"] + 1.0
    ctas = work_items(phase, v, tile)
    waves = np.ceil(ctas / n_sms)
    return np.stack(
        [
            np.log(b),
            np.log(length),
            np.log(h),
            v["kv_bytes"],
            np.log(flops),
            np.log(bytes_),
            log_t0,
            np.log(ctas / n_sms),
            ctas / (waves * n_sms),
        ]
    ).T


class MLAModel(_base.Model):
    """Context or generation MLA kernel latency for one engine on one GPU (module doc).

    predict(batch_size, isl | kv_len, num_heads, kv_cache_dtype="bfloat16" (or kv_fp8 0/1),
    kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128) ->
    latency_s, base_s, t_compute_s, t_memory_s, launch_s, t_items_s, regime (1 compute-bound),
    residual_factor, flops, bytes.
    """

    kind: ClassVar[str] = "mla"
    gpu_fields: ClassVar[tuple[str, ...]] = ("n_sms",)  # the waves of blocks over the SMs
    phase_default: ClassVar[str] = "context"
    _parameter_constraints: ClassVar[dict[str, Any]] = {"phase": PHASES}

    def __init__(
        self,
        phase: str | None = None,
        gpu: str = "h100_sxm",
        engine: str = "trtllm",
        seed: int = 0,
        max_rows: int = MAX_ROWS,
        max_iter: int = MAX_ITER,
    ) -> None:
        """`phase`: "context" or "generation" (None: the class's `phase_default`)."""
        self.phase = phase or self.phase_default
        self.gpu = gpu
        self.engine = engine
        self.seed = seed
        self.max_rows = max_rows
        self.max_iter = max_iter

    @property
    def length_key(self) -> str:
        return "isl" if self.phase == "context" else "kv_len"

    def _inputs(self, arrays: Mapping[str, Any]) -> dict[str, np.ndarray]:
        n = _base.batch_size_of(arrays)
        keys = ("batch_size", self.length_key, "num_heads")
        missing = [k for k in keys if k not in arrays]
        if missing:
            raise DataError(f"{self.phase} MLA needs inputs {missing}")
        v = {k: _base.as_float(k, arrays[k], n) for k in keys}
        for key, default in DEEPSEEK_V3_GEOMETRY.items():
            v[key] = _base.as_float(key, arrays.get(key, float(default)), n)
        if "kv_cache_dtype" in arrays:
            v["kv_bytes"] = kv_bytes_of(arrays["kv_cache_dtype"], n)
        else:  # the Level-1 adapter passes a 0/1 fp8 flag instead of the dtype name
            fp8_kv = _base.as_float("kv_fp8", arrays.get("kv_fp8", 0.0), n)
            v["kv_bytes"] = np.where(fp8_kv > 0, 1.0, 2.0)
        return v

    # ---- fitting --------------------------------------------------------------------------
    @threaded_fit
    def fit(self, df: pd.DataFrame) -> Self:
        """Fit on the rows of `df` for this GPU and engine (kind context_mla / generation_mla)."""
        self._validate_params()
        d = df[(df["gpu"] == self.gpu) & (df["engine"] == self.engine)]
        if "kind" in d:
            d = d[d["kind"] == f"{self.phase}_mla"]
        if len(d) < 50:
            raise DataError(
                f"{self.phase} MLA for {self.gpu}/{self.engine}: {len(d)} rows, need >= 50"
            )
        v = self._inputs(mla_inputs(d))
        y = d["latency_s"].to_numpy(np.float64)
        self.gpu_spec_ = _base.gpu_constants(get_gpu(self.gpu), self.gpu_fields)
        self.head_tile_ = 1.0
        if self.phase == "generation":
            self.head_tile_ = self._choose_tile(v, y)
        flops, bytes_, items = self._work(v)
        self.roof_ = fit_roofline(flops, bytes_, y, *self._peak(), items, MAX_EFF)
        out, X = self.design(v)
        self.mlp_, self.power_mlp_ = fit_hybrid_heads(
            X,
            y,
            out["base_s"],
            np.full(len(y), np.nan),  # no measured power in the MLA tables
            members=MEMBERS,
            hidden=HIDDEN,
            max_iter=self.max_iter,
            max_rows=self.max_rows,
            seed=self.seed,
        )
        keys = ("batch_size", self.length_key, "num_heads", "kv_bytes", *GEOMETRY)
        self.range_ = _base.fitted_range({k: v[k] for k in keys})
        return self

    # ---- prediction -----------------------------------------------------------------------
    def _choose_tile(self, v: Mapping[str, np.ndarray], y: np.ndarray) -> float:
        """The decode head tile (DECODE_HEAD_TILES) whose fitted roofline best prices head
        counts it was not fitted on: per tile, the median |log error| of the base on each head
        count with the roofline fitted on the others, averaged over the counts (the base alone:
        least squares of four constants, no MLP)."""
        heads = v["num_heads"]
        best, chosen = np.inf, DECODE_HEAD_TILES[0]
        for tile in DECODE_HEAD_TILES:
            self.head_tile_ = tile
            flops, bytes_, items = self._work(v)
            misses = []
            for h in np.unique(heads):
                te = heads == h
                if te.all():
                    continue
                roof = fit_roofline(
                    flops[~te], bytes_[~te], y[~te], *self._peak(), items[~te], MAX_EFF
                )
                base = roof.parts(flops[te], bytes_[te], items[te])["base_s"]
                misses.append(np.median(np.abs(np.log(base / y[te]))))
            miss = float(np.mean(misses)) if misses else 0.0
            if miss < best:
                best, chosen = miss, tile
        return chosen

    def _peak(self) -> tuple[float, float]:
        """(bf16 peak FLOP/s, HBM bytes/s): fit time only (the fitted roofline keeps them)."""
        g = get_gpu(self.gpu)
        return g.peak_bf16_flops_per_s, g.hbm_bw_bytes_per_s

    def _work(self, v: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(FLOPs the tensor cores issue, bytes, thread blocks) of inputs `v`."""
        flops, bytes_ = mla_work(self.phase, v)
        issued = flops * padded_heads(v["num_heads"], self.head_tile_) / v["num_heads"]
        return issued, bytes_, work_items(self.phase, v, self.head_tile_)

    def design(self, v: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """(roofline parts with FLOPs and bytes, residual features) of inputs `v` (`_inputs`)."""
        issued, bytes_, items = self._work(v)
        flops = mla_work(self.phase, v)[0]
        out = self.roof_.parts(issued, bytes_, items)
        n_sms = self.gpu_spec_["n_sms"]
        X = _features(self.phase, v, flops, bytes_, np.log(out["base_s"]), n_sms, self.head_tile_)
        out["flops"] = flops
        out["bytes"] = bytes_
        return out, X

    def predict(self, **arrays: Any) -> dict[str, np.ndarray]:
        out, X = self.design(self._inputs(arrays))
        apply_residual(out, X, self.mlp_, None)
        return out

    # ---- state ----------------------------------------------------------------------------
    def to_state(self) -> dict[str, np.ndarray]:
        return {
            "phase": np.array(self.phase),
            "gpu": np.array(self.gpu),
            "engine": np.array(self.engine),
            "head_tile": np.array(self.head_tile_, dtype=np.float64),
            **_base.gpu_constants_to_state(self.gpu_spec_),
            **hybrid_state(self),
        }

    @classmethod
    def from_state(cls, state: Mapping[str, np.ndarray]) -> Self:
        _base.need(state, ("phase", "gpu", "engine", "head_tile", "roofline"), "MLA")
        phase = str(state["phase"])
        klass = ContextMLAModel if phase == "context" else GenerationMLAModel
        if not issubclass(klass, cls) and cls is not MLAModel:
            raise ArtifactError(f"state of a {phase} MLA model given to {cls.__name__}")
        m = klass(phase, str(state["gpu"]), str(state["engine"]))
        try:
            m._validate_params()
        except ConfigError as exc:
            raise ArtifactError(f"MLA model state: {exc}") from None
        load_hybrid(m, state)
        m.gpu_spec_ = _base.gpu_constants_from_state(state, cls.gpu_fields, "MLA")
        m.head_tile_ = float(state["head_tile"])
        return m


class ContextMLAModel(MLAModel):
    """Prefill MLA (causal, latent expanded per head): see MLAModel."""

    kind: ClassVar[str] = "context_mla"  # the manifest's kind; dse.models.MODEL_CLASSES
    phase_default: ClassVar[str] = "context"


class GenerationMLAModel(MLAModel):
    """Decode MLA (absorbed, over the latent cache): see MLAModel."""

    kind: ClassVar[str] = "generation_mla"  # the manifest's kind; dse.models.MODEL_CLASSES
    phase_default: ClassVar[str] = "generation"


_INPUT_COLUMNS = ("batch_size", "isl", "kv_len", "num_heads", "kv_cache_dtype", *GEOMETRY)


def mla_inputs(df: pd.DataFrame) -> dict[str, np.ndarray]:
    """predict() keyword arrays of an MLA table (`dse.data` kinds context_mla, generation_mla)."""
    return {c: df[c].to_numpy() for c in _INPUT_COLUMNS if c in df.columns}
