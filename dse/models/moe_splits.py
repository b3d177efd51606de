"""Fused-MoE parallel splits whose measured curve is not the physics of the split (issue 19).

On one rank of a moe_tp x moe_ep group, doubling moe_tp halves the local expert width and
doubling moe_ep halves the local experts (and, balanced, the routed slots): the rank's work
halves and its time can only stay (launch floor) or fall. In the aiconfigurator TRT-LLM 1.3.0rc20
CUTLASS tables (H100 bf16, fp8) about two dozen (layout, moe_tp, moe_ep) splits each run ~2x
*slower* over the whole token range than the split with half their parallelism (e.g.
5120/8192/1/16 at moe_tp 2: 5.7-8x its HBM floor at every token count, while tp 1 / 4 / 8 run at
1.1-1.9x); the same splits in the fp8_block (CUTLASS, block-scaled) table do not. A kernel choice
of the collector's autotuner, not of the layout: no model of the layout can predict it, and
fitted on, it drags every other prediction. `split_anomalies` names such series so that fitting
leaves them out; docs/dev/accuracy-journal.md (session 13) reports errors with and without them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

# a split slower than its half-parallel twin by more than this (at the median over token counts)
# is not physics: halving the rank's work never costs 30% more time in a sane kernel choice
RATIO = 1.3
# the columns that name a series of MoE calls over token counts (`dse.fitting.plausible.LABELS`
# names an MoE row by them and its token count)
SERIES = (
    "gpu",
    "engine",
    "dtype",
    "hidden_size",
    "inter_size",
    "topk",
    "num_experts",
    "moe_tp_size",
    "moe_ep_size",
    "distribution",
)


def twin_ratios(rows: pd.DataFrame) -> np.ndarray:
    """Per row: its latency over that of the same call with moe_tp or moe_ep halved (the larger
    of the two where both exist; NaN where neither was measured)."""
    cols = [c for c in SERIES if c in rows] + ["num_tokens"]
    base = rows[cols].reset_index(drop=True).assign(_y=rows["latency_s"].to_numpy(float))
    base["_i"] = np.arange(len(base))
    worst = np.full(len(base), np.nan)
    for par in ("moe_tp_size", "moe_ep_size"):
        if par not in base:
            continue
        half = base[[*cols, "_y"]].rename(columns={"_y": "_half"})
        half[par] = half[par] * 2  # the row of split p/2, keyed as if it were split p
        j = base.merge(half, on=cols, how="inner")
        q = (j["_y"] / j["_half"]).to_numpy()
        idx = j["_i"].to_numpy()
        worst[idx] = np.fmax(worst[idx], q)
    return worst


def split_anomalies(rows: pd.DataFrame, ratio: float = RATIO) -> np.ndarray:
    """True on every row of a series (`SERIES`: one layout, split and routing over its token
    counts) whose median twin ratio (`twin_ratios`) exceeds `ratio`."""
    if rows.empty or "moe_tp_size" not in rows:
        return np.zeros(len(rows), dtype=bool)
    q = twin_ratios(rows)
    keys = [c for c in SERIES if c in rows]
    med = pd.Series(q).groupby([rows[c].to_numpy() for c in keys]).transform("median")
    return (med > ratio).fillna(False).to_numpy(bool)
