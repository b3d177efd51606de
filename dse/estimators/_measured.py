"""Measured energy and time rows for calibrating and scoring the estimator (I/O edge).

Readers of three layouts in the measured-data share (units: `../shared/data/README.md`):
- argonne `Plots/Fig_16_a_b/power_results.csv`: one static batch, avg_power in mW of GPU 0;
  `Plots/All_results.csv`: the same kind of batches, latency only;
- ml-energy-v2 `data/llm_text_generation/<task>/<gpu>/<org>/<model>/bs*+tp*+pp*.json`: serving,
  energy per request summed over GPUs;
- aiconfigurator H200 tables: one kernel, mean board power in W, latency in ms.

Architectures of the measured models come from the shared catalogue `dse.spec.catalogue` when it is
installed, else from the local table below (published Hugging Face `config.json` values, written
before the catalogue existed); `tests/test_tokens2wh.py` checks that the two agree.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dse.errors import DataError
from dse.spec.arch import Architecture

# Prompt length assumed for ml-energy-v2 rows, which did not record input lengths (ShareGPT
# chat prompts and code prompts are a few hundred tokens). Both presets use the same value.
ML_ENERGY_PROMPT_TOKENS = 256

_LLAMA2_7B = dict(d_model=4096, n_layers=32, n_heads=32, d_ff=11008, vocab_size=32000)
_LLAMA3_8B = dict(
    d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8, d_ff=14336, vocab_size=128256
)
_LLAMA3_70B = dict(
    d_model=8192, n_layers=80, n_heads=64, n_kv_heads=8, d_ff=28672, vocab_size=128256
)
_GEMMA = dict(tied_embeddings=True, vocab_size=256000)  # GeGLU is gated like SwiGLU
_STARCODER2 = dict(gated_mlp=False, norm="layernorm", qkv_bias=True, vocab_size=49152)

# Hugging Face id -> Architecture fields (config.json of each model).
MODELS: dict[str, dict[str, Any]] = {
    # argonne
    "meta-llama/Llama-2-7b-hf": _LLAMA2_7B,
    "meta-llama/Meta-Llama-3-8B": _LLAMA3_8B,
    "meta-llama/Meta-Llama-3-70B": _LLAMA3_70B,
    "meta-llama/Llama-2-70b-hf": {**_LLAMA3_70B, "vocab_size": 32000},
    "mistralai/Mixtral-8x7B-v0.1": dict(
        d_model=4096,
        n_layers=32,
        n_heads=32,
        n_kv_heads=8,
        d_ff=14336,
        vocab_size=32000,
        n_experts=8,
        top_k=2,
    ),
    # ml-energy-v2 chat
    "meta-llama/Meta-Llama-3.1-8B-Instruct": _LLAMA3_8B,
    "meta-llama/Meta-Llama-3.1-70B-Instruct": _LLAMA3_70B,
    "meta-llama/Meta-Llama-3.1-405B-Instruct": dict(
        d_model=16384, n_layers=126, n_heads=128, n_kv_heads=8, d_ff=53248, vocab_size=128256
    ),
    "mistralai/Mistral-7B-Instruct-v0.3": {**_LLAMA3_8B, "vocab_size": 32768},
    "mistralai/Mistral-Nemo-Instruct-2407": dict(
        d_model=5120,
        n_layers=40,
        n_heads=32,
        n_kv_heads=8,
        head_dim=128,
        d_ff=14336,
        vocab_size=131072,
    ),
    "mistralai/Mistral-Large-Instruct-2407": dict(
        d_model=12288, n_layers=88, n_heads=96, n_kv_heads=8, d_ff=28672, vocab_size=32768
    ),
    "mistralai/Mixtral-8x7B-Instruct-v0.1": dict(
        d_model=4096,
        n_layers=32,
        n_heads=32,
        n_kv_heads=8,
        d_ff=14336,
        vocab_size=32000,
        n_experts=8,
        top_k=2,
    ),
    "mistralai/Mixtral-8x22B-Instruct-v0.1": dict(
        d_model=6144,
        n_layers=56,
        n_heads=48,
        n_kv_heads=8,
        d_ff=16384,
        vocab_size=32768,
        n_experts=8,
        top_k=2,
    ),
    "google/gemma-2-2b-it": dict(
        d_model=2304, n_layers=26, n_heads=8, n_kv_heads=4, head_dim=256, d_ff=9216, **_GEMMA
    ),
    "google/gemma-2-9b-it": dict(
        d_model=3584, n_layers=42, n_heads=16, n_kv_heads=8, head_dim=256, d_ff=14336, **_GEMMA
    ),
    "google/gemma-2-27b-it": dict(
        d_model=4608, n_layers=46, n_heads=32, n_kv_heads=16, head_dim=128, d_ff=36864, **_GEMMA
    ),
    "microsoft/Phi-3-mini-4k-instruct": dict(
        d_model=3072, n_layers=32, n_heads=32, d_ff=8192, vocab_size=32064
    ),
    "microsoft/Phi-3-small-8k-instruct": dict(
        d_model=4096,
        n_layers=32,
        n_heads=32,
        n_kv_heads=8,
        d_ff=14336,
        vocab_size=100352,
        tied_embeddings=True,
    ),
    "microsoft/Phi-3-medium-4k-instruct": dict(
        d_model=5120, n_layers=40, n_heads=40, n_kv_heads=10, d_ff=17920, vocab_size=32064
    ),
    # ml-energy-v2 code
    "codellama/CodeLlama-7b-hf": {**_LLAMA2_7B, "vocab_size": 32016},
    "codellama/CodeLlama-13b-hf": dict(
        d_model=5120, n_layers=40, n_heads=40, d_ff=13824, vocab_size=32016
    ),
    "codellama/CodeLlama-34b-hf": dict(
        d_model=8192, n_layers=48, n_heads=64, n_kv_heads=8, d_ff=22016, vocab_size=32000
    ),
    "codellama/CodeLlama-70b-hf": {**_LLAMA3_70B, "vocab_size": 32016},
    "google/codegemma-1.1-2b": dict(
        d_model=2048, n_layers=18, n_heads=8, n_kv_heads=1, head_dim=256, d_ff=16384, **_GEMMA
    ),
    "google/codegemma-7b": dict(
        d_model=3072, n_layers=28, n_heads=16, head_dim=256, d_ff=24576, **_GEMMA
    ),
    "bigcode/starcoder2-3b": dict(
        d_model=3072,
        n_layers=30,
        n_heads=24,
        n_kv_heads=2,
        d_ff=12288,
        tied_embeddings=True,
        **_STARCODER2,
    ),
    "bigcode/starcoder2-7b": dict(
        d_model=4608,
        n_layers=32,
        n_heads=36,
        n_kv_heads=4,
        d_ff=18432,
        tied_embeddings=True,
        **_STARCODER2,
    ),
    "bigcode/starcoder2-15b": dict(
        d_model=6144, n_layers=40, n_heads=48, n_kv_heads=4, d_ff=24576, **_STARCODER2
    ),
}

ARCH_FIELDS = Architecture.field_names()

# Measured-data GPU names -> registry names. Argonne's A100 runs are on ALCF Polaris, whose
# nodes carry A100-SXM4-40GB (consistent with its 70 B runs appearing only at TP 4).
GPU_NAMES = {
    "Nvidia H100 GPU": "h100_sxm",
    "Nvidia A100 GPU": "a100_sxm_40gb",
    "Nvidia GH200 GPU": "gh200",
    "NVIDIA H100 80GB HBM3": "h100_sxm",
    "NVIDIA A100-SXM4-40GB": "a100_sxm_40gb",
}
ENGINES = {"vLLM": "vllm", "TensorRT-LLM": "trtllm", "Deepspeed-MII": "deepspeed-mii"}

ARGONNE_POWER = "argonne/Plots/Fig_16_a_b/power_results.csv"
ARGONNE_LATENCY = "argonne/Plots/All_results.csv"
ML_ENERGY_GLOB = "ml-energy-v2/data/llm_text_generation/*/*/*/*/bs*+tp*+pp*.json"
AIC_H200 = "aiconfigurator/aic-core/src/aiconfigurator_core/systems/data/h200_sxm"


def architecture_source() -> str:
    """Where `architecture` takes model shapes from: 'dse.spec.catalogue' or 'local table'."""
    try:
        import dse.spec.catalogue  # noqa: F401
    except ImportError:
        return "local table"
    return "dse.spec.catalogue"


def architecture(model: str) -> Architecture:
    """The Architecture of a measured model (catalogue first, local table as fallback)."""
    if architecture_source() == "dse.spec.catalogue":
        from dse.spec.catalogue import lookup_model

        return lookup_model(model).resolved()
    return Architecture(**MODELS[model]).resolved()


def architecture_columns(models: pd.Series) -> dict[str, np.ndarray]:
    """Architecture field columns for a column of model ids (all must be in MODELS)."""
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


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _read_csv(root: Path, rel: str, columns: list[str]) -> pd.DataFrame:
    path = root / rel
    try:
        df = pd.read_csv(path)
    except (OSError, pd.errors.ParserError) as exc:
        raise DataError(f"{path}: cannot read: {exc}") from exc
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise DataError(f"{path}: missing column {missing[0]!r}")
    return df


def _argonne(df: pd.DataFrame) -> pd.DataFrame:
    keep = df["Hardware"].isin(GPU_NAMES) & df["Framework"].isin(ENGINES) & df["Model"].isin(MODELS)
    df = df[keep]
    return pd.DataFrame(
        {
            "source": "argonne",
            "gpu": df["Hardware"].map(GPU_NAMES).to_numpy(),
            "engine": df["Framework"].map(ENGINES).to_numpy(),
            "model": df["Model"].to_numpy(),
            "tensor_parallel": df["Num of Hardware"].to_numpy(dtype=float),
            "batch_size": df["Batch Size"].to_numpy(dtype=float),
            "prompt_tokens": df["Input Output Length"].to_numpy(dtype=float),
            "output_tokens": df["Input Output Length"].to_numpy(dtype=float),
            "time_s": df["Latency"].to_numpy(dtype=float),  # whole batch, s
        }
    )


def argonne_power(root: Path) -> tuple[pd.DataFrame, list[str]]:
    """Static batches with GPU-0 energy: measured_j = Latency (s) * avg_power (mW) / 1000."""
    cols = ["Hardware", "Num of Hardware", "Framework", "Model", "Input Output Length",
            "Batch Size", "Latency", "avg_power"]  # fmt: skip
    raw = _read_csv(root, ARGONNE_POWER, cols)
    out = _argonne(raw)
    keep = (
        raw["Hardware"].isin(GPU_NAMES) & raw["Framework"].isin(ENGINES) & raw["Model"].isin(MODELS)
    )
    power_w = raw.loc[keep, "avg_power"].to_numpy(dtype=float) / 1000.0
    out["measured_j"] = out["time_s"].to_numpy() * power_w  # GPU 0 of the group
    out["scope"] = "gpu0"
    return out.reset_index(drop=True), [ARGONNE_POWER]


def argonne_latency(root: Path) -> tuple[pd.DataFrame, list[str]]:
    """Static batches with latency only (vLLM, TensorRT-LLM, DeepSpeed-MII; NVIDIA GPUs)."""
    cols = ["Hardware", "Num of Hardware", "Framework", "Model", "Input Output Length",
            "Batch Size", "Latency"]  # fmt: skip
    return _argonne(_read_csv(root, ARGONNE_LATENCY, cols)).reset_index(drop=True), [
        ARGONNE_LATENCY
    ]


def ml_energy(root: Path) -> tuple[pd.DataFrame, list[str]]:
    """Serving runs (pipeline parallel 1 only): energy per request, summed over GPUs.

    A run with average batch B is read as a static batch of B requests whose time is
    B * (average output tokens) / (token throughput): the share of the group's time each
    request occupies, times B.
    """
    rows, files = [], []
    for path in sorted(root.glob(ML_ENERGY_GLOB)):
        rel = str(path.relative_to(root))
        try:
            r = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise DataError(f"{path}: cannot read: {exc}") from exc
        need = ["Model", "GPU", "TP", "PP", "Energy/req (J)", "Token tput (tok/s)",
                "Avg Output Tokens", "Avg BS (reqs)"]  # fmt: skip
        missing = [k for k in need if k not in r]
        if missing:
            raise DataError(f"{path}: missing key {missing[0]!r}")
        if r["PP"] != 1 or r["Model"] not in MODELS or r["GPU"] not in GPU_NAMES:
            continue
        b, o = float(r["Avg BS (reqs)"]), float(r["Avg Output Tokens"])
        rows.append(
            {
                "source": "ml-energy",
                "gpu": GPU_NAMES[r["GPU"]],
                "engine": "vllm",
                "model": r["Model"],
                "tensor_parallel": float(r["TP"]),
                "batch_size": b,
                "prompt_tokens": float(ML_ENERGY_PROMPT_TOKENS),
                "output_tokens": o,
                "time_s": b * o / float(r["Token tput (tok/s)"]),
                "measured_j": b * float(r["Energy/req (J)"]),  # the batch of B requests
                "scope": "all",
                "file": rel,
            }
        )
        files.append(rel)
    if not rows:
        raise DataError(f"{root / 'ml-energy-v2'}: no serving runs found")
    return pd.DataFrame(rows), files


def aic_h200_kernels(root: Path) -> tuple[pd.DataFrame, list[str]]:
    """H200 kernels with power: GEMMs (bf16, fp8_block) and decode attention.

    Per row: flops (fp8 GEMM FLOPs scaled by 0.5, the bf16:fp8 peak ratio, as the estimator
    does), hbm_bytes (operands once), time_s, measured_j = latency (ms) / 1000 * power (W),
    and a shape group (the weight shape n x k, or the attention head layout).
    """
    base = root / AIC_H200
    files = [
        f"{AIC_H200}/gemm/vllm/0.22.0/gemm_perf.parquet",
        f"{AIC_H200}/attention/vllm/0.22.0/generation_attention_perf.parquet",
    ]
    try:
        gemm = pd.read_parquet(root / files[0])
        gen = pd.read_parquet(root / files[1])
    except (OSError, ValueError) as exc:
        raise DataError(f"{base}: cannot read: {exc}") from exc
    gemm = gemm[gemm["gemm_dtype"].isin(["bfloat16", "fp8_block"])]
    fp8 = (gemm["gemm_dtype"] == "fp8_block").to_numpy()
    m, n, k = (gemm[c].to_numpy(dtype=float) for c in ("m", "n", "k"))
    wb = np.where(fp8, 1.0, 2.0)
    g = pd.DataFrame(
        {
            "kind": "gemm",
            "flops": 2.0 * m * n * k * np.where(fp8, 0.5, 1.0),
            "hbm_bytes": wb * (m * k + n * k) + 2.0 * m * n,
            "time_s": gemm["latency"].to_numpy(dtype=float) / 1e3,
            "power_w": gemm["power"].to_numpy(dtype=float),
            "group": [f"gemm-n{a}-k{b}" for a, b in zip(n.astype(int), k.astype(int), strict=True)],
        }
    )
    gen = gen[(gen["window_size"] == 0)]
    b = gen["batch_size"].to_numpy(dtype=float)
    h = gen["num_heads"].to_numpy(dtype=float)
    kvh = gen["num_key_value_heads"].to_numpy(dtype=float)
    hd = gen["head_dim"].to_numpy(dtype=float)
    step = gen["step"].to_numpy(dtype=float)
    kvb = np.where(gen["kv_cache_dtype"].to_numpy() == "fp8", 1.0, 2.0)
    a = pd.DataFrame(
        {
            "kind": "decode_attention",
            "flops": 4.0 * b * h * hd * (step + 1.0),
            "hbm_bytes": 2.0 * b * kvh * hd * (step + 1.0) * kvb + 2.0 * 2.0 * b * h * hd,
            "time_s": gen["latency"].to_numpy(dtype=float) / 1e3,
            "power_w": gen["power"].to_numpy(dtype=float),
            "group": [f"attn-h{x}-kv{y}-hd{z}" for x, y, z in
                      zip(h.astype(int), kvh.astype(int), hd.astype(int), strict=True)],
        }
    )  # fmt: skip
    out = pd.concat([g, a], ignore_index=True)
    out["measured_j"] = out["time_s"] * out["power_w"]
    return out, files
