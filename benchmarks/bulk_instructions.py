"""Instructions of bulk predictions, by callgrind: a number other jobs on a shared machine do
not move (the companion of benchmarks/one_row_instructions.py for large batches).

    PYTHONPATH=. python benchmarks/bulk_instructions.py --code /tmp/base-main --code . [--n 3000]

Per checkout, two runs under `valgrind --tool=callgrind` (PYTHONHASHSEED=0, one BLAS thread,
the checkout's own artifacts): both import the predictor and predict the `--n`-row
all-distinct, sweep-like and exact-grid batches of benchmarks/predictor_speed.py once each,
full and `texts=False` (every model and lazy import loaded); the second then predicts them all
again. The difference is the instructions of those six bulk predictions. ~3-5 minutes per
checkout at n = 3000. Prints a table; writes nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _callgrind import callgrind_instructions
from _provenance import checkout_label


def worker(n: int, measure: bool) -> None:
    """The measured process: the three batches, full and texts=False, once or twice."""
    import numpy as np
    from predictor_speed import all_distinct, exact_grid, sweep_like

    from dse.predict import predict

    batches = [f(n, np.random.default_rng(5)) for f in (all_distinct, sweep_like, exact_grid)]
    for _ in range(2 if measure else 1):
        for b in batches:
            predict(b)
            predict(b, texts=False)


def instructions(code: Path, n: int, measure: bool) -> int:
    """Instructions callgrind collected for `worker(n, measure)` on `code`."""
    args = ["--worker", str(n)] + (["--measure"] if measure else [])
    return callgrind_instructions(code, __file__, args)


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--code", action="append", type=Path, help="a checkout (repeatable)")
    p.add_argument("--label", action="append", help="a label per --code (default: its commit)")
    p.add_argument("--n", type=int, default=3000, help="rows per batch")
    p.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker is not None:
        worker(args.worker, args.measure)
        return
    codes = [c.resolve() for c in (args.code or [Path(__file__).resolve().parents[1]])]
    labels = args.label or [checkout_label(c) for c in codes]
    per: list[float] = []
    for code in codes:
        per.append(instructions(code, args.n, True) - instructions(code, args.n, False))
        print(f"{code}: {per[-1] / 1e6:.1f} M instructions", file=sys.stderr)
    print(f"| code | instructions, 3 batches x {args.n} rows, full + texts=False (M) | ratio |")
    print("|---|---|---|")
    for lab, x in zip(labels, per, strict=True):
        print(f"| {lab} | {x / 1e6:.1f} | {x / per[0]:.3f} |")


if __name__ == "__main__":
    main()
