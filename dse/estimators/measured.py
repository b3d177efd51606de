"""The measured rows the estimator is calibrated and scored on, cut from `dse.data`'s tables.

Nothing here opens a file: `read(root)` is `dse.data.load(root, kinds=KINDS)`, and each function
below turns those tidy tables (units in column names, docs/data.md) into the estimator's rows:
- argonne e2e_energy (`Plots/Fig_16_a_b/power_results.csv`): one static batch, energy of GPU 0;
- argonne e2e (`Plots/All_results.csv`): the same kind of batches, time only;
- ml-energy-v2 serving_energy: serving runs, energy per request summed over GPUs;
- aiconfigurator gemm and generation_attention of H200 (vLLM 0.22.0): one kernel, board power.

GPU names are dse.data's (one map, `dse.data.normalise_gpu`), architectures the catalogue's
(`dse.spec.catalogue`). Row columns: source, gpu, engine, model, tensor_parallel, batch_size,
prompt_tokens, output_tokens, time_s (whole batch, s), and for energy rows measured_j (J) and
scope ("gpu0": GPU 0 of the group; "all": every GPU).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from dse.data import load
from dse.errors import DataError
from dse.spec.arch import Architecture
from dse.spec.catalogue import lookup_model

# The dse.data kinds the rows below are cut from (what `read` loads).
KINDS = ("e2e", "e2e_energy", "serving_energy", "gemm", "generation_attention")

# Prompt length assumed for ml-energy-v2 rows, which did not record input lengths (ShareGPT
# chat prompts and code prompts are a few hundred tokens). Both presets use the same value.
ML_ENERGY_PROMPT_TOKENS = 256

# GPUs with end-to-end measurements. Argonne's A100 runs are on ALCF Polaris, whose nodes carry
# A100-SXM4-40GB (consistent with its 70 B runs appearing only at TP 4); dse.data names it so.
GPUS = ("h100_sxm", "a100_sxm_40gb", "gh200")
ENGINES = ("vllm", "trtllm", "deepspeed-mii")

# The measured models the calibration uses (Hugging Face ids; shapes from the catalogue). Argonne
# also ran other 7 B models on these GPUs (Aquila, BLOOM, DeciLM, GPT-J, LLaMA-1, OPT, Qwen1.5,
# vLLM only); the shipped calibration was fitted without them, and adding them is a refit.
MODELS = (
    # argonne
    "meta-llama/Llama-2-7b-hf",
    "meta-llama/Meta-Llama-3-8B",
    "meta-llama/Meta-Llama-3-70B",
    "meta-llama/Llama-2-70b-hf",
    "mistralai/Mixtral-8x7B-v0.1",
    # ml-energy-v2 chat
    "meta-llama/Meta-Llama-3.1-8B-Instruct",
    "meta-llama/Meta-Llama-3.1-70B-Instruct",
    "meta-llama/Meta-Llama-3.1-405B-Instruct",
    "mistralai/Mistral-7B-Instruct-v0.3",
    "mistralai/Mistral-Nemo-Instruct-2407",
    "mistralai/Mistral-Large-Instruct-2407",
    "mistralai/Mixtral-8x7B-Instruct-v0.1",
    "mistralai/Mixtral-8x22B-Instruct-v0.1",
    "google/gemma-2-2b-it",
    "google/gemma-2-9b-it",
    "google/gemma-2-27b-it",
    "microsoft/Phi-3-mini-4k-instruct",
    "microsoft/Phi-3-small-8k-instruct",
    "microsoft/Phi-3-medium-4k-instruct",
    # ml-energy-v2 code
    "codellama/CodeLlama-7b-hf",
    "codellama/CodeLlama-13b-hf",
    "codellama/CodeLlama-34b-hf",
    "codellama/CodeLlama-70b-hf",
    "google/codegemma-1.1-2b",
    "google/codegemma-7b",
    "bigcode/starcoder2-3b",
    "bigcode/starcoder2-7b",
    "bigcode/starcoder2-15b",
)

# The kernel tables with power: aiconfigurator's H200 vLLM 0.22.0 collection.
KERNEL_GPU, KERNEL_ENGINE, KERNEL_ENGINE_VERSION = "h200_sxm", "vllm", "0.22.0"

ARCH_FIELDS = Architecture.field_names()


def read(root: Path | str) -> dict[str, pd.DataFrame]:
    """The dse.data tables every function below takes (`dse.data.load` of KINDS)."""
    return load(root, kinds=KINDS)


def architecture(model: str) -> Architecture:
    """The Architecture of a measured model, from the catalogue."""
    return lookup_model(model).resolved()


def architecture_columns(models: pd.Series) -> dict[str, np.ndarray]:
    """Architecture field columns for a column of model ids (all in the catalogue)."""
    resolved = {m: architecture(m).to_dict() for m in models.unique()}
    return {f: np.array([resolved[m][f] for m in models]) for f in ARCH_FIELDS}


def shape_group(models: pd.Series) -> np.ndarray:
    """Name of each row's shape: models with identical layers (any vocabulary) share a group."""
    keys = {}
    for m in models.unique():
        a = architecture(m)
        keys[m] = (
            f"d{a.d_model}-L{a.n_layers}-h{a.n_heads}-kv{a.n_kv_heads}-ff{a.d_ff}-e{a.n_experts}"
        )
    return np.array([keys[m] for m in models])


def _table(tables: Mapping[str, pd.DataFrame], kind: str, source: str) -> pd.DataFrame:
    df = tables.get(kind)
    if df is None or "source" not in df or not (df["source"] == source).any():
        raise DataError(f"no {source} {kind} rows found in the measured data")
    return df[df["source"] == source]


def _files(df: pd.DataFrame) -> list[str]:
    return sorted(set(df["file"]))


def _argonne(tables: Mapping[str, pd.DataFrame], kind: str) -> pd.DataFrame:
    df = _table(tables, kind, "argonne")
    df = df[df["gpu"].isin(GPUS) & df["engine"].isin(ENGINES) & df["model"].isin(MODELS)]
    return df.reset_index(drop=True)


def _argonne_rows(df: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "source": "argonne",
            "gpu": df["gpu"].to_numpy(),
            "engine": df["engine"].to_numpy(),
            "model": df["model"].to_numpy(),
            "tensor_parallel": df["n_gpus"].to_numpy(dtype=float),
            "batch_size": df["batch_size"].to_numpy(dtype=float),
            "prompt_tokens": df["input_tokens"].to_numpy(dtype=float),
            "output_tokens": df["output_tokens"].to_numpy(dtype=float),
            "time_s": df["latency_s"].to_numpy(dtype=float),  # whole batch, s
        }
    )


def argonne_power(tables: Mapping[str, pd.DataFrame]) -> tuple[pd.DataFrame, list[str]]:
    """Static batches with GPU-0 energy (e2e_energy): measured_j = latency_s * power_w."""
    df = _argonne(tables, "e2e_energy")
    out = _argonne_rows(df)
    out["measured_j"] = out["time_s"].to_numpy() * df["power_w"].to_numpy(dtype=float)
    out["scope"] = "gpu0"
    return out, _files(df)


def argonne_latency(tables: Mapping[str, pd.DataFrame]) -> tuple[pd.DataFrame, list[str]]:
    """Static batches with latency only (e2e; vLLM, TensorRT-LLM, DeepSpeed-MII)."""
    df = _argonne(tables, "e2e")
    return _argonne_rows(df), _files(df)


def ml_energy(tables: Mapping[str, pd.DataFrame]) -> tuple[pd.DataFrame, list[str]]:
    """Serving runs (pipeline parallel 1 only): energy per request, summed over GPUs.

    A run with average batch B is read as a static batch of B requests whose time is
    B * (average output tokens) / (token throughput): the share of the group's time each
    request occupies, times B.
    """
    df = _table(tables, "serving_energy", "ml-energy-v2")
    keep = (df["pipeline_parallel"] == 1) & df["gpu"].isin(GPUS) & df["model"].isin(MODELS)
    df = df[keep].reset_index(drop=True)
    b = df["avg_batch_size"].to_numpy(dtype=float)
    o = df["avg_output_tokens"].to_numpy(dtype=float)
    out = pd.DataFrame(
        {
            "source": "ml-energy",
            "gpu": df["gpu"].to_numpy(),
            "engine": "vllm",
            "model": df["model"].to_numpy(),
            "tensor_parallel": df["tensor_parallel"].to_numpy(dtype=float),
            "batch_size": b,
            "prompt_tokens": float(ML_ENERGY_PROMPT_TOKENS),
            "output_tokens": o,
            "time_s": b * o / df["token_throughput_tok_s"].to_numpy(dtype=float),
            # the batch of B requests
            "measured_j": b * df["energy_per_request_j"].to_numpy(dtype=float),
            "scope": "all",
            "file": df["file"].to_numpy(),
        }
    )
    return out, _files(df)


def _h200(tables: Mapping[str, pd.DataFrame], kind: str) -> pd.DataFrame:
    df = _table(tables, kind, "aiconfigurator")
    keep = (
        (df["gpu"] == KERNEL_GPU)
        & (df["engine"] == KERNEL_ENGINE)
        & (df["engine_version"] == KERNEL_ENGINE_VERSION)
    )
    if not keep.any():
        raise DataError(
            f"no aiconfigurator {kind} rows of {KERNEL_GPU} {KERNEL_ENGINE} "
            f"{KERNEL_ENGINE_VERSION} found in the measured data"
        )
    return df[keep].reset_index(drop=True)


def aic_h200_kernels(tables: Mapping[str, pd.DataFrame]) -> tuple[pd.DataFrame, list[str]]:
    """H200 kernels with power: GEMMs (bf16, fp8_block) and decode attention.

    Per row: flops (fp8 GEMM FLOPs scaled by 0.5, the bf16:fp8 peak ratio, as the estimator
    does), hbm_bytes (operands once), time_s, measured_j = time_s * power_w, and a shape group
    (the weight shape n x k, or the attention head layout).
    """
    gemm = _h200(tables, "gemm")
    gemm = gemm[gemm["dtype"].isin(["bfloat16", "fp8_block"])]
    fp8 = (gemm["dtype"] == "fp8_block").to_numpy()
    m, n, k = (gemm[c].to_numpy(dtype=float) for c in ("m", "n", "k"))
    wb = np.where(fp8, 1.0, 2.0)
    g = pd.DataFrame(
        {
            "kind": "gemm",
            "flops": 2.0 * m * n * k * np.where(fp8, 0.5, 1.0),
            "hbm_bytes": wb * (m * k + n * k) + 2.0 * m * n,
            "time_s": gemm["latency_s"].to_numpy(dtype=float),
            "power_w": gemm["power_w"].to_numpy(dtype=float),
            "group": [f"gemm-n{a}-k{b}" for a, b in zip(n.astype(int), k.astype(int), strict=True)],
        }
    )
    gen = _h200(tables, "generation_attention")
    gen = gen[gen["window_size"] == 0]
    b = gen["batch_size"].to_numpy(dtype=float)
    h = gen["num_heads"].to_numpy(dtype=float)
    kvh = gen["num_kv_heads"].to_numpy(dtype=float)
    hd = gen["head_dim"].to_numpy(dtype=float)
    step = gen["kv_len"].to_numpy(dtype=float)  # tokens cached before the step
    kvb = np.where(gen["kv_cache_dtype"].to_numpy() == "fp8", 1.0, 2.0)
    a = pd.DataFrame(
        {
            "kind": "decode_attention",
            "flops": 4.0 * b * h * hd * (step + 1.0),
            "hbm_bytes": 2.0 * b * kvh * hd * (step + 1.0) * kvb + 2.0 * 2.0 * b * h * hd,
            "time_s": gen["latency_s"].to_numpy(dtype=float),
            "power_w": gen["power_w"].to_numpy(dtype=float),
            "group": [f"attn-h{x}-kv{y}-hd{z}" for x, y, z in
                      zip(h.astype(int), kvh.astype(int), hd.astype(int), strict=True)],
        }
    )  # fmt: skip
    out = pd.concat([g, a], ignore_index=True)
    out["measured_j"] = out["time_s"] * out["power_w"]
    return out, sorted(set(_files(gemm)) | set(_files(gen)))
