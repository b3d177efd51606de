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
    p.add_argument("--results", type=Path, help="results root (default: results)")
    p.set_defaults(command="studies")


def run(args: argparse.Namespace) -> int:
    import sys

    from dse.errors import ConfigError, DSEError
    from dse.sweep import list_studies
    from dse.sweep.storage import mask_url

    if args.storage is not None:
        sources = [args.storage]
    else:
        root: Path = args.results if args.results is not None else Path("results")
        if not root.exists() and args.results is not None:
            raise ConfigError(f"{root}: --results: must be an existing folder, got no such path")
        if root.exists() and not root.is_dir():
            raise ConfigError(f"{root}: --results: must be a folder of results, got a file")
        sources = [str(p) for p in sorted(root.glob("*/journal.log"))]
        if not sources:
            print(f"no studies under {root}/ (give --storage URL for a database)")
            return 0
    print(
        f"{'study':<28}{'trials':>8}{'complete':>10}{'running':>9}{'budget':>8}{'front':>7}"
        f"  {'sampler':<11}storage"
    )
    failed = 0
    for src in sources:
        try:
            studies = list_studies(src)
        except DSEError as exc:  # one unreadable journal does not hide the others
            if args.storage is not None:
                raise
            print(f"dse studies: error: {exc}", file=sys.stderr)
            failed += 1
            continue
        for s in studies:
            budget = "" if s.budget is None else f"{s.budget:,}"
            front = "" if s.front is None else str(s.front)
            print(
                f"{s.name:<28}{s.trials:>8,}{s.complete:>10,}{s.running:>9,}{budget:>8}"
                f"{front:>7}  {(s.sampler or '-'):<11}{mask_url(src)}"
            )
    if failed:
        print(
            f"dse studies: {failed} of {len(sources)} storages could not be read (above)",
            file=sys.stderr,
        )
        return 2
    return 0
