"""Cross-validation by held-out (n, k) weight shape of GEMM model variants, compared row by row.

Feeds docs/accuracy.md, "Level 1: GEMM time and energy" / "Latency and energy, MAPE" (what was tried,
sessions 2-3; moving to docs/dev/ with the accuracy rewrite).

    OMP_NUM_THREADS=1 PYTHONPATH=. python experiments/gemm_cv_variants.py \\
        --target h100_sxm:trtllm:bfloat16 --variant 'bags=1' --variant '' --variant 'seed=1'

Each variant is a set of `GemmModel` keyword arguments (`key=value,key=value`; '' = the
defaults `dse fit` uses). Every variant is scored with the GroupKFold(5) by (n, k) of
`dse fit` (the same code path, so the first variant with defaults reproduces the manifest's
`cv.latency_mape_pct`), and each later variant is compared with the first one on the same
rows: the MAPE difference and its spread under a bootstrap over weight shapes (how much of the
difference one resample of the 389 shapes would move). Energy and power where the rows have
measured power (H200). Prints one line per variant; results in docs/accuracy.md (Level 1).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from dse.fitting.context import FitContext
from dse.fitting.gemm import cross_validate_gemm, gemm_rows, weight_shape_groups
from dse.fitting.power import fit_power_family
from dse.models.gemm import GemmModel


def parse_variant(text: str) -> dict[str, float | int]:
    out: dict[str, float | int] = {}
    for item in filter(None, text.split(",")):
        key, value = item.split("=")
        out[key.strip()] = int(value) if value.strip().isdigit() else float(value)
    return out


def bootstrap_sd(diff: np.ndarray, groups: np.ndarray, n_boot: int = 2000) -> float:
    """Spread of the mean row difference when the weight shapes are resampled."""
    g = np.unique(groups, return_inverse=True)[1]
    n_g = g.max() + 1
    s, c = np.bincount(g, diff, n_g), np.bincount(g, None, n_g)
    rng = np.random.default_rng(0)
    boots = [s[i].sum() / c[i].sum() for i in (rng.integers(0, n_g, n_g) for _ in range(n_boot))]
    return float(np.std(boots))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--target", action="append", required=True, help="gpu:engine:dtype")
    ap.add_argument("--variant", action="append", required=True, help="k=v,... ('' = defaults)")
    args = ap.parse_args()
    with threadpool_limits(1):
        for target in args.target:
            gpu, engine, dtype = target.split(":")
            ctx = FitContext(Path(args.data), gpu, 0, cv=False, log=lambda s: None)
            power = fit_power_family(ctx) if gpu == "h200_sxm" else []
            pm = power[0].model if power else None
            rows = gemm_rows(ctx.table("gemm"), gpu)
            rows = rows[(rows["engine"] == engine) & (rows["dtype"] == dtype)]
            rows = rows.reset_index(drop=True)
            groups = weight_shape_groups(rows)
            first: dict[str, np.ndarray] | None = None
            for text in args.variant:
                kw = parse_variant(text)
                t0 = time.perf_counter()

                spec = {"gpu": gpu, "dtype": dtype, "engine": engine, "power_model": pm, **kw}

                def make(spec: dict = spec) -> GemmModel:
                    return GemmModel(**spec)

                cv = cross_validate_gemm(rows, make, 5, groups)
                ape = {"latency": np.abs(cv["latency_s"] / rows["latency_s"].to_numpy() - 1)}
                if np.isfinite(rows["power_w"]).all():
                    ape["energy"] = np.abs(cv["energy_j"] / rows["energy_j"].to_numpy() - 1)
                    power_pred = cv["energy_j"] / cv["latency_s"]
                    ape["power"] = np.abs(power_pred / rows["power_w"].to_numpy() - 1)
                parts = []
                for key, a in ape.items():
                    a = 100 * a
                    part = f"{key} {a.mean():.3f}%"
                    if first is not None:
                        d = a - first[key]
                        part += f" ({d.mean():+.3f}, sd {bootstrap_sd(d, groups):.3f})"
                    parts.append(part)
                if first is None:
                    first = {key: 100 * a for key, a in ape.items()}
                print(
                    f"{target} [{text or 'defaults'}]: "
                    + "; ".join(parts)
                    + f"  ({time.perf_counter() - t0:.0f} s)",
                    flush=True,
                )


if __name__ == "__main__":
    main()
