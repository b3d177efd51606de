"""The "tokens to watt-hours" estimator exactly as published (Vartziotis et al., 2026).

    E_GPU = alpha_TC * C_TC + e_HBM * Q_HBM * eta(N)

with K = 6 FLOPs per parameter per token, 16-bit weights and KV cache, KV bytes from d_model
(no GQA) and MoE models counted at their total parameter count. Nothing here is fitted by us:
every constant is the paper's (`../shared/docs/methods.md` section 2).

Where the printed equations leave a choice, the choice is written next to it:
- gamma(N), s_attn(N), eta(N) use the exponents as printed (0.8, 0.9, 0.8); the summary warns
  that the published table is hard to read and the exponents may be swapped.
- The paper gives one request-level parameter-traffic term, Bits_params; to split prefill from
  decode we share it in proportion to tokens (T_in : T_out). Totals do not depend on this.
- A batch of B identical requests costs B times one request: the paper has no batching.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# FLOPs per parameter per token. The paper uses the training constant (6); forward-only
# inference is about 2 (the corrected preset uses 2).
K_PAPER = 6.0
# Bits per weight and per KV element (fp16 / bf16).
BITS_W = 16.0
BITS_KV = 16.0
# Reference size of the calibrated scaling factors (24 B parameters).
N_REF = 24e9

# Published per-GPU constants: alpha_TC in pJ/FLOP, e_HBM in pJ/bit. The paper's "A100" row is
# used for both A100 variants in the registry, and its "H100 / GH200" row for those two.
PUBLISHED: dict[str, tuple[float, float]] = {
    "h100_sxm": (0.52, 11.68),
    "gh200": (0.52, 11.68),
    "a100_sxm": (0.70, 13.11),
    "a100_sxm_40gb": (0.70, 13.11),
}

# Prompt-length multiplier M(T_in) of the simplified estimator: (upper bound of T_in, M).
M_STEPS: tuple[tuple[float, float], ...] = ((2048, 1.2), (5120, 1.8), (10240, 3.0), (np.inf, 4.0))


def gamma(n_params: Any) -> Any:
    """Effective fraction of the weights read from HBM per request (parameter reuse)."""
    return 0.10 * (np.asarray(n_params, dtype=float) / N_REF) ** 0.8


def s_attn(n_params: Any) -> Any:
    """Attention-read traffic multiplier (calibrated by the paper)."""
    return 1.0 + 1.5 * (np.asarray(n_params, dtype=float) / N_REF) ** 0.9


def eta(n_params: Any) -> Any:
    """Memory-inefficiency factor applied to all HBM energy."""
    return 1.0 + 0.8 * (np.asarray(n_params, dtype=float) / N_REF) ** 0.8


def prompt_multiplier(prompt_tokens: Any) -> Any:
    """M(T_in): input-token energy relative to output-token energy in the simplified estimator."""
    t = np.asarray(prompt_tokens, dtype=float)
    out = np.full(t.shape, M_STEPS[-1][1])
    for upper, m in reversed(M_STEPS):
        out = np.where(t <= upper, m, out)
    return out if out.ndim else float(out)


def simplified_per_token(n_params: Any, prompt_tokens: Any, alpha_tc_pj: float) -> dict[str, Any]:
    """Parameters-only estimator: E_out/token = alpha * K * N, E_in/token = M(T_in) * E_out/token.

    Compute only (alpha = alpha_TC), as in the paper's per-token table: 70 B on H100 gives
    0.52e-12 J/FLOP * 6 * 70e9 = 0.2184 J per output token.
    """
    e_out = alpha_tc_pj * 1e-12 * K_PAPER * np.asarray(n_params, dtype=float)
    e_in = prompt_multiplier(prompt_tokens) * e_out
    # The paper's per-token figures are per phase: decode energy per output token and prefill
    # energy per input token (named so; `energy_per_output_token_j` means the whole request's).
    return {"decode_energy_per_output_token_j": e_out, "prefill_energy_per_input_token_j": e_in}


def paper_items(
    n_params: Any,
    n_layers: Any,
    d_model: Any,
    prompt_tokens: Any,
    output_tokens: Any,
    alpha_tc_pj: float,
    e_hbm_pj: float,
) -> dict[tuple[str, str], Any]:
    """Energy items of ONE request in joules, keyed by (component, phase).

    Components: compute, param_access, kv_write, attn_read; phases: prefill, decode.
    """
    n = np.asarray(n_params, dtype=float)
    nl = np.asarray(n_layers, dtype=float)
    d = np.asarray(d_model, dtype=float)
    t_in = np.asarray(prompt_tokens, dtype=float)
    t_out = np.asarray(output_tokens, dtype=float)
    alpha = alpha_tc_pj * 1e-12  # J/FLOP
    e_bit = e_hbm_pj * 1e-12  # J/bit
    eta_n = eta(n)

    # Decode context sum: output token t (t = 1..T_out) sees T_in + t - 1 earlier tokens.
    ctx_dec = t_out * t_in + t_out * (t_out - 1.0) / 2.0
    c_pre = K_PAPER * n * t_in + 2.0 * nl * d * t_in**2  # C_pre,attn = 2 n_l d T_in^2
    c_dec = K_PAPER * n * t_out + 4.0 * nl * d * ctx_dec  # C_dec,attn = 4 n_l d (...)

    bits_params = BITS_W * n * gamma(n)  # one request's parameter traffic
    share_pre = t_in / (t_in + t_out)
    bits_kv = 2.0 * BITS_KV * d * nl * t_out  # K and V of every generated token
    bits_attn = 2.0 * BITS_KV * d * nl * ctx_dec  # KV-cache reads during decode

    zero = np.zeros(np.broadcast(n, nl, d, t_in, t_out).shape)
    return {
        ("compute", "prefill"): alpha * c_pre + zero,
        ("compute", "decode"): alpha * c_dec + zero,
        ("param_access", "prefill"): e_bit * eta_n * bits_params * share_pre + zero,
        ("param_access", "decode"): e_bit * eta_n * bits_params * (1.0 - share_pre) + zero,
        ("kv_write", "prefill"): zero,
        ("kv_write", "decode"): e_bit * eta_n * bits_kv + zero,
        ("attn_read", "prefill"): zero,
        ("attn_read", "decode"): e_bit * eta_n * s_attn(n) * bits_attn + zero,
    }
