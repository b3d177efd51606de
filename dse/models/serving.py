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
1-3), times the version's `gpu_time_scale` s (time and energy alike, so at the static
prediction's power): 1 for vLLM 0.4.2, whose kernels are the static prediction's; current
vLLM (0.11.1, ml-energy v3) runs the same batch faster than Level 3 learned from 2024 runs,
and its per-step host time is mostly hidden behind the GPU. Constants per engine version and
GPU, fitted by `dse.fitting.serving` with whole models held out; pure: the constants come in
as a `HostConstants`, read from JSON at the edge (`dse.predict.serving`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from dse.models.base import RangeMiss


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
    # 5-95% quantiles of log(measured / predicted) of whole held-out models ("latency",
    # "energy"): the band's width where it is wider than the static prediction's
    band_log: Mapping[str, tuple[float, float]] | None = None
    # the static prediction's GPU time and energy x this (1: the static prediction as is)
    gpu_time_scale: float = 1.0

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
            band_log=None
            if d.get("band_log") is None
            else {k: (float(v[0]), float(v[1])) for k, v in d["band_log"].items()},
            gpu_time_scale=float(d.get("gpu_time_scale", 1.0)),
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
        (the host time of all decode steps). Bands keep the static prediction's relative width, widened
    to `c.band_log` (the host model's held-out 5-95% band, TPOT taking the latency's) where that is
    wider."""
    b = np.asarray(batch, dtype=float)
    tpf = np.asarray(tp, dtype=float)
    steps = np.maximum(np.asarray(output_tokens, dtype=float) - 1.0, 0.0)
    h = host_step_s(c, b, tpf)
    host = steps * h  # s, every decode step of the batch
    wait_w = idle_w + c.wait_above_idle_w
    s = c.gpu_time_scale  # the GPU part at the static prediction's power
    latency = s * static["latency_s"] + host
    decode_energy = s * static["decode_energy_j"] + tpf * wait_w * host  # every GPU waits
    prefill_energy = s * static["prefill_energy_j"]
    energy = prefill_energy + decode_energy
    tpot = np.where(steps > 0, s * static["tpot_s"] + h, s * static["tpot_s"])
    ttft = s * static["ttft_s"]
    band = c.band_log or {}

    def ratios(lo: np.ndarray, hi: np.ndarray, mid: np.ndarray, key: str) -> tuple[Any, Any]:
        # the static band's relative width, widened to the host model's own held-out band
        safe = np.where(mid > 0, mid, 1.0)
        r_lo, r_hi = lo / safe, hi / safe
        if key in band:
            r_lo = np.minimum(r_lo, np.exp(band[key][0]))
            r_hi = np.maximum(r_hi, np.exp(band[key][1]))
        return r_lo, r_hi

    lat_lo, lat_hi = ratios(
        static["latency_lo_s"], static["latency_hi_s"], static["latency_s"], "latency"
    )
    tpot_lo, tpot_hi = ratios(static["tpot_lo_s"], static["tpot_hi_s"], static["tpot_s"], "latency")
    e_lo, e_hi = ratios(static["energy_lo_j"], static["energy_hi_j"], static["energy_j"], "energy")
    out = {
        "ttft_s": ttft,  # the prefill has no host step: its band scales with it
        "ttft_lo_s": s * static["ttft_lo_s"],
        "ttft_hi_s": s * static["ttft_hi_s"],
        "tpot_s": tpot,
        "latency_s": latency,
        "prefill_energy_j": prefill_energy,
        "decode_energy_j": decode_energy,
        "energy_j": energy,
        "energy_per_output_token_j": energy / (np.asarray(output_tokens, dtype=float) * b),
        "avg_power_w": energy / tpf / np.maximum(latency, 1e-12),
        "tpot_lo_s": tpot * tpot_lo,
        "tpot_hi_s": tpot * tpot_hi,
        "latency_lo_s": latency * lat_lo,
        "latency_hi_s": latency * lat_hi,
        "energy_lo_j": energy * e_lo,
        "energy_hi_j": energy * e_hi,
        "breakdown.decode.host_s": host,
        "blocks.decode.host_s": host,
    }
    return out


def range_misses(
    c: HostConstants,
    batch: np.ndarray,
    tp: np.ndarray,
    engine: np.ndarray,
    gpu: str,
    version: np.ndarray | None = None,
) -> tuple[dict[str, RangeMiss], dict[str, np.ndarray]]:
    """Where the host constants do not apply as fitted: the batch outside the fitted range
    (log distance, as every size), a TP degree, engine, engine version (`version`, the one
    asked; None: not judged) or GPU the fit did not see."""
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
    if version is not None:
        name = f"serving: engine_version not fitted (constants of {c.engine} {c.engine_version})"
        flags[name] = np.asarray(version) != c.engine_version
    if gpu != c.gpu:
        flags[f"serving: host constants of {c.gpu}"] = np.ones(len(b), dtype=bool)
    return misses, flags
