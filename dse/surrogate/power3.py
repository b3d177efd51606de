"""Fitting the Level-3 power calibration (`dse.models.level3_power.Power3`) on the argonne power
rows: the operator power model's whole-request power, the dynamic fractions, the held-out groups
and the protocol pairs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from dse.models.level3_power import BAND_QUANTILES, Power3
from dse.spec.hardware import get_gpu

if TYPE_CHECKING:
    import pandas as pd

    from dse.models.artifact import Artifact
    from dse.models.level3 import Level3


def model_power_w(
    parts: Mapping[str, np.ndarray], extra: Mapping[str, np.ndarray], gpus: np.ndarray
) -> np.ndarray:
    """Average power per GPU the operator power model predicts for whole requests: kernels at
    their modelled power, stretched to their Level-3 time, host gaps at idle power.

    `parts`: `Level3.correct` output; `extra`: `price_rows` kernel energy and time; `gpus`:
    registry name per row."""
    t = parts["ttft_s"] + parts["decode_s"]
    over = parts["pre_overhead_s"] + parts["dec_overhead_s"]
    idle = np.array([get_gpu(str(x)).idle_power_w for x in gpus])
    # The same sum as dse.predict.predict_columns before calibration.
    dec_rest = (
        extra["decode_energy_j"] - extra["decode_attn_energy_j"] - extra["decode_comm_energy_j"]
    )
    e = (
        extra["prefill_energy_j"] * parts["pre_factor"]
        + dec_rest * parts["dec_factor"]
        + extra["decode_attn_energy_j"] * parts["dec_attn_factor"]
        + extra["decode_comm_energy_j"] * parts["dec_comm_factor"]
        + idle * over
    )
    return e / t


def dynamic_fraction(power_w: np.ndarray, gpus: np.ndarray) -> np.ndarray:
    """(P - P_idle) / (P_board - P_idle) per row."""
    idle = np.array([get_gpu(str(x)).idle_power_w for x in gpus])
    board = np.array([get_gpu(str(x)).board_power_w for x in gpus])
    return (power_w - idle) / (board - idle)


def from_fraction(y: np.ndarray, gpus: np.ndarray) -> np.ndarray:
    idle = np.array([get_gpu(str(x)).idle_power_w for x in gpus])
    board = np.array([get_gpu(str(x)).board_power_w for x in gpus])
    return idle + np.clip(y, 0.0, 1.0) * (board - idle)


def power_groups(kept: pd.DataFrame) -> tuple[np.ndarray, str]:
    """Held-out groups: models where two or more exist, else batch sizes (held-out shapes)."""
    models = kept["model"].to_numpy()
    if len(np.unique(models)) > 1:
        return models, "leave-one-model-out"
    return kept["batch_size"].to_numpy(), "leave-one-batch-size-out"


def pair_keys(kept: pd.DataFrame) -> np.ndarray:
    """One key per measured configuration apart from the engine: the rows of the two
    protocols that pair up in `fit_protocol`."""
    cols = ["gpu", "model", "batch_size", "input_tokens", "output_tokens", "n_gpus"]
    return kept[cols].astype(str).agg("|".join, axis=1).to_numpy()


def fit_power3(
    gpu: str,
    energy_rows: pd.DataFrame,
    artifact: Artifact | None,
    level3: Level3,
    lookup: Any = None,
) -> tuple[Power3 | None, dict[str, Any]]:
    """Fit the power calibration of artifact `gpu` on the argonne power rows of its chip."""
    from dse.spec.stand_ins import lenders
    from dse.surrogate.hymell_fit import e2e_configs, identical_batch, price_rows

    sources = lenders("level3_rows", gpu)
    rows = energy_rows[energy_rows["gpu"].isin(sources)]
    cfg, kept = e2e_configs(rows, lookup)
    if len(cfg) < 3:
        return None, {"cv": {}}
    g, extra = price_rows(cfg, artifact, gpu)
    gpus = cfg["gpu"].to_numpy()
    p_model = model_power_w(level3.correct(g), extra, gpus)
    measured = kept["power_w"].to_numpy(float)
    groups, scheme = power_groups(kept)
    pw = Power3().fit_arrays(
        dynamic_fraction(p_model, gpus),
        g.value("batch"),
        dynamic_fraction(measured, gpus),
        groups,
        identical=identical_batch(kept),
        pair_keys=pair_keys(kept),
    )
    held_p = from_fraction(pw.held_out_, gpus)
    ok = np.isfinite(pw.held_out_)
    logres = np.log(measured[ok] / held_p[ok])
    pw.band_log_ = np.quantile(logres, BAND_QUANTILES) if ok.any() else np.zeros(2)
    cv = {
        "scheme": scheme,
        "rows": int(ok.sum()),
        "power_mape_pct": float(np.mean(np.abs(held_p[ok] / measured[ok] - 1)) * 100)
        if ok.any()
        else None,
        "uncalibrated_power_mape_pct": float(np.mean(np.abs(p_model / measured - 1)) * 100),
    }
    info = {
        "cv": cv,
        "rows_from_gpus": list(sources),
        "rows_used": len(kept),
        "coefficients": [float(v) for v in pw.coef_],
        # Independent sequences' extra dynamic fraction at batch 64 (0 at batch 1).
        "protocol_c": float(pw.protocol_),
        # False: the fit was not physical (k1 <= 0); the operator power model is used as is.
        "calibrated": bool(pw.calibrated_),
    }
    return pw, info
