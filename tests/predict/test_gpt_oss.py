"""gpt-oss as the catalogue describes it and as `dse predict` prices it (issue 33: its ml-energy
v3 serving energy was +50% on H100, docs/accuracy.md "Serving on today's engines").

The architecture against OpenAI's model card (total 20.91B / 116.83B; active per token, the
unembedding counted and the input embedding not, 3.61B / 5.13B) and config.json (alternating
sliding-window (128 tokens) and full attention); the MXFP4 experts (`weight_dtype: int4`, the
nearest 4-bit dtype) priced with H100's 4-bit weight-only MoE table (vLLM's gpt-oss Triton
kernel), not the bf16 one: at 8 decoding sequences its MoE block is 1.3x the time of reading
the touched experts' 4.25-bit weights, where the bf16 table read 2.9x."""

from __future__ import annotations

import numpy as np
import pytest

from dse.predict import predict
from dse.spec import arch as A
from dse.spec.catalogue import lookup_model
from dse.spec.hardware import get_gpu
from dse.spec.pattern import layer_counts

# name: (layers, experts, total, active) from the model card
CARD = {
    "openai/gpt-oss-20b": (24, 32, 20.91e9, 3.61e9),
    "openai/gpt-oss-120b": (36, 128, 116.83e9, 5.13e9),
}


@pytest.mark.parametrize("name", sorted(CARD))
def test_catalogue_entry_is_the_published_architecture(name: str) -> None:
    L, E, total, active = CARD[name]
    a = lookup_model(name)
    assert (a.n_layers, a.d_model, a.n_heads, a.n_kv_heads, a.head_dim) == (L, 2880, 64, 8, 64)
    assert (a.n_experts, a.top_k, a.d_ff_expert, a.vocab_size) == (E, 4, 2880, 201088)
    assert not a.tied_embeddings and a.qkv_bias
    # alternating sliding (128 tokens) and full attention, sliding first (layer_types)
    assert a.attention_pattern == "sliding,full" and a.sliding_window == 128
    full, sliding, linear = (int(x) for x in layer_counts(a.attention_pattern, a.n_layers))
    assert (full, sliding, linear) == (L // 2, L // 2, 0)
    # the biases and sinks the Architecture has no field for are ~0.04% of the weights
    assert A.total_params(a) == pytest.approx(total, rel=0.001)
    embedding = A.param_breakdown(a)["embedding"]
    assert A.active_params(a) - embedding == pytest.approx(active, rel=0.01)


def _gpt_oss_120b(batch: int, weight_dtype: str, gpu: str = "h100_sxm") -> dict[str, list]:
    cfg = lookup_model("openai/gpt-oss-120b").to_dict()
    cfg.update(weight_dtype=weight_dtype, gpu=gpu, batch_size=batch, prompt_tokens=200,
               output_tokens=1024, tensor_parallel=1)  # fmt: skip
    return {k: [v] for k, v in cfg.items()}


@pytest.mark.parametrize("gpu", ["h100_sxm", "b200_sxm"])
def test_4bit_experts_priced_near_their_weight_floor(gpu: str) -> None:
    """A decode step's MoE block, 36 layers at 8 sequences: above the roofline floor of the
    expert weights it touches at 4.25 bits (MXFP4's 4-bit values + an 8-bit scale per 32) and
    within 2.5x of it (vLLM's measured kernel at gpt-oss-20b's layout: 2.4x at 8 tokens on
    H100); the bf16 table this was priced with before: 2.9x. B200 has its own 4-bit model."""
    cfg = _gpt_oss_120b(8, "int4", gpu)
    p = predict(cfg)
    steps = cfg["output_tokens"][0] - 1
    moe_step = float(p["breakdown.decode.ffn/moe_s"][0]) / steps
    E, k, T, L = 128, 4, 8, 36
    touched = E * (1 - (1 - k / E) ** T)
    floor = L * touched * 3 * 2880 * 2880 * 4.25 / 8 / get_gpu(gpu).hbm_bw_bytes_per_s
    assert floor < moe_step < 2.5 * floor, moe_step / floor


def test_mixed_batch_prices_each_row_as_alone() -> None:
    """One call holding 4-bit and bf16 MoE rows (gpt-oss-20b fits in bf16 on one H100) gives
    each row what it gets alone: the 4-bit rows the 4-bit table, the others the bf16 one."""
    rows = [_gpt_oss_120b(b, wd) for b, wd in ((8, "int4"), (64, "int4"))]
    small = lookup_model("openai/gpt-oss-20b").to_dict()
    rows.append({**rows[0], **{k: [v] for k, v in small.items()}, "weight_dtype": ["bfloat16"]})
    together = predict({k: [v for r in rows for v in r[k]] for k in rows[0]})
    for i, r in enumerate(rows):
        alone = predict(r)
        for key in ("latency_s", "energy_j", "breakdown.decode.ffn/moe_s"):
            # rel 1e-6: float32 MLPs may differ in the last bits across batch layouts on another
            # CPU's BLAS; a row priced by the wrong table is off by 2x or more
            assert together[key][i] == pytest.approx(alone[key][0], rel=1e-6), (i, key)
    # the 4-bit table makes gpt-oss-20b's MoE step 2-4x faster than bf16's (measured 3.0x)
    four = predict({**rows[2], "weight_dtype": ["int4"]})
    ratio = together["breakdown.decode.ffn/moe_s"][2] / four["breakdown.decode.ffn/moe_s"][0]
    assert 2.0 < ratio < 4.0, ratio
    assert np.isfinite(together["energy_j"]).all()
