"""The attention family: context and generation attention models per engine (`dse.models.attention`),
fitted as hybrid tables with grouped CV, and their row predictor.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from dse.fitting import bands
from dse.fitting import cv as U
from dse.fitting._hybrid_tables import _fit_hybrid_table, hybrid_band_table
from dse.models.artifact import Artifact, FittedModel
from dse.models.attention import (
    ContextAttentionModel,
    GenerationAttentionModel,
    attention_inputs,
    attention_work,
)
from dse.roofline import roofline_s
from dse.spec.hardware import get_gpu

# ---------------------------------------------------------------------------- attention
ATTENTION_CLASSES = {
    "context_attention": ContextAttentionModel,
    "generation_attention": GenerationAttentionModel,
}
HEAD_GROUP = U.cv_group("attention", ("num_heads", "num_kv_heads", "head_dim"))
# The fewest rows of one (kind, engine) table of a GPU fitted (the hybrid model's grouped CV
# and residual MLP need them); a smaller one is skipped and said so (`ctx.skip_small`).
MIN_ATTENTION_ROWS = 200


def attention_roofline_s(kind: str, rows: pd.DataFrame, gpu: str) -> np.ndarray:
    """Plain roofline (peak FLOP/s and HBM bandwidth, no launch floor) of attention rows."""
    cls = ATTENTION_CLASSES[kind]
    v = cls()._inputs(attention_inputs(rows))
    flops, bytes_ = attention_work(cls.phase_default, v)
    g = get_gpu(gpu)
    return roofline_s(flops, bytes_, g.peak_bf16_flops_per_s, g.hbm_bw_bytes_per_s)


def _attention_tasks(ctx: Any) -> list[tuple[str, str]]:
    """(kind, engine) of every attention table of `ctx.gpu` with enough rows to fit (a smaller
    one is named in the log and the manifest)."""
    tasks = []
    for kind in ATTENTION_CLASSES:
        table = ctx.table(kind)
        if table.empty:
            continue
        counts = table.loc[table["gpu"] == ctx.gpu, "engine"].value_counts()
        for e in sorted(counts.index):
            if not ctx.wants(f"{kind}.{e}"):  # `dse fit --model`: kept as it is
                continue
            if counts[e] >= MIN_ATTENTION_ROWS:
                tasks.append((kind, str(e)))
            else:
                ctx.skip_small(f"{kind}.{e}", kind, str(e), int(counts[e]), MIN_ATTENTION_ROWS)
    return tasks


def fit_attention_family(ctx: Any) -> list[FittedModel]:
    return U.map_tasks(ctx, _fit_attention_table, _attention_tasks(ctx))


# The backend an engine runs by default where its table measured a shape under several: B200's
# SGLang tables time 19.5% / 29.1% of their prefill / decode rows' shapes under TRT-LLM MHA (SGLang's
# default attention backend on Blackwell) and again under FlashInfer or Triton, the second
# 1.1-2.2x slower at the median; a model without a kernel input fits their mix. Keeping the
# default's row of such a shape (every other row stays: head_dim 192's Triton, FlashInfer's
# bf16-query / fp8-KV prefill) reads 7.45% / 14.55% held out by head configuration on the
# kept rows, against 14.96% / 18.56% trained on every row (experiments/sglang_attention_kernels.py).
DEFAULT_BACKEND = {"sglang": "trtllm_mha"}
# the columns that make one measured shape of an attention table
SHAPE_COLUMNS = ("batch_size", "isl", "num_heads", "num_kv_heads", "head_dim", "dtype",
                 "kv_cache_dtype", "window_size", "past_kv_len", "kv_len", "step")  # fmt: skip


def default_backend_rows(rows: pd.DataFrame, engine: str) -> np.ndarray:
    """Mask of `rows` (one engine's table of one GPU): every row but those of a shape the table
    also measured under the engine's default backend (`DEFAULT_BACKEND`) with another one."""
    backend = DEFAULT_BACKEND.get(engine)
    if backend is None or "kernel_source" not in rows or rows.empty:
        return np.ones(len(rows), dtype=bool)
    key = [rows[c] for c in SHAPE_COLUMNS if c in rows]
    is_default = rows["kernel_source"].astype(str) == backend
    has_default = is_default.groupby(key, dropna=False).transform("any")
    return (is_default | ~has_default).to_numpy(bool)


def _attention_spec(ctx: Any, kind: str, engine: str) -> tuple[pd.DataFrame, Any]:
    """The rows of one attention table (`default_backend_rows`) and its model's constructor
    (keywords: fit settings)."""
    cls = ATTENTION_CLASSES[kind]
    table = ctx.table(kind)
    rows = table[(table["gpu"] == ctx.gpu) & (table["engine"] == engine)].reset_index(drop=True)
    rows = rows[default_backend_rows(rows, engine)].reset_index(drop=True)
    return rows, lambda **kw: cls(gpu=ctx.gpu, engine=engine, seed=ctx.seed, **kw)


def attention_band_tables(ctx: Any) -> list[bands.BandTable]:
    """`dse fit --bands-only`: the held-out CV table of every attention model of `ctx.keep`."""
    out = []
    for kind, engine in _attention_tasks(ctx):
        name = f"{kind}.{engine}"
        if ctx.keep is not None and ctx.keep.has(name):
            rows, make = _attention_spec(ctx, kind, engine)
            grouping = (HEAD_GROUP, "head configuration")
            out.append(hybrid_band_table(name, rows, make, attention_inputs, grouping, ctx.seed))
    return out


def _fit_attention_table(ctx: Any, kind: str, engine: str) -> FittedModel:
    """One attention table's model (CV, then the final fit): a task of `U.map_tasks`."""
    rows, make = _attention_spec(ctx, kind, engine)

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
        attention_inputs,
        (HEAD_GROUP, "head configuration"),
        attention_roofline_s(kind, rows, ctx.gpu),
        info,
    )


def predict_attention_rows(artifact: Artifact, kind: str, rows: pd.DataFrame) -> pd.DataFrame:
    out = pd.DataFrame(
        {"latency_pred_s": np.nan, "energy_pred_j": np.nan}, index=rows.index, dtype=float
    )
    names = artifact.names(kind)
    if not names:
        return out
    for engine, sub in rows.groupby("engine", sort=False):
        name = f"{kind}.{engine}" if f"{kind}.{engine}" in names else None
        if name is None:
            vllm = [n for n in names if n.endswith(".vllm")]
            name = (vllm or names)[0]
        ins = attention_inputs(sub)
        p = artifact.model(name).predict(**ins)
        out.loc[sub.index, "latency_pred_s"] = p["latency_s"]
        if "energy_j" in p:
            out.loc[sub.index, "energy_pred_j"] = p["energy_j"]
        for dtype, part in sub.groupby("dtype", sort=False) if "dtype" in sub else [("", sub)]:
            at = sub.index.get_indexer(part.index)
            bands.put_band(
                out,
                part.index,
                artifact,
                name,
                np.asarray(p["latency_s"])[at],
                strata={"dtype": dtype},
                **{k: np.asarray(v)[at] for k, v in ins.items()},
            )
    return out
