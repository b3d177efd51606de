"""The MoE tables' held-out error under `dse fit`'s own CV (3 seeded group folds by layout,
CV fits on <= FIT_CV_MAX_ROWS rows, the shipped epochs and members), the fused-kernel model
(`dse.models.moe`, "old") against the kernel-sum one (`dse.models.moe_physics`, "new") on the
same rows and folds: the numbers behind docs/accuracy.md's MoE paragraph (session 13 wiring).

    PYTHONPATH=. python experiments/moe_fit_cv_compare.py --jobs 2 \
        --tables h100_sxm/trtllm/bfloat16 h100_sxm/trtllm/fp8 h100_sxm/trtllm/fp8_block

Rows: `dse.data.load` after `dse.fitting.plausible.screen`, as `dse fit` reads them. Every row
is scored held out, the anomalous parallel splits (`dse.models.moe_splits`) included; the
"regular" column leaves those rows out of the score (the new model also leaves them out of
its fits).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dse.fitting import bands
from dse.fitting._hybrid_tables import hybrid_band_table
from dse.fitting.moe import MOE_SHAPE_GROUP
from dse.models import moe, moe_physics
from dse.models.moe_splits import split_anomalies

TABLES = ("h100_sxm/trtllm/bfloat16", "h100_sxm/trtllm/fp8", "h100_sxm/trtllm/fp8_block")
CLASSES = {"old": moe.MoEModel, "new": moe_physics.MoEModel}


def _rows(data: str, table: str) -> Any:
    from dse.data import load
    from dse.fitting import plausible

    gpu, engine, dtype = table.split("/")
    t, _ = plausible.screen("moe", load(data, ["moe"])["moe"])
    sel = (t["gpu"] == gpu) & (t["engine"] == engine) & (t["dtype"] == dtype)
    return t[sel].reset_index(drop=True)


def _mape(p: np.ndarray, y: np.ndarray, keep: np.ndarray) -> float:
    ok = keep & np.isfinite(p)
    return round(float(np.mean(np.abs(p[ok] / y[ok] - 1.0)) * 100), 2)


def run_one(data: str, table: str, which: str, seed: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    rows = _rows(data, table)
    gpu, engine, dtype = table.split("/")
    cls = CLASSES[which]
    bt = hybrid_band_table(
        f"moe.{engine}.{dtype}",
        rows,
        lambda **kw: cls(gpu, engine, dtype, seed=seed, **kw),
        cls(gpu, engine, dtype)._table_inputs,
        (MOE_SHAPE_GROUP, "layer shape"),
        seed,
    )
    oof = bands.held_out(bt)
    y = rows["latency_s"].to_numpy(float)
    every = np.ones(len(y), dtype=bool)
    regular = ~split_anomalies(rows)
    return {
        "table": table,
        "model": which,
        "rows": len(y),
        "layouts": len(np.unique(bt.groups)),
        "scheme": bt.scheme,
        "latency_mape_pct": _mape(oof["latency_s"], y, every),
        "latency_mape_regular_pct": _mape(oof["latency_s"], y, regular),
        "physics_mape_pct": _mape(oof["base_s"], y, every),
        "regular_rows": int(regular.sum()),
        "seconds": round(time.perf_counter() - t0),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    ap.add_argument("--tables", nargs="+", default=list(TABLES))
    ap.add_argument("--models", nargs="+", default=["old", "new"], choices=sorted(CLASSES))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args()
    tasks = [(args.data, t, m, args.seed) for t in args.tables for m in args.models]
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(pool.map(run_one, *zip(*tasks, strict=True)))
    for r in results:
        print(json.dumps(r))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
