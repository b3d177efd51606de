"""The Level-3 power calibration (dse.models.level3_power, dse.fitting.power_calibration): physics
over a wide grid, monotone in the modelled power, no engine-only term on fewer than 5 models,
its range checked, and fitted on exactly the inputs `dse predict` hands it (issue 33)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dse.fitting import power_calibration as PC
from dse.models.level3_power import MIN_ENGINE_MODELS, Power3
from dse.predict import load_artifact, predict
from dse.spec.catalogue import lookup_model
from dse.spec.hardware import get_gpu

GPUS = ("h100_sxm", "a100_sxm", "h200_sxm", "gh200")


def _shipped(gpu: str) -> tuple[object, Power3]:
    art, _ = load_artifact(gpu)
    if art is None or not art.has("level3.power"):
        pytest.skip(f"no shipped {gpu} artifact with a power calibration")
    return art, art.model("level3.power")


def _grid(gpu_name: str) -> tuple[np.ndarray, ...]:
    gpu = get_gpu(gpu_name)
    p, b, t, k = np.meshgrid(
        np.linspace(0.0, 1.5 * gpu.board_power_w, 41),
        2.0 ** np.arange(0, 13),  # batch 1-4096
        np.array([1.0, 2.0, 4.0, 8.0, 16.0]),
        np.linspace(0.0, 1.0, 5),  # KV-read share
        indexing="ij",
    )
    return p, b, t, k


@pytest.mark.parametrize("gpu_name", GPUS)
def test_calibrated_power_stays_between_idle_and_board_and_rises_with_the_model(
    gpu_name: str,
) -> None:
    """13,325 points per GPU, far outside the fitted batch and TP ranges too."""
    _, pw = _shipped(gpu_name)
    gpu = get_gpu(gpu_name)
    p, b, t, k = _grid(gpu_name)
    out = pw.power_w(p, b, gpu, tp=t, kv=k)
    assert np.all(out >= gpu.idle_power_w) and np.all(out <= gpu.board_power_w)
    assert float(pw.coef_[1]) > 0.0  # a calibration, not a function of batch alone
    assert np.all(np.diff(out, axis=0) >= 0.0)  # never falls as the modelled power rises


def test_any_coefficients_keep_the_physics() -> None:
    """The clip holds whatever a fit returns: extreme coefficients stay in [idle, board]."""
    gpu = get_gpu("h100_sxm")
    p, b, t, k = _grid("h100_sxm")
    for coef in ([5.0, 3.0, 4.0, -6.0, 2.0], [-5.0, 0.1, -4.0, 6.0, -2.0]):
        pw = Power3()
        pw.coef_ = np.array(coef)
        out = pw.power_w(p, b, gpu, tp=t, kv=k)
        assert np.all(out >= gpu.idle_power_w) and np.all(out <= gpu.board_power_w)


@pytest.mark.parametrize("gpu_name", GPUS)
def test_shipped_calibration_has_no_engine_term(gpu_name: str) -> None:
    art, pw = _shipped(gpu_name)
    entry = art.manifest["models"]["level3.power"]
    assert pw.protocol_ == 0.0 and entry.get("protocol_c", 0.0) == 0.0
    if "rows_by_source" in entry:  # fitted on many models, not argonne's one or two
        assert entry["models"] >= MIN_ENGINE_MODELS


def _pair_rows(n_models: int) -> tuple[np.ndarray, ...]:
    """n_models models, each measured at batch 1-64 under both protocols; independent sequences
    draw 0.2 log2(batch)/6 more of the dynamic span."""
    batch = np.tile(np.repeat([1.0, 16.0, 32.0, 64.0], 2), n_models)
    identical = np.tile([True, False], 4 * n_models)
    model = np.repeat(np.arange(n_models), 8).astype(str)
    u = 0.3 + 0.02 * np.log2(batch) + 0.05 * np.repeat(np.arange(n_models), 8)
    y = u + 0.2 * np.log2(batch) / 6.0 * ~identical
    keys = np.char.add(model, batch.astype(int).astype(str))
    return u, batch, y, identical, model, keys


def test_an_engine_term_needs_pairs_of_five_models() -> None:
    for n, fitted in ((MIN_ENGINE_MODELS - 1, False), (MIN_ENGINE_MODELS, True)):
        u, batch, y, identical, model, keys = _pair_rows(n)
        pw = Power3().fit(u, batch, y, model, identical=identical, pair_keys=keys)
        assert (pw.protocol_ > 0.1) == fitted, (n, pw.protocol_)


def test_waiting_rows_are_read_as_busy_and_waiting_shares() -> None:
    """Rows of a serving run whose GPU computes a share `busy` of the wall time and waits at w
    the rest: the calibration of the busy time and w are both recovered, each row held out."""
    rng = np.random.default_rng(0)
    n = 60
    u = rng.uniform(0.2, 0.8, n)
    batch = 2.0 ** rng.integers(0, 8, n)
    tp = 2.0 ** rng.integers(0, 4, n)
    busy = np.where(np.arange(n) % 2 == 0, 1.0, rng.uniform(0.2, 0.6, n))
    y_gpu = 0.1 + 0.7 * u + 0.1 * np.log2(batch) / 8 - 0.05 * np.log2(tp) / 3
    y = busy * y_gpu + (1 - busy) * 0.08
    wait_key = np.where(busy < 1.0, "h100_sxm", "")
    pw = Power3(ridge=1e-9).fit(
        u, batch, y, np.arange(n) % 6, protocol=0.0, tp=tp, busy=busy, wait_key=wait_key
    )
    np.testing.assert_allclose(pw.coef_[:4], [0.1, 0.7, 0.1, -0.05], atol=1e-6)
    assert abs(pw.wait_["h100_sxm"] - 0.08) < 1e-6
    np.testing.assert_allclose(pw.held_out_, y, atol=1e-6)
    np.testing.assert_allclose(pw.held_out_gpu_, y_gpu, atol=1e-6)


def test_an_older_three_term_state_predicts_as_before() -> None:
    gpu = get_gpu("a100_sxm")
    state = {
        "coef": np.array([0.1, 0.8, 0.05]),
        "protocol": np.array([0.0]),
        "band_log": np.zeros(2),
        "range_names": np.array(["u", "batch"]),
        "range": np.array([[0.1, 0.9], [1.0, 64.0]]),
    }
    pw = Power3.from_state(state)
    p, b = np.array([150.0, 300.0]), np.array([1.0, 64.0])
    span = gpu.board_power_w - gpu.idle_power_w
    u = (p - gpu.idle_power_w) / span
    want = gpu.idle_power_w + np.clip(0.1 + 0.8 * u + 0.05 * np.log2(b) / 8, 0, 1) * span
    np.testing.assert_allclose(pw.power_w(p, b, gpu, tp=8.0, kv=0.5), want)
    again = Power3.from_state(Power3.from_state(pw.to_state()).to_state())
    np.testing.assert_allclose(again.power_w(p, b, gpu), want)


def _configs(gpu: str) -> pd.DataFrame:
    rows = []
    for model, tp, batch in (
        ("meta-llama/Llama-3.1-8B", 1, 16),
        ("meta-llama/Llama-3.1-70B", 4, 64),
        ("Qwen/Qwen3-30B-A3B", 2, 128),
    ):
        a = lookup_model(model).to_dict()
        rows.append(
            {
                **{k: a[k] for k in ("d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff")},
                **{k: a[k] for k in a if k in ("n_experts", "top_k", "d_ff_expert", "head_dim")},
                "gpu": gpu,
                "engine": "vllm",
                "batch_size": batch,
                "prompt_tokens": 512,
                "output_tokens": 256,
                "tensor_parallel": tp,
            }
        )
    return pd.DataFrame(rows)


def test_the_fit_sees_what_predict_hands_the_calibration() -> None:
    """One path: the calibration applied to the rows `modelled` reads (as `dse fit` does) gives
    the energy `dse predict` returns, to 1e-9."""
    art, pw = _shipped("h100_sxm")
    cfg = _configs("h100_sxm")
    m = PC.modelled(cfg, art)
    gpu = get_gpu("h100_sxm")
    p = pw.power_w(
        m["p_model_w"].to_numpy(),
        m["batch"].to_numpy(),
        gpu,
        tp=m["tp"].to_numpy(),
        kv=m["kv_share"].to_numpy(),
    )
    out = predict(cfg)
    want = np.asarray(out["energy_j"], float)
    got = p * m["latency_s"].to_numpy() * cfg["tensor_parallel"].to_numpy(float)
    np.testing.assert_allclose(got, want, rtol=1e-9)
    np.testing.assert_allclose(m["latency_s"].to_numpy(), out["latency_s"], rtol=1e-12)


def test_batch_and_tp_outside_the_fitted_range_are_flagged() -> None:
    _, pw = _shipped("h100_sxm")
    if "tp" not in pw.range_:
        pytest.skip("the shipped calibration predates its TP range")
    cfg = _configs("h100_sxm").iloc[:1]
    inside = predict(cfg)
    assert "level3 power" not in str(inside["out_of_range_inputs"][0])
    far = cfg.assign(batch_size=int(4 * pw.range_["batch"][1]))
    out = predict(far)
    assert out["out_of_range"][0]
    assert "level3 power: batch" in str(out["out_of_range_inputs"][0])
