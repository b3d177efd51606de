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


def fit_power_family(ctx: FitContext) -> list[FittedModel]:
    from dse.models.power import PowerModel

    rows = power_rows(ctx.table("gemm"))
    if rows.empty:
        ctx.log("power: no rows with measured power in the data; skipped")
        return []
    t0 = time.perf_counter()

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
