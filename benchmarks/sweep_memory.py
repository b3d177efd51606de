"""Peak memory of a 100,000-trial study: the sweep, its resume, and its results files.

    PYTHONPATH=. python benchmarks/sweep_memory.py [--trials 100000] [--sampler random]

Runs `dse sweep benchmarks/sweep_big_space.yaml` (1.2M configurations, so trials rarely repeat)
in a fresh process and reports its peak resident memory (ru_maxrss), the journal size, and the
time; then runs the same command again in another fresh process (a resume with nothing left to
do: it reloads every trial and rewrites the results), which is the peak for a study this size.
The random sampler keeps the run short: NSGA-II and TPE cost grows with the history (Optuna's
generation bookkeeping and Parzen estimators), their memory does not differ.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = """
import json, resource, sys, time
sys.path.insert(0, {repo!r})
from pathlib import Path
from dse.sweep import SweepOptions, run_sweep
t0 = time.perf_counter()
o = run_sweep(SweepOptions(space_file=Path({space!r}), out=Path({out!r}), sampler={sampler!r},
                           trials={trials}, batch_size=256, seed=0, quiet=True))
print(json.dumps({{"seconds": time.perf_counter() - t0, "done": o.done,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""


def run(space: str, out: str, sampler: str, trials: int) -> dict:
    code = CHILD.format(repo=str(REPO), space=space, out=out, sampler=sampler, trials=trials)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(r.stderr[-3000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=100_000)
    ap.add_argument("--sampler", default="random")
    ap.add_argument("--space", default=str(REPO / "benchmarks" / "sweep_big_space.yaml"))
    args = ap.parse_args()
    out = Path(tempfile.mkdtemp(prefix="dse-mem-")) / "res"
    first = run(args.space, str(out), args.sampler, args.trials)
    again = run(args.space, str(out), args.sampler, args.trials)
    journal_mb = (out / "journal.log").stat().st_size / 1e6
    parquet_mb = (out / "trials.parquet").stat().st_size / 1e6
    csv_mb = (out / "trials.csv").stat().st_size / 1e6
    print(
        f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f}"
    )
    print(f"command: PYTHONPATH=. python benchmarks/sweep_memory.py --trials {args.trials}")
    print()
    print("| run | trials | seconds | peak memory |")
    print("|---|---:|---:|---:|")
    print(
        f"| sweep ({args.sampler}, batch 256) | {first['done']:,} | {first['seconds']:.0f} | "
        f"{first['peak_rss_mb']:,.0f} MB |"
    )
    print(
        f"| same command again (reload, rewrite results) | {again['done']:,} | "
        f"{again['seconds']:.0f} | {again['peak_rss_mb']:,.0f} MB |"
    )
    print()
    print(
        f"files: journal.log {journal_mb:,.0f} MB, trials.parquet {parquet_mb:,.0f} MB, "
        f"trials.csv {csv_mb:,.0f} MB"
    )


if __name__ == "__main__":
    main()
