"""The all-reduce family: one `dse.models.allreduce.AllReduceModel` (or `CollectiveModel`) per
implementation and collective op of a GPU's single-node rows, cross-validated by size octave,
and its row predictor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from dse.fitting import bands
from dse.fitting.cv import held_out_predict, leave_one_group_out
from dse.metrics import mape_pct, reported
from dse.models import base as _base
from dse.models.allreduce import (
    AllReduceModel,
    CollectiveModel,
    implementation_key,
    shape_implementation,
)
from dse.models.artifact import Artifact, FittedModel
from dse.models.band import degree_of
from dse.spec.hardware import get_gpu


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


OCTAVE_SCHEME = "leave one message-size octave out (all GPU counts together)"


def allreduce_band_table(
    name: str,
    rows: pd.DataFrame,
    make: Callable[[], AllReduceModel],
    shape_rows: pd.DataFrame | None = None,
) -> bands.BandTable:
    """Leave one message-size octave out (every size of an octave held out together; a
    collective has no architecture input): the CV of one collective table and its band's
    calibration table. `shape_rows` go to every fit (`AllReduceModel.fit`)."""

    def fp(train: np.ndarray, test: np.ndarray) -> dict[str, np.ndarray]:
        te = rows.iloc[test]
        ins = {
            "message_bytes": te["message_bytes"].to_numpy(float),
            "n_gpus": te["n_gpus"].to_numpy(float),
        }
        m = make().fit(rows.iloc[train], shape_rows)
        miss = _base.range_misses(m.fitted_range(), ins)
        return {"latency_s": m.predict(**ins)["latency_s"], "degree": degree_of(miss, len(te))}

    y, octv = rows["latency_s"].to_numpy(float), size_octaves(rows)
    names = np.char.add("2^", octv.astype(str)) if len(octv) else None  # bytes
    return bands.BandTable(name, y, octv, leave_one_group_out, fp, OCTAVE_SCHEME, names=names)


def cv_allreduce(
    rows: pd.DataFrame,
    make: Callable[[], AllReduceModel],
    shape_rows: pd.DataFrame | None = None,
) -> np.ndarray:
    """Leave-one-octave-out predictions (every size of an octave held out together);
    `shape_rows` go to every fit (`AllReduceModel.fit`)."""
    t = allreduce_band_table("", rows, make, shape_rows)
    out = held_out_predict(t.groups, t.folds, t.fit_predict)
    return out.get("latency_s", np.full(len(rows), np.nan))


def _allreduce_specs(
    ctx: Any, groups: dict[str, pd.DataFrame]
) -> list[tuple[str, pd.DataFrame, Callable[[], AllReduceModel], pd.DataFrame | None]]:
    """(model name, rows, constructor, shape rows) of every collective table, the CUDA-graph
    vLLM all-reduce first (the Level-1 adapter prices a tensor-parallel all-reduce with the
    first vLLM model of the artifact: how engines replay decode steps)."""
    out = []
    for name in sorted(groups, key=lambda n: (not n.endswith("vllm_graph"), n)):
        cls = AllReduceModel if name.startswith("allreduce.") else CollectiveModel
        key = name.split(".", 1)[1]
        # an int8 NCCL table borrows the float16 table's rate-curve shape (its own octaves only)
        shape = (
            groups.get(f"allreduce.{shape_implementation(key)}") if cls is AllReduceModel else None
        )

        def make(cls: type = cls, key: str = key) -> AllReduceModel:
            return cls(ctx.gpu, key)

        out.append((name, groups[name], make, shape))
    return out


def allreduce_band_tables(ctx: Any) -> list[bands.BandTable]:
    """`dse fit --bands-only`: the octave-held-out CV table of every collective of `ctx.keep`."""
    groups = allreduce_groups(ctx.table("allreduce"), ctx.gpu)
    return [
        allreduce_band_table(name, rows, make, shape)
        for name, rows, make, shape in _allreduce_specs(ctx, groups)
        if ctx.keep is not None and ctx.keep.has(name)
    ]


def fit_allreduce_family(ctx: Any) -> list[FittedModel]:
    groups = allreduce_groups(ctx.table("allreduce"), ctx.gpu)
    if not groups:
        ctx.log(f"allreduce: no single-node collective rows for {ctx.gpu}; skipped")
        return []
    out = []
    nv = get_gpu(ctx.gpu).nvlink_bw_bytes_per_s
    for name, rows, make, shape in _allreduce_specs(ctx, groups):
        table = allreduce_band_table(name, rows, make, shape)
        oof = bands.held_out(table)
        pred = oof.get("latency_s", np.full(len(rows), np.nan))
        band = bands.calibrate(table, oof, nested=getattr(ctx, "band_coverage", False))
        y = rows["latency_s"].to_numpy(float)
        octv = size_octaves(rows)
        interior = (octv > octv.min()) & (octv < octv.max())
        b, g = rows["message_bytes"].to_numpy(float), rows["n_gpus"].to_numpy(float)
        # ring all-reduce at the NVLink rate, plus a 10 us floor
        roof = 10e-6 + b * 2 * (g - 1) / g / nv
        cv = {
            "scheme": OCTAVE_SCHEME,
            "rows": len(rows),
            "latency_mape_pct": reported(mape_pct(pred, y)),
            "latency_mape_pct_interior_sizes": reported(mape_pct(pred[interior], y[interior])),
            "by_n_gpus": {
                int(k): reported(mape_pct(pred[g == k], y[g == k])) for k in np.unique(g)
            },
            "baselines": {"roofline_mape_pct": reported(mape_pct(roof, y))},
        }
        model = make().fit(rows, shape)
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
        out.append(FittedModel(name, model, cv=cv, files=ctx.files(used), info=info, band=band))
    return out


def predict_allreduce_rows(artifact: Artifact, kind: str, rows: pd.DataFrame) -> pd.DataFrame:
    out = pd.DataFrame(
        {"latency_pred_s": np.nan, "energy_pred_j": np.nan}, index=rows.index, dtype=float
    )
    for gpu in rows["gpu"].unique():
        for name, g in allreduce_groups(rows.assign(_i=rows.index), str(gpu)).items():
            if not artifact.has(name):
                continue
            ins = {
                "message_bytes": g["message_bytes"].to_numpy(float),
                "n_gpus": g["n_gpus"].to_numpy(float),
            }
            p = artifact.model(name).predict(**ins)
            idx = pd.Index(g["_i"].to_numpy())
            out.loc[idx, "latency_pred_s"] = p["latency_s"]
            bands.put_band(out, idx, artifact, name, p["latency_s"], **ins)
    return out
