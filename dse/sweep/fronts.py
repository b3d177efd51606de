"""Fronts by configuration: one row per distinct configuration, its trial count, and which
front neighbours the predictor's error band cannot tell apart.

Pure pandas / numpy (no Optuna, no plotly), shared by the sweep's results writer, `dse show`,
the report and `dse export`, so every view of a study agrees on what its front is.

Distinctness is the configuration (every configuration field of the trials table, less the
fields it ignores: `dse.spec.inert`), never float equality of objectives: the same
configuration predicted in two batches can differ by ~1e-9 (batch-dependent float order), and
neither copy would dominate the other.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from dse import pareto
from dse.spec import columns as C
from dse.spec.inert import DECIDING_FIELDS, inert_masks
from dse.spec.space import EXTRA_FIELDS

# Prediction column behind each objective, so that the predictor's error band can be found
# (`pred.<q>_s` has its band in `pred.<q>_lo_s` / `pred.<q>_hi_s`).
PRED_COLUMN = {
    "latency_request": "pred.latency_s",
    "latency_ttft": "pred.ttft_s",
    "latency_tpot": "pred.tpot_s",
    "energy_hymell_request": "pred.energy_j",
    "energy_hymell_per_output_token": "pred.energy_per_output_token_j",
}
# Objectives that are a constant over a predicted time (tokens per second = tokens / time):
# their band is the relative band of that time, inverted. Throughput (output tokens per second
# per GPU) is batch x output tokens over the request latency; a user's speed is 1 / TPOT.
RECIPROCAL_OF = {"throughput_": "pred.latency_s", "user_tokens_per_s": "pred.tpot_s"}


def _reciprocal_base(name: str) -> str | None:
    for prefix, base in RECIPROCAL_OF.items():
        if name.startswith(prefix):
            return base
    return None


def _col(t: pd.DataFrame, name: str) -> np.ndarray:
    if name not in t:
        return np.full(len(t), np.nan)
    return pd.to_numeric(t[name], errors="coerce").astype(float).to_numpy()


def config_fields(table: pd.DataFrame) -> list[str]:
    """The configuration columns a table has (every field, fixed ones too: the full config),
    the space's extra fields included: two training-token budgets of one architecture are two
    configurations (their loss and training energy differ)."""
    return [c for c in (*C.CONFIG_FIELDS, *EXTRA_FIELDS) if c in table.columns]


INERT = "(inert)"  # the key of a field a configuration ignores


def config_ids(table: pd.DataFrame, fields: Sequence[str] | None = None) -> np.ndarray:
    """An integer per row, equal for rows with the same configuration (order of first sight).

    Fields a row ignores (`dse.spec.inert`: n_kv_heads with MLA, sliding_window without
    sliding layers, ...) do not tell rows apart: their values are one key there."""
    if not len(table):
        return np.empty(0, dtype=np.int64)
    cols = list(fields) if fields is not None else config_fields(table)
    if not cols:
        return np.arange(len(table), dtype=np.int64)
    # As text: a CSV read back may hold 4096 and 4096.0 in one column; str() of the same
    # value read the same way is equal, and NaN / None become one 'nan' group.
    keys = table[cols].astype(str)
    masks = inert_masks({c: table[c].to_numpy() for c in DECIDING_FIELDS if c in table}, len(table))
    for name, mask in masks.items():
        if name in keys and mask.any():
            keys.loc[mask, name] = INERT
    return keys.groupby(cols, sort=False, dropna=False).ngroup().to_numpy(dtype=np.int64)


def oriented(values: np.ndarray, directions: Sequence[str] | None) -> np.ndarray:
    """Objective values turned into minimised ones (maximised columns negated)."""
    v = np.asarray(values, dtype=float)
    if not directions:
        return v
    sign = np.asarray([-1.0 if d == "maximize" else 1.0 for d in directions])
    return v * sign


def distinct_front(
    values: np.ndarray,
    feasible: np.ndarray,
    ids: np.ndarray,
    numbers: np.ndarray | None = None,
    directions: Sequence[str] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(row indices of the front, trials per front configuration).

    Each configuration is represented by its first trial (lowest number); the front is taken
    over the representatives, so it holds one row per distinct configuration, sorted by the
    first objective (in its own direction) then trial number. The count is how many trials
    (feasible or not: a repeat is the same configuration) hit that configuration.
    """
    n = len(ids)
    if n == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    order = np.argsort(np.asarray(numbers), kind="stable") if numbers is not None else np.arange(n)
    # np.unique's index is each id's first position in trial-number order.
    _, first = np.unique(ids[order], return_index=True)
    reps = np.sort(order[first])
    counts = np.bincount(ids)
    v = oriented(values, directions)
    keep = pareto.front_indices(v[reps], np.asarray(feasible, dtype=bool)[reps])
    rows = reps[keep]
    return rows, counts[ids[rows]]


def band(t: pd.DataFrame, name: str, column: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) of objective `name` (column `column`, default obj.<name>) from the predictor's
    band columns; NaN where the objective has no band (sizes, loss: not predicted)."""
    v = _col(t, column or f"obj.{name}")
    nan = np.full(len(t), np.nan)
    base = PRED_COLUMN.get(name)
    if base is not None:
        stem, _, unit = base.rpartition("_")
        lo_c, hi_c = f"{stem}_lo_{unit}", f"{stem}_hi_{unit}"
        if lo_c in t and hi_c in t:
            centre = _col(t, base)
            # Same quantity: the band as stored, re-anchored on the objective.
            return v - (centre - _col(t, lo_c)), v + (_col(t, hi_c) - centre)
        if name == "energy_hymell_per_output_token" and {
            "pred.energy_lo_j",
            "pred.energy_hi_j",
        } <= set(t.columns):
            # Energy per request over a constant token count: the request's relative band.
            centre = _col(t, "pred.energy_j")
            with np.errstate(divide="ignore", invalid="ignore"):
                return v * _col(t, "pred.energy_lo_j") / centre, v * _col(
                    t, "pred.energy_hi_j"
                ) / centre
        return nan, nan
    base = _reciprocal_base(name)
    if base is not None:
        stem, _, unit = base.rpartition("_")
        lo_c, hi_c = f"{stem}_lo_{unit}", f"{stem}_hi_{unit}"
        if lo_c in t and hi_c in t:
            centre = _col(t, base)
            with np.errstate(divide="ignore", invalid="ignore"):
                # Slower time -> fewer tokens per second: hi of time gives lo of throughput.
                return v * centre / _col(t, hi_c), v * centre / _col(t, lo_c)
    return nan, nan


def indistinguishable(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Rows of a front (sorted by its first objective) that a neighbour is too close to.

    Rows i and i+1 are indistinguishable when, in every objective, one lies inside the other's
    band [lo, hi] (bands inclusive; an objective without a band, NaN, has zero width, so there
    only equal values are too close). Both rows are marked. (k, m) arrays in, (k,) bool out.
    """
    v = np.asarray(values, dtype=float)
    k = len(v)
    out = np.zeros(k, dtype=bool)
    if k < 2:
        return out
    lo = np.where(np.isfinite(lo), lo, v)
    hi = np.where(np.isfinite(hi), hi, v)
    a, b = slice(0, k - 1), slice(1, k)
    b_in_a = (v[b] >= lo[a]) & (v[b] <= hi[a])
    a_in_b = (v[a] >= lo[b]) & (v[a] <= hi[b])
    close = (b_in_a | a_in_b).all(axis=1)
    out[:-1] |= close
    out[1:] |= close
    return out


def front_marks(front: pd.DataFrame, names: Sequence[str]) -> np.ndarray:
    """`indistinguishable` of front rows (already sorted by the first objective)."""
    if not len(front):
        return np.zeros(0, dtype=bool)
    cols = [band(front, n) for n in names]
    values = np.column_stack([_col(front, f"obj.{n}") for n in names])
    lo = np.column_stack([c[0] for c in cols])
    hi = np.column_stack([c[1] for c in cols])
    return indistinguishable(values, lo, hi)


def front_table(
    table: pd.DataFrame,
    names: Sequence[str],
    directions: Sequence[str] | None = None,
    feasible: np.ndarray | None = None,
    ids: np.ndarray | None = None,
) -> tuple[pd.DataFrame, np.ndarray]:
    """(front rows with `trials` and `indistinguishable` columns, their row positions in
    `table`). One row per distinct configuration; `feasible` defaults to the table's column,
    `ids` to `config_ids(table)` (a caller that needs them too computes them once)."""
    cols = [f"obj.{n}" for n in names]
    if not len(table):
        empty = table.iloc[0:0].copy()
        empty["trials"] = np.empty(0, dtype=np.int64)
        empty["indistinguishable"] = np.empty(0, dtype=bool)
        return empty, np.empty(0, dtype=np.int64)
    values = table[cols].to_numpy(dtype=float)
    feas = table["feasible"].to_numpy(dtype=bool) if feasible is None else feasible
    rows, counts = distinct_front(
        values,
        feas,
        config_ids(table) if ids is None else ids,
        table["number"].to_numpy(),
        directions,
    )
    front = table.iloc[rows].reset_index(drop=True).copy()  # copy: one block, not fragments
    front["trials"] = counts.astype(np.int64)
    front["indistinguishable"] = front_marks(front, names)
    return front, rows


def distinct_count(table: pd.DataFrame) -> int:
    """How many distinct configurations a trials table holds."""
    ids = config_ids(table)
    return len(np.unique(ids)) if len(ids) else 0
