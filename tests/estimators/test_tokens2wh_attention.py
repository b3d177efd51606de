"""The corrected tokens-to-watt-hours accounting of the attention families: sliding windows,
MLA's latent cache and linear layers' constant state, against the dse.spec.arch accounting
and closed forms summed token by token (a model of full GQA layers keeps its numbers:
tests/estimators/test_tokens2wh.py and the golden tests)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from dse.estimators import _corrected
from dse.estimators import tokens2wh as T
from dse.spec import arch as A
from dse.spec.catalogue import lookup_model

# An 8B-class model (Llama-3-8B's shape) with 3:1 sliding:full layers.
FULL = A.Architecture(
    d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8, d_ff=14336, vocab_size=128256
)
SLIDING = replace(FULL, attention_pattern="sliding*3,full", sliding_window=1024)
MLA = replace(FULL, n_kv_heads=32, kv_lora_rank=512, qk_rope_head_dim=64)
LINEAR = replace(FULL, attention_pattern="linear*3,full", linear_n_groups=16, linear_state_dim=128)
KEYS = [f"breakdown.{c}.{p}_j" for c in T.COMPONENTS for p in (*T.PHASES, "total")]


def _wl(b: int = 4, s: int = 32768, o: int = 256, tp: int = 1) -> dict[str, int]:
    return {"batch_size": b, "prompt_tokens": s, "output_tokens": o, "tensor_parallel": tp}


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_a_window_covering_the_sequence_counts_as_full_attention(tp: int) -> None:
    wl = _wl(s=2000, o=48, tp=tp)
    covering = replace(SLIDING, sliding_window=2048)  # >= prompt + output
    full = T.estimate(FULL, wl, "h100_sxm", "corrected")
    slid = T.estimate(covering, wl, "h100_sxm", "corrected")
    for key in [*KEYS, "energy_j", "prefill_time_s", "decode_time_s"]:
        assert slid[key] == pytest.approx(full[key], rel=1e-12, abs=1e-300), key


def test_a_short_window_lowers_attention_reads_and_flops_at_long_context() -> None:
    full = T.estimate(FULL, _wl(), "h100_sxm", "corrected")
    slid = T.estimate(SLIDING, _wl(), "h100_sxm", "corrected")
    # 8 of 32 layers read everything; 24 read at most their window. Decode: token t reads
    # min(32767 + t, 1024) cached tokens instead of 32767 + t. Prefill: each 128-row query
    # block reads at most 1024 / 128 + 1 = 9 key blocks instead of all earlier ones (256).
    s, o = 32768, 256
    cached = np.arange(s, s + o) * 1.0
    expect = {
        "decode": 0.25 + 0.75 * np.minimum(cached, 1024).sum() / cached.sum(),
        "prefill": 0.25 + 0.75 * np.minimum(np.arange(1, 257), 9).sum() / (256 * 257 / 2),
    }
    for ph in T.PHASES:
        ratio = slid[f"breakdown.attn_read.{ph}_j"] / full[f"breakdown.attn_read.{ph}_j"]
        assert ratio == pytest.approx(expect[ph], rel=1e-12), ph
        assert ratio < 0.31
        assert slid[f"breakdown.compute.{ph}_j"] < full[f"breakdown.compute.{ph}_j"]
    # Writes do not change: every token's K and V are written, a sliding layer's too.
    assert slid["breakdown.kv_write.total_j"] == pytest.approx(full["breakdown.kv_write.total_j"])
    assert slid["decode_time_s"] < full["decode_time_s"]


@pytest.mark.parametrize(
    "arch", [FULL, SLIDING, MLA, LINEAR], ids=["full", "sliding", "mla", "linear"]
)
def test_decode_counts_equal_the_token_by_token_sums(arch: A.Architecture) -> None:
    b, s, o, tp = 2, 3000, 40, 2
    sliding_arch = replace(arch, sliding_window=1024) if arch is SLIDING else arch
    c = _corrected.counts(sliding_arch, b, s, o, tp)
    a = sliding_arch.resolved()
    full_rate, slid_rate = (float(x) * tp for x in A.kv_rates_per_gpu(a, tp))
    state = float(A.state_bytes(a, tp)) * tp
    w = a.sliding_window
    flops = reads = 0.0
    for t in range(1, o + 1):
        flops += float(A.attention_flops_per_token(a, s + t))  # token t sees s + t keys
        cached = s + t - 1
        reads += full_rate * cached + slid_rate * min(cached, w) + state
    assert c["flops_attn_decode"] == pytest.approx(b * flops, rel=1e-12)
    assert c["attn_read_bytes_decode"] == pytest.approx(b * reads, rel=1e-12)
    # Prefill attention FLOPs: dse.spec.arch's causal prefill minus its matmul part.
    pre = float(A.prefill_flops(a, s, b)) - b * 2.0 * float(A.matmul_params_per_token(a)) * s
    assert c["flops_attn_prefill"] == pytest.approx(pre, rel=1e-12)
    # The roofline's affine decode steps sum to the same FLOPs and bytes as the phase.
    steps = np.arange(1, o + 1)
    assert np.sum(c["step_flops0"] + c["step_flops1"] * steps) == pytest.approx(
        c["flops_attn_decode"] + c["flops_linear_decode"], rel=1e-12
    )
    step_kv = np.sum(c["step_bytes0"] + c["step_bytes1"] * steps) - c["weight_bytes_decode"]
    step_kv -= c["act_bytes_decode"]
    assert step_kv == pytest.approx(
        c["attn_read_bytes_decode"] + c["kv_write_bytes_decode"], rel=1e-12
    )


def test_mla_caches_and_reads_its_latent_on_every_gpu() -> None:
    b, s, o, tp = 2, 8192, 64, 4
    c = _corrected.counts(MLA, b, s, o, tp)
    latent = 32 * (512 + 64) * 2  # layers x (kv_lora_rank + qk_rope_head_dim) x bf16 bytes
    assert c["kv_write_bytes_prefill"] == pytest.approx(b * s * latent * tp)
    gqa = _corrected.counts(replace(FULL, n_kv_heads=32), b, s, o, tp)
    # Per GPU and layer, 576 latent values per token (whole on every GPU) instead of K and V
    # of its 32 / 4 heads, 2 x 8 x 128 = 2048: the MLA cache is not split by tensor parallelism.
    ratio = c["attn_read_bytes_decode"] / gqa["attn_read_bytes_decode"]
    assert ratio == pytest.approx(576 / 2048, rel=1e-12)
    one_gpu = _corrected.counts(MLA, b, s, o, 1)["attn_read_bytes_decode"]
    assert c["attn_read_bytes_decode"] == pytest.approx(tp * one_gpu, rel=1e-12)


def test_linear_layers_reads_do_not_grow_with_context_beyond_the_full_layers() -> None:
    b, o = 4, 128
    contexts = np.array([1024.0, 8192.0, 65536.0])
    c = _corrected.counts(LINEAR, b, contexts, o, 1)
    full_rate = float(A.kv_rates_per_gpu(LINEAR.resolved(), 1)[0])
    assert full_rate == 8 * 2 * 8 * 128 * 2  # the 8 full layers' K and V per token
    growth = np.diff(c["attn_read_bytes_decode"]) / np.diff(contexts)
    assert growth == pytest.approx(b * o * full_rate, rel=1e-12)
    # What does not grow: the 24 linear layers' state, read once per sequence and step.
    state = float(A.state_bytes(LINEAR, 1))
    assert state == 24 * (32 * 128 * 128 + 3 * (2 * 16 * 128 + 32 * 128)) * 2
    base = c["attn_read_bytes_decode"][0] - b * full_rate * (o * 1024 + o * (o - 1) / 2)
    assert base == pytest.approx(b * o * state, rel=1e-12)


def test_catalogue_hybrids_cost_less_attention_energy_than_their_full_twins() -> None:
    for name in ("gemma-3-27b", "qwen3-next-80b-a3b"):
        a = lookup_model(name)
        twin = replace(a, attention_pattern="full", sliding_window=0)
        r, r_full = (T.estimate(x, _wl(b=1), "h200_sxm", "corrected") for x in (a, twin))
        assert r["breakdown.attn_read.total_j"] < 0.5 * r_full["breakdown.attn_read.total_j"]


def test_attention_flops_per_key_splits_attention_flops_per_token() -> None:
    for arch in (SLIDING, MLA, LINEAR, lookup_model("gemma-3-27b")):
        a = arch.resolved()
        full, slid = A.attention_flops_per_key(a)
        lin = A.layer_kinds(a)[2] * A.linear_flops_per_token(a)
        for c in (1, 700, 5000, 40000):
            expect = full * c + slid * min(c, a.sliding_window) + lin
            assert A.attention_flops_per_token(a, c) == expect


def test_a_batch_mixing_the_families_equals_scalar_calls() -> None:
    """The sweep prices columns of mixed patterns in one call (Architecture.from_columns)."""
    rows = [FULL, SLIDING, replace(SLIDING, sliding_window=40000), MLA, LINEAR]
    cols = {
        name: [getattr(r.resolved(), name) for r in rows] for name in A.Architecture.field_names()
    }
    batch = A.Architecture.from_columns(cols, len(rows))
    wl = {"batch_size": 2, "prompt_tokens": 8192, "output_tokens": 128, "tensor_parallel": 2}
    got = T.estimate(batch, wl, "h100_sxm", "corrected")
    for i, row in enumerate(rows):
        one = T.estimate(row, wl, "h100_sxm", "corrected")
        for key in [*KEYS, "time_s"]:
            assert got[key][i] == pytest.approx(float(one[key]), rel=1e-12), (i, key)
