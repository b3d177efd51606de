"""aiconfigurator (ai-dynamo/aiconfigurator) single-kernel tables -> gemm, attention, moe, allreduce.

Layout: `aiconfigurator/**/systems/data/<gpu>/<op>/<engine>/<version>/<table>.parquet`.
`latency` is milliseconds per call (CUDA-graph replay); `power` (H200 vLLM tables only) is the
mean NVML board power in watts while the op looped, idle included, so energy of one call is
latency_s * power_w. Tables this reader does not know (other ops) are skipped.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from dse.data import _common as c
from dse.data import _linear_layers as linear
from dse.errors import DataError
from dse.spec.hardware import shipped_gpu

SOURCE = "aiconfigurator"
FOLDER = "aiconfigurator"

# table file stem -> kind
_TABLES: dict[str, str] = {
    "gemm_perf": "gemm",
    "context_attention_perf": "context_attention",
    "generation_attention_perf": "generation_attention",
    "moe_perf": "moe",
    "nccl_perf": "allreduce",
    "custom_allreduce_perf": "allreduce",
    # DeepSeek-V3's latent attention (MLA): the kernel alone, and the whole module with its
    # projections (`_mla`)
    "context_mla_perf": "context_mla",
    "generation_mla_perf": "generation_mla",
    "mla_context_module_perf": "context_mla_module",
    "mla_generation_module_perf": "generation_mla_module",
}

_DTYPE_COLUMN: dict[str, str] = {
    "gemm_perf": "gemm_dtype",
    "context_attention_perf": "attn_dtype",
    "generation_attention_perf": "attn_dtype",
    "moe_perf": "moe_dtype",
    "nccl_perf": "nccl_dtype",
    "custom_allreduce_perf": "allreduce_dtype",
    "context_mla_perf": "mla_dtype",
    "generation_mla_perf": "mla_dtype",
    "mla_context_module_perf": "mla_dtype",
    "mla_generation_module_perf": "mla_dtype",
}

# Board power in watts must be physically possible: idle ~60 W; board limits reach 1000 W (B200)
# and 1200 W (GB200), so 1500 W still tells watts from milliwatts or kilowatts.
_POWER_RANGE_W = (50.0, 1500.0)
# Any single kernel call: 100 ns .. 100 s.
_LATENCY_RANGE_S = (1e-7, 100.0)
_KV_BYTES = {"bfloat16": 2.0, "float16": 2.0, "fp8": 1.0, "int8": 1.0}
# Bytes per element of an all-reduce payload, by normalised dtype.
_ELEMENT_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "fp8": 1, "int8": 1}


def _peak_flops(gpu: str) -> float:
    """The highest dense tensor-core rate of a shipped registry GPU; 20 PFLOP/s otherwise (a GPU
    outside the registry may run fp4, ~9 PFLOP/s dense on B200; a ms-vs-s slip is still 1000x
    off). A profiled device's measured peak is not used: it is one kind of kernel's, and other
    kinds may run faster on it (bf16 SDPA 16x faster than bf16 matmul on an AVX2 CPU)."""
    spec = shipped_gpu(gpu)
    if spec is None:
        return 2e16
    # the fastest tensor-core dtype the GPU has: fp4 (nvfp4 GEMM / MoE rows, B200), else fp8
    return spec.peak_fp4_flops_per_s or spec.peak_fp8_flops_per_s or spec.peak_bf16_flops_per_s


def _hbm_bw(gpu: str) -> float:
    spec = shipped_gpu(gpu)
    return 16e12 if spec is None else spec.hbm_bw_bytes_per_s  # outside: twice B200's 8 TB/s


def _read_table(path: Path, root: Path) -> tuple[str, pd.DataFrame] | None:
    stem = path.stem
    kind = _TABLES.get(stem)
    if kind is None:
        return None
    file = c.rel(path, root)
    parts = path.relative_to(root).parts
    if len(parts) < 5:
        raise DataError(f"{file}: expected .../<gpu>/<op>/<engine>/<version>/{path.name}")
    gpu_dir, _op_dir, engine_dir, version_dir = parts[-5:-1]
    # The GPU folder is the one right under .../systems/data/; upstream also writes tables
    # without the <op> folder (<gpu>/<engine>/<version>/), where parts[-5] would be "data".
    sd = [i for i in range(len(parts) - 1) if parts[i : i + 2] == ("systems", "data")]
    if sd and len(parts) - sd[-1] - 2 >= 4:
        gpu_dir = parts[sd[-1] + 2]
    try:
        raw = pd.read_parquet(path).reset_index(drop=True)
    except Exception as exc:  # pyarrow raises several types for a corrupt file
        raise DataError(f"{file}: cannot read parquet ({exc})") from exc
    if raw.empty:
        return None  # no measurements (see _common.read_csv): skipped, listed by `dse validate`
    dtype_col = _DTYPE_COLUMN[stem]
    c.require_columns(raw, ["latency", dtype_col], file)

    latency_s = c.numeric(raw, "latency", file) / 1000.0  # ms per call -> s
    c.check_positive(latency_s, "latency", file)
    c.check_range(latency_s, *_LATENCY_RANGE_S, "latency (s, after ms -> s)", file)

    gpu = c.normalise_gpu(gpu_dir)
    df = pd.DataFrame(
        {
            "source": SOURCE,
            "gpu": gpu,
            "engine": engine_dir.strip().lower(),
            "engine_version": version_dir,
            "kind": kind,
            "dtype": c.normalise_dtype(raw[dtype_col]),
            "file": file,
            "latency_s": latency_s,
        }
    )
    if "power" in raw.columns:
        power_w = c.numeric(raw, "power", file)
        c.check_range(power_w, *_POWER_RANGE_W, "power (W)", file)
        df["power_w"] = power_w
        df["energy_j"] = latency_s * power_w
        if "power_limit" in raw.columns:
            df["power_limit_w"] = c.numeric(raw, "power_limit", file)
    else:
        df["power_w"] = np.nan
        df["energy_j"] = np.nan
    if "kernel_source" in raw.columns:
        df["kernel_source"] = raw["kernel_source"].astype("str")
    if "device" in raw.columns:
        df["device"] = raw["device"].astype("str")

    builder = {
        "gemm": _gemm,
        "context_attention": _context_attention,
        "generation_attention": _generation_attention,
        "moe": _moe,
        "allreduce": _allreduce,
        "context_mla": _mla,
        "generation_mla": _mla,
        "context_mla_module": _mla,
        "generation_mla_module": _mla,
    }[kind]
    df = builder(raw, df, file, stem)
    return kind, c.finish(df)


def _ints(raw: pd.DataFrame, df: pd.DataFrame, columns: dict[str, str], file: str) -> None:
    """Copy integer shape columns (source name -> our name), checking they parse and are >= 0."""
    c.require_columns(raw, columns, file)
    for src, dst in columns.items():
        v = c.numeric(raw, src, file)
        if (~np.isfinite(v) | (v < 0)).any():
            i = int(np.flatnonzero(~np.isfinite(v) | (v < 0))[0])
            raise DataError(
                f"{file}: column {src!r} must be an integer >= 0, got {v[i]!r} at row {i}"
            )
        df[dst] = v.astype(np.int64)


def _gemm(raw: pd.DataFrame, df: pd.DataFrame, file: str, _stem: str) -> pd.DataFrame:
    # y = x[m, k] @ W[n, k]^T: m tokens, k input features, n output features.
    _ints(raw, df, {"m": "m", "n": "n", "k": "k"}, file)
    flops = 2.0 * df["m"].to_numpy(float) * df["n"].to_numpy(float) * df["k"].to_numpy(float)
    gpu = str(df["gpu"].iloc[0])
    # best rate at least 1 TFLOP/s, at most 1.3x the fastest tensor-core peak of the GPU
    peak = _peak_flops(gpu)
    c.check_peak_rate(
        flops, df["latency_s"].to_numpy(), c.rate_floor(gpu, 1e12), 1.3 * peak, "FLOP/s", file
    )
    # The README anchor: a bf16 4096^3 GEMM runs at 20-110% of the registry bf16 peak (a spec
    # sheet's: a profiled device's peak is a measured GEMM's, not a datasheet's).
    sheet = shipped_gpu(gpu)
    peak_bf16 = sheet.peak_bf16_flops_per_s if sheet is not None else None
    anchor = (df["m"] == 4096) & (df["n"] == 4096) & (df["k"] == 4096) & (df["dtype"] == "bfloat16")
    if peak_bf16 and anchor.any():
        rate = 2.0 * 4096**3 / df.loc[anchor, "latency_s"].to_numpy()
        c.check_range(rate / peak_bf16, 0.2, 1.1, "bf16 4096^3 GEMM rate / registry peak", file)
    return df


def _attention_common(raw: pd.DataFrame, df: pd.DataFrame, file: str) -> None:
    _ints(
        raw,
        df,
        {
            "batch_size": "batch_size",
            "isl": "isl",
            "num_heads": "num_heads",
            "num_key_value_heads": "num_kv_heads",
            "head_dim": "head_dim",
        },
        file,
    )
    c.require_columns(raw, ["kv_cache_dtype"], file)
    df["kv_cache_dtype"] = c.normalise_dtype(raw["kv_cache_dtype"])
    # window_size 0 = full attention; older tables (A100 vLLM 0.14) have no column: full.
    if "window_size" in raw.columns:
        df["window_size"] = c.numeric(raw, "window_size", file).astype(np.int64)
    else:
        df["window_size"] = np.int64(0)
    if "beam_width" in raw.columns:
        df["beam_width"] = c.numeric(raw, "beam_width", file).astype(np.int64)


def _context_attention(raw: pd.DataFrame, df: pd.DataFrame, file: str, _stem: str) -> pd.DataFrame:
    # batch_size sequences of isl new tokens, causal. `step` = tokens already cached before the
    # chunk (prefix / chunked prefill); 0 in every table seen so far.
    _attention_common(raw, df, file)
    c.require_columns(raw, ["step"], file)
    df["past_kv_len"] = c.numeric(raw, "step", file).astype(np.int64)
    b, s = df["batch_size"].to_numpy(float), df["isl"].to_numpy(float)
    h, d = df["num_heads"].to_numpy(float), df["head_dim"].to_numpy(float)
    w = df["window_size"].to_numpy(float)
    span = np.where(w > 0, np.minimum(s, w), s)
    flops = 4.0 * b * h * d * s * span / 2.0  # QK^T and PV, causal half
    gpu = str(df["gpu"].iloc[0])
    peak = _peak_flops(gpu)
    c.check_peak_rate(
        flops, df["latency_s"].to_numpy(), c.rate_floor(gpu, 1e11), 1.3 * peak, "FLOP/s", file
    )
    return df


def _generation_attention(
    raw: pd.DataFrame, df: pd.DataFrame, file: str, _stem: str
) -> pd.DataFrame:
    # One new token per sequence. The collectors pass `step` as the persisted history: the tokens
    # already in the KV cache before this step (TRT-LLM: num_cached_tokens_per_seq = step; vLLM
    # 0.24 collector: seq_len = step + 1). The kernel therefore reads kv_len + 1 keys per head.
    # Caveat: the vLLM 0.14 collector used seq_len = step (one token fewer); negligible but noted.
    _attention_common(raw, df, file)
    c.require_columns(raw, ["step"], file)
    df["kv_len"] = c.numeric(raw, "step", file).astype(np.int64)
    b, n = df["batch_size"].to_numpy(float), df["kv_len"].to_numpy(float) + 1.0
    w = df["window_size"].to_numpy(float)
    n = np.where(w > 0, np.minimum(n, w), n)
    kvb = df["kv_cache_dtype"].map(_KV_BYTES).fillna(2.0).to_numpy(float)
    kv_bytes = (
        2.0 * b * n * df["num_kv_heads"].to_numpy(float) * df["head_dim"].to_numpy(float) * kvb
    )
    gpu = str(df["gpu"].iloc[0])
    # K and V streamed from HBM: best rate between 10 GB/s and 1.5x the HBM bandwidth
    bw = _hbm_bw(gpu)
    c.check_peak_rate(
        kv_bytes, df["latency_s"].to_numpy(), c.rate_floor(gpu, 1e10), 1.5 * bw, "KV bytes/s", file
    )
    return df


def _mla(raw: pd.DataFrame, df: pd.DataFrame, file: str, stem: str) -> pd.DataFrame:
    """DeepSeek-V3's latent attention (`dse.models.mla`): `num_heads` query heads per GPU
    (`tp_size` is the split the collector named; the heads alone set the work), `batch_size`
    sequences; context: `isl` new tokens, causal (`step` = tokens cached before, 0 in every
    table); generation: one new token over `step` cached tokens (the kernel collectors pass
    the cached history: kv_len = step; the module tables start at step 2, the kernel ones at
    1). The latent geometry is not in the tables: the collectors build DeepSeek-V3's layer
    (kv_lora_rank 512, qk_rope_head_dim 64, qk_nope_head_dim 128, v_head_dim 128;
    aiconfigurator collector/*/collect_mla*.py), written here as columns so a model records
    the geometry it was fitted on. Module tables (`mla_*_module_perf`) time the projections
    too: `gemm_type` is their GEMM dtype, `model` the model whose layer was built."""
    from dse.models.mla import (
        DEEPSEEK_V3_GEOMETRY,
        ContextMLAModel,
        GenerationMLAModel,
        mla_inputs,
        mla_work,
    )

    context = "context" in stem
    _ints(raw, df, {"batch_size": "batch_size", "num_heads": "num_heads"}, file)
    _ints(raw, df, {"isl": "isl", "step": "kv_len" if not context else "past_kv_len"}, file)
    if "tp_size" in raw.columns:
        df["tp_size"] = c.numeric(raw, "tp_size", file).astype(np.int64)
    bad = df["num_heads"].to_numpy() < 1
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DataError(f"{file}: num_heads must be >= 1, got {df['num_heads'].iloc[i]} at row {i}")
    c.require_columns(raw, ["kv_cache_dtype"], file)
    df["kv_cache_dtype"] = c.normalise_dtype(raw["kv_cache_dtype"])
    for key, value in DEEPSEEK_V3_GEOMETRY.items():
        df[key] = np.int64(value)
    for col in ("gemm_type", "model"):
        if col in raw.columns:
            df[col] = raw[col].astype(str).to_numpy()
    phase = "context" if context else "generation"
    model = ContextMLAModel() if context else GenerationMLAModel()
    flops, nbytes = mla_work(phase, model._inputs(mla_inputs(df)))
    gpu = str(df["gpu"].iloc[0])
    lat = df["latency_s"].to_numpy()
    if context:
        # causal attention FLOPs: best rate at least 0.1 TFLOP/s, median below 1.3x the peak
        c.check_peak_rate(
            flops, lat, c.rate_floor(gpu, 1e11), 1.3 * _peak_flops(gpu), "FLOP/s", file
        )
    else:
        # the latent cache streamed from HBM: between 10 GB/s and 1.5x the HBM bandwidth
        c.check_peak_rate(
            nbytes, lat, c.rate_floor(gpu, 1e10), 1.5 * _hbm_bw(gpu), "latent bytes/s", file
        )
    return df


# Layouts (hidden_size, inter_size, topk, num_experts) of MoE models whose experts are not gated
# (ReLU^2: up and down, no gate matrix). The tables do not say: the collector builds the layer
# from the model's config, and its case files (collector/cases/models/NemotronHForCausalLM_cases
# .yaml at aiconfigurator 095f58a) list these Nemotron-3 / Nemotron-H shapes, whose
# activation is relu2 (vLLM: `mlp_hidden_act` + "_no_mul"; TRT-LLM: NON_GATED_MOE_MODELS,
# kernel_source "moe_torch_flow_nongated"). vLLM 0.24's kernel names carry no such mark.
NON_GATED_MOE_LAYOUTS = frozenset(
    {
        (1024, 2688, 22, 512),  # Nemotron-3 Super (vLLM latent geometry)
        (2048, 5120, 22, 512),  # Nemotron-3 Ultra (vLLM latent geometry)
        (4096, 2688, 22, 512),  # Nemotron-3 Super
        (8192, 5120, 22, 512),  # Nemotron-3 Ultra
        (2688, 1856, 6, 128),  # Nemotron-3 Nano / 3.5 Lightning
    }
)


def moe_gated(df: pd.DataFrame) -> np.ndarray:
    """Whether each MoE row's experts are gated (SwiGLU, 3 matrices): not for the layouts of
    NON_GATED_MOE_LAYOUTS, nor where the kernel name says non-gated."""
    keys = zip(
        *(df[c].to_numpy(np.int64) for c in ("hidden_size", "inter_size", "topk", "num_experts")),
        strict=True,
    )
    non = np.fromiter((key in NON_GATED_MOE_LAYOUTS for key in keys), bool, len(df))
    if "kernel_source" in df:
        non |= df["kernel_source"].astype(str).str.contains("nongated").to_numpy(bool)
    return ~non


def _moe(raw: pd.DataFrame, df: pd.DataFrame, file: str, _stem: str) -> pd.DataFrame:
    _ints(
        raw,
        df,
        {
            "num_tokens": "num_tokens",
            "hidden_size": "hidden_size",
            "inter_size": "inter_size",
            "topk": "topk",
            "num_experts": "num_experts",
            "moe_tp_size": "moe_tp_size",
            "moe_ep_size": "moe_ep_size",
        },
        file,
    )
    c.require_columns(raw, ["distribution"], file)
    df["distribution"] = raw["distribution"].astype("str")
    df["moe_dtype"] = raw["moe_dtype"].astype("str")
    df["gated"] = moe_gated(df)
    # gated experts: gate+up (2 x inter) and down (inter) GEMMs, split over TP x EP ranks
    t, k = df["num_tokens"].to_numpy(float), df["topk"].to_numpy(float)
    hsz, isz = df["hidden_size"].to_numpy(float), df["inter_size"].to_numpy(float)
    ranks = df["moe_tp_size"].to_numpy(float) * df["moe_ep_size"].to_numpy(float)
    flops = 2.0 * t * k * 3.0 * hsz * isz / ranks
    gpu = str(df["gpu"].iloc[0])
    peak = _peak_flops(gpu)
    c.check_peak_rate(
        flops, df["latency_s"].to_numpy(), c.rate_floor(gpu, 1e10), 2.0 * peak, "FLOP/s", file
    )
    return df


def _allreduce(raw: pd.DataFrame, df: pd.DataFrame, file: str, stem: str) -> pd.DataFrame:
    # `message_size` is an element count, not bytes (contrary to the share's README): the NCCL
    # collector runs nccl-tests at S bytes and logs S // bytes_per_element, the custom all-reduce
    # collectors allocate a tensor of that many elements. The data agree: an int8 row of 2N
    # elements takes the time of a half row of N (e.g. H100, 2 GPUs: 1.73 ms vs 1.69 ms), and
    # only bytes = 2 x count gives the NCCL bus rate of an 8-GPU H100 (~450 GB/s, not ~220).
    _ints(raw, df, {"num_gpus": "n_gpus", "message_size": "message_elements"}, file)
    elem = df["dtype"].map(_ELEMENT_BYTES)
    if elem.isna().any():
        bad = sorted(set(df.loc[elem.isna(), "dtype"].astype(str)))
        raise DataError(
            f"{file}: unknown all-reduce dtype(s) {bad}; element sizes are known for "
            f"{', '.join(sorted(_ELEMENT_BYTES))}"
        )
    df["element_bytes"] = elem.to_numpy(np.int64)
    df["message_bytes"] = df["message_elements"].to_numpy(np.int64) * df["element_bytes"].to_numpy()
    if stem == "nccl_perf":
        c.require_columns(raw, ["op_name"], file)
        df["implementation"] = "nccl"
    else:
        df["implementation"] = "custom"
    df["op"] = (
        raw["op_name"].astype(str).str.lower().to_numpy() if "op_name" in raw else "all_reduce"
    )
    # vLLM custom all-reduce comes in CUDA-graph and eager flavours (eager includes launch cost)
    for col in ("backend", "implementation"):
        if col in raw.columns:
            df["backend"] = raw[col].astype(str).to_numpy()
            break
    # algorithm bandwidth (bytes / s): best between 100 MB/s and 5 TB/s; a profiled device's
    # all-reduce may run over a host transport (gloo over loopback on a CPU: ~60 MB/s at these
    # sizes on a loaded 2-core machine), so its floor is c.ANY_DEVICE_MIN_RATE (1 MB/s)
    gpu = str(df["gpu"].iloc[0])
    c.check_peak_rate(
        df["message_bytes"].to_numpy(float),
        df["latency_s"].to_numpy(),
        c.rate_floor(gpu, 1e8),
        5e12,
        "message bytes/s",
        file,
    )
    return df


def _add_linear(out: dict[str, list[pd.DataFrame]], path: Path, root: Path) -> None:
    """A linear-attention table (`dse.data._linear_layers`) under its GPU, engine and version."""
    parts = path.relative_to(root).parts
    if len(parts) < 5:
        raise DataError(
            f"{c.rel(path, root)}: expected .../<gpu>/<op>/<engine>/<version>/{path.name}"
        )
    gpu_dir, _op, engine_dir, version_dir = parts[-5:-1]
    df = linear.read_linear_table(path, root, gpu_dir, engine_dir, version_dir)
    if df is not None:
        c.add_table(out, linear.KIND, df)


def read_aiconfigurator(
    root: Path | str, kinds: Iterable[str] | None = None
) -> dict[str, pd.DataFrame]:
    """Every known aiconfigurator table under `root/aiconfigurator`, keyed by kind.

    `kinds` (optional) skips the files of other kinds without opening them.
    """
    root = Path(root)
    base = root / FOLDER
    out: dict[str, list[pd.DataFrame]] = {}
    if not base.is_dir():
        return {}
    wanted = None if kinds is None else set(kinds)
    for path in sorted(base.rglob("*.parquet")):
        if path.stem in linear.TABLES:  # linear-attention layers: their own reader
            if wanted is None or linear.KIND in wanted:
                _add_linear(out, path, root)
            continue
        if wanted is not None and _TABLES.get(path.stem) not in wanted:
            continue
        got = _read_table(path, root)
        if got is not None:
            c.add_table(out, *got)
    return c.merge_kinds(out)
