"""What bounds vidur's projection GEMMs per operator, each model held out (issue 33; feeds
docs/accuracy.md's "vidur projections" row and the journal's 2026-12-03 i-vidur section).

    OMP_NUM_THREADS=1 PYTHONPATH=. python experiments/vidur_projection_bound.py [--gpus h100_sxm]

Three measurements per GPU, on the projection GEMM rows `dse validate --kind layer_op` scores:
- repeat noise: rows of two models that ran the same (m, n, k) GEMM (70B / 34B / 72B share
  their QKV and O shapes), each against the median of its shape;
- a smooth-in-m oracle: each (operator, model, TP) series fitted in-sample by a polynomial of
  degree 3 / 6 in log m: the error left is the steps cuBLAS's eager kernel choice takes in the
  token count, which no model smooth in m reads;
- Level 2 variants, leave one model out, at the calibration factor (the pricer's item is the
  Level-1 GEMM time times the factor, so this equals benchmarks/vidur_projections.py's number
  for the shipped variant): shipped; hidden (32,); the GEMM table of another engine (H100:
  SGLang's torch-linear table, TensorRT-LLM's); wave fill of three more CTA tiles as inputs;
  the candidate `Level2Block(wave_steps=True)` (that fill and each tile's log wave count).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import dse.models.level2 as L2
from dse.data import load
from dse.fitting.artifacts import LEVEL_PREFIXES, without_levels
from dse.fitting.layer_ops import _vidur_gemm_shapes
from dse.fitting.level2 import _gemm_rows, _level2_tables, _x
from dse.models.artifact import Artifact

OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
SHIPPED_GEMM_INPUTS = L2.gemm_inputs
EXTRA_TILES = ((128, 256), (256, 128), (64, 128))  # (m, n) CTA tiles besides 128 x 128


def with_tile_fills(X: np.ndarray, wave_steps: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The shipped GEMM inputs plus the last wave's fill under EXTRA_TILES."""
    a, b = SHIPPED_GEMM_INPUTS(X)
    m, sms, n = np.exp2(X[:, 3:4]), X[:, 10:11], np.exp2(X[:, [4, 6]])
    cols = []
    for tm, tn in EXTRA_TILES:
        w = np.ceil(m / tm - 1e-9) * np.ceil(n / tn - 1e-9) / sms
        cols.append(w / np.maximum(np.ceil(w - 1e-9), 1.0))
    e = np.stack(cols, axis=2)  # (rows, 2 GEMMs, tiles)
    return np.concatenate([a, e[:, 0]], axis=1), np.concatenate([b, e[:, 1]], axis=1)


def noise_and_smooth(rows: pd.DataFrame) -> dict[str, float]:
    m, n, k = _vidur_gemm_shapes(rows)
    r = rows.assign(m=m, n=n, k=k)
    shared = r[r.groupby(["m", "n", "k"])["model"].transform("nunique") > 1]
    med = shared.groupby(["m", "n", "k"])["latency_s"].transform("median")
    out = {
        "shared_rows": float(len(shared)),
        "repeat": float(np.mean(np.abs(shared.latency_s / med - 1)) * 100),
    }
    for deg in (3, 6):
        ape = []
        for _, s in r.groupby(["op", "model", "tensor_parallel"]):
            x, y = np.log(s["num_tokens"].to_numpy(float)), np.log(s["latency_s"].to_numpy())
            ape.append(np.abs(np.exp(np.polyval(np.polyfit(x, y, deg), x) - y) - 1) * 100)
        out[f"smooth_deg{deg}"] = float(np.concatenate(ape).mean())
    return out


def lomo(tables: dict[str, pd.DataFrame], inputs: Callable, **params) -> dict[str, float]:
    """Leave one model out at the factor: MAPE per GEMM of each block and over all."""
    L2.gemm_inputs = inputs  # _gemm_rows and Level2Block read the module's function
    shipped_names = L2.Level2Block.gemm_features
    if inputs is not SHIPPED_GEMM_INPUTS:  # a patched input set: the model's width check reads it
        width = inputs(_x(tables["ffn_dense"])[:1])[0].shape[1]
        L2.Level2Block.gemm_features = lambda self: tuple(f"x{i}" for i in range(width))
    try:
        ape: dict[str, list[np.ndarray]] = {}
        for held in sorted(tables["ffn_dense"]["model"].unique()):
            keep = {b: (t["model"] != held).to_numpy() for b, t in tables.items()}
            G, r = _gemm_rows(tables, keep, bool(params.get("wave_steps", False)))
            mdl = L2.Level2Block("ffn_dense", **params).fit(G, r, _x(tables["ffn_dense"]))
            for b, t in tables.items():
                X = _x(t)[~keep[b]]
                for f, col, c in zip(
                    mdl.gemm_log_factors(X),
                    ("measured_gemm1_s", "measured_gemm2_s"),
                    (0, 2),
                    strict=True,
                ):
                    y = t[col].to_numpy()[~keep[b]]
                    ape.setdefault(f"{b}.{col[9:14]}", []).append(
                        np.abs(np.exp(X[:, c] + f) / y - 1) * 100
                    )
    finally:
        L2.gemm_inputs = SHIPPED_GEMM_INPUTS
        L2.Level2Block.gemm_features = shipped_names
    out = {k: float(np.concatenate(v).mean()) for k, v in ape.items()}
    out["all"] = float(np.concatenate([np.concatenate(v) for v in ape.values()]).mean())
    return out


def with_gemm_table(art: Artifact, name: str) -> Artifact:
    """`art` pricing fp16 GEMMs with table `name` (in the place of its vLLM bf16 model)."""
    models, entries = dict(art.models), dict(art.manifest["models"])
    models["gemm.vllm.bfloat16"], entries["gemm.vllm.bfloat16"] = art.models[name], entries[name]
    return Artifact(manifest={**art.manifest, "models": entries}, models=models, path=art.path)


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    p.add_argument("--gpus", nargs="+", default=["h100_sxm", "a100_sxm"])
    args = p.parse_args()
    from threadpoolctl import threadpool_limits

    layer_ops = load(args.data, ["layer_op"])["layer_op"]
    with threadpool_limits(limits=1):
        for gpu in args.gpus:
            rows = layer_ops[(layer_ops["gpu"] == gpu) & layer_ops["op"].isin(OPS)]
            print(gpu, {k: round(v, 2) for k, v in noise_and_smooth(rows).items()}, flush=True)
            level1 = without_levels(Artifact.load(gpu), LEVEL_PREFIXES)
            assert level1 is not None
            variants: list[tuple[str, Artifact, Callable, dict]] = [
                ("shipped", level1, SHIPPED_GEMM_INPUTS, {}),
                ("hidden (32,)", level1, SHIPPED_GEMM_INPUTS, {"hidden": (32,)}),
                ("+ fill of 3 more tiles", level1, with_tile_fills, {}),
                (
                    "wave steps (Level2Block(wave_steps=True))",
                    level1,
                    SHIPPED_GEMM_INPUTS,
                    {"wave_steps": True},
                ),
            ]
            for other in ("gemm.sglang.bfloat16", "gemm.trtllm.bfloat16"):
                if level1.has(other):
                    variants.append(
                        (
                            f"Level 1 = {other}",
                            with_gemm_table(level1, other),
                            SHIPPED_GEMM_INPUTS,
                            {},
                        )
                    )
            for label, art, inputs, params in variants:
                t0 = time.perf_counter()
                tables, _ = _level2_tables(gpu, layer_ops, art)
                res = lomo(tables, inputs, **params)
                print(
                    f"  {label}: "
                    + ", ".join(f"{k} {v:.2f}" for k, v in res.items())
                    + f" ({time.perf_counter() - t0:.0f} s)",
                    flush=True,
                )


if __name__ == "__main__":
    main()
