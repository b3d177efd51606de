"""The objective function: batched latency and energy prediction for configuration columns.

`predict(configs)` is what `dse predict` and every sweep call. It prices each operator of
`dse.ops.forward_ops` for prefill and for decode, integrates decode over the growing KV cache,
and returns arrays. Until the frozen HYMELL artifacts exist for a GPU, operators are priced by a
roofline with a launch floor (`source == "roofline"` in the provenance).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from dse import configs as C
from dse.hardware import GPU, get_gpu
from dse.ops import Op, forward_ops

LAUNCH_S = 5e-6  # kernel launch floor per operator call (CUDA-graph replay, H100-class GPU)
# Roofline stand-in power: idle plus this fraction of the idle-to-board span at full utilisation.
ROOFLINE_ACTIVE_POWER_FRACTION = 0.75
# Decode is integrated over the KV length with composite Simpson on this many segments.
DECODE_SEGMENTS = 2

OpPricer = Callable[[list[Op], GPU, str], tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]]

OUTPUT_KEYS = (
    "ttft_s",
    "tpot_s",
    "latency_s",
    "prefill_energy_j",
    "decode_energy_j",
    "energy_j",
    "energy_per_output_token_j",
    "avg_power_w",
)


def roofline_pricer(
    ops: list[Op], gpu: GPU, phase: str
) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Time and energy of one forward pass: per op max(FLOPs / peak, bytes / bandwidth) + launch."""
    n = len(np.atleast_1d(ops[0].count))
    time = np.zeros(n)
    energy = np.zeros(n)
    items: dict[str, np.ndarray] = {}
    span = gpu.board_power_w - gpu.idle_power_w
    for op in ops:
        peak = gpu.peak_bf16_flops_per_s
        if op.kind == "gemm":
            peak = np.where(op.dims["dtype"] == "fp8", gpu.peak_flops_per_s("fp8"), peak)
        if op.kind == "allreduce":
            t_data = (
                op.bytes
                * 2
                * (op.dims["n_gpus"] - 1)
                / np.maximum(op.dims["n_gpus"], 1)
                / gpu.nvlink_bw_bytes_per_s
            )
            t_op = t_data + 10e-6
            util = np.zeros(n)
        else:
            t_c = op.flops / peak
            t_m = op.bytes / gpu.hbm_bw_bytes_per_s
            t_roof = np.maximum(t_c, t_m)
            t_op = t_roof + LAUNCH_S
            util = t_roof / t_op
        t = np.where(op.count > 0, t_op * op.count, 0.0)
        p = gpu.idle_power_w + ROOFLINE_ACTIVE_POWER_FRACTION * span * util
        time += t
        energy += t * p
        items[op.name] = items.get(op.name, 0) + t
    return time, energy, items


def _decode_nodes(
    prompt: np.ndarray, output: np.ndarray
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Nodes and weights so that sum_j f(prompt + j), j = 0..output-1, ~= sum_i w_i f(x_i).

    The step sum equals the integral of f over [prompt - 1/2, prompt + output - 1/2] exactly when
    f is linear (midpoint rule), and composite Simpson is exact for every linear or quadratic
    piece of f, so the only error comes from the kinks where an operator changes regime.
    """
    a = prompt - 0.5
    width = output.astype(float)
    m = 2 * DECODE_SEGMENTS
    h = width / m
    nodes, weights = [], []
    for i in range(m + 1):
        c = 1.0 if i in (0, m) else (4.0 if i % 2 else 2.0)
        nodes.append(a + i * h)
        weights.append(c * h / 3.0)
    return nodes, weights


def predict_columns(
    cols: Mapping[str, np.ndarray], n: int, pricer: OpPricer | None = None, gpu: GPU | None = None
) -> dict[str, np.ndarray]:
    """Predict one GPU's configurations (complete columns, all on `gpu`)."""
    pricer = pricer or roofline_pricer
    gpu = gpu or get_gpu(str(cols["gpu"][0]))
    tp = cols["tensor_parallel"].astype(float)
    prefill_ops = forward_ops(cols, "prefill")
    t_pre, e_pre, items_pre = pricer(prefill_ops, gpu, "prefill")
    out_tokens = cols["output_tokens"].astype(float)
    # The first output token comes out of prefill; the remaining output_tokens - 1 are decode steps
    # whose KV length runs from prompt_tokens to prompt_tokens + output_tokens - 2 (+1 for the new token).
    steps = np.maximum(out_tokens - 1.0, 0.0)
    nodes, weights = _decode_nodes(
        cols["prompt_tokens"].astype(float) + 1.0, np.maximum(steps, 1.0)
    )
    t_dec = np.zeros(n)
    e_dec = np.zeros(n)
    items_dec: dict[str, np.ndarray] = {}
    for x, w in zip(nodes, weights, strict=True):
        t, e, items = pricer(forward_ops(cols, "decode", kv_len=x), gpu, "decode")
        t_dec += w * t
        e_dec += w * e
        for k, v in items.items():
            items_dec[k] = items_dec.get(k, 0) + w * v
    has_decode = steps > 0
    t_dec = np.where(has_decode, t_dec, 0.0)
    e_dec = np.where(has_decode, e_dec, 0.0)
    # Energy of one GPU times the tensor-parallel group: every GPU runs its shard of every op.
    e_pre = e_pre * tp
    e_dec = e_dec * tp
    latency = t_pre + t_dec
    energy = e_pre + e_dec
    out = {
        "ttft_s": t_pre,
        "tpot_s": np.where(has_decode, t_dec / np.maximum(steps, 1.0), 0.0),
        "latency_s": latency,
        "prefill_energy_j": e_pre,
        "decode_energy_j": e_dec,
        "energy_j": energy,
        # Per output token of the whole batch: batch_size sequences each produce output_tokens.
        "energy_per_output_token_j": energy / (out_tokens * cols["batch_size"].astype(float)),
        "avg_power_w": energy / np.maximum(latency, 1e-12) / tp,
    }
    for k, v in items_pre.items():
        out[f"breakdown.prefill.{k}_s"] = np.broadcast_to(v, (n,)).astype(float)
    for k, v in items_dec.items():
        out[f"breakdown.decode.{k}_s"] = np.where(has_decode, v, 0.0)
    return out


def predict(configs: pd.DataFrame | Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Predict every configuration (rows may mix GPUs). Returns arrays keyed as OUTPUT_KEYS plus
    `breakdown.<phase>.<op>_s`, `source` and `artifact_id` (provenance) and `out_of_range`."""
    cols, n = C.as_columns(configs)
    result: dict[str, np.ndarray] = {}
    gpus = cols["gpu"]
    for name in np.unique(gpus):
        idx = np.nonzero(gpus == name)[0]
        part = {k: v[idx] for k, v in cols.items()}
        pred = predict_columns(part, len(idx), gpu=get_gpu(str(name)))
        for k, v in pred.items():
            if k not in result:
                result[k] = np.zeros(n)
            result[k][idx] = v
    result["source"] = np.full(n, "roofline", dtype=object)
    result["artifact_id"] = np.full(n, "roofline-v0", dtype=object)
    result["out_of_range"] = np.zeros(n, dtype=bool)
    return result
