"""Tokens-to-watt-hours estimator: published numbers, hand-worked examples, scaling laws, the
corrections (MoE, GQA, fp8, batching, TP), the calibration manifest and `dse energy`."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import numpy as np
import pytest

from dse.cli import main
from dse.errors import ArtifactError, ConfigError
from dse.estimators import _corrected, _paper
from dse.estimators import tokens2wh as T
from dse.estimators._constants import load_calibration
from dse.spec.arch import Architecture, total_params
from dse.spec.workload import Workload

LLAMA3_8B = Architecture(
    d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8, d_ff=14336, vocab_size=128256
)
# Mixtral-8x7B and two dense twins: the same layers with the FFN of 2 experts (same active
# parameters, ~13 B) and of all 8 experts (same total parameters, ~47 B).
MIXTRAL = Architecture(
    d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8, d_ff=14336, vocab_size=32000,
    n_experts=8, top_k=2,
)  # fmt: skip
DENSE_13B = Architecture(d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8, d_ff=2 * 14336)
DENSE_47B = Architecture(d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8, d_ff=8 * 14336)


def _wl(b=1, s=512, o=128, tp=1) -> dict[str, int]:
    return {"batch_size": b, "prompt_tokens": s, "output_tokens": o, "tensor_parallel": tp}


def _cal(gpu: str = "h100_sxm", **factors: float) -> dict:
    """The packaged calibration with one GPU's factors replaced (for exact arithmetic)."""
    cal = copy.deepcopy(load_calibration())
    cal["gpus"][gpu].update(factors)
    return cal


# ---------------------------------------------------------------------- paper: published numbers
@pytest.mark.parametrize(
    ("n_params", "out_mj", "in_mj"),
    [
        # Per-token table of the paper (simplified estimator, H100, alpha = 0.52 pJ/FLOP, K = 6,
        # M = 1.2 for prompts up to 2048 tokens).
        (70e9, 218.4, 262.08),  # Llama-3.3-70B
        (8e9, 24.96, 29.952),  # Qwen3-8B
        (32e9, 99.84, 119.808),  # a 32 B model
        (120e9, 374.4, 449.28),  # GPT-OSS-120B (table gives the output figure)
    ],
)
def test_simplified_reproduces_published_per_token_numbers(n_params, out_mj, in_mj):
    r = T.simplified_per_token(n_params, prompt_tokens=500, gpu="h100_sxm")
    assert r["decode_energy_per_output_token_j"] * 1e3 == pytest.approx(out_mj, rel=1e-12)
    assert r["prefill_energy_per_input_token_j"] * 1e3 == pytest.approx(in_mj, rel=1e-12)


def test_prompt_multiplier_steps():
    t = np.array([1, 2048, 2049, 5120, 5121, 10240, 10241, 100000])
    assert _paper.prompt_multiplier(t).tolist() == [1.2, 1.2, 1.8, 1.8, 3.0, 3.0, 4.0, 4.0]
    # A100's published alpha (0.70 pJ/FLOP): 70 B -> 0.70e-12 * 6 * 70e9 = 0.294 J per token.
    a100 = T.simplified_per_token(70e9, 3000, "a100_sxm")
    assert a100["decode_energy_per_output_token_j"] == pytest.approx(0.294, rel=1e-12)
    assert a100["prefill_energy_per_input_token_j"] == pytest.approx(1.8 * 0.294, rel=1e-12)


def test_paper_scaling_factors_at_reference_size():
    # At N = 24e9 every (N / 24e9)^x is 1: gamma = 0.10, s_attn = 1 + 1.5, eta = 1 + 0.8.
    assert _paper.gamma(24e9) == pytest.approx(0.10)
    assert _paper.s_attn(24e9) == pytest.approx(2.5)
    assert _paper.eta(24e9) == pytest.approx(1.8)
    # gamma grows as N^0.8: doubling N multiplies it by 2^0.8.
    assert _paper.gamma(48e9) / _paper.gamma(24e9) == pytest.approx(2**0.8)


def test_paper_hand_worked_example():
    # N = 24e9 (gamma 0.1, s_attn 2.5, eta 1.8), n_l = 2, d = 4, T_in = 3, T_out = 2, H100.
    it = _paper.paper_items(24e9, 2, 4, 3, 2, alpha_tc_pj=0.52, e_hbm_pj=11.68)
    # C_pre = 6 N T_in + 2 n_l d T_in^2 = 4.32e11 + 2*2*4*9 = 4.32e11 + 144 FLOPs
    assert it[("compute", "prefill")] == pytest.approx(0.52e-12 * (4.32e11 + 144), rel=1e-12)
    # decode context sum = T_out T_in + T_out (T_out - 1) / 2 = 6 + 1 = 7
    # C_dec = 6 N T_out + 4 n_l d * 7 = 2.88e11 + 224 FLOPs
    assert it[("compute", "decode")] == pytest.approx(0.52e-12 * (2.88e11 + 224), rel=1e-12)
    # Bits_params = 16 * N * 0.1 = 3.84e10 bits -> 11.68e-12 * 1.8 * 3.84e10 = 0.8073216 J,
    # shared 3 : 2 between prefill and decode.
    assert it[("param_access", "prefill")] == pytest.approx(0.8073216 * 3 / 5, rel=1e-12)
    assert it[("param_access", "decode")] == pytest.approx(0.8073216 * 2 / 5, rel=1e-12)
    # Bits_KV = 2 * 16 * d * n_l * T_out = 512 bits -> 11.68e-12 * 1.8 * 512 J
    assert it[("kv_write", "decode")] == pytest.approx(11.68e-12 * 1.8 * 512, rel=1e-12)
    # Bits_attn = 2 * 16 * d * n_l * 7 = 1792 bits, times s_attn = 2.5 -> 4480 bits
    assert it[("attn_read", "decode")] == pytest.approx(11.68e-12 * 1.8 * 4480, rel=1e-12)
    assert it[("kv_write", "prefill")] == 0 and it[("attn_read", "prefill")] == 0


def test_paper_preset_through_estimate_uses_total_params_and_scales_with_batch():
    one = T.estimate(MIXTRAL, _wl(b=1), "h100_sxm", "paper")
    four = T.estimate(MIXTRAL, _wl(b=4), "h100_sxm", "paper")
    assert four["energy_j"] == pytest.approx(4 * one["energy_j"], rel=1e-12)  # no batching
    items = _paper.paper_items(total_params(MIXTRAL), 32, 4096, 512, 128, 0.52, 11.68)
    assert one["energy_j"] == pytest.approx(sum(items.values()), rel=1e-12)
    # The paper counts MoE at total size: Mixtral costs about what its 47 B dense twin does.
    dense = T.estimate(DENSE_47B, _wl(b=1), "h100_sxm", "paper")
    assert one["energy_j"] / dense["energy_j"] == pytest.approx(1.0, abs=0.02)


def test_paper_scaling_in_output_length():
    # Compute and KV writes grow linearly with T_out, attention reads quadratically.
    t_out = np.arange(100, 1100, 100)
    r = T.estimate(LLAMA3_8B, _wl(b=1, s=500, o=t_out), "h100_sxm", "paper")
    kv = r["breakdown.kv_write.decode_j"]
    assert np.allclose(kv / t_out, kv[0] / t_out[0], rtol=1e-12)
    attn = r["breakdown.attn_read.decode_j"]
    second = np.diff(attn, 2)
    assert np.all(second > 0) and np.allclose(second, second[0], rtol=1e-9)
    comp = r["breakdown.compute.decode_j"]
    # Compute is linear up to the attention FLOPs: its curvature is that term's alone, and it
    # is tiny next to the slope.
    assert np.diff(comp, 2) == pytest.approx(
        np.full(8, 0.52e-12 * 4 * 32 * 4096 * 100**2), rel=1e-6
    )
    assert np.max(np.abs(np.diff(comp, 2))) < 1e-2 * np.diff(comp)[0]


# ---------------------------------------------------------------------- corrected: hand-worked
TINY = Architecture(
    d_model=8, n_layers=1, n_heads=2, n_kv_heads=1, head_dim=4, d_ff=16, vocab_size=10
)


def test_corrected_hand_worked_example():
    cal = _cal(e_flop_pj=2.0, e_bit_pj=0.5, p_static_w=100.0)
    r = T.estimate(TINY, _wl(b=2, s=3, o=2), "h100_sxm", "corrected",
                   time_s={"prefill": 0.1, "decode": 0.3}, calibration=cal)  # fmt: skip
    # Params: qkv 8*(2+2*1)*4 = 128, out 2*4*8 = 64, SwiGLU 3*8*16 = 384, LM head 10*8 = 80:
    # matmul params per token = 656. Attention: 4 * n_l * n_heads * head_dim = 32 FLOPs per pair.
    # Prefill FLOPs = B (2 (656 - 80) T_in + 2 * 80) + B * 32 * T_in (T_in + 1) / 2
    #               = 2 (3456 + 160) + 2 * 32 * 6 = 7232 + 384 = 7616 -> x 2 pJ
    assert r["breakdown.compute.prefill_j"] == pytest.approx(2e-12 * 7616, rel=1e-12)
    # Decode FLOPs = B T_out 2 * 656 + B * 32 (T_out T_in + T_out (T_out + 1) / 2)
    #              = 5248 + 2 * 32 * 9 = 5824 -> x 2 pJ
    assert r["breakdown.compute.decode_j"] == pytest.approx(2e-12 * 5824, rel=1e-12)
    # Weights read per pass: 656 matmul + 8 * 2 layer norms + 8 final norm = 680 params = 1360 B.
    # One prefill pass, two decode steps; 0.5 pJ/bit = 4 pJ/byte.
    assert r["breakdown.param_access.prefill_j"] == pytest.approx(4e-12 * 1360, rel=1e-12)
    assert r["breakdown.param_access.decode_j"] == pytest.approx(4e-12 * 2720, rel=1e-12)
    # KV per token: 2 (K, V) * 1 layer * 1 kv head * 4 * 2 bytes = 16 B.
    # Writes: B T_in = 6 tokens -> 96 B; B T_out = 4 tokens -> 64 B.
    assert r["breakdown.kv_write.prefill_j"] == pytest.approx(4e-12 * 96, rel=1e-12)
    assert r["breakdown.kv_write.decode_j"] == pytest.approx(4e-12 * 64, rel=1e-12)
    # Decode reads B * 16 * (T_out T_in + T_out (T_out - 1) / 2) = 32 * 7 = 224 B; prefill
    # (one 128-row query block) reads B * 16 * T_in * (1 + 1) / 2 = 96 B.
    assert r["breakdown.attn_read.decode_j"] == pytest.approx(4e-12 * 224, rel=1e-12)
    assert r["breakdown.attn_read.prefill_j"] == pytest.approx(4e-12 * 96, rel=1e-12)
    # Activations per token: 2 B * (13*8 + 2*(2+2)*4 + 2*2*4 + 6*16) = 2 * 248 = 496 B.
    assert r["breakdown.activations.prefill_j"] == pytest.approx(4e-12 * 6 * 496, rel=1e-12)
    assert r["breakdown.activations.decode_j"] == pytest.approx(4e-12 * 4 * 496, rel=1e-12)
    # Static: 100 W x 1 GPU x the given times.
    assert r["breakdown.static.prefill_j"] == pytest.approx(10.0, rel=1e-12)
    assert r["breakdown.static.decode_j"] == pytest.approx(30.0, rel=1e-12)
    assert r["breakdown.allreduce.total_j"] == 0
    assert r["time_s"] == pytest.approx(0.4)


def test_totals_are_sums_of_items_and_per_token_definitions():
    r = T.estimate(LLAMA3_8B, _wl(b=8, s=1024, o=256, tp=2), "h100_sxm", "corrected")
    for ph in T.PHASES:
        items = sum(r[f"breakdown.{c}.{ph}_j"] for c in T.COMPONENTS)
        assert r[f"{ph}_energy_j"] == pytest.approx(items, rel=1e-12)
    for c in T.COMPONENTS:
        assert r[f"breakdown.{c}.total_j"] == pytest.approx(
            r[f"breakdown.{c}.prefill_j"] + r[f"breakdown.{c}.decode_j"], rel=1e-12
        )
    assert r["energy_j"] == pytest.approx(r["prefill_energy_j"] + r["decode_energy_j"], rel=1e-12)
    # One definition per name: energy per output token is the whole request's (prefill
    # included), as `dse predict` defines it; the paper's per-phase figures carry the phase.
    assert r["energy_per_output_token_j"] == pytest.approx(r["energy_j"] / (8 * 256))
    assert r["prefill_energy_per_input_token_j"] == pytest.approx(
        r["prefill_energy_j"] / (8 * 1024)
    )
    assert r["decode_energy_per_output_token_j"] == pytest.approx(r["decode_energy_j"] / (8 * 256))
    assert "energy_per_input_token_j" not in r
    assert r["energy_per_request_j"] == pytest.approx(r["energy_j"] / 8)
    assert r["energy_per_gpu_j"] == pytest.approx(r["energy_j"] / 2)
    assert r["energy_wh"] == pytest.approx(r["energy_j"] / 3600)
    assert all(r[f"breakdown.{c}.total_j"] >= 0 for c in T.COMPONENTS)


def test_corrected_scaling_in_output_length():
    t_out = np.arange(64, 704, 64)
    r = T.estimate(LLAMA3_8B, _wl(b=4, s=256, o=t_out), "h100_sxm", "corrected", time_s=1.0)
    kv = r["breakdown.kv_write.decode_j"]
    assert np.allclose(kv / t_out, kv[0] / t_out[0], rtol=1e-12)
    attn = r["breakdown.attn_read.decode_j"]
    assert np.all(np.diff(attn, 2) > 0) and np.allclose(np.diff(attn, 2), np.diff(attn, 2)[0])
    pa = r["breakdown.param_access.decode_j"]  # one weight read per decode step
    assert np.allclose(pa / t_out, pa[0] / t_out[0], rtol=1e-12)


def test_corrected_is_forward_only_two_flops_per_parameter():
    # Short prompt, batch 1: compute is ~2 FLOPs per matmul parameter per token, a third of K=6.
    cal = _cal(e_flop_pj=1.0)
    r = T.estimate(LLAMA3_8B, _wl(b=1, s=1, o=100), "h100_sxm", "corrected", 1.0, cal)
    from dse.spec.arch import matmul_params_per_token

    per_token = r["breakdown.compute.decode_j"] / 100 / 1e-12
    assert per_token == pytest.approx(2 * matmul_params_per_token(LLAMA3_8B), rel=0.01)


# ---------------------------------------------------------------------- corrections
def test_moe_counts_active_parameters():
    kw = {"gpu": "h100_sxm", "preset": "corrected", "time_s": 1.0}
    mix = T.estimate(MIXTRAL, _wl(b=1), **kw)["energy_j"]
    d13 = T.estimate(DENSE_13B, _wl(b=1), **kw)["energy_j"]
    d47 = T.estimate(DENSE_47B, _wl(b=1), **kw)["energy_j"]
    assert mix == pytest.approx(d13, rel=0.05)  # near the 13 B dense model
    assert mix < 0.5 * d47  # far from the 47 B one
    # Decode compute matches the active twin's exactly but for the router (d x E per layer).
    cm = T.estimate(MIXTRAL, _wl(b=1), **kw)["breakdown.compute.decode_j"]
    cd = T.estimate(DENSE_13B, _wl(b=1), **kw)["breakdown.compute.decode_j"]
    assert cm / cd == pytest.approx(1.0, abs=1e-3)


def test_moe_weight_traffic_grows_with_batch_to_all_experts():
    assert _corrected.experts_touched(8, 2, 1) == pytest.approx(2.0)
    assert _corrected.experts_touched(8, 2, 2) == pytest.approx(8 * (1 - 0.75**2))
    assert _corrected.experts_touched(8, 2, 10_000) == pytest.approx(8.0)
    assert _corrected.experts_touched(1, 1, 7) == 1.0
    kw = {"gpu": "h100_sxm", "preset": "corrected", "time_s": 1.0}
    big = T.estimate(MIXTRAL, _wl(b=256), **kw)["breakdown.param_access.decode_j"]
    dense = T.estimate(DENSE_47B, _wl(b=256), **kw)["breakdown.param_access.decode_j"]
    assert big == pytest.approx(dense, rel=0.01)  # a large batch touches every expert


def test_gqa_divides_kv_traffic_by_group_size():
    mha = Architecture(d_model=4096, n_layers=32, n_heads=32, n_kv_heads=32, d_ff=14336)
    gqa = Architecture(d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8, d_ff=14336)
    kw = {"gpu": "h100_sxm", "preset": "corrected", "time_s": 1.0}
    a = T.estimate(mha, _wl(b=4), **kw)
    b = T.estimate(gqa, _wl(b=4), **kw)
    for key in ("breakdown.kv_write.total_j", "breakdown.attn_read.total_j"):
        assert a[key] / b[key] == pytest.approx(32 / 8, rel=1e-12)
    # The paper ignores GQA: its KV bits are the same for both (energies differ only through
    # eta(N), N being a little larger for the MHA model).
    pa = T.estimate(mha, _wl(b=4), "h100_sxm", "paper")["breakdown.kv_write.total_j"]
    pb = T.estimate(gqa, _wl(b=4), "h100_sxm", "paper")["breakdown.kv_write.total_j"]
    eta_a, eta_b = _paper.eta(total_params(mha)), _paper.eta(total_params(gqa))
    assert pa / eta_a == pytest.approx(pb / eta_b, rel=1e-12)


def test_fp8_halves_weight_and_kv_traffic():
    kw = {"gpu": "h100_sxm", "preset": "corrected", "time_s": 1.0}
    bf16 = T.estimate(LLAMA3_8B, _wl(b=4), **kw)
    from dataclasses import replace

    fp8 = T.estimate(replace(LLAMA3_8B, weight_dtype="fp8", kv_dtype="fp8"), _wl(b=4), **kw)
    for key in ("breakdown.param_access.total_j", "breakdown.kv_write.total_j",
                "breakdown.attn_read.total_j"):  # fmt: skip
        assert fp8[key] / bf16[key] == pytest.approx(0.5, rel=1e-12)
    # H100 runs fp8 GEMMs at twice the bf16 rate: linear-layer compute energy halves too.
    assert fp8["breakdown.compute.total_j"] < 0.55 * bf16["breakdown.compute.total_j"]
    # A100 has no fp8 tensor cores: compute stays.
    a1 = T.estimate(LLAMA3_8B, _wl(b=4), "a100_sxm", "corrected", 1.0)
    a2 = T.estimate(replace(LLAMA3_8B, weight_dtype="fp8"), _wl(b=4), "a100_sxm", "corrected", 1.0)
    assert a2["breakdown.compute.total_j"] == pytest.approx(a1["breakdown.compute.total_j"])


def test_weights_are_shared_by_the_batch():
    kw = {"gpu": "h100_sxm", "preset": "corrected", "time_s": 1.0}
    one = T.estimate(LLAMA3_8B, _wl(b=1), **kw)
    many = T.estimate(LLAMA3_8B, _wl(b=64), **kw)
    # Decode weight traffic per batch does not depend on B; per request it falls as 1/B.
    assert many["breakdown.param_access.decode_j"] == pytest.approx(
        one["breakdown.param_access.decode_j"], rel=1e-12
    )
    assert many["energy_per_output_token_j"] < 0.2 * one["energy_per_output_token_j"]


def test_tensor_parallel_sums_over_gpus():
    kw = {"gpu": "h100_sxm", "preset": "corrected", "time_s": 2.0}
    tp1 = T.estimate(LLAMA3_8B, _wl(b=8, tp=1), **kw)
    tp4 = T.estimate(LLAMA3_8B, _wl(b=8, tp=4), **kw)
    for comp in ("compute", "param_access", "kv_write"):
        key = f"breakdown.{comp}.total_j"
        assert tp4[key] == pytest.approx(tp1[key], rel=1e-12)  # sharded work
    assert tp4["breakdown.static.total_j"] == pytest.approx(4 * tp1["breakdown.static.total_j"])
    assert tp1["breakdown.allreduce.total_j"] == 0 < tp4["breakdown.allreduce.total_j"]
    # 8 KV heads on 16 GPUs: each GPU keeps one replica, KV traffic doubles.
    tp16 = T.estimate(LLAMA3_8B, _wl(b=8, tp=16), **kw)
    assert tp16["breakdown.kv_write.total_j"] / tp1["breakdown.kv_write.total_j"] == pytest.approx(
        2
    )


def test_time_argument_replaces_the_roofline():
    cal = load_calibration()
    p_static = cal["gpus"]["h100_sxm"]["p_static_w"]
    roof = T.estimate(LLAMA3_8B, _wl(b=8, tp=2), "h100_sxm", "corrected")
    given = T.estimate(LLAMA3_8B, _wl(b=8, tp=2), "h100_sxm", "corrected", time_s=3.0)
    assert given["breakdown.static.total_j"] == pytest.approx(p_static * 2 * 3.0)
    assert given["time_s"] == pytest.approx(3.0)
    # A total is shared between phases in the roofline's ratio.
    share = roof["prefill_time_s"] / roof["time_s"]
    assert given["prefill_time_s"] == pytest.approx(3.0 * share)
    for c in ("compute", "param_access", "attn_read"):  # only static depends on time
        assert given[f"breakdown.{c}.total_j"] == roof[f"breakdown.{c}.total_j"]


def test_vectorised_batch_equals_scalar_calls():
    cols = {
        "d_model": [4096, 2048, 4096], "n_layers": [32, 24, 32], "n_heads": [32, 16, 32],
        "n_kv_heads": [8, 16, 8], "d_ff": [14336, 8192, 14336], "vocab_size": [128256, 32000, 32000],
        "n_experts": [1, 1, 8], "top_k": [1, 1, 2],
    }  # fmt: skip
    batch = Architecture.from_columns(cols, 3)
    wl = _wl(b=np.array([1, 16, 4]), s=np.array([128, 1024, 512]), o=np.array([64, 256, 32]),
             tp=np.array([1, 2, 4]))  # fmt: skip
    for preset in ("paper", "corrected"):
        out = T.estimate(batch, wl, "h100_sxm", preset)
        assert out["energy_j"].shape == (3,)
        for i in range(3):
            one = Architecture(**{k: v[i] for k, v in cols.items()})
            ref = T.estimate(one, {k: v[i] for k, v in wl.items()}, "h100_sxm", preset)
            for key in ("energy_j", "breakdown.static.decode_j", "breakdown.attn_read.total_j"):
                assert out[key][i] == pytest.approx(ref[key], rel=1e-12)


def test_sum_max_affine_matches_a_loop():
    rng = np.random.default_rng(0)
    for _ in range(200):
        a0, a1, b0, b1 = rng.normal(size=4) * [10, 1, 10, 1]
        n = int(rng.integers(0, 60))
        t = np.arange(1, n + 1)
        brute = np.maximum(a0 + a1 * t, b0 + b1 * t).sum()
        assert _corrected.sum_max_affine(a0, a1, b0, b1, n) == pytest.approx(brute, abs=1e-9)


def test_roofline_time_is_plausible_for_decode():
    # Batch 1 decode of an 8 B bf16 model on H100 is bound by reading 16 GB per step:
    # at 3.35 TB/s that is ~4.8 ms; the roofline (with overheads) lies within 2x of it.
    r = T.estimate(LLAMA3_8B, _wl(b=1, s=128, o=100), "h100_sxm", "corrected")
    step = r["decode_time_s"] / 100
    assert 4.0e-3 < step < 10e-3


# ---------------------------------------------------------------------- constants
def test_uncalibrated_gpus_are_marked():
    assert T.paper_constants("h100_sxm").calibrated
    assert T.paper_constants("a100_sxm_40gb").alpha_tc_pj == 0.70
    h200 = T.paper_constants("h200_sxm")
    assert not h200.calibrated and "uncalibrated" in h200.source
    # Same die and board power as H100: the derived alpha equals H100's.
    assert h200.alpha_tc_pj == pytest.approx(0.52) and h200.e_hbm_pj == 11.68
    out = T.estimate(LLAMA3_8B, _wl(), "h200_sxm", "paper")
    assert not out["calibrated"]
    cor = T.corrected_coefficients("h200_sxm")
    assert not cor.calibrated and "h100_sxm" in cor.source
    assert T.corrected_coefficients("h100_sxm").calibrated


def test_calibration_manifest():
    cal = load_calibration()
    assert cal["format_version"] == 1
    for gpu in ("h100_sxm", "a100_sxm_40gb"):
        e = cal["gpus"][gpu]
        assert 0 < e["e_flop_pj"] < 10 and 0 < e["e_bit_pj"] < 100
        assert 0 < e["p_static_w"] < 700 and 0 < e["u_memory"] <= 1
    paths = {f["path"] for f in cal["data_files"]}
    assert "argonne/Plots/Fig_16_a_b/power_results.csv" in paths
    assert any(p.startswith("ml-energy-v2/") for p in paths)
    assert all(re.fullmatch(r"[0-9a-f]{64}", f["sha256"]) for f in cal["data_files"])
    # Held-out scores: the corrected preset beats the paper on every measured source.
    for row in cal["validation"]["by_source"]:
        assert row["corrected_mape"] < row["paper_mape"], row


def test_bad_calibration_files(tmp_path: Path):
    p = tmp_path / "c.json"
    p.write_text(json.dumps({"format_version": 9, "gpus": {}}))
    with pytest.raises(ArtifactError, match="format_version"):
        load_calibration(p)
    p.write_text(json.dumps({"format_version": 1, "gpus": {"h100_sxm": {"e_flop_pj": -1}}}))
    with pytest.raises(ArtifactError, match=r"gpus\.h100_sxm\.e_flop_pj"):
        load_calibration(p)
    with pytest.raises(ArtifactError, match="cannot read"):
        load_calibration(tmp_path / "missing.json")


def test_user_errors_are_config_errors():
    with pytest.raises(ConfigError, match="preset"):
        T.estimate(LLAMA3_8B, _wl(), "h100_sxm", "magic")
    with pytest.raises(ConfigError, match=r"workload\.batch_size: must be >= 1, got 0"):
        T.estimate(LLAMA3_8B, _wl(b=0), "h100_sxm")
    with pytest.raises(ConfigError, match="unknown GPU"):
        T.estimate(LLAMA3_8B, _wl(), "tpu")
    with pytest.raises(ConfigError, match="time_s"):
        T.estimate(LLAMA3_8B, _wl(), "h100_sxm", time_s=-1.0)
    assert T.estimate(LLAMA3_8B, Workload(), "h100_sxm")["energy_j"] > 0


# ---------------------------------------------------------------------- measured data
@pytest.mark.slow
def test_calibration_reproduces_from_the_data(data_dir: Path):
    from dse.estimators import calibrate
    from dse.files import sha256_file

    cal = load_calibration()
    # The data files are the ones the manifest names (same bytes).
    for f in cal["data_files"][:3]:
        assert sha256_file(data_dir / f["path"]) == f["sha256"], f["path"]
    tables = calibrate.load_tables(data_dir)
    fresh = calibrate.fit(tables)
    for gpu, entry in cal["gpus"].items():
        for key in (*calibrate.ENERGY_KEYS, *calibrate.TIME_KEYS):
            assert fresh["gpus"][gpu][key] == pytest.approx(entry[key], rel=1e-4, abs=1e-9)


# ---------------------------------------------------------------------- dse energy
ARGS = ["energy", "--d-model", "4096", "--n-layers", "32", "--n-heads", "32",
        "--n-kv-heads", "8", "--d-ff", "14336", "--vocab-size", "128256"]  # fmt: skip


def test_cli_table(capsys):
    assert main([*ARGS, "--batch-size", "8", "--tp", "2"]) == 0
    out = capsys.readouterr().out
    assert "preset paper" in out and "preset corrected" in out
    for comp in T.COMPONENTS:
        assert comp in out
    assert "per output token" in out and "parameters-only" in out


def test_cli_json_matches_library(capsys):
    assert main([*ARGS, "--preset", "corrected", "--gpu", "a100_sxm_40gb", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc["estimates"]) == {"corrected"}
    ref = T.estimate(LLAMA3_8B, Workload(1, 1024, 256, 1), "a100_sxm_40gb", "corrected")
    assert doc["estimates"]["corrected"]["energy_j"] == pytest.approx(float(ref["energy_j"]))
    assert doc["config"]["workload"]["prompt_tokens"] == 1024


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--n-heads", "48"], "n_heads: must divide d_model=4096"),
        (["--tp", "3"], "--tp: must be a power of two in [1, 1024], got 3"),
        (["--gpu", "tpu9"], "--gpu: must be one of"),
        (["--batch-size", "0"], "--batch-size: must be an integer in [1, 1048576], got 0"),
        (["--time-s", "-2"], "--time-s"),
        (["--weight-dtype", "fp4"], "--weight-dtype: must be one of"),
    ],
)
def test_cli_errors_exit_2_with_message(capsys, extra, message):
    assert main([*ARGS, *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_cli_needs_an_architecture(capsys):
    assert main(["energy", "--n-layers", "32"]) == 2
    assert "--d-model: required unless --model is given" in capsys.readouterr().err


def test_cli_model_from_catalogue(capsys):
    pytest.importorskip("dse.spec.catalogue")
    assert main(["energy", "--model", "Mixtral-8x7B", "--preset", "corrected", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["config"]["active_params"] < 0.3 * doc["config"]["total_params"]
    assert main(["energy", "--model", "no-such-model"]) == 2
    assert "no-such-model" in capsys.readouterr().err
