"""Level-1 power of an operator: the artifact's power model (`dse.models.power.PowerModel`) at the
utilisations the operator's FLOPs and bytes imply over its time, and at that time (`op_power_w`).

The duration is an input of the power model (back-to-back microsecond kernels never reach
steady-state power) and the pricer passes it, as `dse validate` does: both evaluate
`PowerModel.predict` itself, so what `dse validate` scores is what `dse predict` prices (issue
33). A table of the model over the two utilisations at a fixed 1 ms, read here before, put a
20 us kernel at the power of a 1 ms one: 67 / 45% power MAPE on the H200 GEMM rows (bf16 /
fp8_block) against the 2.6 / 3.6% scored (experiments/one_path_power.py).

A few configurations' operators (a one-configuration `dse predict`, a front evaluated again)
call the model once per operator kind and phase (~5 calls of 1-2 rows, ~50 us each, almost
all of it per call): inside `batched()`, `op_power_w` returns an array that `resolve` fills,
all the calls of a model and GPU in one evaluation (the same rows, the same numbers).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dse.models.artifact import Artifact
from dse.models.base import filled
from dse.models.power import PowerModel
from dse.predict._rows import Groups, at_rows, shape_of
from dse.predict.ops import Op
from dse.roofline import board_limited_w
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
    batch = _STATE.batch
    if batch is not None and batch.few:  # evaluated with the batch's other calls in `resolve`
        return batch.add(model, gpu, op.flops, op.bytes, latency_s, peak)
    shape = np.shape(latency_s)
    if groups is not None and groups.rows is not None:
        idx = np.unravel_index(groups.rows, shape)
        f, b = at_rows(op.flops, shape, idx), at_rows(op.bytes, shape, idx)
        inv = groups.inverse.reshape(shape)
        if np.array_equal(f[inv], np.broadcast_to(op.flops, shape)) and np.array_equal(
            b[inv], np.broadcast_to(op.bytes, shape)
        ):
            if batch is not None and len(groups.rows) <= DEFER_ROWS:
                # evaluated with the batch's other calls in `resolve`, spread back there
                return batch.add(model, gpu, f, b, latency_s[idx], peak, inv)
            return _power_w(model, gpu, f, b, latency_s[idx], peak)[inv]
    if batch is not None and np.size(latency_s) <= DEFER_ROWS:
        return batch.add(model, gpu, op.flops, op.bytes, latency_s, peak)
    return _power_w(model, gpu, op.flops, op.bytes, latency_s, peak)


# Inside `batched(few=False)` (a bulk batch's shape groups), a call of at most this many rows
# is deferred to `resolve`, a larger one evaluated at once: the ~50 us a call of the model
# costs matters for the layer operators' ~50-120 distinct rows, not for 10^4 rows, whose
# inputs `resolve` would only copy again.
DEFER_ROWS = 4096


def _power_w(
    model: PowerModel, gpu: GPU, flops: Any, nbytes: Any, latency_s: np.ndarray, peak: float
) -> np.ndarray:
    return model.predict(*_utils(gpu, flops, nbytes, latency_s, peak), latency_s, gpu=gpu)[
        "power_w"
    ]


def _utils(
    gpu: GPU, flops: Any, nbytes: Any, latency_s: np.ndarray, peak: Any
) -> tuple[np.ndarray, np.ndarray]:
    """(compute, memory) utilisation of calls of latency_s seconds."""
    inv_t = 1.0 / np.maximum(latency_s, 1e-12)
    uc = flops * inv_t
    uc *= 1.0 / peak
    um = nbytes * inv_t
    um *= 1.0 / gpu.hbm_bw_bytes_per_s
    return uc, um


@dataclass
class _Pending:
    """One `op_power_w` call inside `batched()`: its inputs and the array `resolve` fills."""

    model: PowerModel
    gpu: GPU
    uc: np.ndarray
    um: np.ndarray
    latency_s: np.ndarray
    out: np.ndarray  # NaN until resolved: a value read too early shows as NaN, never as 0 W
    limit: bool = False  # held under the board limit when resolved (`board_limited`)
    inverse: np.ndarray | None = None  # out's rows' rows of (uc, um, latency_s); None: the same


@dataclass
class _Batch:
    items: list[_Pending] = field(default_factory=list)
    by_buffer: dict[int, _Pending] = field(default_factory=dict)  # id(out) -> its call
    few: bool = True  # a few configurations: every call deferred (else: `DEFER_ROWS`)

    def add(
        self,
        model: PowerModel,
        gpu: GPU,
        flops: Any,
        nbytes: Any,
        latency_s: Any,
        peak: Any,
        inverse: np.ndarray | None = None,
    ) -> np.ndarray:
        """The array `resolve` fills with the power of calls of latency_s; `inverse` (the
        result's shape): the rows of these 1-D inputs each element of the result takes."""
        lat = np.asarray(latency_s, dtype=float)
        uc, um = _utils(gpu, flops, nbytes, lat, peak)
        shape = lat.shape
        if shape_of(uc) != shape or shape_of(um) != shape:  # as `_power_w` would broadcast
            shape = np.broadcast_shapes(shape, shape_of(uc), shape_of(um))
            uc, um, lat = (np.broadcast_to(u, shape) for u in (uc, um, lat))
        out = filled(shape if inverse is None else inverse.shape, np.nan)
        flat_inverse = None if inverse is None else inverse.reshape(-1)
        item = _Pending(model, gpu, uc.ravel(), um.ravel(), lat.ravel(), out, inverse=flat_inverse)
        self.items.append(item)
        self.by_buffer[id(out)] = item
        return out

    def pending(self, a: Any) -> _Pending | None:
        """The call whose array `a` is (or views), None for any other array."""
        if not isinstance(a, np.ndarray):
            return None
        root = a if a.base is None else a.base
        return self.by_buffer.get(id(root))

    def resolve(self) -> None:
        """Fill every pending array: one model evaluation per (model, GPU)."""
        groups: dict[tuple[int, int], list[_Pending]] = {}
        for item in self.items:
            groups.setdefault((id(item.model), id(item.gpu)), []).append(item)
        for items in groups.values():
            m, gpu = items[0].model, items[0].gpu
            cat = [
                np.concatenate([getattr(i, k) for i in items]) for k in ("uc", "um", "latency_s")
            ]
            watts = m.predict(*cat, gpu=gpu)["power_w"]
            start = 0
            for i in items:
                flat = i.out.reshape(-1)  # a fresh C-ordered array: a view, filled in place
                size = i.latency_s.size
                part = watts[start : start + size]
                flat[...] = part if i.inverse is None else part.take(i.inverse)
                start += size
                if i.limit:
                    np.minimum(i.out, gpu.board_power_w, out=i.out)
        self.items.clear()
        self.by_buffer.clear()


class _State(threading.local):
    batch: _Batch | None = None  # the open `batched()` of this thread (predict may run in several)


_STATE = _State()


@contextmanager
def batched(on: bool = True, few: bool = True) -> Iterator[None]:
    """Inside, `op_power_w` defers its model evaluation to `resolve` (at the latest on leaving):
    for a few configurations' operators, whose arrays the caller only stores or slices until
    then. Code that computes from an operator's power inside calls `resolve` first.
    `few=False` (a bulk batch): only the calls of at most `DEFER_ROWS` rows are deferred."""
    if not on or _STATE.batch is not None:
        yield
        return
    batch = _STATE.batch = _Batch(few=few)
    try:
        yield
        batch.resolve()
    finally:
        _STATE.batch = None


def resolve() -> None:
    """Fill the arrays `op_power_w` returned inside `batched()` so far (no-op outside)."""
    if _STATE.batch is not None:
        _STATE.batch.resolve()


def board_limited(gpu: GPU, power_w: Any) -> np.ndarray:
    """`dse.roofline.board_limited_w`; a pending power array is limited when resolved (in
    place: it is only stored until then)."""
    batch = _STATE.batch
    item = None if batch is None else batch.pending(power_w)
    if item is None:
        return board_limited_w(gpu, power_w)
    item.limit = True
    return power_w
