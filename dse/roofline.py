"""The roofline, written once: the time of work on a GPU at its peak rates, the floors of a
kernel launch and of an NCCL all-reduce, and the stand-in power of a roofline-priced kernel.

Every model and baseline that needs `max(flops / peak, bytes / bandwidth)` calls `roofline_s`:
the predictor's fallback for operators no fitted model covers (`dse.predict.pricing`), the
layer-op adapter's uncovered families, the GEMM sibling-chip transfer, and the fit drivers'
plain-roofline CV baselines. numpy only; the GPU numbers come from `dse.spec.hardware.GPU`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from dse.spec.hardware import GPU

LAUNCH_S = 5e-6  # roofline launch floor per kernel call (CUDA-graph replay, H100-class GPU)
ALLREDUCE_FLOOR_S = 10e-6  # roofline latency floor of one NCCL all-reduce inside a node
# Roofline stand-in power: idle plus this fraction of the idle-to-board span at full utilisation.
ACTIVE_POWER_FRACTION = 0.75


def roofline_s(flops: Any, nbytes: Any, peak_flops_per_s: Any, bw_bytes_per_s: Any) -> Any:
    """Seconds of `flops` and `nbytes` at the peak rates: the slower of compute and memory
    (no launch floor; add `LAUNCH_S` per kernel call where one applies)."""
    return np.maximum(flops / peak_flops_per_s, nbytes / bw_bytes_per_s)


def ring_allreduce_s(nbytes: Any, n_gpus: Any, nvlink_bw_bytes_per_s: float) -> np.ndarray:
    """Seconds of one ring all-reduce of `nbytes` over `n_gpus` GPUs: 2 (g - 1) / g of the
    message crosses each GPU's NVLink, plus the all-reduce floor."""
    g = np.asarray(n_gpus, dtype=float)
    return nbytes * 2 * (g - 1) / np.maximum(g, 1) / nvlink_bw_bytes_per_s + ALLREDUCE_FLOOR_S


def standin_power_w(gpu: GPU, util: np.ndarray) -> np.ndarray:
    """Stand-in board power at a utilisation: idle + fraction of the idle-to-board span."""
    span = gpu.board_power_w - gpu.idle_power_w
    return gpu.idle_power_w + ACTIVE_POWER_FRACTION * span * util


def board_limited_w(gpu: GPU, power_w: Any) -> np.ndarray:
    """Watts of a running kernel held under the GPU's board limit: its power management holds
    a kernel's mean there. The fitted power models are not bounded by themselves (H200 MoE and
    GEMM predictions of the golden set came out at up to 1.61x / 1.29x the 700 W limit, issue
    19). Predictions below the idle draw are left as they are: Level 3's power calibration was
    fitted on them (raising them to idle moved A100 energies by up to +75% in the golden set)."""
    return np.minimum(power_w, gpu.board_power_w)
