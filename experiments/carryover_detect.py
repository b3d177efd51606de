"""Carry-over detection on the H200 aiconfigurator tables with power (issue 33 item 4): per table,
the lag correlation of own-work residuals with the previous row (file order), rows flagged, and
the scatter of power left (MAPE of the own-work fit: no two rows of a table share every
shape column, so the own-work fit stands in for rows of equal work) before / after.

    PYTHONPATH=. python experiments/carryover_detect.py [--data ../shared/data]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from dse.fitting.carryover import detect_carryover, own_work_log_power

AIC = "aiconfigurator/aic-core/src/aiconfigurator_core/systems/data/h200_sxm"
TABLES = {
    "gemm": ("gemm/vllm/0.22.0/gemm_perf.parquet", ["gemm_dtype", "m", "n", "k"]),
    "context_attention": (
        "attention/vllm/0.22.0/context_attention_perf.parquet",
        [
            "batch_size",
            "isl",
            "num_heads",
            "num_key_value_heads",
            "head_dim",
            "kv_cache_dtype",
            "window_size",
        ],
    ),
    "generation_attention": (
        "attention/vllm/0.22.0/generation_attention_perf.parquet",
        [
            "batch_size",
            "isl",
            "step",
            "num_heads",
            "num_key_value_heads",
            "head_dim",
            "kv_cache_dtype",
            "window_size",
        ],
    ),
    "moe": (
        "moe/vllm/0.22.0/moe_perf.parquet",
        [
            "moe_dtype",
            "num_tokens",
            "hidden_size",
            "inter_size",
            "topk",
            "num_experts",
            "moe_tp_size",
            "moe_ep_size",
            "distribution",
        ],
    ),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="../shared/data")
    a = ap.parse_args()
    for name, (rel, keys) in TABLES.items():
        d = pd.read_parquet(Path(a.data) / AIC / rel)
        d = d[np.isfinite(d["power"]) & (d["power"] > 0)].reset_index(drop=True)
        feats = d[keys].assign(log_lat=np.log(d["latency"]))
        own = own_work_log_power(feats, d["power"].to_numpy())
        lp = np.log(d["power"].to_numpy())
        co = detect_carryover(lp, own)
        r = lp - own
        keep = ~co.flags
        print(
            f"{name}: rows {len(d)}, lag corr {co.lag_corr:.3f}, slope {co.lag_slope:.3f}, "
            f"flagged {co.flags.sum()} ({100 * co.flags.mean():.1f}%); own-work power MAPE "
            f"{100 * np.mean(np.abs(np.expm1(-r))):.2f}% -> "
            f"{100 * np.mean(np.abs(np.expm1(-r[keep]))):.2f}% (the noise floor left); "
            f"residual autocorrelation {np.corrcoef(r[1:], r[:-1])[0, 1]:.3f}"
        )


if __name__ == "__main__":
    main()
