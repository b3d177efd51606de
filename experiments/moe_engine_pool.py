"""Does a fused-MoE model fitted across engines beat the per-table model, held out by layout
(issue 35, "MoE layouts pooled across engines and versions where it helps")? Feeds
docs/accuracy.md ("MoE, layout held out", command T).

    OMP_NUM_THREADS=1 PYTHONPATH=. python experiments/moe_engine_pool.py --out /tmp/pool.json

Pool: H100 vLLM 0.24.0 MoE bf16 (Triton fused MoE, 12 layouts) and H100 SGLang 0.5.14 MoE bf16
(13 layouts: the same 12 and 8192x5120x22x512; its gated rows run SGLang's Triton fused MoE, its
non-gated rows FlashInfer's CUTLASS MoE). Every other H100 bf16 Triton table is one of these two;
H200 / B200 vLLM bf16 and the TRT-LLM tables (CUTLASS, another class) add no layout but that one.

Fold unit: the layout (`dse.fitting.moe.MOE_SHAPE_GROUP`). For each target table, the 5 seeded
layout folds of its own layouts (`dse.fitting.cv.group_folds`, seed `--seed`: for H100 vLLM bf16
command L's folds); a fold's held-out layouts are removed from EVERY pooled table (their SGLang
rows cannot leak their vLLM timing), the fit sees the rest of all pooled tables, the score is the
target table's rows of the held-out layouts (MAPE, rows `dse fit` keeps: `plausible.screen`).

Variants, each the shipped class's recipe (`dse.models.moe`: roofline base with 4 constants x
residual MLP ensemble, 2 x 64x64x64, 300 epochs, <= `--max-rows` rows a fit; seeded):
  per_table  the class `dse fit` ships for the target table (`model_class_of`), its rows only
  onehot     one model on the pooled rows: one roofline, the residual MLP's features plus a
             one-hot of the row's engine backend (`backend_of`: table and kernel, so SGLang's
             CUTLASS rows are their own backend)
  offset     one model on the pooled rows with no engine input, each backend's latency divided
             by a multiplicative offset first: the median log ratio of its training rows to the
             reference backend's (the target table's kernel) on the calls both measured (same
             layout, tokens, split, routing, gating); without 50 such rows, the difference of
             the backends' median log residual against the pooled roofline.
  onehot_keep  onehot, every training row of the target table kept: the other tables' rows are
             subsampled (seeded) to fill `--max-rows` (added after onehot lost on the vLLM
             target and won on the SGLang one: does the target's share of the subsample decide?)
The pooled fits subsample `--max-rows` rows of ~39,000 (seeded, as the shipped class does), so
they see fewer target rows than the per-table fit; `--max-rows 8000` is a cheaper comparison.
One core (set OMP_NUM_THREADS=1); ~1-2 min a fit on the shared 2-core VM.
"""

from __future__ import annotations

import argparse
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
from dse.fitting import moe as moe_fit
from dse.fitting import plausible
from dse.metrics import mape_pct
from dse.models import moe as moe_mod
from dse.models._hybrid import apply_residual, fit_hybrid_heads

POOL = ("h100_sxm/vllm/bfloat16", "h100_sxm/sglang/bfloat16")
LAYOUT = list(moe_fit.MOE_SHAPE_GROUP)
# a call measured by two backends: the same layout, tokens, split, routing and gating
CALL = [*LAYOUT, "num_tokens", "moe_tp_size", "moe_ep_size", "distribution", "gated"]
MIN_MATCHED = 50
VARIANTS = ("per_table", "onehot", "offset", "onehot_keep")
DEFAULT_VARIANTS = VARIANTS[:3]  # onehot_keep on request (--variants)


def backend_of(rows: pd.DataFrame) -> np.ndarray:
    """The engine backend of each row: its table and kernel ("h100_sxm/sglang/bfloat16:cutlass")."""
    kern = np.where(
        rows["kernel_source"].astype(str).str.contains("cutlass").to_numpy(), "cutlass", "triton"
    )
    return (rows["_table"].astype(str) + ":" + kern).to_numpy()


class PooledMoE(moe_mod.MoEModel):
    """The shipped fused-MoE recipe on rows of several engine backends (`_backend` column):
    mode "onehot" (backend one-hot as residual inputs) or "offset" (per-backend multiplicative
    offset against `reference`, no engine input)."""

    def __init__(self, gpu: str, dtype: str, backends: list[str], reference: str, mode: str,
                 seed: int, max_rows: int, max_iter: int) -> None:  # fmt: skip
        super().__init__(gpu, "pooled", dtype, seed=seed, max_rows=max_rows, max_iter=max_iter)
        self.backends, self.reference, self.mode = backends, reference, mode

    def _onehot(self, rows: pd.DataFrame) -> np.ndarray:
        b = rows["_backend"].to_numpy()
        return np.column_stack([(b == k).astype(float) for k in self.backends])

    def _offsets(self, rows: pd.DataFrame, v: dict[str, np.ndarray]) -> dict[str, float]:
        """log offset of each backend against the reference (0), from training rows only."""
        y = rows["latency_s"].to_numpy(float)
        ref = rows[rows["_backend"] == self.reference]
        off: dict[str, float] = {self.reference: 0.0}
        self.offset_how_: dict[str, str] = {}
        base = None
        for k in self.backends:
            if k == self.reference:
                continue
            mine = rows[rows["_backend"] == k]
            m = mine.merge(ref, on=CALL, suffixes=("", "_ref"))
            if len(m) >= MIN_MATCHED:
                r = np.log(m["latency_s"].to_numpy(float) / m["latency_s_ref"].to_numpy(float))
                off[k] = float(np.median(r))
                self.offset_how_[k] = f"matched calls: {len(m)}"
                continue
            if base is None:  # pooled roofline, fitted on the unadjusted rows
                base = self.design(v, y)[0]["base_s"]
            lr = np.log(y / base)
            b = rows["_backend"].to_numpy()
            off[k] = float(np.median(lr[b == k]) - np.median(lr[b == self.reference]))
            self.offset_how_[k] = "roofline residual"
        return off

    def fit(self, df: pd.DataFrame) -> PooledMoE:  # type: ignore[override]
        v = self._inputs(moe_mod.moe_inputs(df))
        y = df["latency_s"].to_numpy(float)
        if self.mode == "offset":
            self.offsets_ = self._offsets(df, v)
            y = y / np.exp(df["_backend"].map(self.offsets_).to_numpy(float))
        out, X = self.design(v, y)
        if self.mode == "onehot":
            X = np.column_stack([X, self._onehot(df)])
        self.mlp_, self.power_mlp_ = fit_hybrid_heads(
            X, y, out["base_s"], np.full(len(df), np.nan), members=moe_mod.MEMBERS,
            hidden=moe_mod.HIDDEN, max_iter=self.max_iter, max_rows=self.max_rows, seed=self.seed,
        )  # fmt: skip
        return self

    def predict_rows(self, df: pd.DataFrame) -> np.ndarray:
        out, X = self.design(self._inputs(moe_mod.moe_inputs(df)))
        if self.mode == "onehot":
            X = np.column_stack([X, self._onehot(df)])
        apply_residual(out, X, self.mlp_, None)
        lat = out["latency_s"]
        if self.mode == "offset":
            lat = lat * np.exp(df["_backend"].map(self.offsets_).to_numpy(float))
        return lat


def keep_target(tr: pd.DataFrame, target: str, max_rows: int, seed: int) -> pd.DataFrame:
    """Every row of `target` in `tr`, and a seeded sample of the others up to `max_rows` rows."""
    mine = (tr["_table"] == target).to_numpy()
    room = max_rows - int(mine.sum())
    others = np.flatnonzero(~mine)
    if room >= len(others):
        return tr
    pick = np.random.default_rng(seed).choice(others, max(room, 0), replace=False)
    return tr.iloc[np.sort(np.concatenate([np.flatnonzero(mine), pick]))]


def layout_key(rows: pd.DataFrame) -> np.ndarray:
    return rows[LAYOUT].astype(int).astype(str).agg("x".join, axis=1).to_numpy()


def run_target(pool: pd.DataFrame, target: str, args: Any, rec: dict[str, Any], save: Any) -> None:
    gpu, eng, dt = target.split("/")
    tgt = pool[pool["_table"] == target].reset_index(drop=True)
    y = tgt["latency_s"].to_numpy(float)
    folds = [
        te for te in U.group_folds(U.architecture_groups(tgt, LAYOUT), args.folds, args.seed)
        if not te.all()
    ]  # fmt: skip
    tk, pk = layout_key(tgt), layout_key(pool)
    ref = str(backend_of(tgt.iloc[[int(np.argmax(tgt["gated"].to_numpy(bool)))]])[0])
    backends = sorted(set(pool["_backend"]))
    r = rec.setdefault(target, {"rows": len(tgt), "layouts": len(set(tk)), "variants": {}})
    r["folds"] = [sorted(set(tk[te])) for te in folds]
    for variant in args.variants:
        pred = np.full(len(tgt), np.nan)
        per_fold, extra = [], []
        t0 = time.perf_counter()
        for f, te in enumerate(folds):
            held = set(tk[te])
            if variant == "per_table":
                tr = tgt[~te]
                cls = moe_fit.model_class_of(eng, tr)
                m = cls(gpu, eng, dt, seed=args.seed, max_rows=args.max_rows, max_iter=args.epochs)
                m = m.fit(tr)
                pred[te] = m.predict(**m._table_inputs(tgt[te]))["latency_s"]
                extra.append({"class": cls.__module__, "train_rows": len(tr)})
            else:
                tr = pool[~np.isin(pk, list(held))]
                if variant == "onehot_keep":
                    tr = keep_target(tr, target, args.max_rows, args.seed)
                m = PooledMoE(
                    gpu,
                    dt,
                    backends,
                    ref,
                    variant.removesuffix("_keep"),
                    args.seed,
                    args.max_rows,
                    args.epochs,
                )
                m.fit(tr)
                pred[te] = m.predict_rows(tgt[te])
                e: dict[str, Any] = {
                    "train_rows": len(tr),
                    "train_layouts": len(set(pk[~np.isin(pk, list(held))])),
                }
                if variant == "offset":
                    e["log_offsets"] = {k: round(v, 4) for k, v in m.offsets_.items()}
                    e["offset_from"] = m.offset_how_
                extra.append(e)
            per_fold.append(round(mape_pct(pred[te], y[te]), 2))
            print(f"  {target} {variant} fold {f}: {per_fold[-1]}% "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)  # fmt: skip
        ape = np.abs(pred / y - 1) * 100
        r["variants"][variant] = {
            "mape_pct": round(float(ape.mean()), 2),
            "median_ape_pct": round(float(np.median(ape)), 2),
            "per_fold": per_fold,
            "per_layout": {k: round(float(ape[tk == k].mean()), 2) for k in sorted(set(tk))},
            "fits": extra,
            "seconds": round(time.perf_counter() - t0, 1),
        }
        print(f"## {target} {variant}: {r['variants'][variant]['mape_pct']}%", flush=True)
        save()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    ap.add_argument("--pool", nargs="+", default=list(POOL), help="gpu/engine/dtype tables")
    ap.add_argument("--targets", nargs="+", default=list(POOL), help="tables scored")
    ap.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(DEFAULT_VARIANTS))
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0, help="fold draw and MLP seed (command L's)")
    ap.add_argument("--max-rows", type=int, default=moe_mod.MAX_ROWS, help="rows a residual fit")
    ap.add_argument("--epochs", type=int, default=moe_mod.MAX_ITER, help="MLP epochs (shipped 300)")
    ap.add_argument("--out", default=None, help="JSON file (rewritten after every variant)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows = load(args.data, ["moe"])["moe"]
    rows, _ = plausible.screen("moe", rows)  # as `dse fit` does
    table = (rows["gpu"] + "/" + rows["engine"] + "/" + rows["dtype"].astype(str)).to_numpy()
    pool = rows[np.isin(table, args.pool)].copy()
    pool["_table"] = table[np.isin(table, args.pool)]
    pool = pool.reset_index(drop=True)
    pool["_backend"] = backend_of(pool)
    print(pool.groupby("_backend").size().to_string(), flush=True)
    rec: dict[str, Any] = {}
    out = {"command": " ".join(sys.argv), "pool": args.pool, "max_rows": args.max_rows,
           "epochs": args.epochs,
           "seed": args.seed, "folds": args.folds, "targets": rec}  # fmt: skip

    def save() -> None:
        out["seconds"] = round(time.perf_counter() - t0)
        if args.out:
            Path(args.out).write_text(json.dumps(out, indent=1) + "\n")

    for target in args.targets:
        run_target(pool, target, args, rec, save)
    print("\n| target | " + " | ".join(args.variants) + " |")
    for target, r in rec.items():
        cells = [f"{r['variants'][v]['mape_pct']}%" for v in args.variants if v in r["variants"]]
        print(f"| {target} ({r['layouts']} layouts) | " + " | ".join(cells) + " |")
    save()


if __name__ == "__main__":
    main()
