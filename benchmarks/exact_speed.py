"""Speed of an exact sweep's enumeration, side by side: `dse.sweep.exact_front` of one space
(every configuration through the rules, the derived columns, the predictor and the running
Pareto filter, chunk by chunk, as `dse sweep --sampler exact` enumerates) for the code of one
or more checkouts timed in the same run.

    PYTHONPATH=. python benchmarks/exact_speed.py [--code DIR ...] [--space FILE] [--rounds 5]

Each `--code DIR` is a checkout (default: this one; a baseline from `git archive 1ce823b | tar
-x -C DIR`). In each round every checkout runs once, in a fresh worker process with its own
code and artifacts, pinned to one core with one BLAS/OpenMP thread (benchmarks/small_calls.py's
machinery), warmed on a small space, and reports the enumeration's CPU and wall seconds and
its counts and front, which must agree across checkouts. The ratio of each checkout's CPU time
to the first one's is taken within each round and the median over rounds printed (a shared
machine's speed changes between rounds, less within one). The default space is
benchmarks/sweep_3m_space.yaml on h100_sxm alone (1,032,192 configurations, ~5 s a run).
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WARM = REPO / "search_spaces" / "heads_study.yaml"


def default_space(folder: Path) -> Path:
    """benchmarks/sweep_3m_space.yaml with one GPU: a third of its configurations."""
    text = (REPO / "benchmarks" / "sweep_3m_space.yaml").read_text()
    one = text.replace("{values: [h100_sxm, h200_sxm, a100_sxm]}", "{values: [h100_sxm]}")
    if one == text:
        raise SystemExit("benchmarks/sweep_3m_space.yaml: its hardware line changed; pass --space")
    path = folder / "sweep_1m_h100.yaml"
    path.write_text(one)
    return path


def worker(space_file: str, warm_file: str) -> dict[str, object]:
    """Enumerate the space once after a warm-up (artifacts loaded); the numbers to compare."""
    from dse.spec.space import load_space
    from dse.sweep import exact_front

    exact_front(load_space(warm_file))
    space = load_space(space_file)
    t0, c0 = time.perf_counter(), time.process_time()
    ex = exact_front(space)
    return {
        "cpu_s": time.process_time() - c0,
        "wall_s": time.perf_counter() - t0,
        "total": ex.total,
        "valid": ex.valid,
        "feasible": ex.feasible,
        "front": [int(i) for i in ex.index],
        "objectives_sum": float(ex.objectives.sum()),
    }


def run_worker(code: Path, space: Path) -> dict[str, object]:
    sys.path.insert(0, str(REPO / "benchmarks"))
    from small_calls import _env  # one checkout's worker environment

    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(space), str(WARM)]
    if hasattr(os, "sched_getaffinity"):
        cmd = ["taskset", "-c", str(sorted(os.sched_getaffinity(0))[0]), *cmd]
    done = subprocess.run(cmd, cwd=code, env=_env(code), capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"worker for {code} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--code", action="append", type=Path, help="a checkout to time (repeat)")
    ap.add_argument("--space", type=Path, help="the space to enumerate")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(*args.worker)))
        return
    codes = [c.resolve() for c in (args.code or [REPO])]
    with tempfile.TemporaryDirectory() as tmp:
        space = (args.space or default_space(Path(tmp))).resolve()
        print(f"space {space}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
              f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip
        cpu: dict[Path, list[float]] = {c: [] for c in codes}
        first: dict[str, object] | None = None
        for r in range(args.rounds):
            order = codes if r % 2 == 0 else codes[::-1]  # alternate who goes first
            for code in order:
                res = run_worker(code, space)
                cpu[code].append(float(res["cpu_s"]))  # type: ignore[arg-type]
                same = {k: v for k, v in res.items() if not k.endswith("_s")}
                if first is None:
                    first = same
                elif same != first:
                    raise SystemExit(f"{code}: another enumeration result than {codes[0]}")
                print(f"round {r} {code}: CPU {res['cpu_s']:.2f} s, wall {res['wall_s']:.2f} s")
        print(f"load average {os.getloadavg()[0]:.1f}; every checkout: the same counts and front")
        for code in codes:
            ratios = [a / b for a, b in zip(cpu[code], cpu[codes[0]], strict=True)]
            print(
                f"{code}: CPU best {min(cpu[code]):.2f} s, median {statistics.median(cpu[code]):.2f}"
                f" s; ratio to {codes[0].name} (median over rounds) {statistics.median(ratios):.3f}"
                f" ({min(ratios):.3f}-{max(ratios):.3f})"
            )


if __name__ == "__main__":
    main()
