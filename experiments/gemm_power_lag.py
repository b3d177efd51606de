"""Does the measured H200 GEMM power carry the previous rows' power (NVML averaging lag)?

Feeds docs/accuracy.md, "Latency and energy, MAPE" (why the energy target is missed: the NVML lag;
moving to docs/dev/ with the accuracy rewrite).

    OMP_NUM_THREADS=1 PYTHONPATH=. python experiments/gemm_power_lag.py [--data ../shared/data]
        [--bags 1]

aiconfigurator's H200 table reads `nvmlDeviceGetPowerUsage` (a ~1 s trailing average on this
part, docs/blind_h200.md) while each shape loops for 0.3-1 s right after the previous shape.
If the reading mixes in the previous shape's power, a row's power residual follows the power
of the row measured before it, not of the row after it. The file is written in sweep order
(per dtype: m, then n, then k descending; the two dtypes interleaved), which this checks:

1. the residual of the power model alone (`power` family at the measured utilisations and
   duration, no shape table), regressed on log(P_prev / P_i) and log(P_next / P_i) of the same
   dtype's neighbouring rows in file order, for calls under and over 0.1 ms;
2. the out-of-fold residual of the GEMM model (GroupKFold(5) by (n, k), as `dse fit`): its
   lag-1 autocorrelation in file order, and what a lag term would give honestly: its weight
   per duration class fitted on other shapes' rows, applied to held-out rows with the previous
   row's PREDICTED (out-of-fold) power only.

`--bags 1` scores the session-2 model (one tree fit, 4x faster). Prints plain text; results in
docs/accuracy.md (Level 1, "Why the energy target is missed").
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from dse.fitting.context import FitContext
from dse.fitting.gemm import cross_validate_gemm, gemm_rows, weight_shape_groups
from dse.fitting.power import fit_power_family, power_rows
from dse.models.gemm import GemmModel
from dse.spec.hardware import get_gpu

GPU = "h200_sxm"
SHORT_S = 1e-4  # the collector loops ~0.3 s below this duration per call, ~1 s above


def neighbour_terms(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """log(P_prev / P_i) and log(P_next / P_i) in row order (0 at the ends)."""
    prev = np.r_[0.0, x[:-1] - x[1:]]
    nxt = np.r_[x[1:] - x[:-1], 0.0]
    return prev, nxt


def lag_terms(
    e: np.ndarray, prev: np.ndarray, nxt: np.ndarray, short: np.ndarray
) -> list[tuple[str, np.ndarray, int]]:
    """Per duration class: (label, least-squares [intercept, weight of log(P_prev / P), weight
    of log(P_next / P)] of the log power residual e, rows)."""
    out = []
    for label, sel in (("< 0.1 ms", short), (">= 0.1 ms", ~short)):
        A = np.column_stack([np.ones(sel.sum()), prev[sel], nxt[sel]])
        out.append((label, np.linalg.lstsq(A, e[sel], rcond=None)[0], int(sel.sum())))
    return out


def mape(pred: np.ndarray, true: np.ndarray) -> float:
    return float(100 * np.mean(np.abs(pred / true - 1)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--bags", type=int, default=None, help="GemmModel bags (default: shipped)")
    args = ap.parse_args()
    with threadpool_limits(1):
        ctx = FitContext(Path(args.data), GPU, 0, cv=False, log=lambda s: None)
        pm = fit_power_family(ctx)[0].model
        allrows = gemm_rows(ctx.table("gemm"), GPU)
        for dtype in ("bfloat16", "fp8_block"):
            # Rows of one dtype, in file order (the reader keeps it).
            rows = allrows[allrows["dtype"] == dtype].reset_index(drop=True)
            lat = rows["latency_s"].to_numpy()
            pw = rows["power_w"].to_numpy()
            short = lat < SHORT_S
            util = power_rows(rows)
            spec = get_gpu(GPU)
            p0 = pm.predict(util["compute_util"], util["memory_util"], lat, gpu=spec)["power_w"]
            e0 = np.log(pw / p0)
            prev, nxt = neighbour_terms(np.log(p0))
            print(f"{dtype}: {len(rows)} rows")
            for label, c, n_rows in lag_terms(e0, prev, nxt, short):
                print(
                    f"  power model alone, calls {label} ({n_rows} rows): log residual = "
                    f"{c[0]:+.3f} {c[1]:+.3f} log(P_prev/P) {c[2]:+.3f} log(P_next/P)"
                )
            kw = {} if args.bags is None else {"bags": args.bags}

            def make(dtype: str = dtype, kw: dict = kw) -> GemmModel:
                return GemmModel(GPU, dtype, "vllm", power_model=pm, **kw)

            groups = weight_shape_groups(rows)
            cv = cross_validate_gemm(rows, make, 5, groups)
            p = cv["energy_j"] / cv["latency_s"]
            e = np.log(pw / p)
            ac = [np.corrcoef(e[lag:], e[:-lag])[0, 1] for lag in (1, 2, 5)]
            print(
                f"  GEMM model out of fold: power {mape(p, pw):.2f}%, energy "
                f"{mape(cv['energy_j'], rows['energy_j'].to_numpy()):.2f}%; autocorrelation of "
                f"the log residual in file order: lag 1 {ac[0]:.3f}, 2 {ac[1]:.3f}, 5 {ac[2]:.3f}"
            )
            prev, nxt = neighbour_terms(np.log(p))
            for label, c, _ in lag_terms(e, prev, nxt, short):
                print(
                    f"  out of fold, calls {label}: log residual = {c[0]:+.3f} "
                    f"{c[1]:+.3f} log(P_prev/P) {c[2]:+.3f} log(P_next/P)"
                )
            # Honest use: lag weight per duration class from other shapes' rows only.
            g = np.unique(groups, return_inverse=True)[1]
            fold = np.random.default_rng(0).permutation(g.max() + 1)[g] % 5
            adj = np.zeros_like(e)
            A = np.column_stack([np.ones(len(e)), prev])
            for f in range(5):
                tr, te = fold != f, fold == f
                for sel in (short, ~short):
                    c = np.linalg.lstsq(A[tr & sel], e[tr & sel], rcond=None)[0]
                    adj[te & sel] = A[te & sel] @ c
            p_lag = p * np.exp(adj)
            print(
                f"  lag term from the previous row's predicted power: power {mape(p, pw):.2f} -> "
                f"{mape(p_lag, pw):.2f}%, energy "
                f"{mape(cv['energy_j'], rows['energy_j'].to_numpy()):.2f} -> "
                f"{mape(p_lag * cv['latency_s'], rows['energy_j'].to_numpy()):.2f}%"
            )


if __name__ == "__main__":
    main()
