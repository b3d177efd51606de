"""Tokens to watt-hours: analytical accelerator energy of LLM inference, itemised.

    estimate(arch, workload, gpu, preset="corrected" | "paper" | "simplified", time_s=None)

returns arrays (one value per configuration) in joules for the whole static batch, summed over
the GPUs of the tensor-parallel group:

    energy_j = prefill_energy_j + decode_energy_j = sum of breakdown.<component>.<phase>_j

- "paper": Vartziotis et al. (2026) exactly as published (`_paper.py`).
- "simplified": the paper's parameters-only estimator, E_out/token = alpha * 6 * N,
  E_in/token = M(T_in) * E_out/token (compute only, as in its per-token table).
- "corrected": our accounting (`_corrected.py`) with factors calibrated on measured energy
  (`tokens2wh_calibration.json`). Static energy needs a time: by default a roofline; pass
  `time_s` (total seconds of the batch, or {"prefill": s, "decode": s}) from a latency
  predictor to use that instead.

Per-token figures, one definition per name across `dse energy`, `dse predict` and a sweep:
energy per output token = the whole request's energy / (B * T_out), prefill included, as
`dse predict` defines it; the paper's per-phase figures keep their phase in the name:
prefill energy per input token = prefill energy / (B * T_in), decode energy per output token =
decode energy / (B * T_out).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from dse.errors import ConfigError
from dse.estimators import _corrected, _paper
from dse.estimators._constants import (
    corrected_coefficients,
    load_calibration,
    paper_constants,
)
from dse.estimators._corrected import COMPONENTS, PHASES, Coefficients
from dse.spec import arch as A
from dse.spec.hardware import get_gpu
from dse.spec.workload import Workload

PRESETS = ("paper", "simplified", "corrected")
J_PER_WH = 3600.0

__all__ = [
    "COMPONENTS",
    "PHASES",
    "PRESETS",
    "Coefficients",
    "corrected_coefficients",
    "estimate",
    "load_calibration",
    "paper_constants",
    "simplified_per_token",
    "workload_columns",
]


def workload_columns(workload: Workload | Mapping[str, Any]) -> dict[str, np.ndarray]:
    """batch_size, prompt_tokens, output_tokens, tensor_parallel as float arrays, checked > 0."""
    if isinstance(workload, Workload):
        workload = {
            "batch_size": workload.batch_size,
            "prompt_tokens": workload.prompt_tokens,
            "output_tokens": workload.output_tokens,
            "tensor_parallel": workload.tensor_parallel,
        }
    out: dict[str, np.ndarray] = {}
    for name in ("batch_size", "prompt_tokens", "output_tokens", "tensor_parallel"):
        raw = workload.get(name, 1 if name == "tensor_parallel" else None)
        if raw is None:
            raise ConfigError(f"workload.{name}: required, got nothing")
        try:
            v = np.asarray(raw, dtype=float)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"workload.{name}: must be a number, got {raw!r}") from exc
        bad = ~np.isfinite(v) | (v < 1)
        if np.any(bad):
            first = float(v[bad][0]) if v.ndim else float(v)
            raise ConfigError(f"workload.{name}: must be >= 1, got {first:g}")
        out[name] = v
    return out


def simplified_per_token(n_params: Any, prompt_tokens: Any, gpu: str) -> dict[str, Any]:
    """The paper's parameters-only per-token energies (J) for N parameters on one GPU."""
    const = paper_constants(gpu)
    return _paper.simplified_per_token(n_params, prompt_tokens, const.alpha_tc_pj)


def _phase_times(time_s: Any, roofline: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Caller's time, split by phase; a total is shared in the roofline's prefill:decode ratio."""
    if time_s is None:
        return roofline
    if isinstance(time_s, Mapping):
        missing = [p for p in PHASES if p not in time_s]
        if missing:
            raise ConfigError(f"time_s: a mapping needs keys {PHASES}, missing {missing[0]!r}")
        out = {p: np.asarray(time_s[p], dtype=float) for p in PHASES}
    else:
        total = np.asarray(time_s, dtype=float)
        roof_total = roofline["prefill"] + roofline["decode"]
        share = roofline["prefill"] / np.where(roof_total > 0, roof_total, 1.0)
        out = {"prefill": total * share, "decode": total * (1.0 - share)}
    for p, v in out.items():
        if np.any(~np.isfinite(v) | (v < 0)):
            raise ConfigError(f"time_s: {p} time must be finite and >= 0, got {v!r}")
    return out


def _assemble(
    items: dict[tuple[str, str], Any], cols: dict[str, np.ndarray], shape: tuple[int, ...]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for comp in COMPONENTS:
        total = np.zeros(shape)
        for ph in PHASES:
            v = np.broadcast_to(np.asarray(items.get((comp, ph), 0.0), dtype=float), shape)
            out[f"breakdown.{comp}.{ph}_j"] = v.copy()
            total = total + v
        out[f"breakdown.{comp}.total_j"] = total
    for ph in PHASES:
        out[f"{ph}_energy_j"] = sum(out[f"breakdown.{c}.{ph}_j"] for c in COMPONENTS)
    b, tp = cols["batch_size"], cols["tensor_parallel"]
    out["energy_j"] = out["prefill_energy_j"] + out["decode_energy_j"]
    out["energy_wh"] = out["energy_j"] / J_PER_WH
    out["energy_per_request_j"] = out["energy_j"] / b
    out["energy_per_gpu_j"] = out["energy_j"] / tp
    out["energy_per_output_token_j"] = out["energy_j"] / (b * cols["output_tokens"])
    out["prefill_energy_per_input_token_j"] = out["prefill_energy_j"] / (b * cols["prompt_tokens"])
    out["decode_energy_per_output_token_j"] = out["decode_energy_j"] / (b * cols["output_tokens"])
    return out


def estimate(
    arch: A.Architecture,
    workload: Workload | Mapping[str, Any],
    gpu: str,
    preset: str = "corrected",
    time_s: Any = None,
    calibration: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Energy of a static batch, itemised; every value an array broadcast over configurations.

    `arch` may be a batch (`Architecture.from_columns`); `workload` a Workload or a mapping of
    columns batch_size, prompt_tokens, output_tokens, tensor_parallel (default 1). Keys:
    energy_j, prefill_energy_j, decode_energy_j, energy_wh, energy_per_request_j,
    energy_per_gpu_j (mean over the group's GPUs), energy_per_output_token_j (the whole
    request's energy per output token, as `dse predict`'s), prefill_energy_per_input_token_j,
    decode_energy_per_output_token_j, breakdown.<component>.<prefill|decode|total>_j, calibrated
    (False where the GPU's constants were derived from another GPU) and, for "corrected",
    prefill_time_s / decode_time_s / time_s (the time the static term used).
    """
    if preset not in PRESETS:
        raise ConfigError(f"preset: must be one of {', '.join(PRESETS)}, got {preset!r}")
    g = get_gpu(gpu)
    cols = workload_columns(workload)
    a = arch.resolved()
    b, s, o, tp = (
        cols[k] for k in ("batch_size", "prompt_tokens", "output_tokens", "tensor_parallel")
    )
    shape = np.broadcast(b, s, o, tp, np.asarray(a.d_model), np.asarray(a.n_layers)).shape

    if preset in ("paper", "simplified"):
        const = paper_constants(g.name)
        n_params = np.asarray(A.total_params(a), dtype=float)  # the paper: MoE at total size
        if preset == "paper":
            per_req = _paper.paper_items(
                n_params, a.n_layers, a.d_model, s, o, const.alpha_tc_pj, const.e_hbm_pj
            )
        else:
            tok = _paper.simplified_per_token(n_params, s, const.alpha_tc_pj)
            per_req = {
                ("compute", "prefill"): tok["prefill_energy_per_input_token_j"] * s,
                ("compute", "decode"): tok["decode_energy_per_output_token_j"] * o,
            }
        items = {key: b * v for key, v in per_req.items()}
        out = _assemble(items, cols, shape)
        out["calibrated"] = np.full(shape, const.calibrated)
        return out

    cal = load_calibration() if calibration is None else dict(calibration)
    coef = corrected_coefficients(g.name, cal)
    counts = _corrected.counts(a, b, s, o, tp)
    roof = _corrected.roofline_time_s(
        counts,
        b,
        o,
        tp,
        g.peak_bf16_flops_per_s,
        g.hbm_bw_bytes_per_s,
        g.nvlink_bw_bytes_per_s,
        coef,
    )
    phase_t = _phase_times(time_s, roof)
    # fp8 / nvfp4 weights run their GEMMs on fp8 / FP4 tensor cores: a FLOP at bf16_peak / peak
    # of bf16's energy (int8 / int4 weights are dequantised to bf16: no change)
    wd = np.asarray(a.weight_dtype)
    scale: Any = 1.0
    for dt in ("fp8", "nvfp4"):
        if np.any(wd == dt):
            scale = np.where(wd == dt, g.peak_bf16_flops_per_s / g.peak_flops_per_s(dt), scale)
    items = _corrected.energy_items(counts, phase_t, tp, coef, scale)
    out = _assemble(items, cols, shape)
    for ph in PHASES:
        out[f"{ph}_time_s"] = np.broadcast_to(phase_t[ph], shape).astype(float)
    out["time_s"] = out["prefill_time_s"] + out["decode_time_s"]
    out["calibrated"] = np.full(shape, coef.calibrated)
    return out
