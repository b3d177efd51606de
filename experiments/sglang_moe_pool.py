"""SGLang's per-kernel bf16 MoE model with a kernel's part pooled with vLLM's bf16 rows of the
same GPU (issue 35, "MoE layouts pooled across engines ... ship what wins"), held out by SGLang
layout exactly as `dse fit`'s CV does (`hybrid_band_table`: 3 seeded folds by layout, fits on
<= 8,000 rows a sub-model, seed 0); vLLM rows of a held-out SGLang layout are removed from the
pooled training rows too; the score is SGLang's rows only.

    OMP_NUM_THREADS=1 PYTHONPATH=. python experiments/sglang_moe_pool.py --data ../shared/data \
        --gpu h100_sxm --variant kernel

Variants (the pooled sub-model: the shipped fused-MoE recipe, `dse.models.moe.MoEModel`, on
SGLang's and vLLM's rows, the residual MLP's features plus a 0/1 column "row is SGLang's", as
command T's one-hot; its roofline constants fitted on the pooled rows):
  kernel      each SGLang kernel's model pooled with the vLLM rows that ran the same kernel
              (their `kernel_source`): H100 Triton with vLLM's Triton rows (all of vLLM's H100
              bf16 table); B200 FlashInfer TRT-LLM with vLLM's TRT-LLM rows (B200 vLLM bf16 runs
              no Triton: 9,506 TRT-LLM, 1,053 CUTLASS rows)
  triton_all  SGLang's Triton model pooled with every vLLM bf16 row of the GPU, whatever its
              kernel (the brief's literal reading; on H100 the same as `kernel`)
The pooled fit subsamples its <= 8,000 rows from the pooled rows (seeded), as the shipped fit
subsamples its own table, so it sees fewer SGLang rows than the per-table fit.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Self

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dse.data import load
from dse.fitting import bands, plausible
from dse.fitting._hybrid_tables import hybrid_band_table
from dse.fitting.moe import MOE_SHAPE_GROUP
from dse.metrics import mape_pct
from dse.models import base as _base
from dse.models._hybrid import apply_residual, fit_hybrid_heads
from dse.models.moe import HIDDEN, MEMBERS, MoEModel, moe_inputs
from dse.models.moe_kernels import SOURCE_KERNEL, TRITON, KernelMoEModel

LAYOUT = list(MOE_SHAPE_GROUP)
# vLLM's backends as the kernels SGLang's tables name (`dse.models.moe_kernels.SOURCE_KERNEL`)
VLLM_KERNEL = {"triton": TRITON, "flashinfer_trtllm": "flashinfer_trtllm",
               "flashinfer_cutlass": "flashinfer_cutlass"}  # fmt: skip


def vllm_kernel(src: pd.Series) -> np.ndarray:
    s = src.astype(str).str.lower()
    out = np.full(len(s), "other", dtype=object)
    for key, k in VLLM_KERNEL.items():
        out[s.str.contains(key, regex=False).to_numpy() & (out == "other")] = k
    return out.astype(str)


def layout_key(rows: pd.DataFrame) -> np.ndarray:
    return rows[LAYOUT].astype(int).astype(str).agg("x".join, axis=1).to_numpy()


class EngineMoE(MoEModel):
    """MoEModel on rows of two engines: the residual's features plus "row is `engine`'s"."""

    def fit(self, df: pd.DataFrame) -> Self:  # type: ignore[override]
        v = self._inputs(moe_inputs(df))
        y = df["latency_s"].to_numpy(float)
        out, X = self.design(v, y)
        X = np.column_stack([X, (df["engine"] == self.engine).to_numpy(float)])
        self.mlp_, self.power_mlp_ = fit_hybrid_heads(
            X, y, out["base_s"], np.full(len(df), np.nan), members=MEMBERS, hidden=HIDDEN,
            max_iter=self.max_iter, max_rows=self.max_rows, seed=self.seed,
        )  # fmt: skip
        self.range_ = _base.fitted_range(self._range_inputs(v))
        return self

    def predict(self, **arrays: Any) -> dict[str, np.ndarray]:
        out, X = self.design(self._inputs(arrays))
        X = np.column_stack([X, np.ones(len(X))])
        apply_residual(out, X, self.mlp_, None)
        return out


def pooled_class(
    pool: pd.DataFrame, all_layouts: set[str], variant: str, scale_rows: bool = False
) -> type:
    """KernelMoEModel whose kernels with vLLM rows (`pool`, column `_kernel`) fit EngineMoE on
    SGLang's rows of the kernel and those vLLM rows, less every SGLang layout not trained on."""
    pk = layout_key(pool)

    class Pooled(KernelMoEModel):
        def fit(self, df: pd.DataFrame) -> Self:
            d = df[(df["gpu"] == self.gpu) & (df["engine"] == self.engine)]
            d = d[d["dtype"].astype(str) == self.moe_dtype]
            held = all_layouts - set(layout_key(d))
            keep = pool[~np.isin(pk, list(held))]
            kern = self.ran(d)
            names, counts = np.unique(kern, return_counts=True)
            self.models_ = {}
            self.pooled_rows_ = {}
            for k in names:
                mine = d[kern == k]
                other = (
                    keep
                    if (variant == "triton_all" and k == TRITON)
                    else (keep[keep["_kernel"] == k] if variant == "kernel" else keep.iloc[:0])
                )
                if len(other):
                    self.pooled_rows_[str(k)] = len(other)
                    # scale_rows: the SGLang rows' share of the fit as unpooled, vLLM's added
                    cap = self.max_rows
                    if scale_rows:
                        cap = int(np.ceil(cap * (len(mine) + len(other)) / len(mine)))
                    self.models_[str(k)] = EngineMoE(
                        self.gpu, self.engine, self.moe_dtype, self.seed, cap,
                        self.max_iter).fit(pd.concat([mine, other], ignore_index=True))  # fmt: skip
                else:
                    self.models_[str(k)] = self._sub().fit(mine)
            self.fallback_ = str(names[np.argmax(counts)])
            sub = self.models_[self.fallback_]
            self.range_ = _base.fitted_range(sub._range_inputs(sub._inputs(moe_inputs(d))))
            print(f"    fold fit: held {sorted(held)}, pooled {self.pooled_rows_}", flush=True)
            return self

    return Pooled


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--gpu", default="h100_sxm")
    ap.add_argument("--variant", choices=("kernel", "triton_all", "none"), default="kernel")
    ap.add_argument(
        "--scale-rows",
        action="store_true",
        help="a pooled fit's row cap scaled by (SGLang + vLLM rows) / SGLang rows of its kernel",
    )
    ap.add_argument("--out", default=None, help="JSON file")
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows = load(args.data, ["moe"])["moe"]
    rows, _ = plausible.screen("moe", rows)  # as `dse fit` does
    rows = rows[(rows["gpu"] == args.gpu) & (rows["dtype"].astype(str) == "bfloat16")]
    sgl = rows[rows["engine"] == "sglang"].reset_index(drop=True)
    pool = rows[rows["engine"] == "vllm"].reset_index(drop=True)
    pool["_kernel"] = vllm_kernel(pool["kernel_source"])
    print(f"{args.gpu}: sglang {len(sgl)} rows; vllm {pool.groupby('_kernel').size().to_dict()}")
    cls = pooled_class(pool, set(layout_key(sgl)), args.variant, args.scale_rows)
    table = hybrid_band_table(
        "moe.sglang.bfloat16", sgl,
        lambda **kw: cls(args.gpu, "sglang", "bfloat16", seed=0, **kw),
        moe_inputs, (MOE_SHAPE_GROUP, "layer shape"), 0,
    )  # fmt: skip
    pred = bands.held_out(table)["latency_s"]
    y = sgl["latency_s"].to_numpy(float)
    truth = sgl["kernel_source"].map(SOURCE_KERNEL).to_numpy()
    tk = layout_key(sgl)
    res = {
        "gpu": args.gpu, "variant": args.variant, "scale_rows": args.scale_rows, "rows": len(sgl),
        "mape_pct": round(mape_pct(pred, y), 2),
        "per_kernel": {str(k): round(mape_pct(pred[truth == k], y[truth == k]), 2)
                       for k in np.unique(truth)},
        "per_layout": {k: round(mape_pct(pred[tk == k], y[tk == k]), 2) for k in sorted(set(tk))},
        "seconds": round(time.perf_counter() - t0),
    }  # fmt: skip
    print(json.dumps(res, indent=1), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
