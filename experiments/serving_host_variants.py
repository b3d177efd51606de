"""Which host terms continuous-batching serving needs (docs/accuracy.md "Serving energy is right
for the wrong reasons"): held-out (leave-one-model-out) MAPE of time, power and energy on the
ml-energy v2 runs for several host-time feature sets, with the waiting GPU at the spec-sheet idle
power or at a fitted draw above it. The shipped model (`dse.models.serving`) is
"1, B, tp-1" with the fitted waiting power.

    PYTHONPATH=. python experiments/serving_host_variants.py [DATA]

Also prints the measured fields' consistency: the running batch the per-token latency implies
(`Token tput` x `Avg TPOT`) against `Avg BS`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from dse.fitting.serving import STATIC, serving_rows
from dse.spec.hardware import get_gpu

Features = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
VARIANTS: dict[str, Features] = {
    "1, B": lambda b, tp, st: np.column_stack([np.ones_like(b), b]),
    "1, B, tp-1": lambda b, tp, st: np.column_stack([np.ones_like(b), b, tp - 1]),
    "1, B, tp-1, B/steps": lambda b, tp, st: np.column_stack([np.ones_like(b), b, tp - 1, b / st]),
    "1, B, log2 tp, B log2 tp": lambda b, tp, st: np.column_stack(
        [np.ones_like(b), b, np.log2(tp), b * np.log2(tp)]
    ),
}


def held_out(rows: pd.DataFrame, feats: Features, fitted_wait: bool) -> pd.DataFrame:
    """Per GPU: time, power and energy MAPE with each model's rows priced by a fit without it."""
    out = []
    for gpu, g in rows.groupby("gpu", sort=True):
        idle = get_gpu(str(gpu)).idle_power_w
        b, tp = g["batch_size"].to_numpy(float), g["tensor_parallel"].to_numpy(float)
        st = np.maximum(g["output_tokens"].to_numpy(float) - 1, 1)
        t, gt = g["time_s"].to_numpy(), g[STATIC + "latency_s"].to_numpy()
        e, eg = g["energy_j"].to_numpy() / tp, g[STATIC + "energy_j"].to_numpy() / tp
        x = feats(b, tp, st) * st[:, None]
        tp_pred, e_pred = np.empty_like(t), np.empty_like(t)
        for model in g["model"].unique():
            te = (g["model"] == model).to_numpy()
            tr = ~te
            coef, _ = nnls(x[tr] / t[tr, None], (t[tr] - gt[tr]) / t[tr])
            wait = np.maximum(t[tr] - gt[tr], 0)
            d = 0.0
            if fitted_wait:
                d = np.sum(wait * (e[tr] - eg[tr] - idle * wait) / e[tr] ** 2)
                d /= np.sum(wait**2 / e[tr] ** 2)
            tp_pred[te] = gt[te] + x[te] @ coef
            e_pred[te] = eg[te] + (idle + d) * (tp_pred[te] - gt[te])
        out.append(
            {
                "gpu": gpu,
                "time": np.mean(np.abs(tp_pred / t - 1)),
                "power": np.mean(np.abs((e_pred / tp_pred) / (e / t) - 1)),
                "energy": np.mean(np.abs(e_pred / e - 1)),
            }
        )
    return pd.DataFrame(out)


def main(data: Path) -> None:
    rows = serving_rows(data)
    for name, feats in VARIANTS.items():
        for fitted in (False, True):
            tab = held_out(rows, feats, fitted)
            cells = "  ".join(
                f"{r.gpu}: time {100 * r.time:.1f}% power {100 * r.power:.1f}% "
                f"energy {100 * r.energy:.1f}%"
                for r in tab.itertuples()
            )
            print(f"{name:26s} wait {'fitted' if fitted else 'idle  '}  {cells}")
    run = []
    for f in rows["file"]:
        r = json.loads((data / f).read_text())
        run.append(r["Token tput (tok/s)"] * r["Avg TPOT (s)"] / r["Avg BS (reqs)"])
    print(
        "running batch implied by tput x Avg TPOT / Avg BS: median "
        f"{np.median(run):.2f}, range {np.min(run):.2f} .. {np.max(run):.2f}"
    )


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/data"))
