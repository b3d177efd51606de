"""Level 2 as PyTorch eager's GEMM calibration (issue 19): the block factor is the calibrated
GEMMs over the Level-1 sum, the op between the GEMMs keeps its Level-1 time, a call taller than
the fitted tokens is read as row blocks inside them, and the regime inputs follow the roofline."""

from __future__ import annotations

import numpy as np
import pytest

from dse.errors import ArtifactError
from dse.models.level2 import GEMM_FEATURES, LEVEL2_FEATURES, Level2Block, gemm_inputs


def _x(rng: np.random.Generator, n: int) -> np.ndarray:
    return np.column_stack(
        [
            rng.normal(-10, 1, (3, n)).T,
            rng.uniform(0, 12, n),
            rng.uniform(10, 14, (4, n)).T,
            np.full(n, np.log(989e12)),
            np.full(n, np.log(3.35e12)),
            np.full(n, 132.0),
        ]
    )


@pytest.fixture(scope="module")
def fitted() -> tuple[Level2Block, np.ndarray]:
    rng = np.random.default_rng(0)
    X = _x(rng, 300)
    G = np.concatenate(gemm_inputs(X))
    r = 0.2 * np.tanh(G[:, 0] - 6)  # slower than Level 1 past m ~ 64, as eager is
    return Level2Block("attention_proj", n_ensemble=2).fit(G, r, X), X


def test_gemm_inputs_follow_the_roofline() -> None:
    X = _x(np.random.default_rng(1), 5)
    g1, g2 = gemm_inputs(X)
    assert g1.shape == g2.shape == (5, len(GEMM_FEATURES))
    m, n, k = np.exp2(X[:, 3]), np.exp2(X[:, 4]), np.exp2(X[:, 5])
    intensity = 2 * m * n * k / (2 * (m * k + n * k + m * n))
    np.testing.assert_allclose(g1[:, 3], np.log(intensity))
    roof = np.maximum(2 * m * n * k / 989e12, 2 * (m * k + n * k + m * n) / 3.35e12)
    np.testing.assert_allclose(g1[:, 4], X[:, 0] - np.log(roof))
    assert ((g1[:, 5] > 0) & (g1[:, 5] <= 1)).all()


def test_block_factor_is_the_calibrated_gemms_over_level1(
    fitted: tuple[Level2Block, np.ndarray],
) -> None:
    model, X = fitted
    f1, f2 = model.gemm_log_factors(X)
    t1, tm, t2 = np.exp(X[:, 0]), np.exp(X[:, 1]), np.exp(X[:, 2])
    want = np.log((t1 * np.exp(f1) + tm + t2 * np.exp(f2)) / (t1 + tm + t2))
    np.testing.assert_allclose(model.log_factor(X), want)
    assert np.abs(f1).max() > 0.05  # it learned the regime, not a constant zero
    # the middle op's time enters unscaled: a longer middle op dilutes the factor
    Y = X.copy()
    Y[:, 1] += 3.0
    assert (np.abs(model.log_factor(Y)) < np.abs(model.log_factor(X)) + 1e-12).all()


def test_a_taller_call_is_read_as_row_blocks(fitted: tuple[Level2Block, np.ndarray]) -> None:
    model, X = fitted
    hi = model.range_["log2_tokens"][1]
    at = X[:3].copy()
    at[:, 3] = hi
    tall = at.copy()
    tall[:, 3] = hi + 2  # 4x the tokens and 4x the Level-1 time: four blocks of `at`
    tall[:, :3] += np.log(4.0)
    np.testing.assert_allclose(
        model.gemm_log_factors(model.in_token_blocks(tall)), model.gemm_log_factors(at)
    )
    assert model.out_of_range(tall).all() and not model.out_of_range(at).any()
    assert set(model.range_misses(tall)) == {"tokens"}


def test_state_round_trip_and_old_features_refused(
    fitted: tuple[Level2Block, np.ndarray],
) -> None:
    model, X = fitted
    state = model.to_state()
    again = Level2Block.from_state(state)
    np.testing.assert_array_equal(again.log_factor(X), model.log_factor(X))
    old = dict(state)
    old["features"] = np.array(("log_l1_s", "log2_tokens", "log2_d_model", "log2_width"))
    with pytest.raises(ArtifactError, match="re-fit"):
        Level2Block.from_state(old)
    assert len(LEVEL2_FEATURES) == X.shape[1]


def test_wave_steps_inputs_and_state() -> None:
    """The wave-step candidate (issue 33): each GEMM's last-wave fill and log wave count under
    `STEP_TILES` after the shipped inputs, kept through the artifact state; a model without it
    (every shipped artifact) reads its six inputs as before, and a G of the other width is
    refused."""
    from dse.models.level2 import STEP_FEATURES, STEP_TILES

    X = _x(np.random.default_rng(2), 40)
    g1, g2 = gemm_inputs(X)
    s1, s2 = gemm_inputs(X, wave_steps=True)
    assert s1.shape == (40, len(GEMM_FEATURES) + len(STEP_FEATURES))
    np.testing.assert_array_equal(s1[:, : len(GEMM_FEATURES)], g1)
    np.testing.assert_array_equal(s2[:, : len(GEMM_FEATURES)], g2)
    # hand-worked: m = 300 tokens, n = 4096 on 132 SMs, 256 x 128 tiles: 2 x 32 = 64 CTAs,
    # 64 / 132 of one wave
    one = X[:1].copy()
    one[0, 3], one[0, 4], one[0, 10] = np.log2(300), 12.0, 132.0
    at = 2 * STEP_TILES.index((256, 128))
    got = gemm_inputs(one, wave_steps=True)[0][0, len(GEMM_FEATURES) + at :][:2]
    np.testing.assert_allclose(got, [64 / 132, 0.0])
    r = 0.1 * np.sin(s1[:, 0])
    model = Level2Block("ffn_dense", n_ensemble=1, wave_steps=True).fit(s1, r, X)
    again = Level2Block.from_state(model.to_state())
    assert again.wave_steps and again.gemm_features() == GEMM_FEATURES + STEP_FEATURES
    np.testing.assert_array_equal(again.log_factor(X), model.log_factor(X))
    assert not Level2Block.from_state(Level2Block(n_ensemble=1).fit(g1, r, X).to_state()).wave_steps
    with pytest.raises(ValueError, match="columns"):
        Level2Block("ffn_dense", n_ensemble=1, wave_steps=True).fit(g1, r, X)
