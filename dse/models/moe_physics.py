"""The issue-19 physics of the fused MoE (docs/dev/accuracy-journal.md, "MoE from physics first"
and sessions 13-14), shipped for the CUTLASS MoE tables (kind "moe_physics"):
`dse.fitting.moe.model_class_of` picks it for a table whose engine runs the MoE as separate
kernels whose times add (TensorRT-LLM, and vLLM's FlashInfer CUTLASS backend: router, permute,
two grouped GEMMs, activation, finalize), which is what the `KernelSum` base prices; vLLM's
fused Triton kernel does the permute inside the GEMM, and its tables keep `dse.models.moe`. A
table of two backends told apart by expert parallelism (`backend_split`) holds one model per
backend.
experiments/moe_layout_cv.py --model new measures it held out by layout.

Level-1 (Level-2 input) model of the fused MoE block (router + grouped expert GEMMs) per GPU,
engine and weight dtype, over num_tokens, hidden_size, inter_size, topk, num_experts, the
expert-tensor-parallel and expert-parallel sizes, the routing and the gating.

Physics first, on the measured rank (aiconfigurator times one rank of a moe_tp x moe_ep group):
  local experts E_l = E / ep, local width I_l = I / tp;
  the routing (`dse.models._moe_routing`: uniform, round robin = the tables' "balanced", or the
  collector's power law) gives the rank's routed slots S, experts touched U and M tiles (each
  touched expert's slots rounded up to the grouped GEMM's M tile);
  m = 3 matrices gated (gate, up, down: SwiGLU), 2 non-gated (up, down: ReLU^2), from metadata
  (the `gated` input: the architecture's gated_mlp, or the table's layout metadata), not from a
  kernel name;
  FLOPs = 2 x (M tiles x BM) x m H I_l   (the padded rows run on the tensor cores too)
  bytes = U m H I_l w                      (each touched expert's weights, w bytes each)
          + 2 S (3 H + 2 m I_l)            (bf16 activations: x gathered, the m - 1 wide
                                            intermediate written and read, the activation's
                                            output written and read, expert outputs written and
                                            summed) + 2 T (H + E)    (output, router logits)
The time is the roofline base (`dse.models._hybrid`; its per-item overhead counts the experts
touched: one grouped-GEMM tile schedule each) times a residual MLP factor whose inputs are
layout-agnostic (`FEATURES`: tokens per touched expert, fraction of local experts touched, tile
padding, arithmetic intensity, regime, log base time, ...), never raw log(hidden) or
log(experts) coordinates, so an unseen layout is priced by its physics.
Where the rows carry measured board power (H200), a power head gives energy = power x latency
(the shipped model's: `dse.models.moe.POWER_HEAD`), with the power held under the GPU's board
limit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Self

import numpy as np

from dse.errors import ArtifactError, DataError
from dse.models import base as _base
from dse.models import moe as shipped  # the constructor, fit and state: compared on equal terms
from dse.models._hybrid import (
    SMOOTH_MAX_P,
    Roofline,
    apply_residual,
    fit_roofline,
    hybrid_state,
    load_hybrid,
    power_head_from_state,
)
from dse.models._moe_routing import M_TILE, ROUND_ROBIN, routing_of, routing_stats
from dse.models._nn import mlp_from_state
from dse.models.moe import INPUTS, combination_inputs  # noqa: F401  (re-exported)
from dse.models.threads import threaded_fit
from dse.spec.hardware import get_gpu

if TYPE_CHECKING:
    import pandas as pd


ACT_BYTES = 2.0  # activations stay bf16 between the grouped GEMMs (fp8 kernels quantise inside)
N_TILE = 128.0  # columns of a grouped-GEMM N tile: a local width off it leaves lanes idle
# The compute time counts the M-padded rows (`_moe_routing.M_TILE`): the tensor cores run them.
PAD_COMPUTE = True
# Residual-MLP inputs, in order: physics only, no raw layout coordinate (issue 19). Held out by
# layout (5 seeded folds) these beat the raw log(hidden, inter, experts, top-k) inputs: see
# docs/dev/accuracy-journal.md, "MoE from physics first".
FEATURES = (
    "log_tokens",  # workload: router, sort and align kernels scale with T
    "log_tokens_per_expert",  # S / U: the M of each expert's GEMM
    "touched_fraction",  # U / E_l
    "log_pad",  # padded / real rows: the tile-padding waste
    "log_imbalance",  # busiest expert / mean: skewed routing
    "n_fill",  # I_l / (N tiles x BN): lanes a narrow local width leaves idle
    "log_ctas",  # M tiles x N tiles of the first GEMM against the SM count: waves
    "log_intensity",  # FLOPs / byte
    "log_compute_memory",  # t_c / t_m: the regime, continuous
    "gated",
    "round_robin",
    "power_law_alpha",
    "log_base",
)


# The analytical base (session 13): "kernels" prices the fused MoE as the sequence of kernels it
# runs (router top-k, permute, grouped GEMM 1, activation, grouped GEMM 2, finalize), each its
# own term (`KernelSum`); "roofline" is the session-12 single roofline over all FLOPs and bytes.
# Held out by layout, fitted physics alone (journal, session 13): H100 TRT-LLM bf16 23.8 -> 18.1%,
# fp8_block 19.9 -> 8.5%, vLLM bf16 19.7 -> 14.0%.
BASE = "kernels"
# Parallel splits slower than their half-parallel twin (`dse.models.moe_splits`) left out of
# the fit: a tuner's kernel choice, not physics of the layout.
SCREEN_SPLITS = True
# "always": physics x bounded residual MLP; "never": physics alone; "inner_cv": per table, the
# one of the two with the lower error in a group CV over the *training* layouts only
# (`INNER_FOLDS` folds, nested inside whatever held-out split the caller makes).
RESIDUAL = "inner_cv"
INNER_FOLDS = 3

# The residual may move the physics by at most x e^-c .. x e^c (c in log units): held out by
# layout, an unbounded residual turned 14-24% physics into 22-43% on H100 vLLM fp8_block and
# TRT-LLM bf16 / fp8; c = 1.0 costs the other tables <= 0.7 points (journal).
RESIDUAL_LOG_CLIP = 1.0
LAYOUT = ("hidden_size", "inter_size", "topk", "num_experts")  # what a held-out layout is
# Raw layout coordinates, for the experiments that measure what they add held out (never in the
# shipped FEATURES: an unseen layout is then priced by its log-coordinates, not its physics).
LAYOUT_FEATURES: dict[str, Any] = {
    "log_hidden": lambda v, w: v["hidden_size"],
    "log_inter_local": lambda v, w: w["i_local"],
    "log_topk": lambda v, w: v["topk"],
    "log_experts_local": lambda v, w: w["e_local"],
}


N_KERNEL_CONSTANTS = 7  # KernelSum.theta: launch, e_c, e_w, e_a, c_perm, c_route, c_item

# A table whose rows ran two kernel backends, the engine's dispatch telling them apart by expert
# parallelism alone (H100 vLLM 0.24 fp8_block: every expert-parallel split FlashInfer's CUTLASS
# MoE, every tensor-parallel-only split Triton), gets one model per backend, and a row is priced
# by the one its split dispatches to (`backend_split`; journal, session 14: held out by layout
# 10.3 -> 9.1% at the screen setting). "ep1": moe_ep_size 1, "ep_many": moe_ep_size > 1.
SPLIT_BACKENDS = True
PARTS = ("ep1", "ep_many")


def backend_split(d: pd.DataFrame) -> bool:
    """True when the rows ran two kernel backends (`kernel_source`) and expert parallelism alone
    tells which: every moe_ep_size 1 row one backend, every larger one the other."""
    if "kernel_source" not in d or not len(d):
        return False
    src = d["kernel_source"].astype(str).to_numpy()
    ep1 = d["moe_ep_size"].to_numpy(np.float64) == 1.0
    if ep1.all() or not ep1.any():
        return False
    a, b = set(src[ep1]), set(src[~ep1])
    return len(a) == 1 and len(b) == 1 and a != b


def _take(value: Any, sel: np.ndarray, n: int) -> Any:
    """The rows `sel` of one predict() keyword value (a scalar stays as it is)."""
    a = np.asarray(value)
    return value if a.ndim == 0 else np.broadcast_to(a, (n,))[sel]


@dataclass(frozen=True)
class KernelSum:
    """The fused MoE as its kernel sequence, on the measured rank (s):

        t = launch + c_item U + c_route T E + c_perm t_perm + (t_c^P + (t_w + t_a)^P)^(1/P)

    t_c = padded GEMM FLOPs / (peak e_c) (M tiles of `M_TILE` rows x local width up to `N_TILE`);
    t_w = expert weight bytes / (bw e_w); t_a = GEMM activation bytes / (bw e_a) (gathered x, the
    intermediate written and read: the GEMMs stream them while they run); t_perm = 2 S H bytes /
    bw (the permute and finalize kernels that move every routed token's hidden row before and
    after the GEMMs: they do not overlap the GEMMs, so they add); c_route s per router logit
    (top-k over E logits per token). Seven constants, fitted in log space."""

    theta: tuple[float, ...]  # log of (launch us, e_c, e_w, e_a, c_perm, c_route ps, c_item ns)
    peak_flops_per_s: float
    bw_bytes_per_s: float

    def parts(self, terms: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return _kernel_parts(
            np.asarray(self.theta), terms, self.peak_flops_per_s, self.bw_bytes_per_s
        )

    def to_state(self, prefix: str) -> dict[str, np.ndarray]:
        return {
            f"{prefix}kernels": np.array(
                [*self.theta, self.peak_flops_per_s, self.bw_bytes_per_s], dtype=np.float64
            )
        }

    @classmethod
    def from_state(cls, state: Mapping[str, np.ndarray], prefix: str) -> KernelSum:
        v = np.asarray(state[f"{prefix}kernels"], dtype=np.float64).ravel()
        if v.size != N_KERNEL_CONSTANTS + 2:
            raise ArtifactError(
                f"moe_physics state: {prefix}kernels holds {v.size} numbers, expected "
                f"{N_KERNEL_CONSTANTS + 2}; re-fit with dse fit"
            )
        th = tuple(float(x) for x in v[:N_KERNEL_CONSTANTS])
        return cls(th, float(v[N_KERNEL_CONSTANTS]), float(v[N_KERNEL_CONSTANTS + 1]))


def _kernel_parts(
    th: np.ndarray, f: Mapping[str, np.ndarray], peak: float, bw: float
) -> dict[str, np.ndarray]:
    e = np.exp(th)
    t_c = f["gemm_flops"] / (peak * e[1])
    t_m = f["weight_bytes"] / (bw * e[2]) + f["act_bytes"] / (bw * e[3])
    p = SMOOTH_MAX_P
    core = (t_c**p + t_m**p) ** (1.0 / p)
    t_i = e[4] * f["perm_bytes"] / bw + e[5] * 1e-12 * f["logits"] + e[6] * 1e-9 * f["touched"]
    launch = np.full_like(t_c, e[0] * 1e-6)
    return {
        "t_compute_s": t_c,
        "t_memory_s": t_m,
        "launch_s": launch,
        "t_items_s": t_i,
        "base_s": launch + t_i + core,
        "regime": (t_c >= t_m).astype(np.int64),  # 1 compute-bound, 0 memory-bound
    }


def kernel_terms(
    v: Mapping[str, np.ndarray], w: Mapping[str, np.ndarray], weight_bytes: float
) -> dict[str, np.ndarray]:
    """The work terms of `KernelSum` from the inputs `v` and `moe_work`'s `w`."""
    H = v["hidden_size"]
    m = np.where(v["gated"] > 0, 3.0, 2.0)
    i_pad = np.ceil(w["i_local"] / N_TILE) * N_TILE
    return {
        "gemm_flops": 2.0 * w["tiles"] * M_TILE * m * H * i_pad,
        "weight_bytes": w["touched"] * m * H * w["i_local"] * weight_bytes,
        "act_bytes": ACT_BYTES * w["slots"] * (2.0 * H + (m - 1.0) * w["i_local"]),
        "perm_bytes": ACT_BYTES * w["slots"] * H,
        "logits": v["num_tokens"] * v["num_experts"],
        "touched": w["touched"],
    }


def fit_kernels(
    terms: Mapping[str, np.ndarray], y_s: np.ndarray, peak: float, bw: float
) -> KernelSum:
    """Robust log-space least squares of `KernelSum`'s constants to measured times `y_s`."""
    from scipy.optimize import least_squares  # fitting only

    ly = np.log(y_s)
    th0 = np.log([max(float(np.quantile(y_s, 0.01)) * 1e6, 1.0), 0.5, 0.8, 0.8, 1.0, 10.0, 30.0])

    def resid(th: np.ndarray) -> np.ndarray:
        return np.log(_kernel_parts(th, terms, peak, bw)["base_s"]) - ly

    # the constants stay physical: efficiencies in (e^-5, 1.5], the overhead terms bounded
    lo = np.array([-5.0, -5.0, -5.0, -5.0, -12.0, -12.0, -12.0])
    hi = np.array([8.0, 0.4, 0.4, 0.4, 4.0, 8.0, 8.0])
    res = least_squares(
        resid,
        np.clip(th0, lo + 1e-6, hi - 1e-6),
        bounds=(lo, hi),
        loss="soft_l1",
        f_scale=0.1,
        max_nfev=2000,
    )
    return KernelSum(tuple(float(x) for x in res.x), peak, bw)


def skew_of(distribution: Any, n: int) -> np.ndarray:
    """The power-law exponent of each row's routing, 0 for uniform or round robin
    ('balanced'); numbers pass as exponents (`_moe_routing.routing_of`)."""
    return routing_of(distribution, n)[1]


def moe_work(v: Mapping[str, np.ndarray], weight_bytes: float) -> dict[str, np.ndarray]:
    """Per-rank work of one fused MoE call (see module doc)."""
    T, H, I_, k, E = (v[c] for c in INPUTS)
    tp, ep, gated = v["moe_tp_size"], v["moe_ep_size"], v["gated"]
    m = np.where(gated > 0, 3.0, 2.0)
    i_l = I_ / tp
    r = routing_stats(T, k, E, ep, v["routing"], v["skew"])
    slots, touched = r["slots"], r["touched"]
    rows = r["tiles"] * M_TILE if PAD_COMPUTE else slots
    flops = 2.0 * rows * m * H * i_l
    bytes_ = touched * m * H * i_l * weight_bytes
    bytes_ = bytes_ + ACT_BYTES * (slots * (3.0 * H + 2.0 * m * i_l) + T * (H + E))
    return {
        "flops": flops,
        "flops_real": 2.0 * slots * m * H * i_l,
        "bytes": bytes_,
        "slots": slots,
        "touched": touched,
        "tiles": r["tiles"],
        "max_load": r["max_load"],
        "i_local": i_l,
        "e_local": E / ep,
    }


def _features(
    v: Mapping[str, np.ndarray],
    w: Mapping[str, np.ndarray],
    out: Mapping[str, np.ndarray],
    n_sms: float,
) -> np.ndarray:
    # features as rows, returned transposed (column-major n x k): a cheap stack, and the MLP
    # forward pass standardises it block by block without a strided copy (nn.MLP.predict)
    touched = np.maximum(w["touched"], 1e-3)
    per_expert = np.maximum(w["slots"], 1e-3) / touched
    n_tiles = np.ceil(w["i_local"] * np.where(v["gated"] > 0, 2.0, 1.0) / N_TILE)
    cols = {
        "log_tokens": np.log(v["num_tokens"]),
        "log_tokens_per_expert": np.log(per_expert),
        "touched_fraction": touched / w["e_local"],
        "log_pad": np.log(np.maximum(w["tiles"] * M_TILE, 1e-3) / np.maximum(w["slots"], 1e-3)),
        "log_imbalance": np.log(np.maximum(w["max_load"], 1e-3) / per_expert),
        "n_fill": w["i_local"] / (np.ceil(w["i_local"] / N_TILE) * N_TILE),
        "log_ctas": np.log(np.maximum(w["tiles"], 1.0) * n_tiles / n_sms),
        "log_intensity": np.log(w["flops"] / w["bytes"]),
        "log_compute_memory": np.log(out["t_compute_s"] / out["t_memory_s"]),
        "gated": v["gated"],
        "round_robin": (v["routing"] == ROUND_ROBIN).astype(np.float64),
        "power_law_alpha": v["skew"],
        "log_base": np.log(out["base_s"]),
    }
    for name in set(LAYOUT_FEATURES).intersection(FEATURES):  # experiments only (not shipped)
        cols[name] = np.log(LAYOUT_FEATURES[name](v, w))
    return np.stack([cols[f] for f in FEATURES]).T


class MoEModel(shipped.MoEModel):
    """Fused-MoE latency (and power/energy where measured) for one engine and MoE dtype on one GPU:
    the shipped model (`dse.models.moe.MoEModel`: constructor, fit, state) with this module's
    routing, work, features, a bounded residual and power under the board limit.

    predict(num_tokens, hidden_size, inter_size, topk, num_experts, moe_tp_size=1, moe_ep_size=1,
    distribution="uniform", gated=True) -> latency_s, base_s, t_compute_s, t_memory_s, launch_s,
    regime, residual_factor, flops, bytes, touched_experts, routed_slots; plus power_w, energy_j
    when fitted. `distribution`: "uniform" (a user's default: independent tokens), "balanced" /
    "round_robin" (aiconfigurator's deterministic round robin) or "power_law_<alpha>".
    """

    kind: ClassVar[str] = "moe_physics"  # the manifest's kind; dse.models.MODEL_CLASSES
    # the CTAs per SM of the residual's inputs; the board limit power is held under
    gpu_fields: ClassVar[tuple[str, ...]] = ("n_sms", "board_power_w")

    def _inputs(self, arrays: Mapping[str, Any]) -> dict[str, np.ndarray]:
        n = _base.batch_size_of(arrays)
        missing = [k for k in INPUTS if k not in arrays]
        if missing:
            raise DataError(f"MoE model needs inputs {missing}")
        v = {k: _base.as_float(k, arrays[k], n) for k in INPUTS}
        v["moe_tp_size"] = _base.as_float("moe_tp_size", arrays.get("moe_tp_size", 1.0), n)
        v["moe_ep_size"] = _base.as_float("moe_ep_size", arrays.get("moe_ep_size", 1.0), n)
        code, alpha = routing_of(arrays.get("distribution", "uniform"), n)
        v["routing"], v["skew"] = code, alpha
        v["gated"] = np.broadcast_to(
            np.asarray(arrays.get("gated", True), dtype=bool), (n,)
        ).astype(np.float64)
        return v

    def _table_inputs(self, d: pd.DataFrame) -> dict[str, np.ndarray]:
        return moe_inputs(d)

    def design(
        self, v: Mapping[str, np.ndarray], y: np.ndarray | None = None
    ) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """(roofline parts with the work, residual-MLP features) of inputs `v` (`_inputs`).
        Given measured latencies `y` (fitting), the roofline is fitted on them first."""
        w = moe_work(v, self.weight_bytes)
        if y is not None:
            peak, bw = self._peak()
            if BASE == "kernels":
                self.roof_ = fit_kernels(kernel_terms(v, w, self.weight_bytes), y, peak, bw)
            else:
                self.roof_ = fit_roofline(w["flops"], w["bytes"], y, peak, bw, w["touched"])
        if isinstance(self.roof_, KernelSum):
            out = self.roof_.parts(kernel_terms(v, w, self.weight_bytes))
        else:
            out = self.roof_.parts(w["flops"], w["bytes"], w["touched"])
        X = _features(v, w, out, self.gpu_spec_["n_sms"])
        out["flops"] = w["flops"]
        out["bytes"] = w["bytes"]
        out["touched_experts"] = w["touched"]
        out["routed_slots"] = w["slots"]
        return out, X

    @threaded_fit
    def fit(self, df: pd.DataFrame) -> Self:
        """The shipped fit on this table's rows, less the anomalous splits (`SCREEN_SPLITS`),
        then the residual kept or not (`RESIDUAL`; "inner_cv" decides on the training layouts)."""
        self.gpu_spec_ = _base.gpu_constants(get_gpu(self.gpu), self.gpu_fields)
        d = df[(df["gpu"] == self.gpu) & (df["engine"] == self.engine)]
        d = d[d["dtype"].astype(str) == self.moe_dtype].reset_index(drop=True)
        from dse.models.moe_splits import split_anomalies  # fitting only (pandas)

        if SCREEN_SPLITS:
            d = d[~split_anomalies(d)].reset_index(drop=True)
        self.parts_: dict[str, MoEModel] = {}
        if SPLIT_BACKENDS and not getattr(self, "_inner", False) and backend_split(d):
            return self._fit_parts(d)
        super().fit(d)
        # the bound in force when fitted travels with the state: predictions do not depend on
        # what the module's experiment switch says later
        self.residual_log_clip_ = float(RESIDUAL_LOG_CLIP)
        self.use_residual_ = RESIDUAL != "never"
        self.inner_mape_: dict[str, float] = {}
        if RESIDUAL == "inner_cv" and not getattr(self, "_inner", False):
            self.use_residual_ = self._inner_choice(d)
        return self

    def _fit_parts(self, d: pd.DataFrame) -> Self:
        """One model per backend (`PARTS`, split by expert parallelism), each fitted (its own
        inner CV included) on its rows alone; the range is the whole table's."""
        ep1 = d["moe_ep_size"].to_numpy(np.float64) == 1.0
        for name, sel in zip(PARTS, (ep1, ~ep1), strict=True):
            sub = type(self)(
                self.gpu, self.engine, self.moe_dtype, self.seed, self.max_rows, self.max_iter
            )
            self.parts_[name] = sub.fit(d[sel])
        self.range_ = _base.fitted_range(self._range_inputs(self._inputs(self._table_inputs(d))))
        self._power_of_parts()
        self.residual_log_clip_ = float(RESIDUAL_LOG_CLIP)
        self.use_residual_ = all(m.use_residual_ for m in self.parts_.values())
        self.inner_mape_ = {
            f"{name}/{k}": v for name, m in self.parts_.items() for k, v in m.inner_mape_.items()
        }
        return self

    def _power_of_parts(self) -> None:
        # whether power was measured (the manifest's measured_power); the parts predict it
        powers = [m.power_mlp_ for m in self.parts_.values() if m.power_mlp_ is not None]
        self.power_mlp_ = powers[0] if powers else None

    def _predict_parts(self, arrays: Mapping[str, Any]) -> dict[str, np.ndarray]:
        n = _base.batch_size_of(arrays)
        ep = _base.as_float("moe_ep_size", arrays.get("moe_ep_size", 1.0), n)
        got = []
        for name, sel in zip(PARTS, (ep == 1.0, ep != 1.0), strict=True):
            if sel.any():
                sub = {k: _take(v, sel, n) for k, v in arrays.items()}
                got.append((np.flatnonzero(sel), self.parts_[name].predict(**sub)))
        idx = np.concatenate([i for i, _ in got])
        out: dict[str, np.ndarray] = {}
        for key in got[0][1]:
            vals = np.concatenate([np.broadcast_to(p[key], i.shape) for i, p in got])
            out[key] = np.empty_like(vals)
            out[key][idx] = vals
        return out

    def _inner_choice(self, d: pd.DataFrame) -> bool:
        """True when physics x residual beats physics alone (mean APE, %) over `INNER_FOLDS`
        group folds of the training layouts: the held-out layouts never enter the choice."""
        groups = d.groupby(list(LAYOUT), sort=True).ngroup().to_numpy()
        if len(np.unique(groups)) < INNER_FOLDS:
            return True
        y = d["latency_s"].to_numpy(np.float64)
        ape = {"physics": np.full(len(d), np.nan), "residual": np.full(len(d), np.nan)}
        for te in _base.group_folds(groups, INNER_FOLDS, self.seed + 1):
            if te.all() or not te.any():
                continue
            inner = type(self)(
                self.gpu, self.engine, self.moe_dtype, self.seed, self.max_rows, self.max_iter
            )
            inner._inner = True
            inner.fit(d[~te])
            p = inner.predict(**moe_inputs(d[te]))
            ape["physics"][te] = np.abs(p["base_s"] / y[te] - 1.0) * 100
            ape["residual"][te] = np.abs(p["latency_s"] / y[te] - 1.0) * 100
        self.inner_mape_ = {k: float(np.nanmean(a)) for k, a in ape.items()}
        return self.inner_mape_["residual"] < self.inner_mape_["physics"]

    def predict(self, **arrays: Any) -> dict[str, np.ndarray]:
        if getattr(self, "parts_", None):  # one model per backend (`backend_split`)
            return self._predict_parts(arrays)
        out, X = self.design(self._inputs(arrays))
        apply_residual(out, X, self.mlp_, self.power_mlp_)
        if not getattr(self, "use_residual_", True):  # the inner CV chose physics alone
            out["residual_factor"] = np.ones_like(out["base_s"])
            out["latency_s"] = out["base_s"].copy()
            if "power_w" in out:
                out["power_w"] = self.power_mlp_.predict(
                    np.column_stack([X, np.log(out["latency_s"])])
                )
        clip = getattr(self, "residual_log_clip_", RESIDUAL_LOG_CLIP)
        if np.isfinite(clip):
            f = np.exp(np.clip(np.log(out["residual_factor"]), -clip, clip))
            out["residual_factor"], out["latency_s"] = f, out["base_s"] * f
        if "power_w" in out:  # the board's power management holds a kernel's mean under it
            out["power_w"] = np.minimum(out["power_w"], self.gpu_spec_["board_power_w"])
            out["energy_j"] = out["power_w"] * out["latency_s"]
        return out

    def to_state(self) -> dict[str, np.ndarray]:
        inner = sorted(getattr(self, "inner_mape_", {}).items())
        parts = getattr(self, "parts_", None)
        if parts:  # each backend's model under its part's prefix, the whole range at the top
            body = {f"{name}/{k}": v for name, m in parts.items() for k, v in m.to_state().items()}
            body.update(_base.range_to_state(self.range_))
            body["parts"] = np.array(list(parts), dtype=str)
        else:
            body = hybrid_state(self)  # the base under "kernels" (KernelSum) or "roofline"
        return {
            "gpu": np.array(self.gpu),
            "engine": np.array(self.engine),
            "moe_dtype": np.array(self.moe_dtype),
            **_base.gpu_constants_to_state(self.gpu_spec_),
            **body,
            "use_residual": np.array(bool(self.use_residual_)),
            "residual_log_clip": np.array(self.residual_log_clip_, dtype=np.float64),
            "inner_mape/names": np.array([k for k, _ in inner], dtype=str),
            "inner_mape/values": np.array([v for _, v in inner], dtype=np.float64),
        }

    @classmethod
    def from_state(cls, state: Mapping[str, np.ndarray]) -> Self:
        keys = ("gpu", "engine", "moe_dtype", "use_residual", "residual_log_clip")
        _base.need(state, keys, "moe_physics")
        m = cls(str(state["gpu"]), str(state["engine"]), str(state["moe_dtype"]))
        m.gpu_spec_ = _base.gpu_constants_from_state(state, cls.gpu_fields, "moe_physics")
        m.parts_ = {}
        if "parts" in state:
            own = _base.gpu_constants_to_state(m.gpu_spec_)  # a part without its own: the GPU's
            for name in (str(x) for x in np.asarray(state["parts"]).ravel()):
                pre = f"{name}/"
                sub = {k[len(pre) :]: v for k, v in state.items() if k.startswith(pre)}
                m.parts_[name] = cls.from_state({**own, **sub})
            m.range_ = _base.range_from_state(state)
            m._power_of_parts()
        elif "kernels" in state:
            m.roof_ = KernelSum.from_state(state, "")
            m.mlp_ = mlp_from_state(dict(state), "resid/")
            m.power_mlp_ = power_head_from_state(state, "power/")
            m.range_ = _base.range_from_state(state)
        else:  # BASE = "roofline" (experiments): the shipped model's state layout
            load_hybrid(m, state)
            assert isinstance(m.roof_, Roofline)
        m.use_residual_ = bool(state["use_residual"])
        m.residual_log_clip_ = float(state["residual_log_clip"])
        names = [str(n) for n in np.asarray(state.get("inner_mape/names", [])).ravel()]
        values = np.asarray(state.get("inner_mape/values", []), dtype=np.float64).ravel()
        m.inner_mape_ = {n: float(v) for n, v in zip(names, values, strict=True)}
        return m


def moe_inputs(df: pd.DataFrame) -> dict[str, np.ndarray]:
    """predict() keyword arrays of a moe table; gating from the rows' `gated` column (the
    layout's metadata, `dse.data`), gated where a table does not say."""
    out: dict[str, np.ndarray] = {
        c: df[c].to_numpy() for c in (*INPUTS, "moe_tp_size", "moe_ep_size", "distribution")
    }
    if "gated" in df:
        out["gated"] = df["gated"].to_numpy(bool)
    return out
