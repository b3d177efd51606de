"""Fused-MoE prediction speed, the issue-19 candidate (dse.models.moe_physics) against the shipped model, side by side in
one run on one core: both fitted briefly on the same H100 vLLM bf16 rows (speed does not depend
on fit quality), then `predict` on the same 10^6 random rows (default routing: uniform for the
new model, balanced for the old), best of --repeat, interleaved. Feeds docs/dev/accuracy-journal.md
("MoE from physics first").

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 PYTHONPATH=. python experiments/moe_speed.py
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dse.data import load  # noqa: E402
from dse.models import moe as old  # noqa: E402
from dse.models import moe_physics as new  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    t = load(args.data, ["moe"])["moe"]
    rows = t[(t["gpu"] == "h100_sxm") & (t["engine"] == "vllm") & (t["dtype"] == "bfloat16")]
    models = {
        "old": old.MoEModel("h100_sxm", "vllm", "bfloat16", max_rows=3000, max_iter=5).fit(
            rows.drop(columns=["gated"])
        ),
        "new": new.MoEModel("h100_sxm", "vllm", "bfloat16", max_rows=3000, max_iter=5).fit(rows),
    }
    rng = np.random.default_rng(0)
    n = args.n
    kw = {
        "num_tokens": rng.integers(1, 16384, n).astype(float),
        "hidden_size": np.full(n, 4096.0),
        "inter_size": np.full(n, 14336.0),
        "topk": np.full(n, 2.0),
        "num_experts": np.full(n, 8.0),
        "moe_tp_size": rng.choice([1.0, 2.0, 4.0], n),
    }
    best = dict.fromkeys(models, np.inf)
    for _ in range(args.repeat):
        for name, m in models.items():
            t0 = time.perf_counter()
            m.predict(**kw)
            best[name] = min(best[name], time.perf_counter() - t0)
    for name, s in best.items():
        print(f"{name}: {n / s:,.0f} predictions/s (best of {args.repeat}, {n:,} rows)")
    print(f"new / old: {best['old'] / best['new']:.2f}x")


if __name__ == "__main__":
    main()
