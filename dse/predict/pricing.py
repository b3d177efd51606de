"""Levels 1 and 2 of HYMELL as an operator pricer: each operator of `dse.predict.ops.forward_ops` gets a
time and an energy from the GPU's frozen artifact, Level 2 calibrates the measured blocks' GEMMs.

- Level 1: every operator kind is priced by the fitted model of the artifact that covers it
  (GEMM by m, n, k, dtype; attention by the context / generation attention models; the fused MoE
  block; norms and elementwise ops by the layer-op models; all-reduce by the comm model). Where no
  fitted model exists (or no artifact at all) the operator falls back to a roofline with a launch
  floor, and the pricer records which model priced each operator (`PhaseCost.sources`). The
  adapters live in `dse.predict.adapters`; the roofline time of every operator is kept
  too (`PhaseCost.roof_s`), for Level 3 to weigh against the models.
- Energy: power per operator from the artifact's power model at the call's duration when it has
  one (`dse.predict.op_power`, as `dse validate` scores it), else
  the roofline stand-in (idle + a fixed fraction of the idle-to-board span times utilisation).
- Level 2: an eager-GEMM calibration for the blocks whose whole time is measured (vidur,
  PyTorch eager): the attention projections (QKV, RoPE, output) and the dense FFN (gate/up,
  activation, down); a small network of each GEMM's regime (tokens, arithmetic intensity,
  Level-1 time over the roofline, wave fill) scales the block's two GEMMs, the operator between
  them keeps its Level-1 time (`Level2Block`, `LEVEL2_BLOCKS`, `LEVEL2_GEMMS`).

Decode is priced once for all quadrature nodes: an operator whose arrays have a leading node axis
(shape (k, n), only attention over the KV length) is reduced with the node weights, every other
operator (shape (n,)) is multiplied by the sum of the weights.

One file (~850 lines) on purpose: Levels 1 and 2, the shape groups and the operator power share
the Pricer's per-phase state (operator list, group index, per-call counts); split, each part
would pass that state across modules.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from dse._same import all_equal
from dse.models.artifact import Artifact
from dse.models.base import RangeMiss, all_true, any_true, as_shape, filled
from dse.models.level2 import (
    LEVEL2_BLOCKS,
    LEVEL2_GEMMS,
    block_features,
    block_features_rows,
)
from dse.predict import op_power
from dse.predict._rows import (
    ColumnsAt,
    Groups,
    KeyMemo,
    distinct_columns,
    ndim_of,
    shape_of,
    unique_float_rows_by_part,
)
from dse.predict.adapters import ADAPTERS, CTX_COLUMNS, OWN_TABLE_ENGINES, L1Price
from dse.predict.op_power import op_power_w
from dse.predict.ops import Op
from dse.predict.stacking import STACK_AT_MOST, STACKED, StackedAdapter
from dse.roofline import (
    LAUNCH_S,
    ring_allreduce_s,
    roofline_s,
    standin_power_w,
)
from dse.spec.hardware import GPU

# ---------------------------------------------------------------------------- roofline
# GEMM dtypes run on narrower tensor cores than bf16 (`GPU.peak_flops_per_s`: fp8's peak, and
# nvfp4's FP4 peak on Blackwell); every other dtype's GEMM runs at the bf16 peak.
FAST_GEMM_DTYPES = ("fp8", "nvfp4")


def gemm_peak(dtype: Any, gpu: GPU) -> Any:
    """The dense tensor-core peak (FLOP/s) of GEMMs of `dtype` (a name or an array of names)."""
    d = np.asarray(dtype)
    peak: Any = gpu.peak_bf16_flops_per_s
    fast = FAST_GEMM_DTYPES
    if d.dtype.kind in "US" and (d.size <= STACK_AT_MOST or all_equal(d)):
        # a few names: no text comparisons in numpy (~3 us each with the reduction), the dtypes
        # present found in Python; one name over many rows (a batch of one dtype): told by one
        # flat comparison of its bytes, not one text comparison per fast dtype (~60 us each
        # on 20,000 rows)
        names = set(d.ravel().tolist()) if d.size <= STACK_AT_MOST else {str(d.flat[0])}
        fast = tuple(dt for dt in FAST_GEMM_DTYPES if dt in names)
    for dt in fast:
        hit = d == dt
        if np.any(hit):
            peak = np.where(hit, gpu.peak_flops_per_s(dt), peak)
    return peak


def roofline_op(op: Op, gpu: GPU) -> tuple[np.ndarray, np.ndarray]:
    """(seconds per call, utilisation in [0, 1]) of one operator on the roofline."""
    if op.kind == "allreduce":
        t = ring_allreduce_s(op.bytes, op.dims["n_gpus"], gpu.nvlink_bw_bytes_per_s)
        return t, np.zeros_like(t)
    peak: Any = gpu.peak_bf16_flops_per_s
    if op.kind == "gemm":
        peak = gemm_peak(op.dims["dtype"], gpu)
    t_roof = roofline_s(op.flops, op.bytes, peak, gpu.hbm_bw_bytes_per_s)
    t = t_roof + LAUNCH_S
    return t, t_roof / t


def roofline_times(ops: Sequence[Op], gpu: GPU) -> list[np.ndarray]:
    """`roofline_op`'s seconds per call of each operator. In a batch of at most STACK_AT_MOST
    configurations, the operators whose work is one value per configuration in one numpy pass
    (the same numbers: each row's division by its peak, as one operator's); a larger batch
    operator by operator (no copies of its arrays)."""
    out: list[np.ndarray | None] = [None] * len(ops)
    flat = [
        j
        for j, op in enumerate(ops)
        if op.kind != "allreduce" and ndim_of(op.flops) == 1 and ndim_of(op.bytes) == 1
    ]
    n = len(np.atleast_1d(ops[0].count)) if ops else 0
    flat = [j for j in flat if len(ops[j].flops) == n and len(ops[j].bytes) == n]
    if len(flat) > 1 and n <= STACK_AT_MOST:
        peak = filled(len(flat) * n, float(gpu.peak_bf16_flops_per_s))
        peaks: dict[int, np.ndarray] = {}  # the GEMMs of a pass share one dtype column
        for i, j in enumerate(flat):
            if ops[j].kind == "gemm":
                dt = ops[j].dims["dtype"]
                if id(dt) not in peaks:
                    # (a scalar peak is written by the slice assignment, not broadcast first)
                    peaks[id(dt)] = gemm_peak(dt, gpu)
                peak[i * n : (i + 1) * n] = peaks[id(dt)]
        t = roofline_s(
            np.concatenate([ops[j].flops for j in flat]),
            np.concatenate([ops[j].bytes for j in flat]),
            peak,
            gpu.hbm_bw_bytes_per_s,
        )
        t += LAUNCH_S
        for i, j in enumerate(flat):
            out[j] = t[i * n : (i + 1) * n]
    for j, op in enumerate(ops):
        if out[j] is None:
            out[j] = roofline_op(op, gpu)[0]
    return out  # type: ignore[return-value]


def transfer_factor(op: Op, gpu: GPU, fitted_on: GPU) -> np.ndarray:
    """Time on `gpu` / time on `fitted_on` by the roofline (launch floor included): moves a
    Level-1 time measured on one chip to a sibling with other bandwidth or peak."""
    t_here, _ = roofline_op(op, gpu)
    t_there, _ = roofline_op(op, fitted_on)
    return t_here / t_there


# ---------------------------------------------------------------------------- the pricer
@dataclass
class PhaseCost:
    """One phase priced: totals per configuration (one GPU) and the itemised parts."""

    time_s: np.ndarray
    energy_j: np.ndarray
    items_s: dict[str, np.ndarray] = field(default_factory=dict)  # op name -> seconds
    items_j: dict[str, np.ndarray] = field(default_factory=dict)  # op name -> joules
    sources: dict[str, str] = field(default_factory=dict)  # op name -> model name | "roofline"
    out_of_range: np.ndarray | None = None
    kinds: dict[str, str] = field(default_factory=dict)  # op name -> Op.kind
    blocks: dict[str, str] = field(default_factory=dict)  # op name -> Op.block
    # Roofline seconds of every operator (whatever priced it): Level 3 may weigh the fitted
    # kernel model against the roofline where the engine's kernels differ from the tables'.
    roof_s: dict[str, np.ndarray] = field(default_factory=dict)
    # Which part flagged `out_of_range` (operator or level-2 block name -> bool per config).
    oor_by: dict[str, np.ndarray] = field(default_factory=dict)
    # "<operator or level-2 block>: <input>" -> how far outside its model's fitted range.
    misses: dict[str, RangeMiss] = field(default_factory=dict)
    # op name -> per configuration, the index into sources[op].split("+") of the model that
    # priced it, for operators priced by several (GEMMs of two dtypes, a layer op the model
    # covers on some rows only); absent: sources[op] describes every configuration.
    source_rows: dict[str, np.ndarray] = field(default_factory=dict)

    def part_s(self, *kinds: str) -> np.ndarray:
        """Seconds spent in operators of these kinds."""
        return self._part(self.items_s, kinds)

    def roof_part_s(self, *kinds: str) -> np.ndarray:
        """Roofline seconds of operators of these kinds (see `roof_s`)."""
        return self._part(self.roof_s, kinds)

    @property
    def roof_time_s(self) -> np.ndarray:
        """Roofline seconds of every operator."""
        n = len(self.time_s)
        if self.roof_s and n <= STACK_AT_MOST:  # one reduction over the stacked items
            return np.array(list(self.roof_s.values()), dtype=float).reshape(-1, n).sum(axis=0)
        return sum(self.roof_s.values(), np.zeros_like(self.time_s))

    def part_j(self, *kinds: str) -> np.ndarray:
        """Joules spent in operators of these kinds."""
        return self._part(self.items_j, kinds)

    def _part(self, items: dict[str, np.ndarray], kinds: tuple[str, ...]) -> np.ndarray:
        total = np.zeros(self.time_s.shape, self.time_s.dtype)  # (zeros_like's wrapper: ~1 us)
        for name, v in items.items():
            if self.kinds.get(name) in kinds:
                total = total + v
        return total

    def scale_in_place(self, f: np.ndarray) -> None:
        """`scaled`, its arrays multiplied in place (the same products, no new arrays): for a
        cost whose arrays are its own, as `Pricer.price_phases` returns them (an array held
        under two names is multiplied once)."""
        done: set[int] = set()
        for v in (
            self.time_s,
            self.energy_j,
            *self.items_s.values(),
            *self.items_j.values(),
            *self.roof_s.values(),
        ):
            if id(v) not in done:
                done.add(id(v))
                v *= f

    def scaled(self, f: np.ndarray) -> PhaseCost:
        """Every time and energy multiplied by f (e.g. the number of waves a batch runs in)."""
        return PhaseCost(
            self.time_s * f,
            self.energy_j * f,
            {k: v * f for k, v in self.items_s.items()},
            {k: v * f for k, v in self.items_j.items()},
            dict(self.sources),
            self.out_of_range,
            dict(self.kinds),
            dict(self.blocks),
            {k: v * f for k, v in self.roof_s.items()},
            dict(self.oor_by),
            dict(self.misses),
            dict(self.source_rows),
        )


# An operator that runs in fewer than this fraction of a batch's configurations (count 0: the
# MoE block of a dense model, the all-reduce without tensor parallelism) is priced on those only.
SUBSET_BELOW = 0.9


def _at(v: Any, idx: np.ndarray, n: int, memo: dict[int, Any] | None = None) -> Any:
    """v at configurations idx when it is a per-configuration array (last axis n), else v.
    `memo`: gathers already made, by the id of the array (which the caller keeps alive): the
    operators of a phase share many arrays (the tokens, the widths, the counts)."""
    if isinstance(v, np.ndarray) and v.ndim >= 1 and v.shape[-1] == n:
        if memo is None:
            return v.take(idx, axis=-1)  # what v[..., idx] gives; the Ellipsis index is slower
        out = memo.get(id(v))
        if out is None:
            out = memo[id(v)] = v.take(idx, axis=-1)
        return out
    return v


def _op_rows(op: Op, idx: np.ndarray, n: int, memo: dict[int, Any] | None = None) -> Op:
    """The operator restricted to configurations idx (`memo`: see `_at`)."""
    dims = {k: _at(v, idx, n, memo) for k, v in op.dims.items()}
    return Op(op.name, op.kind, op.block, _at(op.count, idx, n, memo), _at(op.flops, idx, n, memo),
              _at(op.bytes, idx, n, memo), dims)  # fmt: skip


def _scatter(price: L1Price, idx: np.ndarray, n: int) -> L1Price:
    """A price of configurations idx spread over all n (latency 1 s, power 0 W elsewhere: the
    pricer zeroes the time of configurations that do not run the operator)."""
    shape = (*shape_of(price.latency_s)[:-1], n)
    op_power.resolve()  # the power is copied here: its values first

    def put(v: np.ndarray, fill: Any, dtype: Any) -> np.ndarray:
        out = np.full(shape, fill, dtype=dtype)
        out[..., idx] = v
        return out

    return L1Price(
        put(price.latency_s, 1.0, float),
        None if price.power_w is None else put(price.power_w, 0.0, float),
        None if price.out_of_range is None else put(price.out_of_range, False, bool),
        price.model,
        None
        if price.misses is None
        else {
            k: RangeMiss(*(put(a, 0.0, float) for a in (m.excess, m.value, m.bound)))
            for k, m in price.misses.items()
        },
        None if price.model_rows is None else put(price.model_rows, 0, np.int8),
    )


def _tokens(cols: Mapping[str, np.ndarray] | None, phase: str) -> np.ndarray | None:
    if cols is None:
        return None
    b = cols["batch_size"].astype(float)
    return b * cols["prompt_tokens"].astype(float) if phase == "prefill" else b


class OpRuns(NamedTuple):
    """Where a phase's operators run: `mask[j]` (n,) bool, count > 0; `every[j]` / `some[j]`:
    in every / some configuration."""

    mask: Sequence[np.ndarray]
    every: list[bool]
    some: list[bool]


def op_runs(ops: Sequence[Op], n: int) -> OpRuns:
    """`OpRuns` of `ops` (counts of shape (n,) or broadcastable to it); for a few
    configurations in one comparison and two reductions over the stacked counts rather than
    three numpy calls per operator (a large batch: operator by operator, no stacked copy)."""
    if n > STACK_AT_MOST:
        masks = [np.asarray(op.count) > 0 for op in ops]
        return OpRuns(masks, [bool(m.all()) for m in masks], [bool(m.any()) for m in masks])
    try:
        counts = np.array([op.count for op in ops], dtype=float)
    except ValueError:  # counts of mixed shapes (a scalar among (n,) arrays)
        counts = np.stack([np.broadcast_to(np.asarray(op.count, dtype=float), (n,)) for op in ops])
    if counts.shape != (len(ops), n):
        counts = np.broadcast_to(counts.reshape(len(ops), -1), (len(ops), n))
    mask = counts > 0
    return OpRuns(list(mask), mask.all(axis=1).tolist(), mask.any(axis=1).tolist())


def _acc(d: dict[str, np.ndarray], key: str, v: np.ndarray) -> None:
    """Add v to d[key]; v must be an array of its own (it is stored, not copied)."""
    d[key] = d[key] + v if key in d else v


def _node_sum(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """sum_k w[k] x[k] over the node axis: numpy adds the rows of a (k, n) array in order,
    the same order for every column, so a configuration's total does not depend on the batch
    it comes in (einsum sums a single column in another order than many)."""
    return (w * x).sum(axis=0)


def _reduce(
    x: np.ndarray, w: np.ndarray | None, n: int, wsum: np.ndarray | None = None
) -> np.ndarray:
    """Collapse the node axis: weighted sum over nodes for (k, n) arrays, x * sum(w) for (n,)
    (`wsum`: w.sum(axis=0) when the caller has it). Always a new array."""
    if w is None:
        return (x if shape_of(x) == (n,) else np.broadcast_to(x, (n,))).astype(float)
    if ndim_of(x) == 2:
        return _node_sum(w, x)
    return (x if shape_of(x) == (n,) else np.broadcast_to(x, (n,))) * (
        w.sum(axis=0) if wsum is None else wsum
    )


class OpPrice(NamedTuple):
    """One operator's cost per call, before its count and the node axis: seconds, watts, and
    the model that priced it ("roofline" when none did)."""

    t_call: np.ndarray
    power: np.ndarray
    src: str


def _record_misses(
    price: L1Price,
    op: Op,
    runs: np.ndarray | None,
    misses: dict[str, RangeMiss],
    oor_by: dict[str, np.ndarray],
    oor: np.ndarray,
) -> None:
    """Add the operator's range flags to the phase's (in place), where it runs (`runs` None:
    everywhere): graded misses ("<op>: <input>", the worst quadrature node) when the model
    gives them, else its flag."""
    if price.misses is not None:  # graded: which input, how far
        for key, miss in price.misses.items():
            m = (miss if runs is None else miss.masked(runs)).worst_node()
            o = m.outside
            if not any_true(o):
                continue
            label = f"{op.name}: {key}"
            misses[label] = misses[label].worse(m) if label in misses else m
            oor_by[op.name] = oor_by[op.name] | o if op.name in oor_by else o
            oor |= o
    elif price.out_of_range is not None:
        o = np.asarray(price.out_of_range)
        o = o if runs is None else o & runs
        o = o.any(axis=0) if o.ndim == 2 else o
        if any_true(o):
            oor_by[op.name] = oor_by[op.name] | o if op.name in oor_by else o
            oor |= o


def _collapse(
    out: PhaseCost,
    per_op: list[tuple[Op, np.ndarray, np.ndarray]],
    weights: np.ndarray | None,
    wsum: np.ndarray | None,
    zero: np.ndarray,
) -> None:
    """Reduce each operator's seconds and joules over the node axis into `out` (in place), in
    operator order: the items and the phase totals. `zero`: the times of operators that do not
    run (compared by identity). A few configurations' items and totals are the rows and sums
    of two (operators, n) matrices (two reductions, not two additions per operator)."""
    n = len(zero)
    few = n <= STACK_AT_MOST and bool(per_op)
    if few:
        _collapse_few(out, per_op, weights, wsum, zero)
        return
    for op, t, p in per_op:
        if t is zero:
            t_r, e_r = np.zeros(n), np.zeros(n)
        else:
            t_r, e_r = _reduced(t, p, weights, wsum, n)
        out.time_s += t_r
        out.energy_j += e_r
        _acc(out.items_s, op.name, t_r)
        _acc(out.items_j, op.name, e_r)


def _collapse_few(
    out: PhaseCost,
    per_op: list[tuple[Op, np.ndarray, np.ndarray]],
    weights: np.ndarray | None,
    wsum: np.ndarray | None,
    zero: np.ndarray,
) -> None:
    """`_collapse` of a few configurations: the (operators, n) matrices of seconds and joules
    written where they are made: the running operators whose seconds and watts are (n,) rows
    as one block (t x sum of the weights, then x watts: three numpy calls, not two an
    operator), those that do not run zeros, node-axis ones reduced alone (`_reduced`); the
    items are the matrices' rows (arrays of their own: `scale_in_place` scales each once)."""
    n, k = len(zero), len(per_op)
    T, E = np.zeros((k, n)), np.zeros((k, n))
    flat = [
        j
        for j, (_, t, p) in enumerate(per_op)
        if t is not zero and shape_of(t) == (n,) and shape_of(p) == (n,)
    ]
    if len(flat) < 2:  # one such operator: by `_reduced`, as the others
        flat = []
    else:
        Tf = np.array([per_op[j][1] for j in flat], dtype=float)
        if wsum is not None:
            Tf = Tf * wsum
        T[flat] = Tf
        E[flat] = Tf * np.array([per_op[j][2] for j in flat], dtype=float)
    done = set(flat)
    for j, (_, t, p) in enumerate(per_op):
        if j not in done and t is not zero:
            T[j], E[j] = _reduced(t, p, weights, wsum, n)
    out.time_s += T.sum(axis=0)
    out.energy_j += E.sum(axis=0)
    for (op, _, _), t_r, e_r in zip(per_op, T, E, strict=True):
        _acc(out.items_s, op.name, t_r)
        _acc(out.items_j, op.name, e_r)


def _reduced(
    t: np.ndarray, p: np.ndarray, weights: np.ndarray | None, wsum: np.ndarray | None, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """One running operator's (seconds, joules) per configuration, the node axis reduced."""
    if ndim_of(t) == 2:
        return _node_sum(weights, t), _node_sum(weights, t * p)
    if wsum is not None:
        t_r = t * wsum
    else:  # t = t_call * count is a new array of its own: stored as the item
        t_r = t if shape_of(t) == (n,) else np.broadcast_to(t, (n,)).astype(float)
    return t_r, t_r * p if ndim_of(p) < 2 else _reduce(t * p, weights, n, wsum)


@dataclass
class _Draft:
    """One phase priced by Level 1, before Level 2 and the node axis: per operator (op,
    seconds, watts) unreduced, and what `PhaseCost` records about them."""

    oor: np.ndarray  # (n,) bool: some part outside its fitted range
    zero: np.ndarray  # (n,) the times of operators that do not run (compared by identity)
    per_op: list[tuple[Op, np.ndarray, np.ndarray]] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)
    roof: dict[str, np.ndarray] = field(default_factory=dict)
    oor_by: dict[str, np.ndarray] = field(default_factory=dict)
    misses: dict[str, RangeMiss] = field(default_factory=dict)
    source_rows: dict[str, np.ndarray] = field(default_factory=dict)


def _block_part(
    d: _Draft, names: Sequence[str]
) -> tuple[_Draft, list[int], dict[str, Op], dict[str, np.ndarray]] | None:
    """A Level-2 block in one phase: (draft, indices of its operators in `per_op`, operators by
    name, seconds of one call by name); None when the phase does not run the whole block."""
    idx = [i for i, (op, _, _) in enumerate(d.per_op) if op.name in names]
    ops = {d.per_op[i][0].name: d.per_op[i][0] for i in idx}
    if len(idx) != len(names) or not any_true(ops[names[-1]].count > 0):
        return None
    count = np.maximum(ops[names[-1]].count, 1.0)
    return d, idx, ops, {d.per_op[i][0].name: d.per_op[i][1] / count for i in idx}


def _reduced_roofs(
    roof: dict[str, np.ndarray], weights: np.ndarray | None, n: int, wsum: np.ndarray | None
) -> dict[str, np.ndarray]:
    """Each operator's roofline seconds with the node axis reduced (`_reduce`); a few
    configurations' (n,) items scaled by the weights' sums in one product."""
    if weights is None or n > STACK_AT_MOST:
        return {k: _reduce(v, weights, n, wsum) for k, v in roof.items()}
    flat = [k for k, v in roof.items() if shape_of(v) == (n,)]
    out = dict(zip(flat, np.array([roof[k] for k in flat]).reshape(-1, n) * wsum, strict=True))
    # the operators in their order (the items' order is the sum's), node arrays reduced alone
    return {k: out[k] if k in out else _reduce(v, weights, n, wsum) for k, v in roof.items()}


def _joined_parts(
    parts: Sequence[tuple[_Draft, list[int], dict[str, Op], dict[str, np.ndarray]]],
    names: Sequence[str],
    sizes: Sequence[int],
) -> tuple[Mapping[str, np.ndarray], Mapping[str, Op]]:
    """The seconds per call and the operators of one Level-2 block over every phase, each
    phase's rows after the previous one's: `block_features` of them is the phases' feature
    rows stacked (the same element-wise arithmetic, one call)."""
    if len(parts) == 1:
        return parts[0][3], parts[0][2]
    times = {
        k: np.concatenate([as_shape(p[3][k], (s,)) for p, s in zip(parts, sizes, strict=True)])
        for k in names
    }
    ops = {}
    for k in (names[0], names[-1]):  # the GEMMs: their sizes
        dims = {
            x: np.concatenate(
                [
                    as_shape(np.asarray(p[2][k].dims[x], dtype=float), (s,))
                    for p, s in zip(parts, sizes, strict=True)
                ]
            )
            for x in ("m", "n", "k")
        }
        o = parts[0][2][k]
        ops[k] = Op(o.name, o.kind, o.block, o.count, o.flops, o.bytes, dims)
    return times, ops


# ---------------------------------------------------------------------------- shape groups
def phase_groups(
    ops: Sequence[Op],
    runs: OpRuns,
    cols: Mapping[str, np.ndarray] | None,
    n: int,
    weights: np.ndarray | None = None,
    key: Sequence[np.ndarray] | None = None,
    memo: KeyMemo | None = None,
) -> Groups | None:
    """The configurations of a phase whose operators are the same calls (every operator's
    sizes, FLOPs, bytes and dims, whether it runs, and the columns the adapters read,
    `adapters.CTX_COLUMNS`) with the same quadrature `weights`: one row per group and each
    row's group, or None when most rows are distinct (`_rows.distinct_columns`). The counts
    are left out: a sweep's configurations that differ only in depth (n_layers) make the same
    calls, a different number of times.

    `key`: per-configuration arrays the operators' sizes are a function of, row by row (the
    configuration columns `ops.forward_ops` read, n_layers left out, which sets counts only;
    `request.base_costs`): rows are then grouped on those, on whether each operator runs, on
    `weights` and on `CTX_COLUMNS` (~10 varying columns instead of ~50-60 operator arrays);
    equal inputs make equal operators, so such a group's rows make the same calls. None: on
    the operators' own arrays. `memo`: shared by the phases of one batch (`_rows.KeyMemo`)."""
    arrays: list[Any] = [weights]
    if key is not None:
        # where an operator runs in some configurations only (the all-reduce at TP 1)
        arrays += [
            mask
            for mask, every, some in zip(runs.mask, runs.every, runs.some, strict=True)
            if some and not every
        ]
        arrays += list(key)
    else:
        for op, mask in zip(ops, runs.mask, strict=True):
            arrays += [mask, op.flops, op.bytes, *op.dims.values()]
    if cols is not None:
        arrays += [cols[k] for k in CTX_COLUMNS if k in cols]
    return distinct_columns(arrays, n, memo=memo)


def _per_call(op: Op, rows: np.ndarray, n: int, memo: dict[int, Any] | None = None) -> Op:
    """The operator at configurations `rows`, its count 1 where it runs (0 elsewhere): the
    pricer's times are then per call, `_finish_grouped` multiplies in each configuration's
    count (`memo`: see `_at`; the gathered arrays are read, never written)."""
    o = _op_rows(op, rows, n, memo)
    return Op(o.name, o.kind, o.block, (np.asarray(o.count) > 0).astype(float), o.flops,
              o.bytes, o.dims)  # fmt: skip


class _Spread:
    """`_at(v, inverse, m)` of a group's arrays, each distinct array (dtype, shape, bytes)
    gathered once: the range misses and flags of several operators often hold the same values
    (the width of every norm and residual add), and the result is read, never written."""

    def __init__(self, inverse: np.ndarray, m: int) -> None:
        self.inverse, self.m = inverse, m
        self.done: dict[tuple[str, tuple[int, ...], bytes], np.ndarray] = {}
        # by the array itself first (kept, so that its id stays its own): the same array
        # object met again is not copied to bytes and hashed again
        self.same: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def __call__(self, v: Any) -> Any:
        if not (isinstance(v, np.ndarray) and v.ndim >= 1 and v.shape[-1] == self.m):
            return v
        hit = self.same.get(id(v))
        if hit is not None and hit[0] is v:
            return hit[1]
        key = (v.dtype.str, v.shape, v.tobytes())
        out = self.done.get(key)
        if out is None:
            out = self.done[key] = v.take(self.inverse, axis=-1)  # v[..., inverse], faster
        self.same[id(v)] = (v, out)
        return out


def _row_sum(rows: Sequence[np.ndarray], n: int) -> np.ndarray:
    """rows[0] + rows[1] + ... in order, a new array (zeros for none): what `.sum(axis=0)` of
    the rows stacked adds, without the stacked copy."""
    if not rows:
        return np.zeros(n)
    total = rows[0].copy()
    for r in rows[1:]:
        total += r
    return total


def _finish_grouped(
    d: _Draft,
    ops: Sequence[Op],
    weights: np.ndarray | None,
    inverse: np.ndarray,
    n: int,
    flags: bool = True,
) -> PhaseCost:
    """`_finish` of a draft priced once per group of configurations (`phase_groups`: the
    operators `_per_call`, `weights` at the groups' rows): each operator's seconds, joules and
    roofline seconds reduced over the node axis per group, then spread over all n in one
    gather and multiplied by each configuration's own count; totals are the sums of the rows,
    in operator order (as `_collapse` adds them). `flags` False (`Pricer.flags`): the range
    flags, misses and model rows are left out, not spread (~1/5 of this on a sweep chunk)."""
    m = len(d.zero)
    wsum = None if weights is None else weights.sum(axis=0)
    rows: list[np.ndarray] = []
    counts: list[Any] = []
    last: dict[str, Any] = {}  # `roof` keeps the last running operator of a name
    runs: list[bool] = []  # per operator: runs somewhere (its rows are spread)
    for (_, t, p), op in zip(d.per_op, ops, strict=True):
        runs.append(t is not d.zero)
        if runs[-1]:
            rows += list(_reduced(t, p, weights, wsum, m))
            last[op.name] = op.count
            counts += [op.count, op.count]
    roofs = _reduced_roofs(d.roof, weights, m, wsum)
    rows += list(roofs.values())
    counts += [last[k] for k in roofs]
    # each row gathered into an array of its own, then times its count: (n,) arrays that the
    # allocator reuses from chunk to chunk, where one (rows, n) block of a sweep's chunk (~50
    # rows x 10^5) is mapped afresh and page-faulted in on every call
    spread = [np.take(r, inverse) for r in np.array(rows, dtype=float).reshape(len(rows), m)]
    for row, c in zip(spread, counts, strict=True):
        row *= c
    k = sum(runs)
    # the totals add the running operators' rows in operator order (those that run nowhere
    # would add zeros), as a sum over the rows of a (k, n) array does
    out = PhaseCost(
        _row_sum(spread[0 : 2 * k : 2], n),
        _row_sum(spread[1 : 2 * k : 2], n),
        sources=dict(d.sources),
        kinds={op.name: op.kind for op in ops},
        blocks={op.name: op.block for op in ops},
        roof_s=dict(zip(roofs, spread[2 * k :], strict=True)),
    )
    if flags:
        at = _Spread(inverse, m)
        out.out_of_range = d.oor[inverse]
        out.oor_by = {key: at(v) for key, v in d.oor_by.items()}
        out.misses = {
            key: RangeMiss(*(at(a) for a in (v.excess, v.value, v.bound)))
            for key, v in d.misses.items()
        }
        out.source_rows = {key: at(v) for key, v in d.source_rows.items()}
    it = iter(spread)
    for op, running in zip(ops, runs, strict=True):
        t_r, e_r = (next(it), next(it)) if running else (np.zeros(n), np.zeros(n))
        _acc(out.items_s, op.name, t_r)
        _acc(out.items_j, op.name, e_r)
    return out


def _finish(d: _Draft, ops: list[Op], weights: np.ndarray | None) -> PhaseCost:
    """The phase's `PhaseCost`: the node axis reduced with the quadrature `weights`."""
    n = len(d.zero)
    wsum = None if weights is None else weights.sum(axis=0)
    out = PhaseCost(
        np.zeros(n),
        np.zeros(n),
        sources=d.sources,
        out_of_range=d.oor,
        kinds={op.name: op.kind for op in ops},
        blocks={op.name: op.block for op in ops},
        roof_s=_reduced_roofs(d.roof, weights, n, wsum),
        oor_by=d.oor_by,
        misses=d.misses,
        source_rows=d.source_rows,
    )
    _collapse(out, d.per_op, weights, wsum, d.zero)
    return out


def own_engine_groups(engines: np.ndarray) -> np.ndarray:
    """Per configuration, the engine whose own kernel tables price it (`adapters.OWN_TABLE_ENGINES`),
    "" for the default tables: configurations of different groups are priced apart."""
    e = np.asarray(engines).astype(str)
    return np.where(np.isin(e, OWN_TABLE_ENGINES), e, "")


def batch_engine(cols: Mapping[str, np.ndarray] | None) -> str | None:
    """The engine of OWN_TABLE_ENGINES every configuration of `cols` runs, None when they run
    others (or say no engine). A batch mixing the two is a caller's mistake (ValueError): its
    configurations would be priced by one set of tables; `dse.predict.request.predict_columns`
    splits such a batch first."""
    if cols is None or "engine" not in cols:
        return None
    e = np.asarray(cols["engine"])
    if e.size and all_equal(e):  # one engine (a sweep's chunk): no string sort
        first = str(e.flat[0])
        return first if first in OWN_TABLE_ENGINES else None
    groups = np.unique(own_engine_groups(e))
    if len(groups) > 1:
        raise ValueError(
            f"a batch mixing engines {sorted(groups.tolist())} reached the pricer: price each "
            "engine's configurations apart (dse.predict.request.predict_columns does)"
        )
    if not len(groups) or not groups[0]:
        return None
    return str(groups[0])


class Pricer:
    """Prices operator lists with an artifact's Level-1/2 models (roofline where none fits).

    `engine`: the engine whose own kernel tables price the batch (`adapters.OWN_TABLE_ENGINES`;
    None: the default tables), read from cols["engine"] when not given."""

    # Batches of at most this many configurations stack their operators (`price_phases`).
    stack_at_most: int = STACK_AT_MOST
    # Such a batch evaluates every operator's power in one power-model call (`op_power.batched`)
    batch_power: bool = True
    # Whether a grouped batch's costs carry the range flags, misses and model rows spread to
    # every configuration (`_finish_grouped`); False: a caller that reads the times and
    # energies only (`request.predict_columns(metrics_only=True)`, a sweep's scan)
    flags: bool = True

    def __init__(
        self,
        gpu: GPU,
        artifact: Artifact | None = None,
        artifact_gpu: GPU | None = None,
        cols: Mapping[str, np.ndarray] | None = None,
        engine: str | None = None,
    ) -> None:
        self.gpu = gpu
        self.artifact = artifact
        self.cols = cols  # configuration columns: some Level-1 models need sizes ops do not carry
        self.engine = engine if engine is not None else batch_engine(cols)
        # The GPU whose measurements the Level-1 models were fitted on, when it is another chip
        # of the same compute (A100 40GB priced with the 80GB part's kernels): times move with
        # the memory-bandwidth ratio where an operator is memory-bound (`transfer_factor`).
        self.artifact_gpu = artifact_gpu if artifact_gpu is not None else gpu
        # Per phase of the last `price_phases`, the configurations Level 1 priced: fewer than
        # the batch where configurations shared their operator calls (`phase_groups`).
        self.priced_rows: list[int] = []

    def price_phases(
        self,
        phases: Sequence[tuple[list[Op], str, np.ndarray | None]],
        keys: Sequence[Sequence[np.ndarray] | None] | None = None,
    ) -> list[PhaseCost]:
        """`price` of each (operators, phase, weights); a batch of at most
        `stacking.STACK_AT_MOST` configurations prices the operators of one adapter, over all
        phases, in one model call (`dse.predict.stacking`): the same numbers, fewer calls.
        Level 2 calibrates each block over all phases in one call. `keys`: per phase, the
        arrays its operators are built from, row by row (`phase_groups`' key)."""
        n = len(np.atleast_1d(phases[0][0][0].count))
        # a few configurations: every operator's power in one model call (`op_power.batched`);
        # a bulk batch: the calls of a few distinct rows (its shape groups' layer operators)
        few = n <= self.stack_at_most
        with op_power.batched(self.batch_power, few=few):
            drafts, groups = self._level1_phases(phases, n, keys)
        self._apply_level2(drafts)
        return [
            _finish(d, ops, weights)
            if g is None
            else _finish_grouped(d, ops, _at(weights, g.rows, n), g.inverse, n, self.flags)
            for d, (ops, _, weights), g in zip(drafts, phases, groups, strict=True)
        ]

    def price_on_groups(
        self, phases: Sequence[tuple[list[Op], str, np.ndarray | None, Groups]]
    ) -> list[PhaseCost]:
        """`price_phases` of operator lists built on one row per shape group (`ops.forward_ops`
        with `counts`: each operator's sizes at its phase's `Groups.rows`, its count at every
        configuration; the groups made by the caller, each operator running in all or none of
        a group's rows): Levels 1 and 2 on the groups' rows, then each configuration's own
        counts (`_finish_grouped`). The same prices as `price_phases` of the operators built
        on every row, keyed on the same groups: the per-call operators hold the same values
        (built on the rows `_per_call` gathers), without the other rows' sizes made."""
        n = len(phases[0][3].inverse)  # type: ignore[arg-type]
        gathered: dict[int, dict[int, Any]] = {}  # counts at each group's rows, by their id
        drafts = []
        with op_power.batched(self.batch_power, few=False):
            for ops, phase, _, g in phases:
                assert g.rows is not None
                memo = gathered.setdefault(id(g.rows), {})
                per_call = [
                    Op(o.name, o.kind, o.block, (np.asarray(_at(o.count, g.rows, n, memo)) > 0)
                       .astype(float), o.flops, o.bytes, o.dims)
                    for o in ops
                ]  # fmt: skip
                drafts.append(self._at_rows(g.rows)._level1(per_call, phase, None))
        self.priced_rows = [len(g.rows) for _, _, _, g in phases]  # type: ignore[arg-type]
        self._apply_level2(drafts)
        return [
            _finish_grouped(d, ops, _at(weights, g.rows, n), g.inverse, n, self.flags)  # type: ignore[arg-type]
            for d, (ops, _, weights, g) in zip(drafts, phases, strict=True)
        ]

    def _level1_phases(
        self,
        phases: Sequence[tuple[list[Op], str, np.ndarray | None]],
        n: int,
        keys: Sequence[Sequence[np.ndarray] | None] | None = None,
    ) -> tuple[list[_Draft], list[Groups | None]]:
        """`price_phases`' Level-1 drafts, and each phase's shape groups (None: row by row)."""
        runs = [op_runs(ops, n) for ops, _, _ in phases]
        pre: dict[int, dict[int, L1Price | None]] = {}
        if self.artifact is not None and n <= self.stack_at_most:
            pre = self._stacked(phases, n, runs)
        # A larger batch prices each phase once per group of configurations that make the same
        # operator calls (a sweep's grid repeats them), Levels 1 and 2 on one row per group.
        memo = KeyMemo()  # the phases key on the same columns (the arrays are alive here)
        groups: list[Groups | None] = [
            phase_groups(
                ops, runs[i], self.cols, n, weights, None if keys is None else keys[i], memo
            )
            if self.artifact is not None and n > self.stack_at_most
            else None
            for i, (ops, _, weights) in enumerate(phases)
        ]
        self.priced_rows = [n if g is None else len(g.rows) for g in groups]
        # per group rows, the arrays gathered at them (by id: the phases' operators are alive)
        gathered: dict[int, dict[int, Any]] = {}
        drafts = [
            self._level1(ops, phase, pre.get(i), runs[i])
            if g is None
            else self._at_rows(g.rows)._level1(
                [_per_call(op, g.rows, n, gathered.setdefault(id(g.rows), {})) for op in ops],
                phase,
                None,
            )
            for i, ((ops, phase, _), g) in enumerate(zip(phases, groups, strict=True))
        ]
        return drafts, groups

    def _at_rows(self, rows: np.ndarray) -> Pricer:
        """This pricer on the configurations `rows` (their columns gathered when read)."""
        cols = None if self.cols is None else ColumnsAt(self.cols, rows)
        at = Pricer(self.gpu, self.artifact, self.artifact_gpu, cols, self.engine)
        at.flags = self.flags
        return at

    def _stacked(
        self,
        phases: Sequence[tuple[list[Op], str, np.ndarray | None]],
        n: int,
        runs: Sequence[OpRuns] | None = None,
    ) -> dict[int, dict[int, L1Price | None]]:
        """Stacked Level-1 prices: phase index -> operator index -> price, for every operator
        that runs in all configurations and whose adapter stacks with another operator's
        (`runs`: each phase's `op_runs`, when the caller has them)."""
        assert self.artifact is not None
        if runs is None:
            runs = [op_runs(ops, n) for ops, _, _ in phases]
        stacks: dict[int, tuple[StackedAdapter, list[tuple[int, int, Op, dict[str, Any]]]]] = {}
        for p, (ops, phase, _) in enumerate(phases):
            ctx = {
                "cols": self.cols,
                "phase": phase,
                "tokens": _tokens(self.cols, phase),
                "engine": self.engine,
            }
            every = runs[p].every
            for j, op in enumerate(ops):
                adapter = STACKED.get(op.kind)
                if adapter is None or not every[j]:
                    continue
                stacks.setdefault(id(adapter), (adapter, []))[1].append((p, j, op, ctx))
        out: dict[int, dict[int, L1Price | None]] = {}
        for adapter, items in stacks.values():
            if len(items) < 2:
                continue
            prices = adapter(self.artifact, [(op, ctx) for _, _, op, ctx in items], self.gpu, n)
            for (p, j, _, _), price in zip(items, prices, strict=True):
                out.setdefault(p, {})[j] = price
        return out

    def price(
        self,
        ops: list[Op],
        phase: str,
        weights: np.ndarray | None = None,
        priced: Mapping[int, L1Price | None] | None = None,
    ) -> PhaseCost:
        """Time and energy of one forward pass (prefill) or of all decode steps (with `weights`,
        the (k, n) quadrature weights of the node axis that attention arrays carry). `priced`:
        Level-1 prices already made for some operators (index in `ops`), see `price_phases`."""
        draft = self._level1(ops, phase, priced)
        self._apply_level2([draft])
        return _finish(draft, ops, weights)

    def _level1(
        self,
        ops: list[Op],
        phase: str,
        priced: Mapping[int, L1Price | None] | None,
        runs: OpRuns | None = None,
    ) -> _Draft:
        """Every operator of one phase priced by Level 1 (`priced`: prices already made;
        `runs`: the operators' `op_runs`, when the caller has them)."""
        n = len(np.atleast_1d(ops[0].count))
        d = _Draft(np.zeros(n, dtype=bool), np.zeros(n))
        # "cache": adapters may share results between operators of this phase; "flags": False
        # where no range flag is read (`flags`), so an adapter may leave its range check out
        ctx = {
            "cols": self.cols,
            "phase": phase,
            "tokens": _tokens(self.cols, phase),
            "cache": {},
            "engine": self.engine,
            "flags": self.flags,
        }
        sources, source_rows = d.sources, d.source_rows
        runs = op_runs(ops, n) if runs is None else runs
        runs_of, every_of = runs.mask, runs.every
        live = [j for j, some in enumerate(runs.some) if some or every_of[j]]
        roofs = dict(zip(live, roofline_times([ops[j] for j in live], self.gpu), strict=True))
        for j, op in enumerate(ops):
            runs, every = runs_of[j], every_of[j]
            if j not in roofs:  # runs nowhere, e.g. the MoE operators of a dense model
                d.per_op.append((op, d.zero, d.zero))
                sources.setdefault(op.name, "none")
                continue
            if priced is not None and j in priced:
                call, price = self._from_price(op, priced[j])
            else:
                call, price = self._price_op(op, runs, ctx, n, every)
            if price is not None:
                _record_misses(price, op, None if every else runs, d.misses, d.oor_by, d.oor)
            t_r = call.t_call if call.src == "roofline" else roofs[j]
            t, roof = call.t_call * op.count, t_r * op.count
            if not every:  # zero where the configuration does not run the operator
                t, roof = np.where(runs, t, 0.0), np.where(runs, roof, 0.0)
            d.roof[op.name] = roof
            d.per_op.append((op, t, call.power))
            prev = sources.get(op.name)
            if prev in (None, "none"):
                if price is not None and price.model_rows is not None:
                    source_rows[op.name] = price.model_rows
            else:  # an operator name priced twice: described batch-wide
                source_rows.pop(op.name, None)
            sources[op.name] = (
                call.src if prev in (None, "none", call.src) else f"{prev}+{call.src}"
            )
        return d

    def _price_op(
        self, op: Op, runs: np.ndarray, ctx: dict[str, Any], n: int, every: bool = False
    ) -> tuple[OpPrice, L1Price | None]:
        """One operator's cost per call: its fitted model's (moved to this chip when the model
        was fitted on a sibling), else the roofline's; and the model's price, for its flags.
        `every`: runs.all(), when the caller knows it."""
        return self._from_price(op, self._model_price(op, runs, ctx, n, every))

    def _from_price(self, op: Op, price: L1Price | None) -> tuple[OpPrice, L1Price | None]:
        """The operator's cost per call from its model's price (None: the roofline's)."""
        if price is None:
            t_call, util = roofline_op(op, self.gpu)
            return OpPrice(t_call, self._op_power(op, t_call, util), "roofline"), None
        t_call = price.latency_s
        if self.artifact_gpu is not self.gpu:
            t_call = t_call * transfer_factor(op, self.gpu, self.artifact_gpu)
        power = price.power_w
        if power is None:
            power = self._op_power(op, t_call, None)
        return OpPrice(t_call, op_power.board_limited(self.gpu, power), price.model), price

    def _model_price(
        self, op: Op, runs: np.ndarray, ctx: dict[str, Any], n: int, every: bool = False
    ) -> L1Price | None:
        """The adapter's price of the operator (None: no artifact, adapter or fitted model).
        An operator most configurations do not run is priced on the rows that run it only."""
        adapter = ADAPTERS.get(op.kind)
        if self.artifact is None or adapter is None:
            return None
        if every or all_true(runs) or runs.mean() >= SUBSET_BELOW:
            return adapter(self.artifact, op, self.gpu, ctx)
        # e.g. the MoE block in a batch of mostly dense models
        idx = np.flatnonzero(runs)
        sub_ctx = {
            "cols": None if self.cols is None else ColumnsAt(self.cols, idx),
            "phase": ctx["phase"],
            "tokens": None if ctx["tokens"] is None else ctx["tokens"][idx],
            "engine": self.engine,
        }
        price = adapter(self.artifact, _op_rows(op, idx, n), self.gpu, sub_ctx)
        return None if price is None else _scatter(price, idx, n)

    def _op_power(self, op: Op, t_call: np.ndarray, util: np.ndarray | None) -> np.ndarray:
        """Watts of one call when the model gave none; `util` None (a model's time): the
        roofline's busy share of `t_call`."""
        if util is None:
            t_roof, _ = roofline_op(op, self.gpu)
            util = np.minimum((t_roof - LAUNCH_S) / t_call, 1.0)
        return self._power(op, t_call, util)

    def _power(self, op: Op, t_call: np.ndarray, util: np.ndarray) -> np.ndarray:
        """The artifact's power model at the operator's utilisations, else the stand-in."""
        if self.artifact is not None:
            p = op_power_w(self.artifact, op, self.gpu, t_call)
            if p is not None:
                return p
        return standin_power_w(self.gpu, util)

    def _apply_level2(self, drafts: Sequence[_Draft]) -> None:
        """Scale each Level-2 block's two GEMM times by their eager calibration factors (in
        place), the phases' rows of a block in one call; flags (and grades, in `misses`) the
        block sizes outside what the block was fitted on."""
        if self.artifact is None:
            return
        for block, names in LEVEL2_BLOCKS.items():
            name = f"level2.{block}"
            if not self.artifact.has(name):
                continue
            parts = [p for p in (_block_part(d, names) for d in drafts) if p is not None]
            if not parts:
                continue
            model = self.artifact.model(name)
            sizes = [len(d.zero) for d, _, _, _ in parts]
            if all(size == 1 for size in sizes) and all(
                shape_of(t) == (1,) for p in parts for t in p[3].values()
            ):  # one configuration's phases: their rows read as Python floats
                X = block_features_rows([(p[3], p[2]) for p in parts], block, self.gpu)
            elif all(ndim_of(t) == 1 for p in parts for t in p[3].values()):
                X = block_features(*_joined_parts(parts, names, sizes), block, self.gpu)
            else:  # a phase with per-node times (none today): block by block
                X = np.concatenate([block_features(c, o, block, self.gpu) for _, _, o, c in parts])
            # A sweep's blocks repeat their shapes, and so do the decode rows of freely drawn
            # workloads: the calibration and the range check (both row by row) once per
            # distinct row, phase by phase, then spread back.
            u = unique_float_rows_by_part(X, sizes)
            if u is not None:
                X = X[u[0]]
            if hasattr(model, "in_token_blocks"):
                X = model.in_token_blocks(X)
            f1, f2 = model.gemm_log_factors(X)
            gemm1, gemm2 = LEVEL2_GEMMS[block]
            e1, e2 = np.exp(f1), np.exp(f2)
            # the block sizes' range check: flags only (none read without them, `flags`)
            block_misses = model.range_misses(X) if self.flags else {}
            if u is not None:
                e1, e2 = e1[u[1]], e2[u[1]]
                block_misses = {
                    k: RangeMiss(
                        *(as_shape(a, f1.shape)[u[1]] for a in (m.excess, m.value, m.bound))
                    )
                    for k, m in block_misses.items()
                }
            start = 0
            for (d, idx, ops, _), size in zip(parts, sizes, strict=True):
                rows = slice(start, start + size)
                start += size
                factors = {gemm1: e1[rows], gemm2: e2[rows]}
                runs = ops[names[-1]].count > 0
                o = np.zeros(size, dtype=bool)
                for key, miss in block_misses.items():
                    m = RangeMiss(miss.excess[rows], miss.value[rows], miss.bound[rows])
                    m = m.masked(runs)
                    if any_true(m.outside):
                        d.misses[f"{name}: {key}"] = m
                        o |= m.outside
                if any_true(o):
                    d.oor_by[name] = o
                    d.oor |= o
                for i in idx:
                    op, t, p = d.per_op[i]
                    if op.name in factors:  # the op between the GEMMs keeps its Level-1 time
                        d.per_op[i] = (op, t * factors[op.name], p)
