"""The fine-grained MoE law `krajewski2024` (dse.estimators.quality) against its paper.

Paper: Krajewski et al. 2024, "Scaling Laws for Fine-Grained Mixture of Experts" (arXiv
2402.07871). Printed values used here: eq. (9) with Table 1's coefficients, Table 2's
compute-optimal models (E x N_act, D, G, loss), §4's definitions (G = d_ff / d_expert,
N_expert = G E, active parameters unchanged by G), §6.1's parameter count
N = d_model^2 (8E + 4) n_blocks, and §5.1 (higher granularity, lower loss).
"""

from __future__ import annotations

import numpy as np
import pytest

from dse.estimators import quality as Q
from dse.spec import columns


def _cols(**fields: object) -> dict[str, np.ndarray]:
    cols, _ = columns.as_columns(fields)
    return cols


def _paper_moe(d_model: int, blocks: int, granularity: int, experts: int = 64) -> dict:
    """§3.1 / §6.1: a non-gated FFN of 4 d_model split into G experts per original one; E = 64
    original experts, so 64 G experts of width 4 d_model / G and top-G routing."""
    return {
        "d_model": d_model,
        "n_layers": blocks,
        "n_heads": d_model // 64,
        "d_ff": 4 * d_model,
        "vocab_size": 50257,
        "n_experts": experts * granularity,
        "top_k": granularity,
        "d_ff_expert": 4 * d_model // granularity,
        "gated_mlp": False,
    }


def _batch(models: list[dict]) -> dict[str, np.ndarray]:
    return _cols(**{k: [m[k] for m in models] for k in models[0]})


def test_counting_is_section_6_1() -> None:
    """§6.1: N = d_model^2 (8E + 4) n_blocks (attention 4 d^2, experts 8 E d^2, no router,
    no embeddings), whatever the granularity (§4: G splits experts, keeps the parameters)."""
    models = [_paper_moe(512, 8, g) for g in (1, 2, 4, 8, 16)]
    out = Q.predict_loss(_batch(models), np.full(5, 3e10), "krajewski2024")
    assert (out["params_counted"] == 512**2 * (8 * 64 + 4) * 8).all()


# Table 2: (N_act, D, G, printed loss), all at E = 64.
TABLE_2 = [
    (100e6, 4.37e9, 8, 3.133),
    (1e9, 28.94e9, 16, 2.491),
    (3e9, 72.90e9, 16, 2.245),
    (7e9, 137.60e9, 32, 2.076),
    (70e9, 941.07e9, 32, 1.694),
    (300e9, 2.96e12, 64, 1.503),
    (1e12, 7.94e12, 64, 1.367),
]


@pytest.mark.parametrize(("n_act", "tokens", "g", "printed"), TABLE_2)
def test_table_2_losses(n_act: float, tokens: float, g: int, printed: float) -> None:
    """Table 2's losses from eq. (9) at its D and G, with N = (8E + 4) / 12 x N_act, E = 64
    (§6.1: N_act = 12 d^2 n_blocks per the 'E x N_act' names, N = (8E + 4) d^2 n_blocks).
    Every row comes out 0.011-0.023 nats under the printed loss: the table's N_act are rounded
    names (100M, 1B, ...) and Table 1's coefficients three significant digits (alpha 0.115 +-
    0.0005 alone moves N^alpha by 1.2%, about 0.013 nats here), so the check is to 0.025."""
    k = Q._KRAJEWSKI
    big_n = (8 * 64 + 4) / 12 * n_act
    loss = k.c + (k.g / g**k.gamma + k.a) / big_n**k.alpha + k.b / tokens**k.beta
    assert loss == pytest.approx(printed, abs=0.025)
    assert loss < printed  # the offset is one-sided: a rounding, not noise


def test_a_model_in_range_is_not_flagged_and_equals_eq_9() -> None:
    """d_model 512 x 8 blocks, E = 64, G = 4: N = 1.08B, inside 129M-3.7B; 30B tokens inside
    16B-130B; G inside 1-16."""
    cols = _batch([_paper_moe(512, 8, 4)])
    out = Q.predict_loss(cols, np.array([3e10]), "krajewski2024")
    assert out["out_of_range_inputs"][0] == ""
    k = Q._KRAJEWSKI
    n = 512**2 * 516 * 8
    want = k.c + (k.g / 4**k.gamma + k.a) / n**k.alpha + k.b / 3e10**k.beta
    assert out["loss"][0] == pytest.approx(want, rel=1e-12)


def test_more_granularity_or_tokens_never_raise_loss() -> None:
    """§5.1: at fixed N and D, higher granularity gives a lower loss (with diminishing
    returns); more tokens lower it too (b / D^beta)."""
    models = [_paper_moe(768, 12, g) for g in (1, 2, 4, 8, 16)]
    loss = Q.predict_loss(_batch(models), np.full(5, 5e10), "krajewski2024")["loss"]
    steps = -np.diff(loss)
    assert (steps > 0).all() and (np.diff(steps) < 0).all()
    longer = Q.predict_loss(_batch(models), np.full(5, 1e11), "krajewski2024")["loss"]
    assert (longer < loss).all()


def test_dense_rows_take_the_papers_dense_fit() -> None:
    """Table 1's dense row (a 16.3, alpha 0.126, b 26.7, beta 0.127, c 0.47) prices a dense
    model, at its non-embedding parameters."""
    cols = _cols(
        d_model=[1024],
        n_layers=[16],
        n_heads=[16],
        d_ff=[4096],
        vocab_size=[50257],
        gated_mlp=[False],
    )
    out = Q.predict_loss(cols, np.array([3e10]), "krajewski2024")
    n = 16 * (4 * 1024**2 + 2 * 1024 * 4096)
    assert out["params_counted"][0] == n
    assert out["loss"][0] == pytest.approx(0.47 + 16.3 / n**0.126 + 26.7 / 3e10**0.127, rel=1e-12)


def test_flags_name_expansion_granularity_and_shared_experts() -> None:
    """Mixtral-like rows: E = 8 / 2 = 4, not the fitted 64; G = 32 is past 16; a shared expert
    is not in the paper's models."""
    rows = [
        {**_paper_moe(4096, 32, 2, experts=4), "d_ff_expert": 14336, "gated_mlp": True},
        _paper_moe(512, 8, 32),
        _paper_moe(512, 8, 4),
    ]
    for r, sff in zip(rows, (0, 0, 1024), strict=True):
        r["shared_expert_d_ff"] = sff
    text = Q.predict_loss(_batch(rows), np.full(3, 3e10), "krajewski2024")["out_of_range_inputs"]
    assert "n_experts/top_k 4 < 64 (x16)" in text[0]
    assert "params" in text[0]
    assert "granularity (top_k) 32 > 16 (x2)" in text[1]
    assert "shared_expert_d_ff 1024: law fitted without one" in text[2]


def test_auto_picks_krajewski_for_a_space_that_routes_to_several_experts() -> None:
    rows = [_paper_moe(512, 8, 1), _paper_moe(512, 8, 4)]
    dense = {k: v for k, v in _paper_moe(512, 8, 1).items()}
    dense.update(n_experts=1, top_k=1, d_ff_expert=2048)
    cols = _batch([*rows, dense])
    tokens = np.full(3, 3e10)
    assert list(Q.predict_loss(cols, tokens, "auto")["law"]) == ["krajewski2024"] * 3
    top1 = Q.predict_loss(cols, tokens, "auto", granular_space=False)
    assert list(top1["law"]) == ["joint_moe"] * 3
