"""Test helper: real, small results folders written by `dse sweep` (docs/results_format.md).

Used by the report, export and browser tests. Each sweep runs in-process through the `dse`
command with a fixed sampler and seed, so the folders are the ones a user would get.
"""

from __future__ import annotations

from pathlib import Path

from dse.cli import main

REPO = Path(__file__).resolve().parents[1]


def run_sweep(space: str | Path, out: Path, *options: str) -> Path:
    """`dse sweep SPACE --out OUT -q OPTIONS...`; returns the results folder."""
    path = Path(space)
    if not path.is_absolute():
        path = REPO / path
    rc = main(["sweep", str(path), "--out", str(out), "-q", *options])
    assert rc == 0, f"dse sweep {space} {' '.join(options)} exited with {rc}"
    return out


def narrow_space(folder: Path) -> Path:
    """The dense 7-9B space with a parameter budget only 2 of its 2,268 configurations meet
    (Llama-3-8B's exact count): the sweep starts, yet a small random sample finds no feasible
    trial."""
    text = (REPO / "tests" / "data" / "spaces" / "dense_8b.yaml").read_text()
    budget = "active_params: {min: 7.0e+9, max: 9.0e+9}"
    assert budget in text
    path = folder / "narrow.yaml"
    path.write_text(text.replace(budget, "active_params: {min: 8030261248, max: 8030261248}"))
    return path


def no_feasible_sweep(folder: Path) -> Path:
    """A real results folder whose 30 trials are all infeasible (checked by the callers)."""
    return run_sweep(
        narrow_space(folder), folder / "res", "--sampler", "random", "--trials", "30", "--seed", "0"
    )
