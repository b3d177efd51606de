"""Small batches: the operators of one adapter, over both phases, priced in one model call.

A model call costs a few hundred numpy operations whatever its rows (~0.1-0.5 ms), and one
configuration has about 28 operators (prefill and decode). Pricing a batch of a few
configurations operator by operator is therefore a fixed cost per operator; stacking the
operators an adapter prices (the GEMMs, the layer operators, the all-reduces, the MoE blocks of
both phases) into one operator of k x n rows pays it once per adapter instead (issue 18: a
one-configuration `predict` in <= 5 ms).

Every adapter stacked here is row-wise: a row's price depends on that row alone, so a stacked
price is the per-operator price up to floating-point reassociation in the MLP products
(tests/predict/test_golden_small.py compares one-row predictions with the batch path within 1e-6).
Operators that carry the quadrature's node axis (decode attention) or do not run in every
configuration are left to the per-operator path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from dse.models.artifact import Artifact
from dse.models.base import RangeMiss, as_shape
from dse.models.layer_ops import LayerOpModel, op_geometry
from dse.predict._rows import ndim_of
from dse.predict.adapters import (
    LAYER_OP_OF,
    L1Price,
    _layer_row_blocks,
    price_allreduce,
    price_gemm,
    price_layer_op,
    price_moe,
)
from dse.predict.op_power import op_power_w
from dse.predict.ops import Op
from dse.roofline import LAUNCH_S, roofline_s
from dse.spec.hardware import GPU

# Batches of at most this many configurations are stacked: above it a model call's fixed cost
# is small against its rows, and the per-operator path (which deduplicates shapes over the
# batch) is the faster one.
STACK_AT_MOST = 64

# (operator, its phase's adapter context) pairs -> one price per pair (None: no model).
StackedAdapter = Callable[
    [Artifact, Sequence[tuple[Op, Mapping[str, Any]]], GPU, int], list[L1Price | None]
]


def as_rows(v: Any, n: int) -> np.ndarray:
    """v as n rows (a view when it has to be broadcast; itself when it already is)."""
    a = np.asarray(v)
    return a if a.shape == (n,) else np.broadcast_to(a, (n,))


def stack_ops(ops: Sequence[Op], n: int) -> Op | None:
    """Operators as one of len(ops) x n rows (operator i at rows i n .. (i + 1) n), or None
    when their dims differ in name."""
    keys = set(ops[0].dims)
    if any(set(op.dims) != keys for op in ops[1:]):
        return None

    def cat(values: Sequence[Any]) -> np.ndarray:
        return np.concatenate([as_rows(v, n) for v in values])

    return Op(
        ops[0].name,
        ops[0].kind,
        ops[0].block,
        cat([op.count for op in ops]),
        cat([op.flops for op in ops]),
        cat([op.bytes for op in ops]),
        {k: cat([op.dims[k] for op in ops]) for k in ops[0].dims},
    )


def _rows_of(v: Any, sl: slice) -> Any:
    return v[sl] if ndim_of(v) else v


def split_price(price: L1Price | None, k: int, n: int) -> list[L1Price | None]:
    """A stacked operator's price as the prices of its k operators of n rows each."""
    if price is None:
        return [None] * k
    shape = (k * n,)
    misses = {
        key: RangeMiss(*(as_shape(a, shape) for a in (m.excess, m.value, m.bound)))
        for key, m in (price.misses or {}).items()
    }
    out: list[L1Price | None] = []
    for i in range(k):
        sl = slice(i * n, (i + 1) * n)
        out.append(
            L1Price(
                price.latency_s[sl],
                None if price.power_w is None else _rows_of(price.power_w, sl),
                None if price.out_of_range is None else _rows_of(price.out_of_range, sl),
                price.model,
                None
                if price.misses is None
                else {
                    key: RangeMiss(m.excess[sl], m.value[sl], m.bound[sl])
                    for key, m in misses.items()
                },
                None if price.model_rows is None else price.model_rows[sl],
            )
        )
    return out


def _row_wise(adapter: Callable[..., L1Price | None]) -> StackedAdapter:
    """A row-wise adapter that reads only the operator and the batch's engine (not the rest of
    the phase's context), stacked."""

    def stacked(
        artifact: Artifact, items: Sequence[tuple[Op, Mapping[str, Any]]], gpu: GPU, n: int
    ) -> list[L1Price | None]:
        op = stack_ops([o for o, _ in items], n)
        if op is None:
            return [adapter(artifact, o, gpu, ctx) for o, ctx in items]
        # the batch's engine only (one Pricer: the same in every phase's context)
        ctx = {"engine": items[0][1].get("engine")}
        return split_price(adapter(artifact, op, gpu, ctx), len(items), n)

    return stacked


def price_layer_ops(
    artifact: Artifact, items: Sequence[tuple[Op, Mapping[str, Any]]], gpu: GPU, n: int
) -> list[L1Price | None]:
    """Norms, RoPE, activations, residual adds and the embedding of both phases in one call of
    the layer-op model (as `adapters.price_layer_op` prices each: the same inputs per row,
    row blocks past the measured elements, the model's range check, power from the table)."""
    out: list[L1Price | None] = [None] * len(items)
    names = artifact.names("layer_op")
    live = [
        i
        for i, (op, ctx) in enumerate(items)
        if op.name in LAYER_OP_OF and ctx.get("cols") is not None
    ]
    if not names or not live:
        return out
    model = artifact.model(names[0])
    if not hasattr(model, "range_misses"):  # a model class without its own range check
        return [price_layer_op(artifact, op, gpu, ctx) for op, ctx in items]
    cols = items[live[0]][1]["cols"]  # one Pricer: the same configurations in every phase
    k = len(live)
    vops = [LAYER_OP_OF[items[i][0].name] for i in live]
    vop = np.repeat(np.array(vops), n)
    tokens = np.concatenate(
        [as_rows(np.asarray(items[i][1]["tokens"], dtype=float), n) for i in live]
    )

    def tile(a: np.ndarray) -> np.ndarray:  # np.tile of a column, as one C call
        return np.concatenate([a] * k)

    gated = tile(np.asarray(cols["gated_mlp"]) & (np.asarray(cols["norm"]) == "rmsnorm"))
    arrays = {
        "num_tokens": tokens,
        **{
            c: tile(np.asarray(cols[c]).astype(float))
            for c in ("d_model", "n_heads", "n_kv_heads", "d_ff", "tensor_parallel")
        },
    }
    # the rows' widths once, for the blocks, the model and its range check
    width = None
    if isinstance(model, LayerOpModel):  # its predict and range check take the widths
        width = op_geometry(vop, {**arrays, "gated_mlp": gated})[1]
    blocks = _layer_row_blocks(model, vop, gated, arrays, width)
    if blocks is not None:
        arrays["num_tokens"] = np.ceil(tokens / blocks)
    geometry = {} if width is None else {"width": width}
    res = model.predict(op=vop, gated_mlp=gated, **geometry, **arrays)
    lat = np.asarray(res["latency_s"], dtype=float)
    if blocks is not None:
        lat = lat * blocks
    covered = np.asarray(res.get("covered", np.ones(k * n, bool)), dtype=bool)
    all_misses = model.range_misses(vop, gated, **geometry, **arrays)
    shape = (k * n,)
    all_misses = {
        key: RangeMiss(*(as_shape(a, shape) for a in (m.excess, m.value, m.bound)))
        for key, m in all_misses.items()
    }
    power = op_power_w(
        artifact,
        Op("layer_ops", "elementwise", "", np.ones(k * n),
           np.concatenate([as_rows(items[i][0].flops, n) for i in live]),
           np.concatenate([as_rows(items[i][0].bytes, n) for i in live])),
        gpu,
        lat,
    )  # fmt: skip
    every_covered = bool(covered.all())
    inside = np.zeros(n, dtype=bool)  # shared by the operators without a miss (never written)
    # per miss, which operators (blocks of n rows) it touches: one reduction, not one per op
    touches = {key: m.outside.reshape(k, n).any(axis=1).tolist() for key, m in all_misses.items()}
    for p, i in enumerate(live):
        op = items[i][0]
        sl = slice(p * n, (p + 1) * n)
        misses = {
            key: RangeMiss(m.excess[sl], m.value[sl], m.bound[sl])
            for key, m in all_misses.items()
            if touches[key][p]
        }
        oor = inside
        if misses:
            oor = np.zeros(n, dtype=bool)
            for m in misses.values():
                oor |= m.outside
        t = lat[sl]
        if every_covered:
            out[i] = L1Price(t, None if power is None else power[sl], oor, names[0], misses)
            continue
        cov = covered[sl]
        if not cov.any():
            continue
        if cov.all():
            p_w = None if power is None else power[sl]
        else:  # no such operator family in the model: the roofline there, flagged
            t_roof = roofline_s(
                op.flops, op.bytes, gpu.peak_bf16_flops_per_s, gpu.hbm_bw_bytes_per_s
            )
            t = np.where(cov, t, t_roof + LAUNCH_S)
            p_w = op_power_w(artifact, op, gpu, t)
            out[i] = L1Price(t, p_w, oor, f"{names[0]}+roofline", misses, (~cov).astype(np.int8))
            continue
        out[i] = L1Price(t, p_w, oor, names[0], misses)
    return out


# Adapter kind -> its stacked form; kinds that share an adapter share a stack.
STACKED: dict[str, StackedAdapter] = {
    "gemm": _row_wise(price_gemm),
    "allreduce": _row_wise(price_allreduce),
    "moe": _row_wise(price_moe),
    "elementwise": price_layer_ops,
    "embedding": price_layer_ops,
}
