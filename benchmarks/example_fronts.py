"""The fronts of the shipped example spaces, as a user gets them: each `search_spaces/*.yaml` run
with its own settings, and what its front holds.

    PYTHONPATH=. python benchmarks/example_fronts.py [--no-write]

Per example: configurations, feasible, distinct front configurations, how many front rows are
marked indistinguishable (inside a neighbour's predicted error band), how many the predictor
and the loss law flag as outside their fitted ranges, and the wall time of `dse sweep` (a fresh
process, interpreter start included). Writes the section "### Their fronts" of
docs/search_spaces.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from _docsection import replace_section  # noqa: E402  (benchmarks/, the script's folder)

EXAMPLES = ("gpu_batch", "dense_8b", "moe", "heads_study")
HEADING = "### Their fronts"


def _flagged(front: pd.DataFrame, column: str) -> int | None:
    if column not in front:
        return None
    return int(front[column].map(lambda v: str(v).strip().lower() in ("true", "1")).sum())


def run_example(name: str, out: Path) -> dict[str, object]:
    cmd = [sys.executable, "-m", "dse", "sweep", f"search_spaces/{name}.yaml"]
    t0 = time.perf_counter()
    subprocess.run(
        [*cmd, "--out", str(out), "-q", "--no-report"], cwd=REPO, check=True, capture_output=True
    )
    wall = time.perf_counter() - t0
    summary = json.loads((out / "summary.json").read_text())
    front = pd.read_csv(out / "front.csv")
    counts = summary["counts"]
    return {
        "command": f"`dse sweep search_spaces/{name}.yaml`",
        "sampler": summary["sampler"],
        "configurations": (summary.get("exact") or {}).get("configurations", counts["trials"]),
        "feasible": (summary.get("exact") or {}).get("feasible", counts["feasible"]),
        "front": len(front),
        "indistinguishable": int(front.get("indistinguishable", pd.Series(dtype=bool)).sum()),
        "predictor": _flagged(front, "pred.out_of_range"),
        "loss": _flagged(front, "loss_out_of_range"),
        "wall_s": wall,
    }


def table(rows: list[dict[str, object]]) -> str:
    lines = [
        "| command | sampler | configurations | feasible | front (distinct configurations) "
        "| indistinguishable | out of range on the front: predictor / loss law | wall time |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        loss = "-" if r["loss"] is None else r["loss"]
        lines.append(
            f"| {r['command']} | {r['sampler']} | {r['configurations']:,} | {r['feasible']:,} "
            f"| {r['front']} | {r['indistinguishable']} | {r['predictor']} / {loss} "
            f"| {r['wall_s']:.1f} s |"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [run_example(n, Path(tmp) / n) for n in EXAMPLES]
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    text = "\n".join(
        [
            HEADING,
            "",
            "Each example run with its own settings (`sampler: auto`, which enumerates spaces "
            "this small, so the fronts are exact), measured by `PYTHONPATH=. python "
            f"benchmarks/example_fronts.py` ({when}, commit {commit}, {platform.machine()}, "
            "2 CPU cores; the wall time includes interpreter start and the artifact load):",
            "",
            table(rows),
            "",
            "Out of range counts front rows the predictor (`pred.out_of_range`) or the loss law "
            "(`loss_out_of_range`) flags; `-` where the study has no loss. Indistinguishable: a "
            "front neighbour lies inside the row's predicted error band in every objective "
            "(a loss has no band, so fronts with a loss axis have none).",
        ]
    )
    print(text)
    if not args.no_write:
        replace_section(REPO / "docs" / "search_spaces.md", HEADING, text, "Search spaces")


if __name__ == "__main__":
    main()
