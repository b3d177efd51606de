"""Exhaustive evaluation: every configuration of a >= 1,000,000-configuration space and its exact
Pareto front, on one core.

    PYTHONPATH=. python benchmarks/sweep_exhaustive.py [--space benchmarks/sweep_big_space.yaml]

Pins the process to one CPU and one BLAS/OpenMP thread before numpy loads, then runs
`dse.sweep.exact_front` (columns built from configuration indices chunk by chunk, one predictor
call per chunk, a running non-dominated filter). Also times a full `dse sweep --sampler
exhaustive` of the bundled dense_8b space (every configuration stored as a trial).
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

# One BLAS/OpenMP thread, set before numpy loads (it is imported inside main()).
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")


REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--space", default=str(REPO / "benchmarks" / "sweep_big_space.yaml"))
    ap.add_argument("--chunk", type=int, default=None)
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    import numpy as np

    from dse import pareto
    from dse.spec.space import load_space
    from dse.sweep import SweepOptions, exact_front, run_sweep
    from dse.sweep._enumerate import CHUNK

    space = load_space(args.space)
    # Warm the predictor (artifact load) outside the timing.
    exact_front(load_space(REPO / "search_spaces" / "heads_study.yaml"))
    t0 = time.perf_counter()
    ex = exact_front(space, chunk=args.chunk or CHUNK)
    seconds = time.perf_counter() - t0
    hv = ex.hypervolume()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    # Cross-check the front: no evaluated feasible point may dominate a front point.
    assert len(ex.index) == len(np.unique(ex.index))
    assert pareto.nondominated(ex.objectives).all()

    out = Path(tempfile.mkdtemp(prefix="dse-bench-ex-"))
    t1 = time.perf_counter()
    outcome = run_sweep(
        SweepOptions(
            space_file=REPO / "search_spaces" / "dense_8b.yaml",
            out=out / "dense",
            sampler="exhaustive",
            quiet=True,
        )
    )
    cli_s = time.perf_counter() - t1

    print(
        f"machine: {platform.node()} {platform.machine()}, pinned to 1 of {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f}"
    )
    print("command: PYTHONPATH=. python benchmarks/sweep_exhaustive.py")
    print()
    print(
        "| what | configurations | valid | feasible | front | seconds | configs/s | peak memory |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    print(
        f"| exact_front({Path(args.space).name}) | {ex.total:,} | {ex.valid:,} | {ex.feasible:,} "
        f"| {len(ex.index)} | {seconds:.1f} | {ex.total / seconds:,.0f} | {rss:.0f} MB |"
    )
    print(
        f"| `dse sweep dense_8b.yaml --sampler exhaustive` (every configuration a stored trial) "
        f"| {outcome.done:,} | | | {outcome.written.summary['counts']['front'] if outcome.written else ''} "
        f"| {cli_s:.1f} | {outcome.done / cli_s:,.0f} | |"
    )
    print()
    print(f"exact hypervolume {hv:.4f} (normalised by the front's ideal and nadir)")


if __name__ == "__main__":
    main()
