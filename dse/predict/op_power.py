"""Level-1 power of an operator: the artifact's power model (`dse.models.power.PowerModel`) at the
utilisations the operator's FLOPs and bytes imply over its time, and at that time (`op_power_w`).

The duration is an input of the power model (back-to-back microsecond kernels never reach
steady-state power) and the pricer passes it, as `dse validate` does: both evaluate
`PowerModel.predict` itself, so what `dse validate` scores is what `dse predict` prices (issue
33). A table of the model over the two utilisations at a fixed 1 ms, read here before, put a
20 us kernel at the power of a 1 ms one: 67 / 45% power MAPE on the H200 GEMM rows (bf16 /
fp8_block) against the 2.6 / 3.6% scored (experiments/one_path_power.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dse.models.artifact import Artifact
from dse.models.power import PowerModel
from dse.predict._rows import Groups, at_rows
from dse.predict.ops import Op
from dse.spec.hardware import GPU

_MODELS: dict[tuple[int, str], PowerModel | None] = {}


def power_model(artifact: Artifact) -> PowerModel | None:
    """The artifact's power model (looked up once per loaded artifact), or None."""
    key = (id(artifact), artifact.artifact_id)
    if key not in _MODELS:
        names = artifact.names("power")
        _MODELS[key] = artifact.model(names[0]) if names else None
    return _MODELS[key]


def op_power_w(
    artifact: Artifact,
    op: Op,
    gpu: GPU,
    latency_s: np.ndarray,
    peak: Any = None,
    groups: Groups | None = None,
) -> np.ndarray | None:
    """Board power of an operator at the utilisations its FLOPs and bytes imply over latency_s,
    for calls of latency_s each.

    `groups`: rows known to share latency_s; where FLOPs and bytes agree within every group
    too, the model runs once per group (same numbers, a tenth of the work on a sweep)."""
    model = power_model(artifact)
    if model is None:
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
            return _power_w(model, gpu, f, b, latency_s[idx], peak)[inv]
    return _power_w(model, gpu, op.flops, op.bytes, latency_s, peak)


def _power_w(
    model: PowerModel, gpu: GPU, flops: Any, nbytes: Any, latency_s: np.ndarray, peak: float
) -> np.ndarray:
    inv_t = 1.0 / np.maximum(latency_s, 1e-12)
    uc = flops * inv_t
    uc *= 1.0 / peak
    um = nbytes * inv_t
    um *= 1.0 / gpu.hbm_bw_bytes_per_s
    return model.predict(uc, um, latency_s, gpu=gpu)["power_w"]
