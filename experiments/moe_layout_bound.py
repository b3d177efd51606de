"""What bounds the held-out-layout error of the vLLM Triton fused-MoE tables (issue 19, session
15)? Feeds docs/accuracy.md ("MoE, layout held out", "Targets at a glance") and
docs/dev/accuracy-journal.md ("Session 15: what bounds the Triton MoE tables").

    OMP_NUM_THREADS=1 PYTHONPATH=. python experiments/moe_layout_bound.py --out /tmp/bound.json

For each Triton table that misses the <= 8% target (H100 vLLM bf16, H200 vLLM bf16 / fp8, A100
vLLM bf16), on the 5 seeded layout folds of command L (`dse.fitting.cv.group_folds` over the
layout (hidden_size, inter_size, topk, num_experts), seed 0), on the rows `dse fit` keeps
(`dse.fitting.plausible.screen`):

1. the shipped class (`dse.fitting.moe.model_class_of`: `dse.models.moe`, shipped setting 2 MLPs
   x 300 epochs x <= 30,000 rows, so the table's number is command L's) per held-out layout, and
   which held-out layouts lie on the edge of their fold's training layouts (`edge_of`): a
   coordinate of the layout outside the [min, max] of the same coordinate over the layouts the
   fold trained on. Routing coordinates: log top-k, log experts, log experts per top-k (routed
   tokens per expert T k / E spans the same log range shifted by log T, so it adds nothing);
   width coordinates: log hidden, log inter. MAPE of interior vs edge layouts (row-weighted).
2. model-agnostic learners on the same folds and on rows held out at random (5 shuffled folds,
   every layout in training): the fitted physics base alone (the shipped class's roofline, 4
   constants), gradient-boosted trees (scikit-learn HistGradientBoosting) and k-nearest
   neighbours, both on physics features (`_features`) predicting log(measured / physics base).
   The shipped class is scored by rows too. Layout-held-out minus row-held-out is what the 8-12
   layouts a table cost; row-held-out is what the inputs leave when every layout is seen.
3. the trend: each fold's fit on a random subset of n of its training layouts (4 draws), scored
   on the same held-out layouts, the shipped class at the screen setting (1 MLP x 60 epochs x
   <= 4,000 rows) there.

Learner settings are fixed here and were not tuned on the scored rows. One core (--jobs does
not exist: set OMP_NUM_THREADS=1); about 20 min.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import spearmanr
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.model_selection import KFold
from sklearn.neighbors import KNeighborsRegressor

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dse.data import load
from dse.fitting import cv as U
from dse.fitting import moe as moe_fit
from dse.fitting import plausible
from dse.metrics import mape_pct
from dse.models import moe as moe_mod

# the Triton tables that miss 8% held out by layout (command L: 10.6 / 10.0 / 9.6 / 14.4%)
TABLES = (
    "h100_sxm/vllm/bfloat16",
    "h200_sxm/vllm/bfloat16",
    "h200_sxm/vllm/fp8",
    "a100_sxm/vllm/bfloat16",
)
LAYOUT = moe_fit.MOE_SHAPE_GROUP  # what `dse fit`'s MoE CV holds out: one layout
ROUTING = ("log_topk", "log_experts", "log_experts_per_topk")
WIDTH = ("log_hidden", "log_inter")
# (members, epochs, rows a fit): the shipped setting (dse.models.moe) and the screen setting of
# the session-13/14 screens (minutes less; moves a table's number by up to ~3 points)
SETTINGS = {"shipped": (2, 300, 30000), "screen": (1, 60, 4000)}
TREND_SIZES = (
    3,
    5,
    7,
    8,
)  # training layouts per fold in the trend; the full fold is the last point
TREND_DRAWS = 4
Learner = Callable[[pd.DataFrame, pd.DataFrame, str, str, str], np.ndarray]


@contextmanager
def _members(n: int) -> Iterator[None]:
    old, moe_mod.MEMBERS = moe_mod.MEMBERS, n
    try:
        yield
    finally:
        moe_mod.MEMBERS = old


def shipped(setting: str, seed: int = 0) -> Learner:
    """The class `dse fit` ships for the table, fitted on `tr` (MLP seed `seed`, as command L's
    --seed), latency of `te`."""
    members, epochs, max_rows = SETTINGS[setting]

    def fit_predict(tr: pd.DataFrame, te: pd.DataFrame, gpu: str, eng: str, dt: str) -> np.ndarray:
        cls = moe_fit.model_class_of(eng, tr)
        with _members(members):
            m = cls(gpu, eng, dt, seed=seed, max_rows=max_rows, max_iter=epochs).fit(tr)
        return m.predict(**m._table_inputs(te))["latency_s"]

    return fit_predict


def _physics(
    tr: pd.DataFrame, te: pd.DataFrame, gpu: str, eng: str, dt: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(features of tr, of te, physics base of tr, of te): the shipped class's roofline
    (`dse.models.moe.MoEModel.design`) fitted on `tr` only."""
    m = moe_mod.MoEModel(gpu, eng, dt)
    v_tr = m._inputs(m._table_inputs(tr))
    v_te = m._inputs(m._table_inputs(te))
    out_tr, _ = m.design(v_tr, tr["latency_s"].to_numpy(float))  # fits m.roof_ on tr
    out_te, _ = m.design(v_te)
    return (
        _features(v_tr, m.weight_bytes, out_tr["base_s"]),
        _features(v_te, m.weight_bytes, out_te["base_s"]),
        out_tr["base_s"],
        out_te["base_s"],
    )


def _features(v: dict[str, np.ndarray], weight_bytes: float, base_s: np.ndarray) -> np.ndarray:
    """Physics features of one call on the measured rank, layout-agnostic where they can be:
    columns log T, log routed tokens per expert T k / E, experts touched / local experts (the
    fraction of local weights read), log experts touched, log routed slots T k / ep, log hidden,
    log local inter I / tp, log local experts E / ep, log tp, log ep, routing skew, log FLOPs,
    log bytes, log FLOPs / byte, log physics base (s)."""
    w = moe_mod.moe_work(v, weight_bytes)
    T, H, k, E = v["num_tokens"], v["hidden_size"], v["topk"], v["num_experts"]
    e_l = E / v["moe_ep_size"]
    return np.column_stack(
        [
            np.log(T),
            np.log(T * k / E),
            w["touched"] / e_l,
            np.log(np.maximum(w["touched"], 1e-3)),
            np.log(np.maximum(w["slots"], 1e-3)),
            np.log(H),
            np.log(w["i_local"]),
            np.log(e_l),
            np.log(v["moe_tp_size"]),
            np.log(v["moe_ep_size"]),
            v["skew"],
            np.log(w["flops"]),
            np.log(w["bytes"]),
            np.log(w["flops"] / w["bytes"]),
            np.log(base_s),
        ]
    )


# kNN distances over these columns of `_features` (standardised on the training rows): the
# regime of the call (tokens, tokens per expert, weights touched, width, skew, intensity, size)
KNN_COLS = (0, 1, 2, 5, 6, 10, 13, 14)


def physics_alone(tr: pd.DataFrame, te: pd.DataFrame, gpu: str, eng: str, dt: str) -> np.ndarray:
    return _physics(tr, te, gpu, eng, dt)[3]


def trees(tr: pd.DataFrame, te: pd.DataFrame, gpu: str, eng: str, dt: str) -> np.ndarray:
    """Gradient-boosted trees on `_features`: log(latency / physics base)."""
    x_tr, x_te, b_tr, b_te = _physics(tr, te, gpu, eng, dt)
    y = np.log(tr["latency_s"].to_numpy(float) / b_tr)
    m = HistGradientBoostingRegressor(max_iter=300, random_state=0).fit(x_tr, y)
    return b_te * np.exp(m.predict(x_te))


def neighbours(tr: pd.DataFrame, te: pd.DataFrame, gpu: str, eng: str, dt: str) -> np.ndarray:
    """10 nearest neighbours (distance-weighted) over `KNN_COLS`: log(latency / physics base)."""
    x_tr, x_te, b_tr, b_te = _physics(tr, te, gpu, eng, dt)
    cols = list(KNN_COLS)
    mu, sd = x_tr[:, cols].mean(0), x_tr[:, cols].std(0) + 1e-9
    y = np.log(tr["latency_s"].to_numpy(float) / b_tr)
    m = KNeighborsRegressor(10, weights="distance").fit((x_tr[:, cols] - mu) / sd, y)
    return b_te * np.exp(m.predict((x_te[:, cols] - mu) / sd))


def oof(learn: Learner, rows: pd.DataFrame, folds: list[np.ndarray], table: str) -> np.ndarray:
    gpu, eng, dt = table.split("/")
    pred = np.full(len(rows), np.nan)
    for te in folds:
        pred[te] = learn(rows[~te], rows[te], gpu, eng, dt)
    return pred


def layout_coords(lay: pd.DataFrame) -> pd.DataFrame:
    """Log coordinates of each layout (one row per layout)."""
    return pd.DataFrame(
        {
            "log_topk": np.log(lay["topk"].to_numpy(float)),
            "log_experts": np.log(lay["num_experts"].to_numpy(float)),
            "log_experts_per_topk": np.log(lay["num_experts"] / lay["topk"]).to_numpy(float),
            "log_hidden": np.log(lay["hidden_size"].to_numpy(float)),
            "log_inter": np.log(lay["inter_size"].to_numpy(float)),
        },
        index=lay.index,
    )


def edge_of(c: pd.Series, train: pd.DataFrame, cols: tuple[str, ...]) -> list[str]:
    """The coordinates of `cols` in which layout `c` lies outside [min, max] of `train` (ties
    count as inside): empty for an interior layout."""
    tol = 1e-9
    return [k for k in cols if c[k] < train[k].min() - tol or c[k] > train[k].max() + tol]


def _name(key: tuple) -> str:
    return "x".join(str(int(x)) for x in key)


def mape(p: np.ndarray, y: np.ndarray) -> float:
    return round(mape_pct(p, y), 2)


def _score(
    p_lay: np.ndarray,
    p_row: np.ndarray,
    y: np.ndarray,
    row_layout: np.ndarray,
    names: list[str],
    layouts: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """MAPE of out-of-fold predictions held out by layout and by row: whole table, per layout,
    and over the interior and edge layouts (routing edge; routing or width edge)."""
    ape_lay = np.abs(p_lay / y - 1.0) * 100
    ape_row = np.abs(p_row / y - 1.0) * 100
    s: dict[str, Any] = {
        "by_layout": mape(p_lay, y),
        "by_row": mape(p_row, y),
        "per_layout": {n: round(float(ape_lay[row_layout == n].mean()), 2) for n in names},
        "per_layout_by_row": {n: round(float(ape_row[row_layout == n].mean()), 2) for n in names},
    }
    for kind, cols in (("routing", ("routing_edge",)), ("any", ("routing_edge", "width_edge"))):
        edge = {n for n, d in layouts.items() if any(d[c] for c in cols)}
        e = np.isin(row_layout, list(edge))
        s[f"{kind}_edge_layouts"] = len(edge)
        for part, sel in (("interior", ~e), ("edge", e)):
            for scheme, ape in (("by_layout", ape_lay), ("by_row", ape_row)):
                s[f"{kind}_{part}_{scheme}"] = (
                    round(float(ape[sel].mean()), 2) if sel.any() else None
                )
    return s


def run_table(rows: pd.DataFrame, table: str, args: Any) -> dict[str, Any]:
    t0 = time.perf_counter()
    y = rows["latency_s"].to_numpy(float)
    groups = U.architecture_groups(rows, LAYOUT)
    lay = rows[list(LAYOUT)].drop_duplicates().sort_values(list(LAYOUT)).reset_index(drop=True)
    coords = layout_coords(lay)
    names = [_name(tuple(r)) for r in lay.itertuples(index=False)]
    row_layout = np.array([_name(tuple(r)) for r in rows[list(LAYOUT)].itertuples(index=False)])
    by_layout = [te for te in U.group_folds(groups, args.folds, args.seed) if not te.all()]
    by_row = []
    for _, idx in KFold(args.folds, shuffle=True, random_state=args.seed).split(rows):
        te = np.zeros(len(rows), dtype=bool)
        te[idx] = True
        by_row.append(te)

    # 1. edges: each layout against the training layouts of the fold that holds it out
    layouts: dict[str, dict[str, Any]] = {}
    for f, te in enumerate(by_layout):
        held = set(row_layout[te])
        train = coords[[n not in held for n in names]]
        for i, n in enumerate(names):
            if n in held:
                layouts[n] = {
                    "fold": f,
                    "rows": int((row_layout == n).sum()),
                    "routing_edge": edge_of(coords.iloc[i], train, ROUTING),
                    "width_edge": edge_of(coords.iloc[i], train, WIDTH),
                    # distance to the nearest training layout, log coordinates in units of
                    # the table's spread of each (hidden, inter, top-k, experts)
                    "nearest": round(_nearest(coords, i, train), 3),
                }

    # 2. learners, both schemes
    learners: dict[str, Learner] = {
        "shipped": shipped(args.setting, args.seed),
        "physics": physics_alone,
        "trees": trees,
        "knn": neighbours,
    }
    rec: dict[str, Any] = {"table": table, "rows": len(rows), "layouts": len(names)}
    rec["setting"] = args.setting
    rec["folds"] = {str(f): sorted(set(row_layout[te])) for f, te in enumerate(by_layout)}
    scores: dict[str, dict[str, Any]] = {}
    preds: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for lname, learn in learners.items():
        t1 = time.perf_counter()
        preds[lname] = (oof(learn, rows, by_layout, table), oof(learn, rows, by_row, table))
        scores[lname] = _score(*preds[lname], y, row_layout, names, layouts)
        scores[lname]["seconds"] = round(time.perf_counter() - t1, 1)
    # one fixed blend, not weighted on any rows: the geometric mean of the shipped class and
    # the trees (two learners of different kind on the same inputs; errors partly independent)
    preds["shipped_x_trees"] = (
        np.sqrt(preds["shipped"][0] * preds["trees"][0]),
        np.sqrt(preds["shipped"][1] * preds["trees"][1]),
    )
    scores["shipped_x_trees"] = _score(*preds["shipped_x_trees"], y, row_layout, names, layouts)
    for lname, s in scores.items():
        print(
            f"  {lname}: by layout {s['by_layout']}%, by row {s['by_row']}% "
            f"({s.get('seconds', 0)} s)",
            flush=True,
        )
    rec["learners"] = scores
    rec["layout_detail"] = layouts

    # 3. trend in the number of training layouts
    if args.trend:
        trend_learners = {
            "shipped_screen": shipped("screen", args.seed),
            "physics": physics_alone,
            "trees": trees,
            "knn": neighbours,
        }
        rng = np.random.default_rng(args.seed)
        trend: dict[str, dict[str, float]] = {k: {} for k in trend_learners}
        full = min(len(set(row_layout[~te])) for te in by_layout)
        for n in (*[s for s in TREND_SIZES if s < full], None):
            draws = 1 if n is None else TREND_DRAWS
            ape = {k: [] for k in trend_learners}
            for _ in range(draws):
                keep = []
                for te in by_layout:
                    pool = sorted(set(row_layout[~te]))
                    pick = pool if n is None else list(rng.choice(pool, n, replace=False))
                    keep.append(np.isin(row_layout, pick))
                for k, learn in trend_learners.items():
                    gpu, eng, dt = table.split("/")
                    p = np.full(len(rows), np.nan)
                    for te, tr in zip(by_layout, keep, strict=True):
                        p[te] = learn(rows[tr], rows[te], gpu, eng, dt)
                    ape[k].append(mape(p, y))
            for k in trend_learners:
                trend[k]["all" if n is None else str(n)] = round(float(np.mean(ape[k])), 2)
        rec["trend"] = trend
        # the full folds' mean training layouts (the "all" point)
        rec["trend_all_layouts"] = float(np.mean([len(set(row_layout[~te])) for te in by_layout]))
        print(f"  trend {trend}", flush=True)
    rec["seconds"] = round(time.perf_counter() - t0, 1)
    return rec


def _nearest(coords: pd.DataFrame, i: int, train: pd.DataFrame) -> float:
    cols = ["log_hidden", "log_inter", "log_topk", "log_experts"]
    sd = coords[cols].std().to_numpy()
    d = (train[cols].to_numpy() - coords[cols].iloc[i].to_numpy()) / sd
    return float(np.sqrt((d**2).sum(1)).min())


def _extrapolate(points: dict[str, float], all_layouts: float, target: float = 8.0) -> str:
    """A power law MAPE = a n^-b fitted (log-log least squares) to the trend points of >= 5
    training layouts, and the n where it reaches `target`: an extrapolation, read as an order
    of magnitude (4 points, each the mean of 4 draws)."""
    n = np.array([all_layouts if k == "all" else float(k) for k in points])
    e = np.array(list(points.values()))
    keep = n >= 5
    if keep.sum() < 3:
        return "too few points"
    slope, icpt = np.polyfit(np.log(n[keep]), np.log(e[keep]), 1)
    if slope > -0.05:
        return f"MAPE ~ n^{-slope:.2f}: flat"
    need = np.exp((np.log(target) - icpt) / slope)
    where = f"~{need:.0f}" if need < 100 else "> 100"
    return f"MAPE ~ n^-{-slope:.2f}; {target:g}% at {where} training layouts"


def _report(recs: list[dict[str, Any]]) -> None:
    print(
        "\n| table | learner | by layout | by row | interior / edge (routing) | "
        "interior / edge (routing or width) | edge by row (routing) |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in recs:
        for k, s in r["learners"].items():
            print(
                f"| {r['table']} | {k} | {s['by_layout']}% | {s['by_row']}% | "
                f"{s['routing_interior_by_layout']} / {s['routing_edge_by_layout']}% "
                f"({s['routing_edge_layouts']} edge) | {s['any_interior_by_layout']} / "
                f"{s['any_edge_by_layout']}% ({s['any_edge_layouts']} edge) | "
                f"{s['routing_interior_by_row']} / {s['routing_edge_by_row']}% |"
            )
    print("\nper held-out layout (shipped class): MAPE by layout / by row, edge, nearest")
    for r in recs:
        s = r["learners"]["shipped"]
        print(f"## {r['table']}")
        for n, d in sorted(r["layout_detail"].items(), key=lambda kv: -s["per_layout"][kv[0]]):
            print(
                f"  {n:18s} fold {d['fold']} {s['per_layout'][n]:6.2f} / "
                f"{s['per_layout_by_row'][n]:5.2f}%  routing {','.join(d['routing_edge']) or '-'}"
                f"  width {','.join(d['width_edge']) or '-'}  nearest {d['nearest']}"
            )
        if "trend" in r:
            print(f"  trend: {r['trend']} (all = {r.get('trend_all_layouts')} layouts)")
            for lname, pts in r["trend"].items():
                print(f"    {lname}: {_extrapolate(pts, r['trend_all_layouts'])}")
    # does a layout's held-out error grow with its distance to the nearest training layout?
    # (by row, the same layouts with every layout seen: the control)
    print("\nSpearman rank correlation, distance to the nearest training layout vs layout MAPE")
    for lname in ("shipped", "trees"):
        pooled: dict[str, list[float]] = {"d": [], "lay": [], "row": []}
        for r in recs:
            s = r["learners"][lname]
            d = [r["layout_detail"][n]["nearest"] for n in s["per_layout"]]
            lay, row = list(s["per_layout"].values()), list(s["per_layout_by_row"].values())
            pooled["d"] += d
            pooled["lay"] += lay
            pooled["row"] += row
            print(
                f"  {lname} {r['table']}: by layout {spearmanr(d, lay).statistic:.2f}, "
                f"by row {spearmanr(d, row).statistic:.2f}"
            )
        rho = spearmanr(pooled["d"], pooled["lay"])
        print(
            f"  {lname} pooled ({len(pooled['d'])} layouts): by layout {rho.statistic:.2f} "
            f"(p {rho.pvalue:.1g}), by row {spearmanr(pooled['d'], pooled['row']).statistic:.2f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    ap.add_argument("--tables", nargs="*", default=list(TABLES))
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--setting", choices=tuple(SETTINGS), default="shipped")
    ap.add_argument("--no-trend", dest="trend", action="store_false")
    ap.add_argument("--out", default=None)
    ap.add_argument("--read", default=None, help="a saved --out file: print its report only")
    args = ap.parse_args()
    if args.read:
        _report(json.loads(Path(args.read).read_text())["records"])
        return
    t0 = time.perf_counter()
    all_rows = load(args.data, ["moe"])["moe"]
    all_rows, _ = plausible.screen("moe", all_rows)  # as `dse fit` does
    recs = []
    for table in args.tables:
        gpu, eng, dt = table.split("/")
        sel = (all_rows["gpu"] == gpu) & (all_rows["engine"] == eng) & (all_rows["dtype"] == dt)
        rows = all_rows[sel].reset_index(drop=True)
        print(f"## {table}: {len(rows)} rows", flush=True)
        recs.append(run_table(rows, table, args))
    _report(recs)
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")
    if args.out:
        out = {
            "command": " ".join(sys.argv),
            "seconds": round(time.perf_counter() - t0),
            "records": recs,
        }
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
