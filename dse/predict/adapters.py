"""Level-1 adapters: price `dse.predict.ops.Op`s with the fitted operator models of an artifact.

Each adapter takes (artifact, op, gpu) and returns an `L1Price` (seconds per call, optional
board power, out-of-range flags, model name), or None when the artifact has no model for the
operator (the pricer then uses the roofline and says so). `ADAPTERS` at the end of the file
maps each `Op.kind` to its adapter (an explicit table; nothing registers on import). Two things keep them fast on batches of 10^5 configurations:

- shapes repeat (a sweep draws from grids): each model is evaluated once per distinct shape
  (`dse.predict._rows.unique_rows`) and the results are scattered back;
- power is the artifact's power model at each operator's utilisations and duration
  (`dse.predict.op_power.op_power_w`), run once per group of rows that share them.

One file (~840 lines) on purpose: one adapter per kernel family (GEMM, attention, MoE, all-
reduce, MLA, linear layers) over one model lookup (`PREFER`, `_find_model`) and one range-miss
plumbing, and `ADAPTERS` maps every kind in one table.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from dse._same import all_equal, equals
from dse.errors import ArtifactError
from dse.models.artifact import Artifact
from dse.models.base import RangeMiss, all_finite, as_shape, broadcast_shape
from dse.predict import op_power
from dse.predict._rows import (
    BLOCK_ROWS,
    DEDUPE_MIN_ROWS,
    Groups,
    at_rows,
    column_blocks,
    dedupe,
    evaluate_rows,
    ndim_of,
    row_blocks,
    shape_of,
)
from dse.predict.op_power import op_power_w
from dse.predict.ops import ROUND_ROBIN, Op
from dse.roofline import LAUNCH_S, roofline_s
from dse.spec.arch import sliding_keys_sum
from dse.spec.hardware import GPU

if TYPE_CHECKING:
    from dse.models.gemm import GemmModel


@dataclass
class L1Price:
    """Level-1 price of one operator call: time, optional power, and where it came from."""

    latency_s: np.ndarray
    power_w: np.ndarray | None = None
    out_of_range: np.ndarray | None = None
    model: str = "roofline"
    # Input name -> how far it lies outside the pricing model's fitted range (only inputs that
    # leave it somewhere); `out_of_range` is where any of them does.
    misses: dict[str, RangeMiss] | None = None
    # Which of the models in `model` ("a+b") priced each row: an index into model.split("+"),
    # per row of latency_s's last axis; None when `model` is one name, or every row used all.
    model_rows: np.ndarray | None = None


# kind -> adapter(artifact, op, gpu, ctx) -> L1Price | None (None: no model covers this op).
# ctx: "cols" (the configuration columns the operators were built from), "phase", "tokens"
# (tokens per forward pass per GPU: batch x prompt for prefill, batch for decode).
Level1Adapter = Callable[[Artifact, Op, GPU, Mapping[str, Any]], L1Price | None]
# The configuration columns an adapter may read from ctx["cols"] (the layer-op model's sizes)
# and those "tokens" is made of: the pricer prices a phase once per distinct row of these and of
# the operators' own arrays (`dse.predict.pricing.Pricer.price_phases`), so an adapter that reads
# another column must add it here (tests/predict/test_shape_dedup.py checks what they read).
CTX_COLUMNS: tuple[str, ...] = (
    "gated_mlp",
    "norm",
    "d_model",
    "n_heads",
    "n_kv_heads",
    "d_ff",
    "tensor_parallel",
    "batch_size",
    "prompt_tokens",
    # the linear-layer adapter's model per row; the other adapters take the batch's engine
    # (ctx["engine"], `Pricer.engine`, read from this column)
    "engine",
)

GEMM_ENGINE = "vllm"  # kernel tables of this engine price GEMMs when the artifact has several
# Engines whose configurations are priced by their own kernel tables (GEMM, attention, MoE, MLA,
# all-reduce) wherever the artifact has one of the kind (`OWN_PREFER`), else by the default
# tables above (vLLM's), as every other engine's are. TensorRT-LLM keeps vLLM's tables on
# purpose: Level 3 was fitted on its end-to-end rows priced that way (docs/accuracy.md). The
# pricer prices such an engine's configurations apart from the rest (`Pricer.engine`: one
# engine per batch, `dse.predict.request.predict_columns` splits a mixed one) and passes it to
# the adapters as ctx["engine"].
OWN_TABLE_ENGINES: tuple[str, ...] = ("sglang",)


def table_engine(ctx: Mapping[str, Any] | None) -> str | None:
    """The engine whose own tables price this call (ctx["engine"]), None: the default tables."""
    if ctx is None:
        return None
    engine = ctx.get("engine")
    return engine if engine in OWN_TABLE_ENGINES else None


def gemm_engine(names: Any, dtype: str, engine: str | None) -> str:
    """The engine whose GEMM table prices `dtype`: `engine`'s where the artifact (its model
    `names`) has that engine's table of the dtype, else GEMM_ENGINE (as `Gemm.choose` then
    looks further: a fallback dtype, the sibling chip's table)."""
    if engine is not None:
        from dse.predict.gemm_choice import model_name

        if model_name(engine, dtype) in names:
            return engine
    return GEMM_ENGINE


# ---------------------------------------------------------------------------- GEMM
def price_gemm(
    artifact: Artifact, op: Op, gpu: GPU, ctx: Mapping[str, Any] | None = None
) -> L1Price | None:
    """GEMMs by (m, n, k, dtype) with the artifact's GEMM models (vLLM tables by default); a
    dtype the artifact has no table for is priced with the sibling chip's table where it has
    one (`dse.predict.gemm_choice.Gemm.choose`: H200 per-tensor fp8 by H100's, times moved by the
    roofline ratio), and the model name then carries `@<sibling gpu>`.

    A GEMM wider than the table's n (an LM head of Llama-3's 128,256 vocabulary against
    n <= 65,536) is priced as `column_blocks` GEMMs of equal width inside the table, summed:
    what a column-split GEMM costs, read from measured shapes instead of extrapolated. One
    taller than the table's m (a prefill of more tokens than measured) is priced as
    `row_blocks` GEMMs of equal height the same way."""
    if not artifact.names("gemm"):
        return None
    from dse.predict.gemm_choice import Gemm, borrowed

    g = Gemm.shared(artifact)
    m, n, k = (np.asarray(op.dims[x], dtype=float) for x in ("m", "n", "k"))
    if not m.shape == n.shape == k.shape:  # (as they are when their shapes agree, as there)
        m, n, k = np.broadcast_arrays(m, n, k)
    dtypes = as_shape(op.dims["dtype"], m.shape)
    lat = np.empty(m.shape)
    power = np.empty(m.shape)
    oor = np.zeros(m.shape, dtype=bool)
    misses: dict[str, RangeMiss] = {}
    used = []
    which = np.zeros(m.shape, dtype=np.int8)
    kinds = dtypes[:1] if all_equal(dtypes) else np.unique(dtypes)  # (one flat byte comparison)
    own = table_engine(ctx)
    engine_of = {str(dt): gemm_engine(g.names, str(dt), own) for dt in kinds}
    try:
        chosen = {str(dt): g.choose(str(dt), engine_of[str(dt)]) for dt in kinds}
    except ArtifactError:
        # a dtype no table of this chip (or its sibling) prices, e.g. fp8 weights on an artifact
        # fitted with bf16 GEMMs only: the roofline prices the operator, flagged in
        # `roofline_ops`, instead of the whole prediction failing
        return None
    for dt in kinds:
        sel = slice(None) if len(kinds) == 1 else dtypes == dt
        which[sel] = len(used)
        ch = chosen[str(dt)]
        model = ch.model()
        if ch.borrowed:  # the sibling chip's table, moved to this GPU (as Gemm.predict does)
            host = g.power_host(str(dt), engine_of[str(dt)])

            def call(a, b, c, mdl=model, ch=ch, d=str(dt), host=host):
                return _latency_power(borrowed(mdl.predict(a, b, c), ch, d, (a, b, c), host))
        else:

            def call(a, b, c, mdl=model):
                return _gemm_call(mdl, a, b, c)

        rng = ch.artifact.manifest["models"][ch.name].get("fitted_range", {})
        blocks, n_block = column_blocks(n[sel], rng.get("n", (0.0, np.inf))[1])
        # more rows (tokens) than the table: row blocks of equal height inside it
        rows = row_blocks(m[sel], rng.get("m", (0.0, np.inf))[1])
        m_block = np.ceil(m[sel] / rows)
        res = dedupe(call, m_block, n_block, k[sel])
        lat[sel] = res["latency_s"] * (blocks * rows)
        power[sel] = res["power_w"]  # every block has the same shape: the same power
        part = ch.artifact.range_misses(ch.name, m=m_block, n=n_block, k=k[sel])
        for key, miss in part.items():
            _put_miss(misses, key, miss, sel, m.shape)
            oor[sel] |= miss.outside
        used.append(ch.label)
    return L1Price(lat, power, oor, "+".join(used), misses, which if len(used) > 1 else None)


def _put_miss(
    misses: dict[str, RangeMiss],
    key: str,
    miss: RangeMiss,
    sel: Any,
    shape: tuple[int, ...],
) -> None:
    """Write a miss computed on rows `sel` into the full-shape miss of `key` (inside elsewhere)."""
    if isinstance(sel, slice):
        misses[key] = miss if key not in misses else misses[key].worse(miss)
        return
    cur = misses.get(key) or RangeMiss(np.zeros(shape), np.zeros(shape), np.zeros(shape))
    e, v, b = (np.array(np.broadcast_to(a, shape)) for a in (cur.excess, cur.value, cur.bound))
    e[sel], v[sel], b[sel] = miss.excess, miss.value, miss.bound
    misses[key] = RangeMiss(e, v, b)


def _latency_power(out: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {"latency_s": out["latency_s"], "power_w": out["power_w"]}


def _gemm_call(
    model: GemmModel, m: np.ndarray, n: np.ndarray, k: np.ndarray
) -> dict[str, np.ndarray]:
    """Latency and power of one GEMM model: `GemmModel.predict` itself, the function `dse
    validate` scores (power at the call's utilisations and duration, times the measured-power
    residual where the model has one). The model is the artifact's cached instance, shared by
    every caller: it is read, never changed. A model with `latency_power` (GemmModel's
    predict without its other items, the same numbers) is asked for those two alone."""
    lean = getattr(model, "latency_power", None)
    if lean is not None:
        return lean(m, n, k)
    out = model.predict(m, n, k)
    return {"latency_s": out["latency_s"], "power_w": out["power_w"]}


# ---------------------------------------------------------------------------- layer operators
# dse.predict.ops operator name -> vidur operator the layer-op model was fitted on.
LAYER_OP_OF: dict[str, str] = {
    "norm/input": "input_layernorm",
    "norm/post_attention": "post_attention_layernorm",
    "norm/final": "input_layernorm",
    "attention/rope": "attn_rope",
    "ffn/act": "mlp_act",
    "residual/attention": "add",
    "residual/ffn": "add",
    "embedding": "emb",
}


# The inputs each vidur layer operator's time depends on (see dse.models.layer_ops).
LAYER_OP_INPUTS: dict[str, tuple[str, ...]] = {
    "input_layernorm": ("num_tokens", "d_model", "tensor_parallel"),
    "post_attention_layernorm": ("num_tokens", "d_model", "tensor_parallel"),
    "add": ("num_tokens", "d_model", "tensor_parallel"),
    "emb": ("num_tokens", "d_model", "tensor_parallel"),
    "attn_rope": ("num_tokens", "d_model", "n_heads", "n_kv_heads", "tensor_parallel"),
    "mlp_act": ("num_tokens", "d_ff", "tensor_parallel"),
}


def price_layer_op(
    artifact: Artifact, op: Op, gpu: GPU, ctx: Mapping[str, Any] | None = None
) -> L1Price | None:
    """Norms, RoPE, activation, residual adds and the embedding by the layer-op model (vidur's
    per-operator rows), with the configuration's sizes."""
    names = artifact.names("layer_op")
    vidur_op = LAYER_OP_OF.get(op.name)
    if not names or vidur_op is None or ctx is None or ctx.get("cols") is None:
        return None
    cols, tokens = ctx["cols"], np.asarray(ctx["tokens"], dtype=float)
    model = artifact.model(names[0])
    # Operators priced as the same vidur operator (the three norms' input_layernorm, both
    # residual adds) share the model's times within a phase: the inputs are the same.
    cache = ctx.get("cache")
    hit = None if cache is None else cache.get(("layer_op", vidur_op))
    if hit is None:
        hit = _layer_op_times(model, vidur_op, cols, tokens, cache)
        gated, arrays = hit.pop("gated"), hit.pop("arrays")
        hit["misses"] = hit["oor"] = None  # no range flag read (the pricer's `flags`)
        if ctx.get("flags", True):
            hit["misses"] = _layer_op_misses(
                artifact, names[0], model, vidur_op, gated, arrays, hit["width"]
            )
            hit["oor"] = _any_outside(hit["misses"], tokens.shape)
        if cache is not None:
            cache[("layer_op", vidur_op)] = hit
    if not hit["covered"].any():
        return None
    # Not covered (no such operator family in the model): the roofline, flagged below.
    lat = hit["latency_s"]
    if not hit["covered"].all():
        t_roof = roofline_s(op.flops, op.bytes, gpu.peak_bf16_flops_per_s, gpu.hbm_bw_bytes_per_s)
        lat = np.where(hit["covered"], lat, t_roof + LAUNCH_S)
        return L1Price(
            lat,
            op_power_w(artifact, op, gpu, lat),
            hit["oor"],
            f"{names[0]}+roofline",
            hit["misses"],
            (~hit["covered"]).astype(np.int8),
        )
    # The same FLOPs and bytes as the operator that filled the cache (both residual adds,
    # input and final norm): the same power.
    same = hit.get("power_of")
    if same is not None and all(
        np.array_equal(np.asarray(a), np.asarray(b))
        for a, b in ((same[0], op.flops), (same[1], op.bytes))
    ):
        return L1Price(lat, same[2], hit["oor"], names[0], hit["misses"])
    power = op_power_w(artifact, op, gpu, lat, groups=hit["groups"])
    hit["power_of"] = (op.flops, op.bytes, power)
    return L1Price(lat, power, hit["oor"], names[0], hit["misses"])


def _layer_op_inputs(
    cols: Mapping[str, np.ndarray], tokens: np.ndarray, cache: dict[Any, Any] | None
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(gated, the model's input arrays) of a phase's layer operators, made once per phase
    (the phase's cache) and shared by its six vidur operators."""
    shared = None if cache is None else cache.get(("layer_op", "inputs"))
    if shared is None:
        # LayerNorm models are not gated in vidur's sense either: both use the non-gated family
        # where the model has one (phi-2), the gated one otherwise.
        gated = cols["gated_mlp"] & equals(cols["norm"], "rmsnorm")
        arrays = {
            "num_tokens": tokens,
            "d_model": cols["d_model"].astype(float),
            "n_heads": cols["n_heads"].astype(float),
            "n_kv_heads": cols["n_kv_heads"].astype(float),
            "d_ff": cols["d_ff"].astype(float),
            "tensor_parallel": cols["tensor_parallel"].astype(float),
        }
        shared = (gated, arrays)
        if cache is not None:
            cache[("layer_op", "inputs")] = shared
    return shared[0], dict(shared[1])


def _layer_op_times(
    model: Any,
    vidur_op: str,
    cols: Mapping[str, np.ndarray],
    tokens: np.ndarray,
    cache: dict[Any, Any] | None,
) -> dict[str, Any]:
    """One vidur operator's latency and coverage per configuration, each distinct shape priced
    once; with the rows' groups, widths, gated flags and inputs (as priced: row blocks)."""
    from dse.models.layer_ops import LayerOpModel, op_geometry

    gated, arrays = _layer_op_inputs(cols, tokens, cache)
    # the rows' widths once, for the row blocks, the model and its range check
    width = None
    if isinstance(model, LayerOpModel):
        width = op_geometry(np.asarray(vidur_op), {**arrays, "gated_mlp": gated})[1]
    # More elements than the model measured (a 16k-token prefill of a 14k-wide activation):
    # priced as row blocks of equal tokens inside the measured elements, summed.
    blocks = _layer_row_blocks(model, vidur_op, gated, arrays, width)
    if blocks is not None:
        arrays["num_tokens"] = np.ceil(tokens / blocks)
    # Only these inputs change this operator's time; the others are held at any row's value
    # so that the model runs once per distinct shape of *this* operator.
    relevant = LAYER_OP_INPUTS.get(vidur_op, tuple(arrays))
    # the norms, adds and embedding of a phase read the same inputs: their groups once
    shared = None if cache is None else cache.get(("layer_op", "groups", relevant))
    if shared is not None and np.array_equal(shared[0], arrays["num_tokens"]):
        groups = shared[1]
    else:
        keys = [np.rint(arrays[k]).astype(np.int64) for k in relevant] + [gated.astype(np.int64)]
        groups = Groups.of(keys)
        if cache is not None:
            cache[("layer_op", "groups", relevant)] = (arrays["num_tokens"], groups)

    def run(idx: tuple[np.ndarray, ...]) -> dict[str, np.ndarray]:
        m = len(idx[0])
        # the relevant inputs at these rows, the others held at the first row's value
        kw = {k: arrays[k][idx] if k in relevant else np.full(m, a[0]) for k, a in arrays.items()}
        if width is not None:  # the widths of these rows (of the relevant inputs alone)
            kw["width"] = width[idx]
        res = model.predict(op=vidur_op, gated_mlp=gated[idx], **kw)
        covered = np.asarray(res.get("covered", np.ones(m, bool)), dtype=bool)
        return {"latency_s": np.asarray(res["latency_s"], dtype=float), "covered": covered}

    # One call: the model's per-call cost (string op lookups) does not shrink with blocks.
    hit: dict[str, Any] = evaluate_rows(run, groups, tokens.shape, block=None)
    if blocks is not None:
        hit["latency_s"] = hit["latency_s"] * blocks
    hit.update(groups=groups, width=width, gated=gated, arrays=arrays)
    return hit


def _layer_row_blocks(
    model: Any,
    vidur_op: str | np.ndarray,
    gated: np.ndarray,
    arrays: Mapping[str, np.ndarray],
    width: np.ndarray | None = None,
) -> np.ndarray | None:
    """Row blocks per configuration (`row_blocks` of the elements against the most the model
    measured), or None when every configuration fits in one. `width`: the rows' widths
    (`op_geometry`), when the caller has them."""
    rng = getattr(model, "range_", {})
    if "elements" not in rng:
        return None
    if width is None:
        from dse.models.layer_ops import op_geometry

        width = op_geometry(np.asarray(vidur_op), {**arrays, "gated_mlp": gated})[1]
    e = np.asarray(arrays["num_tokens"], dtype=float) * width
    if e.max() <= rng["elements"][1]:
        return None
    return row_blocks(e, rng["elements"][1])


def _any_outside(misses: Mapping[str, RangeMiss], shape: tuple[int, ...]) -> np.ndarray:
    out = np.zeros(shape, dtype=bool)
    for m in misses.values():
        out |= m.outside
    return out


def _layer_op_misses(
    artifact: Artifact,
    name: str,
    model: Any,
    vidur_op: str,
    gated: np.ndarray,
    arrays: Mapping[str, np.ndarray],
    width: np.ndarray | None = None,
) -> dict[str, RangeMiss]:
    """The layer-op model's own range check (width, elements, tp: `range_misses`), or the
    per-input box of its manifest for a model class without one. `width`: the rows' widths
    (`op_geometry`), when the caller has them."""
    if hasattr(model, "range_misses"):
        geometry = {} if width is None else {"width": width}
        return model.range_misses(vidur_op, gated, **geometry, **arrays)
    return artifact.range_misses(name, **{k: arrays[k] for k in LAYER_OP_INPUTS[vidur_op]})


# ---------------------------------------------------------------------------- kernel tables
# Attention, fused MoE and all-reduce models are fitted on aiconfigurator's kernel tables and
# take the tables' column names as inputs (`model.predict(**arrays)`); an adapter finds the
# model by kind and passes the columns the model's signature or fitted range names.
KIND_CANDIDATES: dict[str, tuple[str, ...]] = {
    "attention_prefill": ("context_attention", "attention_context", "attention.context"),
    "attention_decode": ("generation_attention", "attention_generation", "attention.generation"),
    # the fused-kernel model (vLLM tables), the kernel-sum one (TensorRT-LLM tables) and one
    # model per kernel (SGLang's bf16 tables: `dse.models.moe_kernels`)
    "moe": ("moe", "moe_physics", "moe_kernels", "fused_moe"),
    "moe_4bit": ("moe", "moe_physics", "moe_kernels", "fused_moe"),
    "moe_nvfp4": ("moe", "moe_physics", "moe_kernels", "fused_moe"),
    "moe_fp8": ("moe", "moe_physics", "moe_kernels", "fused_moe"),
    "allreduce": ("allreduce", "all_reduce", "comm"),
    # latent attention (kind `attention_mla`) by phase: `price_mla`
    "attention_mla_prefill": ("context_mla",),
    "attention_mla_decode": ("generation_mla",),
}


# Preferred implementation of each kernel family, most preferred first (substrings of the
# model name): the vLLM tables (the engine most end-to-end rows use), CUDA-graph all-reduce.
PREFER: dict[str, tuple[str, ...]] = {
    "attention_prefill": ("vllm",),
    "attention_decode": ("vllm",),
    "moe": ("vllm.bfloat16", "vllm"),
    # 4-bit weights (int4: 0.5 bytes) run a weight-only 4-bit MoE kernel, bf16 activations:
    # vLLM's MXFP4 tables (H100: its gpt-oss Triton kernel, gpt-oss-20b's layout measured), else
    # its Marlin int4 one. At gpt-oss-20b's layout and 8-256 tokens the measured MXFP4 kernel
    # takes 0.33-0.40x the bf16 table's time (H100 vLLM; docs/accuracy.md "Serving on today's
    # engines"); an artifact without such a table prices them with the bf16 one.
    "moe_4bit": ("vllm.w4a16_mxfp4", "vllm.int4_wo"),
    # nvfp4 weights (0.5625 bytes; Blackwell only): vLLM's NVFP4 MoE kernel (FP4 tensor cores,
    # activations quantised to FP4 too); an artifact without that table prices them with bf16's.
    "moe_nvfp4": ("vllm.nvfp4",),
    # 1-byte weights (fp8, int8; "moe_fp8"): no default lookup, so vLLM and TensorRT-LLM
    # configurations keep the bf16 table: vLLM's fp8 MoE tables put ml-energy v3's H100 FP8 rows
    # (Qwen3-235B) 57% slow (per-tensor: H100's measured kernel, FlashInfer CUTLASS, takes ~2x
    # bf16's time) or 15% fast (fp8_block), the bf16 table 2% fast (experiments/
    # vllm_fp8_moe_routing.py); SGLang's own fp8_block table where the artifact has one (OWN_PREFER)
    "allreduce": ("vllm.custom.vllm_graph", "vllm.custom", "vllm", "nccl.nccl", "nccl"),
    # MLA: TensorRT-LLM's kernel tables (its MLA kernels are the ones the collector measured on
    # every GPU; SGLang's are TensorRT-LLM's on B200 and FlashAttention-3 on H100). vLLM has
    # module tables only (projections included), which the kernel models do not fit.
    "attention_mla_prefill": ("trtllm", "sglang"),
    "attention_mla_decode": ("trtllm", "sglang"),
}


# The own tables of an engine of OWN_TABLE_ENGINES, per lookup (substrings of the model name, most
# preferred first): a configuration of that engine takes the first the artifact has, else the
# default lookup (PREFER). SGLang's MoE of 16-bit weights is its bf16 table, of 8-bit weights its
# fp8_block table (block-scaled fp8: the only 8-bit MoE format SGLang's tables measured; an
# artifact without it: the bf16 one); its all-reduce its custom kernel (CUDA graph first), then
# NCCL, never another engine's.
OWN_PREFER: dict[str, dict[str, tuple[str, ...]]] = {
    "sglang": {
        "attention_prefill": ("sglang",),
        "attention_decode": ("sglang",),
        "moe": ("sglang.bfloat16",),
        "moe_4bit": ("sglang.w4a16_mxfp4", "sglang.int4_wo"),
        "moe_nvfp4": ("sglang.nvfp4",),
        "moe_fp8": ("sglang.fp8_block",),
        "allreduce": ("sglang.custom.sglang_graph", "sglang.custom"),
        "attention_mla_prefill": ("sglang",),
        "attention_mla_decode": ("sglang",),
    },
}


def _find_model(artifact: Artifact, op_kind: str, engine: str | None = None) -> str | None:
    """The artifact's model for an operator kind: `engine`'s own table (OWN_PREFER) where the
    artifact has one, else PREFER's first match; found once per artifact, kind and engine."""
    # an artifact being built gains models: the key holds how many it has
    key = (id(artifact), artifact.artifact_id, len(artifact.manifest["models"]), op_kind, engine)
    if key not in _FOUND:
        _FOUND[key] = _own_model(artifact, op_kind, engine) or _search_model(artifact, op_kind)
    return _FOUND[key]


_FOUND: dict[tuple[int, str, int, str, str | None], str | None] = {}


def _own_model(artifact: Artifact, op_kind: str, engine: str | None) -> str | None:
    """`engine`'s own model for an operator kind (OWN_PREFER's first match), or None."""
    prefs = OWN_PREFER.get(engine or "", {}).get(op_kind, ())
    if not prefs:
        return None
    names = sorted({n for kind in KIND_CANDIDATES.get(op_kind, ()) for n in artifact.names(kind)})
    for pref in prefs:
        hit = [n for n in names if pref in n]
        if hit:
            return hit[0]
    return None


# Lookups that take only a PREFER match (no fallback to another table of the kind)
STRICT_LOOKUPS = ("moe_4bit", "moe_nvfp4", "moe_fp8")
# The MoE lookup of a row by its weight bytes per element (dse.spec.choices: int4 0.5, nvfp4
# 0.5625, fp8 / int8 1.0, as `dse.predict.ops.gemm_dtype` prices their GEMMs by the fp8 tables);
# a lookup the artifact has no model for (moe_fp8 outside SGLang), and any other width, take the
# bf16 table (PREFER["moe"]).
MOE_BY_WEIGHT_BYTES: dict[float, str] = {0.5: "moe_4bit", 0.5625: "moe_nvfp4", 1.0: "moe_fp8"}


def _search_model(artifact: Artifact, op_kind: str) -> str | None:
    # the names of every candidate kind together: PREFER then picks among classes too (the MoE
    # tables of one artifact are of two kinds, `dse.fitting.moe.model_class_of`)
    names = sorted({n for kind in KIND_CANDIDATES.get(op_kind, ()) for n in artifact.names(kind)})
    if not names:
        return None
    for pref in PREFER.get(op_kind, ()):
        hit = [n for n in names if pref in n]
        if hit:
            return hit[0]
    return None if op_kind in STRICT_LOOKUPS else names[0]


_ACCEPTS: dict[int, tuple[Any, frozenset[str] | None]] = {}


def _accepted(model: Any) -> frozenset[str] | None:
    """Keyword inputs model.predict accepts (None: any, it takes **kwargs); cached per model."""
    hit = _ACCEPTS.get(id(model))
    if hit is None or hit[0] is not model:
        import inspect

        params = inspect.signature(model.predict).parameters
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            hit = (model, None)
        else:
            hit = (model, frozenset(params))
        _ACCEPTS[id(model)] = hit
    return hit[1]


def _kernel_price(
    artifact: Artifact,
    op: Op,
    gpu: GPU,
    arrays: dict[str, np.ndarray],
    keys: tuple[str, ...],
    lookup: str | None = None,
    engine: str | None = None,
    factor: np.ndarray | None = None,
) -> L1Price | None:
    """Price by a kernel-table model. `keys`: the integral inputs that determine every array
    passed (the others are constants or copies of them), so the model runs once per distinct
    row of `keys` over the batch and the quadrature nodes. `lookup`: the KIND_CANDIDATES key
    to find the model by (default the operator's kind); `engine`: whose own table comes first
    (`table_engine`); `factor`: calls of the model per operator call (its latency's factor,
    before the power at the operator's utilisations; `_bound_to_window`)."""
    name = _find_model(artifact, lookup or op.kind, engine)
    if name is None:
        return None
    model = artifact.model(name)
    accepts = _accepted(model)
    if accepts is not None:
        arrays = {k: v for k, v in arrays.items() if k in accepts}
    shape = broadcast_shape(*(shape_of(v) for v in arrays.values()))
    if math.prod(shape) < DEDUPE_MIN_ROWS:  # a few rows: priced as they come
        groups = Groups(None, None)
    else:
        groups = Groups.of([np.rint(arrays[k]).astype(np.int64) for k in keys])

    def run(idx: tuple[np.ndarray, ...] | None) -> dict[str, np.ndarray]:
        # Constants pass as scalars (the models broadcast them), an array passed under two
        # names (kv_len and step) is gathered once. idx None: every row, in order.
        got: dict[int, np.ndarray] = {}
        kw = {}
        for k, v in arrays.items():
            if ndim_of(v) == 0:
                kw[k] = v
            else:
                kw[k] = (
                    got[id(v)] if id(v) in got else got.setdefault(id(v), at_rows(v, shape, idx))
                )
        res = model.predict(**kw)
        out = {"latency_s": np.asarray(res["latency_s"], dtype=float).ravel()}
        if "power_w" in res:
            out["power_w"] = np.asarray(res["power_w"], dtype=float).ravel()
        return out

    if groups.rows is None and math.prod(shape) <= BLOCK_ROWS:  # one block of every row
        res = {k: v.reshape(shape) for k, v in run(None).items()}
    else:
        res = evaluate_rows(run, groups, shape)
    lat = res["latency_s"] if factor is None else res["latency_s"] * factor
    if not all_finite(lat):
        return None
    power = res.get("power_w")
    if power is None or not all_finite(power):
        # Power from the table at each row's own utilisations (FLOPs and bytes may vary
        # within a key, e.g. over the fractional KV lengths of the quadrature nodes).
        # (a `factor` varies within a group of rows: then row by row)
        power = op_power_w(artifact, op, gpu, lat, groups=groups if factor is None else None)
    rng = artifact.manifest["models"][name].get("fitted_range", {})
    if hasattr(model, "range_arrays"):  # combinations of inputs with a fitted range of their own
        arrays = {**arrays, **model.range_arrays(**arrays)}
    part = artifact.range_misses(name, **{k: v for k, v in arrays.items() if k in rng})
    misses = {
        k: RangeMiss(*(as_shape(a, shape) for a in (m.excess, m.value, m.bound)))
        for k, m in part.items()
    }
    label, which = _kernel_labels(name, model, arrays, shape)
    return L1Price(lat, power, _any_outside(misses, shape), label, misses, which)


def _kernel_labels(
    name: str, model: Any, arrays: Mapping[str, Any], shape: tuple[int, ...]
) -> tuple[str, np.ndarray | None]:
    """The provenance of a model that prices each configuration by one of several kernels'
    models (`dse.models.moe_kernels`: `kernels`): "name[kernel]" per kernel it ran, "+"-joined,
    and per configuration (latency's last axis) which of them; else (`name`, None)."""
    if not hasattr(model, "kernels"):
        return name, None
    topk = as_shape(np.asarray(arrays["topk"], dtype=float), shape).reshape(-1, shape[-1])[0]
    return _labelled(name, model.kernels(topk=topk))


def _labelled(name: str, kernels: np.ndarray) -> tuple[str, np.ndarray | None]:
    """Model `name` with the kernel each configuration ran: "name[kernel]" per distinct kernel,
    "+"-joined, and per configuration which of them (None for one kernel)."""
    names, which = np.unique(np.asarray(kernels).astype(str), return_inverse=True)
    label = "+".join(f"{name}[{k}]" for k in names)
    return label, (which.astype(np.int8) if len(names) > 1 else None)


# The integral inputs that determine an attention call's arrays (`_kernel_price`'s keys), less
# its length and, for a sliding layer, its window (`_attention_keys`).
_ATTENTION_KEYS = ("batch_size", "num_heads", "num_kv_heads", "head_dim", "kv_fp8")


def _attention_arrays(op: Op) -> dict[str, np.ndarray]:
    """The attention models' inputs of an operator: a sliding layer's carries its window
    (`window_size`, tokens; `dse.predict.ops._sliding_core`), full attention none (0)."""
    d = op.dims
    kv_dtype = np.asarray(d["kv_dtype"])
    kv_heads = np.asarray(d["num_kv_heads"], dtype=float)
    return {
        "batch_size": np.asarray(d["batch_size"], dtype=float),
        "num_heads": np.asarray(d["num_heads"], dtype=float),
        "num_key_value_heads": kv_heads,  # the tables' two names for one input
        "num_kv_heads": kv_heads,
        "head_dim": np.asarray(d["head_dim"], dtype=float),
        "kv_fp8": equals(kv_dtype, "fp8").astype(float),
        "window_size": np.asarray(d.get("window_size", 0.0), dtype=float),
    }


def _attention_keys(a: Mapping[str, np.ndarray], length: str) -> tuple[str, ...]:
    """`_kernel_price`'s keys of attention inputs `a` with length input `length`: the window
    too where it varies by configuration (a scalar passes as one)."""
    window = ("window_size",) if ndim_of(a["window_size"]) else ()
    return (*_ATTENTION_KEYS[:1], length, *_ATTENTION_KEYS[1:], *window)


def _windowless(artifact: Artifact, op_kind: str, engine: str | None) -> bool:
    """Whether the model that prices `op_kind` was fitted on no windowed row (its fitted range
    of `window_size` is [0, 0], or has none: A100's, whose tables measured no window)."""
    name = _find_model(artifact, op_kind, engine)
    if name is None:
        return False
    span = artifact.manifest["models"][name].get("fitted_range", {}).get("window_size")
    return span is None or float(span[1]) <= 0.0


def _bound_to_window(a: dict[str, Any], length: str) -> np.ndarray:
    """For a model fitted without windows (`_windowless`): a sliding layer's call as the full
    kernel at the bounded length (its inputs stay in the fitted range, where a window input
    would leave it), in place; returns the factor on its latency. Decode: min(kv_len, w)
    cached keys, factor 1. Prefill: the causal kernel at m = min(prompt, w) tokens, run
    sliding_keys_sum(prompt, w) / (m (m + 1) / 2) times (the band's query-key pairs over the
    triangle's)."""
    w, s = a.pop("window_size"), a[length]
    a["window_size"] = np.float64(0.0)
    m = np.minimum(s, w)
    a[length] = m
    if length == "kv_len":
        a["step"] = m
        return np.float64(1.0)
    return sliding_keys_sum(s, w) / (m * (m + 1) / 2)


def price_context_attention(
    artifact: Artifact, op: Op, gpu: GPU, ctx: Mapping[str, Any] | None = None
) -> L1Price | None:
    """Causal prefill attention (FlashAttention) by the context-attention model; a sliding
    layer's at the whole prompt with its window (`window_size`), as `dse validate` scores a
    measured windowed row (a model fitted without windows: `_bound_to_window`)."""
    return _price_attention(artifact, op, gpu, ctx, "isl")


def price_generation_attention(
    artifact: Artifact, op: Op, gpu: GPU, ctx: Mapping[str, Any] | None = None
) -> L1Price | None:
    """Decode attention over the KV cache by the generation-attention model (the KV length
    carries the quadrature's node axis; shapes are deduplicated over nodes and rows); a sliding
    layer's over the whole cache with its window (`window_size`), as for prefill."""
    return _price_attention(artifact, op, gpu, ctx, "kv_len")


def _price_attention(
    artifact: Artifact, op: Op, gpu: GPU, ctx: Mapping[str, Any] | None, length: str
) -> L1Price | None:
    """Prefill (`length` "isl") or decode ("kv_len") attention by its model."""
    a = _attention_arrays(op)
    if length == "isl":
        a["isl"] = np.asarray(op.dims["isl"], dtype=float)
    else:
        a["kv_len"] = np.rint(np.asarray(op.dims["kv_len"], dtype=float))
        a["step"] = a["kv_len"]
        a["isl"] = np.float64(1.0)  # one new token per sequence
    engine = table_engine(ctx)
    factor = None
    if ndim_of(a["window_size"]) and _windowless(artifact, op.kind, engine):
        factor = _bound_to_window(a, length)
    keys = _attention_keys(a, length)
    if "stratum" in op.dims:  # the quadrature's strata: an ensemble member per node
        a["stratum"] = np.asarray(op.dims["stratum"], dtype=np.int64)
        keys += ("stratum",)
    price = _kernel_price(artifact, op, gpu, a, keys, engine=engine, factor=factor)
    return _with_backend(artifact, price, a)


def _with_backend(
    artifact: Artifact, price: L1Price | None, arrays: Mapping[str, Any]
) -> L1Price | None:
    """`price` with the attention backend its model priced each configuration as (an SGLang
    model's backend input, `dse.models.attention_backend`) named in its model label:
    "context_attention.sglang[trtllm_mha]" (`kernel_models` in `dse predict`'s provenance);
    a model without a backend input: `price` as it is."""
    if price is None or price.model_rows is not None:
        return price
    model = artifact.model(price.model)
    if not getattr(model, "backends_", ()):  # no backend input (vLLM's models, older SGLang's)
        return price
    shape = price.latency_s.shape
    # per configuration (the last axis; decode's node axis shares its head configuration)
    heads = (*_ATTENTION_KEYS, "window_size")  # H100: head_dim 256 with a window runs Triton
    per_config = {k: np.broadcast_to(arrays[k], shape).reshape(-1, shape[-1])[0] for k in heads}
    ones = np.ones(shape[-1])  # the length: no backend depends on it
    names = model.backend_of(**per_config, isl=ones, kv_len=ones)
    if names is None:
        return price
    label, which = _labelled(price.model, names)
    return replace(price, model=label, model_rows=which)


def price_mla(
    artifact: Artifact, op: Op, gpu: GPU, ctx: Mapping[str, Any] | None = None
) -> L1Price | None:
    """Latent attention (`attention/mla_core`) by the MLA kernel model of its phase
    (`dse.models.mla`). Rows whose latent geometry (kv_lora_rank, rope / nope / value widths)
    is not the one measured are priced on the roofline instead and named in `roofline_ops`
    (the model's correction was fitted at one rank: `dse.models.mla` module doc)."""
    d = op.dims
    prefill = d.get("phase") == "prefill"
    length = "isl" if prefill else "kv_len"
    if length not in d or "num_heads" not in d:  # operators built without the model's inputs
        return None
    geometry = ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
    a = {
        "batch_size": np.asarray(d["batch_size"], dtype=float),
        length: np.rint(np.asarray(d[length], dtype=float)),
        "num_heads": np.asarray(d["num_heads"], dtype=float),
        "kv_fp8": equals(d["kv_dtype"], "fp8").astype(float),
        **{k: np.asarray(d[k], dtype=float) for k in geometry},
    }
    lookup = "attention_mla_prefill" if prefill else "attention_mla_decode"
    engine = table_engine(ctx)
    name = _find_model(artifact, lookup, engine)
    if name is None:
        return None
    rng = artifact.manifest["models"][name].get("fitted_range", {})
    shape = np.broadcast_shapes(*(shape_of(v) for v in a.values()))
    covered = np.ones(shape, dtype=bool)
    for k in geometry:
        lo, hi = rng.get(k, (-np.inf, np.inf))
        covered &= (as_shape(a[k], shape) >= lo) & (as_shape(a[k], shape) <= hi)
    if not covered.any():
        return None
    keys = ("batch_size", length, "num_heads", "kv_fp8", *geometry)
    price = _kernel_price(artifact, op, gpu, a, keys, lookup, engine)
    if price is None or covered.all():
        return price
    # another latent geometry: the roofline there (the geometry's own range miss is that flag)
    t_roof = roofline_s(op.flops, op.bytes, gpu.peak_bf16_flops_per_s, gpu.hbm_bw_bytes_per_s)
    lat = np.where(covered, price.latency_s, as_shape(t_roof + LAUNCH_S, shape))
    misses = {k: m.masked(covered) for k, m in (price.misses or {}).items() if k not in geometry}
    misses = {k: m for k, m in misses.items() if m.outside.any()}
    return L1Price(
        lat,
        op_power_w(artifact, op, gpu, lat),
        _any_outside(misses, shape),
        f"{price.model}+roofline",
        misses,
        # per configuration (the last axis; decode's node axis shares its geometry)
        (~covered).reshape(-1, shape[-1]).any(axis=0).astype(np.int8),
    )


def price_moe(
    artifact: Artifact, op: Op, gpu: GPU, ctx: Mapping[str, Any] | None = None
) -> L1Price | None:
    """The fused MoE block (router + grouped experts) by the MoE model, under each row's
    `routing` (`dse.predict.ops._routed`: the tokens it prices, and the tables' "balanced"
    rows for round robin); uniform everywhere passes no routing (the models' default). Rows of
    4-bit or nvfp4 weights take the artifact's MoE model of that format (MOE_BY_WEIGHT_BYTES,
    PREFER) where it has one, SGLang's 8-bit ones its fp8_block model (OWN_PREFER), the rest
    the bf16 one."""
    wb = op.dims.get("weight_bytes")
    engine = table_engine(ctx)
    lookups: list[tuple[str | None, np.ndarray | None]] = []
    if wb is not None:
        w = np.asarray(wb, dtype=float)
        for width, lookup in MOE_BY_WEIGHT_BYTES.items():
            rows = w == width
            if rows.any() and _find_model(artifact, lookup, engine) is not None:
                lookups.append((lookup, rows))
    if not lookups:
        return _price_moe(artifact, op, gpu, None, engine)
    if len(lookups) == 1 and lookups[0][1].all():
        return _price_moe(artifact, op, gpu, lookups[0][0], engine)
    rest = ~np.logical_or.reduce([rows for _, rows in lookups])
    if rest.any():
        lookups.insert(0, (None, rest))
    prices = [_price_moe(artifact, op, gpu, lookup, engine) for lookup, _ in lookups]
    if any(p is None for p in prices):
        return None
    shape = prices[0].latency_s.shape
    sels = [np.broadcast_to(rows, shape) for _, rows in lookups]

    def pick(arrays: list[np.ndarray | None]) -> np.ndarray | None:
        op_power.resolve()  # the powers are copied here: their values first
        if any(a is None for a in arrays):
            return None
        return np.select(sels, [np.broadcast_to(a, shape) for a in arrays])

    misses: dict[str, RangeMiss] = {}
    zero = RangeMiss(np.zeros(shape), np.zeros(shape), np.zeros(shape))
    for key in {k for p in prices for k in (p.misses or {})}:
        per = [(p.misses or {}).get(key, zero) for p in prices]
        misses[key] = RangeMiss(
            *(pick([getattr(m, f) for m in per]) for f in ("excess", "value", "bound"))
        )
    misses = {k: m for k, m in misses.items() if m.outside.any()}
    # per configuration, which of the models priced it (an index into `model`'s names; a
    # price of several kernels' models names each, `_kernel_labels`)
    first = np.cumsum([0] + [len(p.model.split("+")) for p in prices])[:-1]
    which = [
        first[i] + (0 if p.model_rows is None else np.asarray(p.model_rows))
        for i, p in enumerate(prices)
    ]
    return L1Price(
        pick([p.latency_s for p in prices]),
        pick([p.power_w for p in prices]),
        _any_outside(misses, shape),
        "+".join(p.model for p in prices),
        misses,
        np.select(
            [sel.reshape(-1, shape[-1]).any(axis=0) for sel in sels],
            [np.broadcast_to(w, shape[-1]) for w in which],
        ).astype(np.int8),
    )


def _price_moe(
    artifact: Artifact, op: Op, gpu: GPU, lookup: str | None, engine: str | None = None
) -> L1Price | None:
    d = op.dims
    a: dict[str, Any] = {
        "num_tokens": np.asarray(d["num_tokens"], dtype=float),
        "hidden_size": np.asarray(d["hidden_size"], dtype=float),
        "inter_size": np.asarray(d["inter_size"], dtype=float),
        "topk": np.asarray(d["topk"], dtype=float),
        "num_experts": np.asarray(d["num_experts"], dtype=float),
        "moe_tp_size": np.asarray(d["moe_tp_size"], dtype=float),
        "moe_ep_size": np.float64(1.0),
    }
    keys = tuple(k for k in a if k != "moe_ep_size")
    routing = np.asarray(d.get("routing", 0), dtype=np.int64)
    if (routing == ROUND_ROBIN).any():  # the only code whose model input differs from uniform
        a["routing"] = routing.astype(float)
        a["distribution"] = np.where(routing == ROUND_ROBIN, "balanced", "uniform")
        keys += ("routing",)
    return _kernel_price(artifact, op, gpu, a, keys, lookup, engine)


def price_allreduce(
    artifact: Artifact, op: Op, gpu: GPU, ctx: Mapping[str, Any] | None = None
) -> L1Price | None:
    """Tensor-parallel all-reduce of the residual stream by the comm models. Engines switch
    implementation with the message size (vLLM's custom all-reduce for small messages, NCCL
    above), so each row takes the most preferred model whose fitted message range covers it."""
    ranked = _allreduce_ranked(artifact, table_engine(ctx))
    if not ranked:
        return None
    d = op.dims
    msg = np.asarray(d["message_bytes"], dtype=float)
    n_gpus = as_shape(np.asarray(d["n_gpus"], dtype=float), msg.shape)
    lat = np.full(msg.shape, np.nan)
    oor = np.zeros(msg.shape, dtype=bool)
    misses: dict[str, RangeMiss] = {}
    used = []
    which = np.zeros(msg.shape, dtype=np.int8)
    todo = np.ones(msg.shape, dtype=bool)
    for i, (name, lo, hi) in enumerate(ranked):
        last = i == len(ranked) - 1
        sel = todo & (((msg >= lo) & (msg <= hi)) | last)
        if not sel.any():
            continue
        if not used and msg.ndim == 1 and sel.all():  # every row to this model (a few rows):
            sel = slice(None)  # the same rows as a slice, without the boolean gathers
        model = artifact.model(name)
        # the latency alone where the model gives it apart (AllReduceModel.latency)
        call = getattr(model, "latency", None) or model.predict
        res = dedupe(
            lambda b, g, f=call: f(message_bytes=b, n_gpus=g),
            np.rint(msg[sel]).astype(np.int64),
            n_gpus[sel].astype(np.int64),
        )
        lat[sel] = res["latency_s"]
        which[sel] = len(used)
        part = artifact.range_misses(name, message_bytes=msg[sel], n_gpus=n_gpus[sel])
        for key, miss in part.items():
            _put_miss(misses, key, miss, sel, msg.shape)
            oor[sel] |= miss.outside
        used.append(name)
        if isinstance(sel, slice):
            break
        todo &= ~sel
        if not todo.any():
            break
    if not all_finite(lat):
        return None
    # All-reduce keeps the SMs mostly waiting on NVLink: power from its memory traffic.
    power = op_power_w(artifact, op, gpu, lat)
    return L1Price(lat, power, oor, "+".join(used), misses, which if len(used) > 1 else None)


def _allreduce_ranked(artifact: Artifact, engine: str | None) -> list[tuple[str, float, float]]:
    """`price_allreduce`'s all-reduce models in the order tried, each with its fitted message
    range (bytes): made once per artifact and engine while its model table is the same one of
    the same size (the names and the manifest alone decide it), kept on the artifact (as its
    `names` are; a copy of the artifact makes its own)."""
    entries = artifact.manifest["models"]
    memo = artifact.__dict__.get("_allreduce_ranked")
    if memo is None or memo[0] != id(artifact) or memo[1] is not entries or memo[2] != len(entries):
        memo = artifact.__dict__["_allreduce_ranked"] = (
            id(artifact),  # a copy of the artifact copies its __dict__ too: not its memo
            entries,
            len(entries),
            {},
        )
    hit = memo[3].get(engine)
    if hit is None:
        names = sorted(n for kind in KIND_CANDIDATES["allreduce"] for n in artifact.names(kind))
        ranked = [n for pref in PREFER["allreduce"] for n in names if pref in n]
        own = [n for pref in OWN_PREFER.get(engine or "", {}).get("allreduce", ())
               for n in names if pref in n]  # fmt: skip
        ranked = list(dict.fromkeys(ranked + names))
        if own:  # the engine's own custom kernel, then NCCL (never another engine's custom one)
            ranked = list(dict.fromkeys(own + [n for n in ranked if ".custom" not in n]))
        hit = memo[3][engine] = [
            (name, *entries[name].get("fitted_range", {}).get("message_bytes", (0.0, np.inf)))
            for name in ranked
        ]
    return hit


# ---------------------------------------------------------------------------- linear layers
# linear_kind -> the measured table (`dse.models.linear_layers` layer) whose model prices the
# whole mixer (conv + scan). Mamba-2 is absent: the share measured its conv only, so its mixer
# stays on the roofline (`docs/accuracy.md`, "Linear-attention layers"); Mamba-1 has no table.
LINEAR_LAYER_OF = {"gated_deltanet": "gdn"}
LINEAR_ENGINE = "vllm"  # the model used for an engine whose table the artifact lacks


def price_linear_scan(
    artifact: Artifact, op: Op, gpu: GPU, ctx: Mapping[str, Any] | None = None
) -> L1Price | None:
    """A linear-attention layer's mixer (conv + chunked scan in prefill, conv update + recurrent
    step in decode) by the measured model of its table (`dse.models.linear_layers`): the
    configuration's engine's, else vLLM's. A batch or prompt beyond the table is priced as
    `row_blocks` of equal size inside it, summed. Rows whose layer has no table, or whose
    layout (heads, widths, conv width) leaves the model's fitted range, keep the roofline
    (`model_rows` marks them: `roofline_ops` names the operator there) and their range misses
    are flagged. The model is imported here: a batch without linear layers never loads it."""
    names = set(artifact.names("linear_layer"))
    if not names or "linear_kind" not in op.dims or ctx is None:
        return None
    from dse.models.linear_layers import INPUTS as LINEAR_INPUTS
    from dse.models.linear_layers import model_name

    phase = "context" if ctx.get("phase") == "prefill" else "generation"
    d = op.dims
    n = len(np.atleast_1d(op.flops))
    kinds = as_shape(np.asarray(d["linear_kind"]).astype(str), (n,))
    cols = ctx.get("cols")
    engines = (
        as_shape(np.asarray(cols["engine"]).astype(str), (n,))
        if cols is not None and "engine" in cols
        else np.full(n, LINEAR_ENGINE)
    )
    arrays = {k: as_shape(np.asarray(d[k], dtype=float), (n,)) for k in LINEAR_INPUTS}
    t_roof = roofline_s(op.flops, op.bytes, gpu.peak_bf16_flops_per_s, gpu.hbm_bw_bytes_per_s)
    lat = as_shape(np.asarray(t_roof + LAUNCH_S, dtype=float), (n,)).copy()
    used: list[str] = []
    which = np.full(n, -1, dtype=np.int8)  # -1: the roofline (index fixed below)
    misses: dict[str, RangeMiss] = {}
    for kind, layer in LINEAR_LAYER_OF.items():
        for engine in np.unique(engines[kinds == kind]):
            name = model_name(layer, phase, str(engine))
            if name not in names:
                name = model_name(layer, phase, LINEAR_ENGINE)
            if name not in names:
                continue
            sel = (kinds == kind) & (engines == engine)
            model = artifact.model(name)
            ins = {k: v[sel] for k, v in arrays.items()}
            # More sequences (or a longer prompt) than the table measured: priced as blocks of
            # equal batch (length) inside it, summed; the kernels are linear in both there
            # (sequences are independent; the chunked scan carries its state chunk to chunk).
            blocks = np.ones(int(sel.sum()))
            for key in ("batch_size", "seq_len"):
                hi = model.fitted_range().get(key, (0.0, np.inf))[1]
                split = row_blocks(ins[key], hi)
                ins[key] = np.ceil(ins[key] / split)
                blocks = blocks * split
            part = model.range_misses(**ins)
            inside = ~_any_outside(part, (int(sel.sum()),))
            for key, miss in part.items():
                _put_miss(misses, key, miss, sel, (n,))
            if not inside.any():
                continue
            rows = np.flatnonzero(sel)[inside]
            keys = [np.rint(ins[k][inside]).astype(np.int64) for k in LINEAR_INPUTS]
            res = dedupe(
                lambda *a, m=model: {
                    "latency_s": m.predict(**dict(zip(LINEAR_INPUTS, a, strict=True)))["latency_s"]
                },
                *keys,
            )
            lat[rows] = res["latency_s"] * blocks[inside]
            if name not in used:
                used.append(name)
            which[rows] = used.index(name)
    if not used:  # no model priced a row: the roofline, with the misses that sent it there
        if not misses:
            return None
        return L1Price(lat, op_power_w(artifact, op, gpu, lat), _any_outside(misses, (n,)),
                       "roofline", misses)  # fmt: skip
    model_label = "+".join(used)
    roof_rows = which < 0
    if roof_rows.any():
        which[roof_rows] = len(used)
        model_label += "+roofline"
    power = op_power_w(artifact, op, gpu, lat)
    oor = _any_outside(misses, (n,))
    return L1Price(
        lat,
        power,
        oor,
        model_label,
        misses or None,
        which if len(used) > 1 or roof_rows.any() else None,
    )


# Op.kind -> the adapter that prices operators of that kind from an artifact (an explicit table:
# dse.predict.pricing.Pricer reads it; an adapter returning None leaves the roofline).
ADAPTERS: dict[str, Level1Adapter] = {
    "gemm": price_gemm,
    "elementwise": price_layer_op,
    "embedding": price_layer_op,
    "attention_prefill": price_context_attention,
    "attention_decode": price_generation_attention,
    "moe": price_moe,
    "allreduce": price_allreduce,
    "attention_mla": price_mla,
    "linear_scan": price_linear_scan,
}
