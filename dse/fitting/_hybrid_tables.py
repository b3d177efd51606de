"""Fitting the roofline-plus-residual-MLP tables of the attention and MoE families
(`dse.models._hybrid`): grouped CV, the CV summary and the table fit shared by both.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from dse.fitting import bands
from dse.fitting import cv as U
from dse.fitting.cv import FIT_CV_FOLDS, FIT_CV_MAX_ROWS
from dse.metrics import mape_pct, reported
from dse.models.artifact import FittedModel
from dse.models.band import degree_of


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
        if te.all():  # a single layout: nothing to hold it out from (the CV reads None)
            continue
        got = fit_predict(rows[~te], rows[te])
        for key, val in got.items():
            out.setdefault(key, np.full(len(rows), np.nan))[te] = val
    return out


def hybrid_cv_summary(
    rows: pd.DataFrame, cv: dict[str, np.ndarray], scheme: str, roof: np.ndarray
) -> dict[str, Any]:
    y = rows["latency_s"].to_numpy(float)
    cv = {"latency_s": np.full(len(rows), np.nan), "base_s": np.full(len(rows), np.nan), **cv}
    out: dict[str, Any] = {
        "scheme": scheme,
        "rows": len(rows),
        "latency_mape_pct": reported(mape_pct(cv["latency_s"], y)),
        "base_roofline_fitted_mape_pct": reported(mape_pct(cv["base_s"], y)),
        "baselines": {"roofline_mape_pct": reported(mape_pct(roof, y))},
    }
    if "energy_j" in cv and "energy_j" in rows and np.isfinite(rows["energy_j"]).any():
        out["energy_mape_pct"] = reported(mape_pct(cv["energy_j"], rows["energy_j"]))
        out["power_mape_pct"] = reported(mape_pct(cv["power_w"], rows["power_w"]))
    return out


def hybrid_band_table(
    name: str,
    rows: pd.DataFrame,
    make: Callable[..., Any],
    inputs: Callable[[pd.DataFrame], dict[str, np.ndarray]],
    grouping: tuple[tuple[str, ...], str],
    seed: int,
) -> bands.BandTable:
    """The held-out CV of an attention or MoE table as `dse fit` runs it (FIT_CV_FOLDS seeded
    folds by `grouping`, fits on <= FIT_CV_MAX_ROWS rows): its band's calibration table."""

    def fp(train: np.ndarray, test: np.ndarray) -> dict[str, np.ndarray]:
        ins = inputs(rows.iloc[test])
        model = make(max_rows=FIT_CV_MAX_ROWS).fit(rows.iloc[train])
        out = _keep(model.predict(**ins))
        # the model's own check (a model may bound combinations of its inputs too)
        out["degree"] = degree_of(model.range_misses(**ins), len(test))
        return out

    cols, what = grouping
    strata = {"dtype": rows["dtype"].astype(str).to_numpy()} if "dtype" in rows else {}
    return bands.BandTable(
        name,
        rows["latency_s"].to_numpy(float),
        U.architecture_groups(rows, cols),
        U.seeded_group_folds(FIT_CV_FOLDS, seed),
        fp,
        f"{FIT_CV_FOLDS} seeded group folds by {what} {cols} (CV fits on <= {FIT_CV_MAX_ROWS} rows)",
        strata,
        U.architecture_groups(rows, cols, sep="x"),
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
    table = hybrid_band_table(name, rows, make, inputs, grouping, ctx.seed)
    cv_pred = bands.held_out(table)  # run whatever ctx.cv says, as it always was here
    band = bands.calibrate(table, cv_pred, nested=ctx.band_coverage)
    cv = hybrid_cv_summary(rows, cv_pred, table.scheme, roof)
    cv["groups"] = len(np.unique(table.groups))
    model = make().fit(rows)
    _log_hybrid(ctx, name, len(rows), cv, t0)
    return FittedModel(
        name,
        model,
        cv=cv,
        files=ctx.files(rows),
        info=info(model),
        measured_power=model.power_mlp_ is not None,
        band=band,
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
