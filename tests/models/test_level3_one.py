"""Level 3 of one configuration is computed in Python floats (`level3._parts_one`, issue 37:
a one-row prediction); it must be the vectorised `_parts_arrays` bit for bit: every output,
for every engine's fit of every shipped Level-3 model, with and without GQA-aware engines,
decode steps or none, KV caches that fit and that overflow (the MLP's stage-1 rule), and an
engine fit without an MLP (the structured stage alone)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dse.models import level3 as L3
from dse.predict import load_artifact
from dse.spec.hardware import gpu_names
from tests.models.test_level3_sum_order import _inputs


def _fits() -> list[tuple[str, L3.EngineFit]]:
    out = []
    for gpu in sorted(gpu_names()):
        art, _ = load_artifact(gpu)
        if art is None or "level3.e2e" not in art.names():
            continue
        model = art.model("level3.e2e")
        out += [(f"{gpu} {e}", fit) for e, fit in model.engines_.items()]
    return out


@pytest.mark.parametrize("aware", [None, False, True])
def test_one_row_parts_are_the_vectorised_parts_bit_for_bit(aware: bool | None) -> None:
    fits = _fits()
    assert fits, "no shipped Level-3 model"
    bare = dataclasses.replace(fits[0][1], mlps=())  # the structured stage alone
    fits.append(("no MLP", bare))
    rng = np.random.default_rng(5)
    g_all = _inputs(400, rng)
    g_all.steps[:40] = 0.0  # one output token: no decode step
    g_all.kv_fill[40:80] = 1.0  # on the stage-1 rule's edge
    g_all.gqa[::7] = 1.0
    g_all.n_experts[::5] = 8.0
    for i in range(len(g_all.t_pre_s)):
        g = g_all.take(np.array([i]))
        gqa = None if aware is None else np.array([aware])
        name, fit = fits[i % len(fits)]
        got = L3._parts_one(fit, g, gqa)
        want = L3._parts_arrays(fit, g, gqa)
        assert list(got) == list(want), name
        for k, v in want.items():
            assert got[k].shape == v.shape and got[k].dtype == v.dtype, f"{name} {k}"
            np.testing.assert_array_equal(got[k], v, err_msg=f"{name} row {i} {k}")


def test_parts_take_the_one_row_path_for_one_row_only() -> None:
    fit = _fits()[0][1]
    g = _inputs(3, np.random.default_rng(2))
    whole = L3._parts(fit, g)
    for i in range(3):
        one = L3._parts(fit, g.take(np.array([i])))
        for k, v in whole.items():
            np.testing.assert_allclose(one[k], v[i : i + 1], rtol=1e-12, err_msg=k)
