"""Fused-MoE latency (and H200 energy) held out by layout only (issue 19, "MoE from physics
first"): 5 seeded group folds over (hidden_size, inter_size, topk, num_experts), every parallel
split, dtype-table and routing of a held-out layout out of the fit. Feeds docs/accuracy.md
(MoE, command L) and docs/dev/accuracy-journal.md ("MoE from physics first").

    PYTHONPATH=. python experiments/moe_layout_cv.py --model new --jobs 2 --out results/moe/new.json
    PYTHONPATH=. python experiments/moe_layout_cv.py --model old     # the pre-issue-19 module
    PYTHONPATH=. python experiments/moe_layout_cv.py --model new --set PAD_COMPUTE=0 \
        --members 1 --max-iter 150 --max-rows 8000 --tables h100_sxm/vllm/bfloat16  # a screen

Per table it reports the held-out latency MAPE, the fitted physics alone (the roofline base,
no residual), the plain roofline, and where power was measured the energy and power MAPE, the
largest predicted power and how many held-out rows are predicted above the board limit.
`--model old` runs the shipped dse/models/moe.py, `--model new` the candidate
dse/models/moe_physics.py, on the same rows and folds; the shipped model reads gating from the
kernel name, as it does in `dse fit`. (The runs in the journal before commit 3 of this work
took the old model from a copy of it; the numbers are the same module.)
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dse.data import load
from dse.fitting import cv as U
from dse.fitting import plausible
from dse.metrics import mape_pct
from dse.models.moe_splits import split_anomalies
from dse.spec.hardware import get_gpu

TABLES = (
    "h100_sxm/vllm/bfloat16",
    "h100_sxm/vllm/fp8",
    "h100_sxm/vllm/fp8_block",
    "h100_sxm/trtllm/bfloat16",
    "h100_sxm/trtllm/fp8",
    "h100_sxm/trtllm/fp8_block",
    "h200_sxm/vllm/bfloat16",
    "h200_sxm/vllm/fp8",
    "h200_sxm/vllm/fp8_block",
    "a100_sxm/vllm/bfloat16",
)
LAYOUT = ("hidden_size", "inter_size", "topk", "num_experts")
_STATE: dict[str, Any] = {}


def _module(args: Any) -> Any:
    name = "dse.models.moe" if args.model == "old" else "dse.models.moe_physics"
    mod = importlib.import_module(name)
    # the candidate fits with the shipped model's fit: its size constants live there
    shipped = importlib.import_module("dse.models.moe")
    for kv in args.set or ():
        key, val = kv.split("=", 1)
        owner = mod if hasattr(mod, key) else shipped
        cur = getattr(owner, key)
        if isinstance(cur, tuple):
            new: Any = tuple(x for x in val.split(",") if x)
        elif isinstance(cur, bool):
            new = val not in ("0", "false", "False")
        else:
            new = type(cur)(val)
        setattr(owner, key, new)
    if args.members:
        shipped.MEMBERS = args.members
    return mod


def _inputs(mod: Any, rows: pd.DataFrame, old: bool) -> dict[str, np.ndarray]:
    if old:  # the shipped module reads gating from the kernel name, routing "balanced" by default
        return mod.moe_inputs(rows.drop(columns=["gated"], errors="ignore"))
    return mod.moe_inputs(rows)


def run_table(name: str) -> dict[str, Any]:
    args, rows_all = _STATE["args"], _STATE["rows"]
    mod = _module(args)
    gpu, engine, dtype = name.split("/")
    sel = (rows_all["gpu"] == gpu) & (rows_all["engine"] == engine) & (rows_all["dtype"] == dtype)
    rows = rows_all[sel].reset_index(drop=True)
    t0 = time.perf_counter()
    groups = U.architecture_groups(rows, LAYOUT)
    kw: dict[str, Any] = {"max_rows": args.max_rows}
    if args.max_iter:
        kw["max_iter"] = args.max_iter
    keys = ("latency_s", "base_s", "power_w", "energy_j", "residual_factor")
    pred = {k: np.full(len(rows), np.nan) for k in keys}
    choices = []
    for te in U.group_folds(groups, args.folds, args.seed):
        if te.all():
            continue
        m = mod.MoEModel(gpu, engine, dtype, seed=args.seed, **kw).fit(rows[~te])
        choices.append(
            {
                "use_residual": bool(getattr(m, "use_residual_", True)),
                **getattr(m, "inner_mape_", {}),
            }
        )
        p = m.predict(**_inputs(mod, rows[te], args.model == "old"))
        for k in keys:
            if k in p:
                pred[k][te] = p[k]
    y = rows["latency_s"].to_numpy(float)
    ape = np.abs(pred["latency_s"] / y - 1.0) * 100
    # reporting only: the rows of splits slower than their half-parallel twin (moe_splits)
    odd = split_anomalies(rows)
    by_layout = {
        "x".join(str(int(v)) for v in key): round(float(ape[idx].mean()), 2)
        for key, idx in rows.groupby(list(LAYOUT)).indices.items()
    }
    v = mod.MoEModel(gpu, engine, dtype)
    peak, bw = v._peak()
    w = mod.moe_work(v._inputs(_inputs(mod, rows, args.model == "old")), v.weight_bytes)
    roof = np.maximum(w["flops"] / peak, w["bytes"] / bw)
    rec: dict[str, Any] = {
        "table": name,
        "model": args.model,
        "set": args.set or [],
        "rows": len(rows),
        "layouts": len(np.unique(groups)),
        "folds": args.folds,
        "seed": args.seed,
        "latency_mape_pct": round(mape_pct(pred["latency_s"], y), 2),
        "latency_median_ape_pct": round(float(np.nanmedian(ape)), 2),
        "physics_mape_pct": round(mape_pct(pred["base_s"], y), 2),
        "anomalous_split_rows": int(odd.sum()),
        "latency_mape_regular_splits_pct": round(mape_pct(pred["latency_s"][~odd], y[~odd]), 2),
        "physics_mape_regular_splits_pct": round(mape_pct(pred["base_s"][~odd], y[~odd]), 2),
        "fold_choices": choices,
        "plain_roofline_mape_pct": round(mape_pct(roof, y), 2),
        "by_layout": by_layout,
        # the residual's log factor clipped to +-c (what a bound on the MLP's say would give)
        "clipped_mape_pct": {
            str(c): round(
                mape_pct(
                    pred["base_s"] * np.exp(np.clip(np.log(pred["residual_factor"]), -c, c)), y
                ),
                2,
            )
            for c in (0.2, 0.35, 0.5, 0.7, 1.0)
        }
        if np.isfinite(pred["residual_factor"]).any()
        else {},
        "seconds": round(time.perf_counter() - t0, 1),
    }
    if np.isfinite(rows["power_w"]).any():
        limit = get_gpu(gpu).board_power_w
        rec["energy_mape_pct"] = round(mape_pct(pred["energy_j"], rows["energy_j"]), 2)
        e = rows["energy_j"].to_numpy(float)
        rec["energy_mape_regular_splits_pct"] = round(mape_pct(pred["energy_j"][~odd], e[~odd]), 2)
        rec["power_mape_pct"] = round(mape_pct(pred["power_w"], rows["power_w"]), 2)
        rec["power_max_w"] = round(float(np.nanmax(pred["power_w"])), 1)
        rec["rows_above_board_limit"] = int((pred["power_w"] > limit).sum())
    print("#", json.dumps({k: v for k, v in rec.items() if k != "by_layout"}), flush=True)
    return rec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    ap.add_argument("--model", choices=("old", "new"), default="new")
    ap.add_argument("--tables", nargs="*", default=list(TABLES))
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--members", type=int, default=None)
    ap.add_argument("--max-iter", type=int, default=None)
    ap.add_argument("--max-rows", type=int, default=30000)
    ap.add_argument("--set", nargs="*", help="module constants of the new model, KEY=VALUE")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rows = load(args.data, ["moe"])["moe"]
    rows, report = plausible.screen("moe", rows)  # as `dse fit` does
    _STATE.update(args=args, rows=rows)
    if args.model == "new":  # fill the power-law routing cache once, before the workers fork
        mod = _module(args)
        mod.moe_work(mod.MoEModel()._inputs(mod.moe_inputs(rows)), 2.0)
    if args.jobs > 1:
        import multiprocessing as mp

        with mp.get_context("fork").Pool(min(args.jobs, len(args.tables))) as pool:
            recs = pool.map(run_table, args.tables, chunksize=1)
    else:
        recs = [run_table(t) for t in args.tables]
    print(
        "| table | rows (layouts) | latency MAPE | physics alone | plain roofline | energy | regular splits: latency / physics |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in recs:
        print(
            f"| {r['table']} | {r['rows']} ({r['layouts']}) | {r['latency_mape_pct']}% | "
            f"{r['physics_mape_pct']}% | {r['plain_roofline_mape_pct']}% | "
            f"{r.get('energy_mape_pct', '-')} | {r['latency_mape_regular_splits_pct']}% / "
            f"{r['physics_mape_regular_splits_pct']}% |"
        )
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        out = {"command": " ".join(sys.argv), "implausible_rows": report["rows"], "records": recs}
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
