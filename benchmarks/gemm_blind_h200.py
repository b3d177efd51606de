"""Blind check of the shipped GEMM model against our own H200 measurements (never fitted on).

    PYTHONPATH=. python benchmarks/gemm_blind_h200.py \
        benchmarks/measurements/h200_gemm_bf16_aic_2026-11-29.csv \
        benchmarks/measurements/h200_gemm_bf16_dense_2026-11-29.csv [--data ../shared/data]

The CSVs come from `experiments/device/h200_gemm_measure.py` run on a lent H200 (the machine file
beside them says which driver, torch and CUDA). Rows are in three sets: `off_lattice` (real model
weight shapes and token counts that are not on the aiconfigurator lattice), `withheld` ((n, k)
pairs of the lattice's own values that the training share leaves out) and `in_share` (pairs the
fit saw; they measure how far this harness and machine sit from the table the model was fitted
on). Prints MAPE per set and regime, raw and after one harness scale fitted on `in_share` rows
only, and energy where power was read. With --data, also the gap between our in_share rows and
aiconfigurator's own rows of the same (m, n, k).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

REGIMES = ("launch", "memory", "bal-mem", "bal-comp", "compute")


def evaluate(csv: Path, gpu: str, data: Path | None) -> dict:
    from dse.metrics import mape_pct
    from dse.predict.gemm_choice import Gemm

    gemm = Gemm.load(gpu)
    df = pd.read_csv(csv)
    df = df[df["set"] != "idle"].dropna(subset=["m"]).copy()
    protocol = str(df["protocol"].iloc[0]) if "protocol" in df else "dense"
    p = gemm.predict(df.m.to_numpy(float), df.n.to_numpy(float), df.k.to_numpy(float), "bfloat16")
    df["pred_ms"] = p["latency_s"] * 1e3
    df["regime"] = np.asarray(REGIMES)[p["regime"].astype(int)]
    df["ratio"] = df.latency_ms / df.pred_ms
    cal = df[df["set"] == "in_share"]
    # one multiplicative harness scale, fitted on shapes the model saw (median of log ratios)
    scale = float(np.exp(np.median(np.log(cal.ratio)))) if len(cal) else 1.0
    out: dict = {"csv": str(csv), "protocol": protocol, "artifact": gemm.artifact.artifact_id}
    out["harness_scale"] = round(scale, 4)
    rows = []
    for name, g in df.groupby("set"):
        rows.append(
            {
                "set": name,
                "rows": len(g),
                "latency_mape_pct": round(mape_pct(g.pred_ms.values, g.latency_ms.values), 2),
                "median_ape_pct": round(float(np.median(np.abs(1 / g.ratio - 1)) * 100), 2),
                "bias_pct": round(float(np.median(1 / g.ratio - 1) * 100), 2),
                "scaled_mape_pct": round(
                    mape_pct(g.pred_ms.values * scale, g.latency_ms.values), 2
                ),
            }
        )
    out["sets"] = rows
    out["regimes"] = [
        {
            "set": s,
            "regime": r,
            "rows": len(g),
            "latency_mape_pct": round(mape_pct(g.pred_ms.values, g.latency_ms.values), 2),
            "scaled_mape_pct": round(mape_pct(g.pred_ms.values * scale, g.latency_ms.values), 2),
        }
        for (s, r), g in df.groupby(["set", "regime"])
    ]
    pw = df["power_avg_w"].notna() if "power_avg_w" in df else df["power_w"].notna()
    if pw.any():
        col = "power_avg_w" if "power_avg_w" in df else "power_w"
        sel = df[pw]
        e_meas = sel.latency_ms.values * sel[col].values / 1e3
        e_pred = p["energy_j"][pw.values]
        out["energy"] = {
            "rows": int(pw.sum()),
            "power_column": col,
            "power_mape_pct": round(mape_pct(p["power_w"][pw.values], sel[col].values), 2),
            "energy_mape_pct": round(mape_pct(e_pred, e_meas), 2),
            "energy_mape_scaled_latency_pct": round(mape_pct(e_pred * scale, e_meas), 2),
            "measured_power_median_w": round(float(np.median(sel[col])), 1),
        }
        if "sm_mhz" in sel:
            out["energy"]["sm_mhz_median"] = float(np.median(sel["sm_mhz"].dropna()))
    if data is not None:
        files = sorted(Path(data).glob("aiconfigurator/**/h200_sxm/gemm/vllm/*/gemm_perf.parquet"))
        tab = pd.concat([pd.read_parquet(f) for f in files]) if files else None
        if tab is not None:
            tab = tab[tab.gemm_dtype == "bfloat16"]  # latency in ms per call (data README)
        if tab is not None and len(cal):
            j = cal.merge(tab[["m", "n", "k", "latency"]], on=["m", "n", "k"])
            out["harness_gap"] = {
                "rows": len(j),
                "ours_vs_aiconfigurator_mape_pct": round(
                    mape_pct(j.latency_ms.values, j.latency.values), 2
                ),
                "median_ratio": round(float(np.median(j.latency_ms / j.latency)), 4),
                "model_vs_aiconfigurator_mape_pct": round(
                    mape_pct(j.pred_ms.values, j.latency.values), 2
                ),
            }
    return out


def _print(res: dict) -> None:
    print(f"\n## {res['csv']} (protocol {res['protocol']}, artifact {res['artifact']})")
    print(f"harness scale fitted on in_share rows: {res['harness_scale']}")
    print("| set | rows | latency MAPE | median APE | median bias | MAPE after harness scale |")
    print("|---|---|---|---|---|---|")
    for r in res["sets"]:
        print(
            f"| {r['set']} | {r['rows']} | {r['latency_mape_pct']}% | {r['median_ape_pct']}% | "
            f"{r['bias_pct']:+}% | {r['scaled_mape_pct']}% |"
        )
    print("\n| set | regime | rows | latency MAPE | after scale |\n|---|---|---|---|---|")
    for r in res["regimes"]:
        print(
            f"| {r['set']} | {r['regime']} | {r['rows']} | {r['latency_mape_pct']}% | "
            f"{r['scaled_mape_pct']}% |"
        )
    if "energy" in res:
        print("\nenergy:", json.dumps(res["energy"]))
    if "harness_gap" in res:
        print("harness gap (in_share rows):", json.dumps(res["harness_gap"]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", nargs="+", type=Path)
    ap.add_argument("--gpu", default="h200_sxm")
    ap.add_argument("--data", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    results = [evaluate(c, args.gpu, args.data) for c in args.csv]
    for r in results:
        _print(r)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
