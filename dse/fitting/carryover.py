"""Carry-over detection: measured kernel power that follows the previous row of the table more
than the kernel's own work.

aiconfigurator's H200 tables (vLLM 0.22.0) give one mean NVML board power per row, measured
while that kernel looped for about a second right after the previous row's kernel. The board
does not settle in between: a short kernel measured after a ~690 W one reads high (in MoE token
sweeps power falls 682 -> 175 W from 1 to 16 tokens while the kernel gets longer). The test here:

1. `own_work_log_power`: log power predicted from the row's OWN features only (out of fold, so a
   row never predicts itself), the power its work explains;
2. residual r_i = log p_i - own_i, and the pull of the previous row (in file order)
   d_i = log p_{i-1} - own_i, how far the previous row's power sits from this row's own level;
3. the table's lag slope a = sum(r d) / sum(d d) and the correlation of r with d. Below
   `MIN_LAG_CORR` the table shows no carry-over and nothing is flagged; otherwise a row is
   flagged when it deviates from its own level by more than `MIN_DEVIATION` in the previous
   row's direction and sits closer to the previous row's power than to its own level
   (|log p_i - log p_{i-1}| < |r_i|): it follows the previous row more than its own work.

Choice (measured on the H200 tables, docs/accuracy.md "Carry-over"): the monotone-decay pattern
of token sweeps needs consecutive sweep rows, but the files interleave layouts (a run of rows of
one layout is 1 row in GEMM, at most 3 in prefill attention, 11-14 in MoE and decode), so only
the lag test applies to every table. The plain autocorrelation of residuals in file order is no
test either: neighbouring rows share shapes, so a weak own-work model's errors correlate without
any carry-over (with this own-work fit: GEMM 0.43, attention and MoE -0.05..0.09).
Pure functions: arrays in, arrays out, in file order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from dse.models.threads import threaded_fit

# Correlation of the residual with the previous row's pull below which a table is clean: H200
# GEMM measures 0.27, H200 attention and MoE -0.02..0.02 (experiments/carryover_detect.py);
# iid noise gives |corr| ~ 1/sqrt(rows) (0.01 at 10,000 rows).
MIN_LAG_CORR = 0.15
# A row must sit this far (log units, ~10%) from its own level to be flagged: about the scatter
# of equal-work rows once carry-over is gone, so noise alone rarely qualifies.
MIN_DEVIATION = 0.10
OWN_FOLDS = 5


@dataclass(frozen=True)
class CarryOver:
    """The detector's verdict on one table (arrays in file order)."""

    flags: np.ndarray  # bool per row: follows the previous row more than its own work
    lag_corr: float  # corr(residual, previous row's pull); NaN below 3 rows
    lag_slope: float  # share of the previous row's pull the residual carries (0..1 physical)

    def summary(self, rule: str = "") -> dict[str, object]:
        return {
            "rows": int(self.flags.size),
            "rows_flagged": int(self.flags.sum()),
            "lag_corr": round(float(self.lag_corr), 3),
            "lag_slope": round(float(self.lag_slope), 3),
            "rule": rule or RULE,
        }


RULE = (
    f"lag test in file order: residual of log power against an out-of-fold fit on the row's own "
    f"features, regressed on the previous row's log power; table flagged when corr >= "
    f"{MIN_LAG_CORR}; row dropped when it deviates > {MIN_DEVIATION} (log) toward the previous "
    f"row and sits closer to it than to its own level"
)


def detect_carryover(
    log_power: np.ndarray,
    own_log_power: np.ndarray,
    min_corr: float = MIN_LAG_CORR,
    min_deviation: float = MIN_DEVIATION,
) -> CarryOver:
    """Flag rows whose power follows the previous row (file order) more than their own work.

    log_power: log of measured power (W) per row, in file order; own_log_power: the log power
    the row's own features predict (out of fold, `own_work_log_power`)."""
    lp = np.asarray(log_power, dtype=np.float64)
    own = np.asarray(own_log_power, dtype=np.float64)
    flags = np.zeros(lp.size, dtype=bool)
    if lp.size < 3:
        return CarryOver(flags, float("nan"), float("nan"))
    r = (lp - own)[1:]
    d = lp[:-1] - own[1:]
    ok = np.isfinite(r) & np.isfinite(d)
    if ok.sum() < 3 or np.std(d[ok]) == 0 or np.std(r[ok]) == 0:
        return CarryOver(flags, float("nan"), float("nan"))
    corr = float(np.corrcoef(r[ok], d[ok])[0, 1])
    slope = float(np.sum(r[ok] * d[ok]) / np.sum(d[ok] * d[ok]))
    if corr < min_corr:
        return CarryOver(flags, corr, slope)
    toward = np.sign(r) == np.sign(d)
    follows = np.abs(lp[1:] - lp[:-1]) < np.abs(r)
    flags[1:] = ok & toward & (np.abs(r) > min_deviation) & follows
    return CarryOver(flags, corr, slope)


@threaded_fit  # the trees' OpenMP threads: 1 unless `dse fit --threads` says otherwise (on a
# loaded 2-core VM their default of one per core made a 4,000-row detector test take 300 s)
def own_work_log_power(features: pd.DataFrame, power_w: np.ndarray, seed: int = 0) -> np.ndarray:
    """Out-of-fold log power from the row's own features (numeric columns; strings are coded),
    gradient-boosted trees on the median (absolute loss: the rows lifted by
    carry-over do not lift the level), `OWN_FOLDS` row folds: the level the kernel's own work explains."""
    from sklearn.ensemble import HistGradientBoostingRegressor
    from sklearn.model_selection import KFold

    X = np.column_stack(
        [
            pd.factorize(features[c])[0].astype(np.float64)
            if not pd.api.types.is_numeric_dtype(features[c])
            else features[c].to_numpy(np.float64)
            for c in features.columns
        ]
    )
    y = np.log(np.asarray(power_w, dtype=np.float64))
    out = np.full(y.size, np.nan)
    if y.size < 2 * OWN_FOLDS:
        return out
    for tr, te in KFold(OWN_FOLDS, shuffle=True, random_state=seed).split(X):
        m = HistGradientBoostingRegressor(
            loss="absolute_error", max_iter=200, random_state=seed
        ).fit(X[tr], y[tr])
        out[te] = m.predict(X[te])
    return out
