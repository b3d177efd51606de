"""Which energy number to use for what: the tokens-to-Wh presets (`dse energy`) against the
predictor (`dse predict`) on serving runs neither was fitted on, energy per output token.

    PYTHONPATH=. python benchmarks/energy_presets.py [--data ../shared/data]

Rows: ml-energy v3 (current vLLM 0.11.1) on H100 and B200 (`dse.fitting.serving.read_v3`: a
run read as a static batch of its average batch size, prompt lengths per task assumed as
shipped). The tokens-to-Wh presets were calibrated on argonne and ml-energy v2 only, so every
row is held out for them; `dse predict`'s continuous-batching terms for vLLM 0.11.1 are fitted
on v3's rows, so they are scored held out by whole model (the model's rows out of the fit).

Columns, energy per output token (the whole request's energy / output tokens; the MAPE of the
batch's energy is the same number):
- paper preset (Vartziotis et al. 2026, as published);
- corrected preset over its own roofline times (`dse energy`'s default);
- corrected preset over `dse predict`'s static TTFT and decode time (`dse energy --times
  predicted`);
- corrected preset over the *measured* time (a number no prediction has: the preset's bound);
- `dse predict`, static batching (`batching: static`), and continuous batching with vLLM
  0.11.1's terms fitted on the other models (what `batching: continuous` prices; a GPU with no
  terms of its own, B200, is priced with H100's, as `dse predict` does).
Prints a Markdown table; nothing is written.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dse.estimators import tokens2wh as T  # noqa: E402
from dse.fitting import serving as S  # noqa: E402
from dse.predict import predict  # noqa: E402
from dse.predict.serving import constants_for  # noqa: E402
from dse.spec.arch import Architecture  # noqa: E402

COMMAND = "PYTHONPATH=. python benchmarks/energy_presets.py"
V3 = "0.11.1"


def _mape(ratio: np.ndarray) -> float:
    return float(np.mean(np.abs(ratio - 1.0)))


def _workload(rows: pd.DataFrame) -> dict[str, np.ndarray]:
    return {
        "batch_size": np.maximum(np.rint(rows["batch_size"].to_numpy(float)), 1.0),
        "prompt_tokens": np.rint(rows["prompt_tokens"].to_numpy(float)),
        "output_tokens": np.rint(rows["output_tokens"].to_numpy(float)),
        "tensor_parallel": rows["tensor_parallel"].to_numpy(float),
    }


def score_gpu(rows: pd.DataFrame, gpu: str, served: pd.DataFrame) -> dict[str, float]:
    """Energy-per-output-token MAPE of each column on one GPU's v3 rows (`read_v3`'s), with
    `served` (`serving_rows_v3`'s, every GPU) for the continuous-batching column."""
    rows = rows.reset_index(drop=True)
    wl = _workload(rows)
    # Measured energy of the rounded batch: the run's J per request times the whole batch.
    per_req = rows["measured_j"].to_numpy() / rows["batch_size"].to_numpy(float)
    meas_j = per_req * wl["batch_size"]
    meas_t = rows["time_s"].to_numpy() * wl["batch_size"] / rows["batch_size"].to_numpy(float)
    cfg = []
    for model, dtype in zip(rows["model"], rows["weight_dtype"], strict=True):
        a = replace(S.v3_architecture(model), weight_dtype=str(dtype)).resolved()
        cfg.append(a.to_dict())
    cfg_df = pd.DataFrame(cfg)
    for k, v in wl.items():
        cfg_df[k] = v.astype(int)
    cfg_df["gpu"], cfg_df["engine"] = gpu, "vllm"
    p = predict(cfg_df, texts=False)
    ttft, lat = np.asarray(p["ttft_s"], float), np.asarray(p["latency_s"], float)
    out: dict[str, float] = {"rows": float(len(rows)), "models": float(rows["model"].nunique())}
    ratios: dict[str, np.ndarray] = {}
    archs = [Architecture.from_mapping(a_row) for a_row in cfg]  # once, not per preset
    ratios["paper"] = np.empty(len(rows))
    for name, times in (
        ("corrected, own roofline times", None),
        ("corrected, dse predict's times", "predicted"),
        ("corrected, measured time", "measured"),
    ):
        ratios[name] = np.empty(len(rows))
        for i, a in enumerate(archs):
            w = {k: v[i] for k, v in wl.items()}
            if times is None:
                t = None
            elif times == "predicted":
                t = {"prefill": ttft[i], "decode": max(lat[i] - ttft[i], 0.0)}
            else:
                t = meas_t[i]
            e = T.estimate(a, w, gpu, "corrected", time_s=t)
            ratios[name][i] = float(e["energy_j"]) / meas_j[i]
            if times is None:
                ratios["paper"][i] = float(T.estimate(a, w, gpu, "paper")["energy_j"]) / meas_j[i]
    ratios["dse predict, batching: static"] = np.asarray(p["energy_j"], float) / meas_j
    # A GPU without its own fitted terms is priced with the default GPU's, as `batching:
    # continuous` prices it (the model's rows on that GPU held out too).
    lender = constants_for(gpu, V3).gpu
    pool = served[served["gpu"].isin({gpu, lender})].reset_index(drop=True)
    held = S.leave_one_model_out(
        pool, train_gpu=None if lender == gpu else lender, terms=S.VERSIONS[V3].terms
    )
    held = held[held["gpu"] == gpu]
    ratios[f"dse predict, batching: continuous (vLLM {V3}, model held out)"] = (
        held["pred_energy_j"].to_numpy() / held["energy_j"].to_numpy()
    )
    for k, r in ratios.items():
        out[k] = _mape(r)
        out[k + " (median ratio)"] = float(np.median(r))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    args = ap.parse_args(argv)
    t0 = time.time()
    rows = S.read_v3(args.data)
    served = S.serving_rows_v3(args.data)
    table = {gpu: score_gpu(r, str(gpu), served) for gpu, r in rows.groupby("gpu", sort=True)}
    names = [k for k in next(iter(table.values())) if k not in ("rows", "models")]
    names = [k for k in names if not k.endswith("(median ratio)")]
    gpus = list(table)
    print(f"Command: `{COMMAND}` ({time.time() - t0:.0f} s)\n")
    print(
        "| energy per output token, ml-energy v3 | "
        + " | ".join(
            f"{g} ({int(table[g]['rows'])} rows, {int(table[g]['models'])} models)" for g in gpus
        )
        + " |"
    )
    print("|---|" + "---|" * len(gpus))
    for k in names:
        cells = [
            f"{100 * table[g][k]:.1f}% (median x{table[g][k + ' (median ratio)']:.2f})"
            for g in gpus
        ]
        print(f"| {k} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
