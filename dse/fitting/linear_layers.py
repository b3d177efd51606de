"""The linear-layer family: the mixer kernels of linear-attention layers (Gated DeltaNet, Mamba-2)
per engine and phase (`dse.models.linear_layers`), fitted on aiconfigurator's linear_layer rows
with CV held out by layout, and their row predictor.

A model's CV and band are those of the layer, as `dse predict` prices it (linear/scan): the
calls whose every kernel the table measured, measured as the sum of their kernels' times.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pandas as pd

from dse.fitting import bands
from dse.fitting import cv as U
from dse.fitting.cv import FIT_CV_FOLDS
from dse.metrics import mape_pct, reported
from dse.models.artifact import Artifact, FittedModel
from dse.models.band import degree_of
from dse.models.linear_layers import INPUTS, LinearLayerModel, linear_inputs, model_name

KIND = "linear_layer"
FAMILY = "linear_layer"
LAYOUT_GROUP = U.cv_group(FAMILY, ("n_heads", "head_dim", "n_groups", "state_dim", "chunk_size"))
# one call of a layer's kernels as the collector ran it (per model: d_model enters no kernel, but
# two models of one per-GPU layout are two calls)
CALL = ("d_model", *LAYOUT_GROUP, "conv_width", "batch_size", "seq_len")
MIN_LINEAR_ROWS = 50
# (layer, engine) tables not fitted, and why: the collector's conv is not what the engine runs.
NOT_FITTED = {
    ("gdn", "trtllm"): (
        "the TensorRT-LLM 1.3.0rc20 collector convolves the key channels alone (nk dk), not "
        "the packed q|k|v its engine convolves; and 4 layouts. TensorRT-LLM rows take vLLM's model"
    ),
}


def _tasks(ctx: Any) -> list[tuple[str, str, str]]:
    """(layer, phase, engine) of every linear_layer table of `ctx.gpu` fitted."""
    table = ctx.table(KIND)
    if table.empty:
        return []
    mine = table[table["gpu"] == ctx.gpu]
    out = []
    for (layer, phase, engine), d in mine.groupby(["layer", "phase", "engine"], sort=True):
        layer, phase, engine = str(layer), str(phase), str(engine)
        if (layer, engine) in NOT_FITTED:
            continue
        name = model_name(layer, phase, engine)
        if len(d) < MIN_LINEAR_ROWS:
            ctx.skip_small(name, KIND, engine, len(d), MIN_LINEAR_ROWS)
        elif ctx.wants(name):
            out.append((layer, phase, engine))
    return out


def calls_of(rows: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """(calls, call index of each kernel row; -1 for a row whose call lacks a kernel): the
    layer's calls whose every kernel of the table was measured, `latency_s` their sum."""
    kernels = rows["kernel"].nunique()
    key = rows.groupby(list(CALL), sort=True).ngroup().to_numpy()
    calls = rows.assign(_call=key).groupby("_call", sort=True)
    full = calls["kernel"].nunique() == kernels
    out = calls.first()[list(CALL)]
    out["latency_s"] = calls["latency_s"].sum()
    out = out[full.to_numpy()]
    remap = np.full(key.max() + 1 if len(key) else 0, -1)
    remap[out.index.to_numpy()] = np.arange(len(out))
    return out.reset_index(drop=True), remap[key]


def _spec(ctx: Any, layer: str, phase: str, engine: str) -> tuple[pd.DataFrame, Any]:
    table = ctx.table(KIND)
    rows = table[
        (table["gpu"] == ctx.gpu)
        & (table["engine"] == engine)
        & (table["layer"] == layer)
        & (table["phase"] == phase)
    ].reset_index(drop=True)
    return rows, lambda: LinearLayerModel(layer, phase, ctx.gpu, engine, seed=ctx.seed)


def band_table(name: str, rows: pd.DataFrame, make: Any, seed: int) -> bands.BandTable:
    """The held-out CV of one table over its calls: FIT_CV_FOLDS seeded folds by layout, each
    fit on the kernel rows of the other layouts' calls."""
    calls, cid = calls_of(rows)

    def fp(train: np.ndarray, test: np.ndarray) -> dict[str, np.ndarray]:
        model = make().fit(rows[np.isin(cid, train)])
        ins = linear_inputs(calls.iloc[test])
        p = model.predict(**ins)
        return {
            "latency_s": np.asarray(p["latency_s"], float),
            "base_s": np.asarray(p["base_s"], float),
            "degree": degree_of(model.range_misses(**ins), len(test)),
        }

    return bands.BandTable(
        name,
        calls["latency_s"].to_numpy(float),
        U.architecture_groups(calls, LAYOUT_GROUP),
        U.seeded_group_folds(FIT_CV_FOLDS, seed),
        fp,
        f"{FIT_CV_FOLDS} seeded group folds by layout {LAYOUT_GROUP} over the layer's calls",
        {},
        U.architecture_groups(calls, LAYOUT_GROUP, sep="x"),
    )


def _fit_table(ctx: Any, layer: str, phase: str, engine: str) -> FittedModel:
    t0 = time.perf_counter()
    name = model_name(layer, phase, engine)
    rows, make = _spec(ctx, layer, phase, engine)
    table = band_table(name, rows, make, ctx.seed)
    cv: dict[str, Any] = {"scheme": table.scheme, "rows": len(rows), "calls": len(table.y)}
    band = None
    if ctx.cv:
        oof = bands.held_out(table)
        band = bands.calibrate(table, oof, nested=ctx.band_coverage)
        cv["latency_mape_pct"] = reported(mape_pct(oof.get("latency_s"), table.y))
        cv["base_roofline_fitted_mape_pct"] = reported(mape_pct(oof.get("base_s"), table.y))
        cv["groups"] = len(np.unique(table.groups))
    model = make().fit(rows)
    ctx.log(
        f"{name}: {len(rows)} kernel rows ({len(table.y)} calls), CV latency MAPE "
        f"{cv.get('latency_mape_pct')}% by layout ({time.perf_counter() - t0:.0f} s)"
    )
    info = {
        "engine": engine,
        "layer": layer,
        "phase": phase,
        "kernels": list(model.kernels_),
        "engine_versions": sorted(map(str, rows["engine_version"].unique())),
        "kernel_sources": sorted(map(str, rows["kernel_source"].unique())),
        "not_fitted": {f"{k[0]}.{k[1]}": why for k, why in NOT_FITTED.items()},
    }
    return FittedModel(name, model, cv=cv, files=ctx.files(rows), info=info, band=band)


def fit_linear_family(ctx: Any) -> list[FittedModel]:
    return U.map_tasks(ctx, _fit_table, _tasks(ctx))


def linear_band_tables(ctx: Any) -> list[bands.BandTable]:
    """`dse fit --bands-only`: the held-out CV table of every linear-layer model of `ctx.keep`."""
    out = []
    for layer, phase, engine in _tasks(ctx):
        name = model_name(layer, phase, engine)
        if ctx.keep is not None and ctx.keep.has(name):
            rows, make = _spec(ctx, layer, phase, engine)
            out.append(band_table(name, rows, make, ctx.seed))
    return out


def predict_linear_rows(artifact: Artifact, kind: str, rows: pd.DataFrame) -> pd.DataFrame:
    """Each kernel row's time from the model of its (layer, phase, engine), else vLLM's."""
    out = pd.DataFrame(
        {"latency_pred_s": np.nan, "energy_pred_j": np.nan}, index=rows.index, dtype=float
    )
    names = set(artifact.names(KIND))
    for (layer, phase, engine, kernel), sub in rows.groupby(
        ["layer", "phase", "engine", "kernel"], sort=False
    ):
        name = model_name(str(layer), str(phase), str(engine))
        if name not in names:
            name = model_name(str(layer), str(phase), "vllm")
        if name not in names:
            continue
        model = artifact.model(name)
        if kernel not in model.kernels_:
            continue
        p = model.predict(**{k: sub[k].to_numpy() for k in INPUTS})
        out.loc[sub.index, "latency_pred_s"] = p[f"{kernel}_s"]
    return out
