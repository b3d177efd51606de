"""The host constants of continuous-batching serving (`dse.models.serving`), fitted per engine
version with whole models held out (docs/accuracy.md "Continuous batching"): vLLM 0.4.2 on the
ml-energy v2 runs, vLLM 0.11.1 on the ml-energy v3 runs (H100's rows make the shipped constants;
B200's rows are scored with constants fitted on B200's other models, leave-one-model-out).

    rows = serving_rows(data)                  # v2: measured runs + the static prediction of each
    rows3 = serving_rows_v3(data)              # v3 (prompt lengths assumed per task)
    consts = fit_constants(rows[rows.gpu == "h100_sxm"], VERSIONS["0.4.2"].terms)
    pred = leave_one_model_out(rows)           # every row priced by a fit without its model

The time terms are one non-negative least squares on the relative error of the wall time over
the version's `terms` (the static prediction's GPU time, scaled or not, and host time per
decode step); the waiting power is the least-squares draw above idle of the GPU over the
fitted host time. Neither sees a row of the model it prices in `leave_one_model_out`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from dse.data import load
from dse.errors import DataError
from dse.estimators import measured as M
from dse.files import sha256_file
from dse.models.serving import HostConstants, continuous
from dse.predict.request import BAND_KEYS, OUTPUT_KEYS
from dse.spec.arch import Architecture
from dse.spec.hardware import get_gpu

ENGINE, ENGINE_VERSION = "vllm", "0.4.2"  # the ml-energy v2 runs
STATIC = "static."  # prefix of the static prediction's columns in `serving_rows`
HOST_TERMS = ("step_s", "per_sequence_s", "per_extra_gpu_s")
TERMS = ("gpu_time_scale", *HOST_TERMS)


@dataclass(frozen=True)
class Version:
    """One engine version's fit: its measurements (`source`) and the terms fitted (the rest
    stay at 0, the GPU-time scale at 1)."""

    version: str
    source: str
    terms: tuple[str, ...]
    # the static prediction priced with GQA-aware decode attention (Level 3 without argonne's
    # `a_attn_gqa` excess: vLLM 0.11.1's kernels read each KV head once per query group)
    gqa_aware_attention: bool = False
    # the running batch's KV at its mean context (prompt + half the output a sequence): the
    # measured average running batch is resident, no waves of full-length sequences
    kv_at_mean_context: bool = False


VERSIONS: dict[str, Version] = {
    v.version: v
    for v in (
        Version(
            "0.4.2",
            "ml-energy-v2 (ml-energy/leaderboard-v2, commit c3af7f3), "
            "data/llm_text_generation/{chat,code}, pipeline parallel 1; batch = Avg BS (reqs) "
            "rounded; prompt tokens assumed 256 (not recorded)",
            HOST_TERMS,
        ),
        # Current vLLM reads each KV head once per query group (GQA-aware decode attention:
        # without Level 3's GQA excess, 8-9k-token reasoning outputs come out 15-20% less
        # slow), runs the rest of the static batch a little faster and hides its host step
        # behind the GPU: with the host terms fitted too, held-out energy is worse
        # (benchmarks/serving_accuracy.py prints both)
        Version(
            "0.11.1",
            "ml-energy-v3 (ml-energy/leaderboard, commit 0cd52da), public/data/tasks/"
            "{gpqa,lm-arena-chat,sourcegraph-fim}.json, H100 rows of the models the catalogue "
            "has (V3_MODELS), data parallel 1, tensor_parallel = num_gpus; vLLM 0.11.1 "
            "(ml-energy/benchmark docs/overview.md); batch = avg_batch_size rounded; prompt "
            "tokens assumed per task (V3_PROMPT_TOKENS; not recorded)",
            ("gpu_time_scale",),
            gqa_aware_attention=True,
            kv_at_mean_context=True,
        ),
    )
}

# ml-energy v3 did not record prompt lengths. The public prompt sets (docs/accuracy.md
# "Continuous batching"): GPQA questions with four choices, ~840 characters (~200 tokens); LMArena
# chat turns with their history and Sourcegraph's context-aware FIM prompts were not looked up:
# assumed. benchmarks/serving_accuracy.py measures how much the assumption moves the answer.
V3_VERSION = "0.11.1"  # the vLLM of every ml-energy v3 run
V3_PROMPT_TOKENS: dict[str, int] = {"gpqa": 200, "lm-arena-chat": 256, "sourcegraph-fim": 1024}
V3_TASKS_GLOB = "ml-energy-v3/public/data/tasks/{task}.json"
V3_GPUS = {"H100": "h100_sxm", "B200": "b200_sxm"}
# ml-energy v3 model id -> the catalogue model of the same shape (post-trained variants of one
# base share its architecture). Qwen3-14B is not in the catalogue: its config.json below.
# Left out: Llama-4-Maverick (not in the catalogue) and Nemotron-Nano-9B-v2 (hybrid Mamba-2,
# not in the catalogue).
V3_MODELS: dict[str, str] = {
    "Qwen/Qwen3-8B": "Qwen/Qwen3-8B",
    "Qwen/Qwen3-14B": "Qwen/Qwen3-14B",
    "Qwen/Qwen3-30B-A3B-Instruct-2507": "Qwen/Qwen3-30B-A3B",
    "Qwen/Qwen3-30B-A3B-Thinking-2507": "Qwen/Qwen3-30B-A3B",
    "Qwen/Qwen3-Coder-30B-A3B-Instruct": "Qwen/Qwen3-30B-A3B",
    "Qwen/Qwen3-235B-A22B-Instruct-2507": "Qwen/Qwen3-235B-A22B",
    "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8": "Qwen/Qwen3-235B-A22B",
    "Qwen/Qwen3-235B-A22B-Thinking-2507": "Qwen/Qwen3-235B-A22B",
    "Qwen/Qwen3-235B-A22B-Thinking-2507-FP8": "Qwen/Qwen3-235B-A22B",
    "google/gemma-3-27b-it": "google/gemma-3-27b-it",
    "meta-llama/Llama-3.3-70B-Instruct": "meta-llama/Llama-3.3-70B-Instruct",
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": "meta-llama/Llama-4-Scout-17B-16E-Instruct",
    "openai/gpt-oss-20b": "openai/gpt-oss-20b",
    "openai/gpt-oss-120b": "openai/gpt-oss-120b",
}
# Qwen/Qwen3-14B config.json: Qwen3-8B's layer with these sizes
_QWEN3_14B = dict(d_model=5120, n_layers=40, n_heads=40, n_kv_heads=8, head_dim=128, d_ff=17408)
# weight_precision -> weight_dtype: mxfp4 (4-bit values, a shared 8-bit scale per 32) is
# priced as int4 (0.5 bytes a weight: vLLM's MXFP4 MoE with bf16 activations); fp8 as fp8
V3_WEIGHT_DTYPE = {"bfloat16": "bfloat16", "fp8": "fp8", "mxfp4": "int4"}
# (gpu_model, weight_precision) -> weight_dtype where a GPU's runs used another kernel: v3's B200
# gpt-oss runs set VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1 (ml-energy/benchmark configs/vllm/gpqa/
# openai/gpt-oss-*/B200/monolithic.env.yaml; the H100 runs do not), FlashInfer's TRT-LLM MoE with
# MXFP4 weights and MXFP8 activations, priced as `nvfp4` (4-bit weights on Blackwell's low-precision
# tensor cores): B200's nvfp4 MoE model reads the measured MXFP4 x MXFP8 rows (never in its fit)
# at 15.3%, the bf16-activation MXFP4 model at 387% (experiments/b200_serving_bound.py)
V3_WEIGHT_DTYPE_BY_GPU = {("B200", "mxfp4"): "nvfp4"}


def serving_rows(data: Path) -> pd.DataFrame:
    """The ml-energy v2 runs (`dse.estimators.measured.ml_energy`), one row each, as a batch of
    `batch_size` = the run's average batch rounded (the predictor takes whole sequences): the
    measured `time_s` and `energy_j` (all GPUs) of that many requests, and the static
    prediction's OUTPUT_KEYS and BAND_KEYS as `static.<key>`."""
    df, _ = M.ml_energy(load(data, kinds=["serving_energy"]))
    parts = []
    for gpu, rows in df.groupby("gpu", sort=True):
        cols = M.architecture_columns(rows["model"])
        cfg = pd.DataFrame({k: v for k, v in cols.items() if k in Architecture.field_names()})
        parts.append(_with_static(rows, cfg, str(gpu), VERSIONS[ENGINE_VERSION]))
    return pd.concat(parts, ignore_index=True)


def _with_static(rows: pd.DataFrame, cfg: pd.DataFrame, gpu: str, version: Version) -> pd.DataFrame:
    """Measured runs (`rows`: model, file, prompt_tokens, output_tokens, tensor_parallel,
    batch_size (the average, fractional), time_s, measured_j) with the static prediction of
    each on `gpu` (`cfg`: the architecture columns) as engine `version` prices it (its GQA
    awareness)."""
    from dse.predict.request import predict_columns
    from dse.spec.columns import as_columns

    cfg = cfg.reset_index(drop=True)
    for k in ("prompt_tokens", "output_tokens", "tensor_parallel"):
        cfg[k] = np.rint(rows[k].to_numpy()).astype(int)
    b = rows["batch_size"].to_numpy(dtype=float)
    cfg["batch_size"] = np.maximum(np.rint(b), 1).astype(int)
    cfg["gpu"], cfg["engine"] = gpu, ENGINE
    cols, n = as_columns(cfg)
    p = predict_columns(
        cols,
        n,
        gqa_aware=np.full(n, version.gqa_aware_attention),
        kv_mean_context=np.full(n, version.kv_at_mean_context),
    )
    scale = cfg["batch_size"].to_numpy() / b  # measured batch of b requests -> of B
    out = pd.DataFrame(
        {
            "gpu": gpu,
            "model": rows["model"].to_numpy(),
            "file": rows["file"].to_numpy(),
            "batch_size": cfg["batch_size"].to_numpy(),
            "tensor_parallel": cfg["tensor_parallel"].to_numpy(),
            "output_tokens": cfg["output_tokens"].to_numpy(),
            "time_s": rows["time_s"].to_numpy() * scale,
            "energy_j": rows["measured_j"].to_numpy() * scale,
        }
    )
    for k in (*OUTPUT_KEYS, *BAND_KEYS):
        out[STATIC + k] = np.asarray(p[k], dtype=float)
    # Level 3's host-side overhead in the static latency (argonne-fitted; 0 without a Level 3)
    for phase in ("prefill", "decode"):
        k = f"breakdown.{phase}.system_overhead_s"
        out[STATIC + k] = np.asarray(p[k], dtype=float) if k in p else np.zeros(len(out))
    return out


def v3_architecture(model: str) -> Architecture:
    """The Architecture of an ml-energy v3 model (`V3_MODELS`)."""
    from dse.spec.catalogue import lookup_model

    shape = V3_MODELS[model]
    if shape == "Qwen/Qwen3-14B":
        return replace(lookup_model("Qwen/Qwen3-8B"), **_QWEN3_14B).resolved()
    return lookup_model(shape)


def read_v3(data: Path, prompt_tokens: dict[str, int] | None = None) -> pd.DataFrame:
    """The ml-energy v3 LLM runs the predictor can price: GPUs in `V3_GPUS`, models in
    `V3_MODELS`, data parallel 1. One row per configuration, read as a static batch of B =
    avg_batch_size requests whose time is B x avg_output_len / output throughput and whose
    energy (all GPUs) is B x energy_per_request; tensor_parallel = num_gpus (expert-parallel
    MoE runs spread over num_gpus as one group); prompt tokens per task
    (`V3_PROMPT_TOKENS`, not recorded); weight_dtype from the run's weight precision
    (`V3_WEIGHT_DTYPE`), or the kernel a GPU's runs used (`V3_WEIGHT_DTYPE_BY_GPU`)."""
    prompts = V3_PROMPT_TOKENS if prompt_tokens is None else prompt_tokens
    recs = []
    for task, prompt in prompts.items():
        rel = V3_TASKS_GLOB.format(task=task)
        try:
            confs = json.loads((data / rel).read_text())["configurations"]
        except (OSError, json.JSONDecodeError, KeyError) as exc:
            raise DataError(f"{data / rel}: cannot read the configurations: {exc}") from exc
        for c in confs:
            if c["gpu_model"] not in V3_GPUS or c["model_id"] not in V3_MODELS:
                continue
            if c["data_parallel"] != 1:
                continue
            b, o = float(c["avg_batch_size"]), float(c["avg_output_len"])
            recs.append(
                {
                    "gpu": V3_GPUS[c["gpu_model"]],
                    "model": c["model_id"],
                    "task": task,
                    "file": rel,
                    "weight_dtype": V3_WEIGHT_DTYPE_BY_GPU.get(
                        (c["gpu_model"], c["weight_precision"]),
                        V3_WEIGHT_DTYPE[c["weight_precision"]],
                    ),
                    "tensor_parallel": float(c["num_gpus"]),
                    "batch_size": b,
                    "prompt_tokens": float(prompt),
                    "output_tokens": o,
                    "time_s": b * o / float(c["output_throughput_tokens_per_sec"]),
                    "measured_j": b * float(c["energy_per_request_joules"]),
                }
            )
    if not recs:
        raise DataError(f"{data / 'ml-energy-v3'}: no LLM serving runs the predictor can price")
    return pd.DataFrame(recs)


def serving_rows_v3(
    data: Path, prompt_tokens: dict[str, int] | None = None, as_static: bool = False
) -> pd.DataFrame:
    """`read_v3`'s runs with the static prediction of each (as `serving_rows`; as vLLM 0.11.1
    prices it, GQA-aware with the KV at its mean context, or `as_static`: as `batching:
    static` does), and `task`."""
    version = VERSIONS[V3_VERSION]
    if as_static:
        version = replace(version, gqa_aware_attention=False, kv_at_mean_context=False)
    df = read_v3(data, prompt_tokens)
    parts = []
    for gpu, rows in df.groupby("gpu", sort=True):
        archs = {m: v3_architecture(m).to_dict() for m in rows["model"].unique()}
        cfg = pd.DataFrame(
            [
                {k: v for k, v in archs[m].items() if k in Architecture.field_names()}
                for m in rows["model"]
            ]
        )
        cfg["weight_dtype"] = rows["weight_dtype"].to_numpy()
        out = _with_static(rows, cfg, str(gpu), version)
        out["task"] = rows["task"].to_numpy()
        parts.append(out)
    return pd.concat(parts, ignore_index=True)


def _static(rows: pd.DataFrame) -> dict[str, np.ndarray]:
    return {k: rows[STATIC + k].to_numpy(dtype=float) for k in (*OUTPUT_KEYS, *BAND_KEYS)}


def fit_constants(rows: pd.DataFrame, terms: tuple[str, ...] = HOST_TERMS) -> dict[str, float]:
    """gpu_time_scale, step_s, per_sequence_s, per_extra_gpu_s (those in `terms` fitted, the
    others at 1 and 0) and wait_above_idle_w from rows of one GPU."""
    gpus = rows["gpu"].unique()
    if len(gpus) != 1:
        raise ValueError(f"fit_constants takes the rows of one GPU, got {sorted(gpus)}")
    unknown = [t for t in terms if t not in TERMS]
    if unknown or not terms:
        raise ValueError(f"terms must be a non-empty subset of {TERMS}, got {terms}")
    idle = get_gpu(str(gpus[0])).idle_power_w
    t = rows["time_s"].to_numpy(dtype=float)
    g = rows[STATIC + "latency_s"].to_numpy(dtype=float)
    b = rows["batch_size"].to_numpy(dtype=float)
    tp = rows["tensor_parallel"].to_numpy(dtype=float)
    steps = np.maximum(rows["output_tokens"].to_numpy(dtype=float) - 1.0, 0.0)
    # wall = s gpu + steps (x0 + x1 b + x2 (tp - 1)), each row weighted by 1 / measured wall;
    # without a fitted s (s = 1) the host terms fit the rest, wall - gpu
    column = {
        "gpu_time_scale": g,
        "step_s": steps,
        "per_sequence_s": steps * b,
        "per_extra_gpu_s": steps * (tp - 1.0),
    }
    fitted = [k for k in TERMS if k in terms]
    x = np.column_stack([column[k] for k in fitted])
    scaled = "gpu_time_scale" in terms
    coef, _ = nnls(x / t[:, None], np.ones_like(t) if scaled else (t - g) / t)
    c = {"gpu_time_scale": 1.0, "step_s": 0.0, "per_sequence_s": 0.0, "per_extra_gpu_s": 0.0}
    c.update({k: float(v) for k, v in zip(fitted, coef, strict=True)})
    # per GPU: measured = GPU-busy energy + (idle + d) x host time, relative errors; the host
    # time is the measured rest (wall - s gpu), or the fitted one when s is fitted with it
    e = rows["energy_j"].to_numpy(dtype=float) / tp
    s = c["gpu_time_scale"]
    eg = s * rows[STATIC + "energy_j"].to_numpy(dtype=float) / tp
    if scaled:
        wait = steps * (c["step_s"] + c["per_sequence_s"] * b + c["per_extra_gpu_s"] * (tp - 1))
    else:
        wait = np.maximum(t - g, 0.0)
    if np.any(wait > 0):
        d = np.sum(wait * (e - eg - idle * wait) / e**2) / max(np.sum(wait**2 / e**2), 1e-30)
    else:  # no host time: no waiting power to fit
        d = 0.0
    return {
        **({"gpu_time_scale": s} if scaled else {}),
        "step_s": c["step_s"],
        "per_sequence_s": c["per_sequence_s"],
        "per_extra_gpu_s": c["per_extra_gpu_s"],
        "wait_above_idle_w": float(max(d, -idle)),
    }


def constants_entry(
    rows: pd.DataFrame, data: Path | None = None, terms: tuple[str, ...] = HOST_TERMS
) -> dict[str, Any]:
    """One GPU's entry of the shipped JSON: the constants, the fitted range and the rows."""
    entry: dict[str, Any] = dict(fit_constants(rows, terms))
    b = rows["batch_size"].to_numpy(dtype=float)
    entry["batch_size_range"] = [float(b.min()), float(b.max())]
    entry["tensor_parallel"] = sorted(int(t) for t in rows["tensor_parallel"].unique())
    entry["output_tokens_range"] = [
        int(rows["output_tokens"].min()),
        int(rows["output_tokens"].max()),
    ]
    entry["rows"] = len(rows)
    entry["models"] = sorted(rows["model"].unique().tolist())
    files = sorted(rows["file"].tolist())
    h = hashlib.sha256()
    for f in files:
        h.update(f.encode())
        if data is not None:
            h.update(bytes.fromhex(sha256_file(data / f)))
    entry["files_sha256"] = h.hexdigest()
    return entry


def constants_of(
    c: dict[str, float], gpu: str, rows: pd.DataFrame, version: str = ENGINE_VERSION
) -> HostConstants:
    """A HostConstants of fitted numbers, its range from `rows` (the fit's)."""
    b = rows["batch_size"].to_numpy(dtype=float)
    d = {
        **c,
        "batch_size_range": [b.min(), b.max()],
        "tensor_parallel": rows["tensor_parallel"].unique().tolist(),
    }
    return HostConstants.from_dict(d, ENGINE, version, gpu)


def price(rows: pd.DataFrame, c: HostConstants) -> dict[str, np.ndarray]:
    """`dse.models.serving.continuous` on rows of one GPU."""
    idle = get_gpu(str(rows["gpu"].iloc[0])).idle_power_w
    return continuous(
        _static(rows),
        rows["batch_size"].to_numpy(),
        rows["tensor_parallel"].to_numpy(),
        rows["output_tokens"].to_numpy(),
        idle,
        c,
    )


def leave_one_model_out(
    rows: pd.DataFrame, train_gpu: str | None = None, terms: tuple[str, ...] = HOST_TERMS
) -> pd.DataFrame:
    """Every row priced with constants (`terms` fitted) fitted on the other models' rows of its
    GPU (or of `train_gpu`, every model but its own): columns time_s, energy_j, power_w (per
    GPU) predicted and measured, and the static prediction's."""
    out = []
    for gpu, g_rows in rows.groupby("gpu", sort=True):
        pool = g_rows if train_gpu is None else rows[rows["gpu"] == train_gpu]
        for model, test in g_rows.groupby("model", sort=True):
            train = pool[pool["model"] != model]
            c = constants_of(fit_constants(train, terms), str(train["gpu"].iloc[0]), train)
            p = price(test, c)
            tp = test["tensor_parallel"].to_numpy(dtype=float)
            out.append(
                pd.DataFrame(
                    {
                        "gpu": gpu,
                        "model": model,
                        "batch_size": test["batch_size"].to_numpy(),
                        "pred_time_s": p["latency_s"],
                        "pred_energy_j": p["energy_j"],
                        "pred_power_w": p["energy_j"] / tp / p["latency_s"],
                        "static_time_s": test[STATIC + "latency_s"].to_numpy(),
                        "static_energy_j": test[STATIC + "energy_j"].to_numpy(),
                        "time_s": test["time_s"].to_numpy(),
                        "energy_j": test["energy_j"].to_numpy(),
                        "power_w": test["energy_j"].to_numpy() / tp / test["time_s"].to_numpy(),
                    },
                    index=test.index,
                )
            )
    return pd.concat(out).sort_index()


def scores(pred: pd.DataFrame) -> pd.DataFrame:
    """Per GPU: rows, models, MAPE of energy, time and power, median energy ratio, and the static
    prediction's energy MAPE and time ratio on the same rows."""
    rows = []
    for gpu, p in pred.groupby("gpu", sort=True):

        def ape(a: str, b: str, p: pd.DataFrame = p) -> float:
            return float(np.mean(np.abs(p[a] / p[b] - 1.0)))

        rows.append(
            {
                "gpu": gpu,
                "rows": len(p),
                "models": p["model"].nunique(),
                "energy_mape": ape("pred_energy_j", "energy_j"),
                "time_mape": ape("pred_time_s", "time_s"),
                "power_mape": ape("pred_power_w", "power_w"),
                "energy_median_ratio": float(np.median(p["pred_energy_j"] / p["energy_j"])),
                "energy_max_ape": float(np.max(np.abs(p["pred_energy_j"] / p["energy_j"] - 1))),
                "static_energy_mape": ape("static_energy_j", "energy_j"),
                "static_time_ratio": float(np.median(p["static_time_s"] / p["time_s"])),
            }
        )
    return pd.DataFrame(rows)


BAND_QUANTILES = (0.05, 0.95)  # the nominal 90% band of every prediction


def residual_band(pred: pd.DataFrame) -> dict[str, list[float]]:
    """5-95% quantiles of log(measured / predicted) latency and energy of held-out rows (one
    GPU's `leave_one_model_out`): the host model's band (`HostConstants.band_log`)."""
    q = np.array(BAND_QUANTILES)
    out = {}
    for key, col in (("latency", "time_s"), ("energy", "energy_j")):
        r = np.log(pred[col].to_numpy(dtype=float) / pred[f"pred_{col}"].to_numpy(dtype=float))
        out[key] = [float(x) for x in np.quantile(r, q)]
    return out


def nested_band_coverage(rows: pd.DataFrame, terms: tuple[str, ...] = HOST_TERMS) -> pd.DataFrame:
    """How often the band holds on a model it was not calibrated on, per GPU: each model's rows
    priced by constants fitted without it, inside a band whose quantiles come from the other
    models' residuals under fits that saw neither them nor it (the shipped rule: the static
    band widened to the host band). Columns gpu, rows, latency_coverage, energy_coverage."""
    recs = []
    for gpu, g_rows in rows.groupby("gpu", sort=True):
        inside = {"latency": [], "energy": []}
        for model, test in g_rows.groupby("model", sort=True):
            rest = g_rows[g_rows["model"] != model]
            band = residual_band(leave_one_model_out(rest, terms=terms))
            c = constants_of(fit_constants(rest, terms), str(gpu), rest)
            c = HostConstants(**{**c.__dict__, "band_log": {k: tuple(v) for k, v in band.items()}})
            p = price(test, c)
            for key, col, lo, hi in (
                ("latency", "time_s", "latency_lo_s", "latency_hi_s"),
                ("energy", "energy_j", "energy_lo_j", "energy_hi_j"),
            ):
                y = test[col].to_numpy(dtype=float)
                inside[key].append((y >= p[lo]) & (y <= p[hi]))
        recs.append(
            {
                "gpu": gpu,
                "rows": len(g_rows),
                **{f"{k}_coverage": float(np.concatenate(v).mean()) for k, v in inside.items()},
            }
        )
    return pd.DataFrame(recs)
