"""Issue 33: the Level-3 power calibration fitted on every source of per-GPU power, held out by
whole architecture; variants of its terms side by side (docs/accuracy.md "Energy and power").

    PYTHONPATH=. python experiments/power_calibration_pool.py --data ../shared/data [--gpu h100_sxm]

Prints, per source, the held-out per-GPU power MAPE of: the operator power model alone, the
shipped form (u, batch), + tensor parallelism, + KV-read share, and the old engine term (c fitted
on argonne's vLLM / TensorRT-LLM pairs) on top.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dse.fitting import power_calibration as PC  # noqa: E402
from dse.fitting.level3 import pair_keys  # noqa: E402
from dse.models.level3_power import Power3  # noqa: E402
from dse.predict import load_artifact  # noqa: E402


def _score(rows, held):  # noqa: ANN001, ANN202
    meas = rows["power_w"].to_numpy(float)
    out = {}
    for src in sorted(rows["source"].unique()):
        sel = (rows["source"] == src).to_numpy()
        out[src] = float(np.mean(np.abs(held[sel] / meas[sel] - 1)) * 100)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--data", default=str(REPO.parent / "shared" / "data"))
    p.add_argument("--gpu", default="h100_sxm")
    a = p.parse_args()
    art, _ = load_artifact(a.gpu)
    rows = PC.calibration_rows(a.data, art)
    rows.to_csv(f"/tmp/pool_{a.gpu}.csv", index=False)
    print(rows.groupby("source").agg(rows=("y", "size"), models=("model", "nunique"),
                                     shapes=("shape", "nunique")))
    idle, span = PC._spans(rows)
    wait = np.where(rows["busy"] < 1, rows["gpu"], "")
    base = dict(busy=rows["busy"].to_numpy(float), wait_key=wait)
    variants = {
        "u, batch (shipped form)": dict(),
        "+ tp": dict(tp=rows["tp"].to_numpy(float)),
        "+ tp + kv_share": dict(tp=rows["tp"].to_numpy(float), kv=rows["kv_share"].to_numpy(float)),
        "+ kv_share": dict(kv=rows["kv_share"].to_numpy(float)),
    }
    print("uncalibrated:", {k: round(v, 2) for k, v in _score(rows, PC.uncalibrated_power_w(rows)).items()})
    for name, kw in variants.items():
        for proto in (0.0, None):
            pw = Power3().fit(
                rows["u"].to_numpy(float), rows["batch"].to_numpy(float), rows["y"].to_numpy(float),
                rows["shape"].to_numpy(), identical=rows["identical"].to_numpy(bool),
                pair_keys=np.where(rows["source"] == "argonne", rows["gpu"] + rows["model"] + rows["batch"].astype(str), np.arange(len(rows)).astype(str)),
                protocol=proto, **base, **kw,
            )
            held = idle + np.clip(pw.held_out_, 0, 1) * span
            tag = name + (" + engine term c" if proto is None else "")
            print(f"{tag:40s}", {k: round(v, 2) for k, v in _score(rows, held).items()},
                  "coef", np.round(pw.coef_, 3), "c", round(pw.protocol_, 3), "wait", {k: round(v, 3) for k, v in pw.wait_.items()})


if __name__ == "__main__":
    main()
