"""SGLang's measured kernel rows priced two ways by the shipped artifacts: by vLLM's models (how
`engine: sglang` was priced before SGLang's own models shipped) and by SGLang's own (in sample:
the shipped models saw every row). Held-out numbers of SGLang's models are `dse fit`'s CV in the
manifest; this says how far vLLM's tables sit from SGLang's kernels on the same shapes.

    OMP_NUM_THREADS=1 PYTHONPATH=. DSE_SURROGATES=$PWD/surrogates \
        python experiments/sglang_vs_vllm_tables.py --data ../shared/data
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from dse.data import load
from dse.fitting.attention import predict_attention_rows
from dse.fitting.gemm import predict_gemm_rows
from dse.fitting.moe import predict_moe_rows
from dse.metrics import mape_pct
from dse.models.artifact import Artifact
from dse.predict.artifacts import resolve_artifact

KINDS = {
    "gemm": predict_gemm_rows,
    "context_attention": predict_attention_rows,
    "generation_attention": predict_attention_rows,
    "moe": predict_moe_rows,
}


def score(art: Artifact, kind: str, rows: pd.DataFrame, as_engine: str) -> float:
    sub = rows.assign(engine=as_engine)
    p = KINDS[kind](art, kind, sub)["latency_pred_s"].to_numpy(float)
    return float(mape_pct(p, rows["latency_s"].to_numpy(float)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default="../shared/data")
    args = ap.parse_args()
    tables = load(args.data, list(KINDS))
    for gpu in ("h100_sxm", "b200_sxm"):
        art, _ = resolve_artifact(gpu, "auto")
        assert art is not None
        for kind, df in tables.items():
            rows = df[(df["gpu"] == gpu) & (df["engine"] == "sglang")]
            if kind == "gemm":
                rows = rows[rows["source"] == "aiconfigurator"]
            if kind == "moe":
                rows = rows[rows["dtype"] == "bfloat16"]
            for dtype, part in rows.groupby("dtype") if kind == "gemm" else [("", rows)]:
                part = part.reset_index(drop=True)
                own = score(art, kind, part, "sglang")
                vllm = score(art, kind, part, "vllm")
                print(
                    f"{gpu} {kind} {dtype}: {len(part)} rows; SGLang's model (in sample) "
                    f"{own:.2f}%, vLLM's model {vllm:.2f}%",
                    flush=True,
                )
        del art
    np.seterr(all="ignore")


if __name__ == "__main__":
    main()
