"""A GPU draws between its idle power and its board limit: the bound on phase energies and bands.

The operators are held under the board limit where they are priced (`dse.roofline.
board_limited_w`), but the Level-3 power calibration (`dse.models.level3_power`) is fitted on
whole-request average power and returns one factor for the request's energy. Applied to both
phases alike, that factor put prefill (the phase near the board limit) at up to 2.6x the limit
(1,811 W on a 700 W H200; issue 32), while the request's average stayed inside.

The calibrated request energy is what the measurements fix (argonne's whole-request power, at
1024/1024 tokens mostly decode), so it is kept; its split between the phases is the model's,
so that is what gives way: each phase keeps its calibrated share unless its power per GPU would
leave [idle, board], where it is held at the bound and the difference goes to the other phase.
A request whose average power lies inside the bounds (the calibration clips it there) always
has such a split, and one that was inside already does not move. The energy band gets the same
bound over the latency band: the most a request can draw is the board limit over its longest
plausible time, the least idle power over its shortest.

Pure numpy; energies and times per GPU (or the whole group with `n_gpus`), in J and s.
"""

from __future__ import annotations

import numpy as np

from dse.models.base import any_true
from dse.spec.hardware import GPU


def bounded_phases(
    e_pre: np.ndarray, e_dec: np.ndarray, t_pre: np.ndarray, t_dec: np.ndarray, gpu: GPU
) -> tuple[np.ndarray, np.ndarray]:
    """One GPU's (prefill, decode) joules with each phase's power in [idle, board] and their
    sum the request's energy (held in [idle, board] x (t_pre + t_dec) itself: a no-op after
    the calibration, which clips the average power there). Rows already inside are returned
    as they came, bit for bit; a phase of 0 s gets 0 J."""
    idle, board = gpu.idle_power_w, gpu.board_power_w
    total = e_pre + e_dec
    t = t_pre + t_dec
    total = np.minimum(np.maximum(total, idle * t), board * t)
    # prefill's joules such that both phases stay inside: a non-empty interval whenever the
    # total is inside [idle, board] x t (lo <= hi follows from idle <= board)
    lo = np.maximum(idle * t_pre, total - board * t_dec)
    hi = np.minimum(board * t_pre, total - idle * t_dec)
    pre = np.minimum(np.maximum(e_pre, lo), hi)
    moved = (pre != e_pre) | (total != e_pre + e_dec)
    if not any_true(moved):
        return e_pre, e_dec
    return np.where(moved, pre, e_pre), np.where(moved, total - pre, e_dec)


def bounded_energy_band(
    energy_j: np.ndarray,
    lo_j: np.ndarray,
    hi_j: np.ndarray,
    latency_lo_s: np.ndarray,
    latency_hi_s: np.ndarray,
    n_gpus: np.ndarray,
    gpu: GPU,
) -> tuple[np.ndarray, np.ndarray]:
    """The energy band (whole group, J) inside idle x latency_lo .. board x latency_hi per GPU,
    and never narrower than the prediction itself (lo <= energy <= hi)."""
    ceiling = np.maximum(gpu.board_power_w * latency_hi_s * n_gpus, energy_j)
    floor = np.minimum(gpu.idle_power_w * latency_lo_s * n_gpus, energy_j)
    return np.maximum(lo_j, floor), np.minimum(hi_j, ceiling)
