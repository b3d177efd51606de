"""Level 3: artifacts fitted before a structured term existed still load, as the same model."""

from __future__ import annotations

import numpy as np

from dse.surrogate.level3 import TERMS, EngineFit, Level3, gqa_excess


def _model() -> Level3:
    m = Level3()
    theta = np.linspace(0.1, 1.3, len(TERMS))
    m.engines_ = {"vllm": EngineFit(theta, (), np.array([-0.1, 0.1]), 5.0)}
    m.range_ = {"batch": (1.0, 64.0)}
    return m


def test_state_without_a_later_term_loads_with_that_term_at_zero() -> None:
    st = _model().to_state()
    keep = [i for i, t in enumerate(TERMS) if t != "a_attn_gqa"]
    st["terms"] = np.array([TERMS[i] for i in keep])
    st["vllm.theta"] = st["vllm.theta"][keep]
    loaded = Level3.from_state(st)
    theta = loaded.engines_["vllm"].theta
    assert theta[TERMS.index("a_attn_gqa")] == 0.0
    np.testing.assert_array_equal(theta[keep], _model().engines_["vllm"].theta[keep])


def test_state_with_an_unknown_term_is_refused() -> None:
    import pytest

    from dse.errors import ArtifactError

    st = _model().to_state()
    st["terms"] = np.array([*TERMS[:-1], "a_mystery"])
    with pytest.raises(ArtifactError, match="re-fit"):
        Level3.from_state(st)


def test_gqa_excess_is_zero_for_multi_head_attention() -> None:
    from dse.surrogate.level3 import GlobalInputs

    n = 3
    ones = np.ones(n)
    g = GlobalInputs(
        **{k: ones for k in GlobalInputs.__dataclass_fields__ if k not in ("engine", "gqa")},
        engine=np.array(["vllm"] * n),
        gqa=np.array([1.0, 4.0, 8.0]),
    )
    np.testing.assert_array_equal(gqa_excess(g), [0.0, 3.0, 7.0])
