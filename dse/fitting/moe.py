"""The MoE family: fused MoE block models per engine and dtype, fitted as hybrid tables with
grouped CV, and their row predictor. The class of a table follows its engine's kernels
(`model_class_of`): separate MoE kernels whose times add (TensorRT-LLM's CUTLASS MoE, and the same
kernels where vLLM dispatches to FlashInfer's CUTLASS MoE) by the kernel-sum physics
(`dse.models.moe_physics.MoEModel`, kind "moe_physics"), vLLM's fused Triton kernel by
`dse.models.moe.MoEModel` (kind "moe"), SGLang's bf16 and B200 fp8_block tables, whose layouts
ran two kernels, by one such model per kernel (`dse.models.moe_kernels.KernelMoEModel`, kind "moe_kernels").
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from dse.fitting import bands
from dse.fitting import cv as U
from dse.fitting._hybrid_tables import _fit_hybrid_table, hybrid_band_table
from dse.models import moe_physics
from dse.models.artifact import Artifact, FittedModel
from dse.models.moe import MoEModel, moe_inputs, moe_work
from dse.models.moe_kernels import KernelMoEModel, sglang_moe_kernel
from dse.models.moe_splits import split_anomalies
from dse.roofline import roofline_s

MIN_MOE_ROWS = 300  # (engine, dtype) groups smaller than this are not fitted
# Manifest kinds of the MoE family's models (what the predictor and `dse validate` look up).
MOE_KINDS = (MoEModel.kind, moe_physics.MoEModel.kind, KernelMoEModel.kind)
# Engines whose MoE runs as separate kernels whose times add (router top-k, permute, grouped
# GEMM 1, activation, grouped GEMM 2, finalize: TensorRT-LLM's CUTLASS MoE), the sequence the
# kernel-sum base of `dse.models.moe_physics` prices. vLLM's fused Triton kernel permutes inside
# the GEMM: held out by layout the kernel sum lost on 4 of its 6 tables (journal, session 13).
KERNEL_SUM_ENGINES = ("trtllm",)
# The same kernels under another engine, read from a row's `kernel_source`: vLLM's FlashInfer
# CUTLASS MoE backend ("vllm_modeloptfp8moe_flashinfer_cutlass_flashinferexperts",
# "vllm_fp8moe_flashinfer_cutlass_flashinferexperts") runs FlashInfer's port of TensorRT-LLM's
# CUTLASS MoE (expand rows, grouped GEMM 1, activation, grouped GEMM 2, finalize). A vLLM table
# is the kernel sum when most of its rows ran such a backend: H100 vLLM fp8 (every row) and
# fp8_block (7,371 of 12,393 rows: every expert-parallel split; its tensor-parallel-only splits
# ran Triton). Held out by layout (5 folds, shipped setting) 11.47 -> 6.40% and 21.16 -> 12.03%
# (docs/dev/accuracy-journal.md, session 14); every Triton table keeps the fused model.
KERNEL_SUM_BACKENDS = ("flashinfer_cutlass",)
# The kernel-sum model decides its residual by an inner CV over the training layouts
# (`moe_physics.INNER_FOLDS` group folds), nested in `dse fit`'s own CV (FIT_CV_FOLDS folds by
# layout): with fewer layouts than this, a CV fold leaves fewer training layouts than inner folds
# (5 - ceil(5 / 3) = 3), and the choice cannot be made; such a table keeps `dse.models.moe`.
MIN_KERNEL_SUM_LAYOUTS = 5
# Tables (engine, dtype) whose layouts ran more than one kernel and are fitted one model per
# kernel, the kernel named by `dse.models.moe_kernels.sglang_moe_kernel` (issue 35): SGLang's
# bf16 (B200: FlashInfer TRT-LLM / Triton; H100: Triton / FlashInfer CUTLASS) and fp8_block
# (B200; H100's ran Triton only, so one model). Held out by layout (`dse fit`'s CV;
# experiments/sglang_moe_kernel.py) B200 bf16 47.07 -> 19.52%, fp8_block 26.19 -> 16.37%, H100
# bf16 16.97 -> 13.92%.
KERNEL_SPLIT_TABLES = (("sglang", "bfloat16"), ("sglang", "fp8_block"))
# Tables (gpu, engine, dtype) of `KERNEL_SPLIT_TABLES` whose kernel models are fitted pooled with
# another engine's table of the GPU and dtype (`KernelMoEModel(pool=...)`: a kernel's model
# takes the other engine's rows that ran the same kernel, of the layouts in its training rows,
# the engine a residual input). Held out by layout (`dse fit`'s CV; experiments/
# sglang_moe_pool.py): B200 SGLang bf16 19.52 -> 17.84% (FlashInfer TRT-LLM MoE with vLLM's
# TRT-LLM rows: 14.84 -> 12.35%); H100 13.92 -> 14.17% (Triton with vLLM's Triton table; 13.17%
# with the pooled fit's row cap raised, under a point): not pooled.
POOLED_TABLES = {("b200_sxm", "sglang", "bfloat16"): "vllm"}


# ---------------------------------------------------------------------------- MoE
# held out by layer layout alone, never by its parallel split (moe_tp_size, moe_ep_size), dtype
# or routing (issue 19)
MOE_SHAPE_GROUP = U.cv_group("moe", ("hidden_size", "inter_size", "topk", "num_experts"))
# bf16 first: the Level-1 adapter takes the first vLLM MoE model when it does not say a dtype
MOE_DTYPE_ORDER = ("bfloat16", "fp8", "fp8_block", "int4_wo", "w4a16_mxfp4")


def kernel_sum_backend_share(rows: pd.DataFrame) -> float:
    """The share of `rows` whose `kernel_source` names a backend of `KERNEL_SUM_BACKENDS`
    (0 without the column)."""
    if not len(rows) or "kernel_source" not in rows:
        return 0.0
    src = rows["kernel_source"].astype(str).str.lower()
    hit = np.zeros(len(rows), dtype=bool)
    for name in KERNEL_SUM_BACKENDS:
        hit |= src.str.contains(name, regex=False).to_numpy()
    return float(hit.mean())


def model_class_of(engine: str, rows: pd.DataFrame) -> type[MoEModel] | type[KernelMoEModel]:
    """The model class of one MoE table (`rows`: one GPU, engine and dtype): one model per
    kernel for a table of `KERNEL_SPLIT_TABLES` whose rows the kernel rule gives more than one
    kernel; the kernel sum for an engine of `KERNEL_SUM_ENGINES`, or a table most of whose rows
    ran a backend of `KERNEL_SUM_BACKENDS`, with at least `MIN_KERNEL_SUM_LAYOUTS` layouts; else
    the fused-kernel model. A rule from the kernels the engine runs, not a pick by held-out
    score."""
    if (
        "dtype" in rows
        and len(rows)
        and (engine, str(rows["dtype"].iloc[0])) in KERNEL_SPLIT_TABLES
    ):
        gpu = str(rows["gpu"].iloc[0])
        if len(np.unique(sglang_moe_kernel(gpu, rows["topk"].to_numpy(), len(rows)))) > 1:
            return KernelMoEModel
    layouts = len(rows.groupby(list(moe_physics.LAYOUT)).size()) if len(rows) else 0
    separate = engine in KERNEL_SUM_ENGINES or kernel_sum_backend_share(rows) > 0.5
    if separate and layouts >= MIN_KERNEL_SUM_LAYOUTS:
        return moe_physics.MoEModel
    return MoEModel


def moe_roofline_s(rows: pd.DataFrame, gpu: str, dtype: str) -> np.ndarray:
    m = MoEModel(gpu, "x", dtype)
    v = m._inputs(moe_inputs(rows))
    w = moe_work(v, m.weight_bytes)
    peak, bw = m._peak()
    return roofline_s(w["flops"], w["bytes"], peak, bw)


def _moe_tasks(ctx: Any) -> list[tuple[str, str]]:
    """(engine, dtype) of every MoE table of `ctx.gpu` with enough rows to fit (bf16 first)."""
    table = ctx.table("moe")
    if table.empty:
        return []
    rows_gpu = table[table["gpu"] == ctx.gpu]
    order = {d: i for i, d in enumerate(MOE_DTYPE_ORDER)}
    counts = rows_gpu.groupby(["engine", "dtype"]).size()
    tasks = []
    for engine, dtype in sorted(
        counts.index, key=lambda k: (k[0] != "vllm", order.get(k[1], 99), k)
    ):
        if not ctx.wants(f"moe.{engine}.{dtype}"):  # `dse fit --model`: kept as it is
            continue
        if counts[(engine, dtype)] < MIN_MOE_ROWS:
            n = int(counts[(engine, dtype)])
            ctx.skip_small(f"moe.{engine}.{dtype}", "moe", str(engine), n, MIN_MOE_ROWS)
        else:
            tasks.append((str(engine), str(dtype)))
    return tasks


def fit_moe_family(ctx: Any) -> list[FittedModel]:
    return U.map_tasks(ctx, _fit_moe_table, _moe_tasks(ctx))


def _moe_rows(ctx: Any, engine: str, dtype: str) -> pd.DataFrame:
    table = ctx.table("moe")
    sel = (table["gpu"] == ctx.gpu) & (table["engine"] == engine) & (table["dtype"] == dtype)
    return table[sel].reset_index(drop=True)


def _model_args(ctx: Any, engine: str, dtype: str, cls: type) -> dict[str, Any]:
    """Constructor arguments of a table's model beyond (gpu, engine, dtype, seed): the pooled
    engine's rows for a table of `POOLED_TABLES`."""
    other = POOLED_TABLES.get((ctx.gpu, engine, dtype))
    if other is None or cls is not KernelMoEModel:
        return {}
    return {"pool": _moe_rows(ctx, other, dtype)}


def moe_band_tables(ctx: Any) -> list[bands.BandTable]:
    """`dse fit --bands-only`: the layout-held-out CV table of every MoE model of `ctx.keep`."""
    out = []
    for engine, dtype in _moe_tasks(ctx):
        name = f"moe.{engine}.{dtype}"
        if ctx.keep is not None and ctx.keep.has(name):
            rows = _moe_rows(ctx, engine, dtype)
            cls = model_class_of(engine, rows)
            extra = _model_args(ctx, engine, dtype, cls)
            out.append(
                hybrid_band_table(
                    name,
                    rows,
                    lambda engine=engine, dtype=dtype, cls=cls, extra=extra, **kw: cls(
                        ctx.gpu, engine, dtype, seed=ctx.seed, **extra, **kw
                    ),
                    cls(ctx.gpu, engine, dtype)._table_inputs,
                    (MOE_SHAPE_GROUP, "layer shape"),
                    ctx.seed,
                )
            )
    return out


def _fit_moe_table(ctx: Any, engine: str, dtype: str) -> FittedModel:
    """One MoE table's model (CV, then the final fit): a task of `U.map_tasks`."""
    rows = _moe_rows(ctx, engine, dtype)
    cls = model_class_of(engine, rows)
    extra = _model_args(ctx, engine, dtype, cls)

    def info(model: Any) -> dict[str, Any]:
        out = {
            "engine": engine,
            "moe_dtype": dtype,
            "kernel_sources": sorted(map(str, rows["kernel_source"].dropna().unique())),
            "distributions": sorted(map(str, rows["distribution"].unique())),
        }
        if isinstance(model, KernelMoEModel):
            # the kernels the rule names and the one pricing a kernel without a model
            out["kernels"] = sorted(model.models_)
            out["kernel_fallback"] = model.fallback_
            if model.pooled_:  # POOLED_TABLES: the other engine's rows each kernel took
                out["pooled_engine"] = POOLED_TABLES[(ctx.gpu, engine, dtype)]
                out["pooled_rows"] = {k: int(n) for k, n in sorted(model.pooled_.items())}
        if isinstance(model, moe_physics.MoEModel):
            # what the final fit chose and left out (docs/accuracy.md, MoE)
            out["residual_kept"] = bool(model.use_residual_)
            out["inner_cv_mape_pct"] = {k: round(v, 3) for k, v in model.inner_mape_.items()}
            out["split_anomaly_rows_screened"] = int(split_anomalies(rows).sum())
        return out

    return _fit_hybrid_table(
        ctx,
        f"moe.{engine}.{dtype}",
        rows,
        lambda **kw: cls(ctx.gpu, engine, dtype, seed=ctx.seed, **extra, **kw),
        cls(ctx.gpu, engine, dtype)._table_inputs,
        (MOE_SHAPE_GROUP, "layer shape"),
        moe_roofline_s(rows, ctx.gpu, dtype),
        info,
    )


def predict_moe_rows(artifact: Artifact, kind: str, rows: pd.DataFrame) -> pd.DataFrame:
    out = pd.DataFrame(
        {"latency_pred_s": np.nan, "energy_pred_j": np.nan}, index=rows.index, dtype=float
    )
    names = {n for kind in MOE_KINDS for n in artifact.names(kind)}
    for (engine, dtype), sub in rows.groupby(["engine", "dtype"], sort=False):
        name = f"moe.{engine}.{dtype}"
        if name not in names:
            continue
        model = artifact.model(name)
        ins = model._table_inputs(sub)  # each class reads gating its own way
        p = model.predict(**ins)
        out.loc[sub.index, "latency_pred_s"] = p["latency_s"]
        if "energy_j" in p:
            out.loc[sub.index, "energy_pred_j"] = p["energy_j"]
        ranged = {**ins, **model.range_arrays(**ins)}  # every MoE class checks combinations
        bands.put_band(out, sub.index, artifact, name, p["latency_s"], **ranged)
    return out
