"""The reduction family: `dse.models.reductions.ReductionOpModel` on LLMCompass's softmax,
LayerNorm and GELU rows, and its row predictor.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from dse.fitting import bands
from dse.fitting.cv import held_out_predict, leave_one_group_out
from dse.metrics import mape_pct, reported
from dse.models.artifact import Artifact, FittedModel
from dse.models.reductions import LLMCOMPASS_OPS, ReductionOpModel

LOO_SCHEME = "leave one row (shape) out"


def _shape_n(rows: pd.DataFrame) -> np.ndarray:
    n = rows["n"].to_numpy(float) if "n" in rows else np.ones(len(rows))
    return np.where(np.isfinite(n), n, 1.0)


def reduction_band_table(have: dict[str, pd.DataFrame], fitted_on: str) -> bands.BandTable:
    """Leave one row (shape) out over the rows of every operator of `fitted_on` (LLMCompass
    measured a few shapes per operator, no layouts): the CV of the reduction model, each
    operator fitted on its own rows, and its band's calibration table (coverage by operator)."""
    rows = pd.concat(
        [t[t["gpu"] == fitted_on].assign(op=op) for op, t in have.items()], ignore_index=True
    )

    def fp(train: np.ndarray, test: np.ndarray) -> dict[str, np.ndarray]:
        tr, te = rows.iloc[train], rows.iloc[test]
        m = ReductionOpModel(fitted_on, fitted_on).fit({op: g for op, g in tr.groupby("op")})
        out = np.full(len(te), np.nan)
        for op in te["op"].unique():
            sel = (te["op"] == op).to_numpy()
            sub = te[sel]
            out[sel] = m.predict(op=op, m=sub["m"].to_numpy(float), n=_shape_n(sub))["latency_s"]
        return {"latency_s": out}

    return bands.BandTable(
        "reduction.llmcompass",
        rows["latency_s"].to_numpy(float),
        np.arange(len(rows)),
        leave_one_group_out,
        fp,
        LOO_SCHEME,
        {"op": rows["op"].to_numpy(str)},
    )


def _reduction_source(ctx: Any) -> tuple[dict[str, pd.DataFrame], str | None]:
    """The LLMCompass tables by operator, and the GPU the fit reads them on (None: none)."""
    tables = {k: ctx.table(k) for k in LLMCOMPASS_OPS}
    have = {k: t for k, t in tables.items() if not t.empty and "gpu" in t and len(t) >= 4}
    if not have:
        return have, None
    gpus = set().union(*(set(t["gpu"]) for t in have.values()))
    fitted_on = ctx.gpu if ctx.gpu in gpus else ("a100_sxm" if "a100_sxm" in gpus else None)
    return have, fitted_on


def reduction_band_tables(ctx: Any) -> list[bands.BandTable]:
    """`dse fit --bands-only`: the reduction model's CV table."""
    have, fitted_on = _reduction_source(ctx)
    if fitted_on is None or ctx.keep is None or not ctx.keep.has("reduction.llmcompass"):
        return []
    return [reduction_band_table(have, fitted_on)]


# ---------------------------------------------------------------------------- reductions
def fit_reduction_family(ctx: Any) -> list[FittedModel]:
    have, fitted_on = _reduction_source(ctx)
    if not have:
        ctx.log("reduction: no softmax/layernorm/gelu rows; skipped")
        return []
    if fitted_on is None:
        return []
    model = ReductionOpModel(ctx.gpu, fitted_on).fit(have)
    cv: dict[str, Any] = {"scheme": LOO_SCHEME, "fitted_on": fitted_on}
    table = reduction_band_table(have, fitted_on)
    oof = held_out_predict(table.groups, table.folds, table.fit_predict)
    pred_all = oof.get("latency_s", np.full(len(table.y), np.nan))
    band = bands.calibrate(table, oof, nested=getattr(ctx, "band_coverage", False))
    files: list[str] = []
    for op, t in have.items():
        t = t[t["gpu"] == fitted_on].reset_index(drop=True)
        files += list(ctx.files(t))
        pred = pred_all[table.strata["op"] == op]
        cv[f"{op}_latency_mape_pct"] = reported(mape_pct(pred, t["latency_s"]))
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
    return [
        FittedModel("reduction.llmcompass", model, cv=cv, files=tuple(files), info=info, band=band)
    ]


def predict_reduction_rows(artifact: Artifact, kind: str, rows: pd.DataFrame) -> pd.DataFrame:
    out = pd.DataFrame(
        {"latency_pred_s": np.nan, "energy_pred_j": np.nan}, index=rows.index, dtype=float
    )
    names = artifact.names("reduction_op")
    if not names:
        return out
    n = rows["n"].to_numpy(float) if "n" in rows else np.ones(len(rows))
    n = np.where(np.isfinite(n), n, 1.0)
    m = rows["m"].to_numpy(float)
    p = artifact.model(names[0]).predict(op=kind, m=m, n=n)
    out["latency_pred_s"] = p["latency_s"]
    bands.put_band(out, rows.index, artifact, names[0], p["latency_s"], {"op": kind}, m=m, n=n)
    return out
