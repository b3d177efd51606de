"""Instructions per one-configuration `predict` call, by callgrind: a number other jobs on a
shared machine do not move (CPU time there moves by tens of percent between rounds).

    PYTHONPATH=. python benchmarks/one_row_instructions.py --code /tmp/base-8aa1249 --code . [--calls 20]

Per checkout, two runs under `valgrind --tool=callgrind` (PYTHONHASHSEED=0, one BLAS thread,
the checkout's own artifacts): both import the predictor and warm it up on 50 one-row calls of
other sweep-like configurations (every model and lazy import loaded), one then predicts
`--calls` more one-row configurations (sweep-like, h100_sxm, as benchmarks/predictor_speed.py's
one-configuration rows); the difference over `--calls` is the instructions of one call. Needs
valgrind; ~1-2 minutes per checkout. Prints a table; writes nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _callgrind import callgrind_instructions
from _provenance import checkout_label


def worker(calls: int) -> None:
    """The measured process: warm-up, then `calls` one-row predictions."""
    import numpy as np
    from predictor_speed import sweep_like

    from dse.predict import predict

    warm = sweep_like(50, np.random.default_rng(38))
    for i in range(50):
        predict({k: v[i : i + 1] for k, v in warm.items()})
    rows = sweep_like(max(calls, 1), np.random.default_rng(37))
    for i in range(calls):
        predict({k: v[i : i + 1] for k, v in rows.items()})


def instructions(code: Path, calls: int) -> int:
    """Instructions callgrind collected for `worker(calls)` on `code`."""
    return callgrind_instructions(code, __file__, ["--worker", str(calls)])


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--code", action="append", type=Path, help="a checkout (repeatable)")
    p.add_argument("--label", action="append", help="a label per --code (default: its commit)")
    p.add_argument("--calls", type=int, default=20, help="one-row calls measured")
    p.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker is not None:
        worker(args.worker)
        return
    codes = [c.resolve() for c in (args.code or [Path(__file__).resolve().parents[1]])]
    labels = args.label or [checkout_label(c) for c in codes]
    per: list[float] = []
    for code in codes:
        base, more = instructions(code, 0), instructions(code, args.calls)
        per.append((more - base) / args.calls)
        print(f"{code}: {per[-1] / 1e6:.2f} M instructions per call", file=sys.stderr)
    print("| code | instructions per one-row call (M) | ratio |")
    print("|---|---|---|")
    for lab, x in zip(labels, per, strict=True):
        print(f"| {lab} | {x / 1e6:.2f} | {x / per[0]:.3f} |")


if __name__ == "__main__":
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    main()
