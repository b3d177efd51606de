"""SGLang attention: does the backend SGLang runs, as a model input, win held out?

SGLang runs several attention kernels by head configuration (H100: FlashAttention-3, Triton on
head_dim 512 and windowed 256; B200: TRT-LLM MHA, Triton on head_dim 192 and some 256 groups,
FlashInfer on bf16-query / fp8-KV prefill). `dse.models.attention_backend.sglang_backend` reads
that choice off the configuration (exact on the rows the models fit, checked here). Scored with
`dse fit`'s CV scheme (3 seeded folds by head configuration, CV fits on <= 8,000 rows) on the
rows `dse fit` fits (`default_backend_rows`): (A) no backend input (as shipped before), (B) the
rule's backend as one-hot MLP inputs (`AttentionModel(backend_input=True)`); overall and per
backend.

    OMP_NUM_THREADS=1 PYTHONPATH=. DSE_SURROGATES=$PWD/surrogates \
        python experiments/sglang_attention_backend.py --data ../shared/data [--gpu b200_sxm] \
        [--kind generation_attention] [--max-rows N]

`--max-rows N` subsamples each table to N rows (seeded) before the CV: a quicker, rougher read.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from dse.data import load
from dse.fitting import bands
from dse.fitting._hybrid_tables import hybrid_band_table
from dse.fitting.attention import ATTENTION_CLASSES, HEAD_GROUP, default_backend_rows
from dse.metrics import mape_pct
from dse.models.attention import attention_inputs
from dse.models.attention_backend import sglang_backend


def oof(rows: pd.DataFrame, kind: str, gpu: str, backend_input: bool, seed: int = 0) -> np.ndarray:
    cls = ATTENTION_CLASSES[kind]
    table = hybrid_band_table(
        kind,
        rows,
        lambda **kw: cls(gpu=gpu, engine="sglang", seed=seed, backend_input=backend_input, **kw),
        attention_inputs,
        (HEAD_GROUP, "head configuration"),
        seed,
    )
    return bands.held_out(table)["latency_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--gpu", action="append", help="default: h100_sxm and b200_sxm")
    ap.add_argument("--kind", action="append", choices=list(ATTENTION_CLASSES))
    ap.add_argument("--max-rows", type=int, default=0, help="subsample each table (0: all)")
    args = ap.parse_args()
    kinds = args.kind or list(ATTENTION_CLASSES)
    tables = load(args.data, kinds)
    for gpu in args.gpu or ["h100_sxm", "b200_sxm"]:
        for kind in kinds:
            df = tables[kind]
            rows = df[(df["gpu"] == gpu) & (df["engine"] == "sglang")].reset_index(drop=True)
            rows = rows[default_backend_rows(rows, "sglang")].reset_index(drop=True)
            if args.max_rows and len(rows) > args.max_rows:
                rows = rows.sample(args.max_rows, random_state=0).reset_index(drop=True)
            cls = ATTENTION_CLASSES[kind]
            rule = sglang_backend(gpu, cls.phase_default, cls()._inputs(attention_inputs(rows)))
            measured = rows["kernel_source"].astype(str).to_numpy()
            y = rows["latency_s"].to_numpy(float)
            print(
                f"{gpu} {kind}: {len(rows)} rows; rule = measured backend on "
                f"{100 * np.mean(rule == measured):.2f}% of them",
                flush=True,
            )
            for label, flag in (("A no backend input", False), ("B backend one-hot", True)):
                t0 = time.perf_counter()
                p = oof(rows, kind, gpu, flag)
                per = ", ".join(
                    f"{b} {mape_pct(p[measured == b], y[measured == b]):.2f}% "
                    f"({int(np.sum(measured == b))})"
                    for b in sorted(set(measured))
                )
                print(
                    f"  ({label}) held out {mape_pct(p, y):.2f}%; {per} "
                    f"({time.perf_counter() - t0:.0f} s)",
                    flush=True,
                )


if __name__ == "__main__":
    main()
