"""benchmarks/small_calls.py states issue 18's verdict from the run's own numbers (never a
hard-coded 'met'): the median of the fresh-process rounds and the `--model` CLI wall."""

from __future__ import annotations

import os

from benchmark_scripts import load_benchmark

# The script sets one BLAS thread for its own workers on import; this process keeps the
# machine's settings (and so do the processes other tests start).
_saved = dict(os.environ)
small_calls = load_benchmark("small_calls")
os.environ.clear()
os.environ.update(_saved)


def _runs(*ms: float) -> list[dict[str, float]]:
    return [{"one_row_cpu_ms": m} for m in ms]


def test_met_only_when_the_median_and_the_cli_are_under_their_targets() -> None:
    walls = {(1, "model"): [0.4, 0.5, 0.45]}
    text = small_calls.verdict(_runs(4.1, 4.9, 6.0), walls, 1, [4.2, 5.4])
    assert text.startswith("Targets in this run (met)")
    assert "4.90 ms median" in text and "2 of 3 fresh-process rounds" in text
    assert "taking turns 1 of 2 rounds" in text and "0.45 s" in text
    slow = small_calls.verdict(_runs(4.1, 5.2, 6.0), walls, 1, [])
    assert slow.startswith("Targets in this run (not met)") and "taking turns" not in slow
    slow_cli = small_calls.verdict(_runs(3.0), {(1, "model"): [0.9]}, 1, [])
    assert slow_cli.startswith("Targets in this run (not met)")
