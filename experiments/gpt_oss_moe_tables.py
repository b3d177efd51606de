"""gpt-oss's MXFP4 experts against the bf16 MoE table (docs/accuracy.md "Serving on today's
engines", "B200 serving J per output token").

    OMP_NUM_THREADS=1 PYTHONPATH=. python experiments/gpt_oss_moe_tables.py [--data ../shared/data]

1. vLLM's measured MXFP4 MoE kernel (aiconfigurator's `w4a16_mxfp4` rows at gpt-oss-20b's layout:
   32 experts, top 4, hidden and expert width 2880, one GPU, balanced routing) against what the
   shipped bf16 MoE model (`moe.vllm.bfloat16`, what `dse predict` priced every MoE block with
   before 2026-12-03) and the shipped 4-bit one (H100 only) say, with the roofline floor of the
   touched experts' weights at 4.25 bits (MXFP4: 4-bit values + an 8-bit scale per 32).
2. B200's artifact has no 4-bit MoE model: one is fitted here on B200's `w4a16_mxfp4` rows, in
   memory only (nothing is written), put into the loaded artifact, and ml-energy v3's B200 rows
   are scored as command O scores them (GPU-time scale, models held out), per model.
About 1 minute on one core.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from dse.data import load
from dse.fitting import serving as S
from dse.models.moe import MoEModel
from dse.predict.artifacts import load_artifact
from dse.spec.hardware import get_gpu

NAME = "moe.vllm.w4a16_mxfp4"
E, K, H = 32, 4, 2880  # gpt-oss-20b's MoE layout (expert width = hidden)


def kernel_table(moe: pd.DataFrame, gpu: str) -> pd.DataFrame:
    """Measured MXFP4 kernel vs the artifact's MoE models at gpt-oss-20b's layout, in us."""
    art, _ = load_artifact(gpu)
    q = moe[
        (moe["gpu"] == gpu)
        & (moe["engine"] == "vllm")
        & (moe["dtype"].astype(str) == "w4a16_mxfp4")
        & (moe["hidden_size"] == H)
        & (moe["distribution"] == "balanced")
        & (moe["moe_tp_size"] == 1)
        & (moe["moe_ep_size"] == 1)
    ].sort_values("num_tokens")
    t = q["num_tokens"].to_numpy(dtype=float)
    out = pd.DataFrame({"tokens": t.astype(int), "measured_us": q["latency_s"].to_numpy() * 1e6})
    for name in ("moe.vllm.bfloat16", NAME):
        if name in art.manifest["models"]:
            p = art.model(name).predict(
                num_tokens=t, hidden_size=float(H), inter_size=float(H), topk=float(K),
                num_experts=float(E), moe_tp_size=1.0, moe_ep_size=1.0,
            )  # fmt: skip
            out[name.removeprefix("moe.vllm.") + "_us"] = np.asarray(p["latency_s"]) * 1e6
    touched = E * (1 - (1 - K / E) ** t)
    out["floor_4.25bit_us"] = touched * 3 * H * H * 4.25 / 8 / get_gpu(gpu).hbm_bw_bytes_per_s * 1e6
    out["measured / bf16 model"] = out["measured_us"] / out["bfloat16_us"]
    return out


def b200_with_mxfp4(data: Path, moe: pd.DataFrame) -> tuple[dict[str, float], pd.DataFrame]:
    """ml-energy v3's B200 rows held out by model with an in-memory B200 4-bit MoE model."""
    rows = moe[
        (moe["gpu"] == "b200_sxm")
        & (moe["engine"] == "vllm")
        & (moe["dtype"].astype(str) == "w4a16_mxfp4")
    ]
    model = MoEModel("b200_sxm", "vllm", "w4a16_mxfp4").fit(rows)
    art, _ = load_artifact("b200_sxm")
    art.manifest["models"][NAME] = {
        "kind": "moe",
        "fitted_range": {k: list(v) for k, v in model.range_.items()},
    }
    art._instances[NAME] = model
    # B200's gpt-oss runs read as int4 (this model's dtype), as before 2026-12-03: since then
    # `read_v3` reads them as nvfp4, the MXFP4 x MXFP8 kernel they ran (b200_serving_bound.py)
    by_gpu = dict(S.V3_WEIGHT_DTYPE_BY_GPU)
    S.V3_WEIGHT_DTYPE_BY_GPU.clear()
    try:
        v3 = S.serving_rows_v3(data)
        v3 = v3[v3["gpu"] == "b200_sxm"]
        pred = S.leave_one_model_out(v3, terms=S.VERSIONS["0.11.1"].terms)
    finally:  # the cached artifact back as loaded
        S.V3_WEIGHT_DTYPE_BY_GPU.update(by_gpu)
        del art.manifest["models"][NAME]
        art._instances.pop(NAME, None)

    def ape(p: pd.DataFrame, a: str, b: str) -> float:
        return float(np.mean(np.abs(p[a] / p[b] - 1)))

    total = {
        "energy_mape": ape(pred, "pred_energy_j", "energy_j"),
        "time_mape": ape(pred, "pred_time_s", "time_s"),
        "power_mape": ape(pred, "pred_power_w", "power_w"),
        "static_energy_mape": ape(v3, S.STATIC + "energy_j", "energy_j"),
        "gpu_time_scale_all_rows": S.fit_constants(v3, S.VERSIONS["0.11.1"].terms)[
            "gpu_time_scale"
        ],
    }
    per = []
    for m, g in pred.groupby("model"):
        r = v3.loc[g.index]
        per.append(
            {
                "model": m.split("/")[-1],
                "rows": len(g),
                "static energy (median)": np.median(r[S.STATIC + "energy_j"] / r["energy_j"]) - 1,
                "static time (median)": np.median(r[S.STATIC + "latency_s"] / r["time_s"]) - 1,
                "held-out energy (mean)": float((g["pred_energy_j"] / g["energy_j"]).mean() - 1),
            }
        )
    return total, pd.DataFrame(per)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=Path("../shared/data"))
    args = ap.parse_args(argv)
    moe = load(args.data, kinds=["moe"])["moe"]
    for gpu in ("h100_sxm", "b200_sxm"):
        print(f"\n{gpu}: vLLM MXFP4 MoE kernel at gpt-oss-20b's layout (us)\n")
        print(kernel_table(moe, gpu).round(2).to_string(index=False))
    total, per = b200_with_mxfp4(args.data, moe)
    print("\nml-energy v3 B200, models held out, with a B200 4-bit MoE model fitted in memory:")
    print(", ".join(f"{k} {v:.3f}" for k, v in total.items()))
    print(per.round(3).to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
