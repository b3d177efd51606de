"""Our corrected tokens-to-watt-hours accounting: work counts, roofline time, energy items.

What changes from the paper (`_paper.py`), each with its reason:
- Forward FLOPs are 2 per active matmul parameter per token (not the training constant 6),
  plus attention's 4 * n_layers * n_heads * head_dim FLOPs per (query, key) pair; MoE layers
  count their top_k active experts only; logits are computed for the last prompt token only.
- KV bytes use n_kv_heads x head_dim (GQA / MQA) and the KV dtype; weight bytes the weight dtype.
- Attention families (docs/architecture.md "Attention families"), through the dse.spec.arch
  helpers: a sliding layer scores and reads at most sliding_window keys per query (a window
  covering the whole sequence counts exactly as full attention); MLA caches and reads its latent
  (kv_lora_rank + qk_rope_head_dim per token and layer, held whole on every GPU); a linear layer
  has no growing KV but reads and writes its constant state once per sequence and forward pass,
  and its scan's FLOPs count as attention FLOPs. A model of full GQA layers only gets exactly
  the numbers of the GQA formulas.
- Weights are read once per forward pass and shared by every token in it: a prefill pass reads
  them once for the whole batch, each decode step once for its B tokens. For MoE the experts
  read are those touched by at least one token of the pass, E * (1 - (1 - k/E)^n) per layer
  under uniform routing.
- Static power (leakage, clocks, fans of the memory system, host-side gaps) burns for the
  whole time on every GPU of the tensor-parallel group: p_static_w * tp * time_s.
- Tensor parallelism: work is sharded, so FLOPs and weight bytes summed over GPUs do not change,
  but KV heads are replicated when n_kv_heads < tp, and every layer does two all-reduces.

All counts are for the whole batch summed over the GPUs of the group. Shapes broadcast.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dse.spec import arch as A

# FlashAttention query tile (rows): a prefill query block re-reads the K/V of every earlier
# block from HBM, so prefill attention reads grow like T_in^2 / (2 * tile).
FLASH_QUERY_TILE = 128
# Activations stay in 16 bits between kernels.
ACT_BYTES = 2.0

COMPONENTS = (
    "compute",
    "param_access",
    "kv_write",
    "attn_read",
    "activations",
    "allreduce",
    "static",
)
PHASES = ("prefill", "decode")


@dataclass(frozen=True)
class Coefficients:
    """Free factors of the corrected preset for one GPU (units in the names)."""

    e_flop_pj: float  # effective energy per bf16 tensor FLOP, pJ
    e_bit_pj: float  # effective energy per bit moved to or from HBM, pJ
    p_static_w: float  # per-GPU power while serving that does not scale with work, W
    u_compute: float  # achieved fraction of peak FLOP/s in the roofline
    u_memory: float  # achieved fraction of peak HBM bandwidth in the roofline
    pass_overhead_s: float  # fixed time per forward pass (launches, scheduler), s
    seq_overhead_s: float  # host time per sequence per forward pass (sampling, bookkeeping), s
    allreduce_latency_s: float  # fixed time of one tensor-parallel all-reduce, s
    calibrated: bool  # False: derived from another GPU's constants (see _constants.py)
    source: str  # where the numbers come from, in words


def _f(x: Any) -> np.ndarray:
    return np.asarray(x, dtype=float)


def experts_touched(n_experts: Any, top_k: Any, n_tokens: Any) -> np.ndarray:
    """Expected distinct experts hit per layer by n_tokens tokens routed uniformly (1 if dense)."""
    e, k, n = _f(n_experts), _f(top_k), _f(n_tokens)
    miss = np.clip(1.0 - k / np.maximum(e, 1.0), 0.0, 1.0)
    return np.where(e > 1, e * (1.0 - miss**n), 1.0)


def counts(
    a: A.Architecture,
    batch_size: Any,
    prompt_tokens: Any,
    output_tokens: Any,
    tensor_parallel: Any = 1,
) -> dict[str, Any]:
    """Work of one static batch, summed over GPUs: FLOPs and bytes by (quantity, phase).

    Keys: flops_linear_<phase>, flops_attn_<phase>, weight_bytes_<phase>, kv_write_bytes_<phase>,
    attn_read_bytes_<phase>, act_bytes_<phase>, allreduce_bytes_<phase>, plus the per-decode-step
    affine pieces used by the roofline (see `roofline_time_s`).
    """
    a = a.resolved()
    b, s, o, tp = _f(batch_size), _f(prompt_tokens), _f(output_tokens), _f(tensor_parallel)
    L, d, h = _f(a.n_layers), _f(a.d_model), _f(a.n_heads)
    hd, v = _f(a.head_dim), _f(a.vocab_size)
    e, k = _f(a.n_experts), _f(a.top_k)

    pb = A.param_breakdown(a)
    p_mm = _f(A.matmul_params_per_token(a))  # active matmul params incl. the LM head
    lm = v * d
    # QK^T and PV FLOPs per (query, key), summed over the full layers (4 L h hd for a model of
    # full GQA layers) and over the sliding ones, which see at most `win` keys.
    full_pair, slid_pair = (_f(x) for x in A.attention_flops_per_key(a))
    win = _f(a.sliding_window)
    # Linear layers: the state step per token (decode) and with the chunked scan (prefill).
    n_linear = _f(A.layer_kinds(a)[2])
    lin_dec = n_linear * _f(A.linear_flops_per_token(a))
    lin_pre = n_linear * _f(A.linear_flops_per_token(a, prefill=True))
    # Decode token t = 1..T_out sees T_in + t keys; a sliding layer min(T_in + t, win), summed
    # over t by the prefix sums of min(i, win). When the window covers the whole sequence the
    # sliding layers are affine in t like the full ones (and count exactly as full attention);
    # else the decode roofline takes their mean per step.
    covered = win >= s + o
    slid_keys_dec = _f(A.sliding_keys_sum(s + o, win)) - _f(A.sliding_keys_sum(s, win))

    # ---- FLOPs. Prefill: logits for the last prompt token only; token i sees i keys.
    flops_lin_pre = b * (2.0 * (p_mm - lm) * s + 2.0 * lm)
    flops_attn_pre = (
        b * full_pair * s * (s + 1.0) / 2.0
        + b * slid_pair * _f(A.sliding_keys_sum(s, win))
        + b * s * lin_pre
    )
    flops_lin_dec = b * o * 2.0 * p_mm
    flops_attn_dec = (
        b * full_pair * (o * s + o * (o + 1.0) / 2.0)
        + b * slid_pair * slid_keys_dec
        + b * o * lin_dec
    )

    # ---- Weight bytes per forward pass of n tokens.
    wb = _f(A.dtype_bytes(a.weight_dtype))
    active_experts = _f(pb["active/moe/experts"])
    one_expert = np.where(e > 1, _f(pb["moe/experts"]) / np.maximum(L * e, 1.0), 0.0)
    # Every active parameter but the experts is read by every pass; the embedding is a gather of
    # a few rows (skipped) while the LM head matrix is read whole, tied or not.
    always = _f(pb["active"]) - _f(pb["embedding"]) - _f(pb["lm_head"]) + lm - active_experts

    def pass_weight_bytes(n_tokens: Any) -> np.ndarray:
        return (always + L * one_expert * experts_touched(e, k, n_tokens)) * wb

    w_pre = pass_weight_bytes(b * s)  # one prefill pass for the whole batch
    w_step = pass_weight_bytes(b)  # one decode step for B tokens
    w_dec = o * w_step

    # ---- KV cache, bytes per token summed over GPUs: GQA-aware, replicated across GPUs when
    # n_kv_heads < tp (MLA's latent on every GPU); full layers' and sliding layers' apart.
    full_tok, slid_tok = (_f(x) * tp for x in A.kv_rates_per_gpu(a, tp))
    kv_tok = full_tok + slid_tok
    # Linear layers' state of one sequence, summed over GPUs; read and written once per
    # sequence and forward pass (a prefill pass starts from zero: written only).
    state = _f(A.state_bytes(a, tp)) * tp
    # Every token's K and V are written, a sliding layer's too (its window then drops them).
    kv_w_pre = b * s * kv_tok + b * state
    kv_w_dec = b * o * kv_tok + b * o * state
    # Decode token t reads the T_in + t - 1 cached tokens before it (a sliding layer at most
    # win of them: the prefix sums of min(i, win) from i = T_in to T_in + T_out - 1).
    slid_read_dec = _f(A.sliding_keys_sum(s + o - 1.0, win)) - _f(A.sliding_keys_sum(s - 1.0, win))
    kv_r_dec = (
        b * full_tok * (o * s + o * (o - 1.0) / 2.0) + b * slid_tok * slid_read_dec + b * o * state
    )
    # Prefill (FlashAttention): query block j re-reads key blocks 1..j, s / n_blocks tokens
    # each; a sliding layer's query block reads at most the ceil(win / tile) + 1 blocks its
    # window spans: sum over j of min(j, that), the same prefix sum.
    n_blocks = np.ceil(s / FLASH_QUERY_TILE)
    win_blocks = np.ceil(win / FLASH_QUERY_TILE) + 1.0
    kv_r_pre = b * full_tok * s * (n_blocks + 1.0) / 2.0 + b * slid_tok * s / n_blocks * _f(
        A.sliding_keys_sum(n_blocks, win_blocks)
    )

    # ---- Activations written and read between kernels, per token per layer, in elements:
    # norms, QKV, attention output, o-proj, residual adds (13 d), the FFN's inner width.
    ff = np.where(e > 1, k * _f(a.d_ff_expert) + _f(a.shared_expert_d_ff), _f(a.d_ff))
    ff_passes = np.where(np.asarray(a.gated_mlp), 6.0, 4.0)
    # The QKV and output terms count on the layers with a mixer (every layer but Nemotron-H's
    # MLP-only ones; a linear layer stands in with the same widths), the FFN's on the layers
    # with an FFN; MLA's QKV is its queries, latent and up-projected K and V.
    qkv = _f(A.qkv_width_per_gpu(a, 1))
    ffn_layers = sum(_f(x) for x in A.ffn_layers(a))
    act_tok = ACT_BYTES * (
        L * 13.0 * d
        + _f(A.mixer_layers(a)) * (2.0 * qkv + 2.0 * h * hd)
        + ffn_layers * ff_passes * ff
    )
    act_pre = b * s * act_tok
    act_dec = b * o * act_tok

    # ---- Tensor-parallel all-reduces: 2 per layer of n_tokens x d 16-bit values; a ring moves
    # 2 (tp - 1) / tp of the message per GPU, read and written: 4 (tp - 1) messages in all.
    msg_per_token = 2.0 * L * d * ACT_BYTES
    ar_pre = 4.0 * (tp - 1.0) * b * s * msg_per_token
    ar_dec = 4.0 * (tp - 1.0) * b * o * msg_per_token

    return {
        "flops_linear_prefill": flops_lin_pre,
        "flops_linear_decode": flops_lin_dec,
        "flops_attn_prefill": flops_attn_pre,
        "flops_attn_decode": flops_attn_dec,
        "weight_bytes_prefill": w_pre,
        "weight_bytes_decode": w_dec,
        "kv_write_bytes_prefill": kv_w_pre,
        "kv_write_bytes_decode": kv_w_dec,
        "attn_read_bytes_prefill": kv_r_pre,
        "attn_read_bytes_decode": kv_r_dec,
        "act_bytes_prefill": act_pre,
        "act_bytes_decode": act_dec,
        "allreduce_bytes_prefill": ar_pre,
        "allreduce_bytes_decode": ar_dec,
        # Decode step t (1-based): FLOPs = f0 + f1 * t, bytes = m0 + m1 * t. Sliding layers
        # whose window is shorter than the sequence enter with their mean per step.
        "step_flops0": b * (2.0 * p_mm + full_pair * s)
        + b * slid_pair * np.where(covered, s, slid_keys_dec / o)
        + b * lin_dec,
        "step_flops1": b * full_pair + b * np.where(covered, slid_pair, 0.0),
        # Step t writes one KV entry per sequence and reads the T_in + t - 1 before it; the
        # linear layers read and write their state.
        "step_bytes0": w_step
        + b * full_tok * s
        + b * act_tok
        + b * slid_tok * np.where(covered, s, slid_read_dec / o + 1.0)
        + 2.0 * b * state,
        "step_bytes1": b * full_tok + b * np.where(covered, slid_tok, 0.0),
        "step_allreduce_msg_bytes": b * d * ACT_BYTES,
        "prefill_allreduce_msg_bytes": b * s * d * ACT_BYTES,
        "n_layers": L,
    }


def sum_max_affine(a0: Any, a1: Any, b0: Any, b1: Any, n: Any) -> np.ndarray:
    """Sum over t = 1..n of max(a0 + a1 t, b0 + b1 t), in closed form (vectorised).

    max(f, g) = g + max(f - g, 0), and f - g = c0 + c1 t is positive on one side of
    t* = -c0 / c1; the positive part is an arithmetic series.
    """
    a0, a1, b0, b1, n = (_f(x) for x in (a0, a1, b0, b1, n))
    c0, c1 = a0 - b0, a1 - b1
    base = n * b0 + b1 * n * (n + 1.0) / 2.0
    safe_c1 = np.where(c1 == 0, 1.0, c1)
    t_star = -c0 / safe_c1
    lo = np.where(c1 > 0, np.clip(np.floor(t_star) + 1.0, 1.0, n + 1.0), 1.0)
    hi = np.where(c1 > 0, n, np.clip(np.ceil(t_star) - 1.0, 0.0, n))
    m = np.maximum(hi - lo + 1.0, 0.0)
    pos = c0 * m + c1 * (lo + hi) * m / 2.0
    pos = np.where(c1 == 0, n * np.maximum(c0, 0.0), pos)
    return base + np.maximum(pos, 0.0)


def roofline_time_s(
    c: dict[str, Any],
    batch_size: Any,
    output_tokens: Any,
    tensor_parallel: Any,
    peak_flops_per_s: Any,
    hbm_bw_bytes_per_s: Any,
    nvlink_bw_bytes_per_s: Any,
    coef: Coefficients,
) -> dict[str, np.ndarray]:
    """Prefill and decode time of the batch (s): per pass max(compute, memory) + comm + overhead.

    Each GPU does 1/tp of the work at u_compute x peak FLOP/s and u_memory x peak bandwidth;
    every pass adds pass_overhead_s + seq_overhead_s * (sequences in the pass) of host time and
    2 n_layers all-reduces of allreduce_latency_s + message / NVLink bandwidth when tp > 1.
    """
    tp = _f(tensor_parallel)
    o, b = _f(output_tokens), _f(batch_size)
    flops_rate = tp * _f(peak_flops_per_s) * coef.u_compute
    bytes_rate = tp * _f(hbm_bw_bytes_per_s) * coef.u_memory
    ring = np.where(tp > 1, 2.0 * (tp - 1.0) / tp, 0.0)
    ar_count = np.where(tp > 1, 2.0 * c["n_layers"], 0.0)  # all-reduces per pass

    def comm_s(msg_bytes: Any) -> np.ndarray:
        return ar_count * coef.allreduce_latency_s + ar_count * _f(msg_bytes) * ring / _f(
            nvlink_bw_bytes_per_s
        )

    pre_flops = c["flops_linear_prefill"] + c["flops_attn_prefill"]
    pre_bytes = (
        c["weight_bytes_prefill"]
        + c["kv_write_bytes_prefill"]
        + c["attn_read_bytes_prefill"]
        + c["act_bytes_prefill"]
    )
    t_pre = (
        np.maximum(pre_flops / flops_rate, pre_bytes / bytes_rate)
        + comm_s(c["prefill_allreduce_msg_bytes"])
        + coef.pass_overhead_s
        + coef.seq_overhead_s * b
    )
    t_dec = sum_max_affine(
        c["step_flops0"] / flops_rate,
        c["step_flops1"] / flops_rate,
        c["step_bytes0"] / bytes_rate,
        c["step_bytes1"] / bytes_rate,
        o,
    ) + o * (comm_s(c["step_allreduce_msg_bytes"]) + coef.pass_overhead_s + coef.seq_overhead_s * b)
    return {"prefill": t_pre, "decode": t_dec}


def energy_items(
    c: dict[str, Any],
    phase_time_s: dict[str, Any],
    tensor_parallel: Any,
    coef: Coefficients,
    compute_scale: Any = 1.0,
) -> dict[tuple[str, str], np.ndarray]:
    """Joules by (component, phase) for the whole batch, summed over GPUs.

    `compute_scale` multiplies the energy of linear-layer FLOPs: the bf16 peak over the peak of
    the tensor cores the weights run on (0.5 where fp8 weights run on fp8 tensor cores at twice
    the bf16 rate for the same power, 0.25 for nvfp4 on Blackwell's FP4 ones; 1 otherwise).
    """
    e_flop = coef.e_flop_pj * 1e-12
    e_bit = coef.e_bit_pj * 1e-12 * 8.0  # J per byte
    tp = _f(tensor_parallel)
    out: dict[tuple[str, str], np.ndarray] = {}
    for ph in PHASES:
        out[("compute", ph)] = e_flop * (
            _f(compute_scale) * c[f"flops_linear_{ph}"] + c[f"flops_attn_{ph}"]
        )
        out[("param_access", ph)] = e_bit * c[f"weight_bytes_{ph}"]
        out[("kv_write", ph)] = e_bit * c[f"kv_write_bytes_{ph}"]
        out[("attn_read", ph)] = e_bit * c[f"attn_read_bytes_{ph}"]
        out[("activations", ph)] = e_bit * c[f"act_bytes_{ph}"]
        out[("allreduce", ph)] = e_bit * c[f"allreduce_bytes_{ph}"]
        out[("static", ph)] = coef.p_static_w * tp * _f(phase_time_s[ph])
    return out
