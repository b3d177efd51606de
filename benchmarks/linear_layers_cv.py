"""Linear-attention layer kernels (Gated DeltaNet, Mamba-2) held out by layout (issue 35): the
measured model (`dse.models.linear_layers`) against the roofline dse priced them with before.
Feeds docs/accuracy.md ("Linear-attention layers").

    PYTHONPATH=. python benchmarks/linear_layers_cv.py                     # H100 and B200, ~12 min
    PYTHONPATH=. python benchmarks/linear_layers_cv.py --gpus h100_sxm --tables vllm/gdn

Per table (GPU, engine, layer, phase): seeded group folds (5, or one per layout below 5) over
the layout (n_heads, head_dim, n_groups, state_dim, chunk_size): every batch and length of a
held-out layout is out of the fit. `--max-rows 2000` fits each residual MLP on a seeded
subsample (a few minutes for everything on one idle core; docs/accuracy.md gives both). It reports the held-out MAPE of each kernel's rows (conv,
scan), of the layer (conv + scan of the same call, what `dse predict` prices as linear/scan),
and on the same layer rows the roofline dse used before (`dse.predict.ops`'s linear/scan work
at the bf16 peak and HBM bandwidth plus the 5 us launch); for Mamba-2 (conv rows only in the
share) the roofline of the conv's work alone. One process, one core; every row unless --max-rows.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dse.data import load
from dse.metrics import mape_pct
from dse.models.base import group_folds
from dse.models.linear_layers import LinearLayerModel, linear_inputs
from dse.roofline import LAUNCH_S, roofline_s
from dse.spec.arch import LINEAR_CHUNK_TOKENS, LINEAR_STATE_FLOPS
from dse.spec.hardware import get_gpu

LAYOUT = ("n_heads", "head_dim", "n_groups", "state_dim", "chunk_size")
CALL = ("d_model", *LAYOUT, "batch_size", "seq_len")
FOLDS = 5


def ops_roofline_s(rows: pd.DataFrame, gpu: str, phase: str, conv_only: bool) -> np.ndarray:
    """The roofline dse priced linear/scan with (`dse.predict.ops`, tensor parallelism already
    in the per-GPU shapes; a bf16 state): FLOPs and bytes of the conv + scan of one call."""
    g = get_gpu(gpu)
    nv, dv, ng, ds = (
        rows[c].to_numpy(float) for c in ("n_heads", "head_dim", "n_groups", "state_dim")
    )
    cw = rows["conv_width"].to_numpy(float)
    b = rows["batch_size"].to_numpy(float)
    tokens = b * (rows["seq_len"].to_numpy(float) if phase == "context" else 1.0)
    conv = 2 * ng * ds + nv * dv
    kvb, act = 2.0, 2.0
    if conv_only:
        flops = tokens * 2 * cw * conv
        traffic = 2 * b * (cw - 1) * conv * kvb + tokens * 2 * conv * act
    else:
        per_token = LINEAR_STATE_FLOPS * nv * ds * dv + 2 * cw * conv
        if phase == "context":
            per_token = per_token + LINEAR_CHUNK_TOKENS * nv * (ds + dv)
        state = nv * ds * dv * kvb + (cw - 1) * conv * kvb
        flops = tokens * per_token
        traffic = 2 * b * state + tokens * (conv + 2 * nv * dv) * act
    return roofline_s(flops, traffic, g.peak_bf16_flops_per_s, g.hbm_bw_bytes_per_s) + LAUNCH_S


def run_table(
    d: pd.DataFrame,
    gpu: str,
    engine: str,
    layer: str,
    phase: str,
    seed: int,
    max_rows: int | None = None,
) -> dict[str, Any]:
    lay = d[list(LAYOUT)].astype(str).agg("x".join, axis=1).to_numpy()
    n_lay = len(np.unique(lay))
    pred = np.full(len(d), np.nan)
    t0 = time.perf_counter()
    for te in group_folds(lay, min(FOLDS, n_lay), seed):
        kw = {} if max_rows is None else {"max_rows": max_rows}
        m = LinearLayerModel(layer, phase, gpu, engine, seed=seed, **kw).fit(d[~te])
        p = m.predict(**linear_inputs(d[te]))
        kern = d["kernel"].to_numpy()[te]
        got = np.full(te.sum(), np.nan)
        for k in m.kernels_:
            got = np.where(kern == k, p[f"{k}_s"], got)
        pred[te] = got
    y = d["latency_s"].to_numpy(float)
    out: dict[str, Any] = {
        "rows": len(d),
        "layouts": n_lay,
        "fit_s": round(time.perf_counter() - t0, 1),
    }
    for k in ("conv", "scan"):
        s = (d["kernel"] == k).to_numpy()
        if s.any():
            out[f"{k}_mape_pct"] = round(mape_pct(pred[s], y[s]), 2)
            out[f"{k}_rows"] = int(s.sum())
    # the layer: conv + scan of the same call (both kernels measured)
    dd = d.assign(pred=pred)
    kernels = sorted(dd["kernel"].unique())
    calls = (
        dd.groupby(list(CALL), sort=False)
        .agg(
            y=("latency_s", "sum"),
            p=("pred", "sum"),
            n=("kernel", "nunique"),
            conv_width=("conv_width", "first"),
        )
        .reset_index()
    )
    calls = calls[calls["n"] == len(kernels)]
    out["layer_rows"] = len(calls)
    out["layer_mape_pct"] = round(mape_pct(calls["p"].to_numpy(), calls["y"].to_numpy()), 2)
    roof = ops_roofline_s(calls, gpu, phase, conv_only=kernels == ["conv"])
    out["roofline_mape_pct"] = round(mape_pct(roof, calls["y"].to_numpy()), 2)
    out["roofline_what"] = "conv work only" if kernels == ["conv"] else "linear/scan (conv + scan)"
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--gpus", nargs="+", default=["h100_sxm", "b200_sxm"])
    ap.add_argument("--tables", nargs="*", default=None, help="engine/layer filters, e.g. vllm/gdn")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="JSON file for the results")
    ap.add_argument(
        "--max-rows",
        type=int,
        default=None,
        help="fit each kernel's residual MLP on a seeded subsample of at most this many rows "
        "(every row is still predicted); default: every row, as dse fit",
    )
    a = ap.parse_args(argv)
    t = load(a.data, ["linear_layer"]).get("linear_layer")
    if t is None or t.empty:
        print(f"{a.data}: no linear-attention tables")
        return 1
    results = []
    for (gpu, engine, layer, phase), d in t.groupby(["gpu", "engine", "layer", "phase"], sort=True):
        if gpu not in a.gpus or (a.tables and f"{engine}/{layer}" not in a.tables):
            continue
        r = run_table(d.reset_index(drop=True), gpu, engine, layer, phase, a.seed, a.max_rows)
        r.update(gpu=gpu, engine=engine, layer=layer, phase=phase)
        results.append(r)
        kern = ", ".join(
            f"{k} {r[f'{k}_mape_pct']}%" for k in ("conv", "scan") if f"{k}_mape_pct" in r
        )
        print(
            f"{gpu} {engine} {layer} {phase}: {r['rows']} rows, {r['layouts']} layouts; held out "
            f"{kern}; layer {r['layer_mape_pct']}% ({r['layer_rows']} calls) vs roofline "
            f"{r['roofline_mape_pct']}% [{r['roofline_what']}] ({r['fit_s']} s)",
            flush=True,
        )
    if a.out:
        Path(a.out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
