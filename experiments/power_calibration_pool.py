"""Issue 33: the Level-3 power calibration fitted on every source of per-GPU power, held out by
whole architecture; its terms side by side (docs/accuracy.md "Energy and power").

    PYTHONPATH=. python experiments/power_calibration_pool.py [--data ../shared/data] [--gpu h100_sxm]

Prints the rows per source (models, architectures) of the artifact's GPUs
(`power_calibration.power_gpus`) and, per source, the held-out per-GPU power MAPE of: the
operator power model alone, the calibration with its terms one by one (the shipped one has them
all), with each source weighted alike, fitted on every GPU's rows (priced by this artifact moved
to each GPU), and the shipped form plus the older engine term c log2(batch)/6 (c fitted on
argonne's vLLM / TensorRT-LLM pairs of the same model and batch, 1-2 models, on every row:
`dse fit` would not fit it on fewer than 5 models).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dse.fitting import power_calibration as PC  # noqa: E402
from dse.models.level3_power import Power3, fit_protocol  # noqa: E402
from dse.predict import load_artifact  # noqa: E402


def _scores(rows: pd.DataFrame, held_w: np.ndarray) -> str:
    meas = rows["power_w"].to_numpy(float)
    parts = []
    for src in sorted(rows["source"].unique()):
        sel = (rows["source"] == src).to_numpy()
        parts.append(f"{100 * np.mean(np.abs(held_w[sel] / meas[sel] - 1)):.2f}%")
    return " | ".join(parts)


def _with_engine_term(rows: pd.DataFrame) -> Power3:
    argonne = (rows["source"] == "argonne").to_numpy()
    keys = rows["gpu"] + "|" + rows["model"] + "|" + rows["batch"].astype(str)
    keys = np.where(argonne, keys, np.arange(len(rows)).astype(str))
    wait = np.where(rows["busy"].to_numpy(float) < 1.0, rows["gpu"].astype(str), "")
    identical = rows["identical"].to_numpy(bool)
    # c on every pair (Power3.fit leaves it at 0 below MIN_ENGINE_MODELS models; shown anyway)
    c = fit_protocol(
        rows["y"].to_numpy(float) - rows["u"].to_numpy(float),
        rows["batch"].to_numpy(float),
        identical,
        keys,
    )
    return Power3().fit(
        rows["u"].to_numpy(float),
        rows["batch"].to_numpy(float),
        rows["y"].to_numpy(float),
        rows["shape"].to_numpy(),
        identical=identical,
        pair_keys=keys,
        protocol=c,
        tp=rows["tp"].to_numpy(float),
        kv=rows["kv_share"].to_numpy(float),
        busy=rows["busy"].to_numpy(float),
        wait_key=wait,
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--data", default=str(REPO.parent / "shared" / "data"))
    p.add_argument("--gpu", default="h100_sxm", help="the artifact pricing every row")
    a = p.parse_args()
    art, _ = load_artifact(a.gpu)
    gpus = PC.power_gpus(art.gpu)
    rows = PC.calibration_rows(a.data, art, gpus=gpus)
    print(f"artifact {a.gpu} {art.artifact_id}; rows of {', '.join(gpus)} per source:")
    agg = rows.groupby(["source", "gpu"]).agg(
        rows=("y", "size"), models=("model", "nunique"), architectures=("shape", "nunique")
    )
    print(agg.to_string())
    print()
    names = sorted(rows["source"].unique())
    print(f"| variant | {' | '.join(names)} | coefficients (1, u, batch, tp, kv_share) |")
    print("|---" * (len(names) + 2) + "|")
    print(f"| operator power model alone | {_scores(rows, PC.uncalibrated_power_w(rows))} | |")
    for label, terms in (
        ("u, batch", {"tp": False, "kv": False}),
        ("u, batch, tp", {"kv": False}),
        ("u, batch, tp, kv_share (shipped)", {}),
        ("shipped, each source the same total weight", {"balanced": True}),
    ):
        pw = PC.calibration(rows, **terms)
        print(
            f"| {label} | {_scores(rows, PC.held_out_power_w(pw, rows))} "
            f"| {np.round(pw.coef_, 3)} |"
        )
    pw = _with_engine_term(rows)
    print(
        f"| shipped + engine term (c = {pw.protocol_:.3f}) "
        f"| {_scores(rows, PC.held_out_power_w(pw, rows))} | {np.round(pw.coef_, 3)} |"
    )
    # every GPU's rows priced by this one artifact (moved to each row's GPU), scored on its own
    pool = PC.calibration_rows(a.data, art)
    pw = PC.calibration(pool)
    own = pool["gpu"].isin(gpus).to_numpy()
    held = PC.held_out_power_w(pw, pool)[own]
    print(
        f"| shipped terms, rows of every GPU ({pool['gpu'].nunique()}) "
        f"| {_scores(pool[own].reset_index(drop=True), held)} | {np.round(pw.coef_, 3)} |"
    )


if __name__ == "__main__":
    main()
