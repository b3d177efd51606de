"""H200 vLLM GEMM: variants of the measured-power residual, scored held out by (n, k).

Feeds docs/dev/accuracy-journal.md ("H200 GEMM power residual").

    OMP_NUM_THREADS=1 PYTHONPATH=. DSE_SURROGATES=$PWD/surrogates \\
        python experiments/h200_gemm_power_residual.py [--data ../shared/data] \\
        [--dtype bfloat16] [--folds 0,1,2,3,4]

The folds are `dse fit`'s CV (GroupKFold(5) by (n, k), `gemm_band_table`), the power model is
the h200_sxm artifact's (what `dse fit --only gemm` prices energy with). Per fold the latency
model is fitted once (latency is the same for every variant: only the power table changes) and
each variant's power table (`GemmModel._fit_power`) is fitted on the same training rows. The
carry-over rows (`dse.fitting.power.drop_carryover`'s flags, file order) may be down-weighted.
Prints out-of-fold power and energy MAPE per variant.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from dse.fitting.context import FitContext
from dse.fitting.cv import group_kfold
from dse.fitting.gemm import gemm_table_rows, weight_shape_groups
from dse.models.artifact import Artifact
from dse.models.gemm import GemmModel, _residual_features

GPU = "h200_sxm"
# name -> _fit_power options (300 boosting rounds unless "iter" says otherwise: the model before
# POWER_TREE_ITER); "co" is the weight of carry-over rows (1 = as shipped).
VARIANTS: dict[str, dict] = {
    "300 rounds (squared, 0.35 oct)": {},
    "median (absolute loss)": {"loss": "absolute_error"},
    "squared, 0.25 oct": {"octaves": 0.25},
    "squared, 0.5 oct": {"octaves": 0.5},
    "squared, carry-over w 0.3": {"co": 0.3},
    "median, carry-over w 0.3": {"loss": "absolute_error", "co": 0.3},
    "median, 0.5 oct": {"loss": "absolute_error", "octaves": 0.5},
    "median, 0.25 oct": {"loss": "absolute_error", "octaves": 0.25},
    "squared, prior 1 row": {"prior_rows": 1.0},
    "squared, prior 3 rows": {"prior_rows": 3.0},
    "squared, lr 0.075 x 600": {"lr": 0.075, "iter": 600},
    "squared, + log latency, utils": {"util": True},
    "squared, 150 iterations": {"iter": 150},
    "squared, 600 iterations": {"iter": 600},
    "squared, lr 0.1 x 1000": {"lr": 0.1, "iter": 1000},
    "squared, lr 0.075 x 1200": {"lr": 0.075, "iter": 1200},
}


class _UtilModel(GemmModel):
    """The power trees also read the model's own log latency and log utilisations (at fit and
    at tabulation: latency is a function of (m, n, k))."""

    util = False

    def _tabulate(self, trees):
        if not self.util:
            return super()._tabulate(trees)
        gm, gn, gk = np.meshgrid(*(2.0**a for a in self.axes_), indexing="ij")
        X = features_with_util(self, gm.ravel(), gn.ravel(), gk.ravel())
        return trees.predict(X).reshape(gm.shape)


def features_with_util(model: GemmModel, m, n, k) -> np.ndarray:
    lat, _, _ = model._latency(m, n, k)
    X = _residual_features(m, n, k, model.c_)
    extra = [np.log(lat["latency_s"]), np.log(lat["compute_util"]), np.log(lat["memory_util"])]
    return np.column_stack([X, *extra])


def carryover_flags(table: pd.DataFrame) -> np.ndarray:
    """Per row of `table` (the GEMM table in file order): flagged by the carry-over detector."""
    from dse.fitting.carryover import detect_carryover, own_work_log_power
    from dse.fitting.power import CARRYOVER_FEATURES

    flags = np.zeros(len(table), dtype=bool)
    sel = np.isfinite(table["power_w"].to_numpy(float)) & (table["source"] == "aiconfigurator")
    rows = table[sel.to_numpy()]
    pos = np.flatnonzero(sel.to_numpy())
    for _, sub in rows.groupby("file", sort=True):
        i = rows.index.get_indexer(sub.index)
        feats = sub[list(CARRYOVER_FEATURES)].assign(log_lat=np.log(sub["latency_s"]))
        pw = sub["power_w"].to_numpy(np.float64)
        flags[pos[i]] = detect_carryover(np.log(pw), own_work_log_power(feats, pw)).flags
    return flags


def mape(pred: np.ndarray, true: np.ndarray) -> float:
    return float(100 * np.mean(np.abs(pred / true - 1)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--folds", default="0,1,2,3,4")
    ap.add_argument("--cache", default="", help="folder caching each fold's latency model")
    ap.add_argument("--variants", default="", help="comma-separated indices into VARIANTS")
    args = ap.parse_args()
    names = list(VARIANTS)
    if args.variants:
        names = [names[int(i)] for i in args.variants.split(",")]
    with threadpool_limits(1):
        ctx = FitContext(Path(args.data), GPU, 0, cv=False, log=lambda s: None)
        pm = Artifact.load(GPU).model("power")
        table = ctx.table("gemm").reset_index(drop=True)
        co_all = carryover_flags(table) if any("co" in VARIANTS[v] for v in names) else None
        rows = gemm_table_rows(ctx, "vllm", args.dtype)
        key = ["m", "n", "k"]
        if co_all is not None:
            t = table.assign(co=co_all)
            t = t[(t["gpu"] == GPU) & (t["engine"] == "vllm") & (t["dtype"] == args.dtype)]
            t = t[t["source"] == "aiconfigurator"]
            co = rows[key].merge(t[[*key, "co"]].drop_duplicates(key), on=key, how="left")["co"]
            co = co.fillna(False).to_numpy(bool)
            print(f"{args.dtype}: {len(rows)} rows, carry-over flagged {co.mean():.1%}")
        else:
            co = np.zeros(len(rows), dtype=bool)
        masks = group_kfold(5)(weight_shape_groups(rows))
        folds = [int(f) for f in args.folds.split(",")]
        n = len(rows)
        pw_true = rows["power_w"].to_numpy(float)
        e_true = rows["energy_j"].to_numpy(float)
        pred = {v: np.full(n, np.nan) for v in names}
        lat = np.full(n, np.nan)
        for f in folds:
            t0 = time.perf_counter()
            te = masks[f]
            tr = rows[~te]
            cache = Path(args.cache) / f"{args.dtype}_{f}.npz"
            if args.cache and cache.is_file():  # the fold's latency model, fitted before
                with np.load(cache) as z:
                    model = _UtilModel.from_state(dict(z))
                model.__class__ = _UtilModel
            else:
                model = _UtilModel(GPU, args.dtype, "vllm", power_model=None).fit(tr)
                if args.cache:
                    cache.parent.mkdir(parents=True, exist_ok=True)
                    np.savez(cache, **model.to_state())
            m, nn, k = (tr[c].to_numpy(np.float64) for c in key)
            base = model.predict(m, nn, k)
            model.power_model = pm
            p0 = model._generic_power(base["flops"], base["bytes"], base["latency_s"])
            X = _residual_features(m, nn, k, model.c_)
            sid = np.unique(np.column_stack([nn, k]), axis=0, return_inverse=True)[1].ravel()
            rp = np.log(tr["power_w"].to_numpy(float)) - np.log(p0)
            ted = rows[te]
            for v in names:
                opts = dict(VARIANTS[v])
                w_co = opts.pop("co", None)
                model.tree_lr, opts["iters"] = opts.pop("lr", 0.15), opts.pop("iter", 300)
                model.util = opts.pop("util", False)
                Xv = features_with_util(model, m, nn, k) if model.util else X
                if w_co is not None:
                    opts["weight"] = np.where(co[~te], w_co, 1.0)
                model.power_table_ = model._fit_power(Xv, m, nn, k, sid, rp, **opts)
                p = model.predict(*(ted[c].to_numpy(np.float64) for c in key))
                pred[v][te] = p["power_w"]
                lat[te] = p["latency_s"]
            print(f"fold {f}: {time.perf_counter() - t0:.0f} s", flush=True)
        sel = np.isfinite(lat)
        for v in names:
            pw = pred[v][sel]
            print(
                f"  {v:32s} power {mape(pw, pw_true[sel]):.3f}%  energy "
                f"{mape(pw * lat[sel], e_true[sel]):.3f}%"
            )


if __name__ == "__main__":
    main()
