"""`dse sweep SPACE.yaml`: run (or resume) a multi-objective study and write its results folder."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from dse.spec.space import SAMPLERS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sweep",
        help="run a multi-objective study over a search space",
        description="Search the space for the Pareto front of predicted latency against energy "
        "(objectives, constraints and study settings from the YAML; options override them). "
        "Trials are asked in batches, evaluated in one vectorised predictor call, and stored in "
        "results/<study>/journal.log (or --storage). Running the same command again resumes the "
        "study and runs only the missing trials; Ctrl-C stops after the current batch. At the "
        "end it prints what the front trades and, when front rows lie outside the predictor's "
        "or the loss law's fitted range, how many and by which input. The catalogue models that "
        "fit the space are placed against the front and saved in the results folder "
        "(catalogue.csv), so its report shows what this predictor said.\n\n"
        "examples:\n"
        "  dse sweep search_spaces/dense_8b.yaml\n"
        "  dse sweep search_spaces/moe.yaml --sampler nsga2 --trials 5000 --seed 1\n"
        "  dse sweep search_spaces/heads_study.yaml --sampler exact\n"
        "  dse sweep big.yaml --sampler exact --workers 2   # or --dask tcp://host:8786\n"
        "  dse sweep space.yaml --storage postgresql://user@host/db --study big  "
        "# then `dse worker` elsewhere",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("space", help="path to the search-space YAML file")
    p.add_argument("--study", help="study name (default: the space's `name`)")
    p.add_argument(
        "--storage",
        metavar="URL",
        help="Optuna storage: postgresql://..., mysql://..., sqlite:///FILE.db or journal:FILE.log "
        "(default: journal.log in the results folder)",
    )
    p.add_argument("--out", type=Path, help="results folder (default: results/<study>)")
    p.add_argument(
        "--replace",
        action="store_true",
        help="the results folder holds another study (or this one, to start it again): remove "
        "its results and its default journal first (without it such a folder is refused)",
    )
    p.add_argument(
        "--sampler", help=f"one of {', '.join(SAMPLERS)} (default: the YAML's study.sampler)"
    )
    p.add_argument("--trials", type=int, help="trial budget (default: the YAML's study.trials)")
    p.add_argument("--seed", type=int, help="random seed (default: the YAML's study.seed)")
    p.add_argument(
        "--batch-size", type=int, help="trials per predictor call (default: study.batch_size)"
    )
    p.add_argument(
        "--max-configs",
        type=float,
        default=None,
        metavar="N",
        help="the most configurations `exact` (and `auto`) enumerate; a larger space is sampled "
        "(default: 2e7, about a minute per 1e7 on one core)",
    )
    p.add_argument(
        "--chunk-size",
        type=int,
        default=None,
        metavar="N",
        help="exact: configurations per predictor call and per saved chunk (default: 131072)",
    )
    p.add_argument(
        "--dask",
        metavar="ADDRESS",
        help="exact: evaluate the chunks as tasks on this Dask scheduler (tcp://host:8786); "
        "fronts merge here and the study is written once (needs the `dask` extra)",
    )
    p.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="exact: evaluate the chunks on a local Dask cluster of N one-thread processes",
    )
    p.add_argument(
        "--reference",
        choices=["exact"],
        help="also enumerate the whole space for its exact front (exact_front.csv, and "
        "hypervolumes normalised by it)",
    )
    p.add_argument(
        "--no-report",
        dest="report",
        action="store_false",
        help="do not write report.html (`dse report`) at the end (written by default)",
    )
    p.add_argument("--report", dest="report", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar or summary")
    p.add_argument(
        "--heartbeat",
        type=int,
        default=10,
        metavar="S",
        help="database storages: heartbeat interval; a trial silent for 2 intervals is "
        "failed and queued again (default: 10)",
    )
    p.set_defaults(command="sweep")


def resume_command(args: argparse.Namespace) -> str:
    parts = ["dse", "sweep", str(args.space)]
    for flag, value in (
        ("--study", args.study),
        ("--storage", args.storage),
        ("--out", args.out),
        ("--sampler", args.sampler),
        ("--trials", args.trials),
        ("--seed", args.seed),
        ("--batch-size", args.batch_size),
        ("--reference", args.reference),
        ("--max-configs", args.max_configs),
        ("--chunk-size", args.chunk_size),
        ("--dask", args.dask),
        ("--workers", args.workers),
    ):
        if value is not None:
            parts += [flag, str(value)]
    return shlex.join(parts)


def _exact_flags(args: argparse.Namespace) -> dict[str, int]:
    """--max-configs and --chunk-size checked (`--flag: rule, got value`), as SweepOptions."""
    from dse.errors import ConfigError

    out: dict[str, int] = {}
    if args.max_configs is not None:
        n = args.max_configs
        if not (n >= 1 and float(n).is_integer()):
            raise ConfigError(f"--max-configs: must be an integer >= 1, got {n:g}")
        out["max_configs"] = int(n)
    if args.chunk_size is not None:
        if args.chunk_size < 1:
            raise ConfigError(f"--chunk-size: must be an integer >= 1, got {args.chunk_size}")
        out["chunk_size"] = int(args.chunk_size)
    return out


def run(args: argparse.Namespace) -> int:
    from dse.sweep import SweepOptions, run_sweep
    from dse.sweep.storage import mask_url

    outcome = run_sweep(
        SweepOptions(
            space_file=Path(args.space),
            study=args.study,
            storage=args.storage,
            out=args.out,
            sampler=args.sampler,
            trials=args.trials,
            seed=args.seed,
            batch_size=args.batch_size,
            reference=args.reference,
            quiet=args.quiet,
            heartbeat_s=args.heartbeat,
            resume_command=mask_url(resume_command(args)),
            replace=args.replace,
            dask=args.dask,
            workers=args.workers,
            **_exact_flags(args),
        )
    )
    if args.report and outcome.written is not None:
        from dse.errors import DSEError
        from dse.report import write_report

        try:
            page = write_report(outcome.folder, progress=not args.quiet)
        except DSEError as exc:  # the study is saved; only the page failed
            print(f"dse sweep: report not written: {exc}", file=sys.stderr)
        else:
            if not args.quiet:
                print(f"report: {page}", file=sys.stderr)
    if outcome.interrupted:
        return 130
    if not args.quiet and outcome.written is not None:
        s = outcome.written.summary
        c = s["counts"]
        hv = s["hypervolume"]
        print(
            f"study {s['study']!r} ({s['sampler']}, seed {s['seed']}): {c['trials']:,} trials, "
            f"{c['feasible']:,} feasible, {c['front']} on the front"
            + (f", hypervolume {hv:.4f}" if hv is not None else ""),
            file=sys.stderr,
        )
        x = s.get("exact")
        if x:
            rate = x.get("configurations_per_s")
            print(
                f"exact: {x['enumerated']:,} configurations enumerated ({x['valid']:,} valid, "
                f"{x['feasible']:,} feasible) in {x['enumeration_s']:.1f} s"
                + (f" ({rate:,.0f}/s)" if rate else "")
                + f"; recorded the front ({x['front']:,}) and a sample of {x['sample']:,}",
                file=sys.stderr,
            )
        if c.get("repeats"):
            # Repeats are told the stored values: the predictor saw each configuration once.
            print(
                f"{c['distinct_configurations']:,} distinct configurations evaluated; "
                f"{c['repeats']:,} trials repeated one (not predicted again)",
                file=sys.stderr,
            )
        _print_tradeoff(outcome.folder)
        print(f"results in {outcome.folder}/ (storage {outcome.storage})", file=sys.stderr)
        print(f"show the front with: dse show {outcome.folder}", file=sys.stderr)
    return 0


def _print_tradeoff(folder: Path) -> None:
    """What the front trades: its best configuration in each objective, and the knee."""

    from dse.commands.show import tradeoff_lines
    from dse.errors import DSEError
    from dse.sweep import load_front
    from dse.sweep.extrapolation import summarise
    from dse.sweep.results import read_summary, space_from_summary

    try:
        view = load_front(str(folder), None)
        space = space_from_summary(read_summary(folder))
    except (DSEError, OSError, ValueError):
        return  # the study is saved; `dse show` says what is wrong with the folder
    lines = tradeoff_lines(view, space)
    if lines:
        print(f"the front trades ({len(view.front)} configurations):", file=sys.stderr)
        for line in lines:
            print(line, file=sys.stderr)
    # Silent when every front row is inside the fitted ranges.
    oor = summarise(view.front).line()
    if oor:
        print(oor, file=sys.stderr)
