"""The operator list of one forward pass, per GPU (tensor-parallel shards), for prefill or decode.

Each operator carries its shape as arrays (one entry per configuration), its FLOPs and the bytes
it moves, and `count`: how many times it runs per forward pass (n_layers for layer operators).
The predictor's levels price these operators; the totals are sums of the items.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dse.spec.arch import dtype_bytes

ACT_BYTES = 2.0  # activations are bf16/fp16 in every engine we model


@dataclass
class Op:
    """One operator of a forward pass, vectorised over configurations."""

    name: str  # e.g. "attention/qkv"
    kind: str  # gemm | attention_prefill | attention_decode | elementwise | moe | allreduce | embedding
    block: str  # attention | ffn | allreduce | embedding | lm_head | norm
    count: np.ndarray  # times per forward pass (n_layers for layer ops)
    flops: np.ndarray  # per call, per GPU
    bytes: np.ndarray  # per call, per GPU (HBM traffic)
    dims: dict[str, Any] = field(default_factory=dict)


def _gemm(
    name: str, block: str, count: Any, m: Any, n: Any, k: Any, w_bytes: Any, dtype: Any
) -> Op:
    """y[m, n] = x[m, k] @ W[n, k]^T: 2mnk FLOPs; reads x and W, writes y."""
    m, n, k = (np.asarray(x, dtype=float) for x in (m, n, k))
    in_bytes = np.where(
        np.asarray(w_bytes) < 2, np.asarray(w_bytes), ACT_BYTES
    )  # fp8 GEMMs quantise x
    traffic = m * k * in_bytes + n * k * np.asarray(w_bytes) + m * n * ACT_BYTES
    return Op(
        name,
        "gemm",
        block,
        np.asarray(count),
        2 * m * n * k,
        traffic,
        {"m": m, "n": n, "k": k, "dtype": dtype},
    )


def _elementwise(
    name: str, block: str, count: Any, elements: Any, reads: float, writes: float, flops_per: float
) -> Op:
    e = np.asarray(elements, dtype=float)
    return Op(
        name,
        "elementwise",
        block,
        np.asarray(count),
        flops_per * e,
        (reads + writes) * e * ACT_BYTES,
        {"elements": e, "op": name},
    )


def forward_ops(
    cols: Mapping[str, np.ndarray], phase: str, kv_len: Any = None, stratum: Any = None
) -> list[Op]:
    """Operators of one forward pass for complete configuration columns (see dse.spec.columns).

    prefill: batch_size sequences of prompt_tokens new tokens (causal attention).
    decode: one new token per sequence attending to `kv_len` cached tokens (default prompt_tokens).
    `stratum`: the decode quadrature's stratum of each KV length (broadcast like kv_len;
    `dse.predict.request.node_strata`), passed to the decode-attention model with its shape.
    """
    b = cols["batch_size"].astype(float)
    tp = cols["tensor_parallel"].astype(float)
    d = cols["d_model"].astype(float)
    L = cols["n_layers"].astype(float)
    h = cols["n_heads"].astype(float)
    kv = cols["n_kv_heads"].astype(float)
    hd = cols["head_dim"].astype(float)
    V = cols["vocab_size"].astype(float)
    e = cols["n_experts"].astype(float)
    topk = cols["top_k"].astype(float)
    wb = dtype_bytes(cols["weight_dtype"])
    kvb = dtype_bytes(cols["kv_dtype"])
    gemm_dtype = np.where(wb < 2, "fp8", "bfloat16")
    gated = cols["gated_mlp"].astype(bool)
    moe = e > 1

    if phase == "prefill":
        s = cols["prompt_tokens"].astype(float)
        tokens = b * s
    elif phase == "decode":
        s = (
            cols["prompt_tokens"].astype(float)
            if kv_len is None
            else np.asarray(kv_len, dtype=float)
        )
        tokens = b
    else:
        raise ValueError(f"phase must be 'prefill' or 'decode', got {phase!r}")

    h_tp = h / tp
    kv_tp = np.maximum(kv / tp, 1.0)  # fewer KV heads than GPUs: each GPU holds a replica
    ops: list[Op] = []
    ops.append(
        Op(
            "embedding",
            "embedding",
            "embedding",
            np.ones_like(d),
            np.zeros_like(d),
            tokens * d * (wb + ACT_BYTES),
            {"tokens": tokens, "d_model": d},
        )
    )
    # Most models have 2 norms per layer (input, post-attention); Gemma-2 has 4, Falcon-7B 1.
    half_norms = L * cols["norms_per_layer"].astype(float) / 2
    ops.append(_elementwise("norm/input", "norm", half_norms, tokens * d, 1, 1, 4))
    ops.append(
        _gemm("attention/qkv", "attention", L, tokens, (h_tp + 2 * kv_tp) * hd, d, wb, gemm_dtype)
    )
    # Qwen3's RMSNorm over each query and key head before RoPE.
    qk_count = L * cols["qk_norm"].astype(float)
    ops.append(
        _elementwise(
            "attention/qk_norm", "attention", qk_count, tokens * (h_tp + kv_tp) * hd, 1, 1, 4
        )
    )
    ops.append(
        _elementwise("attention/rope", "attention", L, tokens * (h_tp + kv_tp) * hd, 1, 1, 6)
    )
    if phase == "prefill":
        # Causal FlashAttention: QK^T and PV over the lower triangle, 2 * s^2 * hd FLOPs per head.
        flops = b * h_tp * 2 * s * s * hd
        traffic = b * s * hd * ((2 * h_tp) * ACT_BYTES + 2 * kv_tp * kvb)  # read q, k, v; write o
        traffic = (
            traffic + b * s * 2 * kv_tp * hd * kvb
        )  # write the new tokens' K and V to the cache
        ops.append(
            Op(
                "attention/core",
                "attention_prefill",
                "attention",
                L,
                flops,
                traffic,
                {
                    "batch_size": b,
                    "isl": s,
                    "num_heads": h_tp,
                    "num_kv_heads": kv_tp,
                    "head_dim": hd,
                    "kv_dtype": cols["kv_dtype"],
                },
            )
        )
    else:
        flops = b * h_tp * 4 * s * hd
        traffic = (
            b * s * 2 * kv_tp * hd * kvb + b * 2 * h_tp * hd * ACT_BYTES + b * 2 * kv_tp * hd * kvb
        )
        ops.append(
            Op(
                "attention/core",
                "attention_decode",
                "attention",
                L,
                flops,
                traffic,
                {
                    "batch_size": b,
                    "kv_len": s,
                    "num_heads": h_tp,
                    "num_kv_heads": kv_tp,
                    "head_dim": hd,
                    "kv_dtype": cols["kv_dtype"],
                    **({} if stratum is None else {"stratum": np.asarray(stratum)}),
                },
            )
        )
    ops.append(_gemm("attention/out", "attention", L, tokens, d, h_tp * hd, wb, gemm_dtype))
    ops.append(_elementwise("residual/attention", "norm", L, tokens * d, 2, 1, 1))
    ops.append(_elementwise("norm/post_attention", "norm", half_norms, tokens * d, 1, 1, 4))

    # FFN: dense (gate+up fused, activation, down) or MoE (router + grouped experts).
    dff = cols["d_ff"].astype(float) / tp
    n_up = np.where(gated, 2.0, 1.0)
    dense_count = np.where(moe, 0.0, L)
    ops.append(_gemm("ffn/gate_up", "ffn", dense_count, tokens, n_up * dff, d, wb, gemm_dtype))
    ops.append(_elementwise("ffn/act", "ffn", dense_count, tokens * dff, np.nan, 1, 4))
    ops[-1].bytes = tokens * dff * (n_up + 1) * ACT_BYTES
    ops.append(_gemm("ffn/down", "ffn", dense_count, tokens, d, dff, wb, gemm_dtype))

    moe_count = np.where(moe, L, 0.0)
    dffe = cols["d_ff_expert"].astype(float) / tp
    n_mats = np.where(gated, 3.0, 2.0)
    routed = tokens * topk
    # Expected experts touched when `routed` token slots land uniformly on e experts.
    touched = e * (1.0 - np.power(1.0 - np.minimum(topk / np.maximum(e, 1), 1.0), tokens))
    moe_flops = 2 * routed * n_mats * d * dffe + 2 * tokens * d * e
    moe_bytes = (
        touched * n_mats * d * dffe * wb
        + routed * (2 * d + (n_mats - 1) * dffe) * ACT_BYTES
        + tokens * d * e * wb
    )
    ops.append(
        Op(
            "ffn/moe",
            "moe",
            "ffn",
            moe_count,
            moe_flops,
            moe_bytes,
            {
                "num_tokens": tokens,
                "hidden_size": d,
                "inter_size": dffe * tp,
                "topk": topk,
                "num_experts": e,
                "moe_tp_size": tp,
                "dtype": gemm_dtype,
            },
        )
    )
    sff = cols["shared_expert_d_ff"].astype(float) / tp
    shared_count = np.where(moe & (sff > 0), L, 0.0)
    ops.append(
        _gemm("ffn/shared_gate_up", "ffn", shared_count, tokens, n_up * sff, d, wb, gemm_dtype)
    )
    ops.append(
        _gemm("ffn/shared_down", "ffn", shared_count, tokens, d, np.maximum(sff, 1), wb, gemm_dtype)
    )
    ops.append(_elementwise("residual/ffn", "norm", L, tokens * d, 2, 1, 1))

    # Tensor parallelism: one all-reduce of the residual stream after attention and after the FFN.
    ar_count = np.where(tp > 1, 2 * L, 0.0)
    msg = tokens * d * ACT_BYTES
    ops.append(
        Op(
            "allreduce",
            "allreduce",
            "allreduce",
            ar_count,
            np.zeros_like(d),
            msg,
            {"message_bytes": msg, "n_gpus": tp},
        )
    )

    # Final norm and LM head: serving engines compute logits only for each sequence's last token.
    ops.append(_elementwise("norm/final", "norm", np.ones_like(d), tokens * d, 1, 1, 4))
    ops.append(_gemm("lm_head", "lm_head", np.ones_like(d), b, V / tp, d, wb, gemm_dtype))
    return ops
