"""`dse studies [--storage URL]`: list the studies in a storage with their size and front."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "studies",
        help="list the studies in a storage",
        description="List the studies of a storage (or, without --storage, of every results "
        "folder under results/) with their trial counts, budget, sampler and front size.\n\n"
        "examples:\n  dse studies\n  dse studies --storage postgresql://user@host/dse",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--storage", metavar="URL", help="storage URL (default: results/*/journal.log)")
    p.add_argument(
        "--results", type=Path, default=Path("results"), help="results root (default: results)"
    )
    p.set_defaults(command="studies")


def run(args: argparse.Namespace) -> int:
    from dse.sweep import list_studies

    if args.storage is not None:
        sources = [args.storage]
    else:
        sources = [str(p) for p in sorted(args.results.glob("*/journal.log"))]
        if not sources:
            print(f"no studies under {args.results}/ (give --storage URL for a database)")
            return 0
    print(
        f"{'study':<28}{'trials':>8}{'complete':>10}{'running':>9}{'budget':>8}{'front':>7}"
        f"  {'sampler':<11}storage"
    )
    from dse.sweep._storage import mask_url

    for src in sources:
        for s in list_studies(src):
            budget = "" if s.budget is None else f"{s.budget:,}"
            front = "" if s.front is None else str(s.front)
            print(
                f"{s.name:<28}{s.trials:>8,}{s.complete:>10,}{s.running:>9,}{budget:>8}"
                f"{front:>7}  {(s.sampler or '-'):<11}{mask_url(src)}"
            )
    return 0
