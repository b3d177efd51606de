"""Phase power stays between the GPU's idle draw and its board limit (issue 32).

Per GPU, a phase's power is its energy over its time on every GPU of the tensor-parallel
group: prefill_energy_j / (ttft_s x tp), decode_energy_j / ((latency_s - ttft_s) x tp), and
the request's energy_j / (latency_s x tp). The operators are held under the board limit
(tests/predict/test_board_limit.py); the Level-3 power calibration of the whole request used to scale
both phases by one factor, which put prefill at up to 1,811 W on a 700 W GPU. This checks a
grid of 10,000+ configurations (every registered GPU, both engines, static and continuous
batching, batch 1..256, prompt 128..8192, TP 1..8, dense and MoE models from the catalogue)
through `dse.predict.predict`, the path `dse predict` (single and --batch) and sweeps use:

- idle <= per-GPU power <= board limit for prefill, decode and the whole request;
- prefill + decode energy == energy, the breakdown items of a phase sum to its time;
- the energy band stays inside the power bounds over the latency band:
  idle x latency_lo x tp <= energy_lo <= energy <= energy_hi <= board x latency_hi x tp.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import asdict

import numpy as np
import pytest

from dse.predict import predict
from dse.predict.power_bounds import bounded_energy_band, bounded_phases
from dse.spec.catalogue import lookup_model
from dse.spec.choices import ENGINES
from dse.spec.hardware import get_gpu, gpu_names

# dense (GQA, MHA, sliding windows: Mistral's 4096, Gemma-3's 512 at head_dim 256, SGLang's
# Triton on H100) and MoE (top-2 of 8, top-8 of 128, MLA + shared expert)
MODELS = (
    "Llama-3-8B",
    "Llama-3-70B",
    "Mistral-7B-v0.1",
    "Gemma-3-1B",
    "Mixtral-8x7B",
    "Qwen3-30B-A3B",
    "DeepSeek-V3",
)
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
PROMPTS = (128, 512, 1024, 2048, 4096, 8192)
TPS = (1, 2, 4, 8)
HOPPER = ("h100_sxm", "h200_sxm", "gh200")
OUTPUTS = (1, 2, 64, 256, 1024)  # 1: no decode step (decode time and energy 0)
# Relative slack of the comparisons: far below any real overshoot (the bug's smallest was
# percent-sized), above the float64 round-off of energy / time.
RTOL = 1e-9


def grid() -> dict[str, np.ndarray]:
    """The configurations as columns: the product of models, GPUs, engines, batches, prompts
    and TPs; output tokens and batching vary along the grid (deterministically)."""
    rows = list(itertools.product(MODELS, gpu_names(), ENGINES, BATCHES, PROMPTS, TPS))
    n = len(rows)
    archs = {m: asdict(lookup_model(m)) for m in MODELS}
    cols: dict[str, list] = {k: [] for k in next(iter(archs.values()))}
    for m, *_ in rows:
        for k, v in archs[m].items():
            cols[k].append(v)
    out = {k: _column(v) for k, v in cols.items()}
    _, gpus, engines, batches, prompts, tps = zip(*rows, strict=True)
    i = np.arange(n)
    out.update(
        gpu=np.array(gpus),
        engine=np.array(engines),
        batch_size=np.array(batches),
        prompt_tokens=np.array(prompts),
        tensor_parallel=np.array(tps),
        output_tokens=np.array(OUTPUTS)[i % len(OUTPUTS)],
        batching=np.where(i % 7 == 3, "continuous", "static"),
    )
    # fp8 weights and KV cache on a third of the Hopper rows (A100 has no fp8 kernels)
    fp8 = np.isin(out["gpu"], HOPPER) & (i % 3 == 1)
    out["weight_dtype"] = np.where(fp8, "fp8", out["weight_dtype"])
    out["kv_dtype"] = np.where(fp8, "fp8", out["kv_dtype"])
    return out


def _column(values: list) -> np.ndarray:
    if any(isinstance(v, list | tuple) for v in values):  # layer patterns: one object per row
        a = np.empty(len(values), dtype=object)
        a[:] = [list(v) if isinstance(v, list | tuple) else v for v in values]
        return a
    return np.array(values)


@pytest.fixture(scope="module")
def priced() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    cols = grid()
    return cols, predict(cols)


def phase_powers(cols: dict[str, np.ndarray], p: dict[str, np.ndarray]) -> dict[str, tuple]:
    """Per phase: (energy of every GPU, seconds x GPUs) where the phase runs."""
    tp = cols["tensor_parallel"].astype(float)
    t_dec = p["latency_s"] - p["ttft_s"]
    return {
        "prefill": (p["prefill_energy_j"], p["ttft_s"] * tp),
        "decode": (p["decode_energy_j"], t_dec * tp),
        "request": (p["energy_j"], p["latency_s"] * tp),
    }


def violations(cols: dict[str, np.ndarray], p: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per check, the rows that break it."""
    idle = np.array([get_gpu(g).idle_power_w for g in cols["gpu"]])
    board = np.array([get_gpu(g).board_power_w for g in cols["gpu"]])
    tp = cols["tensor_parallel"].astype(float)
    bad: dict[str, np.ndarray] = {}
    for phase, (e, gpu_s) in phase_powers(cols, p).items():
        runs = gpu_s > 0
        bad[f"{phase} power above the board limit"] = runs & (e > board * gpu_s * (1 + RTOL))
        bad[f"{phase} power below idle"] = runs & (e < idle * gpu_s * (1 - RTOL))
        bad[f"{phase} energy without time"] = ~runs & (np.abs(e) > 0)
    total = p["prefill_energy_j"] + p["decode_energy_j"]
    bad["prefill + decode != energy"] = ~np.isclose(total, p["energy_j"], rtol=RTOL, atol=0)
    for phase, t in (("prefill", p["ttft_s"]), ("decode", p["latency_s"] - p["ttft_s"])):
        items = sum(v for k, v in p.items() if k.startswith(f"breakdown.{phase}."))
        bad[f"breakdown.{phase} != phase time"] = ~np.isclose(items, t, rtol=RTOL, atol=1e-15)
    lat_lo, lat_hi = p["latency_lo_s"], p["latency_hi_s"]
    bad["energy_hi above board x latency_hi"] = p["energy_hi_j"] > board * lat_hi * tp * (1 + RTOL)
    bad["energy_lo below idle x latency_lo"] = p["energy_lo_j"] < idle * lat_lo * tp * (1 - RTOL)
    bad["energy outside its band"] = (p["energy_lo_j"] > p["energy_j"] * (1 + RTOL)) | (
        p["energy_hi_j"] < p["energy_j"] * (1 - RTOL)
    )
    return bad


def test_the_grid_covers_every_gpu_engine_and_over_10000_configurations() -> None:
    cols = grid()
    assert len(cols["gpu"]) >= 10_000
    assert set(cols["gpu"]) == set(gpu_names())
    assert set(cols["engine"]) == set(ENGINES)
    assert (cols["n_experts"] > 1).any() and (cols["n_experts"] == 1).any()


@pytest.mark.slow
def test_every_phase_stays_between_idle_and_the_board_limit(priced) -> None:
    cols, p = priced
    bad = violations(cols, p)
    text = []
    for check, rows in bad.items():
        if rows.any():
            per_gpu = {g: int((rows & (cols["gpu"] == g)).sum()) for g in gpu_names()}
            first = int(np.flatnonzero(rows)[0])
            text.append(f"{check}: {int(rows.sum())} rows {per_gpu}, e.g. row {first}")
    assert not text, "\n".join(text)


def test_dse_predict_of_one_configuration_prints_the_batched_numbers(capsys) -> None:
    """The issue's configuration: 1,004 W of prefill on a 700 W H200 before. `dse predict`
    (one call) gives the numbers the batched path gives it among the grid's H200 rows, and
    its prefill runs at the limit."""
    from dse.cli import main

    argv = ["--model", "llama-3-8b", "--gpu", "h200_sxm", "--batch-size", "32"]
    argv += ["--prompt-tokens", "1024", "--output-tokens", "256", "--tp", "1"]
    assert main(["predict", *argv, "--engine", "vllm", "--json"]) == 0
    one = json.loads(capsys.readouterr().out)["prediction"]
    full = grid()
    cols = {k: v[full["gpu"] == "h200_sxm"] for k, v in full.items()}
    row = int(
        np.flatnonzero(
            (cols["d_model"] == 4096)
            & (cols["n_layers"] == 32)
            & (cols["vocab_size"] == 128256)
            & (cols["engine"] == "vllm")
            & (cols["batch_size"] == 32)
            & (cols["prompt_tokens"] == 1024)
            & (cols["tensor_parallel"] == 1)
        )[0]
    )
    cols["output_tokens"][row], cols["batching"][row] = 256, "static"
    p = predict(cols)
    for k in (
        "ttft_s",
        "latency_s",
        "prefill_energy_j",
        "decode_energy_j",
        "energy_j",
        "energy_lo_j",
        "energy_hi_j",
        "avg_power_w",
    ):
        assert one[k] == pytest.approx(float(p[k][row]), rel=1e-6), k
    assert one["prefill_energy_j"] / one["ttft_s"] == pytest.approx(700.0, rel=1e-9)


def test_bounded_phases_keeps_the_total_and_rows_inside_bit_for_bit() -> None:
    gpu = get_gpu("h200_sxm")  # idle 75 W, board 700 W
    t_pre = np.array([1.0, 1.0, 1.0, 2.0, 1.0])
    t_dec = np.array([2.0, 2.0, 2.0, 0.0, 1.0])
    # inside; prefill above the board; decode below idle; no decode; total above board x t
    e_pre = np.array([500.0, 1000.0, 600.0, 900.0, 900.0])
    e_dec = np.array([800.0, 600.0, 100.0, 0.0, 900.0])
    pre, dec = bounded_phases(e_pre, e_dec, t_pre, t_dec, gpu)
    assert pre[0] == e_pre[0] and dec[0] == e_dec[0]
    assert pre[1] == 700.0 and dec[1] == 900.0  # the 300 J above the limit go to decode
    assert dec[2] == 150.0 and pre[2] == 550.0  # decode raised to idle, from prefill
    assert pre[3] == 900.0 and dec[3] == 0.0
    assert pre[4] == 700.0 and dec[4] == 700.0  # the total itself held at board x t
    p_pre, p_dec = pre / t_pre, np.where(t_dec > 0, dec / np.where(t_dec > 0, t_dec, 1), 75.0)
    assert ((p_pre >= 75) & (p_pre <= 700) & (p_dec >= 75) & (p_dec <= 700)).all()
    np.testing.assert_allclose((pre + dec)[:4], (e_pre + e_dec)[:4], rtol=1e-15)


def test_bounded_energy_band_holds_the_band_inside_the_power_bounds() -> None:
    gpu = get_gpu("a100_sxm")  # idle 55 W, board 400 W
    e = np.array([300.0, 300.0, 300.0])
    lo, hi = bounded_energy_band(
        e,
        lo_j=np.array([250.0, 40.0, 250.0]),
        hi_j=np.array([380.0, 380.0, 900.0]),
        latency_lo_s=np.array([0.9, 0.9, 0.9]),
        latency_hi_s=np.array([1.0, 1.0, 1.0]),
        n_gpus=np.array([1.0, 1.0, 2.0]),
        gpu=gpu,
    )
    np.testing.assert_array_equal(lo, [250.0, 49.5, 250.0])
    np.testing.assert_array_equal(hi, [380.0, 380.0, 800.0])
