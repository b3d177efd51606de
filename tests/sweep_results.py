"""Test helper: a real, small results folder (docs/results_format.md) built without `dse sweep`.

Configurations come from a real search space (`space.enumerate()`), sizes and constraints from
`dse.configs`, predictions from `dse.predictor.predict`; a `random` sampler is emulated by a
seeded draw without replacement, `exhaustive` takes every configuration and writes
exact_front.csv. Used by the report, export and browser tests.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import moocore
import numpy as np
import pandas as pd

from dse import __version__
from dse import configs as C
from dse.estimators import tokens2wh
from dse.predictor import predict
from dse.space import load_space

REPO = Path(__file__).resolve().parents[1]

# Objective name -> column of the table that holds its value.
OBJECTIVE_SOURCE = {
    "latency_request": "pred.latency_s",
    "latency_ttft": "pred.ttft_s",
    "latency_tpot": "pred.tpot_s",
    "energy_hymell_request": "pred.energy_j",
    "energy_hymell_per_output_token": "pred.energy_per_output_token_j",
    "active_params": "active_params",
    "total_params": "total_params",
    "kv_bytes_per_token": "kv_bytes_per_token",
}
UNITS = {"latency": "s", "energy": "J"}


def write_results(
    space_file: str | Path,
    out: Path,
    *,
    sampler: str = "random",
    trials: int | None = None,
    seed: int = 0,
    constraints: dict[str, Any] | None = None,
    bands: bool = False,
) -> Path:
    """Evaluate `trials` configurations of a space and write its results folder into `out`."""
    space = load_space(REPO / space_file if not Path(space_file).is_absolute() else space_file)
    cons = space.constraints if constraints is None else constraints
    cols = space.enumerate()
    n_all = len(cols["d_model"])
    if sampler == "exhaustive":
        idx = np.arange(n_all)
    else:
        rng = np.random.default_rng(seed)
        idx = rng.choice(n_all, size=min(trials or n_all, n_all), replace=False)
    cols = {k: v[idx] for k, v in cols.items()}
    n = len(idx)
    d = C.derived(cols, n)
    cv = C.constraint_values(d, cons)
    feasible = C.feasible(cv)
    valid = d["invalid"] == ""
    # Columns gathered in a dict and framed once (column-by-column inserts fragment a frame).
    t: dict[str, Any] = {"number": np.arange(n), "state": np.full(n, "COMPLETE")}
    for k, v in cols.items():
        t[k] = v
    for k in ("total_params", "active_params", "kv_bytes_per_token", "memory_bytes"):
        t[k] = np.asarray(d[k])
    t["invalid_reason"] = d["invalid"].astype(str)
    for k, v in cv.items():
        t[f"constraint.{k}"] = v
    # Invalid configurations never reach the predictor: their pred.* stay NaN.
    pred = predict({k: v[valid] for k, v in cols.items()})
    for k, v in pred.items():
        full = np.full(n, np.nan, dtype=float if v.dtype.kind in "fiu" else object)
        if v.dtype == bool:
            full = np.zeros(n, dtype=bool)
        full[valid] = v
        t[f"pred.{k}"] = full
    if bands:  # a +-8 % latency and +-12 % energy band where the predictor gives none
        for q, r in (("latency", 0.08), ("energy", 0.12)):
            u = "s" if q == "latency" else "j"
            if f"pred.{q}_lo_{u}" in t:
                continue
            t[f"pred.{q}_lo_{u}"] = t[f"pred.{q}_{u}"] * (1 - r)
            t[f"pred.{q}_hi_{u}"] = t[f"pred.{q}_{u}"] * (1 + r)
    # The corrected tokens-to-Wh estimate, its static term timed by the predictor (as the sweep).
    est: dict[str, np.ndarray] = {}
    for gpu in np.unique(cols["gpu"]):
        rows = np.nonzero(valid & (cols["gpu"] == gpu))[0]
        if not len(rows):
            continue
        part = {k: v[rows] for k, v in cols.items()}
        ttft = t["pred.ttft_s"][rows]
        total = t["pred.latency_s"][rows]
        e = tokens2wh.estimate(
            C.architecture(part),
            {
                k: part[k]
                for k in ("batch_size", "prompt_tokens", "output_tokens", "tensor_parallel")
            },
            str(gpu),
            preset="corrected",
            time_s={"prefill": ttft, "decode": np.maximum(total - ttft, 0.0)},
        )
        for k, v in e.items():
            v = np.broadcast_to(np.asarray(v), (len(rows),))
            if v.dtype.kind in "fiu":
                est.setdefault(k, np.full(n, np.nan))[rows] = v
    for k, v in est.items():
        t[f"t2wh.{k}"] = v
    names = space.objectives.names
    for name in names:
        t[f"obj.{name}"] = np.where(valid, t[OBJECTIVE_SOURCE[name]].astype(float), np.nan)
    t["feasible"] = feasible
    F = np.column_stack([t[f"obj.{o}"] for o in names])
    on = np.zeros(n, dtype=bool)
    if feasible.any():
        on[np.nonzero(feasible)[0][moocore.is_nondominated(F[feasible], keep_weakly=True)]] = True
    t["on_front"] = on
    t = pd.DataFrame(t)
    out.mkdir(parents=True, exist_ok=True)
    t.to_parquet(out / "trials.parquet", index=False)
    t.to_csv(out / "trials.csv", index=False)
    front = t[on].sort_values([f"obj.{names[0]}", "number"])
    front.to_csv(out / "front.csv", index=False)
    if sampler == "exhaustive":
        front.to_csv(out / "exact_front.csv", index=False)
    # Hypervolume on objectives normalised by the front's ideal and nadir, reference 1.1.
    hist: list[list[float]] = []
    hv = None
    norm = None
    if feasible.any():
        Ff = F[on]
        ideal, nadir = Ff.min(axis=0), Ff.max(axis=0)
        span = np.where(nadir > ideal, nadir - ideal, 1.0)
        norm = {"ideal": ideal.tolist(), "nadir": nadir.tolist()}
        ref = np.full(len(names), 1.1)
        for k in sorted({max(1, n * q // 4) for q in (1, 2, 3, 4)}):
            ok = feasible[:k]
            pts = (F[:k][ok] - ideal) / span
            hist.append([k, float(moocore.hypervolume(pts, ref=ref)) if len(pts) else 0.0])
        hv = hist[-1][1]
    summary = {
        "format_version": 1,
        "dse_version": __version__,
        "created": "2026-11-29T12:00:00+00:00",
        "study": space.name,
        "space_file": str(space_file),
        "space": space.raw | ({"constraints": constraints} if constraints is not None else {}),
        "sampler": sampler,
        "seed": seed,
        "trials_requested": n,
        "objectives": [
            {"name": o, "unit": UNITS.get(o.split("_")[0], "parameters")} for o in names
        ],
        "counts": {
            "trials": n,
            "complete": n,
            "feasible": int(feasible.sum()),
            "front": int(on.sum()),
        },
        "artifacts": {g: "roofline-v0" for g in sorted(set(cols["gpu"]))},
        "gpus": sorted(set(cols["gpu"])),
        "hypervolume": hv,
        "reference_point": [1.1] * len(names) if hv is not None else None,
        "normalisation": norm,
        "hypervolume_history": hist,
        "exact_hypervolume": hv if sampler == "exhaustive" else None,
        "storage": f"journal:///{out}/journal.log",
        "elapsed_s": 0.1,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    return out
