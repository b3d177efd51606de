"""Per-GPU constants of both presets, and the rule for GPUs that have none.

Paper preset: the published alpha_TC / e_HBM (H100, GH200, A100). Corrected preset: the factors
calibrated by `python -m dse.estimators.calibrate`, stored in `tokens2wh_calibration.json`.

A GPU without its own constants is marked uncalibrated and borrows from a reference GPU: the one
with the nearest board power per peak bf16 FLOP/s (ties: the one calibrated on more rows, then
the nearest HBM bandwidth). Then
- energy per FLOP is scaled by the ratio of (board power / peak bf16 FLOP/s): a chip that
  reaches the same peak at lower power spends proportionally less per FLOP;
- energy per HBM bit is copied: it is set by the memory technology, not by the board;
- static power is scaled by the ratio of board powers; the roofline's efficiencies and
  overheads are copied.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from dse.errors import ArtifactError
from dse.estimators._corrected import Coefficients
from dse.estimators._paper import PUBLISHED
from dse.spec.hardware import GPU, get_gpu

CALIBRATION_FILE = "tokens2wh_calibration.json"
CALIBRATION_FORMAT = 1


@dataclass(frozen=True)
class PaperConstants:
    """alpha_TC (pJ/FLOP) and e_HBM (pJ/bit) for one GPU."""

    alpha_tc_pj: float
    e_hbm_pj: float
    calibrated: bool  # True: published by the paper for this GPU
    source: str


def _w_per_flop(g: GPU) -> float:
    return g.board_power_w / g.peak_bf16_flops_per_s


def reference_gpu(gpu: str, candidates: list[str], rows: dict[str, int] | None = None) -> str:
    """The candidate nearest in board power per peak FLOP/s.

    Ties (within 1%) go to the candidate with more calibration rows, then the nearest HBM
    bandwidth, then the name.
    """
    g = get_gpu(gpu)
    n_rows = rows or {}

    def key(name: str) -> tuple[float, int, float, str]:
        c = get_gpu(name)
        return (
            round(abs(_w_per_flop(c) / _w_per_flop(g) - 1.0), 2),
            -n_rows.get(name, 0),
            abs(c.hbm_bw_bytes_per_s / g.hbm_bw_bytes_per_s - 1.0),
            name,
        )

    return min(candidates, key=key)


def paper_constants(gpu: str) -> PaperConstants:
    """Published constants, or derived ones marked uncalibrated (rule in the module docstring)."""
    g = get_gpu(gpu)
    if g.name in PUBLISHED:
        alpha, e_hbm = PUBLISHED[g.name]
        return PaperConstants(alpha, e_hbm, True, "published (Vartziotis et al. 2026)")
    ref = reference_gpu(g.name, sorted(PUBLISHED))
    alpha, e_hbm = PUBLISHED[ref]
    scale = _w_per_flop(g) / _w_per_flop(get_gpu(ref))
    return PaperConstants(
        alpha * scale,
        e_hbm,
        False,
        f"uncalibrated: derived from {ref} (pJ/FLOP x {scale:.3f} by board power per peak "
        "FLOP/s, pJ/bit copied)",
    )


@cache
def _packaged_calibration() -> dict[str, Any]:
    res = resources.files("dse.estimators").joinpath(CALIBRATION_FILE)
    if not res.is_file():
        raise ArtifactError(
            f"dse/estimators/{CALIBRATION_FILE} is missing; rebuild it with "
            "`python -m dse.estimators.calibrate`"
        )
    return _check(json.loads(res.read_text()), f"dse/estimators/{CALIBRATION_FILE}")


def _check(raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, dict) or raw.get("format_version") != CALIBRATION_FORMAT:
        got = raw.get("format_version") if isinstance(raw, dict) else type(raw).__name__
        raise ArtifactError(f"{where}: format_version must be {CALIBRATION_FORMAT}, got {got!r}")
    gpus = raw.get("gpus")
    if not isinstance(gpus, dict) or not gpus:
        raise ArtifactError(f"{where}: 'gpus' must be a non-empty mapping")
    for name, entry in gpus.items():
        for key in Coefficients.__dataclass_fields__:
            if key in ("calibrated", "source"):
                continue
            v = entry.get(key) if isinstance(entry, dict) else None
            if not isinstance(v, int | float) or v < 0:
                raise ArtifactError(f"{where}: gpus.{name}.{key}: must be a number >= 0, got {v!r}")
    return raw


def load_calibration(path: str | Path | None = None) -> dict[str, Any]:
    """The calibration manifest: the packaged one, or the JSON file at `path`."""
    if path is None:
        return _packaged_calibration()
    p = Path(path)
    try:
        raw = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ArtifactError(f"{p}: cannot read calibration: {exc}") from exc
    return _check(raw, str(p))


def corrected_coefficients(gpu: str, calibration: dict[str, Any] | None = None) -> Coefficients:
    """Calibrated factors of one GPU, or factors derived from the nearest calibrated GPU."""
    cal = load_calibration() if calibration is None else calibration
    g = get_gpu(gpu)
    table = cal["gpus"]
    fields = [f for f in Coefficients.__dataclass_fields__ if f not in ("calibrated", "source")]
    if g.name in table:
        entry = table[g.name]
        return Coefficients(
            **{f: float(entry[f]) for f in fields},
            calibrated=True,
            source=str(entry.get("source", "calibrated")),
        )
    rows = {
        name: sum(v for v in entry.get("rows", {}).values() if isinstance(v, int))
        for name, entry in table.items()
    }
    ref = reference_gpu(g.name, sorted(table), rows)
    r, rg = table[ref], get_gpu(ref)
    flop_scale = _w_per_flop(g) / _w_per_flop(rg)
    power_scale = g.board_power_w / rg.board_power_w
    return Coefficients(
        e_flop_pj=float(r["e_flop_pj"]) * flop_scale,
        e_bit_pj=float(r["e_bit_pj"]),
        p_static_w=float(r["p_static_w"]) * power_scale,
        u_compute=float(r["u_compute"]),
        u_memory=float(r["u_memory"]),
        pass_overhead_s=float(r["pass_overhead_s"]),
        seq_overhead_s=float(r["seq_overhead_s"]),
        allreduce_latency_s=float(r["allreduce_latency_s"]),
        calibrated=False,
        source=f"uncalibrated: derived from {ref} (pJ/FLOP x {flop_scale:.3f}, static power "
        f"x {power_scale:.3f}, pJ/bit and roofline efficiencies copied)",
    )
