"""`dse export RESULTS_DIR`: chosen configurations as YAML, JSON or Hugging Face config.json."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="export chosen configurations as YAML, JSON or HF config.json",
        description="Export configurations of a sweep: the Pareto front (default) or the K best "
        "feasible ones by energy, latency or closeness to the knee. YAML and JSON are read back "
        "by `dse predict --config FILE --entry N`; `hf` writes one folder per configuration "
        "with a Hugging Face config.json. A README.md beside the files says what was exported "
        "and why.\n\n"
        "examples:\n"
        "  dse export results/heads --front --format yaml\n"
        "  dse export results/dense-8b --top 3 --by knee --format hf --out winners/\n"
        "  dse export results/moe --top 5 --by loss\n\n"
        "The Hugging Face config.json carries max_position_embeddings: the smallest power of "
        "two that holds the study's prompt + output tokens (8192 + 256 -> 16384).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("results", metavar="RESULTS_DIR", help="results folder of a sweep")
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "--front", action="store_true", help="every configuration on the Pareto front (default)"
    )
    which.add_argument("--top", type=int, metavar="K", help="the K best feasible configurations")
    p.add_argument(
        "--by",
        metavar="RANKING",
        default=None,
        help="ranking for --top: knee (nearest the knee of the front) or an objective of the "
        "study, by its first word (energy, latency, loss, throughput, ...) or full name "
        "(energy_hymell_request), best first in its direction (default: energy, else the "
        "first objective)",
    )
    p.add_argument("--format", choices=("yaml", "json", "hf"), default="yaml", dest="fmt")
    p.add_argument("--out", metavar="DIR", help="output folder (default: RESULTS_DIR/export)")
    p.set_defaults(command="export")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from dse.errors import ConfigError
    from dse.report.export import write_export
    from dse.sweep.storage import warn
    from dse.sweep.study_reader import stale_results

    if args.by is not None and args.top is None:
        raise ConfigError(f"--by {args.by} ranks the trials for --top K: give --top K as well")
    warn(stale_results(Path(args.results)))  # a damaged or newer journal beside summary.json
    dest = write_export(
        args.results,
        fmt=args.fmt,
        out=args.out,
        front=args.front,
        top=args.top,
        by=args.by,
    )
    # The README's first sentence says how many configurations and why.
    print(f"wrote {dest}: {(dest / 'README.md').read_text().splitlines()[2]}")
    return 0
