"""Continuous-batching serving: a static-batch prediction plus the engine's host time per step.

A serving engine with continuous batching (vLLM 0.4.2 in the ml-energy v2 runs) spends much of
each decode step on the host (scheduling, input preparation, sampling, the broadcast to the
tensor-parallel workers), with the GPU waiting. Priced per GPU, for a running batch of
`batch` sequences on `tp` GPUs (docs/accuracy.md "Serving energy is right for the wrong
reasons"):

    host time per decode step  h = step_s + per_sequence_s * batch + per_extra_gpu_s * (tp - 1)
    wall time                  T = T_gpu + steps * h          (steps = output_tokens - 1)
    energy per GPU             E = E_gpu + P_wait * steps * h,  P_wait = idle_w + wait_above_idle_w

so the power is idle + (GPU-busy power - idle) x duty (duty = T_gpu / T) plus the waiting
GPU's draw above idle. T_gpu, E_gpu are the static prediction of `batch` sequences (Levels
1-3). Four constants per GPU, fitted by `dse.fitting.serving` with whole models held out;
pure: the constants come in as a `HostConstants`, read from JSON at the edge
(`dse.predict.serving`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from dse.models._base import RangeMiss


@dataclass(frozen=True)
class HostConstants:
    """One GPU's fitted host terms of one engine version, and the range they were fitted on.

    `batch_range`: the smallest and largest average running batch of the fit's rows;
    `tensor_parallel`: the TP degrees it saw; `gpu`: the GPU the rows ran on."""

    engine: str
    engine_version: str
    gpu: str
    step_s: float  # per decode step, whatever the batch
    per_sequence_s: float  # per running sequence per decode step
    per_extra_gpu_s: float  # per tensor-parallel GPU beyond the first, per decode step
    wait_above_idle_w: float  # the waiting GPU's draw above the spec-sheet idle power
    batch_range: tuple[float, float]
    tensor_parallel: tuple[int, ...]

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], engine: str, version: str, gpu: str) -> HostConstants:
        """From one GPU's entry of the shipped JSON (`dse/predict/serving_constants.json`)."""
        lo, hi = d["batch_size_range"]
        return cls(
            engine=engine,
            engine_version=version,
            gpu=gpu,
            step_s=float(d["step_s"]),
            per_sequence_s=float(d["per_sequence_s"]),
            per_extra_gpu_s=float(d["per_extra_gpu_s"]),
            wait_above_idle_w=float(d["wait_above_idle_w"]),
            batch_range=(float(lo), float(hi)),
            tensor_parallel=tuple(int(t) for t in d["tensor_parallel"]),
        )


def host_step_s(c: HostConstants, batch: np.ndarray, tp: np.ndarray) -> np.ndarray:
    """Host time of one decode step (s), shape of `batch`."""
    b = np.asarray(batch, dtype=float)
    extra = np.asarray(tp, dtype=float) - 1.0
    return c.step_s + c.per_sequence_s * b + c.per_extra_gpu_s * extra


def continuous(
    static: Mapping[str, np.ndarray],
    batch: np.ndarray,
    tp: np.ndarray,
    output_tokens: np.ndarray,
    idle_w: float,
    c: HostConstants,
) -> dict[str, np.ndarray]:
    """The static prediction's columns (`dse.predict.request.OUTPUT_KEYS` and the bands) as a
    continuous-batching run prices them, and `breakdown.decode.host_s` / `blocks.decode.host_s`
    (the host time of all decode steps). Bands keep their relative width."""
    b = np.asarray(batch, dtype=float)
    tpf = np.asarray(tp, dtype=float)
    steps = np.maximum(np.asarray(output_tokens, dtype=float) - 1.0, 0.0)
    h = host_step_s(c, b, tpf)
    host = steps * h  # s, every decode step of the batch
    wait_w = idle_w + c.wait_above_idle_w
    latency = static["latency_s"] + host
    decode_energy = static["decode_energy_j"] + tpf * wait_w * host  # every GPU waits
    energy = static["prefill_energy_j"] + decode_energy
    tpot = np.where(steps > 0, static["tpot_s"] + h, static["tpot_s"])
    lat_ratio = latency / np.maximum(static["latency_s"], 1e-30)
    tpot_ratio = tpot / np.where(static["tpot_s"] > 0, static["tpot_s"], 1.0)
    e_ratio = energy / np.maximum(static["energy_j"], 1e-30)
    out = {
        "tpot_s": tpot,
        "latency_s": latency,
        "decode_energy_j": decode_energy,
        "energy_j": energy,
        "energy_per_output_token_j": energy / (np.asarray(output_tokens, dtype=float) * b),
        "avg_power_w": energy / tpf / np.maximum(latency, 1e-12),
        "tpot_lo_s": static["tpot_lo_s"] * tpot_ratio,
        "tpot_hi_s": static["tpot_hi_s"] * tpot_ratio,
        "latency_lo_s": static["latency_lo_s"] * lat_ratio,
        "latency_hi_s": static["latency_hi_s"] * lat_ratio,
        "energy_lo_j": static["energy_lo_j"] * e_ratio,
        "energy_hi_j": static["energy_hi_j"] * e_ratio,
        "breakdown.decode.host_s": host,
        "blocks.decode.host_s": host,
    }
    return out


def range_misses(
    c: HostConstants, batch: np.ndarray, tp: np.ndarray, engine: np.ndarray, gpu: str
) -> tuple[dict[str, RangeMiss], dict[str, np.ndarray]]:
    """Where the host constants do not apply as fitted: the batch outside the fitted range
    (log distance, as every size), a TP degree, engine or GPU the fit did not see."""
    b = np.asarray(batch, dtype=float)
    lo, hi = c.batch_range
    excess = np.where(b > hi, np.log(b / hi), np.where(b < lo, np.log(b / lo), 0.0))
    bound = np.where(b > hi, hi, lo)
    misses = {"serving: batch_size": RangeMiss(excess, b, bound)}
    flags = {
        "serving: tensor_parallel not fitted": ~np.isin(np.asarray(tp), c.tensor_parallel),
        f"serving: engine not fitted ({c.engine} {c.engine_version})": np.asarray(engine)
        != c.engine,
    }
    if gpu != c.gpu:
        flags[f"serving: host constants of {c.gpu}"] = np.ones(len(b), dtype=bool)
    return misses, flags
