"""Serving energy per output token of continuous batching (`workload.batching: continuous`),
whole models held out (docs/accuracy.md "Serving energy is right for the wrong reasons").

    PYTHONPATH=. python benchmarks/serving_accuracy.py [--data ../shared/data] [--write-constants]

On the ml-energy v2 runs (vLLM 0.4.2, H100 and A100 40GB): every row priced by
`dse.models.serving` with host constants fitted on the other models of its GPU
(leave-one-model-out, `dse.fitting.serving`), and A100 also with constants fitted on H100's
rows alone (the transfer check). Energy per output token has the relative error of energy per
request (the same output tokens divide both). Prints energy, time and power MAPE per GPU and
the static prediction's on the same rows. `--write-constants` also writes
`dse/predict/serving_constants.json`: constants fitted on every row of each GPU, with the
rows' files and hash, the fitted ranges, the held-out scores printed here and the band (the
5-95% quantiles of the held-out log residuals; its coverage measured nested).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from _provenance import short_commit  # noqa: E402  (benchmarks/, the script's folder)

from dse.fitting import serving as S  # noqa: E402
from dse.predict.serving import CONSTANTS_FILE, FORMAT_VERSION  # noqa: E402

COMMAND = "PYTHONPATH=. python benchmarks/serving_accuracy.py"
TRAIN_GPU = "h100_sxm"  # the transfer check's, and the constants of a GPU not measured


def measure(data: Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(rows, held-out scores per GPU with the band's nested coverage, A100 scores with H100's
    constants, the held-out predictions)."""
    rows = S.serving_rows(data)
    pred = S.leave_one_model_out(rows)
    own = S.scores(pred).merge(S.nested_band_coverage(rows).drop(columns="rows"), on="gpu")
    transfer = S.scores(S.leave_one_model_out(rows, train_gpu=TRAIN_GPU))
    transfer = transfer[transfer["gpu"] != TRAIN_GPU].reset_index(drop=True)
    return rows, own, transfer, pred


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def render(own: pd.DataFrame, transfer: pd.DataFrame, seconds: float) -> str:
    lines = [
        f"Command: `{COMMAND}` ({seconds:.0f} s). Leave-one-model-out over the ml-energy v2 "
        "models of each GPU (A100 also with H100's constants: 'transfer').",
        "",
        "| GPU | constants from | rows | models | energy MAPE | time MAPE | power MAPE | "
        "energy median ratio | worst row | static energy MAPE | static time ratio |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, tab in (("own GPU, model held out", own), (f"{TRAIN_GPU} (transfer)", transfer)):
        for _, r in tab.iterrows():
            lines.append(
                f"| {r['gpu']} | {label} | {r['rows']} | {r['models']} | "
                f"{_pct(r['energy_mape'])} | {_pct(r['time_mape'])} | {_pct(r['power_mape'])} | "
                f"{r['energy_median_ratio']:.2f} | {_pct(r['energy_max_ape'])} | "
                f"{_pct(r['static_energy_mape'])} | {r['static_time_ratio']:.2f} |"
            )
    lines += [
        "",
        "The band (the static prediction's, widened to the 5-95% quantiles of the host model's "
        "held-out log residuals): share of each GPU's rows inside it, nested (each model's band "
        "calibrated on the other models' residuals under fits that saw neither):",
        "",
        "| GPU | latency band coverage | energy band coverage |",
        "|---|---|---|",
    ]
    for _, r in own.iterrows():
        lines.append(
            f"| {r['gpu']} | {_pct(r['latency_coverage'])} | {_pct(r['energy_coverage'])} |"
        )
    return "\n".join(lines)


def constants_json(
    rows: pd.DataFrame, own: pd.DataFrame, pred: pd.DataFrame, data: Path
) -> dict[str, Any]:
    """The shipped JSON: every GPU's constants fitted on all its rows, with provenance."""
    gpus: dict[str, Any] = {}
    for gpu, g in rows.groupby("gpu", sort=True):
        entry = S.constants_entry(g, data)
        sc = own[own["gpu"] == gpu].iloc[0]
        entry["held_out"] = {
            "protocol": "leave-one-model-out",
            **{k: round(float(sc[k]), 4) for k in ("energy_mape", "time_mape", "power_mape")},
            "band_coverage_nested": {
                k: round(float(sc[f"{k}_coverage"]), 4) for k in ("latency", "energy")
            },
        }
        entry["band_log"] = {
            k: [round(x, 5) for x in v]
            for k, v in S.residual_band(pred[pred["gpu"] == gpu]).items()
        }
        gpus[str(gpu)] = entry
    return {
        "format_version": FORMAT_VERSION,
        "engine": S.ENGINE,
        "engine_version": S.ENGINE_VERSION,
        "model": "host per decode step = step_s + per_sequence_s * batch + per_extra_gpu_s * "
        "(tp - 1); waiting GPU draws idle_power_w + wait_above_idle_w (dse.models.serving)",
        "source": "ml-energy-v2 (ml-energy/leaderboard-v2, commit c3af7f3), "
        "data/llm_text_generation/{chat,code}, pipeline parallel 1; batch = Avg BS (reqs) "
        "rounded; prompt tokens assumed 256 (not recorded)",
        "fitted": {
            "command": COMMAND + " --write-constants",
            "date": time.strftime("%Y-%m-%d"),
            "commit": short_commit(REPO),
            "machine": platform.platform(),
        },
        "default_gpu": TRAIN_GPU,
        "gpus": gpus,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--data", default=str(REPO.parent / "shared" / "data"))
    p.add_argument("--write-constants", action="store_true", help=f"write {CONSTANTS_FILE.name}")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    data = Path(args.data)
    rows, own, transfer, pred = measure(data)
    print(render(own, transfer, time.perf_counter() - t0))
    if args.write_constants:
        text = json.dumps(constants_json(rows, own, pred, data), indent=1) + "\n"
        CONSTANTS_FILE.write_text(text)
        print(f"wrote {CONSTANTS_FILE.relative_to(REPO)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
