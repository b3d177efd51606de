"""Search quality: hypervolume reached by each sampler against the exact (or best known) front.

    PYTHONPATH=. python benchmarks/sweep_quality.py [--trials 2000] [--seeds 0] [--csv FILE]
        [--spaces FILE ...] [--samplers screened nsga2 ...]

For each discrete space the reference front comes from enumerating every configuration
(`dse.sweep.exact_front`) when the space has at most `--max-exact` configurations; each
sampler then runs a real `dse sweep` of `--trials` trials, and the hypervolume of its feasible
trials after k trials is computed with the reference front's normalisation and reference point
(1.1 x nadir), so ratios compare across samplers. A space too large to enumerate
(benchmarks/sweep_huge_space.yaml) is read against the best known front instead: the front of
every trial of every sampler and seed of this run together ("best known" in the table), so a
ratio of 1 there means "as good as the best any sampler found", not "exact". Prints a markdown
table (hypervolume ratio at checkpoints = the HV-against-trials curve) and writes every curve
point to --csv. The `screened` sampler also reports the configurations it priced.
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

# One BLAS/OpenMP thread, set before numpy loads (it is imported inside main()).
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")


REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SPACES = (
    "search_spaces/dense_8b.yaml",
    "search_spaces/moe.yaml",
    "search_spaces/gpu_batch.yaml",
    "search_spaces/heads_study.yaml",
    "benchmarks/sweep_big_space.yaml",
    "benchmarks/sweep_3m_space.yaml",
)
SAMPLERS = ("screened", "tpe", "nsga2", "random")
CHECKPOINTS = (50, 100, 250, 500, 1000, 2000, 5000)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--spaces", nargs="+", default=list(SPACES))
    ap.add_argument("--samplers", nargs="+", default=list(SAMPLERS))
    ap.add_argument("--max-exact", type=int, default=20_000_000)
    ap.add_argument("--csv", type=Path, default=None)
    args = ap.parse_args()
    import json

    import numpy as np
    import pandas as pd

    from dse import pareto
    from dse.spec.space import load_space
    from dse.sweep import SweepOptions, exact_front, run_sweep

    tmp = Path(tempfile.mkdtemp(prefix="dse-quality-"))
    rows: list[dict] = []
    table: list[str] = []
    cps = [c for c in CHECKPOINTS if c <= args.trials]
    if args.trials not in cps:
        cps.append(args.trials)
    for space_file in args.spaces:
        space = load_space(REPO / space_file)
        names = [f"obj.{n}" for n in space.objectives.names]
        directions = space.objectives.directions
        runs: dict[tuple[str, int], tuple[pd.DataFrame, float, int | None]] = {}
        for sampler in args.samplers:
            for seed in args.seeds:
                out = tmp / f"{space.name}-{sampler}-{seed}"
                t0 = time.perf_counter()
                run_sweep(
                    SweepOptions(
                        space_file=REPO / space_file,
                        out=out,
                        sampler=sampler,
                        trials=args.trials,
                        seed=seed,
                        quiet=True,
                    )
                )
                seconds = time.perf_counter() - t0
                summary = json.loads((out / "summary.json").read_text())
                t = pd.read_parquet(out / "trials.parquet", columns=[*names, "feasible"])
                runs[sampler, seed] = (t, seconds, summary.get("screened_configs"))
        if space.size() <= args.max_exact:
            ex = exact_front(space)
            ref, ref_n, kind = ex.objectives, len(ex.index), "exact"
        else:  # the best front any sampler found
            pts = np.vstack(
                [t.loc[t["feasible"], names].to_numpy(float) for t, _, _ in runs.values()]
            )
            ref = pts[pareto.nondominated(pts, directions=directions)]
            ref_n, kind = len(ref), "best known"
        norm = pareto.normalisation(ref, directions)
        ref_hv = pareto.hypervolume(ref, norm)
        for sampler in args.samplers:
            ratios, secs, priced = [], [], []
            for seed in args.seeds:
                t, seconds, screened = runs[sampler, seed]
                hist = pareto.hypervolume_history(
                    t[names].to_numpy(float), t["feasible"].to_numpy(bool), norm, cps
                )
                curve = {int(k): hv / ref_hv for k, hv in hist}
                ratios.append(curve)
                secs.append(seconds)
                priced.append(screened)
                for k, r in curve.items():
                    rows.append(
                        {
                            "space": space.name,
                            "reference": kind,
                            "sampler": sampler,
                            "seed": seed,
                            "trials": k,
                            "hv_ratio": r,
                            "seconds": seconds,
                            "screened_configs": screened,
                        }
                    )
            mean = {k: float(np.mean([c.get(k, np.nan) for c in ratios])) for k in cps}
            worst = min(c[args.trials] for c in ratios if args.trials in c)
            cells = " | ".join(f"{mean[k]:.4f}" for k in cps)
            screened_cell = f"{np.mean(priced):,.0f}" if all(p is not None for p in priced) else "-"
            table.append(
                f"| {space.name} | {space.size():,} | {ref_n} ({kind}) | {sampler} | {cells} | "
                f"{worst:.4f} | {np.mean(secs):.0f} | {screened_cell} |"
            )
            print(table[-1], file=sys.stderr, flush=True)
    print(
        f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f}"
    )
    print(
        f"command: PYTHONPATH=. python benchmarks/sweep_quality.py --trials {args.trials} "
        f"--seeds {' '.join(map(str, args.seeds))} --spaces {' '.join(args.spaces)} "
        f"--samplers {' '.join(args.samplers)}"
    )
    print()
    head = " | ".join(f"HV@{k}" for k in cps)
    print(
        f"| space | configs | reference front | sampler | {head} | worst seed @{args.trials} "
        "| s | configs screened |"
    )
    print("|---|---:|---:|---|" + "---:|" * len(cps) + "---:|---:|---:|")
    print("\n".join(table))
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
