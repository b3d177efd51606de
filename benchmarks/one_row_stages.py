"""Where one configuration's warm `predict` call spends its time, stage by stage (issue 37).

    PYTHONPATH=. python benchmarks/one_row_stages.py [--calls 300] [--rounds 3]

The predictor's steps are wrapped in place (this process only) by a timer that charges each
stage its own thread CPU time (`time.thread_time_ns`, which other jobs on a shared machine do
not move), less that of the wrapped stages it calls: exclusive time per stage, summing to the
call. The worker of benchmarks/one_row_instructions.py: 50 one-row warm-up calls (sweep-like,
h100_sxm), then `--calls` one-row calls timed; the round with the smallest total is printed,
as a table of microseconds per call. The timers cost ~0.5 us a wrapped call (~60 a
prediction): the shares, not the absolute numbers, are the measurement; the instruction count
of a call is benchmarks/one_row_instructions.py's. Writes nothing.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import functools
import importlib
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

# (module, attribute path in it, stage). Several attributes may share a stage; a stage's time
# is what its functions run less the wrapped functions they call.
STAGES: tuple[tuple[str, str, str], ...] = (
    ("dse.spec.columns", "as_columns", "input check, columns"),
    ("dse.predict.request", "engine_traits", "engine traits, artifact"),
    ("dse.predict.request", "resolve_artifact", "engine traits, artifact"),
    ("dse.predict.request", "kv_memory", "KV memory, waves"),
    ("dse.predict.request", "kv_waves", "KV memory, waves"),
    ("dse.predict.request", "forward_ops", "operator lists"),
    ("dse.predict.ops", "LayerShapes.of", "operator lists"),
    ("dse.predict.request", "decode_nodes", "operator lists"),
    ("dse.predict.pricing", "Pricer._stacked", "Level 1: stacking glue"),
    ("dse.predict.stacking", "split_price", "Level 1: stacking glue"),
    ("dse.predict.stacking", "stack_ops", "Level 1: stacking glue"),
    ("dse.predict.stacking", "STACKED:gemm", "Level 1: GEMMs"),
    ("dse.predict.stacking", "STACKED:allreduce", "Level 1: all-reduces"),
    ("dse.predict.stacking", "STACKED:moe", "Level 1: MoE"),
    ("dse.predict.stacking", "STACKED:elementwise", "Level 1: layer operators"),
    ("dse.predict.pricing", "Pricer._price_op", "Level 1: attention (per operator)"),
    ("dse.predict.pricing", "Pricer._level1", "Level 1: per-operator loop"),
    ("dse.predict.pricing", "roofline_times", "Level 1: roofline"),
    ("dse.predict.pricing", "Pricer._from_price", "Level 1: per-operator loop"),
    ("dse.predict.op_power", "_Batch.resolve", "Level 1: operator power (one call)"),
    ("dse.predict.pricing", "Pricer._apply_level2", "Level 2"),
    ("dse.predict.pricing", "_finish", "phase totals (node axis)"),
    ("dse.predict.request", "global_inputs", "Level 3"),
    ("dse.predict.request", "_level3_terms", "Level 3"),
    ("dse.predict.request", "apply_level3", "Level 3"),
    ("dse.predict.request", "_calibrated_energy", "power calibration"),
    ("dse.predict.request", "_range_flags", "flags, out-of-range text"),
    ("dse.predict.request", "_oor_degree", "flags, out-of-range text"),
    ("dse.predict.request", "_miss_text", "flags, out-of-range text"),
    ("dse.predict.request", "_bands", "totals, bands"),
    ("dse.predict.request", "_totals", "totals, bands"),
    ("dse.predict.request", "bounded_energy_band", "totals, bands"),
    ("dse.predict.request", "_breakdown_columns", "breakdown, provenance"),
    ("dse.predict.request", "_provenance", "breakdown, provenance"),
    ("dse.models._nn", "MLP.predict", "MLP forward passes (all levels)"),
    ("dse.models._nn", "_StackedMembers.outputs", "MLP forward passes (all levels)"),
    ("dse.predict.request", "predict_columns", "the rest (predict, predict_columns, glue)"),
)


class StageClock:
    """Exclusive thread CPU time per stage of the wrapped functions."""

    def __init__(self) -> None:
        self.ns: dict[str, int] = {}
        self._inner: list[int] = []  # per open call, the time of the wrapped calls inside it

    def wrap(self, fn: Callable[..., Any], stage: str) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.thread_time_ns()
            self._inner.append(0)
            try:
                return fn(*args, **kwargs)
            finally:
                inner = self._inner.pop()
                dt = time.thread_time_ns() - t0
                self.ns[stage] = self.ns.get(stage, 0) + dt - inner
                if self._inner:
                    self._inner[-1] += dt

        return timed


def install(clock: StageClock) -> Callable[..., Any]:
    """Wrap every STAGES entry in place; returns `predict` wrapped as the outermost stage."""
    for module, path, stage in STAGES:
        mod = importlib.import_module(module)
        if path.startswith("STACKED:"):  # the stacked adapters are held in a dict
            table, kind = mod.STACKED, path.split(":", 1)[1]
            if kind == "elementwise":  # layer operators and the embedding share one adapter
                fn = clock.wrap(table[kind], stage)
                table["elementwise"] = table["embedding"] = fn
            else:
                table[kind] = clock.wrap(table[kind], stage)
            continue
        owner: Any = mod
        *parents, name = path.split(".")
        for p in parents:
            owner = getattr(owner, p)
        setattr(owner, name, clock.wrap(getattr(owner, name), stage))
    from dse.predict import request

    return clock.wrap(request.predict, "the rest (predict, predict_columns, glue)")


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--calls", type=int, default=300, help="one-row calls timed per round")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    import numpy as np
    from predictor_speed import sweep_like

    clock = StageClock()
    predict = install(clock)
    warm = sweep_like(50, np.random.default_rng(38))
    for i in range(50):
        predict({k: v[i : i + 1] for k, v in warm.items()})
    rows = sweep_like(args.calls, np.random.default_rng(37))
    calls = [{k: v[i : i + 1] for k, v in rows.items()} for i in range(args.calls)]
    best: dict[str, int] | None = None
    for _ in range(args.rounds):
        clock.ns.clear()
        for c in calls:
            predict(c)
        if best is None or sum(clock.ns.values()) < sum(best.values()):
            best = dict(clock.ns)
    assert best is not None
    total = sum(best.values())
    print("| stage | us per call | share |")
    print("|---|---|---|")
    for stage, ns in sorted(best.items(), key=lambda kv: -kv[1]):
        print(f"| {stage} | {ns / args.calls / 1e3:.0f} | {ns / total:.0%} |")
    print(f"| total | {total / args.calls / 1e3:.0f} | |")


if __name__ == "__main__":
    main()
