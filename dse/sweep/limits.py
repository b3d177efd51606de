"""A study's limits (its constraints) read back from a trials table: each constrained metric's
value per row, the limits a row breaks, and the limits no trial broke.

The table stores constraint values, relative to the limit (`dse.spec.columns.constraint_values`:
value / max - 1 for a max, 1 - value / min for a min, <= 0 feasible). The metric is recovered
from them and the limit, so every constrained metric has its values, those the table keeps no
column for (throughput, user_speed, a second loss law) included.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from dse.sweep.fronts import oriented

# SI unit of each constrainable metric (dse.spec.space.CONSTRAINT_KEYS): latencies in s,
# HYMELL energies in J, loss in nats per token, throughput in output tokens/s per GPU,
# user_speed in tokens/s, sizes in parameters or bytes.
UNITS = {
    "latency": "s",
    "ttft": "s",
    "tpot": "s",
    "energy": "J",
    "energy_per_output_token": "J",
    "throughput": "tokens/s/GPU",
    "user_speed": "tokens/s",
    "loss": "nats",
    "active_params": "parameters",
    "total_params": "parameters",
    "kv_bytes_per_token": "bytes",
    "memory_bytes": "bytes",
}


@dataclass(frozen=True)
class Limit:
    """One bound of one constraint: `tpot <= 0.05` (s)."""

    metric: str  # the constraint's name in the space: 'tpot', 'active_params'
    bound: str  # "max" | "min"
    value: float  # the limit, in the metric's SI unit

    @property
    def column(self) -> str:
        """Its constraint column in the trials table."""
        return f"constraint.{self.metric}_{self.bound}"

    @property
    def op(self) -> str:
        return "<=" if self.bound == "max" else ">="

    @property
    def unit(self) -> str:
        return UNITS.get(self.metric, "")


def limits(constraints: Mapping[str, Any]) -> list[Limit]:
    """The numeric limits of a space's constraints (`SearchSpace.constraints`), in order;
    `fits_memory` (a yes / no rule) is not one."""
    out = []
    for name, spec in constraints.items():
        if not isinstance(spec, Mapping):
            continue
        for bound in ("max", "min"):
            if spec.get(bound) is not None:
                out.append(Limit(name, bound, float(spec[bound])))
    return out


def values(rows: pd.DataFrame, limit: Limit) -> np.ndarray:
    """The constrained metric per row (SI), NaN where the table has no constraint column."""
    if limit.column not in rows:
        return np.full(len(rows), np.nan)
    c = pd.to_numeric(rows[limit.column], errors="coerce").to_numpy(float)
    return limit.value * (1.0 + c) if limit.bound == "max" else limit.value * (1.0 - c)


def broken(rows: pd.DataFrame, constraints: Mapping[str, Any]) -> list[list[tuple[Limit, float]]]:
    """Per row, the limits it breaks with its value: [(Limit('tpot', 'max', 0.05), 0.062)].
    `fits_memory` broken is Limit('fits_memory', 'max', 1.0) with the memory the row needs
    over the GPU's usable memory (1.3: 30% too much)."""
    out: list[list[tuple[Limit, float]]] = [[] for _ in range(len(rows))]
    checks = limits(constraints)
    if constraints.get("fits_memory") and "constraint.fits_memory" in rows:
        checks.append(Limit("fits_memory", "max", 1.0))
    for lim in checks:
        if lim.column not in rows:
            continue
        c = pd.to_numeric(rows[lim.column], errors="coerce").to_numpy(float)
        v = values(rows, lim)
        for i in np.flatnonzero(c > 0):
            out[int(i)].append((lim, float(v[i])))
    return out


@dataclass(frozen=True)
class Binding:
    """What one limit did in a study."""

    broke: int  # valid trials that break it
    alone: int  # of those, trials that break no other constraint
    would_join: int  # of those, trials no front row dominates: lifting the limit adds them

    @property
    def binds(self) -> bool:
        """The limit shapes the front: without it, some trial would be on it."""
        return self.would_join > 0


def binding(
    trials: pd.DataFrame,
    limit: Limit,
    front: pd.DataFrame,
    objectives: Sequence[str],
    directions: Sequence[str] | None = None,
) -> Binding:
    """Whether `limit` binds: a valid trial that breaks it and no other constraint, and that
    no front row dominates, would join the front were the limit lifted. `objectives` are the
    objective names (`obj.<name>` columns), `directions` their "minimize" / "maximize"."""
    if limit.column not in trials:
        return Binding(0, 0, 0)
    cons = [c for c in trials.columns if c.startswith("constraint.")]
    c = {k: pd.to_numeric(trials[k], errors="coerce").to_numpy(float) for k in cons}
    valid = c["constraint.valid"] <= 0 if "constraint.valid" in c else np.ones(len(trials), bool)
    broke = valid & (c[limit.column] > 0)
    alone = broke.copy()
    for k, v in c.items():
        if k not in (limit.column, "constraint.valid"):
            alone &= ~(v > 0)
    cols = [f"obj.{n}" for n in objectives]
    if not alone.any() or not all(k in trials for k in cols):
        return Binding(int(broke.sum()), int(alone.sum()), 0)
    p = oriented(trials.loc[alone, cols].to_numpy(float), directions)
    f = (
        oriented(front[cols].to_numpy(float), directions)
        if len(front)
        else np.empty((0, len(cols)))
    )
    join = 0
    for row in p:
        if not np.isfinite(row).all():
            continue
        if not ((f <= row).all(axis=1) & (f < row).any(axis=1)).any():
            join += 1
    return Binding(int(broke.sum()), int(alone.sum()), join)
