"""Calibrate the corrected preset's free factors on measured data, and score it out of sample.

    python -m dse.estimators.calibrate [--data ../shared/data] [--out dse/estimators/tokens2wh_calibration.json]

Per GPU with end-to-end measurements (H100, A100, GH200):
1. the roofline's time factors (u_compute, u_memory, pass / sequence / all-reduce overheads)
   by least squares on log time over argonne static batches and ml-energy serving runs, the two
   sources weighted equally;
2. e_flop_pj, e_bit_pj, p_static_w by non-negative least squares of relative energy error,
   energy = e_flop * FLOPs + e_bit * HBM bits + p_static * GPU-seconds, over argonne GPU-0
   energy and ml-energy energy (all GPUs), sources weighted equally. The static term uses the
   measured time: p_static is a real mean power, valid whatever predicts the time later.
H200 has kernel power only (aiconfigurator). Its three energy factors are fitted on GEMM and
decode-attention kernels and stored under "kernel_fits" as a check, but end-to-end estimates for
H200 use factors derived from H100 (same GH100 die; `_constants.py`): kernel-level factors leave
out what end-to-end energy includes (other kernels, gaps, host time); applied to the H100
end-to-end rows they underestimate (benchmarks/energy_accuracy.py reports by how much).

Scoring is leave-one-shape-out: every model shape (same layers, any vocabulary) is held out in
turn, everything is refitted without it, and its rows are predicted. No score in the manifest
or docs comes from rows the fit saw.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import least_squares, nnls

from dse.estimators import _corrected as C
from dse.estimators import measured as M
from dse.estimators._constants import CALIBRATION_FILE, CALIBRATION_FORMAT
from dse.estimators.tokens2wh import estimate
from dse.files import sha256_file, write_atomic
from dse.spec.arch import Architecture
from dse.spec.hardware import get_gpu

E2E_GPUS = ("h100_sxm", "a100_sxm_40gb", "gh200")
KERNEL_GPU = "h200_sxm"
TIME_KEYS = ("u_compute", "u_memory", "pass_overhead_s", "seq_overhead_s", "allreduce_latency_s")
ENERGY_KEYS = ("e_flop_pj", "e_bit_pj", "p_static_w")
# Start and bounds of the time fit: efficiencies in (0, 1], overheads in seconds.
TIME_START = (0.5, 0.7, 3e-3, 1e-4, 2e-5)
TIME_LOWER = (0.02, 0.02, 0.0, 0.0, 0.0)
TIME_UPPER = (1.0, 1.0, 0.1, 5e-3, 5e-4)


# ---------------------------------------------------------------------- data
def load_tables(root: Path | str) -> dict[str, Any]:
    """Energy rows, time rows and H200 kernels from the measured-data folder, with file names."""
    root = Path(root)
    data = M.read(root)
    power, f1 = M.argonne_power(data)
    latency, f2 = M.argonne_latency(data)
    serving, f3 = M.ml_energy(data)
    kernels, f4 = M.aic_h200_kernels(data)
    energy = pd.concat([power, serving], ignore_index=True)
    time = pd.concat([latency, serving.drop(columns=["measured_j", "scope"])], ignore_index=True)
    for df in (energy, time):
        df["group"] = M.shape_group(df["model"])
    return {
        "root": root,
        "energy": energy,
        "time": time,
        "kernels": kernels,
        "files": sorted(set(f1 + f2 + f3 + f4)),
    }


def _arch(df: pd.DataFrame) -> Architecture:
    return Architecture.from_columns(M.architecture_columns(df["model"]), len(df))


def _counts(df: pd.DataFrame) -> dict[str, Any]:
    return C.counts(
        _arch(df),
        df["batch_size"].to_numpy(),
        df["prompt_tokens"].to_numpy(),
        df["output_tokens"].to_numpy(),
        df["tensor_parallel"].to_numpy(),
    )


def _source_weights(sources: np.ndarray) -> np.ndarray:
    """Row weights that give every source the same total weight in a squared loss."""
    out = np.empty(len(sources))
    for s in np.unique(sources):
        m = sources == s
        out[m] = 1.0 / np.sqrt(m.sum())
    return out


# ---------------------------------------------------------------------- fits
def _coef(time_params: Any, energy: Mapping[str, float] | None = None) -> C.Coefficients:
    e = energy or {k: 0.0 for k in ENERGY_KEYS}
    return C.Coefficients(
        **{k: float(e[k]) for k in ENERGY_KEYS},
        **{k: float(v) for k, v in zip(TIME_KEYS, time_params, strict=True)},
        calibrated=True,
        source="fit",
    )


def _roofline_total(
    df: pd.DataFrame, counts: dict[str, Any], gpu: str, coef: C.Coefficients
) -> np.ndarray:
    g = get_gpu(gpu)
    t = C.roofline_time_s(
        counts,
        df["batch_size"].to_numpy(),
        df["output_tokens"].to_numpy(),
        df["tensor_parallel"].to_numpy(),
        g.peak_bf16_flops_per_s,
        g.hbm_bw_bytes_per_s,
        g.nvlink_bw_bytes_per_s,
        coef,
    )
    return t["prefill"] + t["decode"]


def fit_time(df: pd.DataFrame, gpu: str) -> dict[str, float]:
    """Roofline factors of one GPU: least squares on log(predicted / measured time)."""
    counts = _counts(df)
    w = _source_weights(df["source"].to_numpy())
    meas = df["time_s"].to_numpy()

    def resid(p: np.ndarray) -> np.ndarray:
        return w * np.log(_roofline_total(df, counts, gpu, _coef(p)) / meas)

    sol = least_squares(resid, TIME_START, bounds=(TIME_LOWER, TIME_UPPER), x_scale="jac")
    return dict(zip(TIME_KEYS, (float(x) for x in sol.x), strict=True))


def energy_features(df: pd.DataFrame, time_s: np.ndarray) -> np.ndarray:
    """Columns FLOPs, HBM bits, GPU-seconds in each row's measured scope (GPU 0 or all)."""
    c = _counts(df)
    flops = sum(c[f"flops_linear_{p}"] + c[f"flops_attn_{p}"] for p in C.PHASES)
    byts = sum(
        c[f"{q}_{p}"]
        for p in C.PHASES
        for q in (
            "weight_bytes",
            "kv_write_bytes",
            "attn_read_bytes",
            "act_bytes",
            "allreduce_bytes",
        )
    )
    tp = df["tensor_parallel"].to_numpy()
    x = np.column_stack([flops, 8.0 * byts, tp * time_s])
    scope = np.where(df["scope"].to_numpy() == "gpu0", 1.0 / tp, 1.0)
    return x * scope[:, None]


def _nnls_relative(x: np.ndarray, y: np.ndarray, w: np.ndarray, y_fixed: Any = 0.0) -> np.ndarray:
    """Non-negative c minimising sum (w ((y_fixed + x c) / y - 1))^2; columns rescaled first."""
    a = x * (w / y)[:, None]
    b = w * (1.0 - np.asarray(y_fixed) / y)
    scale = np.where(a.std(axis=0) > 0, np.abs(a).mean(axis=0), 1.0)
    c, _ = nnls(a / scale, b)
    return c / scale


def fit_energy(df: pd.DataFrame, gpu: str) -> dict[str, float]:
    """e_flop_pj, e_bit_pj, p_static_w of one GPU from its measured energy rows.

    p_static_w is bounded below by the registry's idle power (a GPU never draws less while
    serving): idle_power_w * GPU-seconds is a fixed part of the prediction, the fit adds to it.
    """
    x = energy_features(df, df["time_s"].to_numpy())
    idle_w = get_gpu(gpu).idle_power_w
    c = _nnls_relative(
        x, df["measured_j"].to_numpy(), _source_weights(df["source"].to_numpy()), idle_w * x[:, 2]
    )
    return {"e_flop_pj": c[0] * 1e12, "e_bit_pj": c[1] * 1e12, "p_static_w": idle_w + c[2]}


def fit_kernels(k: pd.DataFrame) -> dict[str, float]:
    """H200 energy factors from kernel energy = p_static t + e_flop FLOPs + e_bit bits."""
    x = np.column_stack([k["flops"], 8.0 * k["hbm_bytes"], k["time_s"]])
    c = _nnls_relative(x, k["measured_j"].to_numpy(), _source_weights(k["kind"].to_numpy()))
    return {"e_flop_pj": c[0] * 1e12, "e_bit_pj": c[1] * 1e12, "p_static_w": c[2]}


def fit(tables: Mapping[str, Any], exclude_group: str | None = None) -> dict[str, Any]:
    """Per-GPU factors from every row whose shape group is not `exclude_group`."""
    energy, time = tables["energy"], tables["time"]
    if exclude_group is not None:
        energy = energy[energy["group"] != exclude_group]
        time = time[time["group"] != exclude_group]
    gpus: dict[str, Any] = {}
    for gpu in E2E_GPUS:
        t_rows = time[time["gpu"] == gpu].reset_index(drop=True)
        e_rows = energy[energy["gpu"] == gpu].reset_index(drop=True)
        if t_rows.empty or e_rows.empty:
            continue
        entry = {**fit_time(t_rows, gpu), **fit_energy(e_rows, gpu)}
        entry["rows"] = {"time": len(t_rows), "energy": len(e_rows)}
        srcs = sorted(set(e_rows["source"]))
        entry["source"] = f"calibrated on measured energy ({', '.join(srcs)})"
        gpus[gpu] = entry
    out: dict[str, Any] = {"format_version": CALIBRATION_FORMAT, "gpus": gpus}
    if not tables["kernels"].empty:
        k = tables["kernels"]
        out["kernel_fits"] = {
            KERNEL_GPU: {
                **fit_kernels(k),
                "rows": len(k),
                "note": "kernel-level factors (GEMM and decode-attention kernels alone); not "
                "used for end-to-end estimates, which need the costs kernels leave out. h200_sxm "
                "end-to-end factors are derived from the nearest calibrated GPU (h100_sxm).",
            }
        }
    return out


# ---------------------------------------------------------------------- prediction and scoring
def predict(
    df: pd.DataFrame, gpu: str, preset: str, calibration: Mapping[str, Any] | None, time_s: Any
) -> np.ndarray:
    """Predicted energy of each row in its measured scope (GPU 0 of the group, or all GPUs)."""
    workload = {
        k: df[k].to_numpy()
        for k in ("batch_size", "prompt_tokens", "output_tokens", "tensor_parallel")
    }
    out = estimate(_arch(df), workload, gpu, preset=preset, time_s=time_s, calibration=calibration)
    return np.where(df["scope"].to_numpy() == "gpu0", out["energy_per_gpu_j"], out["energy_j"])


def cross_validate(tables: Mapping[str, Any]) -> pd.DataFrame:
    """Held-out predictions for every energy row: paper, corrected (roofline), corrected (time).

    "corrected_time" gives the corrected preset the measured time, the best a latency predictor
    could do; "corrected" uses its own roofline time, fully analytical.
    """
    energy = tables["energy"]
    parts = []
    for group in sorted(energy["group"].unique()):
        cal = fit(tables, exclude_group=group)
        held = energy[energy["group"] == group]
        for gpu in sorted(held["gpu"].unique()):
            rows = held[held["gpu"] == gpu].reset_index(drop=True)
            out = rows[["source", "gpu", "engine", "model", "group", "tensor_parallel",
                        "batch_size", "prompt_tokens", "output_tokens", "time_s", "scope",
                        "measured_j"]].copy()  # fmt: skip
            out["paper"] = predict(rows, gpu, "paper", None, None)
            out["corrected"] = predict(rows, gpu, "corrected", cal, None)
            out["corrected_time"] = predict(rows, gpu, "corrected", cal, rows["time_s"].to_numpy())
            parts.append(out)
    return pd.concat(parts, ignore_index=True)


def cross_validate_kernels(kernels: pd.DataFrame, n_folds: int = 5) -> dict[str, float]:
    """Grouped k-fold (by kernel shape) error of the H200 kernel energy fit."""
    groups = np.array(sorted(kernels["group"].unique()))
    rng = np.random.default_rng(0)
    fold_of = dict(zip(groups, rng.permutation(len(groups)) % n_folds, strict=True))
    fold = kernels["group"].map(fold_of).to_numpy()
    pred = np.empty(len(kernels))
    for f in range(n_folds):
        train, test = kernels[fold != f], kernels[fold == f]
        c = fit_kernels(train)
        pred[fold == f] = (
            c["e_flop_pj"] * 1e-12 * test["flops"]
            + c["e_bit_pj"] * 1e-12 * 8.0 * test["hbm_bytes"]
            + c["p_static_w"] * test["time_s"]
        )
    ape = np.abs(pred / kernels["measured_j"].to_numpy() - 1.0)
    return {"rows": len(kernels), "mape": float(ape.mean()), "median_ape": float(np.median(ape))}


def error_table(
    cv: pd.DataFrame, columns: tuple[str, ...] = ("paper", "corrected", "corrected_time")
) -> pd.DataFrame:
    """Mean / median absolute percentage error and median ratio by (source, gpu) and overall."""
    rows = []
    keys = [*[(s, g) for (s, g), _ in cv.groupby(["source", "gpu"])], ("all", "all")]
    for s, g in keys:
        part = cv if s == "all" else cv[(cv["source"] == s) & (cv["gpu"] == g)]
        row: dict[str, Any] = {"source": s, "gpu": g, "rows": len(part),
                               "shapes": part["group"].nunique()}  # fmt: skip
        for col in columns:
            ratio = part[col].to_numpy() / part["measured_j"].to_numpy()
            row[f"{col}_mape"] = float(np.mean(np.abs(ratio - 1.0)))
            row[f"{col}_median_ape"] = float(np.median(np.abs(ratio - 1.0)))
            row[f"{col}_median_ratio"] = float(np.median(ratio))
        rows.append(row)
    return pd.DataFrame(rows)


def manifest(
    tables: Mapping[str, Any], calibration: dict[str, Any], cv: pd.DataFrame | None
) -> dict[str, Any]:
    """The calibration plus what it was fitted on and how well it does on held-out shapes."""
    import scipy

    root = Path(tables["root"])
    out = dict(calibration)
    out["created_by"] = "python -m dse.estimators.calibrate"
    out["library_versions"] = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "pandas": pd.__version__,
        "scipy": scipy.__version__,
    }
    out["assumptions"] = {
        "ml_energy_prompt_tokens": M.ML_ENERGY_PROMPT_TOKENS,
        "argonne_a100": "a100_sxm_40gb (ALCF Polaris)",
        "architectures": "dse.spec.catalogue",
        "energy_scope": "argonne rows are GPU 0 (compared with energy_j / tp); ml-energy rows "
        "are all GPUs; aiconfigurator rows one GPU",
        "static_time": "measured time when fitting p_static_w",
    }
    out["data_files"] = [{"path": f, "sha256": sha256_file(root / f)} for f in tables["files"]]
    out["fitted_range"] = {
        col: [float(tables["energy"][col].min()), float(tables["energy"][col].max())]
        for col in ("batch_size", "prompt_tokens", "output_tokens", "tensor_parallel")
    }
    if cv is not None:
        tab = error_table(cv)
        out["validation"] = {
            "method": "leave-one-shape-out (refit time and energy factors without the shape)",
            "by_source": tab.to_dict(orient="records"),
            "h200_kernels_grouped_5fold": cross_validate_kernels(tables["kernels"]),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    here = Path(__file__).resolve()
    p = argparse.ArgumentParser(prog="python -m dse.estimators.calibrate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--data", default=str(here.parents[3] / "shared" / "data"))
    p.add_argument("--out", default=str(here.parent / CALIBRATION_FILE))
    p.add_argument("--no-cv", action="store_true", help="skip the leave-one-shape-out scores")
    args = p.parse_args(argv)
    tables = load_tables(args.data)
    cal = fit(tables)
    cv = None if args.no_cv else cross_validate(tables)
    doc = manifest(tables, cal, cv)
    write_atomic(Path(args.out), json.dumps(doc, indent=2, sort_keys=False) + "\n")
    for gpu, entry in cal["gpus"].items():
        vals = ", ".join(f"{k}={entry[k]:.4g}" for k in (*ENERGY_KEYS, *TIME_KEYS))
        print(f"{gpu}: {vals}")
    if cv is not None:
        print(error_table(cv).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
