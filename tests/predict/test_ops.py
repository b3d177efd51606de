"""The operator list agrees with the closed-form accounting of dse.spec.arch, per phase and shard."""

from __future__ import annotations

import numpy as np
import pytest

from dse.predict.ops import forward_ops
from dse.spec import arch as A
from dse.spec import columns as C

LLAMA3_8B = dict(d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8, d_ff=14336, vocab_size=128256)
MIXTRAL = dict(
    d_model=4096,
    n_layers=32,
    n_heads=32,
    n_kv_heads=8,
    d_ff=14336,
    vocab_size=32000,
    n_experts=8,
    top_k=2,
)


def cols_of(**kw: object) -> dict[str, np.ndarray]:
    cols, _ = C.as_columns({k: [v] for k, v in kw.items()})
    return cols


def total(ops, attr: str) -> float:  # type: ignore[no-untyped-def]
    return float(sum(np.sum(getattr(o, attr) * o.count) for o in ops if o.kind != "embedding"))


@pytest.mark.parametrize("model", [LLAMA3_8B, MIXTRAL])
def test_decode_flops_equal_forward_flops_per_token(model: dict[str, int]) -> None:
    b, ctx = 4, 1000
    cols = cols_of(**model, batch_size=b, prompt_tokens=ctx)
    ops = forward_ops(cols, "decode", kv_len=ctx)
    a = A.Architecture(**model)
    # Elementwise ops add a few FLOPs per element that the closed form ignores (< 0.1%).
    gemm_attn = sum(
        float(np.sum(o.flops * o.count))
        for o in ops
        if o.kind in ("gemm", "attention_decode", "moe")
    )
    assert gemm_attn == pytest.approx(b * A.forward_flops_per_token(a, ctx), rel=1e-9)


def test_prefill_flops_match_closed_form_without_per_token_logits() -> None:
    b, s = 2, 512
    cols = cols_of(**LLAMA3_8B, batch_size=b, prompt_tokens=s)
    ops = forward_ops(cols, "prefill")
    a = A.Architecture(**LLAMA3_8B)
    got = sum(
        float(np.sum(o.flops * o.count)) for o in ops if o.kind in ("gemm", "attention_prefill")
    )
    # ops: causal attention as 2 s^2 hd per head (FlashAttention's count: the full triangle incl.
    # the diagonal block), logits only for the last token of each sequence.
    lm = 2 * A.Architecture(**LLAMA3_8B).vocab_size * 4096
    body = b * s * (2 * A.matmul_params_per_token(a) - lm) + b * lm
    attn = b * 32 * 32 * 2 * s * s * 128
    assert got == pytest.approx(body + attn, rel=1e-12)


def test_tensor_parallel_shards_split_weights_and_add_allreduces() -> None:
    one = forward_ops(cols_of(**LLAMA3_8B, batch_size=8, tensor_parallel=1), "decode")
    four = forward_ops(cols_of(**LLAMA3_8B, batch_size=8, tensor_parallel=4), "decode")
    by1 = {o.name: o for o in one}
    by4 = {o.name: o for o in four}
    for name in (
        "attention/qkv",
        "attention/out",
        "ffn/gate_up",
        "ffn/down",
        "lm_head",
        "attention/core",
    ):
        assert float(by4[name].flops[0]) == pytest.approx(
            float(by1[name].flops[0]) / 4, rel=1e-12
        ), name
    assert float(by1["allreduce"].count[0]) == 0
    assert float(by4["allreduce"].count[0]) == 2 * 32
    # one all-reduce of the residual stream: batch x d_model x 2 bytes
    assert float(by4["allreduce"].dims["message_bytes"][0]) == 8 * 4096 * 2


def test_gqa_cuts_decode_kv_traffic() -> None:
    mha = {
        o.name: o
        for o in forward_ops(
            cols_of(**{**LLAMA3_8B, "n_kv_heads": 32}, prompt_tokens=4096), "decode"
        )
    }
    gqa = {o.name: o for o in forward_ops(cols_of(**LLAMA3_8B, prompt_tokens=4096), "decode")}
    ratio = float(mha["attention/core"].bytes[0]) / float(gqa["attention/core"].bytes[0])
    assert 3.9 < ratio <= 4.0  # 32 / 8 KV heads, less the small q/o traffic


def test_moe_weight_traffic_counts_touched_experts_only() -> None:
    one = {o.name: o for o in forward_ops(cols_of(**MIXTRAL, batch_size=1), "decode")}
    many = {o.name: o for o in forward_ops(cols_of(**MIXTRAL, batch_size=256), "decode")}
    expert_bytes = 3 * 4096 * 14336 * 2
    assert float(one["ffn/moe"].bytes[0]) == pytest.approx(2 * expert_bytes, rel=0.01)  # top-2 of 8
    assert float(many["ffn/moe"].bytes[0]) > 7.9 * expert_bytes  # every expert touched
    assert float(one["ffn/gate_up"].count[0]) == 0  # no dense FFN in a MoE layer
