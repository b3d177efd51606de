"""The Level-1 operator models other than GEMM, as `dse fit` / `dse validate` families.

Families (each fits per GPU from `dse.data.load` tables, cross-validates by held-out shape
groups, and predicts the measured rows of its kinds for `dse validate`):

  layer_op   `LayerOpModel` on vidur's per-operator rows (RMSNorm, RoPE, activation, add,
             embedding); CV leave-one-model-out. Its `dse validate` hook also prices vidur's
             projection GEMM rows with the artifact's GEMM models (a cross-check of those).
  reduction  `ReductionOpModel` on LLMCompass's softmax / layernorm / GELU rows (A100; other GPUs
             get the A100 fit scaled by HBM bandwidth, flagged as analytical); CV leave-one-out.
  allreduce  `AllReduceModel` per implementation (NCCL, vLLM / TensorRT-LLM custom, vidur's NCCL
             per cluster), single node; other NCCL collectives as kind "collective"; CV leave
             one message-size octave out.
  attention  `ContextAttentionModel` / `GenerationAttentionModel` per engine; CV GroupKFold by
             head configuration (num_heads, num_kv_heads, head_dim).
  moe        `MoEModel` per engine and MoE dtype; CV GroupKFold by layer shape (hidden, inter,
             topk, experts; never the parallel split, dtype or routing).

Model names in an artifact: layer_op.vidur, reduction.llmcompass, allreduce.<engine>.<impl>[...],
collective.<op>.<engine>.<impl>, context_attention.<engine>, generation_attention.<engine>,
moe.<engine>.<dtype>. Every model's CV entry records the scheme that produced it.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pandas as pd

from dse.errors import ArtifactError, ConfigError
from dse.fitting import bands
from dse.fitting.cv import (
    architecture_groups,
    cv_group,
    held_out_predict,
    leave_one_group_out,
)
from dse.metrics import mape_pct, reported
from dse.models.artifact import Artifact, FittedModel
from dse.models.band import degree_of
from dse.models.layer_ops import (
    GEMM_OPS,
    INPUTS,
    LAYER_OPS,
    LayerOpModel,
    layer_op_inputs,
    op_geometry,
)
from dse.roofline import LAUNCH_S
from dse.spec.hardware import get_gpu
from dse.spec.stand_ins import lender


# ---------------------------------------------------------------------------- layer ops
def layer_op_rows(table: pd.DataFrame, gpu: str) -> pd.DataFrame:
    if table.empty or "op" not in table:
        return table.iloc[:0]
    return table[(table["gpu"] == gpu) & table["op"].isin(LAYER_OPS)].reset_index(drop=True)


def layer_op_roofline_s(rows: pd.DataFrame, gpu: str) -> np.ndarray:
    """Plain roofline of a layer op: fp16 bytes read + written at HBM bandwidth + 5 us floor."""
    op = rows["op"].to_numpy(str)
    t, w = op_geometry(op, layer_op_inputs(rows))
    # elements moved per output element: norms/rope/emb read 1 write 1, add reads 2, act 3
    io = np.where(op == "add", 3.0, np.where(op == "mlp_act", 3.0, 2.0))
    return LAUNCH_S + t * w * io * 2.0 / get_gpu(gpu).hbm_bw_bytes_per_s


LAYER_OP_GROUP = cv_group("layer_op", ("model",))  # whole vidur models, at every TP


def layer_op_band_table(rows: pd.DataFrame, gpu: str) -> bands.BandTable:
    """Leave one vidur model out (each model predicted by a fit without it, at every TP): the
    layer-op model's CV and its band's calibration table, coverage reported by operator."""

    def fp(train: np.ndarray, test: np.ndarray) -> dict[str, np.ndarray]:
        ins = layer_op_inputs(rows.iloc[test])
        m = LayerOpModel(gpu).fit(rows.iloc[train])
        miss = m.range_misses(ins["op"], ins["gated_mlp"], **{c: ins[c] for c in INPUTS})
        return {"latency_s": m.predict(**ins)["latency_s"], "degree": degree_of(miss, len(test))}

    return bands.BandTable(
        "layer_op.vidur",
        rows["latency_s"].to_numpy(float),
        architecture_groups(rows, LAYER_OP_GROUP),
        leave_one_group_out,
        fp,
        "leave one vidur model out",
        {"op": rows["op"].astype(str).to_numpy()},
        rows["model"].astype(str).to_numpy(),
    )


def cv_layer_op(rows: pd.DataFrame, gpu: str) -> np.ndarray:
    """Leave-one-model-out predictions (each vidur model predicted by a fit without it)."""
    t = layer_op_band_table(rows, gpu)
    return held_out_predict(t.groups, t.folds, t.fit_predict).get(
        "latency_s", np.full(len(rows), np.nan)
    )


def layer_op_cv_summary(rows: pd.DataFrame, pred: np.ndarray, gpu: str) -> dict[str, Any]:
    y = rows["latency_s"].to_numpy(float)
    gated = rows["gated_mlp"].to_numpy(bool)
    big = y >= 20e-6
    return {
        "scheme": "leave one vidur model out",
        "rows": len(rows),
        "groups": int(rows["model"].nunique()),
        "latency_mape_pct": reported(mape_pct(pred, y)),
        "latency_mape_pct_gated_models": reported(mape_pct(pred[gated], y[gated])),
        "latency_mape_pct_rows_over_20us": reported(mape_pct(pred[big], y[big])),
        "latency_mape_pct_by_op": {
            op: reported(
                mape_pct(pred[rows["op"].to_numpy() == op], y[rows["op"].to_numpy() == op])
            )
            for op in LAYER_OPS
        },
        "latency_mape_pct_by_model": {
            str(mo): reported(
                mape_pct(pred[rows["model"].to_numpy() == mo], y[rows["model"].to_numpy() == mo])
            )
            for mo in sorted(rows["model"].unique())
        },
        "baselines": {"roofline_mape_pct": reported(mape_pct(layer_op_roofline_s(rows, gpu), y))},
    }


# A GPU without vidur rows borrows the rows of the chip it shares compute (SMs, kernels) with
# (dse.spec.stand_ins "layer_op_rows"); the model is then a transfer and its manifest entry says so.


def _layer_op_source(ctx: Any) -> tuple[pd.DataFrame, str]:
    """The vidur layer-op rows a GPU's model is fitted on, and the GPU they were measured on."""
    table = ctx.table("layer_op")
    source_gpu = ctx.gpu
    rows = layer_op_rows(table, ctx.gpu)
    if rows.empty and lender("layer_op_rows", ctx.gpu) is not None:
        source_gpu = lender("layer_op_rows", ctx.gpu)
        rows = layer_op_rows(table, source_gpu)
    return rows, source_gpu


def layer_op_band_tables(ctx: Any) -> list[bands.BandTable]:
    """`dse fit --bands-only`: the layer-op model's CV table (rows of its own chip or lender)."""
    rows, source_gpu = _layer_op_source(ctx)
    has = ctx.keep is not None and ctx.keep.has("layer_op.vidur")
    return [layer_op_band_table(rows, source_gpu)] if has and not rows.empty else []


def fit_layer_op_family(ctx: Any) -> list[FittedModel]:
    rows, source_gpu = _layer_op_source(ctx)
    if rows.empty:
        ctx.log(f"layer_op: no vidur layer-op rows for {ctx.gpu}; skipped")
        return []
    t0 = time.perf_counter()
    table = layer_op_band_table(rows, source_gpu)
    oof = bands.held_out(table)
    pred = oof.get("latency_s", np.full(len(rows), np.nan))
    band = bands.calibrate(table, oof, nested=getattr(ctx, "band_coverage", False))
    model = LayerOpModel(source_gpu).fit(rows)
    model.gpu = ctx.gpu
    cv = layer_op_cv_summary(rows, pred, source_gpu)
    cv["in_sample_latency_mape_pct"] = reported(
        mape_pct(model.predict(**layer_op_inputs(rows))["latency_s"], rows["latency_s"])
    )
    ctx.log(
        f"layer_op.vidur: {len(rows)} rows, CV (leave-one-model-out) latency MAPE "
        f"{cv['latency_mape_pct']}% (gated models {cv['latency_mape_pct_gated_models']}%), "
        f"roofline {cv['baselines']['roofline_mape_pct']}% ({time.perf_counter() - t0:.0f} s)"
    )
    info = {
        "ops": list(map(str, model.keys_)),
        "rows_per_wave": [float(x) for x in model.rows_per_wave_],
        "models": sorted(rows["model"].unique()),
        "timing_statistic": "median of vidur's repeats (1 us timer resolution)",
        "fitted_on_gpu": source_gpu,
        "note": "measured on this GPU"
        if source_gpu == ctx.gpu
        else f"no vidur rows for {ctx.gpu}: the {source_gpu} fit is used as is (same SMs and "
        "kernels; the memory-bound parts are likely slow by up to the HBM bandwidth ratio)",
    }
    return [
        FittedModel("layer_op.vidur", model, cv=cv, files=ctx.files(rows), info=info, band=band)
    ]


def _vidur_gemm_shapes(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(m, n, k) of vidur's projection GEMM rows (per GPU after tensor parallelism)."""
    op = rows["op"].to_numpy(str)
    t = rows["num_tokens"].to_numpy(float)
    d = rows["d_model"].to_numpy(float)
    h = rows["n_heads"].to_numpy(float)
    kv = rows["n_kv_heads"].to_numpy(float)
    ff = rows["d_ff"].to_numpy(float)
    tp = rows["tensor_parallel"].to_numpy(float)
    gated = rows["gated_mlp"].to_numpy(bool)
    hd = d / h
    qkv = (h + 2 * kv) / tp * hd
    n = np.select(
        [op == "attn_pre_proj", op == "attn_post_proj", op == "mlp_up_proj"],
        [qkv, d, ff / tp * np.where(gated, 2.0, 1.0)],
        d,
    )
    k = np.select(
        [op == "attn_pre_proj", op == "attn_post_proj", op == "mlp_up_proj"],
        [d, h / tp * hd, d],
        ff / tp,
    )
    return t, n, k


def predict_layer_op_rows(artifact: Artifact, kind: str, rows: pd.DataFrame) -> pd.DataFrame:
    """`dse validate` hook: layer ops by the layer-op model, projection GEMMs as the pricer prices
    them (the GEMM models, times the Level-2 eager calibration where the artifact has it)."""
    out = pd.DataFrame(
        {"latency_pred_s": np.nan, "energy_pred_j": np.nan}, index=rows.index, dtype=float
    )
    names = artifact.names("layer_op")
    ops = rows["op"].astype(str)
    sel = ops.isin(LAYER_OPS).to_numpy()
    if names and sel.any():
        model = artifact.model(names[0])
        ins = layer_op_inputs(rows[sel])
        p = model.predict(**ins)
        lat = np.where(p["covered"], p["latency_s"], np.nan)
        out.loc[rows.index[sel], "latency_pred_s"] = lat
        miss = model.range_misses(ins["op"], ins["gated_mlp"], **{c: ins[c] for c in INPUTS})
        deg = degree_of(miss, len(lat))
        for op in np.unique(ins["op"]):  # the band's held-out coverage is measured per operator
            at = ins["op"] == op
            idx = rows.index[sel][at]
            bands.put_band(out, idx, artifact, names[0], lat[at], {"op": op}, degree=deg[at])
    gsel = ops.isin(GEMM_OPS).to_numpy()
    if gsel.any() and artifact.names("gemm"):
        from dse.fitting.e2e_rows import projection_times_s
        from dse.predict.gemm_choice import Gemm

        m, n, k = _vidur_gemm_shapes(rows[gsel])
        try:
            ch = Gemm(artifact).choose("float16")
            # the pricer's path: Level 1 times the Level-2 eager calibration (issue 33)
            lat = projection_times_s(rows[gsel], artifact)
            idx = rows.index[gsel]
            out.loc[idx, "latency_pred_s"] = lat
            bands.put_band(out, idx, ch.artifact, ch.name, lat, label=ch.label, m=m, n=n, k=k)
        except (ArtifactError, ConfigError):
            pass
    return out
