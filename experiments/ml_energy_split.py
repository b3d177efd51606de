"""Split the predictor's ml-energy serving energy error into time and power (docs/accuracy.md,
"Serving energy is right for the wrong reasons").

    PYTHONPATH=. python experiments/ml_energy_split.py [DATA]

Each serving run is read as a static batch of its average batch size (as
benchmarks/energy_accuracy.py does); prints per GPU the median ratios predicted / measured of
energy, request time and per-token latency (against the runs' `Avg TPOT`), the median power
per GPU, and the share of rows flagged out of range.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from dse.estimators import measured as M
from dse.predict import predict
from dse.spec.arch import Architecture


def main(data: Path) -> None:
    df, _ = M.ml_energy(M.read(data))
    for gpu, rows in df.groupby("gpu"):
        cols = M.architecture_columns(rows["model"])
        cfg = pd.DataFrame({k: v for k, v in cols.items() if k in Architecture.field_names()})
        for k in ("prompt_tokens", "output_tokens", "tensor_parallel"):
            cfg[k] = np.rint(rows[k].to_numpy()).astype(int)
        cfg["batch_size"] = np.maximum(np.rint(rows["batch_size"].to_numpy()), 1).astype(int)
        cfg["gpu"], cfg["engine"] = gpu, "vllm"
        p = predict(cfg)
        scale = rows["batch_size"].to_numpy() / cfg["batch_size"].to_numpy()
        e = np.asarray(p["energy_j"]) * scale
        t = np.asarray(p["latency_s"])
        tm, em = rows["time_s"].to_numpy(), rows["measured_j"].to_numpy()
        tp = rows["tensor_parallel"].to_numpy()
        tpot = []
        for f in rows["file"]:
            with open(data / f) as fh:
                tpot.append(json.load(fh)["Avg TPOT (s)"])
        print(f"{gpu}: {len(rows)} rows")
        print(
            f"  energy pred / meas median {np.median(e / em):.2f}, MAPE {100 * np.mean(abs(e / em - 1)):.1f}%"
        )
        print(f"  request time pred / meas median {np.median(t / tm):.2f}")
        print(f"  TPOT pred / Avg TPOT median {np.median(p['tpot_s'] / np.array(tpot)):.2f}")
        print(
            f"  power per GPU median: pred {np.median(e / scale / t / tp):.0f} W, "
            f"measured {np.median(em / tm / tp):.0f} W"
        )
        print(f"  out of range: {np.mean(p['out_of_range']):.0%}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/data"))
