"""Where a bulk prediction spends its time (issue 37): cProfile of `dse.predict.predict` on
batches of four 7-13B models on h100_sxm (benchmarks/predictor_speed.py's all-distinct and
sweep-like batches), its exact-sweep grid (distinct dense decoders, `exact_grid`), a
Mixtral-like MoE batch and a continuous-batching batch, split into the predictor's stages by the
cumulative time of the function of each stage.

    PYTHONPATH=. python benchmarks/predictor_profile.py [--n 50000] [--scan]

`--scan`: `predict(cols, texts=False)`, what a sweep's scan calls (default: `predict(cols)`).

Pinned to one core, one BLAS thread; prints a Markdown table (shares of `predict`'s time under
the profiler, which slows the many small calls more than the big ones: read shares, not
rates; benchmarks/predictor_speed.py gives the rates). Writes nothing.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from predictor_speed import all_distinct, exact_grid, sweep_like

# (label, file suffix, function): the stages, each the cumulative time of its function. The
# Level-1 rows are parts of "Level-1 operator models"; the others do not overlap.
STAGES = [
    ("operator lists (`ops.forward_ops`)", "predict/ops.py", "forward_ops"),
    ("shape groups (`pricing.phase_groups`)", "predict/pricing.py", "phase_groups"),
    ("Level-1 operator models (`pricing._level1`)", "predict/pricing.py", "_level1"),
    ("- GEMMs", "predict/adapters.py", "price_gemm"),
    ("- layer ops (norms, adds, activation...)", "predict/adapters.py", "price_layer_op"),
    ("- prefill attention", "predict/adapters.py", "price_context_attention"),
    ("- decode attention", "predict/adapters.py", "price_generation_attention"),
    ("- MoE", "predict/adapters.py", "price_moe"),
    ("- all-reduce", "predict/adapters.py", "price_allreduce"),
    ("- operator power (`op_power.op_power_w`)", "predict/op_power.py", "op_power_w"),
    ("Level 2 (`pricing._apply_level2`)", "predict/pricing.py", "_apply_level2"),
    ("phase totals (`pricing._finish`, `_finish_grouped`)", "predict/pricing.py", "_finish"),
    ("", "predict/pricing.py", "_finish_grouped"),
    ("Level 3 (`request._level3_terms`)", "predict/request.py", "_level3_terms"),
    ("range flags (`flags._range_flags`, `_oor_degree`)", "predict/flags.py", "_range_flags"),
    ("", "predict/flags.py", "_oor_degree"),
    ("out-of-range text (`flags._miss_text`)", "predict/flags.py", "_miss_text"),
    ("continuous batching (`serving.apply`)", "predict/serving.py", "apply"),
    ("totals, bands (`_totals`, `bounded_energy_band`)", "predict/request.py", "_totals"),
    ("", "predict/power_bounds.py", "bounded_energy_band"),
    ("breakdown, provenance", "predict/request.py", "_breakdown_columns"),
    ("", "predict/request.py", "_provenance"),
]


def moe(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Mixtral-8x7B-like rows (8 experts, top 2) at all-distinct workloads."""
    cols = all_distinct(n, rng)
    cols.update(
        d_model=np.full(n, 4096),
        n_layers=np.full(n, 32),
        n_heads=np.full(n, 32),
        n_kv_heads=np.full(n, 8),
        vocab_size=np.full(n, 32000),
        n_experts=np.full(n, 8),
        top_k=np.full(n, 2),
        d_ff_expert=np.full(n, 14336),
    )
    return cols


def continuous(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The all-distinct rows under continuous batching."""
    cols = all_distinct(n, rng)
    cols["batching"] = np.full(n, "continuous")
    return cols


def profile(
    cols: dict[str, np.ndarray], scan: bool = False
) -> tuple[float, dict[tuple[str, str], float]]:
    from dse.predict import predict

    kw = {"texts": False} if scan else {}
    predict(cols, **kw)  # warm: lazy imports, tables
    prof = cProfile.Profile(time.process_time)  # CPU time: the machine may be shared
    prof.enable()
    predict(cols, **kw)
    prof.disable()
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    cum: dict[tuple[str, str], float] = {}
    total = 0.0
    for (file, _line, func), (_cc, _nc, _tt, ct, _callers) in stats.items():
        if func == "predict" and file.endswith("predict/request.py"):
            total = max(total, ct)
        for _label, suffix, name in STAGES:
            if func == name and file.endswith(suffix):
                cum[(suffix, name)] = cum.get((suffix, name), 0.0) + ct
    return total, cum


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--n", type=int, default=50_000)
    p.add_argument("--scan", action="store_true", help="predict(cols, texts=False)")
    args = p.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    batches = {
        "all distinct": all_distinct,
        "sweep-like": sweep_like,
        "exact-sweep grid": exact_grid,
        "MoE": moe,
        "continuous": continuous,
    }
    results = {
        k: profile(make(args.n, np.random.default_rng(0)), args.scan) for k, make in batches.items()
    }
    print("| stage | " + " | ".join(batches) + " |")
    print("|---|" + "---|" * len(batches))
    rows: list[tuple[str, list[float]]] = []
    for label, suffix, name in STAGES:
        share = [100 * r[1].get((suffix, name), 0.0) / r[0] for r in results.values()]
        if label:
            rows.append((label, share))
        else:  # a second function of the stage above
            rows[-1] = (rows[-1][0], [a + b for a, b in zip(rows[-1][1], share, strict=True)])
    for label, share in rows:
        print(f"| {label} | " + " | ".join(f"{s:.0f}%" for s in share) + " |")
    print(
        "| `predict`, CPU s under the profiler | "
        + " | ".join(f"{r[0]:.2f}" for r in results.values())
        + " |"
    )


if __name__ == "__main__":
    main()
