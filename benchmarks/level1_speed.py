"""Level-1 GEMM prediction speed: predictions per second in one batch on one core.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 PYTHONPATH=. python benchmarks/level1_speed.py \
        [--gpu h100_sxm] [--n 1000000] [--repeat 5]

Loads the frozen artifact (timed too), draws random GEMM shapes over the fitted range (seeded),
and times `Gemm.predict` (latency, energy, power and the itemised terms) on the whole batch.
Prints the best of --repeat runs; the result goes in docs/accuracy.md.
"""

from __future__ import annotations

import argparse
import os
import time

# One core: set before numpy loads its BLAS.
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")

import numpy as np  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu", default="h100_sxm")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()

    from dse.predict.gemm_choice import Gemm

    t0 = time.perf_counter()
    gemm = Gemm.load(args.gpu)
    model = gemm.model(args.dtype)
    load_s = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    lo = {k: np.log2(v[0]) for k, v in model.fitted_range().items()}
    hi = {k: np.log2(v[1]) for k, v in model.fitted_range().items()}
    m, n, k = (np.round(2.0 ** rng.uniform(lo[a], hi[a], args.n)) for a in ("m", "n", "k"))
    best = float("inf")
    for _ in range(args.repeat):
        t = time.perf_counter()
        out = gemm.predict(m, n, k, args.dtype)
        best = min(best, time.perf_counter() - t)
    assert np.isfinite(out["latency_s"]).all()
    print(
        f"gpu={args.gpu} dtype={args.dtype} artifact={gemm.artifact.artifact_id} "
        f"load={load_s * 1e3:.1f} ms  batch={args.n}  best of {args.repeat}: {best:.3f} s  "
        f"-> {args.n / best / 1e6:.2f} M predictions/s (one core)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
