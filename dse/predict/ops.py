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


@dataclass(frozen=True)
class LayerShapes:
    """The sizes one forward pass is built from, per configuration, read from the columns once.

    Counts and widths are floats (they enter FLOP and byte products); `h_tp` and `kv_tp` are the
    heads each GPU holds. `s` is the sequence length attention sees: the prompt in prefill, the
    cached KV length in decode; `tokens` the new tokens of the forward pass.
    """

    phase: str
    b: np.ndarray
    tp: np.ndarray
    d: np.ndarray
    L: np.ndarray
    h: np.ndarray
    kv: np.ndarray
    hd: np.ndarray
    V: np.ndarray
    e: np.ndarray
    topk: np.ndarray
    wb: np.ndarray
    kvb: np.ndarray
    gemm_dtype: np.ndarray
    gated: np.ndarray
    moe: np.ndarray
    s: np.ndarray
    tokens: np.ndarray
    h_tp: np.ndarray
    kv_tp: np.ndarray

    @classmethod
    def of(cls, cols: Mapping[str, np.ndarray], phase: str, kv_len: Any = None) -> LayerShapes:
        """The shapes of `phase` ("prefill" or "decode"; decode attends to `kv_len` tokens)."""
        b = cols["batch_size"].astype(float)
        tp = cols["tensor_parallel"].astype(float)
        h = cols["n_heads"].astype(float)
        kv = cols["n_kv_heads"].astype(float)
        e = cols["n_experts"].astype(float)
        wb = dtype_bytes(cols["weight_dtype"])
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
        return cls(
            phase=phase,
            b=b,
            tp=tp,
            d=cols["d_model"].astype(float),
            L=cols["n_layers"].astype(float),
            h=h,
            kv=kv,
            hd=cols["head_dim"].astype(float),
            V=cols["vocab_size"].astype(float),
            e=e,
            topk=cols["top_k"].astype(float),
            wb=wb,
            kvb=dtype_bytes(cols["kv_dtype"]),
            gemm_dtype=np.where(wb < 2, "fp8", "bfloat16"),
            gated=cols["gated_mlp"].astype(bool),
            moe=e > 1,
            s=s,
            tokens=tokens,
            h_tp=h / tp,
            kv_tp=np.maximum(kv / tp, 1.0),  # fewer KV heads than GPUs: each GPU holds a replica
        )


def forward_ops(
    cols: Mapping[str, np.ndarray], phase: str, kv_len: Any = None, stratum: Any = None
) -> list[Op]:
    """Operators of one forward pass for complete configuration columns (see dse.spec.columns).

    prefill: batch_size sequences of prompt_tokens new tokens (causal attention).
    decode: one new token per sequence attending to `kv_len` cached tokens (default prompt_tokens).
    `stratum`: the decode quadrature's stratum of each KV length (broadcast like kv_len;
    `dse.predict.request.node_strata`), passed to the decode-attention model with its shape.
    The order is part of the result: the pricer sums the operators in this order.
    """
    sh = LayerShapes.of(cols, phase, kv_len)
    return [
        *_embedding_ops(sh),
        *_attention_ops(sh, cols, stratum),
        *_dense_ffn_ops(sh, cols),
        *_moe_ops(sh, cols),
        _elementwise("residual/ffn", "norm", sh.L, sh.tokens * sh.d, 2, 1, 1),
        *_allreduce_ops(sh),
        *_head_ops(sh),
    ]


def _embedding_ops(sh: LayerShapes) -> list[Op]:
    """The token-embedding lookup: reads one weight row and writes one activation per token."""
    d, tokens = sh.d, sh.tokens
    return [
        Op(
            "embedding",
            "embedding",
            "embedding",
            np.ones_like(d),
            np.zeros_like(d),
            tokens * d * (sh.wb + ACT_BYTES),
            {"tokens": tokens, "d_model": d},
        )
    ]


def _attention_ops(sh: LayerShapes, cols: Mapping[str, np.ndarray], stratum: Any) -> list[Op]:
    """The attention block with the norms around it: input norm to post-attention norm."""
    L, tokens, d, hd = sh.L, sh.tokens, sh.d, sh.hd
    h_tp, kv_tp, wb, gemm_dtype = sh.h_tp, sh.kv_tp, sh.wb, sh.gemm_dtype
    # Most models have 2 norms per layer (input, post-attention); Gemma-2 has 4, Falcon-7B 1.
    half_norms = L * cols["norms_per_layer"].astype(float) / 2
    # Qwen3's RMSNorm over each query and key head before RoPE.
    qk_count = L * cols["qk_norm"].astype(float)
    return [
        _elementwise("norm/input", "norm", half_norms, tokens * d, 1, 1, 4),
        _gemm("attention/qkv", "attention", L, tokens, (h_tp + 2 * kv_tp) * hd, d, wb, gemm_dtype),
        _elementwise(
            "attention/qk_norm", "attention", qk_count, tokens * (h_tp + kv_tp) * hd, 1, 1, 4
        ),
        _elementwise("attention/rope", "attention", L, tokens * (h_tp + kv_tp) * hd, 1, 1, 6),
        _attention_core(sh, cols, stratum),
        _gemm("attention/out", "attention", L, tokens, d, h_tp * hd, wb, gemm_dtype),
        _elementwise("residual/attention", "norm", L, tokens * d, 2, 1, 1),
        _elementwise("norm/post_attention", "norm", half_norms, tokens * d, 1, 1, 4),
    ]


def _attention_core(sh: LayerShapes, cols: Mapping[str, np.ndarray], stratum: Any) -> Op:
    """softmax(QK^T)V of one layer: causal over the prompt in prefill, one query row in decode."""
    b, s, hd, h_tp, kv_tp, kvb = sh.b, sh.s, sh.hd, sh.h_tp, sh.kv_tp, sh.kvb
    if sh.phase == "prefill":
        # Causal FlashAttention: QK^T and PV over the lower triangle, 2 * s^2 * hd FLOPs per head.
        flops = b * h_tp * 2 * s * s * hd
        traffic = b * s * hd * ((2 * h_tp) * ACT_BYTES + 2 * kv_tp * kvb)  # read q, k, v; write o
        traffic = (
            traffic + b * s * 2 * kv_tp * hd * kvb
        )  # write the new tokens' K and V to the cache
        return Op(
            "attention/core",
            "attention_prefill",
            "attention",
            sh.L,
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
    flops = b * h_tp * 4 * s * hd
    traffic = (
        b * s * 2 * kv_tp * hd * kvb + b * 2 * h_tp * hd * ACT_BYTES + b * 2 * kv_tp * hd * kvb
    )
    return Op(
        "attention/core",
        "attention_decode",
        "attention",
        sh.L,
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


def _dense_ffn_ops(sh: LayerShapes, cols: Mapping[str, np.ndarray]) -> list[Op]:
    """The dense FFN (gate+up fused, activation, down); its count is 0 in MoE layers."""
    tokens, d, wb, gemm_dtype = sh.tokens, sh.d, sh.wb, sh.gemm_dtype
    dff = cols["d_ff"].astype(float) / sh.tp
    n_up = np.where(sh.gated, 2.0, 1.0)
    dense_count = np.where(sh.moe, 0.0, sh.L)
    act = _elementwise("ffn/act", "ffn", dense_count, tokens * dff, np.nan, 1, 4)
    act.bytes = tokens * dff * (n_up + 1) * ACT_BYTES  # reads gate and up (gated) or up alone
    return [
        _gemm("ffn/gate_up", "ffn", dense_count, tokens, n_up * dff, d, wb, gemm_dtype),
        act,
        _gemm("ffn/down", "ffn", dense_count, tokens, d, dff, wb, gemm_dtype),
    ]


def _moe_ops(sh: LayerShapes, cols: Mapping[str, np.ndarray]) -> list[Op]:
    """The MoE FFN (router + grouped experts) and its shared expert; counts are 0 in dense layers."""
    tokens, d, e, topk, tp = sh.tokens, sh.d, sh.e, sh.topk, sh.tp
    wb, gemm_dtype, L = sh.wb, sh.gemm_dtype, sh.L
    moe_count = np.where(sh.moe, L, 0.0)
    dffe = cols["d_ff_expert"].astype(float) / tp
    n_mats = np.where(sh.gated, 3.0, 2.0)
    routed = tokens * topk
    # Expected experts touched when `routed` token slots land uniformly on e experts.
    touched = e * (1.0 - np.power(1.0 - np.minimum(topk / np.maximum(e, 1), 1.0), tokens))
    moe_flops = 2 * routed * n_mats * d * dffe + 2 * tokens * d * e
    moe_bytes = (
        touched * n_mats * d * dffe * wb
        + routed * (2 * d + (n_mats - 1) * dffe) * ACT_BYTES
        + tokens * d * e * wb
    )
    n_up = np.where(sh.gated, 2.0, 1.0)
    sff = cols["shared_expert_d_ff"].astype(float) / tp
    shared_count = np.where(sh.moe & (sff > 0), L, 0.0)
    return [
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
        ),
        _gemm("ffn/shared_gate_up", "ffn", shared_count, tokens, n_up * sff, d, wb, gemm_dtype),
        _gemm(
            "ffn/shared_down", "ffn", shared_count, tokens, d, np.maximum(sff, 1), wb, gemm_dtype
        ),
    ]


def _allreduce_ops(sh: LayerShapes) -> list[Op]:
    """Tensor parallelism: one all-reduce of the residual stream after attention and after the FFN."""
    ar_count = np.where(sh.tp > 1, 2 * sh.L, 0.0)
    msg = sh.tokens * sh.d * ACT_BYTES
    return [
        Op(
            "allreduce",
            "allreduce",
            "allreduce",
            ar_count,
            np.zeros_like(sh.d),
            msg,
            {"message_bytes": msg, "n_gpus": sh.tp},
        )
    ]


def _head_ops(sh: LayerShapes) -> list[Op]:
    """Final norm and LM head: serving engines compute logits only for each sequence's last token."""
    d = sh.d
    return [
        _elementwise("norm/final", "norm", np.ones_like(d), sh.tokens * d, 1, 1, 4),
        _gemm("lm_head", "lm_head", np.ones_like(d), sh.b, sh.V / sh.tp, d, sh.wb, sh.gemm_dtype),
    ]
