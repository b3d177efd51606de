"""The Level-1 power family: `dse.models.power.PowerModel` fitted on the measured kernel power of
the GPU that has it (`dse.spec.stand_ins` "power_rows").
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from dse.fitting.cv import CV_FOLDS, _get, group_kfold_predict
from dse.fitting.gemm import weight_shape_groups
from dse.metrics import mape_pct, reported
from dse.models.artifact import FittedModel
from dse.spec.hardware import get_gpu
from dse.spec.stand_ins import POWER_GPU

if TYPE_CHECKING:
    from dse.fitting.context import FitContext


# ---------------------------------------------------------------------------- power family


def power_rows(gemm: pd.DataFrame) -> pd.DataFrame:
    """GEMM rows with measured power, with the utilisations the power model takes."""
    from dse.models.gemm import gemm_work

    rows = gemm[np.isfinite(gemm["power_w"]) & (gemm["source"] == "aiconfigurator")]
    parts = []
    for (gpu, dtype), sub in rows.groupby(["gpu", "dtype"], sort=True):
        spec = get_gpu(gpu)
        flops, b_in, b_out = gemm_work(sub["m"], sub["n"], sub["k"], dtype)
        lat = sub["latency_s"].to_numpy(float)
        parts.append(
            sub.assign(
                compute_util=flops / spec.peak_flops_per_s(dtype) / lat,
                memory_util=(b_in + b_out) / spec.hbm_bw_bytes_per_s / lat,
                idle_power_w=spec.idle_power_w,
                board_power_w=spec.board_power_w,
            )
        )
    return pd.concat(parts, ignore_index=True) if parts else rows.iloc[:0]


# What identifies a GEMM row's own work for the carry-over test (`dse.fitting.carryover`).
CARRYOVER_FEATURES = ("dtype", "m", "n", "k")


def drop_carryover(
    rows: pd.DataFrame, seed: int = 0
) -> tuple[pd.DataFrame, dict[str, dict[str, object]]]:
    """`rows` (in file order, as `dse.data.load` keeps them) without the power rows that follow
    the previous row of their measured file more than their own work, and per file the
    detector's summary with the noise floor left (`noise_floor_pct`: MAPE of the own-work fit
    on the rows kept, %)."""
    from dse.fitting.carryover import RULE, detect_carryover, own_work_log_power

    keep = np.ones(len(rows), dtype=bool)
    out: dict[str, dict[str, object]] = {}
    rows = rows.reset_index(drop=True)
    for key, sub in rows.groupby("file", sort=True):
        idx = sub.index.to_numpy()
        feats = sub[list(CARRYOVER_FEATURES)].assign(log_lat=np.log(sub["latency_s"]))
        pw = sub["power_w"].to_numpy(np.float64)
        own = own_work_log_power(feats, pw, seed=seed)
        co = detect_carryover(np.log(pw), own)
        keep[idx[co.flags]] = False
        resid = np.log(pw) - own
        summ = co.summary(RULE)
        summ["noise_floor_pct"] = reported(
            100 * float(np.nanmean(np.abs(np.expm1(-resid[~co.flags]))))
        )
        out[str(key)] = summ
    return rows[keep].reset_index(drop=True), out


def fit_power_family(ctx: FitContext) -> list[FittedModel]:
    from dse.models.power import PowerModel

    gemm = ctx.table("gemm")
    if gemm.empty or not np.isfinite(gemm["power_w"]).any():
        ctx.log("power: no rows with measured power in the data; skipped")
        return []
    t0 = time.perf_counter()
    # in file order, before power_rows regroups them
    measured, carryover = drop_carryover(
        gemm[np.isfinite(gemm["power_w"]) & (gemm["source"] == "aiconfigurator")], seed=ctx.seed
    )
    rows = power_rows(measured)
    for table, summ in carryover.items():
        ctx.log(
            f"power: {table}: {summ['rows_flagged']} of {summ['rows']} rows follow the previous "
            f"row's power (carry-over, lag corr {summ['lag_corr']}); dropped"
        )

    def fp(tr: pd.DataFrame, te: pd.DataFrame) -> dict[str, np.ndarray]:
        m = PowerModel(seed=ctx.seed).fit(tr)
        spec = get_gpu(POWER_GPU)
        p = m.predict(te["compute_util"], te["memory_util"], te["latency_s"], gpu=spec)
        return {"power_w": p["power_w"]}

    cv = group_kfold_predict(rows, weight_shape_groups(rows), CV_FOLDS if ctx.cv else 0, fp)
    model = PowerModel(seed=ctx.seed).fit(rows)
    info = {
        "rows": len(rows),
        "fitted_on_gpus": sorted(rows["gpu"].unique()),
        "note": "fitted on measured board power (H200); other GPUs scale it by their idle and "
        "board power from dse.spec.hardware (assumption, no measured power behind it)",
        # per measured table (gpu/engine/version): rows flagged and dropped, the rule, and the
        # noise floor left (own-work power MAPE of the rows kept)
        "carryover": carryover,
    }
    cvd = {
        "scheme": f"GroupKFold({CV_FOLDS}) by (n, k) weight shape",
        "power_mape_pct": reported(
            mape_pct(_get(cv, "power_w", len(rows)), rows["power_w"], keep="positive")
        ),
        "input": "measured utilisations (the GEMM models add a measured-power residual on H200)",
    }
    ctx.log(
        f"power: {len(rows)} rows, CV power MAPE {cvd['power_mape_pct']}% "
        f"({time.perf_counter() - t0:.0f} s)"
    )
    return [
        FittedModel(
            "power",
            model,
            cv=cvd,
            files=ctx.files(rows),
            info=info,
            measured_power=ctx.gpu in set(rows["gpu"]),
        )
    ]
