"""The MLA family: latent-attention kernel models per phase and engine (`dse.models.mla`), fitted
on aiconfigurator's MLA kernel tables (TensorRT-LLM, SGLang) with CV held out by head count,
and their row predictor. The module tables (projections included; vLLM, TensorRT-LLM) are read
(`dse.data`) but not fitted: the predictor prices MLA's projections as GEMMs already.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from dse.fitting import bands
from dse.fitting import cv as U
from dse.fitting._hybrid_tables import _fit_hybrid_table, hybrid_band_table
from dse.models.artifact import Artifact, FittedModel
from dse.models.mla import ContextMLAModel, GenerationMLAModel, mla_inputs, mla_work
from dse.roofline import roofline_s
from dse.spec.hardware import get_gpu

MLA_CLASSES = {"context_mla": ContextMLAModel, "generation_mla": GenerationMLAModel}
HEAD_GROUP = U.cv_group("mla", ("num_heads",))
MIN_MLA_ROWS = 200  # as the attention tables (`dse.fitting.attention.MIN_ATTENTION_ROWS`)


def mla_roofline_s(kind: str, rows: pd.DataFrame, gpu: str) -> np.ndarray:
    """Plain roofline (bf16 peak, HBM bandwidth, no launch floor) of MLA kernel rows."""
    cls = MLA_CLASSES[kind]
    flops, bytes_ = mla_work(cls.phase_default, cls()._inputs(mla_inputs(rows)))
    g = get_gpu(gpu)
    return roofline_s(flops, bytes_, g.peak_bf16_flops_per_s, g.hbm_bw_bytes_per_s)


def _tasks(ctx: Any) -> list[tuple[str, str]]:
    """(kind, engine) of every MLA kernel table of `ctx.gpu` with enough rows to fit."""
    tasks = []
    for kind in MLA_CLASSES:
        table = ctx.table(kind)
        if table.empty:
            continue
        counts = table.loc[table["gpu"] == ctx.gpu, "engine"].value_counts()
        for e in sorted(counts.index):
            if not ctx.wants(f"{kind}.{e}"):
                continue
            if counts[e] >= MIN_MLA_ROWS:
                tasks.append((kind, str(e)))
            else:
                ctx.skip_small(f"{kind}.{e}", kind, str(e), int(counts[e]), MIN_MLA_ROWS)
    return tasks


def _spec(ctx: Any, kind: str, engine: str) -> tuple[pd.DataFrame, Any]:
    cls = MLA_CLASSES[kind]
    table = ctx.table(kind)
    rows = table[(table["gpu"] == ctx.gpu) & (table["engine"] == engine)].reset_index(drop=True)
    return rows, lambda **kw: cls(gpu=ctx.gpu, engine=engine, seed=ctx.seed, **kw)


def fit_mla_family(ctx: Any) -> list[FittedModel]:
    return U.map_tasks(ctx, _fit_mla_table, _tasks(ctx))


def mla_band_tables(ctx: Any) -> list[bands.BandTable]:
    """`dse fit --bands-only`: the held-out CV table of every MLA model of `ctx.keep`."""
    out = []
    for kind, engine in _tasks(ctx):
        name = f"{kind}.{engine}"
        if ctx.keep is not None and ctx.keep.has(name):
            rows, make = _spec(ctx, kind, engine)
            out.append(
                hybrid_band_table(
                    name, rows, make, mla_inputs, (HEAD_GROUP, "head count"), ctx.seed
                )
            )
    return out


def _fit_mla_table(ctx: Any, kind: str, engine: str) -> FittedModel:
    rows, make = _spec(ctx, kind, engine)

    def info(model: Any) -> dict[str, Any]:
        return {
            "engine": engine,
            "engine_versions": sorted(map(str, rows["engine_version"].unique())),
            "kernel_sources": sorted(map(str, rows["kernel_source"].dropna().unique())),
            "roofline": {
                "launch_s": model.roof_.launch_s,
                "eff_compute": model.roof_.eff_compute,
                "eff_memory": model.roof_.eff_memory,
            },
        }

    return _fit_hybrid_table(
        ctx,
        f"{kind}.{engine}",
        rows,
        make,
        mla_inputs,
        (HEAD_GROUP, "head count"),
        mla_roofline_s(kind, rows, ctx.gpu),
        info,
    )


def predict_mla_rows(artifact: Artifact, kind: str, rows: pd.DataFrame) -> pd.DataFrame:
    """`dse validate`: each row by the model of its engine (else TensorRT-LLM's, else any)."""
    out = pd.DataFrame(
        {"latency_pred_s": np.nan, "energy_pred_j": np.nan}, index=rows.index, dtype=float
    )
    names = artifact.names(kind)
    if not names:
        return out
    for engine, sub in rows.groupby("engine", sort=False):
        name = f"{kind}.{engine}"
        if name not in names:
            name = next((n for n in names if n.endswith(".trtllm")), names[0])
        ins = mla_inputs(sub)
        p = artifact.model(name).predict(**ins)
        out.loc[sub.index, "latency_pred_s"] = p["latency_s"]
        bands.put_band(out, sub.index, artifact, name, np.asarray(p["latency_s"]), **ins)
    return out
