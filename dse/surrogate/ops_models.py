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
             topk, experts, moe_tp, moe_ep).

Model names in an artifact: layer_op.vidur, reduction.llmcompass, allreduce.<engine>.<impl>[...],
collective.<op>.<engine>.<impl>, context_attention.<engine>, generation_attention.<engine>,
moe.<engine>.<dtype>. Every model's CV entry records the scheme that produced it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from dse.errors import ArtifactError, ConfigError
from dse.models import _base
from dse.models.allreduce import (
    AllReduceModel,
    CollectiveModel,
    implementation_key,
    shape_implementation,
)
from dse.models.artifact import Artifact, FittedModel
from dse.models.attention import (
    ContextAttentionModel,
    GenerationAttentionModel,
    attention_inputs,
    attention_work,
)
from dse.models.layer_ops import GEMM_OPS, LAYER_OPS, LayerOpModel, layer_op_inputs, op_geometry
from dse.models.moe import MoEModel, moe_inputs, moe_work
from dse.models.reductions import LLMCOMPASS_OPS, ReductionOpModel
from dse.roofline import LAUNCH_S, roofline_s
from dse.spec.hardware import get_gpu
from dse.spec.stand_ins import lender
from dse.surrogate import _fitutil as U

# CV inside `dse fit`: 3 seeded group folds, the MLP families' CV fits capped at this many rows
# (the shipped model itself fits on up to 30000) so that `dse fit` stays in minutes; the
# benchmark benchmarks/level1_ops_cv.py runs the full scheme (5 folds, shipped settings).
FIT_CV_FOLDS = 3
FIT_CV_MAX_ROWS = 8000
MIN_MOE_ROWS = 300  # (engine, dtype) groups smaller than this are not fitted


def _mape(pred: Any, y: Any) -> float | None:
    v = _base.mape_pct(pred, y)
    return None if not np.isfinite(v) else round(v, 3)


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


def cv_layer_op(rows: pd.DataFrame, gpu: str) -> np.ndarray:
    """Leave-one-model-out predictions (each vidur model predicted by a fit without it)."""
    pred = np.full(len(rows), np.nan)
    models = rows["model"].to_numpy(str)
    for name in np.unique(models):
        te = models == name
        m = LayerOpModel(gpu).fit(rows[~te])
        pred[te] = m.predict(**layer_op_inputs(rows[te]))["latency_s"]
    return pred


def layer_op_cv_summary(rows: pd.DataFrame, pred: np.ndarray, gpu: str) -> dict[str, Any]:
    y = rows["latency_s"].to_numpy(float)
    gated = rows["gated_mlp"].to_numpy(bool)
    big = y >= 20e-6
    return {
        "scheme": "leave one vidur model out",
        "rows": len(rows),
        "groups": int(rows["model"].nunique()),
        "latency_mape_pct": _mape(pred, y),
        "latency_mape_pct_gated_models": _mape(pred[gated], y[gated]),
        "latency_mape_pct_rows_over_20us": _mape(pred[big], y[big]),
        "latency_mape_pct_by_op": {
            op: _mape(pred[rows["op"].to_numpy() == op], y[rows["op"].to_numpy() == op])
            for op in LAYER_OPS
        },
        "latency_mape_pct_by_model": {
            str(mo): _mape(pred[rows["model"].to_numpy() == mo], y[rows["model"].to_numpy() == mo])
            for mo in sorted(rows["model"].unique())
        },
        "baselines": {"roofline_mape_pct": _mape(layer_op_roofline_s(rows, gpu), y)},
    }


# A GPU without vidur rows borrows the rows of the chip it shares compute (SMs, kernels) with
# (dse.spec.stand_ins "layer_op_rows"); the model is then a transfer and its manifest entry says so.


def fit_layer_op_family(ctx: Any) -> list[FittedModel]:
    table = ctx.table("layer_op")
    source_gpu = ctx.gpu
    rows = layer_op_rows(table, ctx.gpu)
    if rows.empty and lender("layer_op_rows", ctx.gpu) is not None:
        source_gpu = lender("layer_op_rows", ctx.gpu)
        rows = layer_op_rows(table, source_gpu)
    if rows.empty:
        ctx.log(f"layer_op: no vidur layer-op rows for {ctx.gpu}; skipped")
        return []
    t0 = time.perf_counter()
    multi = rows["model"].nunique() > 1
    pred = cv_layer_op(rows, source_gpu) if multi else np.full(len(rows), np.nan)
    model = LayerOpModel(source_gpu).fit(rows)
    model.gpu = ctx.gpu
    cv = layer_op_cv_summary(rows, pred, source_gpu)
    cv["in_sample_latency_mape_pct"] = _mape(
        model.predict(**layer_op_inputs(rows))["latency_s"], rows["latency_s"]
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
    return [FittedModel("layer_op.vidur", model, cv=cv, files=ctx.files(rows), info=info)]


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
    """`dse validate` hook: layer ops by the layer-op model, projection GEMMs by the GEMM models."""
    out = pd.DataFrame(
        {"latency_pred_s": np.nan, "energy_pred_j": np.nan}, index=rows.index, dtype=float
    )
    names = artifact.names("layer_op")
    ops = rows["op"].astype(str)
    sel = ops.isin(LAYER_OPS).to_numpy()
    if names and sel.any():
        p = artifact.model(names[0]).predict(**layer_op_inputs(rows[sel]))
        out.loc[rows.index[sel], "latency_pred_s"] = np.where(p["covered"], p["latency_s"], np.nan)
    gsel = ops.isin(GEMM_OPS).to_numpy()
    if gsel.any() and artifact.names("gemm"):
        from dse.predict.gemm_choice import Gemm

        m, n, k = _vidur_gemm_shapes(rows[gsel])
        try:
            p = Gemm(artifact).predict(m, n, k, dtype="float16")
            out.loc[rows.index[gsel], "latency_pred_s"] = p["latency_s"]
        except (ArtifactError, ConfigError):
            pass
    return out


# ---------------------------------------------------------------------------- reductions
def fit_reduction_family(ctx: Any) -> list[FittedModel]:
    tables = {k: ctx.table(k) for k in LLMCOMPASS_OPS}
    have = {k: t for k, t in tables.items() if not t.empty and "gpu" in t and len(t) >= 4}
    if not have:
        ctx.log("reduction: no softmax/layernorm/gelu rows; skipped")
        return []
    gpus = set().union(*(set(t["gpu"]) for t in have.values()))
    fitted_on = ctx.gpu if ctx.gpu in gpus else ("a100_sxm" if "a100_sxm" in gpus else None)
    if fitted_on is None:
        return []
    model = ReductionOpModel(ctx.gpu, fitted_on).fit(have)
    cv: dict[str, Any] = {"scheme": "leave one row (shape) out", "fitted_on": fitted_on}
    files: list[str] = []
    for op, t in have.items():
        t = t[t["gpu"] == fitted_on].reset_index(drop=True)
        files += list(ctx.files(t))
        pred = np.full(len(t), np.nan)
        for i in range(len(t)):
            m = ReductionOpModel(fitted_on, fitted_on).fit({op: t.drop(index=i)})
            r = t.iloc[[i]]
            nn = r["n"].to_numpy(float) if "n" in r else 1.0
            pred[i] = m.predict(op=op, m=r["m"].to_numpy(float), n=nn)["latency_s"][0]
        cv[f"{op}_latency_mape_pct"] = _mape(pred, t["latency_s"])
        cv[f"{op}_rows"] = len(t)
    info = {
        "measured": fitted_on == ctx.gpu,
        "note": "fitted on LLMCompass A100 rows (PyTorch eager); other GPUs: memory term scaled "
        "by the HBM bandwidth ratio, no measurements behind it",
    }
    ctx.log(
        f"reduction.llmcompass (from {fitted_on}): CV "
        + ", ".join(f"{op} {cv.get(f'{op}_latency_mape_pct')}%" for op in have)
    )
    return [FittedModel("reduction.llmcompass", model, cv=cv, files=tuple(files), info=info)]


def predict_reduction_rows(artifact: Artifact, kind: str, rows: pd.DataFrame) -> pd.DataFrame:
    out = pd.DataFrame(
        {"latency_pred_s": np.nan, "energy_pred_j": np.nan}, index=rows.index, dtype=float
    )
    names = artifact.names("reduction_op")
    if not names:
        return out
    n = rows["n"].to_numpy(float) if "n" in rows else np.ones(len(rows))
    n = np.where(np.isfinite(n), n, 1.0)
    p = artifact.model(names[0]).predict(op=kind, m=rows["m"].to_numpy(float), n=n)
    out["latency_pred_s"] = p["latency_s"]
    return out


# ---------------------------------------------------------------------------- all-reduce
def allreduce_groups(table: pd.DataFrame, gpu: str) -> dict[str, pd.DataFrame]:
    """Model name -> single-node rows of one GPU, per implementation and collective op."""
    if table.empty:
        return {}
    d = table[table["gpu"] == gpu]
    if "n_nodes" in d:
        d = d[d["n_nodes"].fillna(1).to_numpy() == 1]
    if d.empty:
        return {}
    d = d.assign(_key=implementation_key(d).to_numpy(), _op=d["op"].astype(str).to_numpy())
    out = {}
    for (key, op), g in d.groupby(["_key", "_op"], sort=True):
        out[allreduce_model_name(str(op), str(key))] = g.drop(columns=["_key", "_op"]).reset_index(
            drop=True
        )
    return out


def allreduce_model_name(op: str, key: str) -> str:
    """The artifact's model name of one collective op of one implementation key."""
    return f"allreduce.{key}" if op == "all_reduce" else f"collective.{op}.{key}"


def size_octaves(rows: pd.DataFrame) -> np.ndarray:
    return np.floor(np.log2(rows["message_bytes"].to_numpy(float)) + 1e-9).astype(np.int64)


def cv_allreduce(rows: pd.DataFrame, make: Callable[[], AllReduceModel]) -> np.ndarray:
    """Leave-one-octave-out predictions (every size of an octave held out together)."""
    pred = np.full(len(rows), np.nan)
    octv = size_octaves(rows)
    for o in np.unique(octv):
        te = octv == o
        if te.all():
            continue
        m = make().fit(rows[~te])
        pred[te] = m.predict(
            message_bytes=rows["message_bytes"].to_numpy(float)[te],
            n_gpus=rows["n_gpus"].to_numpy(float)[te],
        )["latency_s"]
    return pred


def fit_allreduce_family(ctx: Any) -> list[FittedModel]:
    groups = allreduce_groups(ctx.table("allreduce"), ctx.gpu)
    if not groups:
        ctx.log(f"allreduce: no single-node collective rows for {ctx.gpu}; skipped")
        return []
    out = []
    nv = get_gpu(ctx.gpu).nvlink_bw_bytes_per_s
    # The Level-1 adapter prices a tensor-parallel all-reduce with the first vLLM model of the
    # artifact: put the CUDA-graph one (how engines replay decode steps) first.
    order = sorted(groups, key=lambda n: (not n.endswith("vllm_graph"), n))
    for name in order:
        rows = groups[name]
        cls = AllReduceModel if name.startswith("allreduce.") else CollectiveModel

        key = name.split(".", 1)[1]
        # an int8 NCCL table borrows the float16 table's rate-curve shape (its own octaves only)
        shape = (
            groups.get(f"allreduce.{shape_implementation(key)}") if cls is AllReduceModel else None
        )

        def make(cls: type = cls, key: str = key, shape: Any = shape) -> AllReduceModel:
            return cls(ctx.gpu, key, shape)

        pred = cv_allreduce(rows, make)
        y = rows["latency_s"].to_numpy(float)
        octv = size_octaves(rows)
        interior = (octv > octv.min()) & (octv < octv.max())
        b, g = rows["message_bytes"].to_numpy(float), rows["n_gpus"].to_numpy(float)
        # ring all-reduce at the NVLink rate, plus a 10 us floor
        roof = 10e-6 + b * 2 * (g - 1) / g / nv
        cv = {
            "scheme": "leave one message-size octave out (all GPU counts together)",
            "rows": len(rows),
            "latency_mape_pct": _mape(pred, y),
            "latency_mape_pct_interior_sizes": _mape(pred[interior], y[interior]),
            "by_n_gpus": {int(k): _mape(pred[g == k], y[g == k]) for k in np.unique(g)},
            "baselines": {"roofline_mape_pct": _mape(roof, y)},
        }
        model = make().fit(rows)
        info = {
            "source": str(rows["source"].iloc[0]),
            "engine": str(rows["engine"].iloc[0]),
            "op": str(rows["op"].iloc[0]),
            "message_bytes_column": "as dse.data reports it",
        }
        ctx.log(
            f"{name}: {len(rows)} rows, CV latency MAPE {cv['latency_mape_pct']}% "
            f"(interior sizes {cv['latency_mape_pct_interior_sizes']}%)"
        )
        used = rows if shape is None else pd.concat([rows, shape])
        out.append(FittedModel(name, model, cv=cv, files=ctx.files(used), info=info))
    return out


def predict_allreduce_rows(artifact: Artifact, kind: str, rows: pd.DataFrame) -> pd.DataFrame:
    out = pd.DataFrame(
        {"latency_pred_s": np.nan, "energy_pred_j": np.nan}, index=rows.index, dtype=float
    )
    for gpu in rows["gpu"].unique():
        for name, g in allreduce_groups(rows.assign(_i=rows.index), str(gpu)).items():
            if not artifact.has(name):
                continue
            p = artifact.model(name).predict(
                message_bytes=g["message_bytes"].to_numpy(float), n_gpus=g["n_gpus"].to_numpy(float)
            )
            out.loc[g["_i"].to_numpy(), "latency_pred_s"] = p["latency_s"]
    return out


# ---------------------------------------------------------------------------- attention
ATTENTION_CLASSES = {
    "context_attention": ContextAttentionModel,
    "generation_attention": GenerationAttentionModel,
}
HEAD_GROUP = ("num_heads", "num_kv_heads", "head_dim")


def attention_roofline_s(kind: str, rows: pd.DataFrame, gpu: str) -> np.ndarray:
    """Plain roofline (peak FLOP/s and HBM bandwidth, no launch floor) of attention rows."""
    cls = ATTENTION_CLASSES[kind]
    v = cls()._inputs(attention_inputs(rows))
    flops, bytes_ = attention_work(cls.phase_default, v)
    g = get_gpu(gpu)
    return roofline_s(flops, bytes_, g.peak_bf16_flops_per_s, g.hbm_bw_bytes_per_s)


def grouped_cv(
    rows: pd.DataFrame,
    groups: np.ndarray,
    n_folds: int,
    seed: int,
    fit_predict: Callable[[pd.DataFrame, pd.DataFrame], dict[str, np.ndarray]],
) -> dict[str, np.ndarray]:
    """Out-of-fold predictions over seeded group folds (no row of a held-out group is fitted)."""
    out: dict[str, np.ndarray] = {}
    for te in U.group_folds(groups, n_folds, seed):
        got = fit_predict(rows[~te], rows[te])
        for key, val in got.items():
            out.setdefault(key, np.full(len(rows), np.nan))[te] = val
    return out


def hybrid_cv_summary(
    rows: pd.DataFrame, cv: dict[str, np.ndarray], scheme: str, roof: np.ndarray
) -> dict[str, Any]:
    y = rows["latency_s"].to_numpy(float)
    out: dict[str, Any] = {
        "scheme": scheme,
        "rows": len(rows),
        "latency_mape_pct": _mape(cv["latency_s"], y),
        "base_roofline_fitted_mape_pct": _mape(cv["base_s"], y),
        "baselines": {"roofline_mape_pct": _mape(roof, y)},
    }
    if "energy_j" in cv and "energy_j" in rows and np.isfinite(rows["energy_j"]).any():
        out["energy_mape_pct"] = _mape(cv["energy_j"], rows["energy_j"])
        out["power_mape_pct"] = _mape(cv["power_w"], rows["power_w"])
    return out


def fit_attention_family(ctx: Any) -> list[FittedModel]:
    tasks = []
    for kind in ATTENTION_CLASSES:
        table = ctx.table(kind)
        if table.empty:
            continue
        counts = table.loc[table["gpu"] == ctx.gpu, "engine"].value_counts()
        tasks += [(kind, str(e)) for e in sorted(counts.index) if counts[e] >= 200]
    return U.map_tasks(ctx, _fit_attention_table, tasks)


def _fit_attention_table(ctx: Any, kind: str, engine: str) -> FittedModel:
    """One attention table's model (CV, then the final fit): a task of `U.map_tasks`."""
    cls = ATTENTION_CLASSES[kind]
    table = ctx.table(kind)
    rows = table[(table["gpu"] == ctx.gpu) & (table["engine"] == engine)].reset_index(drop=True)

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
        lambda **kw: cls(gpu=ctx.gpu, engine=engine, seed=ctx.seed, **kw),
        attention_inputs,
        (HEAD_GROUP, "head configuration"),
        attention_roofline_s(kind, rows, ctx.gpu),
        info,
    )


def _fit_hybrid_table(
    ctx: Any,
    name: str,
    rows: pd.DataFrame,
    make: Callable[..., Any],
    inputs: Callable[[pd.DataFrame], dict[str, np.ndarray]],
    grouping: tuple[tuple[str, ...], str],
    roof: np.ndarray,
    info: Callable[[Any], dict[str, Any]],
) -> FittedModel:
    """An attention or MoE model of one table: held-out CV by `grouping` (the columns and their
    name; fits on <= FIT_CV_MAX_ROWS rows), the final fit on every row, one log line."""
    t0 = time.perf_counter()

    def fp(tr: pd.DataFrame, te: pd.DataFrame) -> dict[str, np.ndarray]:
        return _keep(make(max_rows=FIT_CV_MAX_ROWS).fit(tr).predict(**inputs(te)))

    cols, what = grouping
    groups = U.group_labels(rows, cols)
    cv_pred = grouped_cv(rows, groups, FIT_CV_FOLDS, ctx.seed, fp)
    cv = hybrid_cv_summary(
        rows,
        cv_pred,
        f"{FIT_CV_FOLDS} seeded group folds by {what} {cols} (CV fits on <= {FIT_CV_MAX_ROWS} rows)",
        roof,
    )
    cv["groups"] = len(np.unique(groups))
    model = make().fit(rows)
    _log_hybrid(ctx, name, len(rows), cv, t0)
    return FittedModel(
        name,
        model,
        cv=cv,
        files=ctx.files(rows),
        info=info(model),
        measured_power=model.power_mlp_ is not None,
    )


def _log_hybrid(ctx: Any, name: str, n_rows: int, cv: dict[str, Any], t0: float) -> None:
    """One fit-log line for an attention or MoE model: CV error against its baselines."""
    energy = f", energy {cv['energy_mape_pct']}%" if "energy_mape_pct" in cv else ""
    ctx.log(
        f"{name}: {n_rows} rows, CV latency MAPE {cv['latency_mape_pct']}% "
        f"(fitted roofline {cv['base_roofline_fitted_mape_pct']}%, plain roofline "
        f"{cv['baselines']['roofline_mape_pct']}%){energy} ({time.perf_counter() - t0:.0f} s)"
    )


def _keep(p: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    keys = ("latency_s", "base_s", "energy_j", "power_w")
    return {k: np.asarray(p[k], dtype=float) for k in keys if k in p}


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
        p = artifact.model(name).predict(**attention_inputs(sub))
        out.loc[sub.index, "latency_pred_s"] = p["latency_s"]
        if "energy_j" in p:
            out.loc[sub.index, "energy_pred_j"] = p["energy_j"]
    return out


# ---------------------------------------------------------------------------- MoE
MOE_SHAPE_GROUP = (
    "hidden_size",
    "inter_size",
    "topk",
    "num_experts",
    "moe_tp_size",
    "moe_ep_size",
)
# bf16 first: the Level-1 adapter takes the first vLLM MoE model when it does not say a dtype
MOE_DTYPE_ORDER = ("bfloat16", "fp8", "fp8_block", "int4_wo", "w4a16_mxfp4")


def moe_roofline_s(rows: pd.DataFrame, gpu: str, dtype: str) -> np.ndarray:
    m = MoEModel(gpu, "x", dtype)
    v = m._inputs(moe_inputs(rows))
    w = moe_work(v, m.weight_bytes)
    peak, bw = m._peak()
    return roofline_s(w["flops"], w["bytes"], peak, bw)


def fit_moe_family(ctx: Any) -> list[FittedModel]:
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
    return U.map_tasks(ctx, _fit_moe_table, tasks)


def _fit_moe_table(ctx: Any, engine: str, dtype: str) -> FittedModel:
    """One MoE table's model (CV, then the final fit): a task of `U.map_tasks`."""
    table = ctx.table("moe")
    sel = (table["gpu"] == ctx.gpu) & (table["engine"] == engine) & (table["dtype"] == dtype)
    rows = table[sel].reset_index(drop=True)

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
        p = artifact.model(name).predict(**moe_inputs(sub))
        out.loc[sub.index, "latency_pred_s"] = p["latency_s"]
        if "energy_j" in p:
            out.loc[sub.index, "energy_pred_j"] = p["energy_j"]
    return out
