"""Test helper: real, small results folders written by `dse sweep` (docs/results_format.md).

Used by the report, export, browser, sweep and front tests (`SMALL`: the small space of
the sweep and front tests). Each sweep runs in-process through the `dse`
command with a fixed sampler and seed, so the folders are the ones a user would get.
"""

from __future__ import annotations

from pathlib import Path

from dse.cli import main

REPO = Path(__file__).resolve().parents[1]

# 2 x 4 x 2 x 2 x 2 = 64 configurations; n_heads 24 does not divide d_model 4096 (invalid),
# and the parameter budget rules out part of the rest (infeasible).
SMALL = """\
name: small
hardware: h100_sxm
workload: {batch_size: 16, prompt_tokens: 1024, output_tokens: 256, tensor_parallel: 1}
space:
  d_model: {values: [3072, 4096]}
  n_layers: {low: 24, high: 48, step: 8}
  n_heads: {values: [24, 32]}
  n_kv_heads: {values: [4, 8]}
  d_ff: {values: [8192, 16384]}
  vocab_size: 128256
constraints:
  active_params: {min: 5.0e+9, max: 12.0e+9}
  fits_memory: true
objectives:
  latency: {metric: request}
  energy: {source: hymell}
study: {sampler: random, trials: 48, seed: 0, batch_size: 16}
"""


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
