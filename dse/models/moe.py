"""Level-1 (Level-2 input) model of the fused MoE block (router + grouped expert GEMMs) per GPU,
engine and weight dtype, over num_tokens, hidden_size, inter_size, topk, num_experts, the
expert-tensor-parallel and expert-parallel sizes, and the routing skew. Shipped for vLLM's fused
Triton MoE tables (and any table too small for the kernel-sum model); TensorRT-LLM's tables and
vLLM's FlashInfer CUTLASS tables are `dse.models.moe_physics` (`dse.fitting.moe.model_class_of`).

Work on the measured rank (aiconfigurator times one rank of a moe_tp x moe_ep group):
  local experts E_l = E / ep, local width I_l = I / tp, routed slots on the rank S = T k / ep;
  experts touched (tokens landing uniformly) U = E_l (1 - (1 - k / E)^T);
  FLOPs = 2 S m H I_l  (m = 3 matrices gated: gate, up, down; 2 non-gated)
  bytes = U m H I_l w  (expert weights, w bytes each)  +  2 S (2 H + (m - 1) I_l)  (activations)
          + 2 T H E / ep  (router logits path, small)
The time is the roofline base (`dse.models._hybrid`; its per-item overhead counts the experts
touched: one grouped-GEMM tile schedule each) times a residual MLP factor whose
inputs include the routing skew (0 balanced; the power-law exponent otherwise, 1.01 or 1.2 in
the tables): skew concentrates tokens on few experts, so the busiest expert sets the pace.
Where the rows carry measured board power (H200), a power head gives energy = power x latency:
`_hybrid.LogPowerHead` (an MLP fitted to gradient-boosted trees' median of log power, clipped
to the GPU's idle and board power; `POWER_HEAD`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Self

import numpy as np

from dse.errors import DataError
from dse.models import base as _base
from dse.models._hybrid import (
    apply_residual,
    fit_hybrid_heads,
    fit_roofline,
    hybrid_state,
    load_hybrid,
)
from dse.models.threads import threaded_fit
from dse.spec.hardware import get_gpu

if TYPE_CHECKING:
    import pandas as pd

# Residual MLP 64 x 64 x 64, 300 epochs, <= 30000 rows a fit (as attention). Held-out error on
# H100 (5 group folds by layer shape), vLLM bf16 / fp8 / fp8_block and TRT-LLM fp8_block:
# 32 x 32 / 150 / 15000 rows 6.4 / 6.8 / 6.8 / 4.0%, this 5.5 / 4.7 / 5.3 / 3.3% (docs/accuracy.md).
HIDDEN = (64, 64, 64)
MAX_ITER = 300
MAX_ROWS = 30000
# Residual MLPs from consecutive seeds, averaged (_hybrid.fit_residual_ensemble): H100 vLLM held
# out (5 group folds by layer shape) bf16 / fp8 / fp8_block 5.50 / 4.75 / 5.26% with one member,
# 5.16 / 4.53 / 4.67% with two, 4.93 / 4.40 / 4.44% with three (docs/accuracy.md). Two: a member
# costs ~4% of an all-distinct full prediction (see attention.MEMBERS).
MEMBERS = 2
# The power head: "log" (`_hybrid.fit_log_power_head`, within [idle, board]) or "watts" (the
# MLP on watts, squared loss, unbounded: shipped before 2026-12-03). Held out by layout
# (command L's folds, experiments/moe_power_head.py) on H200 vLLM bf16 / fp8 / fp8_block: see
# docs/accuracy.md, "Energy at a glance".
POWER_HEAD = "log"
# bytes per expert weight by MoE dtype; unknown names count as 2 (bf16)
WEIGHT_BYTES = {
    "bfloat16": 2.0,
    "float16": 2.0,
    "fp8": 1.0,
    "fp8_block": 1.0,
    "int8": 1.0,
    "int4_wo": 0.5,
    "w4a16_mxfp4": 0.5,
    "mxfp4": 0.5,
}
FP8_COMPUTE = ("fp8", "fp8_block")  # run on the fp8 tensor cores
INPUTS = ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts")


def skew_of(distribution: Any, n: int) -> np.ndarray:
    """Routing skew per row: 0 for 'balanced' (or uniform), the exponent of 'power_law_<a>', or a
    number passed directly."""
    a = np.asarray(distribution)
    if a.dtype.kind in "fiu":
        return np.broadcast_to(a.astype(np.float64), (n,)).copy()
    names = np.broadcast_to(a.astype(str), (n,))
    out = np.zeros(n)
    for name in np.unique(names):
        if name.startswith("power_law_"):
            try:
                out[names == name] = float(name.removeprefix("power_law_"))
            except ValueError:
                raise DataError(f"MoE distribution {name!r}: cannot read the exponent") from None
        elif name not in ("balanced", "uniform", ""):
            raise DataError(
                f"MoE distribution must be 'balanced' or 'power_law_<exponent>', got {name!r}"
            )
    return out


def moe_work(v: Mapping[str, np.ndarray], weight_bytes: float) -> dict[str, np.ndarray]:
    """Per-rank work of one fused MoE call (see module doc)."""
    T, H, I_, k, E = (v[c] for c in INPUTS)
    tp, ep, gated = v["moe_tp_size"], v["moe_ep_size"], v["gated"]
    m = np.where(gated > 0, 3.0, 2.0)
    i_l = I_ / tp
    e_l = E / ep
    slots = T * k / ep
    touched = e_l * (1.0 - np.power(1.0 - np.minimum(k / E, 1.0), T))
    flops = 2.0 * slots * m * H * i_l
    bytes_ = touched * m * H * i_l * weight_bytes + 2.0 * slots * (2.0 * H + (m - 1.0) * i_l)
    bytes_ = bytes_ + 2.0 * T * H * e_l
    return {"flops": flops, "bytes": bytes_, "slots": slots, "touched": touched, "i_local": i_l}


def _features(
    v: Mapping[str, np.ndarray], w: Mapping[str, np.ndarray], log_t0: np.ndarray
) -> np.ndarray:
    # features as rows, returned transposed (column-major n x k): a cheap stack, and the MLP
    # forward pass standardises it block by block without a strided copy (nn.MLP.predict)
    return np.stack(
        [
            np.log(v["num_tokens"]),
            np.log(v["hidden_size"]),
            np.log(w["i_local"]),
            np.log(v["topk"]),
            np.log(v["num_experts"]),
            np.log(v["num_experts"] / v["moe_ep_size"]),
            np.log(v["moe_tp_size"]),
            np.log(v["moe_ep_size"]),
            v["skew"],
            v["gated"],
            np.log(np.maximum(w["slots"], 1e-3)),
            np.log(np.maximum(w["touched"], 1e-3)),
            np.log(w["flops"]),
            np.log(w["bytes"]),
            log_t0,
        ]
    ).T


class MoEModel(_base.Model):
    """Fused-MoE latency (and power/energy where measured) for one engine and MoE dtype on one GPU.

    predict(num_tokens, hidden_size, inter_size, topk, num_experts, moe_tp_size=1, moe_ep_size=1,
    distribution="balanced", gated=True) -> latency_s, base_s, t_compute_s, t_memory_s, launch_s,
    regime, residual_factor, flops, bytes, touched_experts; plus power_w, energy_j when fitted.
    """

    kind: ClassVar[str] = "moe"  # the manifest's kind; dse.models.MODEL_CLASSES

    def __init__(
        self,
        gpu: str = "h100_sxm",
        engine: str = "vllm",
        moe_dtype: str = "bfloat16",
        seed: int = 0,
        max_rows: int = MAX_ROWS,
        max_iter: int = MAX_ITER,
    ) -> None:
        self.gpu = gpu
        self.engine = engine
        self.moe_dtype = moe_dtype
        self.seed = seed
        self.max_rows = max_rows
        self.max_iter = max_iter

    @property
    def weight_bytes(self) -> float:
        return WEIGHT_BYTES.get(self.moe_dtype, 2.0)

    def _inputs(self, arrays: Mapping[str, Any]) -> dict[str, np.ndarray]:
        n = _base.batch_size_of(arrays)
        missing = [k for k in INPUTS if k not in arrays]
        if missing:
            raise DataError(f"MoE model needs inputs {missing}")
        v = {k: _base.as_float(k, arrays[k], n) for k in INPUTS}
        v["moe_tp_size"] = _base.as_float("moe_tp_size", arrays.get("moe_tp_size", 1.0), n)
        v["moe_ep_size"] = _base.as_float("moe_ep_size", arrays.get("moe_ep_size", 1.0), n)
        v["skew"] = skew_of(arrays.get("distribution", "balanced"), n)
        v["gated"] = np.broadcast_to(
            np.asarray(arrays.get("gated", True), dtype=bool), (n,)
        ).astype(np.float64)
        return v

    def _peak(self) -> tuple[float, float]:
        g = get_gpu(self.gpu)
        dt = "fp8" if self.moe_dtype in FP8_COMPUTE else "bfloat16"
        return g.peak_flops_per_s(dt), g.hbm_bw_bytes_per_s

    @threaded_fit
    def fit(self, df: pd.DataFrame) -> Self:
        """Fit on the moe rows of `df` for this GPU, engine and MoE dtype."""
        d = df[(df["gpu"] == self.gpu) & (df["engine"] == self.engine)]
        d = d[d["dtype"].astype(str) == self.moe_dtype]
        if len(d) < 50:
            raise DataError(
                f"moe {self.gpu}/{self.engine}/{self.moe_dtype}: {len(d)} rows, need >= 50"
            )
        return self._fit_rows(d)

    def _fit_rows(self, d: pd.DataFrame) -> Self:
        """Fit on the table rows `d` as given (`fit` picks them)."""
        v = self._inputs(self._table_inputs(d))
        y = d["latency_s"].to_numpy(np.float64)
        out, X = self.design(v, y)
        X = self._residual_inputs(X, d)
        p = d["power_w"].to_numpy(np.float64) if "power_w" in d else np.full(len(d), np.nan)
        g = get_gpu(self.gpu)
        self.mlp_, self.power_mlp_ = fit_hybrid_heads(
            X,
            y,
            out["base_s"],
            p,
            members=MEMBERS,
            hidden=HIDDEN,
            max_iter=self.max_iter,
            max_rows=self.max_rows,
            seed=self.seed,
            power_bounds_w=(g.idle_power_w, g.board_power_w) if POWER_HEAD == "log" else None,
        )
        self.range_ = _base.fitted_range(self._range_inputs(v))
        return self

    def _table_inputs(self, d: pd.DataFrame) -> dict[str, np.ndarray]:
        """predict() keyword arrays of this model's table rows."""
        return moe_inputs(d)

    def _range_inputs(self, v: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The inputs whose fitted range the model records (`range_`), and the combinations
        of them whose range matters beyond each input's own (`combination_inputs`)."""
        return {
            **{k: v[k] for k in (*INPUTS, "moe_tp_size", "moe_ep_size", "skew")},
            **combination_inputs(v),
        }

    def range_arrays(self, **arrays: Any) -> dict[str, np.ndarray]:
        """The combination inputs (`combination_inputs`) of predict() keyword `arrays`, to check
        against the fitted range with the plain inputs (adapters, bands): num_tokens, topk and
        num_experts as given (they broadcast), nothing where one of them is missing."""
        if not all(k in arrays for k in ("num_tokens", "topk", "num_experts")):
            return {}
        T, k, E = (
            np.asarray(arrays[c], dtype=np.float64) for c in ("num_tokens", "topk", "num_experts")
        )
        return combination_inputs({"num_tokens": T, "topk": k, "num_experts": E})

    def range_misses(self, **inputs: Any) -> dict[str, _base.RangeMiss]:
        """`range_misses` of the inputs and their combinations (`range_arrays`)."""
        return _base.range_misses(self.fitted_range(), {**inputs, **self.range_arrays(**inputs)})

    def design(
        self, v: Mapping[str, np.ndarray], y: np.ndarray | None = None
    ) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """(roofline parts with the work, residual-MLP features) of inputs `v` (`_inputs`).
        Given measured latencies `y` (fitting), the roofline is fitted on them first."""
        w = moe_work(v, self.weight_bytes)
        if y is not None:
            peak, bw = self._peak()
            self.roof_ = fit_roofline(w["flops"], w["bytes"], y, peak, bw, w["touched"])
        out = self.roof_.parts(w["flops"], w["bytes"], w["touched"])
        X = _features(v, w, np.log(out["base_s"]))
        out["flops"] = w["flops"]
        out["bytes"] = w["bytes"]
        out["touched_experts"] = w["touched"]
        return out, X

    def _residual_inputs(self, X: np.ndarray, d: pd.DataFrame | None) -> np.ndarray:
        """The residual's features: `design`'s (a subclass adds columns; `d`: the table rows
        when fitting, None when predicting)."""
        return X

    def predict(self, **arrays: Any) -> dict[str, np.ndarray]:
        out, X = self.design(self._inputs(arrays))
        apply_residual(out, self._residual_inputs(X, None), self.mlp_, self.power_mlp_)
        return out

    def to_state(self) -> dict[str, np.ndarray]:
        return {
            "gpu": np.array(self.gpu),
            "engine": np.array(self.engine),
            "moe_dtype": np.array(self.moe_dtype),
            **hybrid_state(self),
        }

    @classmethod
    def from_state(cls, state: Mapping[str, np.ndarray]) -> Self:
        _base.need(state, ("gpu", "engine", "moe_dtype", "roofline"), "moe")
        m = cls(str(state["gpu"]), str(state["engine"]), str(state["moe_dtype"]))
        load_hybrid(m, state)
        return m


def moe_inputs(df: pd.DataFrame) -> dict[str, np.ndarray]:
    """predict() keyword arrays of a moe table (gated from the kernel name: '*nongated*' = no)."""
    out: dict[str, np.ndarray] = {
        c: df[c].to_numpy() for c in (*INPUTS, "moe_tp_size", "moe_ep_size", "distribution")
    }
    if "kernel_source" in df:
        out["gated"] = ~df["kernel_source"].astype(str).str.contains("nongated").to_numpy()
    return out


def combination_inputs(v: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The combinations of inputs whose fitted range matters beyond each input's own (issue 19):
    experts per top-k (how sparse the layer is: 51 at most in some tables, 128 in a user's
    layout) and routed tokens per expert T k / E (how full each expert's GEMM is)."""
    return {
        "experts_per_topk": v["num_experts"] / v["topk"],
        "tokens_per_expert": v["num_tokens"] * v["topk"] / v["num_experts"],
    }
