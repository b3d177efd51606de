"""`dse worker --storage URL --study NAME`: join a running study and evaluate trials."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "worker",
        help="join a running study from another process or machine",
        description="Join a study created by `dse sweep --storage URL --study NAME` on a shared "
        "database and evaluate batches of its trials until the study's budget is met. The space, "
        "sampler and budget come from the study. Workers claim trials through the database, so "
        "none is evaluated twice; trials of a worker that dies are failed after two heartbeats "
        "and queued again.\n\n"
        "example: dse worker --storage postgresql://user@host/dse --study big",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--storage", required=True, metavar="URL", help="the study's database URL")
    p.add_argument("--study", required=True, help="study name")
    p.add_argument(
        "--trials", type=int, help="evaluate at most this many trials here (default: until done)"
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--heartbeat", type=int, default=10, metavar="S", help="heartbeat interval (default: 10)"
    )
    p.set_defaults(command="worker")


def run(args: argparse.Namespace) -> int:
    from dse.errors import ConfigError
    from dse.sweep import run_worker

    if args.trials is not None and args.trials < 1:
        raise ConfigError(f"--trials: must be an integer >= 1, got {args.trials}")
    n = run_worker(
        args.storage,
        args.study,
        max_trials=args.trials,
        quiet=args.quiet,
        heartbeat_s=args.heartbeat,
    )
    if not args.quiet:
        print(f"worker: evaluated {n:,} trials of study {args.study!r}", file=sys.stderr)
    return 0
