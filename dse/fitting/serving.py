"""The host constants of continuous-batching serving (`dse.models.serving`), fitted on the
ml-energy v2 runs (vLLM 0.4.2) with whole models held out (docs/accuracy.md "Serving energy
is right for the wrong reasons").

    rows = serving_rows(data)                  # measured runs + the static prediction of each
    consts = fit_constants(rows[rows.gpu == "h100_sxm"])
    pred = leave_one_model_out(rows)           # every row priced by a fit without its model

The time terms are one non-negative least squares on the relative error of the wall time
(the GPU time is the static prediction, the host time the rest); the waiting power is the
least-squares draw above idle of the GPU over the measured host time. Neither sees a row of the
model it prices in `leave_one_model_out`.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from dse.data import load
from dse.estimators import _measured as M
from dse.files import sha256_file
from dse.models.serving import HostConstants, continuous
from dse.predict.request import BAND_KEYS, OUTPUT_KEYS
from dse.spec.arch import Architecture
from dse.spec.hardware import get_gpu

ENGINE, ENGINE_VERSION = "vllm", "0.4.2"
STATIC = "static."  # prefix of the static prediction's columns in `serving_rows`


def serving_rows(data: Path) -> pd.DataFrame:
    """The ml-energy v2 runs (`dse.estimators._measured.ml_energy`), one row each, as a batch of
    `batch_size` = the run's average batch rounded (the predictor takes whole sequences): the
    measured `time_s` and `energy_j` (all GPUs) of that many requests, and the static
    prediction's OUTPUT_KEYS and BAND_KEYS as `static.<key>`."""
    from dse.predict import predict

    df, _ = M.ml_energy(load(data, kinds=["serving_energy"]))
    parts = []
    for gpu, rows in df.groupby("gpu", sort=True):
        cols = M.architecture_columns(rows["model"])
        cfg = pd.DataFrame({k: v for k, v in cols.items() if k in Architecture.field_names()})
        for k in ("prompt_tokens", "output_tokens", "tensor_parallel"):
            cfg[k] = np.rint(rows[k].to_numpy()).astype(int)
        b = rows["batch_size"].to_numpy(dtype=float)
        cfg["batch_size"] = np.maximum(np.rint(b), 1).astype(int)
        cfg["gpu"], cfg["engine"] = gpu, ENGINE
        p = predict(cfg)
        scale = cfg["batch_size"].to_numpy() / b  # measured batch of b requests -> of B
        out = pd.DataFrame(
            {
                "gpu": gpu,
                "model": rows["model"].to_numpy(),
                "file": rows["file"].to_numpy(),
                "batch_size": cfg["batch_size"].to_numpy(),
                "tensor_parallel": cfg["tensor_parallel"].to_numpy(),
                "output_tokens": cfg["output_tokens"].to_numpy(),
                "time_s": rows["time_s"].to_numpy() * scale,
                "energy_j": rows["measured_j"].to_numpy() * scale,
            }
        )
        for k in (*OUTPUT_KEYS, *BAND_KEYS):
            out[STATIC + k] = np.asarray(p[k], dtype=float)
        parts.append(out)
    return pd.concat(parts, ignore_index=True)


def _static(rows: pd.DataFrame) -> dict[str, np.ndarray]:
    return {k: rows[STATIC + k].to_numpy(dtype=float) for k in (*OUTPUT_KEYS, *BAND_KEYS)}


def fit_constants(rows: pd.DataFrame) -> dict[str, float]:
    """step_s, per_sequence_s, per_extra_gpu_s, wait_above_idle_w from rows of one GPU."""
    gpus = rows["gpu"].unique()
    if len(gpus) != 1:
        raise ValueError(f"fit_constants takes the rows of one GPU, got {sorted(gpus)}")
    idle = get_gpu(str(gpus[0])).idle_power_w
    t = rows["time_s"].to_numpy(dtype=float)
    g = rows[STATIC + "latency_s"].to_numpy(dtype=float)
    b = rows["batch_size"].to_numpy(dtype=float)
    tp = rows["tensor_parallel"].to_numpy(dtype=float)
    steps = np.maximum(rows["output_tokens"].to_numpy(dtype=float) - 1.0, 0.0)
    # wall = gpu + steps (x0 + x1 b + x2 (tp - 1)), each row weighted by 1 / measured wall
    x = steps[:, None] * np.column_stack([np.ones_like(b), b, tp - 1.0])
    coef, _ = nnls(x / t[:, None], (t - g) / t)
    # per GPU: measured = GPU-busy energy + (idle + d) x measured host time, relative errors
    e = rows["energy_j"].to_numpy(dtype=float) / tp
    eg = rows[STATIC + "energy_j"].to_numpy(dtype=float) / tp
    wait = np.maximum(t - g, 0.0)
    d = np.sum(wait * (e - eg - idle * wait) / e**2) / max(np.sum(wait**2 / e**2), 1e-30)
    return {
        "step_s": float(coef[0]),
        "per_sequence_s": float(coef[1]),
        "per_extra_gpu_s": float(coef[2]),
        "wait_above_idle_w": float(max(d, -idle)),
    }


def constants_entry(rows: pd.DataFrame, data: Path | None = None) -> dict[str, Any]:
    """One GPU's entry of the shipped JSON: the constants, the fitted range and the rows."""
    entry: dict[str, Any] = dict(fit_constants(rows))
    b = rows["batch_size"].to_numpy(dtype=float)
    entry["batch_size_range"] = [float(b.min()), float(b.max())]
    entry["tensor_parallel"] = sorted(int(t) for t in rows["tensor_parallel"].unique())
    entry["output_tokens_range"] = [
        int(rows["output_tokens"].min()),
        int(rows["output_tokens"].max()),
    ]
    entry["rows"] = len(rows)
    entry["models"] = sorted(rows["model"].unique().tolist())
    files = sorted(rows["file"].tolist())
    h = hashlib.sha256()
    for f in files:
        h.update(f.encode())
        if data is not None:
            h.update(bytes.fromhex(sha256_file(data / f)))
    entry["files_sha256"] = h.hexdigest()
    return entry


def constants_of(c: dict[str, float], gpu: str, rows: pd.DataFrame) -> HostConstants:
    """A HostConstants of fitted numbers, its range from `rows` (the fit's)."""
    b = rows["batch_size"].to_numpy(dtype=float)
    d = {
        **c,
        "batch_size_range": [b.min(), b.max()],
        "tensor_parallel": rows["tensor_parallel"].unique().tolist(),
    }
    return HostConstants.from_dict(d, ENGINE, ENGINE_VERSION, gpu)


def price(rows: pd.DataFrame, c: HostConstants) -> dict[str, np.ndarray]:
    """`dse.models.serving.continuous` on rows of one GPU."""
    idle = get_gpu(str(rows["gpu"].iloc[0])).idle_power_w
    return continuous(
        _static(rows),
        rows["batch_size"].to_numpy(),
        rows["tensor_parallel"].to_numpy(),
        rows["output_tokens"].to_numpy(),
        idle,
        c,
    )


def leave_one_model_out(rows: pd.DataFrame, train_gpu: str | None = None) -> pd.DataFrame:
    """Every row priced with constants fitted on the other models' rows of its GPU (or of
    `train_gpu`, every model but its own): columns time_s, energy_j, power_w (per GPU)
    predicted and measured, and the static prediction's."""
    out = []
    for gpu, g_rows in rows.groupby("gpu", sort=True):
        pool = g_rows if train_gpu is None else rows[rows["gpu"] == train_gpu]
        for model, test in g_rows.groupby("model", sort=True):
            train = pool[pool["model"] != model]
            c = constants_of(fit_constants(train), str(train["gpu"].iloc[0]), train)
            p = price(test, c)
            tp = test["tensor_parallel"].to_numpy(dtype=float)
            out.append(
                pd.DataFrame(
                    {
                        "gpu": gpu,
                        "model": model,
                        "batch_size": test["batch_size"].to_numpy(),
                        "pred_time_s": p["latency_s"],
                        "pred_energy_j": p["energy_j"],
                        "pred_power_w": p["energy_j"] / tp / p["latency_s"],
                        "static_time_s": test[STATIC + "latency_s"].to_numpy(),
                        "static_energy_j": test[STATIC + "energy_j"].to_numpy(),
                        "time_s": test["time_s"].to_numpy(),
                        "energy_j": test["energy_j"].to_numpy(),
                        "power_w": test["energy_j"].to_numpy() / tp / test["time_s"].to_numpy(),
                    },
                    index=test.index,
                )
            )
    return pd.concat(out).sort_index()


def scores(pred: pd.DataFrame) -> pd.DataFrame:
    """Per GPU: rows, models, MAPE of energy, time and power, median energy ratio, and the static
    prediction's energy MAPE and time ratio on the same rows."""
    rows = []
    for gpu, p in pred.groupby("gpu", sort=True):

        def ape(a: str, b: str, p: pd.DataFrame = p) -> float:
            return float(np.mean(np.abs(p[a] / p[b] - 1.0)))

        rows.append(
            {
                "gpu": gpu,
                "rows": len(p),
                "models": p["model"].nunique(),
                "energy_mape": ape("pred_energy_j", "energy_j"),
                "time_mape": ape("pred_time_s", "time_s"),
                "power_mape": ape("pred_power_w", "power_w"),
                "energy_median_ratio": float(np.median(p["pred_energy_j"] / p["energy_j"])),
                "energy_max_ape": float(np.max(np.abs(p["pred_energy_j"] / p["energy_j"] - 1))),
                "static_energy_mape": ape("static_energy_j", "energy_j"),
                "static_time_ratio": float(np.median(p["static_time_s"] / p["time_s"])),
            }
        )
    return pd.DataFrame(rows)


BAND_QUANTILES = (0.05, 0.95)  # the nominal 90% band of every prediction


def residual_band(pred: pd.DataFrame) -> dict[str, list[float]]:
    """5-95% quantiles of log(measured / predicted) latency and energy of held-out rows (one
    GPU's `leave_one_model_out`): the host model's band (`HostConstants.band_log`)."""
    q = np.array(BAND_QUANTILES)
    out = {}
    for key, col in (("latency", "time_s"), ("energy", "energy_j")):
        r = np.log(pred[col].to_numpy(dtype=float) / pred[f"pred_{col}"].to_numpy(dtype=float))
        out[key] = [float(x) for x in np.quantile(r, q)]
    return out


def nested_band_coverage(rows: pd.DataFrame) -> pd.DataFrame:
    """How often the band holds on a model it was not calibrated on, per GPU: each model's rows
    priced by constants fitted without it, inside a band whose quantiles come from the other
    models' residuals under fits that saw neither them nor it (the shipped rule: the static
    band widened to the host band). Columns gpu, rows, latency_coverage, energy_coverage."""
    recs = []
    for gpu, g_rows in rows.groupby("gpu", sort=True):
        inside = {"latency": [], "energy": []}
        for model, test in g_rows.groupby("model", sort=True):
            rest = g_rows[g_rows["model"] != model]
            band = residual_band(leave_one_model_out(rest))
            c = constants_of(fit_constants(rest), str(gpu), rest)
            c = HostConstants(**{**c.__dict__, "band_log": {k: tuple(v) for k, v in band.items()}})
            p = price(test, c)
            for key, col, lo, hi in (
                ("latency", "time_s", "latency_lo_s", "latency_hi_s"),
                ("energy", "energy_j", "energy_lo_j", "energy_hi_j"),
            ):
                y = test[col].to_numpy(dtype=float)
                inside[key].append((y >= p[lo]) & (y <= p[hi]))
        recs.append(
            {
                "gpu": gpu,
                "rows": len(g_rows),
                **{f"{k}_coverage": float(np.concatenate(v).mean()) for k, v in inside.items()},
            }
        )
    return pd.DataFrame(recs)
