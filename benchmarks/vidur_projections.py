"""vidur's projection GEMMs (QKV, O, gate+up, down), each whole model held out, scored per
operator as `dse validate --kind layer_op` scores them (issue 33).

    PYTHONPATH=. python benchmarks/vidur_projections.py [--data ../shared/data] [--no-write]
        [--gpus h100_sxm a100_sxm] [--group model|d_model] [--models NAME ...] [--wave-steps]

`dse validate` prices a projection row with `dse.fitting.layer_ops.predict_layer_op_rows`: the
row's (model, tokens, tp) as a one-layer prefill through the pricer, Level 1's GEMM model times
Level 2's eager calibration. Of the fits behind that number only Level 2 reads vidur's rows:
the GEMM models are fitted on aiconfigurator's kernel tables, and the layer-op model
(`layer_op.vidur`, which does read them) prices RoPE and the activation, never a projection
item (`dse.models.level2.Level2Block.gemm_log_factors` reads the two GEMMs' Level-1 times
only; `tests/fitting/test_vidur_projections.py` checks the items do not move without it). So
each fold refits both Level-2 blocks on the GEMM rows of the other models (`_gemm_rows`, the
rows `dse fit` pools, with the shipped hyperparameters and seed), puts them in the shipped
artifact in place of its own, and scores the held-out model's rows with that same function.

`--group d_model` holds out every model of the held-out model's width together: vidur's 70B,
34B and 72B models share d_model 8192 and the attention projections' shapes, so a model held out
by name still leaves its QKV / O shapes in the fit (a harder, layout-held-out diagnostic).
`--wave-steps` scores the unshipped candidate `Level2Block(wave_steps=True)` the same way.
Without `--no-write` the "now" cell of the "vidur projections" row of docs/accuracy.md's
"Targets at a glance" is rewritten.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dse.data import load  # noqa: E402
from dse.fitting import plausible  # noqa: E402
from dse.fitting.artifacts import LEVEL_PREFIXES, without_levels  # noqa: E402
from dse.fitting.layer_ops import predict_layer_op_rows  # noqa: E402
from dse.fitting.level2 import _gemm_rows, _level2_tables, _x  # noqa: E402
from dse.metrics import mape_pct  # noqa: E402
from dse.models.artifact import Artifact  # noqa: E402
from dse.models.level2 import Level2Block  # noqa: E402

GPUS = ("h100_sxm", "a100_sxm")
# vidur's projection operators -> the names the docs use
OPS: dict[str, str] = {
    "attn_pre_proj": "QKV",
    "attn_post_proj": "O",
    "mlp_up_proj": "gate+up",
    "mlp_down_proj": "down",
}
# token-count bins of the diagnosis (vidur's num_tokens: 1 .. 32,768)
M_BINS: tuple[tuple[int, int], ...] = ((1, 32), (33, 256), (257, 2048), (2049, 1 << 20))
DOC = REPO / "docs" / "accuracy.md"
ROW = "| vidur projections"
COMMAND = "PYTHONPATH=. python benchmarks/vidur_projections.py --no-write"


class Fold(NamedTuple):
    """One fold's Level-2 refit: the models of each block, the vidur models whose GEMM rows
    the fit read, and how many GEMM rows that was."""

    held_out: tuple[str, ...]
    blocks: dict[str, Level2Block]
    trained_on: frozenset[str]
    gemm_rows: int


def fit_fold(
    tables: dict[str, pd.DataFrame],
    held_out: Sequence[str],
    shipped: Artifact,
    wave_steps: bool | None = None,
) -> Fold:
    """Both Level-2 blocks refitted on every block's GEMM rows except those of `held_out`'s
    models (the pooled calibration `dse fit` fits, with the shipped blocks' hyperparameters;
    `wave_steps` True / False: with / without `dse.models.level2.STEP_FEATURES`, None: as
    shipped)."""
    keep = {b: ~t["model"].isin(list(held_out)).to_numpy() for b, t in tables.items()}
    trained_on = frozenset(
        str(m) for b, t in tables.items() for m in t["model"].to_numpy()[keep[b]]
    )
    # `dse fit` kept only the blocks that beat Level 1
    names = [b for b in tables if shipped.has(f"level2.{b}")]
    params = {b: shipped.model(f"level2.{b}").get_params() for b in names}
    if wave_steps is not None:
        params = {b: {**p, "wave_steps": wave_steps} for b, p in params.items()}
    steps = {bool(p["wave_steps"]) for p in params.values()}
    G, r = _gemm_rows(tables, keep, wave_steps=steps.pop() if len(steps) == 1 else False)
    blocks = {b: Level2Block(**params[b]).fit(G, r, _x(tables[b])[keep[b]]) for b in names}
    return Fold(tuple(held_out), blocks, trained_on, len(r))


def with_level2(shipped: Artifact, blocks: dict[str, Level2Block]) -> Artifact:
    """`shipped` with its Level-2 blocks replaced by `blocks` (an in-memory artifact)."""
    models = dict(shipped.models)
    entries = dict(shipped.manifest["models"])
    for block, mdl in blocks.items():
        name = f"level2.{block}"
        models[name] = {k: np.asarray(v) for k, v in mdl.to_state().items()}
        entries[name] = {
            **entries[name],
            "fitted_range": {k: list(v) for k, v in mdl.fitted_range().items()},
        }
    manifest = {**shipped.manifest, "models": entries, "artifact_id": "held-out"}
    return Artifact(manifest=manifest, models=models, path=shipped.path)


def projection_rows(layer_ops: pd.DataFrame, gpu: str) -> pd.DataFrame:
    """vidur's projection rows of `gpu` that `dse validate` scores (its plausibility screen)."""
    rows = layer_ops[(layer_ops["gpu"] == gpu) & layer_ops["op"].isin(list(OPS))]
    kept, _ = plausible.screen("layer_op", rows)
    return kept


def groups_of(rows: pd.DataFrame, group: str) -> list[tuple[str, ...]]:
    """The held-out folds: one model each (`model`), or every model of one d_model."""
    if group == "model":
        return [(str(m),) for m in sorted(rows["model"].unique())]
    by = rows.groupby("d_model")["model"].unique()
    return [tuple(sorted(map(str, v))) for _, v in by.items()]


def held_out_predictions(
    layer_ops: pd.DataFrame,
    gpu: str,
    group: str = "model",
    only: Sequence[str] | None = None,
    shipped: Artifact | None = None,
    wave_steps: bool | None = None,
) -> tuple[pd.DataFrame, list[Fold]]:
    """Every projection row of `gpu` (of the models in `only`, default all) with `pred_s`
    priced by a Level 2 fitted without its fold's models (`wave_steps`: see `fit_fold`),
    `in_sample_s` by the shipped one."""
    shipped = shipped or Artifact.load(gpu)
    rows = projection_rows(layer_ops, gpu)
    # Level 1 alone prices the block rows, as `dse fit` does before it fits Level 2
    tables, _ = _level2_tables(gpu, layer_ops, without_levels(shipped, LEVEL_PREFIXES))
    out, folds = [], []
    for held in groups_of(rows, group):
        score = [m for m in held if only is None or m in only]
        if not score:
            continue
        fold = fit_fold(tables, held, shipped, wave_steps)
        folds.append(fold)
        part = rows[rows["model"].isin(score)]
        art = with_level2(shipped, fold.blocks)
        got = part.copy()
        got["pred_s"] = predict_layer_op_rows(art, "layer_op", part)["latency_pred_s"]
        got["in_sample_s"] = predict_layer_op_rows(shipped, "layer_op", part)["latency_pred_s"]
        out.append(got)
    if not out:
        have = ", ".join(sorted(map(str, rows["model"].unique())))
        raise SystemExit(
            f"--models: must name a vidur model of {gpu} ({have}), got {list(only or [])}"
        )
    return pd.concat(out), folds


def _mape(d: pd.DataFrame, col: str) -> float:
    return mape_pct(d[col].to_numpy(float), d["latency_s"].to_numpy(float), keep="positive")


def summary(d: pd.DataFrame) -> dict[str, float]:
    """Held-out MAPE per operator and over all rows (and in-sample, `*_in`)."""
    out = {"all": _mape(d, "pred_s"), "all_in": _mape(d, "in_sample_s"), "rows": float(len(d))}
    for op, name in OPS.items():
        sub = d[d["op"] == op]
        out[name] = _mape(sub, "pred_s")
        out[f"{name}_in"] = _mape(sub, "in_sample_s")
    return out


def report(d: pd.DataFrame, gpu: str) -> str:
    """The per-operator, per-model and per-token-count tables of one GPU."""
    s = summary(d)
    lines = [
        f"{gpu}: {int(s['rows'])} projection rows, {d['model'].nunique()} models; MAPE held "
        f"out (in-sample)",
        "  " + ", ".join(f"{n} {s[n]:.2f} ({s[n + '_in']:.2f})%" for n in OPS.values()),
        f"  all {s['all']:.2f} ({s['all_in']:.2f})%",
        "  by model: "
        + ", ".join(
            f"{m.split('/')[-1]} {_mape(g, 'pred_s'):.2f}%"
            for m, g in d.groupby("model", sort=True)
        ),
    ]
    m = d["num_tokens"].to_numpy()
    for lo, hi in M_BINS:
        sub = d[(m >= lo) & (m <= hi)]
        if len(sub):
            ratio = np.log(sub["pred_s"].to_numpy(float) / sub["latency_s"].to_numpy(float))
            per_op = ", ".join(
                f"{n} {_mape(sub[sub['op'] == op], 'pred_s'):.2f}" for op, n in OPS.items()
            )
            lines.append(
                f"  tokens {lo}-{hi}: {len(sub)} rows, {_mape(sub, 'pred_s'):.2f}% "
                f"(median log(pred/measured) {np.median(ratio):+.3f}; {per_op})"
            )
    return "\n".join(lines)


def cell(results: dict[str, dict[str, float]], group: str) -> str:
    """The "now" cell of the docs row: held-out per-operator MAPE by GPU."""
    held = "whole model" if group == "model" else "every model of one d_model"
    parts = []
    for gpu, s in results.items():
        ops = " / ".join(f"{s[n]:.1f}" for n in OPS.values())
        parts.append(f"{gpu.split('_')[0].upper()} **{s['all']:.2f}%** ({ops}%)")
    return (
        f"per operator as `dse validate --kind layer_op` scores them (Level 1 x Level 2), "
        f"{held} held out of Level 2 (command W): " + ", ".join(parts) + " (QKV / O / gate+up "
        "/ down); in-sample "
        + ", ".join(f"{g.split('_')[0].upper()} {s['all_in']:.2f}%" for g, s in results.items())
    )


def write_row(results: dict[str, dict[str, float]], group: str, target_pct: float) -> None:
    """Rewrite the "now" and "met" cells of the docs row (the others are hand-written)."""
    text = DOC.read_text()
    lines = text.split("\n")
    at = [i for i, line in enumerate(lines) if line.startswith(ROW)]
    if len(at) != 1:
        raise SystemExit(f"{DOC}: one row starting {ROW!r} expected, got {len(at)}")
    cells = lines[at[0]].split(" | ")
    met = [g.split("_")[0].upper() for g, s in results.items() if s["all"] <= target_pct]
    cells[1] = cell(results, group)
    cells[2] = "yes" if len(met) == len(results) else (", ".join(met) + " only" if met else "no")
    lines[at[0]] = " | ".join(cells)
    DOC.write_text("\n".join(lines))


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--data", default=str(REPO.parent / "shared" / "data"))
    p.add_argument("--gpus", nargs="+", default=list(GPUS))
    p.add_argument("--group", choices=("model", "d_model"), default="model")
    p.add_argument("--models", nargs="+", help="score only these models (each still held out)")
    p.add_argument(
        "--wave-steps",
        action="store_true",
        help="score the unshipped candidate Level2Block(wave_steps=True) held out (never written)",
    )
    p.add_argument("--no-write", action="store_true", help="print only")
    p.add_argument("--target-pct", type=float, default=6.0)
    args = p.parse_args()
    from threadpoolctl import threadpool_limits

    t0 = time.perf_counter()
    layer_ops = load(args.data, ["layer_op"])["layer_op"]
    results = {}
    with threadpool_limits(limits=1):  # one core, as `dse fit` fits Level 2
        for gpu in args.gpus:
            steps = True if args.wave_steps else None
            d, _ = held_out_predictions(layer_ops, gpu, args.group, args.models, wave_steps=steps)
            results[gpu] = summary(d)
            print(report(d, gpu), flush=True)
    print(f"({time.perf_counter() - t0:.0f} s)")
    whole = args.models is None and args.group == "model" and list(args.gpus) == list(GPUS)
    whole = whole and not args.wave_steps
    if not args.no_write and whole:
        write_row(results, args.group, args.target_pct)
        print(f"wrote the {ROW[2:]!r} row of {DOC.relative_to(REPO)}")
    elif not args.no_write:
        print(
            "not written: the docs row holds the default run (every model and GPU, --group model)"
        )


if __name__ == "__main__":
    main()
