"""Tabulated Level-1 power: the artifact's power model evaluated once on a grid of compute and
memory utilisation (`PowerTable`) and read per operator (`op_power_w`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dse.models.artifact import Artifact
from dse.predict._rows import Groups, at_rows
from dse.predict.ops import Op
from dse.spec.hardware import GPU

POWER_GRID = 97  # points per axis of the power table (sqrt-spaced utilisation)
UTIL_MAX = 1.5  # the power model clips utilisations here too


class PowerTable:
    """The artifact's power fraction f(compute_util, memory_util) tabulated on a grid that is
    uniform in sqrt(utilisation) (where the model is curved), read back bilinearly."""

    def __init__(self, model: Any) -> None:
        s = np.linspace(0.0, np.sqrt(UTIL_MAX), POWER_GRID)
        uc, um = np.meshgrid(s**2, s**2, indexing="ij")
        self.step = s[1]
        self.table = model.fraction(uc.ravel(), um.ravel()).reshape(uc.shape)
        # Per grid cell, the bilinear coefficients f = c0 + c1 fy + fx (c2 + c3 fy), float32
        # (a power fraction needs no more; half the memory traffic of the gathers).
        t = self.table.astype(np.float32)
        v00, v01, v10, v11 = t[:-1, :-1], t[:-1, 1:], t[1:, :-1], t[1:, 1:]
        self.cells = tuple(
            np.ascontiguousarray(c).ravel()
            for c in (v00, v01 - v00, v10 - v00, v11 - v10 - v01 + v00)
        )

    def fraction(self, compute_util: np.ndarray, memory_util: np.ndarray) -> np.ndarray:
        last = np.float32(POWER_GRID - 2)  # index of the last cell along each axis
        inv = np.float32(1.0 / self.step)
        # Grid coordinates in float32, in place (every step is one pass over the rows), both
        # axes as the two rows of one array (half the numpy calls: a one-configuration call
        # reads this table for every kind of operator).
        cu, mu = np.asarray(compute_util), np.asarray(memory_util)
        if cu.shape != mu.shape:
            cu, mu = np.broadcast_arrays(cu, mu)
        xy = np.array((cu, mu), dtype=np.float32)
        np.maximum(xy, 0.0, out=xy)  # np.clip, as two ufuncs (its wrapper costs more)
        np.minimum(xy, UTIL_MAX, out=xy)
        np.sqrt(xy, out=xy)
        xy *= inv
        xyf = np.minimum(np.floor(xy), last)
        xy -= xyf  # fractional position inside the cell
        x, y, xf, yf = xy[0], xy[1], xyf[0], xyf[1]
        xf *= last + 1  # flat cell index, exact in float32 (< 2^24)
        xf += yf
        k = xf.astype(np.intp)
        c0, c1, c2, c3 = self.cells
        r = c3.take(k)
        r *= y
        r += c2.take(k)
        r *= x
        c = c1.take(k)
        c *= y
        r += c
        r += c0.take(k)
        return r.astype(np.float64)

    def power_w(self, gpu: GPU, compute_util: np.ndarray, memory_util: np.ndarray) -> np.ndarray:
        span = gpu.board_power_w - gpu.idle_power_w
        return gpu.idle_power_w + span * self.fraction(compute_util, memory_util)


_TABLES: dict[tuple[int, str], PowerTable | None] = {}


def power_table(artifact: Artifact) -> PowerTable | None:
    """The artifact's power model as a table (built once per loaded artifact), or None."""
    key = (id(artifact), artifact.artifact_id)
    if key not in _TABLES:
        names = artifact.names("power")
        _TABLES[key] = PowerTable(artifact.model(names[0])) if names else None
    return _TABLES[key]


def op_power_w(
    artifact: Artifact,
    op: Op,
    gpu: GPU,
    latency_s: np.ndarray,
    peak: Any = None,
    groups: Groups | None = None,
) -> np.ndarray | None:
    """Board power of an operator at the utilisations its FLOPs and bytes imply over latency_s.

    `groups`: rows known to share latency_s; where FLOPs and bytes agree within every group
    too, the table is read once per group (same numbers, a tenth of the work on a sweep)."""
    table = power_table(artifact)
    if table is None:
        return None
    peak = gpu.peak_bf16_flops_per_s if peak is None else peak
    shape = np.shape(latency_s)
    if groups is not None and groups.rows is not None:
        idx = np.unravel_index(groups.rows, shape)
        f, b = at_rows(op.flops, shape, idx), at_rows(op.bytes, shape, idx)
        inv = groups.inverse.reshape(shape)
        if np.array_equal(f[inv], np.broadcast_to(op.flops, shape)) and np.array_equal(
            b[inv], np.broadcast_to(op.bytes, shape)
        ):
            return _power_w(table, gpu, f, b, latency_s[idx], peak)[inv]
    return _power_w(table, gpu, op.flops, op.bytes, latency_s, peak)


def _power_w(
    table: PowerTable, gpu: GPU, flops: Any, nbytes: Any, latency_s: np.ndarray, peak: float
) -> np.ndarray:
    inv_t = 1.0 / np.maximum(latency_s, 1e-12)
    uc = flops * inv_t
    uc *= 1.0 / peak
    um = nbytes * inv_t
    um *= 1.0 / gpu.hbm_bw_bytes_per_s
    return table.power_w(gpu, uc, um)
