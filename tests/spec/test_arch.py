"""dse.spec.arch accounting: hand-worked examples, independent closed forms, validity rules, batching.

The counts against Hugging Face transformers are in tests/spec/test_hf.py; here nothing needs torch.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from dse.cli import main
from dse.errors import ConfigError
from dse.spec import arch as A
from dse.spec import rules as R
from dse.spec.arch import Architecture
from dse.spec.catalogue import lookup_model
from dse.spec.hardware import get_gpu

# A small dense GQA model whose every count is worked by hand below.
TINY = Architecture(d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=128, vocab_size=100)
# A small MoE: 4 experts of width 32, 2 active, MHA (kv = heads), tied embeddings.
TINY_MOE = Architecture(
    d_model=64, n_layers=2, n_heads=4, d_ff=128, vocab_size=100, tied_embeddings=True,
    n_experts=4, top_k=2, d_ff_expert=32,
)  # fmt: skip


# ---------------------------------------------------------------------- hand-worked examples
def test_tiny_dense_parameters_by_hand() -> None:
    p = A.param_breakdown(TINY)
    # head_dim = 64 / 4 = 16
    assert p["embedding"] == 100 * 64 == 6400
    assert p["lm_head"] == 6400  # untied
    assert p["attention/qkv"] == 2 * 64 * (4 + 2 * 2) * 16 == 16384  # q: 4 heads, k and v: 2 each
    assert p["attention/out"] == 2 * 4 * 16 * 64 == 8192
    assert p["mlp"] == 2 * 3 * 64 * 128 == 49152  # gate, up, down
    assert p["norms"] == 2 * 2 * 64 == 256  # two RMSNorm weights per layer
    assert p["final_norm"] == 64
    assert p["total"] == 6400 + 6400 + 16384 + 8192 + 49152 + 256 + 64 == 86848
    assert p["active"] == p["total"]


def test_tiny_dense_flops_and_kv_by_hand() -> None:
    # Matmul parameters: everything but the embedding gather and the norm weights; the LM head
    # (6400) multiplies: 16384 + 8192 + 49152 + 6400 = 80128.
    assert A.matmul_params_per_token(TINY) == 80128
    # One token over 10 keys: 2 x 80128 + QK^T and PV at 2 x 16 FLOPs per (layer, head, key):
    # 4 x 2 layers x 4 heads x 16 x 10 = 5120.
    assert A.forward_flops_per_token(TINY, 10) == 2 * 80128 + 5120 == 165376
    # A 3-token causal prefill: tokens see 1, 2, 3 keys: 2 x 80128 x 3 + 4 x 2 x 4 x 16 x 6.
    assert A.prefill_flops(TINY, 3) == 480768 + 3072 == 483840
    assert A.prefill_flops(TINY, 3, batch_size=5) == 5 * 483840
    # KV cache: K and V x 2 layers x 2 KV heads x 16 dims x 2 bytes (bf16).
    assert A.kv_bytes_per_token(TINY) == 2 * 2 * 2 * 16 * 2 == 256
    assert A.kv_bytes_per_token(Architecture(**{**TINY.to_dict(), "kv_dtype": "fp8"})) == 128


def test_tiny_moe_parameters_by_hand() -> None:
    p = A.param_breakdown(TINY_MOE)
    expert = 3 * 64 * 32  # 6144 per expert
    assert p["moe/experts"] == 2 * 4 * expert == 49152
    assert p["active/moe/experts"] == 2 * 2 * expert == 24576
    assert p["moe/router"] == 2 * 64 * 4 == 512
    assert p["mlp"] == 0  # every layer is MoE
    assert p["lm_head"] == 0  # tied
    assert p["attention/qkv"] == 2 * 64 * 12 * 16 == 24576  # MHA: 4 + 4 + 4 heads
    assert p["total"] == 6400 + 64 + 24576 + 8192 + 256 + 512 + 49152 == 89152
    assert p["active"] == 89152 - 49152 + 24576 == 64576
    # The tied LM head still multiplies: matmul = active - embedding - norms + V*d
    assert A.matmul_params_per_token(TINY_MOE) == 64576 - 6400 - 256 - 64 + 6400


def test_shared_expert_gate_biases_and_qk_norm_by_hand() -> None:
    a = Architecture(
        d_model=64, n_layers=3, n_heads=4, d_ff=128, n_experts=4, top_k=1, d_ff_expert=32,
        shared_expert_d_ff=96, shared_expert_gate=True, qkv_bias=True, qk_norm=True,
        norms_per_layer=4, norm="layernorm",
    )  # fmt: skip
    p = A.param_breakdown(a)
    assert p["moe/shared"] == 3 * (3 * 64 * 96 + 64)  # SwiGLU shared expert + sigmoid gate d->1
    assert p["attention/qkv"] == 3 * (64 * 12 * 16 + 12 * 16)  # weights + q, k, v biases
    assert p["attention/qk_norm"] == 3 * 2 * 2 * 16  # q and k LayerNorms: weight + bias each
    assert p["norms"] == 3 * 4 * 2 * 64  # 4 LayerNorms per layer, weight + bias
    assert p["final_norm"] == 2 * 64
    # Biases and norms are elementwise: not in the matmul count.
    elementwise = p["norms"] + p["final_norm"] + p["attention/qk_norm"] + 3 * 12 * 16
    assert A.matmul_params_per_token(a) == p["active"] - p["embedding"] - elementwise


# ---------------------------------------------------------------------- independent closed forms
CATALOGUE_SAMPLE = [
    "Llama-2-7B", "Llama-3-8B", "Llama-3-70B", "Mistral-Nemo-12B", "Mixtral-8x7B",
    "Qwen2-7B", "Qwen1.5-MoE-A2.7B", "Qwen3-30B-A3B", "Gemma-2-9B", "Falcon-7B",
]  # fmt: skip


def _closed_form_flops(a: Architecture, ctx: int) -> int:
    """Forward FLOPs per token written out from the shapes, not from param_breakdown."""
    a = a.resolved()
    d, L, h, kv, hd, V = a.d_model, a.n_layers, a.n_heads, a.n_kv_heads, a.head_dim, a.vocab_size
    mats = 3 if a.gated_mlp else 2
    attn_proj = d * (h + 2 * kv) * hd + h * hd * d
    if a.n_experts > 1:
        ffn = a.top_k * mats * d * a.d_ff_expert + d * a.n_experts  # routed experts + router
        ffn += mats * d * a.shared_expert_d_ff + (d if a.shared_expert_gate else 0)
    else:
        ffn = mats * d * a.d_ff
    return 2 * (L * (attn_proj + ffn) + V * d) + 4 * L * h * hd * ctx


@pytest.mark.parametrize("name", CATALOGUE_SAMPLE)
@pytest.mark.parametrize("ctx", [1, 4096])
def test_flops_match_closed_form(name: str, ctx: int) -> None:
    a = lookup_model(name)
    assert A.forward_flops_per_token(a, ctx) == _closed_form_flops(a, ctx)


@pytest.mark.parametrize("name", CATALOGUE_SAMPLE)
def test_flops_are_twice_active_params_plus_attention(name: str) -> None:
    """2 x (active - embedding gather - elementwise weights) + the attention term."""
    a = lookup_model(name).resolved()
    p = A.param_breakdown(a)
    biases = a.n_layers * (a.n_heads + 2 * a.n_kv_heads) * a.head_dim if a.qkv_bias else 0
    elementwise = p["norms"] + p["final_norm"] + p["attention/qk_norm"] + biases
    lm_multiply = a.vocab_size * a.d_model if a.tied_embeddings else 0  # tied: counted once
    matmul = p["active"] - p["embedding"] - elementwise + lm_multiply
    attn = 4 * a.n_layers * a.n_heads * a.head_dim * 2048
    assert A.forward_flops_per_token(a, 2048) == 2 * matmul + attn
    # Elementwise weights are tiny: FLOPs ~ 2 x active parameters (Kaplan et al.) within 0.1%
    # once the embedding gather is set aside.
    approx = 2 * (p["active"] - p["embedding"] + lm_multiply) + attn
    assert abs(A.forward_flops_per_token(a, 2048) / approx - 1) < 1e-3


def test_prefill_flops_sum_decode_steps() -> None:
    """A causal prefill of S tokens is the sum of one-token forwards over contexts 1..S."""
    a = lookup_model("Llama-3-8B")
    s = 257
    per_token = sum(A.forward_flops_per_token(a, i) for i in range(1, s + 1))
    assert A.prefill_flops(a, s) == pytest.approx(per_token, rel=1e-12)


def test_moe_active_below_total_dense_equal() -> None:
    for name in ("Mixtral-8x7B", "Mixtral-8x22B", "Qwen1.5-MoE-A2.7B", "Qwen3-235B-A22B"):
        a = lookup_model(name)
        assert A.active_params(a) < A.total_params(a)
    # Mixtral-8x7B: 2 of 8 experts, the published 12.9B active of 46.7B.
    mix = lookup_model("Mixtral-8x7B")
    assert A.active_params(mix) == 12_879_925_248
    assert A.total_params(mix) == 46_702_792_704
    for name in ("Llama-3-8B", "Qwen2-7B"):
        a = lookup_model(name)
        assert A.active_params(a) == A.total_params(a)


@pytest.mark.parametrize(
    ("name", "published_active_b"),
    # Active parameters as the model cards state them (billions).
    [("Mixtral-8x7B", 12.9), ("Mixtral-8x22B", 39.0), ("Qwen1.5-MoE-A2.7B", 2.7),
     ("Qwen2-57B-A14B", 14.0), ("Qwen3-30B-A3B", 3.3), ("Qwen3-235B-A22B", 22.0)],
)  # fmt: skip
def test_active_params_match_published(name: str, published_active_b: float) -> None:
    assert A.active_params(lookup_model(name)) / 1e9 == pytest.approx(published_active_b, rel=0.02)


def test_kv_bytes_per_token_gqa_by_hand() -> None:
    # Llama-3-70B: K and V x 80 layers x 8 KV heads x 128 dims x 2 bytes = 327,680 bytes
    # (MHA with 64 heads would be 8x that).
    assert A.kv_bytes_per_token(lookup_model("Llama-3-70B")) == 2 * 80 * 8 * 128 * 2 == 327_680
    # Llama-2-7B is MHA: 2 x 32 layers x 32 heads x 128 x 2 = 524,288 bytes (512 KiB).
    assert A.kv_bytes_per_token(lookup_model("Llama-2-7B")) == 524_288
    # Falcon-7B is MQA: one KV head of 64 dims: 2 x 32 x 1 x 64 x 2 = 8,192 bytes.
    assert A.kv_bytes_per_token(lookup_model("Falcon-7B")) == 8_192
    # Mistral-Nemo's head_dim (128) is not d_model / n_heads (160): 2 x 40 x 8 x 128 x 2.
    assert A.kv_bytes_per_token(lookup_model("Mistral-Nemo-12B")) == 163_840


# ---------------------------------------------------------------------- memory
def test_memory_breakdown_sums_and_scales() -> None:
    a = lookup_model("Llama-3-8B")
    m1 = A.memory_breakdown(a, 8, 1024, 256, 1)
    parts = m1["weights"] + m1["kv_cache"] + m1["activations"] + m1["reserved"]
    assert m1["total"] == pytest.approx(parts)
    assert m1["weights"] == A.weight_bytes(a) == 2 * A.total_params(a)
    assert m1["kv_cache"] == 8 * (1024 + 256) * A.kv_bytes_per_token(a)
    m2 = A.memory_breakdown(a, 16, 1024, 256, 1)
    assert m2["kv_cache"] == 2 * m1["kv_cache"]
    assert m2["activations"] > m1["activations"]
    # Tensor parallelism splits weights (all but the small replicated norms) and KV heads.
    m4 = A.memory_breakdown(a, 8, 1024, 256, 4)
    assert m4["kv_cache"] == m1["kv_cache"] / 4
    assert m1["weights"] / 4 < m4["weights"] < m1["weights"] / 4 * 1.0001


def test_kv_heads_replicate_beyond_tp() -> None:
    """8 KV heads on 16 GPUs: each GPU keeps one head, so KV memory stops shrinking at tp=8."""
    a = lookup_model("Llama-3-8B")
    assert A.kv_heads_per_gpu(a, 16) == 1
    kv8 = A.memory_breakdown(a, 1, 1000, 24, 8)["kv_cache"]
    kv16 = A.memory_breakdown(a, 1, 1000, 24, 16)["kv_cache"]
    assert kv16 == kv8 == 1 * (1000 + 24) * 2 * 32 * 1 * 128 * 2
    # K and V projections are replicated too: per-GPU parameters exceed total / 16.
    assert A.params_per_gpu(a, 16) > A.total_params(a) / 16
    assert A.params_per_gpu(a, 1) == A.total_params(a)


def test_fits_memory_on_h100() -> None:
    h100 = get_gpu("h100_sxm")
    a = lookup_model("Llama-3-70B")  # 141 GB of bf16 weights
    one = A.memory_breakdown(a, 1, 1024, 256, 1)["total"]
    two = A.memory_breakdown(a, 1, 1024, 256, 2)["total"]
    assert not A.fits_memory(one, h100.hbm_capacity_bytes)
    assert A.fits_memory(two, h100.hbm_capacity_bytes)
    assert A.fits_memory(
        A.memory_breakdown(lookup_model("Llama-3-8B"), 1, 1024, 256)["total"],
        h100.hbm_capacity_bytes,
    )


# ---------------------------------------------------------------------- validity rules
BASE = {"d_model": 4096, "n_layers": 32, "n_heads": 32, "d_ff": 14336}
MOE = {**BASE, "n_experts": 8, "top_k": 2, "d_ff_expert": 1408}
# (configuration, tensor_parallel, expected first message or '' when valid)
GRID: list[tuple[dict, int, str]] = [
    (BASE, 1, ""),
    ({**BASE, "n_kv_heads": 8}, 8, ""),
    ({**BASE, "n_kv_heads": 1}, 8, ""),  # MQA: the one KV head is replicated
    ({**BASE, "n_kv_heads": 0}, 1, ""),  # 0 means "as many as n_heads"
    ({**BASE, "d_model": 5120, "head_dim": 128}, 1, ""),  # Mistral-Nemo: 32 x 128 != 5120
    ({**MOE, "shared_expert_d_ff": 5632, "shared_expert_gate": True}, 4, ""),
    ({**BASE, "d_model": 0}, 1, "d_model: must be an integer >= 1, got 0"),
    ({**BASE, "n_layers": -1}, 1, "n_layers: must be an integer >= 1, got -1"),
    ({**BASE, "n_heads": 4.5}, 1, "n_heads: must be an integer >= 1, got 4.5"),
    ({**BASE, "d_ff": None}, 1, "d_ff: must be an integer >= 1, got None"),
    ({**BASE, "vocab_size": 0}, 1, "vocab_size: must be an integer >= 1, got 0"),
    ({**BASE, "n_experts": 0}, 1, "n_experts: must be an integer >= 1, got 0"),
    ({**BASE, "top_k": "two"}, 1, "top_k: must be an integer >= 1, got 'two'"),
    ({**BASE, "n_kv_heads": -2}, 1, "n_kv_heads: must be an integer >= 1, got -2"),
    ({**BASE, "n_kv_heads": 5}, 1, "n_kv_heads: must divide n_heads=32, got 5"),
    ({**BASE, "n_heads": 48}, 1, "n_heads: must divide d_model=4096 (or set head_dim), got 48"),
    ({**BASE, "head_dim": 6}, 1, "head_dim: must be an even integer >= 8 (RoPE rotates pairs), got 6"),
    ({**BASE, "head_dim": 127}, 1, "head_dim: must be an even integer >= 8 (RoPE rotates pairs), got 127"),
    ({**BASE, "d_model": 96, "n_heads": 16}, 1, "head_dim: must be an even integer >= 8 (RoPE rotates pairs), got 6"),
    ({**MOE, "top_k": 9}, 1, "top_k: must be <= n_experts=8, got 9"),
    ({**MOE, "d_ff_expert": -1}, 1, "d_ff_expert: must be an integer >= 1, got -1"),
    ({**MOE, "shared_expert_d_ff": -5}, 1, "shared_expert_d_ff: must be an integer >= 0, got -5"),
    ({**BASE, "norms_per_layer": 0}, 1, "norms_per_layer: must be an integer >= 1, got 0"),
    ({**BASE, "gated_mlp": "yes"}, 1, "gated_mlp: must be true or false, got 'yes'"),
    ({**BASE, "qk_norm": 2}, 1, "qk_norm: must be true or false, got 2"),
    ({**BASE, "weight_dtype": "fp4"}, 1, "weight_dtype: must be one of float32, bfloat16, float16, fp8, int8, int4, nvfp4, got 'fp4'"),
    ({**BASE, "kv_dtype": "e5m2"}, 1, "kv_dtype: must be one of float32, bfloat16, float16, fp8, int8, int4, got 'e5m2'"),
    ({**BASE, "norm": "batchnorm"}, 1, "norm: must be one of rmsnorm, layernorm, got 'batchnorm'"),
    (BASE, 0, "tensor_parallel: must be an integer >= 1, got 0"),
    ({**BASE, "d_model": 4608, "n_heads": 36, "n_kv_heads": 4}, 8, "n_heads: must be divisible by tensor_parallel=8, got 36"),
    ({**BASE, "d_model": 3072, "n_heads": 24, "n_kv_heads": 6}, 4, "n_kv_heads: must divide or be divisible by tensor_parallel=4, got 6"),
    ({**BASE, "d_ff": 11004}, 8, "d_ff: must be divisible by tensor_parallel=8, got 11004"),
    ({**MOE, "d_ff_expert": 1404}, 8, "d_ff_expert: must be divisible by tensor_parallel=8, got 1404"),
    ({**MOE, "shared_expert_d_ff": 5636, "shared_expert_gate": True}, 8, "shared_expert_d_ff: must be divisible by tensor_parallel=8, got 5636"),
    # Several broken rules: the message is the first in rule order.
    ({**BASE, "n_kv_heads": 5, "weight_dtype": "fp4"}, 1, "n_kv_heads: must divide n_heads=32, got 5"),
]  # fmt: skip
MESSAGE = re.compile(r"^[a-z_]+: .+, got .+$")


@pytest.mark.parametrize(("cfg", "tp", "expected"), GRID)
def test_check_architecture_messages(cfg: dict, tp: int, expected: str) -> None:
    errors = R.check_architecture(cfg, tp)
    assert (errors[0] if errors else "") == expected
    assert all(MESSAGE.match(e) for e in errors), errors


def test_every_rule_is_exercised() -> None:
    rules = {re.sub(r"=\S+", "=", m.split(", got")[0]) for _, _, m in GRID if m}
    assert len(rules) >= 25, sorted(rules)


def _columns(rows: list[dict], object_dtype: bool) -> dict[str, np.ndarray]:
    keys = sorted({k for r in rows for k in r})
    defaults = {f: getattr(Architecture(1, 1, 1, 1), f) for f in Architecture.field_names()}
    out = {}
    for k in keys:
        vals = [r.get(k, defaults.get(k)) for r in rows]
        out[k] = np.array(vals, dtype=object) if object_dtype else np.array(vals)
    return out


def test_check_columns_agrees_with_check_architecture_on_the_grid() -> None:
    rows = [cfg for cfg, _, _ in GRID]
    tps = np.array([tp for _, tp, _ in GRID])
    msgs = R.check_columns(_columns(rows, object_dtype=True), len(rows), tps)
    for (cfg, tp, expected), got in zip(GRID, msgs, strict=True):
        scalar = R.check_architecture(cfg, tp)
        assert got == (scalar[0] if scalar else "") == expected


def test_check_columns_native_arrays_agree_with_scalar() -> None:
    """The fast path (int/str/bool arrays, not objects) over a random grid of shapes."""
    rng = np.random.default_rng(0)
    n = 400
    cols = {
        "d_model": rng.choice([0, 96, 2048, 4096, 4100, 5120], n),
        "n_layers": rng.choice([-1, 1, 32], n),
        "n_heads": rng.choice([8, 12, 32, 40, 48], n),
        "n_kv_heads": rng.choice([0, 1, 3, 4, 8, 32], n),
        "d_ff": rng.choice([11004, 14336], n),
        "n_experts": rng.choice([1, 8], n),
        "top_k": rng.choice([1, 2, 9], n),
        "d_ff_expert": rng.choice([0, 1404, 1408], n),
        "shared_expert_d_ff": rng.choice([0, 5632, 5636, -1], n),
        "kv_dtype": rng.choice(["bfloat16", "fp8", "fp4"], n),
        "gated_mlp": rng.choice([True, False], n),
    }
    tp = rng.choice([1, 2, 4, 8], n)
    msgs = R.check_columns(cols, n, tp)
    for i in range(n):
        row = {k: v[i].item() for k, v in cols.items()}
        scalar = R.check_architecture(row, int(tp[i]))
        assert msgs[i] == (scalar[0] if scalar else ""), (row, int(tp[i]))
    assert 0 < (msgs == "").sum() < n  # the grid holds both valid and invalid rows


def test_head_dim_defaulted_rows_need_divisibility() -> None:
    cols = {**{k: np.array([v, v]) for k, v in BASE.items()}, "d_model": np.array([4100, 4100])}
    cols["head_dim"] = np.array([128, 128])
    msgs = R.check_columns(cols, 2, 1, head_dim_defaulted=np.array([False, True]))
    assert msgs[0] == ""
    assert msgs[1] == "n_heads: must divide d_model=4100 (or set head_dim), got 32"


def test_validate_and_from_mapping() -> None:
    with pytest.raises(ConfigError, match="n_kv_heads: must divide n_heads=32, got 5"):
        R.validate_architecture(Architecture(**BASE, n_kv_heads=5))
    with pytest.raises(ConfigError, match="unknown architecture field 'd_modle'"):
        Architecture.from_mapping({**BASE, "d_modle": 1})
    a = Architecture.from_mapping({**BASE, "d_model": 4096.0})  # YAML's 4.096e3
    assert isinstance(a.d_model, int) and a.head_dim == 128
    # 0 means "default" for n_kv_heads and d_ff_expert, as in the validity rules.
    assert Architecture(**BASE, n_kv_heads=0).resolved().n_kv_heads == 32
    assert A.total_params(Architecture(**BASE, n_kv_heads=0)) == A.total_params(
        Architecture(**BASE)
    )


# ---------------------------------------------------------------------- batching
def _random_batch(n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    heads = rng.choice([8, 16, 32, 64], n)
    return {
        "d_model": heads * rng.choice([64, 128], n),
        "n_layers": rng.integers(1, 80, n),
        "n_heads": heads,
        "n_kv_heads": heads // rng.choice([1, 2, 8], n),
        "d_ff": rng.integers(1, 64, n) * 256,
        "vocab_size": rng.choice([32000, 128256, 151936], n),
        "tied_embeddings": rng.choice([True, False], n),
        "gated_mlp": rng.choice([True, False], n),
        "n_experts": rng.choice([1, 8, 60], n),
        "top_k": rng.choice([1, 2, 4], n),
        "d_ff_expert": rng.integers(1, 32, n) * 128,
        "shared_expert_d_ff": rng.choice([0, 5632], n),
        "shared_expert_gate": rng.choice([True, False], n),
        "qkv_bias": rng.choice([True, False], n),
        "qk_norm": rng.choice([True, False], n),
        "norm": rng.choice(["rmsnorm", "layernorm"], n),
        "norms_per_layer": rng.choice([1, 2, 4], n),
        "weight_dtype": rng.choice(["bfloat16", "fp8", "int4"], n),
        "kv_dtype": rng.choice(["bfloat16", "fp8"], n),
    }


def test_batched_accounting_equals_scalar_loop() -> None:
    n = 64
    cols = _random_batch(n, seed=1)
    rng = np.random.default_rng(2)
    batch, prompt, out = rng.integers(1, 64, n), rng.integers(1, 4096, n), rng.integers(1, 512, n)
    tp = rng.choice([1, 2, 4, 8], n)
    ctx = rng.integers(1, 8192, n)
    arr = Architecture.from_columns(cols, n)
    p = A.param_breakdown(arr)
    flops = A.forward_flops_per_token(arr, ctx)
    pre = A.prefill_flops(arr, prompt, batch)
    kv = A.kv_bytes_per_token(arr)
    mem = A.memory_breakdown(arr, batch, prompt, out, tp)
    per_gpu = A.params_per_gpu(arr, tp)
    for i in range(n):
        one = Architecture.from_mapping({k: v[i].item() for k, v in cols.items()})
        p1 = A.param_breakdown(one)
        for key, value in p1.items():
            assert p[key][i] == value, (i, key)
        assert flops[i] == A.forward_flops_per_token(one, int(ctx[i]))
        assert pre[i] == A.prefill_flops(one, int(prompt[i]), int(batch[i]))
        assert kv[i] == A.kv_bytes_per_token(one)
        m1 = A.memory_breakdown(one, int(batch[i]), int(prompt[i]), int(out[i]), int(tp[i]))
        for key, value in m1.items():
            assert mem[key][i] == pytest.approx(value, rel=1e-12), (i, key)
        assert per_gpu[i] == pytest.approx(A.params_per_gpu(one, int(tp[i])), rel=1e-12)


# ---------------------------------------------------------------------- the `dse arch` command
def test_cli_arch_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["arch", "--model", "meta-llama/Meta-Llama-3-8B", "--batch-size", "16"]) == 0
    out = capsys.readouterr().out
    assert "Llama-3-8B (meta-llama/Meta-Llama-3-8B)" in out
    assert "8,030,261,248" in out
    assert "KV cache: 131,072 bytes per token" in out
    assert "h100_sxm" in out and ": fits" in out


def test_cli_arch_flags_json(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["arch", "--d-model", "4096", "--n-layers", "32", "--n-heads", "32", "--n-kv-heads",
            "8", "--d-ff", "14336", "--vocab-size", "32000", "--n-experts", "8", "--top-k", "2",
            "--tp", "2", "--kv-dtype", "fp8", "--context", "2048", "--json"]  # fmt: skip
    assert main(argv) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["params"]["total"] == 46_702_792_704  # Mixtral-8x7B's shape
    assert r["params"]["active"] < r["params"]["total"]
    assert r["kv_bytes_per_token"] == 2 * 32 * 8 * 128 * 1
    assert r["flops_per_token"]["decode_context"] == 2048
    mem = r["memory_per_gpu_bytes"]
    assert mem["total"] == pytest.approx(
        sum(mem[k] for k in ("weights", "kv_cache", "activations", "reserved"))
    )
    assert r["gpu"]["fits"] is True


def test_cli_arch_model_with_override_and_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["arch", "--model", "llama-3-70b", "--weight-dtype", "fp8", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["architecture"]["weight_dtype"] == "fp8"
    assert r["memory_per_gpu_bytes"]["weights"] == r["params"]["total"] * 1.0
    assert main(["arch", "--list"]) == 0
    assert "Mixtral-8x7B" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "llama-3-9b"], "unknown model 'llama-3-9b'; did you mean 'Llama-3-8B'"),
        (["--model", "Deci/DeciLM-7B"], "not representable"),
        (["--d-model", "4096", "--n-layers", "32", "--n-heads", "48", "--d-ff", "1"],
         "n_heads: must divide d_model=4096 (or set head_dim), got 48"),
        (["--d-model", "4096"], "missing --n-layers, --n-heads, --d-ff"),
        (["--model", "llama-3-8b", "--tp", "3"], "--tensor-parallel: must be a power of two in [1, 1024], got 3"),
        (["--model", "qwen2-7b", "--tp", "8"], "n_heads: must be divisible by tensor_parallel=8, got 28"),
        (["--model", "llama-3-8b", "--kv-dtype", "fp4"], "--kv-dtype: must be one of"),
        (["--model", "llama-3-8b", "--gpu", "h100"], "--gpu: must be one of a100_sxm,"),
        (["--hf-config", "/nonexistent/config.json"], "no such file"),
        (["--model", "llama-3-8b", "--hf-config", "x.json"], "--hf-config: cannot be combined with --model"),
    ],
)  # fmt: skip
def test_cli_arch_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["arch", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dse arch: error: ") and message in err
    assert "Traceback" not in err


def test_cli_arch_hf_config_approximate(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """An approximately representable config is accepted with its notes (BLOOM: biases, ALiBi)."""
    cfg = {
        "model_type": "bloom",
        "n_embed": 4096,
        "n_head": 32,
        "n_layer": 30,
        "vocab_size": 250880,
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert main(["arch", "--hf-config", str(tmp_path), "--tp", "2"]) == 0
    out = capsys.readouterr().out
    # Unmodelled: 30 layers x (4096 + 4 x 4096 + 4096) biases + the embedding LayerNorm (2 x 4096).
    assert f"approximate: {30 * 6 * 4096 + 2 * 4096:,} parameters are not modelled" in out
    assert "ALiBi" in out and "(model_type bloom)" in out
