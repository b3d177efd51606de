"""What bounds the B200 TensorRT-LLM MoE models (docs/accuracy.md, "B200 MoE <= 10%"; command BT4).

(1) H100's slow parallel splits: per TRT-LLM 1.3.0rc20 MoE table (balanced routing), the share of
(moe_ep or moe_tp) doubling pairs whose split with twice the parallelism runs > 20% / > 50%
slower, and of series whose median ratio exceeds 1.3 (`dse.models.moe_splits.RATIO`).
(2) nvfp4's two gated kernels: the table times CUTLASS and min-latency on the same
configurations, which no model input tells apart; the floor is the MAPE over the table of the
best single time per configuration (the faster one: MAPE's weighted median).

Usage: python experiments/trtllm_moe_splits.py [--data ../shared/data]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

TABLE = (
    "aiconfigurator/aic-core/src/aiconfigurator_core/systems/data/{}/moe/trtllm/1.3.0rc20/"
    "moe_perf.parquet"
)
KEY = ["moe_dtype", "kernel_source", "hidden_size", "inter_size", "topk", "num_experts"]
KEY += ["moe_tp_size", "moe_ep_size", "num_tokens"]
CONFIG = [c for c in KEY if c not in ("moe_dtype", "kernel_source")] + ["distribution"]


def split_pairs(d: pd.DataFrame, gpu: str) -> None:
    b = d[d["distribution"] == "balanced"].groupby(KEY, as_index=False)["latency"].median()
    for par in ("moe_ep_size", "moe_tp_size"):
        half = b.rename(columns={"latency": "half"})
        half[par] = half[par] * 2  # the split with half the parallelism, keyed as its double
        j = b.merge(half, on=KEY)
        q = j["latency"] / j["half"]
        for dtype, g in q.groupby(j["moe_dtype"]):
            series = g.groupby([j.loc[g.index, c] for c in KEY[:-1]]).median()
            print(
                f"{gpu} {par:12s} {dtype:17s} pairs {len(g):6d}  > 20% slower "
                f"{100 * (g > 1.2).mean():4.1f}%  > 1.5x {100 * (g > 1.5).mean():4.1f}%  "
                f"series median > 1.3: {100 * (series > 1.3).mean():4.1f}% of {len(series)}"
            )


def nvfp4_kernel_floor(d: pd.DataFrame) -> None:
    n = d[d["moe_dtype"] == "nvfp4"]
    by = {
        k: n[n["kernel_source"] == k].groupby(CONFIG)["latency"].median()
        for k in ("moe_torch_flow_cutlass", "moe_torch_flow_min_latency")
    }
    j = pd.concat(by, axis=1).dropna()
    q = j.iloc[:, 1] / j.iloc[:, 0]
    lo, hi = j.min(axis=1), j.max(axis=1)
    floor = 100 * float((1 - lo / hi).sum()) / len(n)
    print(
        f"b200_sxm nvfp4: {len(j)} configurations timed by both gated kernels ({len(n)} rows); "
        f"min-latency / CUTLASS median {q.median():.2f} (range {q.min():.2f}-{q.max():.2f}); "
        f"one time per configuration reads >= {floor:.1f}% over the table"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path("../shared/data"))
    a = ap.parse_args()
    tables = {g: pd.read_parquet(a.data / TABLE.format(g)) for g in ("h100_sxm", "b200_sxm")}
    for gpu, d in tables.items():
        split_pairs(d, gpu)
    nvfp4_kernel_floor(tables["b200_sxm"])


if __name__ == "__main__":
    main()
