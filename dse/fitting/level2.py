"""Fitting Level 2: PyTorch eager's GEMM calibration (`dse.models.level2.Level2Block`) on the
projection GEMMs vidur timed, scored on vidur's measured blocks against the Level-1 sum.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from dse.fitting import bands
from dse.fitting.cv import architecture_groups, cv_group, leave_one_group_out
from dse.fitting.e2e_rows import level2_rows
from dse.models.artifact import Artifact, FittedModel
from dse.models.band import degree_of
from dse.spec.stand_ins import lenders

LEVEL2_GROUP = cv_group("level2", ("model",))  # whole vidur models, at every TP
# Whether `dse fit` gives the eager calibration the wave-step inputs (`Level2Block(wave_steps=)`,
# a candidate: it wins 0.7-1.1 points per operator held out (issue 33), but turning it on changes
# Level 2's and so Level 3's fits: refit Levels 2-3 of every artifact and rewrite the goldens).
WAVE_STEPS = False


def _gemm_rows(
    tables: dict[str, pd.DataFrame],
    keep: dict[str, np.ndarray] | None = None,
    wave_steps: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-GEMM inputs (`gemm_inputs(X, wave_steps)`) and measured log ratios of both GEMMs of
    every block's rows (`keep`: a row mask per block), pooled: one eager calibration for all
    projection GEMMs."""
    from dse.models.level2 import gemm_inputs

    G, r = [], []
    for block, rows in tables.items():
        sel = slice(None) if keep is None else keep[block]
        X = _x(rows)[sel]
        g1, g2 = gemm_inputs(X, wave_steps)
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


LOMO_SCHEME = "leave-one-model-out (vidur models)"


def level2_band_table(
    block: str, tables: dict[str, pd.DataFrame], seed: int = 0, wave_steps: bool = WAVE_STEPS
) -> bands.BandTable:
    """Leave one vidur model out for one block: the eager GEMM calibration fitted on the GEMMs
    of every block of the other models, the block's time predicted as its Level-1 time times
    the calibration's factor; its CV and its band's calibration table."""
    from dse.models.level2 import Level2Block

    rows = tables[block]
    X, l1 = _x(rows), rows["l1_s"].to_numpy(float)
    model_of_row = rows["model"].to_numpy()
    models_of = {b: t["model"].to_numpy() for b, t in tables.items()}

    def fp(train: np.ndarray, test: np.ndarray) -> dict[str, np.ndarray]:
        left_out = np.setdiff1d(np.unique(model_of_row), np.unique(model_of_row[train]))
        keep = {b: ~np.isin(m, left_out) for b, m in models_of.items()}
        G, r = _gemm_rows(tables, keep, wave_steps)
        mdl = Level2Block(block, seed=seed, wave_steps=wave_steps).fit(G, r, X[train])
        lf = mdl.log_factor(X[test])
        return {
            "latency_s": l1[test] * np.exp(lf),
            "log_factor": lf,
            "degree": degree_of(mdl.range_misses(X[test]), len(test)),
        }

    return bands.BandTable(
        f"level2.{block}",
        rows["measured_s"].to_numpy(float),
        architecture_groups(rows, LEVEL2_GROUP),
        leave_one_group_out,
        fp,
        LOMO_SCHEME,
        names=model_of_row.astype(str),
    )


def _level2_tables(
    gpu: str, layer_ops: pd.DataFrame, artifact: Artifact | None
) -> tuple[dict[str, pd.DataFrame], tuple[str, ...]]:
    """Per block, vidur's rows of artifact `gpu`'s chip (its "level2_rows" lenders) priced by
    the artifact's Level-1 models on their own chip (GH200's are H200's: `level1_gpu`)."""
    sources = lenders("level2_rows", gpu)
    level1_gpu = artifact.level1_gpu if artifact is not None else gpu
    return level2_rows(layer_ops, sources, artifact, level1_gpu), sources


def level2_band_tables(ctx: Any) -> list[bands.BandTable]:
    """`dse fit --bands-only`: the CV table of every Level-2 block of the artifact `ctx.keep`,
    priced by its Level-1 models (the artifact without its Levels 2-3, as `dse fit` fits them)."""
    from dse.fitting.artifacts import LEVEL_PREFIXES, without_levels

    art = ctx.keep
    if art is None or not art.names("level2_block"):
        return []
    layer_ops = ctx.table("layer_op")
    if layer_ops is None or layer_ops.empty:
        return []
    tables, _ = _level2_tables(art.gpu, layer_ops, without_levels(art, LEVEL_PREFIXES))
    return [
        level2_band_table(block, tables, int(ctx.seed))
        for block in tables
        if art.has(f"level2.{block}")
    ]


def fit_level2(
    gpu: str,
    layer_ops: pd.DataFrame,
    artifact: Artifact | None,
    seed: int = 0,
    min_gain_pct: float = 0.5,
    band_coverage: bool = False,
    wave_steps: bool = WAVE_STEPS,
) -> list[FittedModel]:
    """Level-2 block models of artifact `gpu` on vidur's rows of its chip (one eager GEMM
    calibration, fitted on both blocks' GEMMs), kept per block only where they beat Level 1
    alone on held-out models (leave-one-model-out) by `min_gain_pct`; each with the band of
    its held-out residuals (`band_coverage`: and that band's coverage, nested)."""
    from threadpoolctl import threadpool_limits

    from dse.models.level2 import Level2Block

    tables, sources = _level2_tables(gpu, layer_ops, artifact)
    if not tables:
        return []
    out = []
    with threadpool_limits(limits=1):
        G, r = _gemm_rows(tables, wave_steps=wave_steps)
        for block, rows in tables.items():
            table = level2_band_table(block, tables, seed, wave_steps)
            oof = bands.held_out(table)
            held = oof.get("log_factor", np.full(len(rows), np.nan))
            ok = np.isfinite(held)
            y, l1 = rows["measured_s"].to_numpy(), rows["l1_s"].to_numpy()
            mape_l1 = float(np.mean(np.abs(l1[ok] / y[ok] - 1)) * 100) if ok.any() else None
            mape_l2 = (
                float(np.mean(np.abs(l1[ok] * np.exp(held[ok]) / y[ok] - 1)) * 100)
                if ok.any()
                else None
            )
            cv = {
                "scheme": LOMO_SCHEME,
                "rows": int(ok.sum()),
                "models": len(np.unique(table.groups)),
                "level1_mape_pct": mape_l1,
                "level2_mape_pct": mape_l2,
            }
            if mape_l1 is None or mape_l2 is None or mape_l2 > mape_l1 - min_gain_pct:
                continue
            band = bands.calibrate(table, oof, nested=band_coverage)
            model = Level2Block(block, seed=seed, wave_steps=wave_steps).fit(G, r, _x(rows))
            out.append(
                FittedModel(
                    f"level2.{block}",
                    model,
                    cv=cv,
                    info={"rows_from_gpus": list(sources)},
                    band=band,
                )
            )
    return out
