"""`dse report RESULTS_DIR`: the interactive HTML report of a sweep (and its main figure as an image)."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="write the interactive HTML report of a sweep",
        description="Write one self-contained HTML page (plotly.js inline, opens offline) from a "
        "results folder written by `dse sweep`: the Pareto front of energy against latency (the "
        "third objective as colour, the other pairs of objectives after it), parallel "
        "coordinates, parameter importance, hypervolume against trials (samplers only), the "
        "exact front, and where the energy goes. The catalogue models marked beside the front "
        "are those `dse sweep` placed and saved (catalogue.csv): the report runs no prediction "
        "(a folder from before dse saved them: placed now, with the current artifacts, and a "
        "note says so). A line on stderr as each stage starts (-q: none).\n\n"
        "examples:\n"
        "  dse report results/heads\n"
        "  dse report results/heads --out heads.html --image heads_front.svg",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("results", metavar="RESULTS_DIR", help="results folder of a sweep")
    p.add_argument("--out", help="where to write the HTML page (default: RESULTS_DIR/report.html)")
    p.add_argument(
        "--image",
        metavar="PATH",
        help="also write the main figure as a static image (.png, .svg or .pdf; needs kaleido "
        "and Chrome or Chromium), without the page's linear / log buttons",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(command="report")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from dse.errors import ImageExportError
    from dse.report import load_results, write_image, write_report
    from dse.sweep.storage import warn
    from dse.sweep.study_reader import stale_results

    warn(stale_results(Path(args.results)))  # a damaged or newer journal beside summary.json
    res = load_results(args.results)
    path = write_report(res.path, args.out, progress=not args.quiet)
    feasible = len(res.feasible)
    print(
        f"wrote {path} ({len(res.trials):,} trials, {feasible:,} feasible, "
        f"{len(res.front):,} on the front)"
    )
    if feasible == 0:
        print("note: no feasible trial; the report shows the infeasible trials", file=sys.stderr)
    if args.image:
        try:
            img = write_image(res.path, args.image)
        except ImageExportError as exc:
            print(f"dse report: error: {exc}", file=sys.stderr)
            return 3
        print(f"wrote {img}")
    return 0
