"""Physical floors of measured rows: a measurement faster than physics allows is wrong.

For every row of a measured table, `floor_s(kind, rows)` is the least time the work can take on
the row's GPU (`dse.spec.hardware`): `dse.roofline.roofline_s(flops, bytes, peak, bandwidth)`
at the dense tensor-core peak of the row's dtype and the HBM (or, for collectives, the NVLink)
bandwidth of the spec sheet, with no launch floor. The work counted is a lower bound of what the
kernel must do (the least bytes it must move, the FLOPs it must issue); where a quantity is not
known (an MoE table's gating, the layout of a served request) the smaller choice is taken.
End to end, a batch must run its prefill (2 x active non-embedding parameters x prompt tokens
of FLOPs, or one read of the weights) and then, per decode step, read the streamed weights once
and the KV cache written so far, each GPU its 1/TP share.

A profiled device (`dse profile`: a CPU, a GPU outside the registry) has no spec sheet: its
kernel rows are bounded by the fastest rates each kernel kind reached on it (`measured_peaks`,
written to its gpu.yaml as `kernel_peaks`), never by another kind's peak, since relative speeds
differ between devices (bf16 SDPA ran 16x faster than bf16 matmul on an AVX2 EPYC).

A row below `floor x (1 - MARGIN)` is implausible: `dse fit` does not fit it and `dse validate`
does not score it; both report such rows per table, counted and named (`screen`).

    kept, report = screen("e2e", rows)
    report["rows"], report["examples"]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from dse.errors import DSEError
from dse.models.moe_splits import SERIES as MOE_SERIES
from dse.roofline import roofline_s
from dse.spec.hardware import GPU, KernelPeak, get_gpu

# Margin below the floor before a row is called implausible: a fraction of the floor time
# (0.35 = a row measured under 0.65 x its floor time, in seconds, is implausible). Measured on
# /work/shared/data: the fastest genuine kernel rows sit at 0.70 x their floor (a bf16 GEMM
# m=32768 n=32 k=512 on H100, 7 us: its 36 MB of operands stay in the 50 MB L2 between CUDA-graph
# replays, so the HBM bandwidth of the spec sheet is not its bound), layer ops at 0.76 x, context
# attention 0.78 x, MoE 0.87 x; every table of a modelled engine end to end at 1.20 x or above.
# The rows this rejects sit far lower (argonne GH200 vLLM runs that ended after prefill: 0.006 to
# 0.053 x) or cannot be fp16 (llama.cpp rows down to 0.25 x). docs/accuracy.md, "Excluded rows".
MARGIN = 0.35
# How many implausible rows a report names (the count is always complete).
NAMED = 20


def _gpu_values(gpus: pd.Series, fn: Callable[[Any], float]) -> np.ndarray:
    """fn(GPU spec) per row; NaN for a GPU outside the registry (no floor for it)."""
    out = np.full(len(gpus), np.nan)
    names = gpus.astype(str).to_numpy()
    for name in np.unique(names):
        try:
            value = fn(get_gpu(name))
        except Exception:  # ConfigError (unknown GPU) or a spec without the number
            continue
        out[names == name] = np.nan if value is None else float(value)
    return out


# Compute dtypes whose tensor-core peak the spec sheet gives: 16-bit, and 8-bit (fp8 and int8
# run at the fp8 rate); weight-only formats (int4_wo, w4a16_*) compute in 16 bits. Any other
# dtype (nvfp4, ...) has no peak here, hence no floor: a floor must never be too high.
PEAK_DTYPES = {
    "bfloat16": "bfloat16",
    "float16": "bfloat16",
    "fp8": "fp8",
    "fp8_block": "fp8",
    "int8": "fp8",
    "int4_wo": "bfloat16",
    "w4a16_mxfp4": "bfloat16",
}
# Kinds whose floor is one roofline of each row's work (`kernel_work`): a profiled device
# measures its own fastest rates of each (`measured_peaks`, the spec's `kernel_peaks`).
KERNEL_KINDS = (
    "gemm",
    "context_attention",
    "generation_attention",
    "moe",
    "layer_op",
    "allreduce",
    "collective",
    "context_mla",
    "generation_mla",
    "context_mla_module",
    "generation_mla_module",
)
COLLECTIVE_KINDS = ("allreduce", "collective")


def _device_peak(g: GPU, dtype: str) -> float:
    """The dense tensor-core peak of a dtype (NaN outside PEAK_DTYPES); on a profiled device,
    the fastest FLOP rate measured on it (one kernel kind's peak may be below another's)."""
    if g.kernel_peaks:
        return g.fastest_measured()[0]
    peak_dt = PEAK_DTYPES.get(dtype)
    return np.nan if peak_dt is None else float(g.peak_flops_per_s(peak_dt))


def _device_bw(g: GPU) -> float:
    """HBM bandwidth; on a profiled device, the fastest byte rate measured on it."""
    return g.fastest_measured()[1] if g.kernel_peaks else float(g.hbm_bw_bytes_per_s)


def _peak(rows: pd.DataFrame, dtype: pd.Series | np.ndarray | str | None = None) -> np.ndarray:
    """Dense tensor-core peak FLOP/s of each row's GPU at the row's (or the given) dtype; NaN
    for a dtype outside PEAK_DTYPES."""
    d = rows["dtype"] if dtype is None and "dtype" in rows else dtype
    dts = np.broadcast_to(np.asarray("bfloat16" if d is None else d).astype(str), (len(rows),))
    out = np.full(len(rows), np.nan)
    for dt in np.unique(dts):
        at = dts == dt
        out[at] = _gpu_values(rows["gpu"][at], lambda g, dt=dt: _device_peak(g, dt))
    return out


def _hbm(rows: pd.DataFrame) -> np.ndarray:
    return _gpu_values(rows["gpu"], _device_bw)


def kind_rates(g: GPU, kind: str, dtype: str) -> tuple[float, float]:
    """(FLOP/s, bytes/s) bounding a row of `kind` at `dtype` on GPU `g` (NaN: unknown).

    A spec sheet: the dense peak of the dtype and the HBM (collectives: NVLink) bandwidth. A
    profiled device (`kernel_peaks`): the fastest rates that kind reached at that dtype on it,
    never another kind's (bf16 SDPA ran 16x faster than bf16 matmul on an AVX2 CPU); a kind
    or dtype it did not measure gets the fastest rates of any kind (`GPU.fastest_measured`)."""
    if g.kernel_peaks:
        kp = g.kernel_peak("allreduce" if kind in COLLECTIVE_KINDS else kind, dtype)
        top_flops, top_bytes = g.fastest_measured()
        flops = kp.flops_per_s if kp is not None and kp.flops_per_s else top_flops
        nbytes = kp.bytes_per_s if kp is not None and kp.bytes_per_s else top_bytes
        return float(flops), float(nbytes)
    bw = g.nvlink_bw_bytes_per_s if kind in COLLECTIVE_KINDS else g.hbm_bw_bytes_per_s
    # a spec without the link (0: a profiled GPU's NVLink is not measured) bounds nothing
    return _device_peak(g, dtype), (float(bw) if bw and bw > 0 else np.nan)


def _num(rows: pd.DataFrame, col: str, default: float = np.nan) -> np.ndarray:
    if col not in rows:
        return np.full(len(rows), default)
    return pd.to_numeric(rows[col], errors="coerce").to_numpy(float)


# ---------------------------------------------------------------------------- work per kind
@dataclass(frozen=True)
class Work:
    """The least work of each row (NaN: not known) and the dtype whose rates bound it."""

    flops: np.ndarray
    nbytes: np.ndarray
    dtype: np.ndarray  # str per row
    # True where the op moves bytes only (a collective, an element-wise layer op): no peak is
    # needed for its floor. Zero FLOPs elsewhere only mean "not known to be more" (MoE's skewed
    # routing): without the dtype's peak such a row has no floor, as any other.
    copy: np.ndarray | None = None


def _dtypes(rows: pd.DataFrame, default: str = "bfloat16") -> np.ndarray:
    if "dtype" not in rows:
        return np.full(len(rows), default, dtype=object).astype(str)
    return rows["dtype"].astype(str).to_numpy()


def gemm_work_rows(rows: pd.DataFrame) -> Work:
    """y = x[m, k] @ W[n, k]^T: 2mnk FLOPs, x and W read and y written once."""
    from dse.models.gemm import gemm_work

    flops, nbytes = np.full(len(rows), np.nan), np.full(len(rows), np.nan)
    dts = _dtypes(rows)
    for dtype in np.unique(dts):
        at = dts == dtype
        sub = rows[at]
        try:
            f, b_in, b_out = gemm_work(_num(sub, "m"), _num(sub, "n"), _num(sub, "k"), dtype)
        except DSEError:  # a dtype the GEMM work does not know: no floor
            continue
        flops[at], nbytes[at] = f, b_in + b_out
    return Work(flops, nbytes, dts)


def attention_work_rows(kind: str, rows: pd.DataFrame) -> Work:
    """Causal (context) or one-token (generation) attention: Q K^T and P V FLOPs, Q, K, V (the
    cache at its dtype) read and the output written once (`dse.models.attention.attention_work`)."""
    from dse.models.attention import (
        ContextAttentionModel,
        GenerationAttentionModel,
        attention_inputs,
        attention_work,
    )

    cls = ContextAttentionModel if kind == "context_attention" else GenerationAttentionModel
    v = cls()._inputs(attention_inputs(rows))
    flops, nbytes = attention_work(cls.phase_default, v)
    n = len(rows)
    return Work(
        np.broadcast_to(np.asarray(flops, float), (n,)).copy(),
        np.broadcast_to(np.asarray(nbytes, float), (n,)).copy(),
        _dtypes(rows),
    )


def mla_work_rows(kind: str, rows: pd.DataFrame) -> Work:
    """Latent attention (`dse.models.mla.mla_work`): the kernel's FLOPs and bytes; a module
    row (projections included) does at least that."""
    from dse.models.mla import ContextMLAModel, GenerationMLAModel, mla_inputs, mla_work

    cls = ContextMLAModel if kind.startswith("context") else GenerationMLAModel
    flops, nbytes = mla_work(cls.phase_default, cls()._inputs(mla_inputs(rows)))
    n = len(rows)
    return Work(
        np.broadcast_to(np.asarray(flops, float), (n,)).copy(),
        np.broadcast_to(np.asarray(nbytes, float), (n,)).copy(),
        _dtypes(rows),
    )


def moe_work_rows(rows: pd.DataFrame) -> Work:
    """Fused MoE on one rank: the routed token slots' expert GEMM FLOPs, and each expert weight
    the rank's slots touch read once. Lower bounds where the table does not say: two weight
    matrices per expert (non-gated) unless the kernel name says gated; at least one local expert
    touched by skewed routing, min(local experts, slots) by balanced (round-robin) routing."""
    from dse.models.moe import WEIGHT_BYTES

    T, H, inter = _num(rows, "num_tokens"), _num(rows, "hidden_size"), _num(rows, "inter_size")
    k, E = _num(rows, "topk"), _num(rows, "num_experts")
    tp, ep = _num(rows, "moe_tp_size", 1.0), _num(rows, "moe_ep_size", 1.0)
    src = rows.get("kernel_source", pd.Series("", index=rows.index)).astype(str)
    gated = src.str.startswith("moe_torch_flow") & ~src.str.contains("nongated")
    mats = np.where(gated.to_numpy(bool), 3.0, 2.0)
    balanced = rows.get("distribution", pd.Series("", index=rows.index)).astype(str) == "balanced"
    slots = T * k / ep
    e_local = E / ep
    touched = np.where(balanced.to_numpy(bool), np.minimum(e_local, np.ceil(slots)), 1.0)
    # bytes per weight element; 0.5 (4 bits, the smallest format any table holds) when unknown
    wbytes = rows["dtype"].astype(str).map(lambda d: WEIGHT_BYTES.get(d, 0.5)).to_numpy(float)
    flops = 2.0 * np.where(balanced.to_numpy(bool), slots, 0.0) * mats * H * inter / tp
    nbytes = touched * mats * H * inter / tp * wbytes
    return Work(flops, nbytes, _dtypes(rows))


def layer_op_work_rows(rows: pd.DataFrame) -> Work:
    """vidur's layer ops: fp16 elements read and written once (`op_geometry`); its projection
    GEMMs: the GEMM work at their per-GPU (m, n, k). Bounded at the float16 rates."""
    from dse.fitting.layer_ops import _vidur_gemm_shapes
    from dse.models.gemm import gemm_work
    from dse.models.layer_ops import GEMM_OPS, LAYER_OPS, layer_op_inputs, op_geometry

    flops, nbytes = np.full(len(rows), np.nan), np.full(len(rows), np.nan)
    op = rows["op"].astype(str).to_numpy()
    lay = np.isin(op, LAYER_OPS)
    if lay.any():
        t, w = op_geometry(op[lay], layer_op_inputs(rows[lay]))
        io = np.where(op[lay] == "add", 3.0, np.where(op[lay] == "mlp_act", 3.0, 2.0))
        flops[lay], nbytes[lay] = 0.0, t * w * io * 2.0
    gem = np.isin(op, GEMM_OPS)
    if gem.any():
        m, n, k = _vidur_gemm_shapes(rows[gem])
        f, b_in, b_out = gemm_work(m, n, k, "float16")
        flops[gem], nbytes[gem] = f, b_in + b_out
    return Work(flops, nbytes, np.full(len(rows), "float16"), lay)


def collective_work_rows(rows: pd.DataFrame) -> Work:
    """One node's collective of `message_bytes` over g GPUs: whatever the algorithm, at least
    (g - 1) / g of the message leaves (and enters) each GPU. None known for multi-node rows
    (the network is not in the spec sheet)."""
    g = np.maximum(_num(rows, "n_gpus", 2.0), 2.0)
    nbytes = _num(rows, "message_bytes") * (g - 1.0) / g
    nbytes = np.where(_num(rows, "n_nodes", 1.0) > 1, np.nan, nbytes)
    return Work(np.zeros(len(rows)), nbytes, _dtypes(rows), np.ones(len(rows), dtype=bool))


def kernel_work(kind: str, rows: pd.DataFrame) -> Work:
    """The least work of every row of a kernel kind (KERNEL_KINDS)."""
    if kind == "gemm":
        return gemm_work_rows(rows)
    if kind in ("context_attention", "generation_attention"):
        return attention_work_rows(kind, rows)
    if kind == "moe":
        return moe_work_rows(rows)
    if kind == "layer_op":
        return layer_op_work_rows(rows)
    if kind in COLLECTIVE_KINDS:
        return collective_work_rows(rows)
    if kind.endswith(("_mla", "_mla_module")):
        return mla_work_rows(kind, rows)
    raise ValueError(f"no kernel work for kind {kind!r}; kernel kinds: {', '.join(KERNEL_KINDS)}")


def kernel_floor_s(kind: str, rows: pd.DataFrame) -> np.ndarray:
    """roofline(work, rates of the row's GPU for `kind` at the row's dtype) (`kind_rates`); a
    copy (`Work.copy`) needs no FLOP rate."""
    w = kernel_work(kind, rows)
    peak, bw = np.full(len(rows), np.nan), np.full(len(rows), np.nan)
    names = rows["gpu"].astype(str).to_numpy()
    for name in np.unique(names):
        try:
            g = get_gpu(name)
        except Exception:  # ConfigError (unknown GPU): no floor for it
            continue
        for dtype in np.unique(w.dtype[names == name]):
            at = (names == name) & (w.dtype == dtype)
            peak[at], bw[at] = kind_rates(g, kind, str(dtype))
    if w.copy is not None:
        peak = np.where(w.copy, np.inf, peak)
    return roofline_s(w.flops, w.nbytes, peak, bw)


def measured_peaks(tables: Mapping[str, pd.DataFrame], gpu: str) -> tuple[KernelPeak, ...]:
    """The fastest rates each kernel kind reached at each dtype on `gpu`: per kind and dtype,
    the highest FLOP/s and bytes/s over its rows, with the work `kernel_work` counts (what `dse
    profile` writes to gpu.yaml as `kernel_peaks`). Every such row then lies at or above its
    own floor (`kernel_floor_s` reads these rates), whatever the relative speeds of the kinds."""
    out = []
    for kind in KERNEL_KINDS:
        rows = tables.get(kind)
        if rows is None or rows.empty or "latency_s" not in rows or "gpu" not in rows:
            continue
        rows = rows[rows["gpu"].astype(str).to_numpy() == gpu]
        if rows.empty:
            continue
        w = kernel_work(kind, rows)
        y = _num(rows, "latency_s")
        for dtype in np.unique(w.dtype):
            at = (w.dtype == dtype) & np.isfinite(y) & (y > 0)
            rates = [_fastest(part[at] / y[at]) for part in (w.flops, w.nbytes)]
            if rates[0] is not None or rates[1] is not None:
                out.append(KernelPeak(kind, str(dtype), rates[0], rates[1]))
    return tuple(out)


def _fastest(rates: np.ndarray) -> float | None:
    ok = rates[np.isfinite(rates) & (rates > 0)]
    return float(ok.max()) if ok.size else None


# ---------------------------------------------------------------------------- floors per kind
def reduction_floor_s(rows: pd.DataFrame) -> np.ndarray:
    """LLMCompass softmax / layernorm / GELU: each fp16 element read and written once."""
    return _num(rows, "elements") * 4.0 / _hbm(rows)


def _model_sizes(rows: pd.DataFrame) -> pd.DataFrame:
    """Per row of a table with `model`: streamed weight bytes per decode step (the active
    parameters but the embedding table, plus the LM head), matmul parameters for the prefill
    FLOPs, KV bytes per token and the weight dtype's peak name; NaN for an unknown model."""
    from dse.spec import arch as A
    from dse.spec.catalogue import lookup_model

    cache: dict[str, dict[str, float]] = {}
    for name in rows["model"].astype(str).unique():
        try:
            a = lookup_model(name).resolved()
            p = A.param_breakdown(a)
            emb = float(p["embedding"])
            head = float(p["lm_head"]) if float(p["lm_head"]) > 0 else emb
            matmul = float(p["active"]) - emb - float(p["lm_head"]) + head
            wb = float(A.dtype_bytes(a.weight_dtype))
            cache[name] = {
                "stream_bytes": matmul * wb,
                "matmul_params": matmul,
                "kv_bytes_per_token": float(A.kv_bytes_per_token(a)),
                "fp8": float(wb < 2),
            }
        except Exception:  # not in the catalogue: no floor
            cache[name] = {}
    keys = ("stream_bytes", "matmul_params", "kv_bytes_per_token", "fp8")
    return pd.DataFrame(
        {k: rows["model"].astype(str).map(lambda m, k=k: cache[m].get(k, np.nan)) for k in keys},
        index=rows.index,
    )


def _tp(rows: pd.DataFrame) -> np.ndarray:
    for col in ("n_gpus", "tensor_parallel"):
        if col in rows:
            return np.maximum(_num(rows, col, 1.0), 1.0)
    return np.ones(len(rows))


def e2e_floor_s(kind: str, rows: pd.DataFrame) -> np.ndarray:
    """argonne static batches (e2e, e2e_energy: the whole batch; e2e_ttft: the prefill) and
    ml-energy serving rows (TPOT: one decode step)."""
    s = _model_sizes(rows)
    tp = _tp(rows)
    bw = _hbm(rows)
    peak = _peak(rows, np.where(s["fp8"].to_numpy(float) > 0, "fp8", "bfloat16"))
    w_gpu = s["stream_bytes"].to_numpy(float) / tp
    if kind == "serving_energy":  # latency_s is TPOT: one step reads the weights at least
        return w_gpu / bw
    batch = _num(rows, "batch_size", 1.0)
    prompt = _num(rows, "input_tokens")
    prefill = roofline_s(
        2.0 * s["matmul_params"].to_numpy(float) * batch * prompt / tp, w_gpu, peak, bw
    )
    if kind == "e2e_ttft":
        return prefill
    steps = np.maximum(_num(rows, "output_tokens") - 1.0, 0.0)
    # KV read by the decode steps: sum over j = 1..steps of batch * (prompt + j) tokens
    kv_tokens = batch * (steps * prompt + steps * (steps + 1.0) / 2.0)
    kv = kv_tokens * s["kv_bytes_per_token"].to_numpy(float) / tp
    return prefill + (steps * w_gpu + kv) / bw


def floor_s(kind: str, rows: pd.DataFrame) -> np.ndarray:
    """The physical floor in seconds of every row of a table of `kind` (NaN: none known)."""
    if rows.empty:
        return np.zeros(0)
    try:
        return np.asarray(_floor_s(kind, rows), dtype=float)
    except (DSEError, KeyError, ValueError, TypeError):  # a layout the floors do not know
        return np.full(len(rows), np.nan)  # no floor: the rows are kept, as before


def _floor_s(kind: str, rows: pd.DataFrame) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        if kind in KERNEL_KINDS:
            return kernel_floor_s(kind, rows)
        if kind in ("softmax", "layernorm", "gelu"):
            return reduction_floor_s(rows)
        if kind in ("e2e", "e2e_energy", "e2e_ttft", "serving_energy"):
            return e2e_floor_s(kind, rows)
        if kind == "linear_layer":
            from dse.data import linear_layer_floor_s as linear_floor_s

            return linear_floor_s(rows, _hbm(rows))
    return np.full(len(rows), np.nan)


def implausible(kind: str, rows: pd.DataFrame, margin: float = MARGIN) -> np.ndarray:
    """True where a row's measured latency is below its floor x (1 - margin)."""
    if rows.empty or "latency_s" not in rows:
        return np.zeros(len(rows), dtype=bool)
    floor = floor_s(kind, rows)
    y = _num(rows, "latency_s")
    return np.isfinite(floor) & np.isfinite(y) & (y < floor * (1.0 - margin))


# Columns that name a row of each kind in a report.
LABELS: Mapping[str, tuple[str, ...]] = {
    "gemm": ("source", "gpu", "engine", "dtype", "m", "n", "k"),
    "context_attention": (
        "gpu",
        "engine",
        "dtype",
        "batch_size",
        "isl",
        "num_heads",
        "num_kv_heads",
        "head_dim",
    ),
    "generation_attention": (
        "gpu",
        "engine",
        "dtype",
        "batch_size",
        "kv_len",
        "num_heads",
        "num_kv_heads",
        "head_dim",
    ),
    # an MoE call: its series (`dse.models.moe_splits.SERIES`) with the token count after dtype
    "moe": (*MOE_SERIES[:3], "num_tokens", *MOE_SERIES[3:]),
    "layer_op": ("gpu", "model", "op", "num_tokens", "tensor_parallel"),
    "context_mla": ("gpu", "engine", "kv_cache_dtype", "batch_size", "isl", "num_heads"),
    "generation_mla": ("gpu", "engine", "kv_cache_dtype", "batch_size", "kv_len", "num_heads"),
    "linear_layer": (
        "gpu",
        "engine",
        "layer",
        "phase",
        "kernel",
        "batch_size",
        "seq_len",
        "n_heads",
        "n_groups",
        "state_dim",
    ),
    "allreduce": ("source", "gpu", "implementation", "op", "n_gpus", "message_bytes"),
    "e2e": ("gpu", "engine", "model", "n_gpus", "batch_size", "input_tokens", "output_tokens"),
    "serving_energy": ("gpu", "model", "tensor_parallel", "max_batch_size", "task"),
}
LABELS = {
    **LABELS,
    "e2e_energy": LABELS["e2e"],
    "e2e_ttft": LABELS["e2e"],
    "context_mla_module": (*LABELS["context_mla"], "gemm_type"),
    "generation_mla_module": (*LABELS["generation_mla"], "gemm_type"),
    "softmax": ("gpu", "m", "n"),
    "layernorm": ("gpu", "m", "n"),
    "gelu": ("gpu", "m"),
}


def _label(kind: str, row: Mapping[str, Any]) -> str:
    cols = LABELS.get(kind, ("gpu",))
    parts = []
    for c in cols:
        v = row.get(c)
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        parts.append(f"{c}={v}")
    return " ".join(parts)


def screen(
    kind: str, rows: pd.DataFrame, margin: float = MARGIN
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The plausible rows of one table and a report of the others: {"rows": count, "margin",
    "by_gpu_engine": {"gpu/engine": count}, "examples": [up to NAMED labels with measured and
    floor times]}. The report's count is 0 when every row is plausible."""
    bad = implausible(kind, rows, margin)
    report: dict[str, Any] = {"rows": int(bad.sum()), "of_rows": len(rows), "margin": margin}
    if not bad.any():
        return rows, report
    sub = rows[bad]
    floor = floor_s(kind, sub)
    keys = [c for c in ("gpu", "engine") if c in sub]
    if keys:
        counts = sub.groupby(keys, sort=True).size()
        report["by_gpu_engine"] = {
            "/".join(map(str, k if isinstance(k, tuple) else (k,))): int(n)
            for k, n in counts.items()
        }
    ratio = sub["latency_s"].to_numpy(float) / floor
    order = np.argsort(ratio)[:NAMED]
    recs = sub.to_dict("records")
    report["examples"] = [
        f"{_label(kind, recs[i])}: measured {recs[i]['latency_s']:.4g} s, "
        f"floor {floor[i]:.4g} s ({ratio[i]:.2f} x)"
        for i in order
    ]
    return rows[~bad], report


def log_report(kind: str, report: Mapping[str, Any], log: Callable[[str], None]) -> None:
    """One line per table with implausible rows: the count and the names of the worst."""
    if not report.get("rows"):
        return
    by = ", ".join(f"{k} {n}" for k, n in report.get("by_gpu_engine", {}).items())
    log(
        f"{kind}: {report['rows']} of {report['of_rows']} rows implausible (faster than the "
        f"physical floor by more than {100 * report['margin']:.0f}%; not used) [{by}]"
    )
    for ex in report.get("examples", [])[:5]:
        log(f"  {kind} implausible: {ex}")
