"""What a fallback would score: tables of one engine, dtype or chip priced onto the measured rows
of another, on the training share (docs/accuracy.md, "Fallbacks across engines, dtypes and
sibling GPUs"). Every number is out of sample for the pairing (no model saw the rows' own
engine/dtype/chip), though the shapes are the same aiconfigurator lattice.

Feeds docs/accuracy.md, "Fallbacks across engines, dtypes and sibling GPUs" (the evidence behind
`dse.spec.stand_ins`; unshipped pairings included).

    OMP_NUM_THREADS=1 PYTHONPATH=. python experiments/fallbacks_share.py --data ../shared/data  # ~15 s

Prints markdown tables: GEMM (sibling chip with the roofline move, another dtype, another engine;
energy with the GPU's own power), MoE (another engine; the sibling chip), all-reduce and the
other NCCL collectives (another implementation; the sibling chip).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from dse.data import load
from dse.fitting.allreduce import allreduce_groups
from dse.models.artifact import Artifact
from dse.models.gemm import gemm_work
from dse.models.moe import moe_inputs
from dse.predict.gemm_choice import Gemm, sibling_factor
from dse.roofline import LAUNCH_S
from dse.spec.hardware import get_gpu


def mape(pred: np.ndarray, true: np.ndarray) -> float:
    pred, true = np.asarray(pred, float), np.asarray(true, float)
    ok = np.isfinite(pred) & np.isfinite(true) & (true > 0)
    return float(100.0 * np.mean(np.abs(pred[ok] / true[ok] - 1.0)))


def without(art: Artifact, name: str) -> Artifact:
    manifest = dict(art.manifest)
    manifest["models"] = {k: v for k, v in art.manifest["models"].items() if k != name}
    return Artifact(manifest=manifest, models={k: v for k, v in art.models.items() if k != name})


def rows_of(t: pd.DataFrame, gpu: str, engine: str, dtype: str) -> pd.DataFrame:
    r = t[(t["gpu"] == gpu) & (t["engine"] == engine) & (t["dtype"] == dtype)]
    return r[(r[["m", "n", "k"]] > 0).all(axis=1)] if "m" in r else r


def gemm_tables(t: pd.DataFrame, art: dict[str, Artifact]) -> None:
    print("GEMM, latency MAPE % (energy where the rows have measured power)\n")
    print(
        "| model | rows | as is | moved by the roofline | energy, GPU's own power | energy, lender's power |"
    )
    print("|---|---|---|---|---|---|")
    for eng, dt in (("vllm", "bfloat16"), ("vllm", "fp8_block")):
        r = rows_of(t, "h200_sxm", eng, dt)
        m, n, k = (r[c].to_numpy(float) for c in "mnk")
        y, e = r["latency_s"].to_numpy(float), r["energy_j"].to_numpy(float)
        name = f"gemm.{eng}.{dt}"
        raw = art["h100_sxm"].model(name).predict(m, n, k)
        f, b_in, b_out = gemm_work(m, n, k, dt)
        fac = sibling_factor(f, b_in + b_out, dt, get_gpu("h200_sxm"), get_gpu("h100_sxm"))
        lent = Gemm(without(art["h200_sxm"], name), sibling=art["h100_sxm"]).predict(m, n, k, dt)
        print(
            f"| H100 {name} on H200's {eng} {dt} rows | {len(r)} | {mape(raw['latency_s'], y):.1f} "
            f"| {mape(lent['latency_s'], y):.1f} | {mape(lent['energy_j'], e):.1f} "
            f"| {mape(raw['power_w'] * raw['latency_s'] * fac, e):.1f} |"
        )
        # The floor: H100's own measurements moved the same way, against H200's.
        key = ["m", "n", "k"]
        a = rows_of(t, "h100_sxm", eng, dt).groupby(key)["latency_s"].median()
        b = r.groupby(key)["latency_s"].median()
        j = a.to_frame("h100").join(b.to_frame("h200"), how="inner")
        mm, nn, kk = (j.index.get_level_values(i).to_numpy(float) for i in range(3))
        f, b_in, b_out = gemm_work(mm, nn, kk, dt)
        fj = sibling_factor(f, b_in + b_out, dt, get_gpu("h200_sxm"), get_gpu("h100_sxm"))
        print(
            f"| H100's measured {eng} {dt} rows on H200's (no model) | {len(j)} "
            f"| {mape(j['h100'], j['h200']):.1f} | {mape(j['h100'] * fj, j['h200']):.1f} | | |"
        )
    print("\nGEMM on H100, another dtype or engine of the same chip, latency MAPE %\n")
    print("| model | rows priced | rows | MAPE |")
    print("|---|---|---|---|")
    cases = [
        ("gemm.vllm.fp8_block", "vllm", "fp8"),
        ("gemm.trtllm.fp8_block", "trtllm", "fp8"),
        ("gemm.vllm.fp8", "vllm", "fp8_block"),
        ("gemm.trtllm.fp8", "trtllm", "fp8_block"),
        ("gemm.vllm.bfloat16", "trtllm", "bfloat16"),
        ("gemm.trtllm.bfloat16", "vllm", "bfloat16"),
        ("gemm.vllm.fp8", "trtllm", "fp8"),
        ("gemm.trtllm.fp8", "vllm", "fp8"),
        ("gemm.vllm.fp8_block", "trtllm", "fp8_block"),
        ("gemm.trtllm.fp8_block", "vllm", "fp8_block"),
    ]
    for name, eng, dt in cases:
        r = rows_of(t, "h100_sxm", eng, dt)
        m, n, k = (r[c].to_numpy(float) for c in "mnk")
        p = art["h100_sxm"].model(name).predict(m, n, k)["latency_s"]
        print(f"| {name} | {eng} {dt} | {len(r)} | {mape(p, r['latency_s']):.1f} |")


def moe_table(t: pd.DataFrame, art: dict[str, Artifact]) -> None:
    print("\nMoE, latency MAPE %\n")
    print("| model | rows priced | rows | as is | moved by the roofline |")
    print("|---|---|---|---|---|")

    def one(gpu_m: str, name: str, gpu_r: str, eng: str, dt: str) -> None:
        r = rows_of(t, gpu_r, eng, dt)
        if r.empty:
            return
        p = art[gpu_m].model(name).predict(**moe_inputs(r))
        y = r["latency_s"].to_numpy(float)
        moved = ""
        if gpu_m != gpu_r:
            gf, gt = get_gpu(gpu_m), get_gpu(gpu_r)
            peak = gf.peak_fp8_flops_per_s if "fp8" in dt else gf.peak_bf16_flops_per_s
            rf = np.maximum(p["flops"] / peak, p["bytes"] / gf.hbm_bw_bytes_per_s) + LAUNCH_S
            rt = np.maximum(p["flops"] / peak, p["bytes"] / gt.hbm_bw_bytes_per_s) + LAUNCH_S
            moved = f"{mape(p['latency_s'] * rt / rf, y):.1f}"
        label = f"{gpu_m.split('_')[0].upper()} {name}"
        print(
            f"| {label} | {gpu_r.split('_')[0].upper()} {eng} {dt} | {len(r)} "
            f"| {mape(p['latency_s'], y):.1f} | {moved} |"
        )

    for dt in ("bfloat16", "fp8", "fp8_block", "w4a16_mxfp4"):
        one("h100_sxm", f"moe.vllm.{dt}", "h100_sxm", "trtllm", dt)
        one("h100_sxm", f"moe.trtllm.{dt}", "h100_sxm", "vllm", dt)
    for dt in ("bfloat16", "fp8", "fp8_block", "int4_wo"):
        one("h100_sxm", f"moe.vllm.{dt}", "h200_sxm", "vllm", dt)


def allreduce_table(t: pd.DataFrame, art: dict[str, Artifact]) -> None:
    print("\nAll-reduce and NCCL collectives, latency MAPE %\n")
    print("| model | rows priced | rows | MAPE |")
    print("|---|---|---|---|")
    groups = {g: allreduce_groups(t, g) for g in ("h100_sxm", "h200_sxm")}

    def one(gpu_m: str, name: str, gpu_r: str, rows_name: str) -> None:
        r = groups[gpu_r][rows_name]
        p = (
            art[gpu_m]
            .model(name)
            .predict(
                message_bytes=r["message_bytes"].to_numpy(float), n_gpus=r["n_gpus"].to_numpy(float)
            )["latency_s"]
        )
        g = lambda s: s.split("_")[0].upper()  # noqa: E731
        print(
            f"| {g(gpu_m)} {name} | {g(gpu_r)} {rows_name} | {len(r)} | {mape(p, r['latency_s']):.1f} |"
        )

    h = "h100_sxm"
    for a, b in (
        ("allreduce.vllm.custom.vllm_graph", "allreduce.trtllm.custom.trtllm"),
        ("allreduce.trtllm.custom.trtllm", "allreduce.vllm.custom.vllm_graph"),
        ("allreduce.nccl.nccl", "allreduce.trtllm.custom.trtllm"),
        ("allreduce.nccl.nccl", "allreduce.vllm.custom.vllm_graph"),
        ("allreduce.vllm.custom.vllm_graph", "allreduce.vllm.custom.vllm_eager"),
    ):
        one(h, a, h, b)
    for name in sorted(groups["h200_sxm"]):
        one("h100_sxm", name, "h200_sxm", name)
        one("h200_sxm", name, "h100_sxm", name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    args = ap.parse_args()
    tables = load(args.data, ["gemm", "moe", "allreduce"])
    art = {g: Artifact.load(g) for g in ("h100_sxm", "h200_sxm")}
    print(f"artifacts: {', '.join(f'{g}={a.artifact_id}' for g, a in art.items())}\n")
    with np.errstate(all="ignore"):
        gemm_tables(tables["gemm"][tables["gemm"]["source"] == "aiconfigurator"], art)
        moe_table(tables["moe"], art)
        allreduce_table(tables["allreduce"], art)


if __name__ == "__main__":
    main()
