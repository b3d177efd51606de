"""The layer-op model and adapter of another checkout against this one's, in one process
(issue 37): alternating pairs of `predict(cols, texts=False)` on the same rows, CPU time.

    PYTHONPATH=. python benchmarks/layer_op_pairs.py --base /tmp/sl-base-main [--rounds 15] [--n 20000] [--stage]

The base's dse/models/layer_ops.py and dse/predict/adapters.py are loaded as modules of their
own; between the two runs of a pair the shipped h100_sxm layer-op model's class and the
`ADAPTERS` entries of the layer operators are switched, everything else is this checkout's
(so the base must differ from it in those two files alone). Each pair runs in turn order
base-branch, then branch-base. `--stage`: the CPU time of the layer-op adapter's calls alone,
not of the whole `predict`. Pinned to one core, one BLAS thread; prints a Markdown table of the
best times and the median (range) of the pairwise ratios base / branch (> 1: the branch is
faster). Writes nothing.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import importlib.util
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from predictor_profile import continuous, moe
from predictor_speed import all_distinct, exact_grid, sweep_like


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--base", required=True, help="the other checkout")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--stage", action="store_true", help="time the layer-op adapter alone")
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

    import dse.predict.adapters as ad
    from dse.predict import load_artifact, predict

    base = Path(args.base)
    old_lo = _load("base_layer_ops", base / "dse/models/layer_ops.py")
    old_ad = _load("base_adapters", base / "dse/predict/adapters.py")
    art, _ = load_artifact("h100_sxm")
    model = art.model(art.names("layer_op")[0])
    spent = [0.0]

    def timed(fn: Any) -> Any:
        def run(*a: Any, **k: Any) -> Any:
            t0 = time.process_time()
            try:
                return fn(*a, **k)
            finally:
                spent[0] += time.process_time() - t0

        return run

    kinds = ("elementwise", "embedding")
    fns = {False: timed(ad.ADAPTERS[kinds[0]]), True: timed(old_ad.price_layer_op)}
    classes = {False: type(model), True: old_lo.LayerOpModel}

    def use(old: bool) -> None:
        model.__class__ = classes[old]
        for k in kinds:
            ad.ADAPTERS[k] = fns[old]

    def once(cols: dict[str, np.ndarray], old: bool) -> float:
        use(old)
        spent[0] = 0.0
        t0 = time.process_time()
        predict(cols, texts=False)
        return spent[0] if args.stage else time.process_time() - t0

    batches = {
        "all distinct": all_distinct,
        "sweep-like": sweep_like,
        "exact-sweep grid": exact_grid,
        "MoE": moe,
        "continuous": continuous,
    }
    what = "layer-op stage" if args.stage else "`predict`"
    print(
        f"| batch | {what}, base best (ms) | branch best (ms) | median of pairwise ratios (range) |"
    )
    print("|---|---|---|---|")
    try:
        for name, make in batches.items():
            cols = make(args.n, np.random.default_rng(0))
            once(cols, True), once(cols, False)  # warm: lazy imports, packs
            t_base, t_branch, ratios = [], [], []
            for r in range(args.rounds):
                order = (True, False) if r % 2 == 0 else (False, True)
                t = {old: once(cols, old) for old in order}
                t_base.append(t[True])
                t_branch.append(t[False])
                ratios.append(t[True] / t[False])
            print(
                f"| {name} | {min(t_base) * 1e3:.0f} | {min(t_branch) * 1e3:.0f} | "
                f"{np.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) |",
                flush=True,
            )
    finally:
        use(False)


if __name__ == "__main__":
    main()
