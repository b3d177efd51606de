"""The operator list of one forward pass, per GPU (tensor-parallel shards), for prefill or decode.

Each operator carries its shape as arrays (one entry per configuration), its FLOPs and the bytes
it moves, and `count`: how many times it runs per forward pass (n_layers for layer operators).
The predictor's levels price these operators; the totals are sums of the items.

One file (~670 lines) on purpose: every operator family of a forward pass (dense, MoE, MLA,
linear layers, communication) is built from one `LayerShapes`, so their FLOP and byte counts can
be compared side by side.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dse._same import where
from dse.models.base import any_true, filled
from dse.spec.arch import (
    LINEAR_CHUNK_TOKENS,
    LINEAR_STATE_FLOPS,
    MAMBA1_DT_RANK_DIVISOR,
    dtype_bytes,
    fp4_weights,
)
from dse.spec.pattern import ffn_counts, mixer_counts

ACT_BYTES = 2.0  # activations are bf16/fp16 in every engine we model
_ONE = (1,)  # the shape of a one-configuration column


def gemm_dtype(weight_dtype: Any, wb: np.ndarray) -> np.ndarray:
    """The GEMM table dtype of each configuration's weights (`wb` their bytes per element):
    nvfp4 runs Blackwell's block-scaled FP4 GEMMs (the "nvfp4" tables, x quantised to nvfp4
    too); any other weights narrower than 2 bytes (fp8, int8, int4) the fp8 tables; the rest
    bf16's. MoE layers pass it on but are priced with the bf16 MoE table, 4-bit weights with the
    artifact's 4-bit weight-only MoE table where it has one, an SGLang configuration's 8-bit
    weights with SGLang's fp8_block table (`dse.predict.adapters.price_moe`)."""
    out = where(wb < 2, "fp8", "bfloat16")
    fp4 = fp4_weights(weight_dtype)
    return np.where(np.broadcast_to(fp4, out.shape), "nvfp4", out) if any_true(fp4) else out


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
    m, n, k = np.asarray(m, dtype=float), np.asarray(n, dtype=float), np.asarray(k, dtype=float)
    if m.shape == n.shape == k.shape == _ONE and np.shape(w_bytes) == _ONE:
        # one configuration: the same products in Python floats (IEEE doubles, as numpy's),
        # two arrays made instead of ~12 numpy calls on one-element arrays
        mf, nf, kf, wf = float(m[0]), float(n[0]), float(k[0]), float(w_bytes[0])
        traffic1 = mf * kf * min(wf, ACT_BYTES) + nf * kf * wf + mf * nf * ACT_BYTES
        return Op(
            name,
            "gemm",
            block,
            np.asarray(count),
            np.array([2 * mf * nf * kf]),
            np.array([traffic1]),
            {"m": m, "n": n, "k": k, "dtype": dtype},
        )
    # fp8 GEMMs quantise x (weights of 1 byte: x in 1 byte too, else the activations' 2):
    # np.where(w_bytes < 2, w_bytes, ACT_BYTES) as one ufunc
    in_bytes = np.minimum(w_bytes, ACT_BYTES)
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
    if e.shape == _ONE:  # one configuration: Python floats (see `_gemm`)
        ef = float(e[0])
        return Op(
            name,
            "elementwise",
            block,
            np.asarray(count),
            np.array([flops_per * ef]),
            np.array([(reads + writes) * ef * ACT_BYTES]),
            {"elements": e, "op": name},
        )
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
    def of(
        cls,
        cols: Mapping[str, np.ndarray],
        phase: str,
        kv_len: Any = None,
        like: LayerShapes | None = None,
    ) -> LayerShapes:
        """The shapes of `phase` ("prefill" or "decode"; decode attends to `kv_len` tokens).
        `like`: the shapes of another phase of the same columns, whose sizes this one shares
        (all but the phase, `s` and `tokens`)."""
        if like is not None and like.phase == phase and kv_len is None:
            return like
        b = cols["batch_size"].astype(float) if like is None else like.b
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
        if like is not None:  # dataclasses.replace without its per-field __init__
            out = object.__new__(LayerShapes)
            out.__dict__.update(like.__dict__, phase=phase, s=s, tokens=tokens)
            return out
        tp = cols["tensor_parallel"].astype(float)
        h = cols["n_heads"].astype(float)
        kv = cols["n_kv_heads"].astype(float)
        e = cols["n_experts"].astype(float)
        wb = dtype_bytes(cols["weight_dtype"])
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
            gemm_dtype=gemm_dtype(cols["weight_dtype"], wb),
            gated=cols["gated_mlp"].astype(bool),
            moe=e > 1,
            s=s,
            tokens=tokens,
            h_tp=h / tp,
            kv_tp=np.maximum(kv / tp, 1.0),  # fewer KV heads than GPUs: each GPU holds a replica
        )


def forward_ops(
    cols: Mapping[str, np.ndarray],
    phase: str,
    kv_len: Any = None,
    stratum: Any = None,
    like: LayerShapes | None = None,
    counts: OpCounts | None = None,
) -> list[Op]:
    """Operators of one forward pass for complete configuration columns (see dse.spec.columns).

    prefill: batch_size sequences of prompt_tokens new tokens (causal attention).
    decode: one new token per sequence attending to `kv_len` cached tokens (default prompt_tokens).
    `stratum`: the decode quadrature's stratum of each KV length (broadcast like kv_len;
    `dse.predict.request.node_strata`), passed to the decode-attention model with its shape.
    `like`: `LayerShapes` of the same columns in another phase, shared (`LayerShapes.of`).
    `counts`: the operators' counts taken from other rows (`op_counts`): the sizes are those
    of `cols`' rows, each `count` that of the counts' rows (a grouped batch's operators built
    on one row per shape group, `dse.predict.request.base_costs`); which operators the list
    holds is decided by the counts' rows. None: the counts of `cols` itself.
    The order is part of the result: the pricer sums the operators in this order.
    """
    sh = LayerShapes.of(cols, phase, kv_len, like)
    fam = _Families.shared(cols, sh)
    c = OpCounts(cols, sh.L, sh.tp, sh.moe, fam) if counts is None else counts
    return [
        *_embedding_ops(sh, c),
        *_attention_ops(sh, cols, stratum, fam, c),
        *_family_ops(sh, cols, c),
        *_dense_ffn_ops(sh, cols, c),
        *_moe_ops(sh, cols, c),
        _elementwise("residual/ffn", "norm", c.fam.dense + c.fam.moe, sh.tokens * sh.d, 2, 1, 1),
        *_allreduce_ops(sh, c),
        *_head_ops(sh, c),
    ]


@dataclass(frozen=True)
class OpCounts:
    """What the operators' counts (how many times each runs per forward pass) are read from,
    per configuration: the columns, the depth `L` (n_layers as floats), `tp`, `moe` (more than
    one expert) and the layer families. Counts depend on these alone, never on the phase or
    a size, so an operator list built on one row per shape group takes every row's counts
    from here (`forward_ops(counts=...)`)."""

    cols: Mapping[str, np.ndarray]
    L: np.ndarray
    tp: np.ndarray
    moe: np.ndarray
    fam: _Families

    @property
    def shape(self) -> tuple[int, ...]:
        return self.L.shape


def op_counts(cols: Mapping[str, np.ndarray]) -> OpCounts:
    """`OpCounts` of complete configuration columns: the arrays `LayerShapes.of` and
    `_Families.of` make of them (the same values), without the sizes."""
    moe = cols["n_experts"].astype(float) > 1
    fam = _Families.of(cols, _MoeRows(moe))
    return OpCounts(
        cols, cols["n_layers"].astype(float), cols["tensor_parallel"].astype(float), moe, fam
    )


@dataclass(frozen=True)
class _MoeRows:
    """The one field of `LayerShapes` that `_Families.of` reads."""

    moe: np.ndarray


def _embedding_ops(sh: LayerShapes, c: OpCounts) -> list[Op]:
    """The token-embedding lookup: reads one weight row and writes one activation per token."""
    d, tokens = sh.d, sh.tokens
    return [
        Op(
            "embedding",
            "embedding",
            "embedding",
            filled(c.shape, 1.0),  # (np.ones_like / zeros_like: Python wrappers, ~1 us each)
            np.zeros(d.shape),
            tokens * d * (sh.wb + ACT_BYTES),
            {"tokens": tokens, "d_model": d},
        )
    ]


@dataclass(frozen=True)
class _Families:
    """How many layers of each attention family each configuration has (issue 21), as floats:
    `gqa` the full + sliding layers priced by the GQA operators, `core` the full ones, `sliding`
    the sliding ones (with their `window`, tokens: every sliding layer, its window shorter
    than the phase's context or not, runs the windowed kernel, whose power and SGLang backend
    the attention models read from the window, issue 33), `mla` the attention layers of MLA
    models, `linear` the linear-attention layers, `mixers` the layers with a mixer (a parallel
    attention + linear layer is one), `dense` and `moe` the layers with a dense or an MoE FFN.
    For a model of full GQA layers only, gqa = core = mixers = n_layers, dense or moe =
    n_layers (less the dense first layers) and the others 0."""

    gqa: np.ndarray
    core: np.ndarray
    sliding: np.ndarray
    window: np.ndarray
    mla: np.ndarray
    linear: np.ndarray
    mixers: np.ndarray
    dense: np.ndarray
    moe: np.ndarray

    @classmethod
    def shared(cls, cols: Mapping[str, np.ndarray], sh: LayerShapes) -> _Families:
        """`of`, made once for the phases of one call: kept on `sh` with the columns it was
        made from (the phases' `LayerShapes` share their `like`'s dict, and the families read
        no phase-dependent size), reused only for the same columns object (a grouped batch
        notes each phase's reads on a mapping of its own: made afresh there)."""
        hit = sh.__dict__.get("_families")
        if hit is not None and hit[0] is cols:
            return hit[1]
        fam = cls.of(cols, sh)
        sh.__dict__["_families"] = (cols, fam)  # a frozen dataclass: written as LayerShapes.of does
        return fam

    @classmethod
    def of(cls, cols: Mapping[str, np.ndarray], sh: LayerShapes | _MoeRows) -> _Families:
        full, sliding, linear, mixers = (
            np.asarray(x, dtype=float)
            for x in mixer_counts(cols["attention_pattern"], cols["n_layers"])
        )
        # FFNs (`dse.spec.arch.ffn_layers`): the pattern's `ffn` layers are the model's FFN
        # (MoE but for the dense first ones), its `dense` layers dense.
        # (over the integer column, as mixer_counts: the same whole numbers as over sh.L's
        # floats, whose floor division is ~30x slower, ~2 ms of a sweep chunk's 94,000 rows)
        own, dense = (
            np.asarray(x, dtype=float) for x in ffn_counts(cols["ffn_pattern"], cols["n_layers"])
        )
        # `where`: a batch without MoE or MLA rows (a dense sweep's) copies, not selects
        nd = np.minimum(where(sh.moe, cols["n_dense_layers"].astype(float), 0.0), own)
        is_mla = cols["kv_lora_rank"] > 0
        attn = full + sliding
        return cls(
            gqa=where(is_mla, 0.0, attn),
            core=where(is_mla, 0.0, full),
            sliding=where(is_mla, 0.0, sliding),
            window=cols["sliding_window"].astype(float),
            mla=where(is_mla, attn, 0.0),
            linear=linear,
            mixers=mixers,
            dense=dense + where(sh.moe, nd, own),
            moe=where(sh.moe, own - nd, 0.0),
        )


def _attention_ops(
    sh: LayerShapes, cols: Mapping[str, np.ndarray], stratum: Any, fam: _Families, c: OpCounts
) -> list[Op]:
    """The attention block with the norms around it: input norm to post-attention norm."""
    tokens, d, hd = sh.tokens, sh.d, sh.hd
    h_tp, kv_tp, wb, gemm_dtype = sh.h_tp, sh.kv_tp, sh.wb, sh.gemm_dtype
    La = c.fam.gqa  # GQA attention layers (L for a model of full GQA layers)
    # Most models have 2 norms per layer (input, post-attention); Gemma-2 has 4, Falcon-7B 1.
    half_norms = c.L * c.cols["norms_per_layer"].astype(float) / 2
    # Qwen3's RMSNorm over each query and key head before RoPE.
    qk_count = La * c.cols["qk_norm"].astype(float)
    # Qwen3-Next's output gate doubles the query projection.
    q_tp = h_tp * where(cols["attn_output_gate"], 2.0, 1.0)
    # RoPE of q and k, on none of the layers of a model without it (NoPE: Nemotron-H, Jamba).
    rope_count = La * c.cols["rope"].astype(float)
    core = _attention_core(sh, cols, stratum)
    core.count = c.fam.core
    return [
        _elementwise("norm/input", "norm", half_norms, tokens * d, 1, 1, 4),
        _gemm("attention/qkv", "attention", La, tokens, (q_tp + 2 * kv_tp) * hd, d, wb, gemm_dtype),
        _elementwise(
            "attention/qk_norm", "attention", qk_count, tokens * (h_tp + kv_tp) * hd, 1, 1, 4
        ),
        _elementwise(
            "attention/rope", "attention", rope_count, tokens * (h_tp + kv_tp) * hd, 1, 1, 6
        ),
        core,
        *_sliding_core(sh, cols, stratum, fam, c),
        _gemm("attention/out", "attention", La, tokens, d, h_tp * hd, wb, gemm_dtype),
        _elementwise("residual/attention", "norm", c.fam.mixers, tokens * d, 2, 1, 1),
        _elementwise("norm/post_attention", "norm", half_norms, tokens * d, 1, 1, 4),
    ]


def _attention_core(
    sh: LayerShapes, cols: Mapping[str, np.ndarray], stratum: Any, window: Any = None
) -> Op:
    """softmax(QK^T)V of one layer: causal over the prompt in prefill, one query row in decode.
    `window` (tokens per configuration; None: full attention): a sliding layer's, passed to the
    attention models as `window_size`, the input `dse validate` scores a measured windowed row
    with (issue 33); each query then scores at most `window` keys, so the FLOPs (and in decode
    the cache read) count min(length, window) keys a query: the same as full attention where
    the window covers the sequence."""
    b, s, hd, h_tp, kv_tp, kvb = sh.b, sh.s, sh.hd, sh.h_tp, sh.kv_tp, sh.kvb
    span = s if window is None else np.minimum(s, window)
    win = {} if window is None else {"window_size": window}
    if sh.phase == "prefill":
        # Causal FlashAttention: QK^T and PV over the lower triangle, 2 * s^2 * hd FLOPs per
        # head; a window w < s bands it to the area s^2 - (s - w)^2 (sliding_keys_sum's
        # continuous form, as s^2 / 2 is the triangle's), s^2 where it covers the prompt.
        if all(np.shape(x) == _ONE for x in (b, s, hd, h_tp, kv_tp, kvb, span)):
            flops, traffic = _prefill_core_one(b, s, hd, h_tp, kv_tp, kvb, span)
        else:
            flops = b * h_tp * 2 * (s * s - (s - span) ** 2) * hd
            # read q, k, v and write o for every token, windowed or not
            traffic = b * s * hd * ((2 * h_tp) * ACT_BYTES + 2 * kv_tp * kvb)
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
                **win,
            },
        )
    flops = b * h_tp * 4 * span * hd
    traffic = (
        b * span * 2 * kv_tp * hd * kvb + b * 2 * h_tp * hd * ACT_BYTES + b * 2 * kv_tp * hd * kvb
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
            **win,
            **({} if stratum is None else {"stratum": np.asarray(stratum)}),
        },
    )


def _prefill_core_one(*arrays: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`_attention_core`'s prefill FLOPs and bytes of one configuration (every input of shape
    (1,)) in Python floats: the same products in the same order (x ** 2 as x * x, what numpy's
    square computes), two arrays made instead of ~20 numpy calls."""
    b, s, hd, h_tp, kv_tp, kvb, span = (float(x[0]) for x in arrays)
    off = s - span
    flops = b * h_tp * 2 * (s * s - off * off) * hd
    traffic = b * s * hd * ((2 * h_tp) * ACT_BYTES + 2 * kv_tp * kvb)
    traffic = traffic + b * s * 2 * kv_tp * hd * kvb
    return np.array([flops]), np.array([traffic])


def _sliding_core(
    sh: LayerShapes, cols: Mapping[str, np.ndarray], stratum: Any, fam: _Families, c: OpCounts
) -> list[Op]:
    """Sliding-window attention (none when the batch has no sliding layer): one call of the
    same attention models at the phase's real length (the prompt in prefill, the KV cache in
    decode) with the layer's window as `window_size`, as `dse validate` scores a measured
    windowed row (issue 33: the models' work is w (w + 1) / 2 + (s - w) w query-key pairs in
    prefill, min(kv_len + 1, w) keys in decode; their H200 power heads read the window, and
    SGLang's backend rule does). A configuration without sliding layers has count 0 here."""
    if not any_true(c.fam.sliding > 0):
        return []
    op = _attention_core(sh, cols, stratum, window=np.maximum(fam.window, 1.0))
    op.count = c.fam.sliding
    op.name = "attention/core_sliding"
    return [op]


def _family_ops(sh: LayerShapes, cols: Mapping[str, np.ndarray], c: OpCounts) -> list[Op]:
    """MLA and linear-attention layers (issue 21); none when the batch has neither.

    MLA: its projections as GEMMs (measured models): the query (through the q latent when
    q_lora_rank > 0), the KV down-projection to the latent + RoPE key (replicated on every
    GPU) and the up-projection to the heads' K (nope) and V, and the output. Its attention over
    the latent is kind `attention_mla`, priced by the measured MLA kernel models where the
    artifact has them and the latent geometry is the one measured (`dse.models.mla`), else on
    the roofline (flagged in `roofline_ops`) with FlashAttention-style FLOPs in prefill (heads
    of qk_nope + qk_rope and v_head_dim) and the absorbed form in decode (scores and values
    over the latent of kv_lora_rank + qk_rope_head_dim per key, read once for all heads).
    Linear layers: in_proj and out_proj as GEMMs, and the mixer (conv + chunked scan in
    prefill, one recurrent step in decode) as kind `linear_scan`, with the per-GPU shapes the
    measured linear-layer models read (`dse.predict.adapters.price_linear_scan`); the roofline
    (without a model, or outside its fitted range) counts its FLOPs
    (`dse.spec.arch.linear_flops_per_token`) and its state traffic (the state read and written
    once per sequence per forward pass, the conv window, q/k/v in and the output out)."""
    ops: list[Op] = []
    tokens, d, tp, wb, gd = sh.tokens, sh.d, sh.tp, sh.wb, sh.gemm_dtype
    if any_true(c.fam.mla > 0):
        h_tp = sh.h_tp
        r = cols["kv_lora_rank"].astype(float)
        qr = cols["q_lora_rank"].astype(float)
        rope = cols["qk_rope_head_dim"].astype(float)
        nope = np.where(cols["qk_nope_head_dim"] > 0, cols["qk_nope_head_dim"], sh.hd - rope)
        vd = np.where(cols["v_head_dim"] > 0, cols["v_head_dim"], sh.hd).astype(float)
        nope = nope.astype(float)
        q_in = np.where(qr > 0, qr, d)
        n_mla = c.fam.mla
        q_down = np.where(c.cols["q_lora_rank"].astype(float) > 0, n_mla, 0.0)
        ops += [
            _gemm("attention/mla_q_down", "attention", q_down, tokens,
                  np.maximum(qr, 1.0), d, wb, gd),
            _gemm("attention/mla_q", "attention", n_mla, tokens, h_tp * (nope + rope), q_in,
                  wb, gd),
            _gemm("attention/mla_kv_down", "attention", n_mla, tokens, r + rope, d, wb, gd),
            _gemm("attention/mla_kv_up", "attention", n_mla, tokens, h_tp * (nope + vd), r,
                  wb, gd),
        ]  # fmt: skip
        b, s, kvb = sh.b, sh.s, sh.kvb
        latent = (r + rope) * kvb  # bytes per cached token, all heads
        if sh.phase == "prefill":
            flops = b * h_tp * s * s * (nope + rope + vd)  # causal: half of 2 (qk + v) s^2
            traffic = b * s * (h_tp * (nope + rope + vd) * 2 * ACT_BYTES + latent)
        else:
            flops = b * h_tp * 2 * (2 * r + rope) * s  # absorbed: scores over r + rope, values r
            traffic = b * s * latent + b * h_tp * (2 * r + rope) * ACT_BYTES
        # the MLA kernel models' inputs (`dse.models.mla`; `dse.predict.adapters.price_mla`)
        dims = {"batch_size": b, "isl" if sh.phase == "prefill" else "kv_len": s,
                "num_heads": h_tp, "kv_dtype": cols["kv_dtype"], "kv_lora_rank": r,
                "qk_rope_head_dim": rope, "qk_nope_head_dim": nope, "v_head_dim": vd,
                "phase": sh.phase}  # fmt: skip
        ops.append(
            Op("attention/mla_core", "attention_mla", "attention", n_mla, flops, traffic, dims)
        )
        ops.append(_gemm("attention/mla_out", "attention", n_mla, tokens, d, h_tp * vd, wb, gd))
    if any_true(c.fam.linear > 0):
        nv = np.where(cols["linear_n_heads"] > 0, cols["linear_n_heads"], cols["n_heads"])
        dv = np.where(cols["linear_head_dim"] > 0, cols["linear_head_dim"], cols["head_dim"])
        ng = np.where(cols["linear_n_groups"] > 0, cols["linear_n_groups"], nv)
        ds = np.where(cols["linear_state_dim"] > 0, cols["linear_state_dim"], dv)
        nv, dv, ng, ds = (np.asarray(x, dtype=float) for x in (nv, dv, ng, ds))
        nv_tp, ng_tp = np.maximum(nv / tp, 1.0), np.maximum(ng / tp, 1.0)
        # Mamba-1 convolves x alone and makes dt, B, C after the conv (x_proj, dt_proj below).
        mamba1 = cols["linear_kind"] == "mamba1"
        conv = np.where(mamba1, 0.0, 2 * ng_tp * ds) + nv_tp * dv  # channels per GPU
        extra = np.select([cols["linear_kind"] == "mamba2", mamba1], [1.0, 0.0], 2.0)
        n_lin = c.fam.linear
        cw = cols["linear_conv_width"].astype(float)
        prefill = sh.phase == "prefill"
        per_token = LINEAR_STATE_FLOPS * nv_tp * ds * dv + 2 * cw * conv
        if prefill:  # the chunked form; Mamba-1's selective scan has no chunks
            per_token = per_token + np.where(mamba1, 0.0, LINEAR_CHUNK_TOKENS * nv_tp * (ds + dv))
        state = nv_tp * ds * dv * sh.kvb + (cw - 1) * conv * sh.kvb  # per sequence
        traffic = 2 * sh.b * state + tokens * (conv + 2 * nv_tp * dv) * ACT_BYTES
        n_in = conv + nv_tp * dv + extra * nv_tp
        ops += [
            _gemm("linear/in_proj", "attention", n_lin, tokens, n_in, d, wb, gd),
            *_mamba1_ops(sh, c, nv_tp * dv, ds),
            Op("linear/scan", "linear_scan", "attention", n_lin, tokens * per_token, traffic,
               {"tokens": tokens, "batch_size": sh.b, "seq_len": sh.s if prefill else 1.0,
                "n_heads": nv_tp, "head_dim": dv, "n_groups": ng_tp, "state_dim": ds,
                "conv_width": cw, "linear_kind": cols["linear_kind"]}),
            _gemm("linear/out", "attention", n_lin, tokens, d, nv_tp * dv, wb, gd),
        ]  # fmt: skip
    return ops


def _mamba1_ops(sh: LayerShapes, c: OpCounts, inner_tp: np.ndarray, ds: np.ndarray) -> list[Op]:
    """Mamba-1's input-dependent dt, B, C (none when the batch has no Mamba-1 layer): x_proj,
    this GPU's channels -> dt_rank + 2 state_dim (row-parallel), and dt_proj, dt_rank -> the
    channels, GEMMs priced by the fitted models like in_proj."""
    mamba1 = c.cols["linear_kind"] == "mamba1"
    if not any_true(mamba1):
        return []
    count = np.where(mamba1, c.fam.linear, 0.0)
    rank = np.ceil(sh.d / MAMBA1_DT_RANK_DIVISOR)
    tokens, wb, gd = sh.tokens, sh.wb, sh.gemm_dtype
    return [
        _gemm("linear/x_proj", "attention", count, tokens, rank + 2 * ds, inner_tp, wb, gd),
        _gemm("linear/dt_proj", "attention", count, tokens, inner_tp, rank, wb, gd),
    ]


def _dense_ffn_ops(sh: LayerShapes, cols: Mapping[str, np.ndarray], c: OpCounts) -> list[Op]:
    """The dense FFN (gate+up fused, activation, down) of the dense-FFN layers: every layer of a
    dense model, the first n_dense_layers (DeepSeek) or the ffn_pattern's `dense` layers
    (Jamba) of an MoE model, none where the pattern has no FFN (Nemotron-H's mixer layers)."""
    tokens, d, wb, gemm_dtype = sh.tokens, sh.d, sh.wb, sh.gemm_dtype
    dff = cols["d_ff"].astype(float) / sh.tp
    n_up = where(sh.gated, 2.0, 1.0)
    dense_count = c.fam.dense
    act = _elementwise("ffn/act", "ffn", dense_count, tokens * dff, np.nan, 1, 4)
    act.bytes = tokens * dff * (n_up + 1) * ACT_BYTES  # reads gate and up (gated) or up alone
    return [
        _gemm("ffn/gate_up", "ffn", dense_count, tokens, n_up * dff, d, wb, gemm_dtype),
        act,
        _gemm("ffn/down", "ffn", dense_count, tokens, d, dff, wb, gemm_dtype),
    ]


def _moe_ops(sh: LayerShapes, cols: Mapping[str, np.ndarray], c: OpCounts) -> list[Op]:
    """The MoE FFN (router + grouped experts) and its shared expert; counts are 0 in dense layers."""
    if not any_true(c.fam.moe):  # a batch of dense models: the three run nowhere
        return _idle_moe_ops(sh, c)
    return _moe_ops_sized(sh, cols, c)


def _moe_ops_sized(sh: LayerShapes, cols: Mapping[str, np.ndarray], c: OpCounts) -> list[Op]:
    """`_moe_ops` with every size computed."""
    tokens, d, e, topk, tp = sh.tokens, sh.d, sh.e, sh.topk, sh.tp
    wb, gemm_dtype = sh.wb, sh.gemm_dtype
    moe_count = c.fam.moe
    dffe = cols["d_ff_expert"].astype(float) / tp
    n_mats = np.where(sh.gated, 3.0, 2.0)
    routed = tokens * topk
    # Expected experts touched when `routed` token slots land uniformly on e experts.
    touched = e * (1.0 - np.power(1.0 - np.minimum(topk / np.maximum(e, 1), 1.0), tokens))
    routing = moe_routing_code(cols, np.shape(sh.b)[0])
    model_tokens = tokens
    if any_true(routing != UNIFORM):  # uniform everywhere: the arrays above, untouched
        touched, model_tokens = _routed(touched, routing, sh, tokens, topk, e)
    moe_flops = 2 * routed * n_mats * d * dffe + 2 * tokens * d * e
    moe_bytes = (
        touched * n_mats * d * dffe * wb
        + routed * (2 * d + (n_mats - 1) * dffe) * ACT_BYTES
        + tokens * d * e * wb
    )
    n_up = where(sh.gated, 2.0, 1.0)
    sff = cols["shared_expert_d_ff"].astype(float) / tp
    # the counts' rows' shared expert (sff > 0 there: its width over TP >= 1)
    shared_count = np.where(c.moe & (c.cols["shared_expert_d_ff"] > 0), moe_count, 0.0)
    return [
        Op(
            "ffn/moe",
            "moe",
            "ffn",
            moe_count,
            moe_flops,
            moe_bytes,
            {
                "num_tokens": model_tokens,
                "hidden_size": d,
                "inter_size": dffe * tp,
                "topk": topk,
                "num_experts": e,
                "moe_tp_size": tp,
                "routing": routing,
                "dtype": gemm_dtype,
                # bytes per expert weight: 4-bit weights pick the 4-bit MoE table
                # (`dse.predict.adapters.price_moe`)
                "weight_bytes": wb,
            },
        ),
        _gemm("ffn/shared_gate_up", "ffn", shared_count, tokens, n_up * sff, d, wb, gemm_dtype),
        _gemm(
            "ffn/shared_down", "ffn", shared_count, tokens, d, np.maximum(sff, 1), wb, gemm_dtype
        ),
    ]


# `workload.routing` as the MoE operator's `routing` dimension (a number: the pricer groups rows
# by their integral dimensions); the model's name of each (`dse.models._moe_routing.NAMES`).
UNIFORM, ROUND_ROBIN, IDENTICAL = 0, 1, 2
ROUTING_CODES = {"uniform": UNIFORM, "round_robin": ROUND_ROBIN, "identical": IDENTICAL}


def moe_routing_code(cols: Mapping[str, np.ndarray], n: int) -> np.ndarray:
    """Each configuration's `routing` as its code (`ROUTING_CODES`); uniform where the columns
    have none."""
    r = cols.get("routing")
    if r is None:
        return np.zeros(n, dtype=np.int64)
    names = np.broadcast_to(np.asarray(r).astype(str), (n,))
    code = np.zeros(n, dtype=np.int64)
    for name in np.unique(names):
        code[names == name] = ROUTING_CODES[str(name)]  # the field table checked the names
    return code


def _routed(
    touched: np.ndarray,
    routing: np.ndarray,
    sh: LayerShapes,
    tokens: np.ndarray,
    topk: np.ndarray,
    e: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(experts touched, tokens the MoE model prices) of each configuration under its routing
    (uniform rows keep `touched` and `tokens`).

    round_robin: token t's j-th expert is (t + j ceil(E / k)) mod E, so min(E, T k) experts
    are touched; the model prices the rows as the tables' "balanced" ones.
    identical: the batch is b copies of one sequence, so its T tokens pick the experts of T / b
    distinct tokens: top_k in a decode step, one sequence's uniform count in prefill. A decode
    step then reads top_k experts' weights: the model prices it as the one distinct token
    (its weight reads and launches). It leaves out the b - 1 copies' FLOPs, 2 m H I per token
    and expert against the expert's m H I w weight bytes: an intensity of 2 b / w
    FLOP/byte, which stays under the GPU's ridge (~295 FLOP/byte bf16 on an H100) for any
    decode batch under ~300, so on the roofline the weight read hides them. The operator's
    `flops` keep them (the roofline fallback prices them). Prefill is priced at all its tokens
    as under uniform routing: compute-bound, and a prompt of a few tokens already touches most
    experts.
    """
    distinct = tokens / np.maximum(sh.b, 1.0)
    one_seq = e * (1.0 - np.power(1.0 - np.minimum(topk / np.maximum(e, 1), 1.0), distinct))
    rr = np.minimum(e, tokens * topk)
    touched = np.where(routing == ROUND_ROBIN, rr, touched)
    touched = np.where(routing == IDENTICAL, one_seq, touched)
    model_tokens = tokens
    if sh.phase == "decode":
        model_tokens = np.where(routing == IDENTICAL, distinct, tokens)
    return touched, model_tokens


def _idle_moe_ops(sh: LayerShapes, c: OpCounts) -> list[Op]:
    """`_moe_ops` of a batch without MoE layers: the same operators, kinds and dimension names,
    every count, size and cost zero (an operator of count 0 everywhere is neither priced nor
    read; building its sizes cost a one-configuration call ~5% of its operator list)."""
    zero = np.zeros(sh.d.shape)
    never = zero if c.shape == zero.shape else np.zeros(c.shape)
    gemm = {"m": zero, "n": zero, "k": zero, "dtype": sh.gemm_dtype}
    moe = (
        "num_tokens",
        "hidden_size",
        "inter_size",
        "topk",
        "num_experts",
        "moe_tp_size",
        "routing",
    )
    return [
        Op(
            "ffn/moe",
            "moe",
            "ffn",
            never,
            zero,
            zero,
            {**dict.fromkeys(moe, zero), "dtype": sh.gemm_dtype, "weight_bytes": sh.wb},
        ),
        Op("ffn/shared_gate_up", "gemm", "ffn", never, zero, zero, dict(gemm)),
        Op("ffn/shared_down", "gemm", "ffn", never, zero, zero, dict(gemm)),
    ]


def _allreduce_ops(sh: LayerShapes, c: OpCounts) -> list[Op]:
    """Tensor parallelism: one all-reduce of the residual stream after each row-parallel block:
    the attention, the linear layer (both in a parallel layer) and the FFN of every layer
    that has them (2 per layer for a model of attention + FFN layers)."""
    fam = c.fam
    blocks = fam.gqa + fam.mla + fam.linear + fam.dense + fam.moe
    ar_count = where(c.tp > 1, blocks, 0.0)
    msg = sh.tokens * sh.d * ACT_BYTES
    return [
        Op(
            "allreduce",
            "allreduce",
            "allreduce",
            ar_count,
            np.zeros(sh.d.shape),
            msg,
            {"message_bytes": msg, "n_gpus": sh.tp},
        )
    ]


def _head_ops(sh: LayerShapes, c: OpCounts) -> list[Op]:
    """Final norm and LM head: serving engines compute logits only for each sequence's last token."""
    d = sh.d
    return [
        _elementwise("norm/final", "norm", filled(c.shape, 1.0), sh.tokens * d, 1, 1, 4),
        _gemm(
            "lm_head", "lm_head", filled(c.shape, 1.0), sh.b, sh.V / sh.tp, d, sh.wb, sh.gemm_dtype
        ),
    ]
