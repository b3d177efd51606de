"""Where the held-out-layout MoE error sits on the vLLM tables (issue 19, session 14): out-of-fold
predictions of one model class over the same 5 seeded layout folds as command L
(`dse.fitting.cv.group_folds` over `architecture_groups`), saved per row, then the MAPE by held-out
layout, token regime, parallel split, routing and kernel backend (`kernel_source`).

    PYTHONPATH=. python experiments/moe_vllm_breakdown.py --model old --members 1 --max-iter 60 \
        --max-rows 4000 --tables h100_sxm/vllm/fp8_block --out /tmp/v19/old_fp8b.parquet
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dse.data import load
from dse.fitting import cv as U
from dse.fitting import plausible

LAYOUT = ("hidden_size", "inter_size", "topk", "num_experts")
VLLM = (
    "h100_sxm/vllm/bfloat16",
    "h100_sxm/vllm/fp8",
    "h100_sxm/vllm/fp8_block",
    "h200_sxm/vllm/bfloat16",
    "h200_sxm/vllm/fp8",
    "h200_sxm/vllm/fp8_block",
    "a100_sxm/vllm/bfloat16",
)
MODULES = {"old": "dse.models.moe", "physics": "dse.models.moe_physics"}


def regime(t: np.ndarray) -> np.ndarray:
    return np.select([t <= 16, t <= 256, t <= 2048], ["T<=16", "T<=256", "T<=2048"], "T>2048")


def breakdown(d: pd.DataFrame) -> None:
    d = d.assign(
        ape=np.abs(d["pred"] / d["latency_s"] - 1) * 100,
        lr=np.log(d["pred"] / d["latency_s"]),
        reg=regime(d["num_tokens"].to_numpy()),
        split=d["moe_tp_size"].astype(int).astype(str) + "x" + d["moe_ep_size"].astype(int).astype(str),
        backend=d["kernel_source"].astype(str).str.extract(r"(cutlass|triton|fused_moe)")[0],
    )
    print(f"  all {d['ape'].mean():.2f}%  median {d['ape'].median():.2f}%")
    d["layout"] = d[list(LAYOUT)].astype(int).astype(str).agg("x".join, axis=1)
    for key in ("layout", "reg", "backend", "distribution", "split"):
        g = d.groupby(key).agg(n=("ape", "size"), mape=("ape", "mean"), bias=("lr", "median"))
        g["share"] = (g["n"] * g["mape"] / d["ape"].sum() * 100).round(1)
        print(g.round(2).to_string())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/work/shared/data")
    ap.add_argument("--model", default="old")
    ap.add_argument("--tables", nargs="*", default=list(VLLM))
    ap.add_argument("--members", type=int, default=None)
    ap.add_argument("--max-iter", type=int, default=None)
    ap.add_argument("--max-rows", type=int, default=30000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--out", default=None)
    ap.add_argument("--read", default=None, help="a saved parquet: print its breakdown only")
    ap.add_argument(
        "--cutlass-model",
        default=None,
        help="fit the rows of each kernel backend apart: this model on FlashInfer CUTLASS rows",
    )
    args = ap.parse_args()
    if args.read:
        d = pd.read_parquet(args.read)
        for t, g in d.groupby("table"):
            print("##", t)
            breakdown(g)
        return
    mod = importlib.import_module(MODULES.get(args.model, args.model))
    shipped = importlib.import_module("dse.models.moe")
    if args.members:
        shipped.MEMBERS = args.members
    rows_all = load(args.data, ["moe"])["moe"]
    rows_all, _ = plausible.screen("moe", rows_all)
    out = []
    for name in args.tables:
        gpu, engine, dtype = name.split("/")
        sel = (rows_all.gpu == gpu) & (rows_all.engine == engine) & (rows_all.dtype == dtype)
        rows = rows_all[sel].reset_index(drop=True)
        groups = U.architecture_groups(rows, LAYOUT)
        pred = np.full(len(rows), np.nan)
        base = np.full(len(rows), np.nan)
        t0 = time.perf_counter()
        kw = {"max_rows": args.max_rows}
        if args.max_iter:
            kw["max_iter"] = args.max_iter
        cut = rows["kernel_source"].astype(str).str.contains("cutlass").to_numpy()
        parts = [(np.ones(len(rows), bool), args.model)]
        if args.cutlass_model:
            parts = [(cut, args.cutlass_model), (~cut, args.model)]
        for te in U.group_folds(groups, args.folds, args.seed):
            for part, name_ in parts:
                if not part.any():
                    continue
                mo = importlib.import_module(MODULES.get(name_, name_))
                m = mo.MoEModel(gpu, engine, dtype, seed=args.seed, **kw).fit(rows[~te & part])
                inp = rows[te & part]
                if name_ == "old":
                    inp = inp.drop(columns=["gated"], errors="ignore")
                p = m.predict(**mo.moe_inputs(inp))
                pred[te & part], base[te & part] = p["latency_s"], p["base_s"]
        d = rows.assign(pred=pred, base=base, table=name, model=args.model)
        print(f"## {name} ({time.perf_counter() - t0:.0f} s)", flush=True)
        breakdown(d)
        out.append(d)
    if args.out:
        pd.concat(out).drop(columns=["file"], errors="ignore").to_parquet(args.out)


if __name__ == "__main__":
    main()
