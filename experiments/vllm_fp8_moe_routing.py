"""Should `dse predict` price a vLLM / TensorRT-LLM MoE block of fp8 weights by vLLM's fp8 MoE
models instead of its bf16 one? docs/dev/accuracy-journal.md "vLLM fp8 MoE blocks by vLLM's fp8
MoE tables: measured, not shipped".

    OMP_NUM_THREADS=1 PYTHONPATH=. DSE_SURROGATES=$PWD/surrogates \\
        python experiments/vllm_fp8_moe_routing.py [--data ../shared/data]

For each lookup of 1-byte weights (`dse.predict.adapters.PREFER["moe_fp8"]`: none, i.e. the
shipped bf16 table; per-tensor fp8 first as the GEMMs, `gemm_dtype`; fp8_block first), set in
this process only, prints (about 20 s, one core):

1. ml-energy v3 H100 (vLLM 0.11.1, `batching: continuous`): energy / time MAPE of the shipped
   terms held out by model (what command O prints as 13.5 / 10.8%), and per FP8 model (Qwen3-235B
   FP8, the only v3 H100 rows of fp8 weights) the static prediction's time and energy error;
2. how many golden predictions (tests/predict/test_golden_*.py) move, and their TTFT range.

Argonne's rows (Level 3, command I) carry no weight dtype (bf16): no lookup changes them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from dse.fitting import serving as S
from dse.predict import adapters

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
VARIANTS: dict[str, tuple[str, ...] | None] = {
    "bf16 table (shipped)": None,
    "fp8 first, fp8_block fallback (as the GEMMs)": ("vllm.fp8",),
    "fp8_block first, fp8 fallback": ("vllm.fp8_block", "vllm.fp8"),
}


def _set(prefs: tuple[str, ...] | None) -> None:
    if prefs is None:
        adapters.PREFER.pop("moe_fp8", None)
    else:
        adapters.PREFER["moe_fp8"] = prefs
    adapters._FOUND.clear()  # the lookups found so far were under the other preference


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=DATA)
    args = p.parse_args(argv)
    sys.path.insert(0, str(REPO / "tests" / "predict"))
    import test_golden_predictions as golden
    import test_golden_small as small

    stored = {
        "golden_predictions": np.load(golden.GOLDEN)["ttft_s"],
        "golden_small": np.load(small.GOLDEN)["ttft_s"],
    }
    print(
        "| lookup | v3 H100 energy / time (held out) | FP8 rows: time / energy error, median "
        "| golden TTFT rows moved (range) |"
    )
    print("|---|---|---|---|")
    for label, prefs in VARIANTS.items():
        _set(prefs)
        rows = S.serving_rows_v3(args.data)
        rows = rows[rows["gpu"] == "h100_sxm"].reset_index(drop=True)
        held = S.leave_one_model_out(rows, terms=S.VERSIONS["0.11.1"].terms)
        e = np.mean(np.abs(held["pred_energy_j"] / rows["energy_j"] - 1))
        t = np.mean(np.abs(held["pred_time_s"] / rows["time_s"] - 1))
        fp8 = rows["model"].str.endswith("-FP8")
        te = rows.loc[fp8, S.STATIC + "latency_s"] / rows.loc[fp8, "time_s"] - 1
        ee = rows.loc[fp8, S.STATIC + "energy_j"] / rows.loc[fp8, "energy_j"] - 1
        moved = []
        for name, new in (
            ("golden_predictions", golden.golden_outputs()["ttft_s"]),
            ("golden_small", small.numeric_outputs()["ttft_s"]),
        ):
            r = np.asarray(new, float) / np.asarray(stored[name], float) - 1
            r = r[np.isfinite(r) & (np.abs(r) > 1e-6)]
            span = f" ({100 * r.min():+.1f}..{100 * r.max():+.1f}%)" if len(r) else ""
            moved.append(f"{name} {len(r)}{span}")
        print(
            f"| {label} | {_pct(e)} / {_pct(t)} | {_pct(np.mean(np.abs(te)))} / "
            f"{_pct(np.mean(np.abs(ee)))} ({_pct(np.median(te))} / {_pct(np.median(ee))}) | "
            + "; ".join(moved)
            + " |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
