"""What bounds serving energy per output token on B200 (ml-energy v3, vLLM 0.11.1, `batching:
continuous`): docs/accuracy.md "B200 SXM and SGLang" (the serving row), docs/dev/accuracy-journal.md
"B200 serving: what bounds it".

    OMP_NUM_THREADS=1 PYTHONPATH=. python experiments/b200_serving_bound.py [--data ../shared/data]

The static prediction of each v3 row is split into its GPU part G (the kernels after Level 3's
factors) and Level 3's host-side overhead O (`breakdown.*.system_overhead_s`, fitted on argonne's
2024 engines), per GPU and request. Energy per GPU: the GPU part's energy Eg (the static energy
less O at idle power) times the GPU-time scale, plus the waiting GPU at idle + w over the rest of
the wall time. Printed, one core, about a minute:

1. per model on B200, the measured decode step against G, G + O and max(G, O);
2. wall-time variants, each held out by whole model (on B200's own rows, and on H100's: H100 must
   not get worse), and H100's fit priced on B200 (the GPU held out): one scale on G + O (shipped,
   `s`), two scales (a G + b O), overlap (a G + b O - q min(a G, b O): q = 1 is max(a G, b O),
   vLLM's scheduling hidden behind the GPU), each with and without a per-step term in the context
   per GPU (k steps (prompt + output / 2) / tp), and with gpt-oss's MXFP4 MoE priced by H100's
   model scaled by bandwidth instead of B200's own (idea (a));
3. the MoE alternatives against B200's measured `w4a16_mxfp4` rows (kernel level);
4. bounds with oracle choices: gpt-oss at max(G, O), the stalled Qwen3 gpqa runs at their
   measured time, a perfect time, and a B200 power scale on top.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from dse.fitting import serving as S

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
MOE_TABLE = "aiconfigurator/aic-core/src/aiconfigurator_core/systems/data/{gpu}/moe/vllm/0.24.0/moe_perf.parquet"
SHIPPED_SCALE = 0.9704977930337594  # vLLM 0.11.1's gpu_time_scale (H100), the shipped constants
BW = {"h100_sxm": 3.35e12, "b200_sxm": 7.7e12}  # HBM bytes/s, dse/hardware_specs

Parts = dict[str, np.ndarray]


def parts(rows: pd.DataFrame) -> Parts:
    """Per row and GPU: G, O (s), Eg (J), measured t (s) and e (J), and the inputs."""
    from dse.spec.hardware import get_gpu

    tp = rows["tensor_parallel"].to_numpy(float)
    idle = get_gpu(str(rows["gpu"].iloc[0])).idle_power_w
    o = sum(
        rows[f"{S.STATIC}breakdown.{ph}.system_overhead_s"].to_numpy()
        for ph in ("prefill", "decode")
    )
    g = rows[S.STATIC + "latency_s"].to_numpy() - o
    steps = np.maximum(rows["output_tokens"].to_numpy(float) - 1.0, 1.0)
    prompt = rows["task"].map(S.V3_PROMPT_TOKENS).to_numpy(float)
    return {
        "G": g,
        "O": o,
        "Eg": rows[S.STATIC + "energy_j"].to_numpy() / tp - idle * o,
        "t": rows["time_s"].to_numpy(),
        "e": rows["energy_j"].to_numpy() / tp,
        "steps": steps,
        "ctx_tp": steps * (prompt + rows["output_tokens"].to_numpy(float) / 2) / tp * 1e-6,
        "idle": np.full(len(rows), idle),
    }


# wall time (s) and GPU-busy time of params p; n params, the first the GPU scale
Wall = Callable[[np.ndarray, Parts], tuple[np.ndarray, np.ndarray]]


def _ovl(p: np.ndarray, c: Parts) -> np.ndarray:
    a, b, q = p[0] * c["G"], p[1] * c["O"], min(p[2], 1.0)
    return a + b - q * np.minimum(a, b)


VARIANTS: dict[str, tuple[int, Wall]] = {
    "s (G + O) (shipped form)": (1, lambda p, c: (p[0] * (c["G"] + c["O"]), p[0] * c["G"])),
    "a G + b O": (2, lambda p, c: (p[0] * c["G"] + p[1] * c["O"], p[0] * c["G"])),
    "max(a G, b O)": (2, lambda p, c: (np.maximum(p[0] * c["G"], p[1] * c["O"]), p[0] * c["G"])),
    "overlap q": (3, lambda p, c: (_ovl(p, c), p[0] * c["G"])),
    "s (G + O) + k ctx/tp": (
        2,
        lambda p, c: (p[0] * (c["G"] + c["O"]) + p[1] * c["ctx_tp"], p[0] * c["G"]),
    ),
    "a G + b O + k ctx/tp": (
        3,
        lambda p, c: (p[0] * c["G"] + p[1] * c["O"] + p[2] * c["ctx_tp"], p[0] * c["G"]),
    ),
    "overlap q + k ctx/tp": (4, lambda p, c: (_ovl(p, c) + p[3] * c["ctx_tp"], p[0] * c["G"])),
}


def fit(name: str, c: Parts) -> tuple[np.ndarray, float]:
    """Wall-time params (least squares on the relative error, >= 0, q <= 1) and the waiting
    GPU's draw above idle w (W, least squares on relative energy, >= -idle)."""
    n, wall = VARIANTS[name]
    x0 = np.array([0.9, 0.9, 0.3, 0.0][:n]) if name.startswith("overlap") else np.r_[[0.9] * n]
    if "ctx" in name:
        x0[-1] = 0.0
    hi = np.full(n, np.inf)
    if name.startswith("overlap"):
        hi[2] = 1.0
    p = least_squares(lambda q: wall(q, c)[0] / c["t"] - 1.0, x0, bounds=(0.0, hi)).x
    t, busy = wall(p, c)
    wait = t - busy
    r = c["e"] - p[0] * c["Eg"] - c["idle"] * wait
    w = float(np.sum(wait * r / c["e"] ** 2) / max(np.sum(wait**2 / c["e"] ** 2), 1e-30))
    return p, max(w, -float(c["idle"][0]))


def price(name: str, p: np.ndarray, w: float, c: Parts) -> tuple[np.ndarray, np.ndarray]:
    t, busy = VARIANTS[name][1](p, c)
    return p[0] * c["Eg"] + (c["idle"] + w) * (t - busy), t


def mape(e: np.ndarray, t: np.ndarray, c: Parts) -> tuple[float, float, float]:
    """Energy, time and per-GPU power MAPE (%)."""
    return tuple(
        round(100 * float(np.mean(np.abs(x))), 1)
        for x in (e / c["e"] - 1, t / c["t"] - 1, (e / t) / (c["e"] / c["t"]) - 1)
    )


def sub(c: Parts, m: np.ndarray) -> Parts:
    return {k: v[m] for k, v in c.items()}


def lomo(name: str, c: Parts, models: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every model priced by a fit on the other models' rows."""
    e, t = np.empty(len(models)), np.empty(len(models))
    for m in np.unique(models):
        te = models == m
        p, w = fit(name, sub(c, ~te))
        e[te], t[te] = price(name, p, w, sub(c, te))
    return e, t


def _static_moe(data: Path, gpu: str) -> np.ndarray:
    """The int4 MoE time (s, prefill + decode) of B200's gpt-oss rows as `gpu` prices them."""
    from dse.predict.request import predict_columns
    from dse.spec.arch import Architecture
    from dse.spec.columns import as_columns

    df = S.read_v3(data)
    b = df[(df["gpu"] == "b200_sxm") & df["model"].str.contains("gpt-oss")].reset_index(drop=True)
    archs = {m: S.v3_architecture(m).to_dict() for m in b["model"].unique()}
    fields = Architecture.field_names()
    cfg = pd.DataFrame([{k: v for k, v in archs[m].items() if k in fields} for m in b["model"]])
    cfg["weight_dtype"] = "int4"
    for k in ("prompt_tokens", "output_tokens", "tensor_parallel"):
        cfg[k] = np.rint(b[k].to_numpy()).astype(int)
    cfg["batch_size"] = np.maximum(np.rint(b["batch_size"].to_numpy()), 1).astype(int)
    cfg["gpu"], cfg["engine"] = gpu, "vllm"
    cols, n = as_columns(cfg)
    p = predict_columns(cols, n, gqa_aware=np.ones(n, bool), kv_mean_context=np.ones(n, bool))
    return sum(np.asarray(p[f"breakdown.{ph}.ffn/moe_s"]) for ph in ("prefill", "decode"))


def with_bw_moe(c: Parts, oss: np.ndarray, data: Path) -> Parts:
    """B200's gpt-oss rows with the MXFP4 MoE priced by H100's model x H100 / B200 bandwidth
    (capped at B200's own), the GPU part's energy at its power."""
    own = _static_moe(data, "b200_sxm")
    alt = np.minimum(_static_moe(data, "h100_sxm") * BW["h100_sxm"] / BW["b200_sxm"], own)
    c = {k: v.copy() for k, v in c.items()}
    idx = np.flatnonzero(oss)
    c["Eg"][idx] *= (c["G"][idx] + alt - own) / c["G"][idx]
    c["G"][idx] += alt - own
    return c


def kernel_check(data: Path) -> pd.DataFrame:
    """MAPE (%) of MoE pricings of B200's measured vLLM w4a16_mxfp4 rows, by layout."""
    from dse.models.artifact import Artifact
    from dse.models.moe import moe_inputs

    t = pd.read_parquet(data / MOE_TABLE.format(gpu="b200_sxm"))
    t = t[t["moe_dtype"] == "w4a16_mxfp4"].reset_index(drop=True)
    y, inp = t["latency"].to_numpy() / 1e3, moe_inputs(t)
    ab, ah = Artifact.load("b200_sxm"), Artifact.load("h100_sxm")

    def lat(a: Artifact, name: str) -> np.ndarray:
        return np.asarray(a.model(name).predict(**inp)["latency_s"])

    own = lat(ab, "moe.vllm.w4a16_mxfp4")
    h_mx = lat(ah, "moe.vllm.w4a16_mxfp4")
    cands = {
        "B200 w4a16_mxfp4 (shipped; in sample, layout CV 166%)": own,
        "B200 nvfp4": lat(ab, "moe.vllm.nvfp4"),
        "H100 w4a16_mxfp4 x bandwidth ratio": h_mx * BW["h100_sxm"] / BW["b200_sxm"],
        "same, capped at B200's own": np.minimum(h_mx * BW["h100_sxm"] / BW["b200_sxm"], own),
        "B200 bf16 x H100 mxfp4 / bf16": lat(ab, "moe.vllm.bfloat16")
        * h_mx
        / lat(ah, "moe.vllm.bfloat16"),
    }
    ex = t["num_experts"].to_numpy()
    return pd.DataFrame(
        [
            {
                "pricing": k,
                "all": round(100 * float(np.mean(np.abs(v / y - 1))), 1),
                "32 experts (gpt-oss-20b)": round(
                    100 * float(np.mean(np.abs(v / y - 1)[ex == 32])), 1
                ),
                "896 experts": round(100 * float(np.mean(np.abs(v / y - 1)[ex == 896])), 1),
                "median ratio": round(float(np.median(v / y)), 2),
            }
            for k, v in cands.items()
        ]
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data", type=Path, default=DATA)
    data = ap.parse_args(argv).data
    pd.set_option("display.width", 200)
    rows = S.serving_rows_v3(data)
    rh = rows[rows["gpu"] == "h100_sxm"].reset_index(drop=True)
    rb = rows[rows["gpu"] == "b200_sxm"].reset_index(drop=True)
    ch, cb = parts(rh), parts(rb)
    mh, mb = rh["model"].to_numpy(), rb["model"].to_numpy()
    oss = rb["model"].str.contains("gpt-oss").to_numpy()
    stall = (
        (rb["task"] == "gpqa") & (rb["tensor_parallel"] <= 2) & rb["model"].str.contains("Qwen")
    ).to_numpy()

    step = pd.DataFrame(
        {
            "model": mb,
            "m/G": cb["t"] / cb["G"],
            "m/(G+O)": cb["t"] / (cb["G"] + cb["O"]),
            "m/max(G,O)": cb["t"] / np.maximum(cb["G"], cb["O"]),
            "extra ms/step": 1e3 * (cb["t"] - cb["G"] - cb["O"]) / cb["steps"],
        }
    )
    print("1. B200, measured wall time against the static prediction's parts (medians per model):")
    print(step.groupby("model").median().round(2).to_string())
    print("\nB200 gpqa, Qwen3: extra time per decode step over G + O (ms, median) by TP:")
    q = step[(rb["task"] == "gpqa").to_numpy() & rb["model"].str.contains("Qwen").to_numpy()]
    print(
        q.groupby(rb.loc[q.index, "tensor_parallel"])["extra ms/step"].median().round(1).to_string()
    )

    print("\n2. Variants: energy / time / power MAPE % (leave-one-model-out unless said)")
    recs = []
    cb_alt = with_bw_moe(cb, oss, data)
    for name in VARIANTS:
        p, w = fit(name, ch)
        rec = {"variant": name, "H100 own": mape(*lomo(name, ch, mh), ch)}
        rec["B200 from H100 fit"] = mape(*price(name, p, w, cb), cb)
        rec["B200 own"] = mape(*lomo(name, cb, mb), cb)
        rec["B200 own, MoE x bandwidth"] = mape(*lomo(name, cb_alt, mb), cb_alt)
        pb, wb = fit(name, cb)
        rec["B200 all-row params (w W)"] = f"{np.round(pb, 3).tolist()} ({wb:.0f})"
        recs.append(rec)
    print(pd.DataFrame(recs).to_string(index=False))

    print("\n3. MoE pricings against B200's measured vLLM w4a16_mxfp4 rows (MAPE %):")
    print(kernel_check(data).to_string(index=False))

    print("\n4. Bounds (B200; H100's shipped scale s):")
    s, g, o, eg, idle = SHIPPED_SCALE, cb["G"], cb["O"], cb["Eg"], cb["idle"]
    t0, e0 = s * (g + o), s * (eg + idle * o)
    t1 = np.where(oss, s * np.maximum(g, o), t0)
    e1 = np.where(oss, s * eg + idle * (t1 - s * g), e0)
    out = [("shipped", e0, t0), ("gpt-oss at max(G, O) (oracle choice)", e1, t1)]
    for w in (0.0, 100.0):
        t2 = np.where(stall, cb["t"], t1)
        e2 = np.where(stall, e1 + (idle + w) * (t2 - t1), e1)
        out.append(
            (f"+ stalled Qwen3 gpqa runs at measured time, waiting at idle + {w:.0f} W", e2, t2)
        )
    out.append(("perfect time at the predicted power", e0 * cb["t"] / t0, cb["t"]))
    for label, e, t in out:
        print(f"  {label}: {mape(e, t, cb)}")
    # a B200 power scale on the dynamic part, fitted on the other models (times as the last oracle)
    pw, pm = e2 / t2, cb["e"] / cb["t"]
    pk = np.empty_like(pw)
    for m in np.unique(mb):
        tr = mb != m
        x, y = (pw[tr] - idle[tr]) / pm[tr], (pm[tr] - idle[tr]) / pm[tr]
        pk[mb == m] = idle[mb == m] + float(x @ y / (x @ x)) * (pw[mb == m] - idle[mb == m])
    print(f"  + a B200 power scale held out by model: {mape(pk * t2, t2, cb)}")
    print("  predicted / measured power per model at those times (median):")
    ratio = pd.Series(pw / pm).groupby(mb).median().round(2)
    print(ratio.to_string())
    wait_w = (cb["e"] - eg) / np.maximum(cb["t"] - g, 1e-9)
    print(
        f"  stalled TP 1 runs: the waiting GPU's draw (measured energy less G's, over the rest): "
        f"median {np.median(wait_w[stall & (rb['tensor_parallel'] == 1).to_numpy()]):.0f} W"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
