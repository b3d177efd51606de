"""MLA kernel latency held out by head count (issue 35, "MLA priced by measured kernels"; feeds
docs/accuracy.md, "MLA kernels"): for every measured MLA kernel table (aiconfigurator
`context_mla_perf` / `generation_mla_perf`: H100 and B200, TensorRT-LLM and SGLang), one fold
per head count (leave one `num_heads` out: every row of that count is kept out of the fit,
7 folds of 2-128 heads), the `dse.models.mla` model fitted on the other counts and scored on
the held-out one. Reports the held-out MAPE (all rows, and per held-out count), the fitted
physics alone (the model's roofline base), and the plain roofline the predictor used before
(`roofline_s(FLOPs, bytes, bf16 peak, HBM bandwidth) + LAUNCH_S`) on the same rows.

    PYTHONPATH=. python experiments/mla_heads_cv.py                      # every table, ~10 min
    PYTHONPATH=. python experiments/mla_heads_cv.py --tables h100_sxm/trtllm --out results/mla.json

One core; every row (the tables hold 1,540-5,068 rows; no subsampling). H100 SGLang tables
hold every configuration twice (two collection runs, median 1.0% apart): both are kept.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dse.data import load
from dse.fitting import plausible
from dse.metrics import mape_pct
from dse.models.mla import ContextMLAModel, GenerationMLAModel, mla_inputs, mla_work
from dse.roofline import LAUNCH_S, roofline_s
from dse.spec.hardware import get_gpu

CLASSES = {"context_mla": ContextMLAModel, "generation_mla": GenerationMLAModel}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument(
        "--tables", nargs="*", default=None, help="gpu/engine filters, e.g. h100_sxm/trtllm"
    )
    ap.add_argument("--max-iter", type=int, default=None)
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args()
    tables = load(args.data, list(CLASSES))
    results = []
    for kind, cls in CLASSES.items():
        rows_all, report = plausible.screen(kind, tables.get(kind))
        if report["rows"]:
            print(f"{kind}: {report['rows']} implausible rows left out")
        for (gpu, engine), rows in rows_all.groupby(["gpu", "engine"], sort=True):
            if args.tables and f"{gpu}/{engine}" not in args.tables:
                continue
            rows = rows.reset_index(drop=True)
            t0 = time.perf_counter()
            y = rows["latency_s"].to_numpy(float)
            pred, base = np.full(len(rows), np.nan), np.full(len(rows), np.nan)
            heads = rows["num_heads"].to_numpy()
            kw = {} if args.max_iter is None else {"max_iter": args.max_iter}
            for h in np.unique(heads):
                te = heads == h
                model = cls(gpu=gpu, engine=engine, **kw).fit(rows[~te])
                p = model.predict(**mla_inputs(rows[te]))
                pred[te], base[te] = p["latency_s"], p["base_s"]
            v = cls()._inputs(mla_inputs(rows))
            flops, nbytes = mla_work(cls.phase_default, v)
            g = get_gpu(gpu)
            roof = roofline_s(flops, nbytes, g.peak_bf16_flops_per_s, g.hbm_bw_bytes_per_s)
            roof = roof + LAUNCH_S
            per_h = {
                int(h): round(mape_pct(pred[heads == h], y[heads == h]), 2)
                for h in np.unique(heads)
            }
            res = {
                "gpu": gpu,
                "engine": engine,
                "kind": kind,
                "rows": len(rows),
                "heads_held_out_mape_pct": round(mape_pct(pred, y), 2),
                "median_ape_pct": round(float(np.median(100 * np.abs(pred / y - 1))), 2),
                "fitted_physics_mape_pct": round(mape_pct(base, y), 2),
                "roofline_mape_pct": round(mape_pct(roof, y), 2),
                "per_held_out_heads": per_h,
                "seconds": round(time.perf_counter() - t0, 1),
            }
            results.append(res)
            print(
                f"{gpu:9s} {engine:7s} {kind:15s} rows {len(rows):5d}  held out {res['heads_held_out_mape_pct']:5.2f}% "
                f"(median {res['median_ape_pct']:.2f}%)  physics {res['fitted_physics_mape_pct']:5.2f}%  "
                f"roofline {res['roofline_mape_pct']:6.2f}%  by heads {per_h}  ({res['seconds']} s)",
                flush=True,
            )
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
