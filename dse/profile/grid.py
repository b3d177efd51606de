"""Which shapes a profile measures: one list of shape dicts per op family.

Three sizes: `full` (the regimes and the catalogue models' shapes, hours on a GPU), `quick`
(a few minutes on a GPU) and `tiny` (what `--quick` means on a CPU: well under a minute). Each
axis is a short geometric list; `offset=1` replaces every axis by the geometric midpoints of
its neighbours (rounded to a multiple of 8 above 8), so a second run measures shapes the first
one did not (`dse validate --data` on it scores the fitted artifact off its grid).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

from dse.errors import ConfigError

OPS: tuple[str, ...] = ("gemm", "attention", "moe", "layer_ops", "allreduce")
LEVELS: tuple[str, ...] = ("tiny", "quick", "full")

# Routings of the MoE tokens over experts (names as aiconfigurator's `distribution` column):
# balanced = round robin over experts (min(E, T*k) experts touched, as aiconfigurator's
# "balanced"), uniform = each (token, slot) draws an expert uniformly (seeded), power_law_1.2 =
# expert e drawn with probability proportional to (e+1)^-1.2 (a skewed router).
ROUTINGS: tuple[str, ...] = ("balanced", "uniform", "power_law_1.2")

Shape = dict[str, Any]


def _mid(values: Sequence[int]) -> list[int]:
    """Geometric midpoints of neighbouring grid values, rounded (to 8 above 8), deduplicated."""
    out: list[int] = []
    for a, b in itertools.pairwise(sorted(values)):
        g = math.sqrt(a * b)
        v = int(round(g / 8.0) * 8) if g > 8 else round(g)
        if a < v < b and v not in out:
            out.append(v)
    return out or list(values)


def _axis(values: Sequence[int], offset: int) -> list[int]:
    return list(values) if offset == 0 else _mid(values)


# ---------------------------------------------------------------------------- axes per level
# GEMM: m = tokens (1 .. 16k spans the latency floor, memory-bound, wave-quantised and
# compute-bound regimes); (n, k) = the projection widths of the catalogue models (4096 and 8192
# classes, their FFN widths, GQA QKV widths) plus small ones for the floor.
_GEMM = {
    "tiny": {"m": [1, 8, 64, 256], "nk": [64, 256, 512]},
    "quick": {"m": [1, 4, 16, 64, 256, 1024, 4096], "nk": [1024, 2048, 4096, 8192, 14336]},
    "full": {
        "m": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384],
        "nk": [128, 256, 512, 1024, 2048, 3072, 4096, 5120, 6144, 8192, 10240, 14336, 28672],
    },
}
# Attention: batch, sequence (prefill) or cached tokens (decode), query heads, GQA ratio,
# head_dim. The tiny grid still has >= 200 rows per kind (the fit's minimum per table).
_ATTN = {
    "tiny": {
        "batch": [1, 2, 4],
        "isl": [16, 32, 64, 128],
        "kv_len": [16, 64, 256, 512],
        "heads": [1, 2, 4, 8],
        "gqa": [1, 2, 4],
        "head_dim": [32, 64],
    },
    "quick": {  # >= 200 rows per kind, no call above a few ms on a Hopper-class GPU
        "batch": [1, 4, 16],
        "isl": [128, 512, 2048],
        "kv_len": [128, 1024, 4096, 16384],
        "heads": [8, 16, 32, 64],
        "gqa": [1, 4, 8],
        "head_dim": [64, 128],
    },
    "full": {
        "batch": [1, 2, 4, 8, 16, 32, 64, 128, 256],
        "isl": [16, 64, 256, 512, 1024, 2048, 4096, 8192, 16384],
        "kv_len": [16, 64, 256, 1024, 2048, 4096, 8192, 16384, 32768, 65536],
        "heads": [4, 8, 16, 32, 40, 64, 96],
        "gqa": [1, 2, 4, 8],
        "head_dim": [64, 128, 256],
    },
}
_MOE = {
    "tiny": {
        "tokens": [1, 4, 16, 32, 64, 128, 256],
        "hidden": [64, 128],
        "inter": [64, 128],
        "topk_experts": [(1, 4), (2, 4), (2, 8), (4, 8)],
    },
    "quick": {
        "tokens": [1, 4, 16, 32, 64, 256, 1024, 2048, 4096],
        "hidden": [2048, 4096],
        "inter": [1024, 2048],
        "topk_experts": [(2, 8), (4, 32), (8, 64)],
    },
    "full": {
        "tokens": [1, 4, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384],
        "hidden": [2048, 4096, 5120, 7168],
        "inter": [768, 1536, 2048, 8192, 14336],
        "topk_experts": [(1, 8), (2, 8), (4, 64), (8, 64), (8, 128), (8, 256)],
    },
}
# Layer ops: tokens x the catalogue models' widths (d_model, heads, KV heads, d_ff).
_LAYER_MODELS = {
    "tiny": [
        {"model": "tiny-a", "d_model": 64, "n_heads": 4, "n_kv_heads": 2, "d_ff": 256},
        {"model": "tiny-b", "d_model": 256, "n_heads": 8, "n_kv_heads": 8, "d_ff": 512},
    ],
    "quick": [
        {"model": "dense-4096", "d_model": 4096, "n_heads": 32, "n_kv_heads": 8, "d_ff": 14336},
        {"model": "dense-8192", "d_model": 8192, "n_heads": 64, "n_kv_heads": 8, "d_ff": 28672},
    ],
    "full": [
        {"model": "dense-2048", "d_model": 2048, "n_heads": 16, "n_kv_heads": 8, "d_ff": 8192},
        {"model": "dense-4096", "d_model": 4096, "n_heads": 32, "n_kv_heads": 8, "d_ff": 14336},
        {"model": "dense-5120", "d_model": 5120, "n_heads": 40, "n_kv_heads": 8, "d_ff": 13824},
        {"model": "dense-8192", "d_model": 8192, "n_heads": 64, "n_kv_heads": 8, "d_ff": 28672},
    ],
}
_LAYER_TOKENS = {
    "tiny": [1, 8, 32, 128, 512],
    "quick": [1, 16, 128, 1024, 4096],
    "full": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384],
}
# All-reduce message sizes in elements (bf16: x2 bytes): 1 Ki .. 256 Mi elements.
_ALLREDUCE = {
    "tiny": [1024, 65536],
    "quick": [2**e for e in range(10, 27, 4)],
    "full": [2**e for e in range(10, 29)],
}


def check_ops(ops: Sequence[str]) -> list[str]:
    """The op families asked for, in `OPS` order; an unknown one is a ConfigError."""
    bad = [o for o in ops if o not in OPS]
    if bad:
        raise ConfigError(f"unknown op(s) {', '.join(bad)}; valid ops: {', '.join(OPS)}")
    if not ops:
        raise ConfigError(f"no op asked for; valid ops: {', '.join(OPS)}")
    return [o for o in OPS if o in ops]


def gemm_shapes(level: str, offset: int = 0) -> list[Shape]:
    g = _GEMM[level]
    ms, nks = _axis(g["m"], offset), _axis(g["nk"], offset)
    return [{"m": m, "n": n, "k": k} for n in nks for k in nks for m in ms]


def _attention_shapes(level: str, offset: int, length: str) -> list[Shape]:
    """Batch x one length axis (`length`: the prompt `isl` of a prefill, the `kv_len` of a
    decode step) x heads x GQA ratio x head_dim; ratios that do not divide the head count are
    skipped."""
    a = _ATTN[level]
    out = []
    for b, n, h, r, d in itertools.product(
        _axis(a["batch"], offset),
        _axis(a[length], offset),
        a["heads"],
        a["gqa"],
        a["head_dim"],
    ):
        if h % r == 0:
            out.append(
                {"batch_size": b, length: n, "num_heads": h, "num_kv_heads": h // r, "head_dim": d}
            )
    return out


def context_attention_shapes(level: str, offset: int = 0) -> list[Shape]:
    return _attention_shapes(level, offset, "isl")


def generation_attention_shapes(level: str, offset: int = 0) -> list[Shape]:
    return _attention_shapes(level, offset, "kv_len")


def moe_shapes(level: str, offset: int = 0) -> list[Shape]:
    g = _MOE[level]
    return [
        {
            "num_tokens": t,
            "hidden_size": hs,
            "inter_size": i,
            "topk": k,
            "num_experts": e,
            "distribution": dist,
        }
        for t, hs, i, (k, e), dist in itertools.product(
            _axis(g["tokens"], offset), g["hidden"], g["inter"], g["topk_experts"], ROUTINGS
        )
    ]


def layer_op_shapes(level: str, offset: int = 0) -> list[Shape]:
    return [
        {**model, "num_tokens": t}
        for model in _LAYER_MODELS[level]
        for t in _axis(_LAYER_TOKENS[level], offset)
    ]


def allreduce_shapes(level: str, offset: int = 0) -> list[Shape]:
    return [{"message_elements": n} for n in _axis(_ALLREDUCE[level], offset)]


# measurement table -> (op family, shape list)
TABLES: dict[str, tuple[str, Any]] = {
    "gemm": ("gemm", gemm_shapes),
    "context_attention": ("attention", context_attention_shapes),
    "generation_attention": ("attention", generation_attention_shapes),
    "moe": ("moe", moe_shapes),
    "layer_op": ("layer_ops", layer_op_shapes),
    "allreduce": ("allreduce", allreduce_shapes),
}


def plan(
    ops: Sequence[str], dtypes: Sequence[str], level: str, offset: int
) -> list[tuple[str, str, Shape]]:
    """Every (table, dtype, shape) to measure, in order. Layer ops and all-reduce run in the
    first dtype only (vidur's layer ops are one precision; all-reduce moves bf16)."""
    if level not in LEVELS:
        raise ConfigError(f"unknown grid level {level!r}; valid: {', '.join(LEVELS)}")
    if offset not in (0, 1):
        raise ConfigError(f"--offset must be 0 or 1, got {offset}")
    out: list[tuple[str, str, Shape]] = []
    for table, (family, shapes) in TABLES.items():
        if family not in ops:
            continue
        these = dtypes[:1] if family in ("layer_ops", "allreduce") else dtypes
        for dtype in these:
            out += [(table, dtype, s) for s in shapes(level, offset)]
    return out


def shape_key(table: str, dtype: str, shape: Shape) -> str:
    """A stable key of one measurement (what the journal is keyed by when resuming)."""
    parts = ",".join(f"{k}={shape[k]}" for k in sorted(shape))
    return f"{table}|{dtype}|{parts}"
