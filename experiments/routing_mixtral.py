"""Issue 35, routing of benchmark workloads: the argonne Mixtral rows' end-to-end latency error,
Levels 1-2 alone and Level 3 held out leave-one-model-out (as benchmarks/e2e_accuracy.py's
`lomo`), with each source's routing (`dse.fitting.e2e_rows.SOURCE_ROUTING`) or with every row
uniform (`--uniform`: what a user's default prediction assumes).

    PYTHONPATH=. DSE_SURROGATES=$PWD/surrogates python experiments/routing_mixtral.py [--uniform]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dse.data import load  # noqa: E402
from dse.fitting.e2e_rows import e2e_configs, price_rows, ttft_of_runs  # noqa: E402
from dse.metrics import mape_pct  # noqa: E402
from dse.models.artifact import Artifact  # noqa: E402
from dse.models.level3 import Level3  # noqa: E402
from dse.predict import load_artifact  # noqa: E402
from dse.spec.stand_ins import STAND_INS  # noqa: E402


def level12(gpu: str) -> Artifact | None:
    art, _ = load_artifact(gpu)
    if art is None:
        return None
    keep = [n for n in art.models if not n.startswith("level3.")]
    return Artifact(
        manifest={**art.manifest, "models": {n: art.manifest["models"][n] for n in keep}},
        models={n: art.models[n] for n in keep},
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--data", default=str(REPO.parent / "shared" / "data"))
    p.add_argument("--uniform", action="store_true", help="every row priced uniform")
    args = p.parse_args()
    tables = load(Path(args.data), ["e2e", "e2e_ttft"])
    e2e = tables["e2e"]
    for gpu in ("h100_sxm", "a100_sxm"):
        rows = e2e[e2e["gpu"].isin(STAND_INS["level3_rows"][gpu])]
        cfg, kept = e2e_configs(rows)
        if args.uniform and "routing" in cfg:
            cfg = cfg.assign(routing="uniform")
        g, _ = price_rows(cfg, level12(gpu), gpu)
        y = kept["latency_s"].to_numpy(float)
        ttft = ttft_of_runs(kept, tables.get("e2e_ttft"))
        models = kept["model"].to_numpy()
        fit = Level3(seed=0).fit(g, y, models, ttft)
        lomo = np.full(len(kept), np.nan)
        for e, cv in fit.cv_.items():
            lomo[(kept["engine"] == e).to_numpy()] = cv["held_out_pred_s"]
        l12 = g.t_pre_s + g.t_dec_s
        for e in sorted(kept["engine"].unique()):
            at = (kept["engine"] == e).to_numpy()
            mx = at & kept["model"].str.contains("mixtral", case=False).to_numpy()
            print(
                f"{gpu} {e}: all {at.sum()} rows lomo {mape_pct(lomo[at], y[at]):.2f}%; "
                f"Mixtral {mx.sum()} rows L1-2 {mape_pct(l12[mx], y[mx]):.1f}% "
                f"(signed {100 * np.mean(l12[mx] / y[mx] - 1):+.1f}%), "
                f"lomo {mape_pct(lomo[mx], y[mx]):.2f}%"
            )


if __name__ == "__main__":
    main()
