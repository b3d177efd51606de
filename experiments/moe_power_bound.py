"""How well can any model know an H200 fused-MoE call's board power for a layout it never saw?
Feeds docs/accuracy.md, "Energy and power" (the H200 MoE energy target of issue 19, what bounds
it).

    OMP_NUM_THREADS=1 PYTHONPATH=. python experiments/moe_power_bound.py [--data ../shared/data]

The shipped MoE model predicts energy as its latency times its power. This asks what the power
half alone could reach, generously: a flexible learner (scikit-learn's gradient-boosted trees)
given the MEASURED latency of the call (which no prediction has) and layout-agnostic inputs
(tokens, tokens per expert, the per-GPU weight size, the expert-parallel size, the routing),
scored three ways on the rows `dse fit` keeps (`dse.fitting.plausible.screen`):

1. layouts held out (5 seeded group folds over hidden, inter, top-k, experts: the protocol of
   docs/accuracy.md, `dse.fitting.cv.architecture_groups`);
2. rows held out at random (5 folds): every layout in training, what is left is the scatter of
   power at equal inputs, the measurement's own noise as far as these inputs see it;
3. layouts held out with the latency alone as input.

If (1) stays above 15% with the true latency, the energy target cannot be met by a better
latency model; the gap between (1) and (2) is what the layouts the tables hold cannot teach.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.model_selection import KFold

from dse.data import load
from dse.fitting import cv as U
from dse.fitting import plausible

LAYOUT = ("hidden_size", "inter_size", "topk", "num_experts")
BOARD_W = 700.0  # H200 SXM board limit


def _inputs(rows: pd.DataFrame) -> np.ndarray:
    """Measured log latency, then layout-agnostic inputs of the call."""
    t = rows["num_tokens"].to_numpy(float)
    tpe = t * rows["topk"].to_numpy(float) / rows["num_experts"].to_numpy(float)
    w = (
        rows["hidden_size"].to_numpy(float)
        * rows["inter_size"].to_numpy(float)
        / rows["moe_tp_size"].to_numpy(float)
    )
    return np.column_stack(
        [
            np.log(rows["latency_s"].to_numpy(float)),
            np.log(t),
            np.log(tpe),
            np.log(w),
            np.log(rows["moe_ep_size"].to_numpy(float)),
            rows["distribution"].astype("category").cat.codes.to_numpy(float),
        ]
    )


def _oof(X: np.ndarray, y: np.ndarray, folds: list[np.ndarray]) -> np.ndarray:
    pred = np.full(len(y), np.nan)
    for te in folds:
        m = HistGradientBoostingRegressor(max_iter=300, random_state=0).fit(X[~te], y[~te])
        pred[te] = np.minimum(m.predict(X[te]), BOARD_W)
    return pred


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    args = ap.parse_args()
    rows = load(args.data, ["moe"])["moe"]
    rows, _ = plausible.screen("moe", rows)
    print(
        "| H200 vLLM table | rows (layouts) | layouts held out | rows held out | layouts held out, latency only |"
    )
    print("|---|---|---|---|---|")
    for dtype in ("bfloat16", "fp8", "fp8_block"):
        sel = (rows["gpu"] == "h200_sxm") & (rows["dtype"] == dtype) & rows["power_w"].notna()
        b = rows[sel].reset_index(drop=True)
        y = b["power_w"].to_numpy(float)
        X = _inputs(b)
        groups = U.architecture_groups(b, LAYOUT)
        by_layout = [te for te in U.group_folds(groups, 5, 0) if not te.all()]
        random = []
        for _, te_idx in KFold(5, shuffle=True, random_state=0).split(X):
            te = np.zeros(len(y), dtype=bool)
            te[te_idx] = True
            random.append(te)

        def mape(p: np.ndarray, y: np.ndarray = y) -> str:
            return f"{100 * np.mean(np.abs(p / y - 1)):.1f}%"

        print(
            f"| {dtype} | {len(b):,} ({len(np.unique(groups))}) | {mape(_oof(X, y, by_layout))} | "
            f"{mape(_oof(X, y, random))} | {mape(_oof(X[:, :1], y, by_layout))} |"
        )


if __name__ == "__main__":
    main()
