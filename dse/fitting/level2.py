"""Fitting Level 2: PyTorch eager's GEMM calibration (`dse.models.level2.Level2Block`) on the
projection GEMMs vidur timed, scored on vidur's measured blocks against the Level-1 sum.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dse.fitting.cv import architecture_groups, cv_group
from dse.fitting.e2e_rows import level2_rows
from dse.models.artifact import Artifact, FittedModel
from dse.spec.stand_ins import lenders

LEVEL2_GROUP = cv_group("level2", ("model",))  # whole vidur models, at every TP


def _gemm_rows(
    tables: dict[str, pd.DataFrame], keep: dict[str, np.ndarray] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per-GEMM inputs and measured log ratios of both GEMMs of every block's rows (`keep`: a
    row mask per block), pooled: one eager calibration for all projection GEMMs."""
    from dse.models.level2 import gemm_inputs

    G, r = [], []
    for block, rows in tables.items():
        sel = slice(None) if keep is None else keep[block]
        X = _x(rows)[sel]
        g1, g2 = gemm_inputs(X)
        t1, t2 = np.exp(X[:, 0]), np.exp(X[:, 2])
        y1 = rows["measured_gemm1_s"].to_numpy(float)[sel]
        y2 = rows["measured_gemm2_s"].to_numpy(float)[sel]
        for g, y, t in ((g1, y1, t1), (g2, y2, t2)):
            ok = np.isfinite(y) & (y > 0)
            G.append(g[ok])
            r.append(np.log(y[ok] / t[ok]))
    return np.concatenate(G), np.concatenate(r)


def _x(rows: pd.DataFrame) -> np.ndarray:
    return rows[[c for c in rows.columns if c.startswith("x")]].to_numpy(float)


def fit_level2(
    gpu: str,
    layer_ops: pd.DataFrame,
    artifact: Artifact | None,
    seed: int = 0,
    min_gain_pct: float = 0.5,
) -> list[FittedModel]:
    """Level-2 block models of artifact `gpu` on vidur's rows of its chip (one eager GEMM
    calibration, fitted on both blocks' GEMMs), kept per block only where they beat Level 1
    alone on held-out models (leave-one-model-out) by `min_gain_pct`."""
    from threadpoolctl import threadpool_limits

    from dse.models.level2 import Level2Block

    sources = lenders("level2_rows", gpu)
    # priced with the Level-1 models' own chip (GH200's are H200's: `Artifact.level1_gpu`)
    level1_gpu = artifact.level1_gpu if artifact is not None else gpu
    tables = level2_rows(layer_ops, sources, artifact, level1_gpu)
    if not tables:
        return []
    groups = {b: architecture_groups(rows, LEVEL2_GROUP) for b, rows in tables.items()}
    held = {b: np.full(len(rows), np.nan) for b, rows in tables.items()}
    out = []
    with threadpool_limits(limits=1):
        for m in np.unique(np.concatenate(list(groups.values()))):
            te = {b: g == m for b, g in groups.items()}
            if any(t.all() for t in te.values()):
                continue
            G, r = _gemm_rows(tables, {b: ~t for b, t in te.items()})
            for block, rows in tables.items():
                if not te[block].any():
                    continue
                X = _x(rows)
                mdl = Level2Block(block, seed=seed).fit(G, r, X[~te[block]])
                held[block][te[block]] = mdl.log_factor(X[te[block]])
        G, r = _gemm_rows(tables)
        for block, rows in tables.items():
            ok = np.isfinite(held[block])
            y, l1 = rows["measured_s"].to_numpy(), rows["l1_s"].to_numpy()
            mape_l1 = float(np.mean(np.abs(l1[ok] / y[ok] - 1)) * 100) if ok.any() else None
            mape_l2 = (
                float(np.mean(np.abs(l1[ok] * np.exp(held[block][ok]) / y[ok] - 1)) * 100)
                if ok.any()
                else None
            )
            cv = {
                "scheme": "leave-one-model-out (vidur models)",
                "rows": int(ok.sum()),
                "models": len(np.unique(groups[block])),
                "level1_mape_pct": mape_l1,
                "level2_mape_pct": mape_l2,
            }
            if mape_l1 is None or mape_l2 is None or mape_l2 > mape_l1 - min_gain_pct:
                continue
            model = Level2Block(block, seed=seed).fit(G, r, _x(rows))
            out.append(
                FittedModel(f"level2.{block}", model, cv=cv, info={"rows_from_gpus": list(sources)})
            )
    return out
