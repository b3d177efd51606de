"""Fitting Level 2: the block residuals (`dse.models.level2.Level2Block`) on vidur's measured
blocks against the Level-1 sum.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dse.fitting.cv import architecture_groups, cv_group
from dse.fitting.e2e_rows import level2_rows
from dse.models.artifact import Artifact, FittedModel
from dse.spec.stand_ins import lenders

LEVEL2_GROUP = cv_group("level2", ("model",))  # whole vidur models, at every TP


def fit_level2(
    gpu: str,
    layer_ops: pd.DataFrame,
    artifact: Artifact | None,
    seed: int = 0,
    min_gain_pct: float = 0.5,
) -> list[FittedModel]:
    """Level-2 block residuals of artifact `gpu` on vidur's rows of its chip, kept only where
    they beat Level 1 alone on held-out models (leave-one-model-out) by `min_gain_pct`."""
    from threadpoolctl import threadpool_limits

    from dse.models.level2 import Level2Block

    sources = lenders("level2_rows", gpu)
    tables = level2_rows(layer_ops, sources, artifact, gpu)
    out = []
    with threadpool_limits(limits=1):
        for block, rows in tables.items():
            X = rows[[c for c in rows.columns if c.startswith("x")]].to_numpy(float)
            r = np.log(rows["measured_s"].to_numpy() / rows["l1_s"].to_numpy())
            groups = architecture_groups(rows, LEVEL2_GROUP)
            held = np.full(len(r), np.nan)
            for m in np.unique(groups):
                te = groups == m
                if te.all():
                    continue
                mdl = Level2Block(block, seed=seed).fit(X[~te], r[~te])
                held[te] = mdl.log_factor(X[te])
            ok = np.isfinite(held)
            y, l1 = rows["measured_s"].to_numpy(), rows["l1_s"].to_numpy()
            mape_l1 = float(np.mean(np.abs(l1[ok] / y[ok] - 1)) * 100) if ok.any() else None
            mape_l2 = (
                float(np.mean(np.abs(l1[ok] * np.exp(held[ok]) / y[ok] - 1)) * 100)
                if ok.any()
                else None
            )
            cv = {
                "scheme": "leave-one-model-out (vidur models)",
                "rows": int(ok.sum()),
                "models": len(np.unique(groups)),
                "level1_mape_pct": mape_l1,
                "level2_mape_pct": mape_l2,
            }
            if mape_l1 is None or mape_l2 is None or mape_l2 > mape_l1 - min_gain_pct:
                continue
            model = Level2Block(block, seed=seed).fit(X, r)
            out.append(
                FittedModel(f"level2.{block}", model, cv=cv, info={"rows_from_gpus": list(sources)})
            )
    return out
