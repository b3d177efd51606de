"""What `dse validate` scores against what `dse predict` prices, on the measured kernel tables
(issue 33, "One path for every number").

    PYTHONPATH=. python experiments/one_path_power.py [--data ../shared/data] [--gpu h200_sxm]

For every H200 GEMM row with measured power (aiconfigurator, vLLM bf16 and fp8_block): the power
and latency `dse validate` scores (`dse.fitting.gemm.predict_gemm_rows`, energy / latency) and
the ones the pricer uses (`dse.predict.adapters.price_gemm` on the row as a GEMM operator), each
against the measured power. Prints power MAPE of both paths, the largest gap between them, and
one short kernel's utilisation (the power fraction) as each path sees it. Feeds docs/accuracy.md
"Energy and power" (the note on the pricer's power path).
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd


def _mape(pred: np.ndarray, true: np.ndarray) -> float:
    return float(100.0 * np.mean(np.abs(pred / true - 1.0)))


def gemm_op(sub: pd.DataFrame, dtype: str):
    """The rows as one vectorised GEMM operator of `dse.predict.ops` (y = x @ W^T)."""
    from dse.predict.ops import _gemm
    from dse.spec.arch import dtype_bytes

    w_bytes = dtype_bytes("fp8" if dtype.startswith("fp8") else "bfloat16")
    m, n, k = (sub[c].to_numpy(float) for c in ("m", "n", "k"))
    return _gemm("ffn/up", "ffn", np.ones(len(sub)), m, n, k, w_bytes, dtype)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--gpu", default="h200_sxm")
    args = ap.parse_args()
    from dse.data import load
    from dse.fitting.gemm import predict_gemm_rows
    from dse.models.artifact import Artifact
    from dse.predict.adapters import price_gemm
    from dse.spec.hardware import get_gpu

    art, gpu = Artifact.load(args.gpu), get_gpu(args.gpu)
    rows = load(args.data, ["gemm"])["gemm"]
    rows = rows[(rows["gpu"] == args.gpu) & np.isfinite(rows["power_w"])]
    print(f"artifact {art.artifact_id}; {len(rows)} {args.gpu} GEMM rows with measured power")
    for (engine, dtype), sub in rows.groupby(["engine", "dtype"], sort=True):
        sub = sub.reset_index(drop=True)
        val = predict_gemm_rows(art, "gemm", sub)
        p_val = (val["energy_pred_j"] / val["latency_pred_s"]).to_numpy(float)
        price = price_gemm(art, gemm_op(sub, str(dtype)), gpu, None)
        p_pri, t_pri = price.power_w, price.latency_s
        meas = sub["power_w"].to_numpy(float)
        t_val = val["latency_pred_s"].to_numpy(float)
        gap_p = np.abs(p_pri / p_val - 1.0)
        gap_t = np.abs(t_pri / t_val - 1.0)
        span = gpu.board_power_w - gpu.idle_power_w
        short = np.argmin(np.abs(sub["latency_s"].to_numpy(float) - 20e-6))
        print(
            f"{engine} {dtype}: {len(sub)} rows | power MAPE validate {_mape(p_val, meas):.2f}% "
            f"predict {_mape(p_pri, meas):.2f}% | max gap power {100 * gap_p.max():.2f}% "
            f"latency {100 * gap_t.max():.2g}% | a {1e6 * sub['latency_s'][short]:.0f} us kernel "
            f"(m,n,k {sub['m'][short]:.0f},{sub['n'][short]:.0f},{sub['k'][short]:.0f}): power "
            f"fraction measured {(meas[short] - gpu.idle_power_w) / span:.2f}, validate "
            f"{(p_val[short] - gpu.idle_power_w) / span:.2f}, predict "
            f"{(p_pri[short] - gpu.idle_power_w) / span:.2f}"
        )


if __name__ == "__main__":
    main()
