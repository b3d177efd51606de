"""aiconfigurator linear-attention tables (`linear_attention/gdn_perf`, `mamba2_perf`) -> linear_layer.

One row is one call of one kernel of a linear-attention layer, per GPU (the shapes are the
collectors' per-GPU shapes): `latency` is milliseconds per call (the collectors' `latency_ms`,
total time / runs / repeats). What the rows time, from the collectors at aiconfigurator 095f58a
(`collector/<engine>/collect_gdn.py`, `collector/trtllm/collect_mamba2.py`):

- Gated DeltaNet (Qwen3.5), `layer` gdn. Prefill (`phase` context): the causal depthwise conv
  (`causal_conv1d_fn`) and the chunked gated delta rule (`chunk_gated_delta_rule[_flashinfer]`)
  over `batch_size` sequences of `seq_len` new tokens, no initial state. Decode (`phase`
  generation): the one-token conv update (`causal_conv1d_update`) and the recurrent step
  (`fused_recurrent_gated_delta_rule[_packed_decode]`). The in_proj / out_proj GEMMs are NOT
  included (the GEMM tables cover them). Engine differences that matter:
  * vLLM 0.24 and SGLang 0.5.14 convolve the packed q|k|v channels (2 nk dk + nv dv); TensorRT-LLM
    1.3.0rc20's collector convolves the key channels only (nk dk), not what its engine runs.
  * vLLM's prefill conv ran eagerly (no CUDA graph: a metadata copy breaks capture), every other
    kernel in a CUDA graph; SGLang's prefill kernels replay 10 calls per graph (repeat_n 10,
    divided out), the others 1.
  * State dtype: vLLM bf16, SGLang fp32 (its serving default), TensorRT-LLM none in prefill.
- Mamba-2 (Nemotron-H and generic shapes), `layer` mamba2, TensorRT-LLM only: the share holds
  the conv kernels alone (`causal_conv1d_fn`, `causal_conv1d_update`, over nheads head_dim +
  2 n_groups d_state channels); the scan rows (`mamba_chunk_scan_combined`,
  `selective_state_update`) are not in it.

Columns are named after the architecture fields (`dse.spec.fields`: linear_n_heads ...):
`n_heads` value heads (GDN num_v_heads, Mamba-2 nheads), `head_dim` (head_v_dim / head_dim),
`n_groups` (GDN num_k_heads, Mamba-2 n_groups), `state_dim` (head_k_dim / d_state),
`conv_width` (d_conv), `conv_channels` (the channels the conv kernel ran on), `chunk_size`
(Mamba-2's; GDN's chunk is 64), `kernel` conv | scan, and `kernel_source` as written.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from dse.data import _common as c
from dse.errors import DataError
from dse.models.linear_layers import conv_channels
from dse.spec.hardware import shipped_gpu

KIND = "linear_layer"
# table file stem -> layer
TABLES: dict[str, str] = {"gdn_perf": "gdn", "mamba2_perf": "mamba2"}
# Any single kernel call: 100 ns .. 100 s.
_LATENCY_RANGE_S = (1e-7, 100.0)
# Gated DeltaNet's chunk (FLA's chunk_gated_delta_rule, BT = 64 tokens).
GDN_CHUNK = 64
ACT_BYTES = 2.0  # every table runs bf16 activations

# source column -> our column, per layer
_SHAPES: dict[str, dict[str, str]] = {
    "gdn": {
        "batch_size": "batch_size",
        "seq_len": "seq_len",
        "num_tokens": "num_tokens",
        "d_model": "d_model",
        "d_conv": "conv_width",
        "num_v_heads": "n_heads",
        "head_v_dim": "head_dim",
        "num_k_heads": "n_groups",
        "head_k_dim": "state_dim",
    },
    "mamba2": {
        "batch_size": "batch_size",
        "seq_len": "seq_len",
        "num_tokens": "num_tokens",
        "d_model": "d_model",
        "d_conv": "conv_width",
        "nheads": "n_heads",
        "head_dim": "head_dim",
        "n_groups": "n_groups",
        "d_state": "state_dim",
        "chunk_size": "chunk_size",
    },
}
PHASES = ("context", "generation")


def _hbm_bw(gpu: str) -> float:
    spec = shipped_gpu(gpu)
    return 16e12 if spec is None else spec.hbm_bw_bytes_per_s  # outside: twice B200's 8 TB/s


def least_bytes(rows: pd.DataFrame) -> np.ndarray:
    """The fewest HBM bytes each row's kernel must move (bf16, every operand once): the conv
    reads its input and writes its output (decode: reads its state of width - 1 tokens too);
    the chunked scan reads q, k, v and writes o; the recurrent step reads its state (bf16)."""
    g = {k: rows[k].to_numpy(float) for k in ("n_heads", "head_dim", "n_groups", "state_dim")}
    tokens = rows["num_tokens"].to_numpy(float)
    b = rows["batch_size"].to_numpy(float)
    ch = rows["conv_channels"].to_numpy(float)
    w = rows["conv_width"].to_numpy(float)
    conv = rows["kernel"].to_numpy() == "conv"
    gen = rows["phase"].to_numpy() == "generation"
    qkvo = tokens * (2.0 * g["n_groups"] * g["state_dim"] + 2.0 * g["n_heads"] * g["head_dim"])
    state = b * g["n_heads"] * g["state_dim"] * g["head_dim"]
    conv_b = tokens * ch * 2.0 + np.where(gen, b * ch * (w - 1.0), 0.0)
    scan_b = np.where(gen, state, qkvo)
    return np.where(conv, conv_b, scan_b) * ACT_BYTES


def floor_s(rows: pd.DataFrame, hbm_bw_bytes_per_s: np.ndarray | float) -> np.ndarray:
    """The physical floor of each row: `least_bytes` at the HBM bandwidth (the FLOPs of these
    kernels are far under the tensor-core peak, so bytes bound them)."""
    return least_bytes(rows) / np.asarray(hbm_bw_bytes_per_s, dtype=float)


def read_linear_table(
    path: Path, root: Path, gpu_dir: str, engine: str, version: str
) -> pd.DataFrame | None:
    """One gdn_perf / mamba2_perf parquet -> linear_layer rows (None: no rows)."""
    layer = TABLES[path.stem]
    file = c.rel(path, root)
    try:
        raw = pd.read_parquet(path).reset_index(drop=True)
    except Exception as exc:  # pyarrow raises several types for a corrupt file
        raise DataError(f"{file}: cannot read parquet ({exc})") from exc
    if raw.empty:
        return None
    c.require_columns(raw, ["latency", "phase", "kernel_source", *_SHAPES[layer]], file)
    latency_s = c.numeric(raw, "latency", file) / 1000.0  # ms per call -> s
    c.check_positive(latency_s, "latency", file)
    c.check_range(latency_s, *_LATENCY_RANGE_S, "latency (s, after ms -> s)", file)
    phase = raw["phase"].astype(str).str.strip().str.lower()
    bad = ~phase.isin(PHASES)
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise DataError(
            f"{file}: column 'phase' row {i}: must be one of {', '.join(PHASES)}, "
            f"got {raw['phase'].iloc[i]!r}"
        )
    gpu = c.normalise_gpu(gpu_dir)
    df = pd.DataFrame(
        {
            "source": "aiconfigurator",
            "gpu": gpu,
            "engine": engine.strip().lower(),
            "engine_version": version,
            "kind": KIND,
            "dtype": "bfloat16",
            "file": file,
            "latency_s": latency_s,
            "layer": layer,
            "phase": phase.to_numpy(),
            "kernel_source": raw["kernel_source"].astype(str).to_numpy(),
        }
    )
    src = df["kernel_source"].str.lower()
    df["kernel"] = np.where(src.str.contains("conv1d"), "conv", "scan")
    for s, d in _SHAPES[layer].items():
        v = c.numeric(raw, s, file)
        if (~np.isfinite(v) | (v < 1)).any():
            i = int(np.flatnonzero(~np.isfinite(v) | (v < 1))[0])
            raise DataError(f"{file}: column {s!r} row {i}: must be an integer >= 1, got {v[i]!r}")
        df[d] = v.astype(np.int64)
    if "chunk_size" not in df:
        df["chunk_size"] = np.int64(GDN_CHUNK)
    # context rows: num_tokens = batch x seq_len; decode rows: one token per sequence
    expect = np.where(df["phase"] == "context", df["batch_size"] * df["seq_len"], df["batch_size"])
    off = df["num_tokens"].to_numpy() != expect
    if off.any():
        i = int(np.flatnonzero(off)[0])
        raise DataError(
            f"{file}: row {i}: num_tokens must be batch_size x seq_len (context) or batch_size "
            f"(generation), got {df['num_tokens'].iloc[i]} for batch_size "
            f"{df['batch_size'].iloc[i]}, seq_len {df['seq_len'].iloc[i]}"
        )
    shapes = {k: df[k].to_numpy(float) for k in ("n_groups", "state_dim", "n_heads", "head_dim")}
    df["conv_channels"] = conv_channels(layer, df["engine"].iloc[0], shapes).astype(np.int64)
    # bytes moved over time: the best row reaches 10 GB/s (a seconds-for-ms slip would not),
    # the median stays under 1.5x the HBM bandwidth (a microseconds-for-ms slip would not)
    c.check_peak_rate(
        least_bytes(df), latency_s, c.rate_floor(gpu, 1e10), 1.5 * _hbm_bw(gpu), "bytes/s", file
    )
    return c.finish(df)
