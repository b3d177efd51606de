"""Cross-validation of the fits: grouped folds and labels, out-of-fold predictions, the fold
counts and percentage errors `dse fit` reports, and the process pool a fit spreads its tasks
over. (The curves are `dse.models._curves`, the range and state helpers `dse.models.base`.)
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from dse.models.base import group_folds  # the fitting families import it from here


def group_labels(df: pd.DataFrame, columns: Sequence[str]) -> np.ndarray:
    """One integer label per distinct combination of `columns` (the CV group of a row).
    Families build their held-out groups with `architecture_groups`, which checks the columns."""
    return df.groupby(list(columns), sort=True, dropna=False).ngroup().to_numpy()


# ---------------------------------------------------------------------------- CV groups
# A held-out CV group is an architecture layout, what a user changes in a sweep (issue 19): a
# fold's rows come from layouts no row of the fit has, under any parallel split, dtype or routing.
ARCHITECTURE_FIELDS = frozenset(
    {
        "n",  # GEMM weight shape (n, k)
        "k",
        "num_heads",  # attention head layout (per GPU, as the kernel ran)
        "num_kv_heads",
        "head_dim",
        "hidden_size",  # MoE layer layout
        "inter_size",
        "topk",
        "num_experts",
        "model",  # a whole model (vidur layer ops and Level 2, argonne Level 3)
        "n_heads",  # linear-attention layer layout (per GPU, as the kernels ran)
        "n_groups",
        "state_dim",
        "chunk_size",
    }
)
# Fields that must never be in a held-out group: they describe how a layout was run, not the
# layout, so grouping by them keeps the layout itself in training under another value.
NOT_ARCHITECTURE_FIELDS = frozenset(
    {
        # parallel split
        "moe_tp_size",
        "moe_ep_size",
        "tensor_parallel",
        "n_gpus",
        "pipeline_parallel",
        # dtype
        "dtype",
        "moe_dtype",
        "kv_cache_dtype",
        # routing
        "distribution",
        # engine, GPU
        "engine",
        "engine_version",
        "kernel_source",
        "gpu",
        "device",
        "source",
        # batch and tokens
        "batch_size",
        "max_batch_size",
        "m",
        "num_tokens",
        "isl",
        "kv_len",
        "input_tokens",
        "output_tokens",
        "prompt_tokens",
        "message_bytes",
    }
)
# Held-out schemes that are not by architecture, each a diagnostic beside (or, where a table has
# no architecture input or a single one, instead of) the claim; tests/fitting/test_cv_groups.py pins it.
NOT_BY_ARCHITECTURE: dict[str, str] = {
    "gemm by_m": "GroupKFold by m (token count): extrapolation in m, reported beside (n, k)",
    "allreduce": "leave one message-size octave out (a collective has no architecture input)",
    "reduction": "leave one row out (LLMCompass shapes)",
    "level3.power": "leave one batch size out where the power rows hold a single model",
}
# family -> the architecture fields its held-out groups are built from (`cv_group`)
CV_GROUPS: dict[str, tuple[str, ...]] = {}


def check_architecture_fields(fields: Sequence[str]) -> tuple[str, ...]:
    """`fields` as a tuple; a field outside ARCHITECTURE_FIELDS (or empty fields) is a
    ValueError naming it."""
    out = tuple(fields)
    bad = [f for f in out if f not in ARCHITECTURE_FIELDS or f in NOT_ARCHITECTURE_FIELDS]
    if bad or not out:
        raise ValueError(
            f"CV group fields {list(out)}: {bad or 'none'} not architecture fields; held-out "
            f"groups are layouts only ({', '.join(sorted(ARCHITECTURE_FIELDS))})"
        )
    return out


def cv_group(family: str, fields: Sequence[str]) -> tuple[str, ...]:
    """Declare the architecture fields `family` holds out by (checked, recorded in CV_GROUPS)."""
    CV_GROUPS[family] = check_architecture_fields(fields)
    return CV_GROUPS[family]


def architecture_groups(
    df: pd.DataFrame, fields: Sequence[str], sep: str | None = None
) -> np.ndarray:
    """The held-out CV group of every row: one label per architecture layout, the distinct
    combinations of `fields` (architecture fields only, else a ValueError). Labels are dense
    integers in sorted order, or with `sep` the values joined by it as text (GEMM's "4096x8192":
    GroupKFold breaks ties by label order, so the text keeps the fold draw it always had)."""
    cols = check_architecture_fields(fields)
    if sep is None:
        return group_labels(df, cols)
    return df[list(cols)].astype(str).agg(sep.join, axis=1).to_numpy()


# ---------------------------------------------------------------------------- fold rules
# fit_predict(train, test): fit on the rows at index array `train`, return arrays aligned with
# the rows at `test`: "latency_s" (s) at least, "degree" (the test rows' distance outside that
# fit's range, `dse.models.band.degree_of`) where the family measures it, anything else its CV
# summary reads (energy, regime, ...).
FitPredict = Callable[[np.ndarray, np.ndarray], dict[str, np.ndarray]]
# A family's fold rule: the group label of every row -> the held-out row masks. Applied to all
# rows it is the fit's CV; applied to the rows of some groups only, the same CV among them (the
# inner CV of `dse.fitting.bands`).
FoldRule = Callable[[np.ndarray], list[np.ndarray]]


def seeded_group_folds(n_folds: int, seed: int) -> FoldRule:
    """`group_folds` as a fold rule, without a fold holding every row (a single group)."""

    def rule(groups: np.ndarray) -> list[np.ndarray]:
        return [te for te in group_folds(groups, n_folds, seed) if te.any() and not te.all()]

    return rule


def group_kfold(n_splits: int) -> FoldRule:
    """scikit-learn's GroupKFold as a fold rule (`n_splits` capped at the groups; none when
    fewer than 2): deterministic, ties broken by label order."""

    def rule(groups: np.ndarray) -> list[np.ndarray]:
        from sklearn.model_selection import GroupKFold

        k = min(n_splits, len(np.unique(groups)))
        if k < 2:
            return []
        out = []
        for _, te in GroupKFold(n_splits=k).split(np.zeros(len(groups)), groups=groups):
            mask = np.zeros(len(groups), dtype=bool)
            mask[te] = True
            out.append(mask)
        return out

    return rule


def leave_one_group_out(groups: np.ndarray) -> list[np.ndarray]:
    """One held-out mask per group, in label order (none for a single group)."""
    labels = np.unique(groups)
    return [] if len(labels) < 2 else [groups == g for g in labels]


def held_out_predict(
    groups: np.ndarray,
    folds: FoldRule,
    fit_predict: FitPredict,
    among: np.ndarray | None = None,
    cache: dict[frozenset, tuple[np.ndarray, dict[str, np.ndarray]]] | None = None,
) -> dict[str, np.ndarray]:
    """Out-of-fold predictions (arrays over all rows, NaN where not predicted): the fold rule
    applied to the rows of `among` (a mask; default all), each fold predicted by a fit on the
    other rows of `among` only, so no row outside `among` is ever fitted or predicted.

    `cache`: fits keyed by the groups they leave out, shared between calls. A fit then predicts
    every row it left out, and a later fold leaving out the same groups reuses it (leave one
    group out nested in itself fits each pair of groups once)."""
    n = len(groups)
    idx = np.arange(n) if among is None else np.flatnonzero(among)
    out: dict[str, np.ndarray] = {}
    for te in folds(np.asarray(groups)[idx]):
        test = idx[te]
        fitted = np.zeros(n, dtype=bool)
        fitted[idx[~te]] = True
        train = np.flatnonzero(fitted)
        if cache is None:
            got = fit_predict(train, test)
        else:
            key = frozenset(np.unique(np.asarray(groups)[~fitted]).tolist())
            if key not in cache:
                rest = np.flatnonzero(~fitted)
                cache[key] = (rest, fit_predict(train, rest))
            rest, full = cache[key]
            pos = np.searchsorted(rest, test)
            got = {k: np.asarray(v)[pos] for k, v in full.items()}
        for key, v in got.items():
            out.setdefault(key, np.full(n, np.nan))[test] = np.asarray(v, dtype=float)
    return out


# ---------------------------------------------------------------------------- parallel fits
T = TypeVar("T")
_TASK_CTX: dict[str, Any] = {}
# BLAS / OpenMP thread counts of the worker processes (read when numpy / sklearn load there)
_WORKER_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _init_worker(ctx: Any) -> None:
    _TASK_CTX["ctx"] = ctx


def _run_task(item: tuple[Callable[..., Any], tuple[Any, ...]]) -> Any:
    fn, args = item
    try:
        return fn(_TASK_CTX["ctx"], *args)
    finally:
        sys.stdout.flush()  # the task's log line now, not when the worker exits


def map_tasks(ctx: Any, fn: Callable[..., T], tasks: Sequence[tuple[Any, ...]]) -> list[T]:
    """[fn(ctx, *task) for task in tasks], in `ctx.jobs` worker processes when that is above 1
    (`dse fit --jobs`). Results come back in task order; every task is seeded by itself (its
    fits take `ctx.seed`), so the results do not depend on the number of processes.

    Workers are spawned, not forked: a process forked after OpenMP or OpenBLAS started their
    thread pools (any earlier multi-threaded fit in the same process) can deadlock on a lock
    those threads held. Each worker gets `ctx` (with the tables already read) once, pickled,
    and runs one BLAS / OpenMP thread."""
    jobs = min(ctx.jobs, len(tasks))
    if jobs <= 1:
        return [fn(ctx, *t) for t in tasks]
    import multiprocessing as mp
    import os

    saved = {k: os.environ.get(k) for k in _WORKER_ENV}
    os.environ.update(_WORKER_ENV)  # inherited by the workers as they start
    try:
        with mp.get_context("spawn").Pool(jobs, _init_worker, (ctx,)) as pool:
            return pool.map(_run_task, [(fn, tuple(t)) for t in tasks], chunksize=1)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


CV_FOLDS = 5  # GroupKFold folds over (n, k) weight shapes: the accuracy claim
CV_FOLDS_M = 3  # GroupKFold folds over m (token counts): the second grouping, reported too


# ---------------------------------------------------------------------------- metrics
def group_kfold_predict(
    df: pd.DataFrame,
    groups: np.ndarray,
    n_splits: int,
    fit_predict: Callable[[pd.DataFrame, pd.DataFrame], dict[str, np.ndarray]],
) -> dict[str, np.ndarray]:
    """Out-of-fold predictions: each group is predicted by a model that never saw it.

    `fit_predict(train, test)` fits on train and returns arrays aligned with test.
    """
    from sklearn.model_selection import GroupKFold

    out: dict[str, np.ndarray] = {}
    n_splits = min(n_splits, len(np.unique(groups)))
    if n_splits < 2:  # cross-validation switched off: all-NaN predictions, metrics None
        return out
    for tr, te in GroupKFold(n_splits=n_splits).split(df, groups=groups):
        got = fit_predict(df.iloc[tr], df.iloc[te])
        for key, v in got.items():
            out.setdefault(key, np.full(len(df), np.nan))[te] = v
    return out


def _get(cv: dict[str, np.ndarray], key: str, n: int) -> np.ndarray:
    return cv.get(key, np.full(n, np.nan))


# CV inside `dse fit`: 3 seeded group folds, the MLP families' CV fits capped at this many rows
# (the shipped model itself fits on up to 30000) so that `dse fit` stays in minutes; the
# benchmark benchmarks/level1_ops_cv.py runs the full scheme (5 folds, shipped settings).
FIT_CV_FOLDS = 3
FIT_CV_MAX_ROWS = 8000
