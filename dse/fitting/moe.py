"""The MoE family: fused MoE block models per engine and dtype (`dse.models.moe.MoEModel`), fitted
as hybrid tables with grouped CV, and their row predictor.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from dse.fitting import bands
from dse.fitting import cv as U
from dse.fitting._hybrid_tables import _fit_hybrid_table, hybrid_band_table
from dse.models.artifact import Artifact, FittedModel
from dse.models.moe import MoEModel, moe_inputs, moe_work
from dse.roofline import roofline_s

MIN_MOE_ROWS = 300  # (engine, dtype) groups smaller than this are not fitted


# ---------------------------------------------------------------------------- MoE
# held out by layer layout alone, never by its parallel split (moe_tp_size, moe_ep_size), dtype
# or routing (issue 19)
MOE_SHAPE_GROUP = U.cv_group("moe", ("hidden_size", "inter_size", "topk", "num_experts"))
# bf16 first: the Level-1 adapter takes the first vLLM MoE model when it does not say a dtype
MOE_DTYPE_ORDER = ("bfloat16", "fp8", "fp8_block", "int4_wo", "w4a16_mxfp4")


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
        if counts[(engine, dtype)] < MIN_MOE_ROWS:
            ctx.log(
                f"moe.{engine}.{dtype}: {counts[(engine, dtype)]} rows < {MIN_MOE_ROWS}; skipped"
            )
        else:
            tasks.append((str(engine), str(dtype)))
    return tasks


def fit_moe_family(ctx: Any) -> list[FittedModel]:
    return U.map_tasks(ctx, _fit_moe_table, _moe_tasks(ctx))


def _moe_rows(ctx: Any, engine: str, dtype: str) -> pd.DataFrame:
    table = ctx.table("moe")
    sel = (table["gpu"] == ctx.gpu) & (table["engine"] == engine) & (table["dtype"] == dtype)
    return table[sel].reset_index(drop=True)


def moe_band_tables(ctx: Any) -> list[bands.BandTable]:
    """`dse fit --bands-only`: the layout-held-out CV table of every MoE model of `ctx.keep`."""
    out = []
    for engine, dtype in _moe_tasks(ctx):
        name = f"moe.{engine}.{dtype}"
        if ctx.keep is not None and ctx.keep.has(name):
            out.append(
                hybrid_band_table(
                    name,
                    _moe_rows(ctx, engine, dtype),
                    lambda engine=engine, dtype=dtype, **kw: MoEModel(
                        ctx.gpu, engine, dtype, seed=ctx.seed, **kw
                    ),
                    moe_inputs,
                    (MOE_SHAPE_GROUP, "layer shape"),
                    ctx.seed,
                )
            )
    return out


def _fit_moe_table(ctx: Any, engine: str, dtype: str) -> FittedModel:
    """One MoE table's model (CV, then the final fit): a task of `U.map_tasks`."""
    rows = _moe_rows(ctx, engine, dtype)

    def info(model: Any) -> dict[str, Any]:
        return {
            "engine": engine,
            "moe_dtype": dtype,
            "kernel_sources": sorted(map(str, rows["kernel_source"].dropna().unique())),
            "distributions": sorted(map(str, rows["distribution"].unique())),
        }

    return _fit_hybrid_table(
        ctx,
        f"moe.{engine}.{dtype}",
        rows,
        lambda **kw: MoEModel(ctx.gpu, engine, dtype, seed=ctx.seed, **kw),
        moe_inputs,
        (MOE_SHAPE_GROUP, "layer shape"),
        moe_roofline_s(rows, ctx.gpu, dtype),
        info,
    )


def predict_moe_rows(artifact: Artifact, kind: str, rows: pd.DataFrame) -> pd.DataFrame:
    out = pd.DataFrame(
        {"latency_pred_s": np.nan, "energy_pred_j": np.nan}, index=rows.index, dtype=float
    )
    names = set(artifact.names("moe"))
    for (engine, dtype), sub in rows.groupby(["engine", "dtype"], sort=False):
        name = f"moe.{engine}.{dtype}"
        if name not in names:
            continue
        ins = moe_inputs(sub)
        p = artifact.model(name).predict(**ins)
        out.loc[sub.index, "latency_pred_s"] = p["latency_s"]
        if "energy_j" in p:
            out.loc[sub.index, "energy_pred_j"] = p["energy_j"]
        bands.put_band(out, sub.index, artifact, name, p["latency_s"], **ins)
    return out
