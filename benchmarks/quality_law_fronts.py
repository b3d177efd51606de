"""How much the choice of loss law moves the shipped examples' fronts.

Every shipped example with a loss objective (search_spaces/*.yaml and the attention-family
examples in examples/) is enumerated and evaluated once per law (its own law, then each other
law that can price it: the dense laws, joint_moe, krajewski2024, and gqa_chen2025,
besiroglu_heads and shen2024 on dense spaces, auto), everything else unchanged. Per law: the exact front's size,
how many of its configurations the example's own law also puts on its front (kept), how many
front rows the law flags out of its range, and the loss range along the front.

    PYTHONPATH=. python benchmarks/quality_law_fronts.py [--no-write]

Writes the section "## How much the law moves the shipped fronts" of docs/quality.md.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from _docsection import replace_section  # noqa: E402  (benchmarks/, the script's folder)

from dse import pareto  # noqa: E402
from dse.spec.space import DENSE_ONLY_LAWS, LOSS_LAWS, load_space  # noqa: E402
from dse.sweep._evaluate import evaluate  # noqa: E402
from dse.sweep.results import directions  # noqa: E402

EXAMPLES = (
    "search_spaces/gpu_batch",
    "search_spaces/dense_8b",
    "search_spaces/moe",
    "search_spaces/heads_study",
    "examples/attention_families_8b",
    "examples/mamba_hybrids_8b",
)
LAWS = LOSS_LAWS  # every law a space can ask for (dse.spec.space)
DENSE_ONLY = DENSE_ONLY_LAWS
HEADING = "## How much the law moves the shipped fronts"


def _with_law(text: str, own: str, law: str) -> str:
    return text.replace(f"source: {own}", f"source: {law}")


def _front(path: Path) -> tuple[set[tuple], dict[str, object]]:
    space = load_space(path)
    cols = space.enumerate()
    ev = evaluate(space, cols, with_tokens2wh=False)
    rows = pareto.front_indices(ev.objectives, ev.feasible, directions(space))
    names = [p.name for p in space.searched]
    configs = {tuple(np.asarray(cols[n])[i].item() for n in names) for i in rows}
    j = list(space.objectives.names).index(next(n for n in space.objectives.names if "loss" in n))
    loss = ev.objectives[rows, j]
    flagged = int(np.asarray(ev.quality["out_of_range"])[rows].sum())
    laws = sorted({str(v) for v in np.asarray(ev.quality["law"])[rows]})
    return configs, {
        "n": len(rows),
        "flagged": flagged,
        "loss": (float(loss.min()), float(loss.max())),
        "laws": laws,
    }


def measure() -> list[str]:
    lines = []
    for where in EXAMPLES:
        path = REPO / f"{where}.yaml"
        name = Path(where).name
        text = path.read_text()
        own = load_space(path).objectives.loss_law
        if own is None:
            continue
        base, _ = _front(path)
        moe = "n_experts" in text and "n_experts: 1\n" not in text
        for law in LAWS:
            if law in DENSE_ONLY and moe:
                continue  # a dense-only law on an MoE space: the located error
            with tempfile.TemporaryDirectory() as tmp:
                p = Path(tmp) / f"{name}.yaml"
                p.write_text(_with_law(text, own, law))
                configs, info = _front(p)
            kept = len(configs & base)
            lo, hi = info["loss"]  # type: ignore[misc]
            mark = " (own)" if law == own else ""
            lines.append(
                f"| `{name}` | `{law}`{mark} | {', '.join(info['laws'])} | {info['n']} | "  # type: ignore[arg-type]
                f"{kept} of {len(base)} | {info['flagged']} | {lo:.3f} - {hi:.3f} |"
            )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-write", action="store_true", help="print, do not edit the docs")
    args = ap.parse_args()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO
    ).stdout.strip()
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    text = "\n".join(
        [
            HEADING,
            "",
            "Each shipped example with a loss objective, enumerated and evaluated once per law "
            "with everything else unchanged (exact fronts), measured by `PYTHONPATH=. python "
            f"benchmarks/quality_law_fronts.py` ({when}, commit {commit}). Kept: front "
            "configurations the example's own law also has on its front. Out of range: front "
            "rows the law flags. Losses of different laws are on different data and tokenizers: "
            "compare the fronts, not the numbers across laws.",
            "",
            "| example | law asked | priced by | front | kept | out of range | loss on the front |",
            "|---|---|---|---|---|---|---|",
            *measure(),
        ]
    )
    print(text)
    if not args.no_write:
        replace_section(REPO / "docs" / "quality.md", HEADING, text, "Model quality")


if __name__ == "__main__":
    main()
