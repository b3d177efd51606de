"""The reduction family: `dse.models.reductions.ReductionOpModel` on LLMCompass's softmax,
LayerNorm and GELU rows, and its row predictor.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from dse.fitting.cv import _mape
from dse.models.artifact import Artifact, FittedModel
from dse.models.reductions import LLMCOMPASS_OPS, ReductionOpModel


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
