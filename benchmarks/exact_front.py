"""The `exact` sampler's enumeration: configurations/s and peak memory at two space sizes.

    PYTHONPATH=. python benchmarks/exact_front.py [--sizes 1m,10m] [--workers 2]

Each size runs in its own child process (so ru_maxrss is that size's peak, not the larger of
the two), pinned to one CPU with one BLAS/OpenMP thread, and enumerates the space exactly as
`dse sweep --sampler exact` does (`_enumerate.enumerate_space`: chunks of 131,072 through
the predictor, fronts merged chunk by chunk, the sidecar rewritten after each chunk). The
spaces are benchmarks/sweep_big_space.yaml (1,212,288 configurations: `1m`) and the same with
d_ff in steps of 64 instead of 512 (9,441,152: `10m`). `--workers N` also times the same space
on a Dask LocalCluster of N one-thread workers (needs the `dask` extra).

Prints one markdown row per run: configurations, seconds, configurations/s, front size, peak
RSS (MB) and the RSS after the first chunk (the predictor loaded), plus the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")  # one thread, set before numpy loads

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
BASE = REPO / "benchmarks" / "sweep_big_space.yaml"
SPACES = {
    "1m": lambda t: t,
    "10m": lambda t: t.replace(
        "d_ff: {low: 8192, high: 24576, step: 512}", "d_ff: {low: 8192, high: 24576, step: 64}"
    ),
}


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kB


def child(name: str, workers: int) -> None:
    """Enumerate one space and print its measurements as one JSON line."""
    if hasattr(os, "sched_setaffinity") and workers == 0:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    from dse.spec.space import load_space
    from dse.sweep import _enumerate as E

    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / f"{name}.yaml"
        f.write_text(SPACES[name](BASE.read_text()).replace("name: big", f"name: big{name}"))
        space = load_space(f)
        key = {"size": space.size(), "chunk": E.CHUNK}
        # Warm-up outside the timing: the predictor's artifacts load on the first call.
        E.evaluate_chunk(space, 0, 1024)
        warm_rss = _rss_mb()
        state = E.Enumeration.new(key, len(space.objectives.names), space.objectives.directions)
        cluster = client = None
        if workers:
            cluster, client = E.dask_client(None, workers)
            client.run(E.evaluate_chunk, space, 0, 1024)  # the same warm-up on every worker
            runner = E.dask_runner(client, space, E.CHUNK)
        else:
            runner = E.local_runner(space, E.CHUNK)
        t0 = time.perf_counter()
        state = E.enumerate_space(space, state, Path(tmp) / E.PROGRESS_FILE, runner)
        dt = time.perf_counter() - t0
        if client is not None:
            client.close()
            cluster.close()  # type: ignore[union-attr]
        print(
            json.dumps(
                {
                    "space": name,
                    "workers": workers,
                    "configurations": state.total,
                    "seconds": round(dt, 2),
                    "per_s": round(state.total / dt),
                    "front": len(state.index),
                    "peak_rss_mb": round(_rss_mb()),
                    "warm_rss_mb": round(warm_rss),
                }
            )
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1m,10m")
    ap.add_argument("--workers", type=int, default=0, help="also time a Dask LocalCluster")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--child-workers", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.child_workers)
        return
    runs = [(s, 0) for s in args.sizes.split(",")]
    if args.workers:
        runs += [(s, args.workers) for s in args.sizes.split(",")]
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"load average before {os.getloadavg()[0]:.2f}; python {platform.python_version()}"
    )
    print(
        "| space | engine | configurations | s | configurations/s | front | peak RSS MB "
        "| RSS after warm-up MB |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name, workers in runs:
        cmd = [sys.executable, __file__, "--child", name, "--child-workers", str(workers)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        engine = f"Dask, {workers} workers" if workers else "one core"
        print(
            f"| {name} | {engine} | {r['configurations']:,} | {r['seconds']:.1f} | "
            f"{r['per_s']:,} | {r['front']} | {r['peak_rss_mb']:,} | {r['warm_rss_mb']:,} |",
            flush=True,
        )
    print(f"load average after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
