"""MoE power (issue 33): the fused-MoE model's power head is the log-power head
(`dse.models._hybrid.LogPowerHead`, `dse.models.moe.POWER_HEAD`), so its watts stay between the
GPU's idle and board power on any layout and token count, the shipped H200 models included,
where the MLP on watts it replaced read above the 700 W board limit."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dse.models._hybrid import LogPowerHead
from dse.models.artifact import Artifact
from dse.models.moe import MoEModel
from dse.spec.hardware import get_gpu

H200 = get_gpu("h200_sxm")
FAST = {"max_rows": 2500, "max_iter": 60}


def _moe_table() -> pd.DataFrame:
    """A synthetic H200 MoE table: latency from the expert weights read and the FLOPs, power
    rising with the tokens routed, the busiest calls measured up to 850 W (above the board
    limit, as averaged NVML readings of short calls are)."""
    rng = np.random.default_rng(0)
    T, layout = np.meshgrid(2.0 ** np.arange(0, 15), np.arange(4))
    hidden, inter, topk, experts = (np.array(x)[layout.ravel()] for x in (
        [2048, 4096, 7168, 2880], [768, 1536, 2048, 2880], [8, 8, 8, 4], [128, 64, 256, 32]
    ))  # fmt: skip
    n = T.size
    tokens = T.ravel()
    weights = 3.0 * hidden * inter * np.minimum(experts, tokens * topk) * 2.0
    flops = 2.0 * 3.0 * tokens * topk * hidden * inter
    lat = 1e-5 + weights / 3.5e12 + flops / 6e14
    power = 180.0 + 670.0 * np.log1p(tokens) / np.log1p(2.0**14)
    return pd.DataFrame(
        {
            "num_tokens": tokens,
            "hidden_size": hidden,
            "inter_size": inter,
            "topk": topk,
            "num_experts": experts,
            "moe_tp_size": 1,
            "moe_ep_size": 1,
            "distribution": "balanced",
            "dtype": "bfloat16",
            "gpu": "h200_sxm",
            "engine": "vllm",
            "latency_s": lat * rng.normal(1.0, 0.01, n),
            "power_w": power * rng.normal(1.0, 0.03, n),
        }
    )


def _wide_grid() -> dict[str, np.ndarray]:
    """Layouts and token counts far beyond any table: 1 to 4M tokens, hidden 512-16384, expert
    width 128-32768, top-1 to top-22 of 8-1024 experts, expert parallel 1-64."""
    T, h, i, k, e, ep = np.meshgrid(
        4.0 ** np.arange(0, 12),
        [512.0, 4096.0, 16384.0],
        [128.0, 2048.0, 32768.0],
        [1.0, 8.0, 22.0],
        [8.0, 128.0, 1024.0],
        [1.0, 8.0, 64.0],
        indexing="ij",
    )
    ok = (k.ravel() <= e.ravel()) & (ep.ravel() <= e.ravel())
    return {
        "num_tokens": T.ravel()[ok],
        "hidden_size": h.ravel()[ok],
        "inter_size": i.ravel()[ok],
        "topk": k.ravel()[ok],
        "num_experts": e.ravel()[ok],
        "moe_ep_size": ep.ravel()[ok],
    }


def _within_board(p: dict[str, np.ndarray]) -> None:
    w = p["power_w"]
    assert np.isfinite(w).all()
    assert w.min() >= H200.idle_power_w and w.max() <= H200.board_power_w, (w.min(), w.max())
    np.testing.assert_allclose(p["energy_j"], w * p["latency_s"])


def test_moe_power_head_is_the_bounded_log_head() -> None:
    d = _moe_table()
    model = MoEModel("h200_sxm", "vllm", "bfloat16", **FAST).fit(d)
    # the MLP on watts (the head before) has no bounds: up to 980 W on the wide grid here
    assert isinstance(model.power_mlp_, LogPowerHead)
    assert (model.power_mlp_.idle_w, model.power_mlp_.board_w) == (
        H200.idle_power_w,
        H200.board_power_w,
    )
    with np.errstate(over="ignore"):
        _within_board(model.predict(**_wide_grid()))
    back = MoEModel.from_state(model.to_state())
    assert isinstance(back.power_mlp_, LogPowerHead)
    x = _wide_grid()
    np.testing.assert_array_equal(model.predict(**x)["power_w"], back.predict(**x)["power_w"])


@pytest.mark.parametrize("dtype", ["bfloat16", "fp8", "fp8_block"])
def test_shipped_h200_moe_power_within_idle_and_board(dtype: str) -> None:
    name = f"moe.vllm.{dtype}"
    art = Artifact.load("h200_sxm")
    if not art.has(name):
        pytest.skip(f"{name} not in the h200_sxm artifact")
    model = art.model(name)
    assert isinstance(model.power_mlp_, LogPowerHead)  # not the MLP on watts it replaced
    grid = _wide_grid()
    for dist in ("balanced", "power_law_1.2"):
        with np.errstate(over="ignore"):
            _within_board(model.predict(**grid, distribution=dist))
