"""Held-out checks of Level-2 residual variants that were tried and not shipped (session 7), and
the error decomposition of an attention table's out-of-fold predictions. H100 only; 5 seeded
group folds, as `benchmarks/level1_ops_cv.py` (a row is predicted by a fit that never saw its
layer shape / head configuration). One MLP per fit (the shipped tables average 2 or 3).

Feeds docs/accuracy.md, "Attention (Level-2 inputs), held-out head configurations" and "Fused MoE,
held-out layer shapes" (the variants tried there; moving to docs/dev/ with the accuracy rewrite).

    cd <repo>; export PYTHONPATH=.
    python experiments/residual_variants.py moe-trees      # MLP vs boosted trees
    python experiments/residual_variants.py moe-inputs     # fewer MLP inputs
    python experiments/residual_variants.py moe-pool --dtypes bfloat16 fp8 fp8_block
    python experiments/residual_variants.py moe-pool --dtypes fp8 --gpus h100_sxm h200_sxm
    python experiments/residual_variants.py moe-bag        # members on 80% of the shapes
    python experiments/residual_variants.py moe-curve      # error against layer shapes fitted
    python experiments/residual_variants.py attention --kind context_attention --engine vllm
    python experiments/residual_variants.py attention-curve --kind context_attention --engine vllm
    python experiments/residual_variants.py attention-pool --kind context_attention
    python experiments/residual_variants.py swap-check     # is b x (h, kv) priced as b/2 x (2h, 2kv)?
    python experiments/residual_variants.py attention-swap --kind generation_attention --engine trtllm

moe-pool fits one residual MLP over the tables named (a one-hot per (gpu, dtype) table, each table
keeping its own roofline base) and, with the same folds (layer shapes held out in every pooled
table), one MLP per table; both are scored on the H100 rows. moe-curve is a learning curve: each
fold's fit on a random 50 / 70 / 85% of its training layer shapes (3 draws each) against all of
them, and the power law err ~ shapes^-alpha through the means, which says how many more measured
layer shapes the shipped model would need to reach 4%. swap-check measures, in every H100
attention table, how far apart the rows of (h, kv) heads at batch b and of (2h, 2kv) at b/2 are
(same length, KV dtype and window); attention-swap fits a table with feature set 2 (all inputs)
and set 3 (no log batch, heads and KV heads: swap-invariant; shipped for TensorRT-LLM decode
since session 8) on the same folds (`--members`, `--grouping workload`). Results: docs/accuracy.md, sections
"Fused MoE, held-out layer shapes" and "Attention (Level-2 inputs)". 2 worker processes.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import multiprocessing as mp
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dse.data import load
from dse.fitting import attention, moe
from dse.fitting import cv as U
from dse.metrics import mape_pct
from dse.models import moe as M
from dse.models._hybrid import fit_residual_ensemble
from dse.models.attention import attention_inputs

GPU = "h100_sxm"
HIDDEN = (64, 64, 64)
# MoE feature columns (moe._features order): 0 log tokens, 1 log hidden, 2 log local width,
# 3 log top-k, 4 log experts, 5 log local experts, 6 log tp, 7 log ep, 8 skew, 9 gated,
# 10 log routed slots, 11 log touched experts, 12 log FLOPs, 13 log bytes, 14 log roofline time
INPUT_SETS = {
    "derived only": [0, 2, 8, 9, 10, 11, 12, 13, 14],
    "without tp / ep sizes": [0, 1, 2, 3, 4, 5, 8, 9, 10, 11, 12, 13, 14],
    "without FLOPs / bytes": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 14],
}
_ROWS: dict[str, pd.DataFrame] = {}


def _table(data: str, kind: str) -> pd.DataFrame:
    if kind not in _ROWS:
        _ROWS[kind] = load(data, [kind])[kind]
    return _ROWS[kind]


def _moe_rows(data: str, gpus: list[str], dtypes: list[str]) -> pd.DataFrame:
    t = _table(data, "moe")
    sel = (t["engine"] == "vllm") & t["dtype"].isin(dtypes) & t["gpu"].isin(gpus)
    return t[sel].reset_index(drop=True)


def _moe_features(
    rows: pd.DataFrame, gpu: str, dtype: str, model: M.MoEModel | None = None
) -> tuple[np.ndarray, np.ndarray, M.MoEModel]:
    """(features, roofline base, model) of MoE rows, as `MoEModel` builds them; without a model,
    a new one with its roofline fitted on these rows."""
    m = model or M.MoEModel(gpu, "vllm", dtype)
    y = None if model else rows["latency_s"].to_numpy(float)
    out, X = m.design(m._inputs(M.moe_inputs(rows)), y)
    return X, out["base_s"], m


def _mlp(
    X: np.ndarray, y: np.ndarray, seed: int = 0, max_iter: int = 300, hidden: tuple = HIDDEN
) -> Any:
    """One residual MLP as the models fit it (every row: no subsample)."""
    return fit_residual_ensemble(
        X, y, members=1, hidden=hidden, max_iter=max_iter, max_rows=10**6, seed=seed
    )


def _moe_fold(task: tuple) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Out-of-fold log predictions of one fold for every variant of `mode`."""
    mode, data, gpus, dtypes, te_idx, opts = task
    rows = _moe_rows(data, gpus, dtypes)
    te = np.zeros(len(rows), bool)
    te[te_idx] = True
    keys = sorted(set(zip(rows["gpu"], rows["dtype"], strict=True)))
    out: dict[str, np.ndarray] = {}
    pooled_tr, pooled_te = [], []
    for gpu, dtype in keys:
        in_table = ((rows["gpu"] == gpu) & (rows["dtype"] == dtype)).to_numpy()
        a, b = rows[in_table & ~te], rows[in_table & te]
        Xa, ba, model = _moe_features(a, gpu, dtype)
        Xb, bb, _ = _moe_features(b, gpu, dtype, model)
        ya = np.log(a["latency_s"].to_numpy(float) / ba)
        idx = np.flatnonzero(in_table & te)
        scored = gpu == GPU and len(b) > 0
        if mode == "moe-pool":
            hot = np.zeros(len(keys))
            hot[keys.index((gpu, dtype))] = 1.0
            pooled_tr.append((np.hstack([Xa, np.tile(hot, (len(a), 1))]), ya))
            pooled_te.append((idx, np.hstack([Xb, np.tile(hot, (len(b), 1))]), bb, scored))
        if not scored:
            continue
        one = _mlp(Xa, ya).predict(Xb)
        got = {"one MLP per table": np.log(bb) + one}
        if mode == "moe-trees":
            from sklearn.ensemble import HistGradientBoostingRegressor

            for name, kw in {
                "boosted trees": {"min_samples_leaf": 20},
                "boosted trees, leaves 40, L2 1": {
                    "min_samples_leaf": 40,
                    "l2_regularization": 1.0,
                    "max_depth": 6,
                },
            }.items():
                g = HistGradientBoostingRegressor(
                    max_iter=600, learning_rate=0.05, random_state=0, **kw
                ).fit(Xa, ya)
                got[name] = np.log(bb) + g.predict(Xb)
            got["MLP + boosted trees (log mean)"] = 0.5 * (
                got["one MLP per table"] + got["boosted trees"]
            )
        if mode == "moe-bag":  # 1-3 members: seeds alone, or each on 80% of the shapes too
            shapes = U.group_labels(a, moe.MOE_SHAPE_GROUP)
            uniq = np.unique(shapes)
            seeded, bagged = [one], []  # seed 0 on every shape: the MLP above
            for m in range(3):
                if m:
                    seeded.append(_mlp(Xa, ya, seed=m).predict(Xb))
                    got[f"mean of {m + 1} seeded MLPs"] = np.log(bb) + np.mean(seeded, axis=0)
                pick = np.random.default_rng(1000 + m).choice(
                    uniq, round(0.8 * len(uniq)), replace=False
                )
                keep = np.isin(shapes, pick)
                bagged.append(_mlp(Xa[keep], ya[keep], seed=m).predict(Xb))
                got[f"mean of {m + 1}, each on 80% of the shapes"] = np.log(bb) + np.mean(
                    bagged, axis=0
                )
        if mode == "moe-inputs":
            for name, cols in INPUT_SETS.items():
                got[name] = np.log(bb) + _mlp(Xa[:, cols], ya).predict(Xb[:, cols])
        for name, v in got.items():
            out.setdefault(name, np.full(len(rows), np.nan))[idx] = v
    if mode == "moe-pool":
        X = np.vstack([x for x, _ in pooled_tr])
        y = np.concatenate([v for _, v in pooled_tr])
        net = _mlp(X, y, max_iter=opts["max_iter"], hidden=opts["hidden"])
        pred = np.full(len(rows), np.nan)
        for idx, Xb, bb, scored in pooled_te:
            if scored:
                pred[idx] = np.log(bb) + net.predict(Xb)
        out["one MLP over the pooled tables"] = pred
    return te_idx, out


def _moe_oof(
    args: argparse.Namespace, gpus: list[str], dtypes: list[str]
) -> dict[str, dict[str, float]]:
    """Out-of-fold log predictions of every variant over the rows of (gpus, dtypes)."""
    rows = _moe_rows(args.data, gpus, dtypes)
    if args.mode == "moe-pool":  # one label per layer shape: held out of every pooled table
        shape = rows[list(moe.MOE_SHAPE_GROUP)].astype(str).agg("|".join, axis=1)
        labels = pd.factorize(shape, sort=True)[0]
    else:  # one table: its own labels, as benchmarks/level1_ops_cv.py
        labels = U.group_labels(rows, moe.MOE_SHAPE_GROUP)
    opts = {"max_iter": args.max_iter, "hidden": tuple(int(h) for h in args.hidden.split("x"))}
    tasks = [
        (args.mode, args.data, gpus, dtypes, np.flatnonzero(f), opts)
        for f in U.group_folds(labels, args.folds, args.seed)
    ]
    pred: dict[str, np.ndarray] = {}
    with ProcessPoolExecutor(args.jobs, mp_context=mp.get_context("spawn")) as ex:
        for _, out in ex.map(_moe_fold, tasks):
            for name, v in out.items():
                got = pred.setdefault(name, np.full(len(rows), np.nan))
                ok = np.isfinite(v)
                got[ok] = v[ok]
    y = rows["latency_s"].to_numpy(float)
    scores: dict[str, dict[str, float]] = {}
    for name, lp in pred.items():
        for dtype in dtypes:
            s = ((rows["gpu"] == GPU) & (rows["dtype"] == dtype)).to_numpy()
            scores.setdefault(name, {})[dtype] = mape_pct(np.exp(lp[s]), y[s])
    return scores


def run_moe(args: argparse.Namespace) -> None:
    t0 = time.perf_counter()
    if args.mode == "moe-pool":
        scores = _moe_oof(args, args.gpus, args.dtypes)
    else:
        scores: dict[str, dict[str, float]] = {}
        for dtype in args.dtypes:
            for name, by in _moe_oof(args, [GPU], [dtype]).items():
                scores.setdefault(name, {}).update(by)
    gpus = args.gpus if args.mode == "moe-pool" else [GPU]
    print(f"{args.mode}, H100 vLLM MoE, {args.folds} folds by layer shape, seed {args.seed}, "
          f"GPUs {gpus} ({time.perf_counter() - t0:.0f} s)")  # fmt: skip
    print("| variant | " + " | ".join(args.dtypes) + " |")
    print("|---|" + "---|" * len(args.dtypes))
    for name, by in scores.items():
        print(f"| {name} | " + " | ".join(f"{by[d]:.2f}%" for d in args.dtypes) + " |")


CURVE_FRACTIONS = (0.5, 0.7, 0.85)
CURVE_DRAWS = 3
SHIPPED_2_MLPS = {"bfloat16": 5.16, "fp8": 4.53, "fp8_block": 4.67}  # level1_ops_cv.py, session 4
# the shipped attention models held out the same way (prefill 2 MLPs, decode 3; sessions 5-6)
SHIPPED_ATTENTION = {
    ("context_attention", "trtllm"): 1.78,
    ("context_attention", "vllm"): 3.04,
    ("generation_attention", "trtllm"): 2.75,  # session 8: swap-invariant inputs (was 3.03)
    ("generation_attention", "vllm"): 1.92,
}


def _curve_fold(task: tuple) -> tuple[np.ndarray, dict[tuple[float, int], np.ndarray]]:
    data, dtype, te_idx = task
    rows = _moe_rows(data, [GPU], [dtype])
    te = np.zeros(len(rows), bool)
    te[te_idx] = True
    tr = rows[~te]
    Xa, ba, model = _moe_features(tr, GPU, dtype)
    Xb, bb, _ = _moe_features(rows[te], GPU, dtype, model)
    ya = np.log(tr["latency_s"].to_numpy(float) / ba)
    shapes = U.group_labels(tr, moe.MOE_SHAPE_GROUP)
    uniq = np.unique(shapes)
    out = {(1.0, 0): np.log(bb) + _mlp(Xa, ya).predict(Xb)}
    for frac in CURVE_FRACTIONS:
        for draw in range(CURVE_DRAWS):
            rng = np.random.default_rng(7919 * draw + int(frac * 100))
            keep = np.isin(shapes, rng.choice(uniq, round(frac * len(uniq)), replace=False))
            out[(frac, draw)] = np.log(bb) + _mlp(Xa[keep], ya[keep], seed=draw).predict(Xb)
    return te_idx, out


def _print_curve(
    name: str,
    n_groups: int,
    rows: pd.DataFrame,
    tasks: list[tuple],
    fold: Any,
    args: argparse.Namespace,
    target: float,
    shipped: float | None,
) -> None:
    """Run the folds of a learning curve and print its markdown row: the mean held-out MAPE at
    each share of the training groups (the draws in brackets), the power law's exponent and
    the factor on the groups measured that would reach `target` (one MLP / the shipped model)."""
    y = rows["latency_s"].to_numpy(float)
    pred: dict[tuple[float, int], np.ndarray] = {}
    with ProcessPoolExecutor(args.jobs, mp_context=mp.get_context("spawn")) as ex:
        for idx, out in ex.map(fold, tasks):
            for key, v in out.items():
                pred.setdefault(key, np.full(len(rows), np.nan))[idx] = v
    by_frac: dict[float, list[float]] = {}
    for (frac, _), lp in pred.items():
        by_frac.setdefault(frac, []).append(mape_pct(np.exp(lp), y))
    fracs = sorted(by_frac)
    mean = [float(np.mean(by_frac[f])) for f in fracs]
    alpha = -np.polyfit(np.log(fracs), np.log(mean), 1)[0]
    one = (mean[-1] / target) ** (1.0 / alpha)
    two = "-" if shipped is None else f"x{(shipped / target) ** (1.0 / alpha):.2f}"
    cells = " | ".join(
        f"{m:.2f}% ({', '.join(f'{x:.2f}' for x in by_frac[f])})" if len(by_frac[f]) > 1
        else f"{m:.2f}%"
        for f, m in zip(fracs, mean, strict=True)
    )  # fmt: skip
    print(f"| {name} | {n_groups} | {cells} | {alpha:.2f} | x{one:.2f} / {two} |", flush=True)


def _curve_header(target: float) -> None:
    shares = " | ".join(f"{f:.0%} of a fold's groups" for f in (*CURVE_FRACTIONS, 1.0))
    print(f"| table | groups | {shares} | alpha | more groups for {target:g}%, 1 MLP / shipped |")
    print("|---|---|" + "---|" * (len(CURVE_FRACTIONS) + 3))


def run_curve(args: argparse.Namespace) -> None:
    _curve_header(4.0)
    for dtype in args.dtypes:
        rows = _moe_rows(args.data, [GPU], [dtype])
        labels = U.group_labels(rows, moe.MOE_SHAPE_GROUP)
        tasks = [
            (args.data, dtype, np.flatnonzero(f))
            for f in U.group_folds(labels, args.folds, args.seed)
        ]
        _print_curve(
            f"moe.vllm.{dtype}", len(np.unique(labels)), rows, tasks, _curve_fold, args,
            target=4.0, shipped=SHIPPED_2_MLPS.get(dtype),
        )  # fmt: skip


def _attention_curve_fold(task: tuple) -> tuple[np.ndarray, dict[tuple[float, int], np.ndarray]]:
    """One fold of the attention learning curve: one MLP per fit, on a random share of the
    fold's training head configurations."""
    from dse.models import attention as attention_mod

    data, kind, engine, te_idx = task
    attention_mod.MEMBERS = dict.fromkeys(attention_mod.MEMBERS, 1)
    t = _table(data, kind)
    rows = t[(t["gpu"] == GPU) & (t["engine"] == engine)].reset_index(drop=True)
    te = np.zeros(len(rows), bool)
    te[te_idx] = True
    tr = rows[~te]
    cls = attention.ATTENTION_CLASSES[kind]
    configs = U.group_labels(tr, attention.HEAD_GROUP)
    uniq = np.unique(configs)
    out = {}
    for frac in (*CURVE_FRACTIONS, 1.0):
        for draw in range(CURVE_DRAWS if frac < 1.0 else 1):
            rng = np.random.default_rng(7919 * draw + int(frac * 100))
            keep = np.isin(configs, rng.choice(uniq, round(frac * len(uniq)), replace=False))
            model = cls(gpu=GPU, engine=engine, seed=draw).fit(tr[keep])
            out[(frac, draw)] = np.log(model.predict(**attention_inputs(rows[te]))["latency_s"])
    return te_idx, out


def run_attention_curve(args: argparse.Namespace) -> None:
    t = _table(args.data, args.kind)
    rows = t[(t["gpu"] == GPU) & (t["engine"] == args.engine)].reset_index(drop=True)
    labels = U.group_labels(rows, attention.HEAD_GROUP)
    tasks = [
        (args.data, args.kind, args.engine, np.flatnonzero(f))
        for f in U.group_folds(labels, args.folds, args.seed)
    ]
    _curve_header(2.0)
    _print_curve(
        f"{args.kind}.{args.engine}", len(np.unique(labels)), rows, tasks, _attention_curve_fold,
        args, target=2.0, shipped=SHIPPED_ATTENTION.get((args.kind, args.engine)),
    )  # fmt: skip


def _attention_rows_features(
    rows: pd.DataFrame, kind: str, engine: str, model: Any = None, feature_set: int | None = None
) -> tuple[np.ndarray, np.ndarray, Any]:
    """(features, roofline base, model) of one engine's attention rows, as the model builds
    them; without a model, a new one with its roofline fitted on these rows and the shipped
    input set (or `feature_set`)."""
    from dse.models.attention import feature_set_for

    m = model
    if m is None:
        m = attention.ATTENTION_CLASSES[kind](gpu=GPU, engine=engine)
        m.feature_set_ = feature_set or feature_set_for(GPU, m.phase, engine)
    y = None if model else rows["latency_s"].to_numpy(float)
    out, X = m.design(m._inputs(attention_inputs(rows)), y)
    return X, out["base_s"], m


def _attention_pool_fold(task: tuple) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """One residual MLP over both engines' rows of a kind (an engine flag; each engine keeps
    its own roofline base and kernel inputs); the fold's head configurations held out of both."""
    data, kind, te_idx, max_rows = task
    t = _table(data, kind)
    rows = t[t["gpu"] == GPU].reset_index(drop=True)
    te = np.zeros(len(rows), bool)
    te[te_idx] = True
    Xs, ys, tests = [], [], []
    for flag, engine in enumerate(("trtllm", "vllm")):
        sel = (rows["engine"] == engine).to_numpy()
        Xa, ba, model = _attention_rows_features(rows[sel & ~te], kind, engine)
        Xb, bb, _ = _attention_rows_features(rows[sel & te], kind, engine, model)
        Xs.append(np.column_stack([Xa, np.full(len(Xa), float(flag))]))
        ys.append(np.log(rows["latency_s"].to_numpy(float)[sel & ~te] / ba))
        tests.append((engine, np.flatnonzero(sel & te), Xb, bb, float(flag)))
    net = fit_residual_ensemble(
        np.vstack(Xs), np.concatenate(ys), members=1, hidden=HIDDEN, max_iter=300,
        max_rows=max_rows, seed=0,
    )  # fmt: skip
    return {
        engine: (idx, bb * np.exp(net.predict(np.column_stack([Xb, np.full(len(Xb), flag)]))))
        for engine, idx, Xb, bb, flag in tests
    }


def run_attention_pool(args: argparse.Namespace) -> None:
    """Folds: a head configuration in the vLLM table keeps its fold of the per-table CV
    (`U.group_folds` of the vLLM rows); one measured by TensorRT-LLM alone gets a seeded fold."""
    t = _table(args.data, args.kind)
    rows = t[t["gpu"] == GPU].reset_index(drop=True)
    key = rows[list(attention.HEAD_GROUP)].astype(str).agg("|".join, axis=1).to_numpy()
    is_vllm = (rows["engine"] == "vllm").to_numpy()
    vl = rows[is_vllm].reset_index(drop=True)
    fold_of: dict[str, int] = {}
    for f, m in enumerate(
        U.group_folds(U.group_labels(vl, attention.HEAD_GROUP), args.folds, args.seed)
    ):
        fold_of.update(dict.fromkeys(np.unique(key[is_vllm][m]), f))
    rng = np.random.default_rng(args.seed + 5)
    for k in np.unique(key):
        fold_of.setdefault(k, int(rng.integers(args.folds)))
    fold = np.array([fold_of[k] for k in key])
    pred = np.full(len(rows), np.nan)
    tasks = [
        (args.data, args.kind, np.flatnonzero(fold == f), args.pool_rows) for f in range(args.folds)
    ]
    with ProcessPoolExecutor(args.jobs, mp_context=mp.get_context("spawn")) as ex:
        for out in ex.map(_attention_pool_fold, tasks):
            for idx, p in out.values():
                pred[idx] = p
    y = rows["latency_s"].to_numpy(float)
    print(f"{args.kind}, H100, one MLP over both engines, {args.folds} folds by head "
          f"configuration, <= {args.pool_rows} rows a fit:")  # fmt: skip
    for engine in ("trtllm", "vllm"):
        s = (rows["engine"] == engine).to_numpy()
        print(f"  {engine}: {mape_pct(pred[s], y[s]):.2f}%")


def _attention_fold(task: tuple) -> tuple[np.ndarray, np.ndarray]:
    data, kind, engine, te_idx = task
    t = _table(data, kind)
    rows = t[(t["gpu"] == GPU) & (t["engine"] == engine)].reset_index(drop=True)
    te = np.zeros(len(rows), bool)
    te[te_idx] = True
    model = attention.ATTENTION_CLASSES[kind](gpu=GPU, engine=engine, seed=0).fit(rows[~te])
    return te_idx, model.predict(**attention_inputs(rows[te]))["latency_s"]


def run_attention(args: argparse.Namespace) -> None:
    """Out-of-fold error of the shipped setting, and what is left once each held-out head
    configuration's median log error is taken out (an oracle: the level no fit can know)."""
    t = _table(args.data, args.kind)
    rows = t[(t["gpu"] == GPU) & (t["engine"] == args.engine)].reset_index(drop=True)
    folds = U.group_folds(U.group_labels(rows, attention.HEAD_GROUP), args.folds, args.seed)
    pred = np.full(len(rows), np.nan)
    tasks = [(args.data, args.kind, args.engine, np.flatnonzero(f)) for f in folds]
    with ProcessPoolExecutor(args.jobs, mp_context=mp.get_context("spawn")) as ex:
        for idx, p in ex.map(_attention_fold, tasks):
            pred[idx] = p
    err = np.log(pred / rows["latency_s"].to_numpy(float))
    cfg = U.group_labels(rows, attention.HEAD_GROUP)
    level = pd.Series(err).groupby(cfg).transform("median").to_numpy()

    def mape(e: np.ndarray) -> float:
        return float(np.mean(np.abs(np.expm1(e))) * 100)

    print(f"{args.kind}.{args.engine}, H100, {args.folds} folds by head configuration: "
          f"{len(rows)} rows, {len(np.unique(cfg))} configurations")  # fmt: skip
    bias = float(np.mean(np.abs(np.expm1(pd.Series(err).groupby(cfg).median()))) * 100)
    print(f"  held-out MAPE {mape(err):.2f}%; each configuration's median log error taken out "
          f"{mape(err - level):.2f}%; mean |median bias| of a configuration "
          f"{bias:.2f}%")  # fmt: skip
    frame = rows.assign(e=err, c=err - level)
    for col in ("head_dim", "batch_size"):
        g = frame.groupby(col)
        print(f"  by {col}: " + ", ".join(
            f"{k} {mape(d['e'].to_numpy()):.2f}% ({mape(d['c'].to_numpy()):.2f}%)" for k, d in g
        ))  # fmt: skip
    per = frame.groupby(cfg).agg(
        n=("e", "size"), mape=("e", lambda e: mape(e.to_numpy())), bias=("e", "median")
    )
    per["points"] = per["n"] * per["mape"] / len(rows)
    worst = per.sort_values("points", ascending=False).head(10)
    print(f"  the 10 worst configurations carry {worst['points'].sum():.2f} points")


SWAP_KEYS = ("num_heads", "num_kv_heads", "head_dim", "batch_size", "kv_cache_dtype", "window_size")


def run_swap_check(args: argparse.Namespace) -> None:
    """Mean / median |t(2h, 2kv, b/2) / t(h, kv, b) - 1| over the pairs each H100 table has."""
    print("| table | pairs | mean | median | mean, kernels > 50 us |")
    print("|---|---|---|---|---|")
    for kind, length in (("context_attention", "isl"), ("generation_attention", "kv_len")):
        t = _table(args.data, kind)
        for engine in ("trtllm", "vllm"):
            d = t[(t["gpu"] == GPU) & (t["engine"] == engine)]
            key = [*SWAP_KEYS, length]
            a = d.groupby(key)["latency_s"].median().reset_index()
            b = a.assign(
                num_heads=a["num_heads"] // 2,
                num_kv_heads=a["num_kv_heads"] // 2,
                batch_size=a["batch_size"] * 2,
            )
            m = a.merge(b, on=key, suffixes=("", "_pair"))
            ape = (m["latency_s_pair"] / m["latency_s"] - 1).abs() * 100
            big = ape[m["latency_s"] > 50e-6]
            print(f"| {kind}.{engine} | {len(m)} | {ape.mean():.2f}% | {ape.median():.2f}% | "
                  f"{big.mean():.2f}% |")  # fmt: skip


def _swap_fold(task: tuple) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """One fold, feature sets 2 and 3 on the same rows (`members` seeded MLPs each)."""
    from dse.models import attention as attention_mod

    data, kind, engine, te_idx, members, seed = task
    t = _table(data, kind)
    rows = t[(t["gpu"] == GPU) & (t["engine"] == engine)].reset_index(drop=True)
    te = np.zeros(len(rows), bool)
    te[te_idx] = True
    # set 2 (all inputs); set 3 is set 2 less SWAP_VARIANT_COLUMNS
    Xa2, ba, model = _attention_rows_features(rows[~te], kind, engine, feature_set=2)
    Xb2, bb, _ = _attention_rows_features(rows[te], kind, engine, model)
    ya = np.log(rows["latency_s"].to_numpy(float)[~te] / ba)
    keep = [c for c in range(Xa2.shape[1]) if c not in attention_mod.SWAP_VARIANT_COLUMNS]
    out = {}
    for name, (A, B) in {
        "all inputs (set 2)": (Xa2, Xb2),
        "swap-invariant (set 3)": (Xa2[:, keep], Xb2[:, keep]),
    }.items():
        net = fit_residual_ensemble(
            A, ya, members=members, hidden=HIDDEN, max_iter=300,
            max_rows=attention_mod.MAX_ROWS, seed=seed,
        )  # fmt: skip
        out[name] = bb * np.exp(net.predict(B))
    return te_idx, out


def run_attention_swap(args: argparse.Namespace) -> None:
    """Held out by head configuration (`--grouping shape`) or by workload point (`workload`:
    batch x length, as `level1_ops_cv.py --groupings workload`). The folds are seed 0's, as
    every documented number; `--seed` seeds the MLPs."""
    t = _table(args.data, args.kind)
    rows = t[(t["gpu"] == GPU) & (t["engine"] == args.engine)].reset_index(drop=True)
    length = "isl" if args.kind == "context_attention" else "kv_len"
    cols = list(attention.HEAD_GROUP) if args.grouping == "shape" else ["batch_size", length]
    folds = U.group_folds(U.group_labels(rows, cols), args.folds, 0)
    tasks = [
        (args.data, args.kind, args.engine, np.flatnonzero(f), args.members, args.seed)
        for f in folds
    ]
    pred: dict[str, np.ndarray] = {}
    with ProcessPoolExecutor(args.jobs, mp_context=mp.get_context("spawn")) as ex:
        for idx, out in ex.map(_swap_fold, tasks):
            for name, v in out.items():
                pred.setdefault(name, np.full(len(rows), np.nan))[idx] = v
    y = rows["latency_s"].to_numpy(float)
    by = "head configuration" if args.grouping == "shape" else "workload point"
    for name, p in pred.items():
        print(f"{args.kind}.{args.engine}, H100, {args.folds} folds by {by}, "
              f"{args.members} MLP(s) from seed {args.seed}: {name} "
              f"{mape_pct(p, y):.2f}%")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "mode",
        choices=(
            "moe-trees",
            "moe-inputs",
            "moe-pool",
            "moe-bag",
            "moe-curve",
            "attention",
            "attention-curve",
            "attention-pool",
            "swap-check",
            "attention-swap",
        ),
    )
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    ap.add_argument("--dtypes", nargs="+", default=["bfloat16", "fp8", "fp8_block"])
    ap.add_argument("--gpus", nargs="+", default=[GPU], help="moe-pool: tables pooled")
    ap.add_argument("--max-iter", type=int, default=300, help="moe-pool: epochs of the pool")
    ap.add_argument("--hidden", default="64x64x64", help="moe-pool: the pooled MLP's layers")
    ap.add_argument(
        "--kind", default="context_attention", choices=tuple(attention.ATTENTION_CLASSES)
    )
    ap.add_argument("--engine", default="vllm")
    ap.add_argument("--pool-rows", type=int, default=60000, help="attention-pool: rows a fit")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--members", type=int, default=1, help="attention-swap: MLPs averaged")
    ap.add_argument("--grouping", default="shape", choices=("shape", "workload"))
    args = ap.parse_args()
    run = {
        "attention": run_attention,
        "attention-curve": run_attention_curve,
        "attention-pool": run_attention_pool,
        "swap-check": run_swap_check,
        "attention-swap": run_attention_swap,
        "moe-curve": run_curve,
    }.get(args.mode, run_moe)
    run(args)


if __name__ == "__main__":
    main()
