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

A row below `floor x (1 - MARGIN)` is implausible: `dse fit` does not fit it and `dse validate`
does not score it; both report such rows per table, counted and named (`screen`).

    kept, report = screen("e2e", rows)
    report["rows"], report["examples"]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from dse.errors import DSEError
from dse.models._moe_splits import SERIES as MOE_SERIES
from dse.roofline import roofline_s
from dse.spec.hardware import get_gpu

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


def _peak(rows: pd.DataFrame, dtype: pd.Series | np.ndarray | str | None = None) -> np.ndarray:
    """Dense tensor-core peak FLOP/s of each row's GPU at the row's (or the given) dtype; NaN
    for a dtype outside PEAK_DTYPES."""
    d = rows["dtype"] if dtype is None and "dtype" in rows else dtype
    dts = np.broadcast_to(np.asarray("bfloat16" if d is None else d).astype(str), (len(rows),))
    out = np.full(len(rows), np.nan)
    for dt in np.unique(dts):
        at = dts == dt
        peak_dt = PEAK_DTYPES.get(dt)
        if peak_dt is not None:
            out[at] = _gpu_values(rows["gpu"][at], lambda g, p=peak_dt: g.peak_flops_per_s(p))
    return out


def _hbm(rows: pd.DataFrame) -> np.ndarray:
    return _gpu_values(rows["gpu"], lambda g: g.hbm_bw_bytes_per_s)


def _num(rows: pd.DataFrame, col: str, default: float = np.nan) -> np.ndarray:
    if col not in rows:
        return np.full(len(rows), default)
    return pd.to_numeric(rows[col], errors="coerce").to_numpy(float)


# ---------------------------------------------------------------------------- floors per kind
def gemm_floor_s(rows: pd.DataFrame) -> np.ndarray:
    """y = x[m, k] @ W[n, k]^T: 2mnk FLOPs, x and W read and y written once."""
    from dse.models.gemm import gemm_work

    out = np.full(len(rows), np.nan)
    dts = rows["dtype"].astype(str).to_numpy()
    for dtype in np.unique(dts):
        if dtype not in PEAK_DTYPES:
            continue  # no peak known: no floor
        at = dts == dtype
        sub = rows[at]
        try:
            flops, b_in, b_out = gemm_work(_num(sub, "m"), _num(sub, "n"), _num(sub, "k"), dtype)
        except DSEError:  # a dtype the GEMM work does not know: no floor
            continue
        out[at] = roofline_s(flops, b_in + b_out, _peak(sub), _hbm(sub))
    return out


def attention_floor_s(kind: str, rows: pd.DataFrame) -> np.ndarray:
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
    return roofline_s(flops, nbytes, _peak(rows), _hbm(rows))


def moe_floor_s(rows: pd.DataFrame) -> np.ndarray:
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
    return roofline_s(flops, nbytes, _peak(rows), _hbm(rows))


def layer_op_floor_s(rows: pd.DataFrame) -> np.ndarray:
    """vidur's layer ops: fp16 elements read and written once (`op_geometry`); its projection
    GEMMs: the GEMM floor at their per-GPU (m, n, k)."""
    from dse.fitting.layer_ops import _vidur_gemm_shapes
    from dse.models.gemm import gemm_work
    from dse.models.layer_ops import GEMM_OPS, LAYER_OPS, layer_op_inputs, op_geometry

    out = np.full(len(rows), np.nan)
    op = rows["op"].astype(str).to_numpy()
    lay = np.isin(op, LAYER_OPS)
    if lay.any():
        sub = rows[lay]
        t, w = op_geometry(op[lay], layer_op_inputs(sub))
        io = np.where(op[lay] == "add", 3.0, np.where(op[lay] == "mlp_act", 3.0, 2.0))
        out[lay] = t * w * io * 2.0 / _hbm(sub)
    gem = np.isin(op, GEMM_OPS)
    if gem.any():
        sub = rows[gem]
        m, n, k = _vidur_gemm_shapes(sub)
        flops, b_in, b_out = gemm_work(m, n, k, "float16")
        out[gem] = roofline_s(flops, b_in + b_out, _peak(sub, "float16"), _hbm(sub))
    return out


def collective_floor_s(rows: pd.DataFrame) -> np.ndarray:
    """One node's collective of `message_bytes` over g GPUs: whatever the algorithm, at least
    (g - 1) / g of the message leaves (and enters) each GPU, at NVLink bandwidth per direction.
    No floor for multi-node rows (the network is not in the spec sheet)."""
    g = np.maximum(_num(rows, "n_gpus", 2.0), 2.0)
    nbytes = _num(rows, "message_bytes") * (g - 1.0) / g
    out = nbytes / _gpu_values(rows["gpu"], lambda s: s.nvlink_bw_bytes_per_s)
    return np.where(_num(rows, "n_nodes", 1.0) > 1, np.nan, out)


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
        if kind == "gemm":
            return gemm_floor_s(rows)
        if kind in ("context_attention", "generation_attention"):
            return attention_floor_s(kind, rows)
        if kind == "moe":
            return moe_floor_s(rows)
        if kind == "layer_op":
            return layer_op_floor_s(rows)
        if kind in ("allreduce", "collective"):
            return collective_floor_s(rows)
        if kind in ("softmax", "layernorm", "gelu"):
            return reduction_floor_s(rows)
        if kind in ("e2e", "e2e_energy", "e2e_ttft", "serving_energy"):
            return e2e_floor_s(kind, rows)
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
    # an MoE call: its series (`dse.models._moe_splits.SERIES`) with the token count after dtype
    "moe": (*MOE_SERIES[:3], "num_tokens", *MOE_SERIES[3:]),
    "layer_op": ("gpu", "model", "op", "num_tokens", "tensor_parallel"),
    "allreduce": ("source", "gpu", "implementation", "op", "n_gpus", "message_bytes"),
    "e2e": ("gpu", "engine", "model", "n_gpus", "batch_size", "input_tokens", "output_tokens"),
    "serving_energy": ("gpu", "model", "tensor_parallel", "max_batch_size", "task"),
}
LABELS = {
    **LABELS,
    "e2e_energy": LABELS["e2e"],
    "e2e_ttft": LABELS["e2e"],
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
