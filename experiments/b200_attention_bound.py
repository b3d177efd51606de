"""What bounds B200 vLLM attention latency (issue 35: prefill / decode <= 3%; shipped, `dse fit`'s
CV by head configuration, 4.86 / 4.18%). A flexible learner (gradient-boosted trees on the median
of log latency; inputs: the table's shape columns, batch, sequence length or decode step, heads,
KV heads, head_dim, KV-cache dtype, window, and the call's log work: `_work_features`) scores latency out of fold three ways:

- repeats: rows of one key measured more than once (their spread is the table's own noise; B200
  vLLM's tables have none), and each row against the log-log interpolation of its neighbours
  along isl (prefill) / decode step (`--scatter-only`: that alone, seconds);
- row folds (5, shuffled): every head configuration seen; what is left is scatter the inputs
  cannot explain (the noise floor a model of these inputs meets);
- head-configuration folds (3, grouped by num_heads / num_key_value_heads / head_dim, as `dse
  fit` holds the shipped model out): what a learner reads for a head configuration it never saw.

With `kernel_source` (the backend vLLM ran: FlashInfer TRT-LLM or FlashAttention, not an input of
the shipped model) added as an input too, for what knowing the kernel would buy.

    OMP_NUM_THREADS=1 PYTHONPATH=. python experiments/b200_attention_bound.py [--data DIR]
        [--max-rows N] [--engine vllm|trtllm|sglang]

Numbers (2026-12-03, shared 2-core VM, loaded; docs/dev/accuracy-journal.md "B200 vLLM GEMM
and attention bounds") are in that journal section.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.model_selection import GroupKFold, KFold

ROOT = "aiconfigurator/aic-core/src/aiconfigurator_core/systems/data/b200_sxm/attention"
VERSIONS = {"vllm": "0.24.0", "trtllm": "1.3.0rc20", "sglang": "0.5.14"}  # the share's tables
HEADS = ["num_heads", "num_key_value_heads", "head_dim"]
INPUTS = ["batch_size", "isl", "step", *HEADS, "attn_dtype", "kv_cache_dtype", "window_size"]


def _numeric(c: pd.Series) -> np.ndarray:
    """A column as numbers (strings by their codes)."""
    if pd.api.types.is_numeric_dtype(c):
        return c.to_numpy(float)
    return pd.factorize(c)[0].astype(float)


def _work_features(d: pd.DataFrame, name: str) -> list[np.ndarray]:
    """log2 work of the call, so the trees need not build products from single columns: prefill
    attention's FLOPs ~ batch * isl^2 * heads * head_dim (a causal half, windows ignored) and its
    KV bytes ~ batch * isl * kv_heads * head_dim; decode's KV bytes ~ batch * (isl + step) *
    kv_heads * head_dim and its query FLOPs ~ that times heads / kv_heads."""
    lb, ld = np.log2(d["batch_size"].to_numpy(float)), np.log2(d["head_dim"].to_numpy(float))
    lh = np.log2(d["num_heads"].to_numpy(float))
    lkv = np.log2(d["num_key_value_heads"].to_numpy(float))
    if name == "context_attention":
        ls = np.log2(d["isl"].to_numpy(float))
        return [lb + 2 * ls + lh + ld, lb + ls + lkv + ld, lb + ls + lh + ld]
    ls = np.log2(d["isl"].to_numpy(float) + d["step"].to_numpy(float))
    return [lb + ls + lkv + ld, lb + ls + lh + ld, lh - lkv]


def interp_scatter(d: pd.DataFrame, keys: list[str], axis: str) -> np.ndarray:
    """APE (%) of each row against the log-log interpolation of its two neighbours along `axis`
    (isl for prefill, step for decode) at the same other keys: the table's local roughness,
    curvature included (no key is measured twice, so no repeat spread)."""
    others = [c for c in keys if c != axis]
    s = d.sort_values([*others, axis])
    x = np.log(s[axis].to_numpy(float) + 1.0)
    y = np.log(s["latency"].to_numpy(float))
    key = pd.factorize(pd.MultiIndex.from_frame(s[others]))[0]
    ok = (key[1:-1] == key[:-2]) & (key[1:-1] == key[2:])
    t = (x[1:-1] - x[:-2]) / np.maximum(x[2:] - x[:-2], 1e-12)
    pred = y[:-2] + t * (y[2:] - y[:-2])
    return 100 * np.abs(np.expm1(pred[ok] - y[1:-1][ok]))


def oof_ape(X: np.ndarray, y: np.ndarray, splits) -> np.ndarray:
    """Latency APE (%) of out-of-fold predictions of log latency y, per row."""
    out = np.full(y.size, np.nan)
    for tr, te in splits:
        m = HistGradientBoostingRegressor(
            loss="absolute_error", max_iter=400, max_leaf_nodes=63, random_state=0
        )
        out[te] = m.fit(X[tr], y[tr]).predict(X[te])
    return 100 * np.abs(np.expm1(out - y))


def repeat_spread(d: pd.DataFrame, keys: list[str]) -> tuple[int, float]:
    """(rows in keys measured more than once, mean APE of each such row against its key's
    median latency)."""
    lat = d["latency"].to_numpy(float)
    g = d.groupby(keys, sort=False)["latency"]
    n = g.transform("size").to_numpy()
    med = g.transform("median").to_numpy(float)
    rep = n > 1
    return int(rep.sum()), float(
        100 * np.mean(np.abs(lat[rep] / med[rep] - 1))
    ) if rep.any() else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--max-rows", type=int, default=0, help="seeded subsample (0: every row)")
    ap.add_argument("--scatter-only", action="store_true", help="the interpolation scatter alone")
    ap.add_argument("--engine", choices=sorted(VERSIONS), default="vllm", help="whose table")
    a = ap.parse_args()
    table_dir = Path(a.data) / ROOT / a.engine / VERSIONS[a.engine]
    for name in ("context_attention", "generation_attention"):
        t0 = time.perf_counter()
        d = pd.read_parquet(table_dir / f"{name}_perf.parquet")
        d = d[np.isfinite(d["latency"]) & (d["latency"] > 0)].reset_index(drop=True)
        if a.max_rows and len(d) > a.max_rows:
            d = d.sample(a.max_rows, random_state=0).reset_index(drop=True)
        keys = [c for c in INPUTS if d[c].nunique() > 1]
        n_rep, spread = repeat_spread(d, keys)
        sc = interp_scatter(d, keys, "isl" if name == "context_attention" else "step")
        print(
            f"{name}: interpolating each row from its two neighbours along the sequence axis "
            f"(isl / step): {sc.size} rows, MAPE {sc.mean():.2f}% (median {np.median(sc):.2f}%)",
            flush=True,
        )
        if a.scatter_only:
            continue
        y = np.log(d["latency"].to_numpy(float))
        groups = pd.factorize(pd.MultiIndex.from_frame(d[HEADS]))[0]
        res = {}
        work = _work_features(d, name)
        for tag, cols in (("", keys), (" +kernel", [*keys, "kernel_source"])):
            X = np.column_stack([_numeric(d[c]) for c in cols] + work)
            rows = oof_ape(X, y, KFold(5, shuffle=True, random_state=0).split(X))
            heads = oof_ape(X, y, GroupKFold(3).split(X, groups=groups))
            res[tag] = (rows, heads)
        (r, h), (rk, hk) = res[""], res[" +kernel"]
        print(
            f"{name}: {len(d)} rows, {groups.max() + 1} head configurations; repeats {n_rep} rows "
            f"(spread {spread:.2f}%); trees, latency MAPE (median): row folds {r.mean():.2f}% "
            f"({np.median(r):.2f}%), head configuration held out (3 folds) {h.mean():.2f}% "
            f"({np.median(h):.2f}%); with kernel_source {rk.mean():.2f} / {hk.mean():.2f}% "
            f"({time.perf_counter() - t0:.0f} s)",
            flush=True,
        )


if __name__ == "__main__":
    main()
