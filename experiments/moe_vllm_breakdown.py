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
BLEND_W = (0.0, 0.25, 0.5, 0.75, 1.0)  # weight of the fused model's log prediction


def _fit_predict(name: str, gpu: str, engine: str, dtype: str, tr, te, seed: int, kw) -> np.ndarray:
    mo = importlib.import_module(MODULES.get(name, name))
    m = mo.MoEModel(gpu, engine, dtype, seed=seed, **kw).fit(tr)
    inp = te.drop(columns=["gated"], errors="ignore") if name == "old" else te
    return m.predict(**mo.moe_inputs(inp))["latency_s"]


def blend_fold(gpu, engine, dtype, tr, te, seed, kw, inner_folds=3):
    """(held-out blend, weight): exp(w log fused + (1 - w) log kernel-sum), w of `BLEND_W` with
    the lowest MAPE in a group CV over the training layouts only (seed + 1)."""
    g = U.architecture_groups(tr, LAYOUT)
    po, pp = np.full(len(tr), np.nan), np.full(len(tr), np.nan)
    for ite in U.group_folds(g, inner_folds, seed + 1):
        po[ite] = _fit_predict("old", gpu, engine, dtype, tr[~ite], tr[ite], seed, kw)
        pp[ite] = _fit_predict("physics", gpu, engine, dtype, tr[~ite], tr[ite], seed, kw)
    y = tr["latency_s"].to_numpy(float)
    score = {
        w: float(np.mean(np.abs(np.exp(w * np.log(po) + (1 - w) * np.log(pp)) / y - 1)))
        for w in BLEND_W
    }
    w = min(score, key=score.get)
    o = _fit_predict("old", gpu, engine, dtype, tr, te, seed, kw)
    q = _fit_predict("physics", gpu, engine, dtype, tr, te, seed, kw)
    return np.exp(w * np.log(o) + (1 - w) * np.log(q)), w, o, q


def regime(t: np.ndarray) -> np.ndarray:
    return np.select([t <= 16, t <= 256, t <= 2048], ["T<=16", "T<=256", "T<=2048"], "T>2048")


def breakdown(d: pd.DataFrame) -> None:
    d = d.assign(
        ape=np.abs(d["pred"] / d["latency_s"] - 1) * 100,
        lr=np.log(d["pred"] / d["latency_s"]),
        reg=regime(d["num_tokens"].to_numpy()),
        split=d["moe_tp_size"].astype(int).astype(str)
        + "x"
        + d["moe_ep_size"].astype(int).astype(str),
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
        folds = U.group_folds(groups, args.folds, args.seed)
        if args.model == "blend":
            fo, fp, ws = np.full(len(rows), np.nan), np.full(len(rows), np.nan), []
            for te in folds:
                pred[te], w, fo[te], fp[te] = blend_fold(
                    gpu, engine, dtype, rows[~te], rows[te], args.seed, kw
                )
                ws.append(w)
            base = fp
            y = rows["latency_s"].to_numpy(float)
            m_ = {
                k: round(float(np.mean(np.abs(v / y - 1))) * 100, 2)
                for k, v in (("blend", pred), ("fused", fo), ("kernel_sum", fp))
            }
            print(f"# {name} weights {ws} {m_}", flush=True)
            folds = []
        for te in folds:
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
