"""Sweep throughput: `dse sweep` persisted to its default storage against bare in-memory Optuna.

    PYTHONPATH=. python benchmarks/sweep_throughput.py [--trials 10000] [--space search_spaces/dense_8b.yaml]

Measured in one run, so machine noise cancels in the ratio:
1. bare Optuna: NSGA-II (population = the sweep's batch size), in-memory storage, the same
   parameters and distributions, a constant objective, `study.optimize`;
2. `dse sweep --sampler nsga2` to results/<tmp>/journal.log: batched ask, one predictor call
   per batch, constraints, every prediction stored, one journal write per batch;
3. for the storage choice (docs/sweeps.md), shorter runs of the alternatives: plain Optuna with
   per-trial SQLite writes (constant objective), and `dse sweep --storage sqlite:///` (the
   shared-storage engine, per-operation writes).
Prints a markdown table; peak memory of each part comes from a fresh child process.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def bare(space_file: str, trials: int, batch: int, storage: str | None) -> dict:
    import optuna

    from dse.spec.space import load_space
    from dse.sweep._samplers import distributions

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    space = load_space(space_file)
    dists = distributions(space)

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        for name, d in dists.items():
            if isinstance(d, optuna.distributions.IntDistribution):
                trial.suggest_int(name, d.low, d.high, step=d.step)
            else:
                trial.suggest_categorical(name, d.choices)
        return 1.0, 1.0

    study = optuna.create_study(
        directions=["minimize", "minimize"],
        sampler=optuna.samplers.NSGAIISampler(seed=0, population_size=batch),
        storage=storage,
    )
    t0 = time.perf_counter()
    study.optimize(objective, n_trials=trials)
    return {"seconds": time.perf_counter() - t0}


def dse_sweep(space_file: str, trials: int, batch: int, storage: str | None) -> dict:
    from dse.sweep import SweepOptions, run_sweep

    out = Path(tempfile.mkdtemp(prefix="dse-bench-"))
    t0 = time.perf_counter()
    outcome = run_sweep(
        SweepOptions(
            space_file=Path(space_file),
            out=out / "res",
            storage=storage,
            sampler="nsga2",
            trials=trials,
            batch_size=batch,
            seed=0,
            quiet=True,
        )
    )
    seconds = time.perf_counter() - t0
    journal = out / "res" / "journal.log"
    return {
        "seconds": seconds,
        "done": outcome.done,
        "journal_mb": journal.stat().st_size / 1e6 if journal.exists() else None,
    }


def child(kind: str, space: str, trials: int, batch: int, storage: str | None) -> dict:
    """Run one measurement in a fresh interpreter (clean peak memory)."""
    code = (
        f"import json, resource, sys; sys.path.insert(0, {str(REPO)!r})\n"
        "from benchmarks.sweep_throughput import bare, dse_sweep\n"
        f"r = {kind}({space!r}, {trials}, {batch}, {storage!r})\n"
        "r['peak_rss_mb'] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024\n"
        "print(json.dumps(r))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10_000)
    ap.add_argument("--space", default="search_spaces/dense_8b.yaml")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--sqlite-trials", type=int, default=300)
    args = ap.parse_args()
    os.chdir(REPO)
    rows = []
    b = child("bare", args.space, args.trials, args.batch, None)
    rows.append(("bare Optuna NSGA-II, in memory, constant objective", args.trials, b))
    d = child("dse_sweep", args.space, args.trials, args.batch, None)
    rows.append(("`dse sweep` NSGA-II, default journal storage", args.trials, d))
    tmp = Path(tempfile.mkdtemp(prefix="dse-bench-sqlite-"))
    n = args.sqlite_trials
    s1 = child("bare", args.space, n, args.batch, f"sqlite:///{tmp}/bare.db")
    rows.append(("bare Optuna NSGA-II, per-trial SQLite writes, constant objective", n, s1))
    s2 = child("dse_sweep", args.space, n, args.batch, f"sqlite:///{tmp}/dse.db")
    rows.append(("`dse sweep` NSGA-II, --storage sqlite:/// (shared engine)", n, s2))
    print(
        f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f}"
    )
    print(f"command: PYTHONPATH=. python benchmarks/sweep_throughput.py --trials {args.trials}")
    print()
    print("| run | trials | seconds | trials/s | peak memory |")
    print("|---|---:|---:|---:|---:|")
    for label, trials, r in rows:
        print(
            f"| {label} | {trials:,} | {r['seconds']:.1f} | {trials / r['seconds']:,.0f} | "
            f"{r['peak_rss_mb']:.0f} MB |"
        )
    ratio = (args.trials / d["seconds"]) / (args.trials / b["seconds"])
    print()
    print(
        f"ratio dse / bare (trials per second): {ratio:.2f} (target >= 0.50); "
        f"journal {d.get('journal_mb') or 0:.0f} MB"
    )


if __name__ == "__main__":
    main()
