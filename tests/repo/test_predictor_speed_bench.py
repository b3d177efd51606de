"""benchmarks/predictor_speed.py (issue 37): its batches are the four 7-13B models, and its
worker times the full and the scan path of the checkout it runs in."""

from __future__ import annotations

import numpy as np
from benchmark_scripts import load_benchmark


def test_batches_are_the_four_models_and_the_worker_times_every_path() -> None:
    ps = load_benchmark("predictor_speed")
    rng = np.random.default_rng(0)
    for make in ps.BATCHES.values():
        cols = make(400, rng)
        arch = {
            tuple(int(cols[k][i]) for k in ("d_model", "n_layers", "n_kv_heads", "vocab_size"))
            for i in range(400)
        }
        assert len(arch) == 4
        assert set(np.unique(cols["gpu"])) == {"h100_sxm"}
    grid = ps.exact_grid(400, rng)  # an exact sweep's chunk: no configuration twice
    rows = {tuple(int(grid[k][i]) for k in ("d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff"))
            for i in range(400)}  # fmt: skip
    assert len(rows) == 400
    wide = ps.all_distinct(400, rng)
    assert len(np.unique(wide["prompt_tokens"])) > 300  # drawn freely, not from a grid
    out = ps.worker(30, 1)
    batches = {**ps.BATCHES, **ps.OTHER_BATCHES}
    keys = {f"{b}{s}_per_s" for b in batches for s in ("", "_scan")} | {"one_row_cpu_ms"}
    assert set(out) == keys
    assert all(np.isfinite(v) and v > 0 for v in out.values())
