"""Continuous-batching serving (`workload.batching`, dse.models.serving): the model's math on a
hand-worked case, the default (static) path unchanged, the field's validation, the shipped
constants' provenance, and the held-out serving energy on ml-energy v2 (skips without data)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from benchmark_scripts import load_benchmark

from dse.errors import ConfigError
from dse.models.serving import HostConstants, continuous, host_step_s, range_misses
from dse.predict import predict, predict_columns
from dse.predict.serving import CONSTANTS_FILE, constants_for, engine_traits
from dse.spec.arch import Architecture
from dse.spec.catalogue import lookup_model
from dse.spec.columns import as_columns
from dse.spec.hardware import get_gpu
from dse.spec.workload import Workload

ROOT = Path(__file__).resolve().parents[2]
C = HostConstants(
    engine="vllm",
    engine_version="0.4.2",
    gpu="h100_sxm",
    step_s=0.005,
    per_sequence_s=0.0003,
    per_extra_gpu_s=0.01,
    wait_above_idle_w=30.0,
    batch_range=(64.0, 1024.0),
    tensor_parallel=(1, 2, 4, 8),
)


def _static() -> dict[str, np.ndarray]:
    one = lambda v: np.array([v], dtype=float)  # noqa: E731
    return {
        "ttft_s": one(0.2),
        "ttft_lo_s": one(0.1),
        "ttft_hi_s": one(0.4),
        "tpot_s": one(0.08),
        "latency_s": one(1.0),
        "prefill_energy_j": one(100.0),
        "decode_energy_j": one(900.0),
        "energy_j": one(1000.0),
        "tpot_lo_s": one(0.04),
        "tpot_hi_s": one(0.16),
        "latency_lo_s": one(0.5),
        "latency_hi_s": one(2.0),
        "energy_lo_j": one(500.0),
        "energy_hi_j": one(2000.0),
    }


def test_hand_worked_case() -> None:
    # batch 100 on 2 GPUs, 11 output tokens (10 decode steps), H100 idle 70 W:
    # h = 5 ms + 0.3 ms x 100 + 10 ms x (2 - 1) = 45 ms per step; 10 steps: 0.45 s of host
    # time; both GPUs wait at 70 + 30 = 100 W: + 2 x 100 W x 0.45 s = 90 J.
    assert host_step_s(C, np.array([100]), np.array([2]))[0] == pytest.approx(0.045)
    out = continuous(_static(), np.array([100]), np.array([2]), np.array([11]), 70.0, C)
    assert out["latency_s"][0] == pytest.approx(1.45)
    assert out["tpot_s"][0] == pytest.approx(0.125)
    assert out["decode_energy_j"][0] == pytest.approx(990.0)
    assert out["energy_j"][0] == pytest.approx(1090.0)
    assert out["energy_per_output_token_j"][0] == pytest.approx(1090.0 / 1100.0)
    assert out["avg_power_w"][0] == pytest.approx(1090.0 / 2 / 1.45)  # per GPU
    assert out["breakdown.decode.host_s"][0] == pytest.approx(0.45)
    # the bands keep their relative width
    assert out["latency_hi_s"][0] / out["latency_s"][0] == pytest.approx(2.0)
    assert out["energy_lo_j"][0] / out["energy_j"][0] == pytest.approx(0.5)


def test_band_widens_to_the_host_models_own_band() -> None:
    # static band x0.5-x2 around the static latency; the host band log(+-1) = x0.368-x2.718
    # is wider on both sides and wins; a narrower one (+-0.1) leaves the static width
    wide = dataclasses.replace(C, band_log={"latency": (-1.0, 1.0), "energy": (-0.1, 0.1)})
    out = continuous(_static(), np.array([100]), np.array([2]), np.array([11]), 70.0, wide)
    lat, e, tpot = out["latency_s"][0], out["energy_j"][0], out["tpot_s"][0]
    assert out["latency_lo_s"][0] == pytest.approx(lat * np.exp(-1.0))
    assert out["latency_hi_s"][0] == pytest.approx(lat * np.exp(1.0))
    assert out["tpot_lo_s"][0] == pytest.approx(tpot * np.exp(-1.0))
    assert out["energy_lo_j"][0] == pytest.approx(e * 0.5)
    assert out["energy_hi_j"][0] == pytest.approx(e * 2.0)
    plain = continuous(_static(), np.array([100]), np.array([2]), np.array([11]), 70.0, C)
    assert plain["latency_lo_s"][0] == pytest.approx(plain["latency_s"][0] * 0.5)


def test_power_is_idle_plus_busy_times_duty() -> None:
    # the closed form the model docstring states: P = idle + (P_busy - idle) x duty + wait x
    # (1 - duty), per GPU, with P_busy = static energy / static time
    s = _static()
    out = continuous(s, np.array([100]), np.array([2]), np.array([11]), 70.0, C)
    duty = s["latency_s"][0] / out["latency_s"][0]
    busy = s["energy_j"][0] / 2 / s["latency_s"][0]
    expect = 70.0 + (busy - 70.0) * duty + 30.0 * (1 - duty)
    assert out["avg_power_w"][0] == pytest.approx(expect)


def test_range_misses() -> None:
    b, tp = np.array([32.0, 100.0, 2048.0, 100.0]), np.array([1, 16, 1, 1])
    eng = np.array(["vllm", "vllm", "vllm", "trtllm"])
    misses, flags = range_misses(C, b, tp, eng, "h100_sxm")
    m = misses["serving: batch_size"]
    assert m.excess == pytest.approx([np.log(0.5), 0.0, np.log(2.0), 0.0])
    assert flags["serving: tensor_parallel not fitted"].tolist() == [False, True, False, False]
    assert flags["serving: engine not fitted (vllm 0.4.2)"].tolist() == [False] * 3 + [True]
    _, other = range_misses(C, b, tp, eng, "h200_sxm")
    assert other["serving: host constants of h100_sxm"].all()


def _configs(n: int = 3) -> dict[str, list]:
    a = lookup_model("Llama-3.1-8B").resolved()
    arch = {k: v for k, v in dataclasses.asdict(a).items() if k in Architecture.field_names()}
    cfg = {k: [v] * n for k, v in arch.items()}
    cfg.update(
        batch_size=[8, 256, 512][:n],
        prompt_tokens=[256] * n,
        output_tokens=[400] * n,
        tensor_parallel=[1, 1, 2][:n],
        gpu=["h100_sxm"] * n,
    )
    return cfg


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert list(a) == list(b)
    for k in a:
        assert np.array_equal(a[k], b[k]), k


def test_static_is_the_default_and_unchanged() -> None:
    cfg = _configs()
    _same(predict(cfg), predict({**cfg, "batching": ["static"] * 3}))
    assert Workload().batching == "static"


def test_mixed_batch_prices_each_row_as_asked() -> None:
    cfg = _configs()
    static = predict(cfg)
    cont = predict({**cfg, "batching": ["continuous"] * 3})
    mixed = predict({**cfg, "batching": ["static", "continuous", "static"]})
    for k in static:
        want = [static[k][0], cont[k][1], static[k][2]]
        assert np.array_equal(mixed[k], np.array(want, dtype=mixed[k].dtype)), k
    assert mixed["breakdown.decode.host_s"].tolist()[::2] == [0.0, 0.0]


def _static_as(cfg: dict[str, list], version: str) -> dict[str, np.ndarray]:
    """The static prediction as engine `version` prices it: GQA-aware decode attention and the
    running batch's KV at its mean context when its constants say so (vLLM 0.11.1), Level 3
    as fitted otherwise."""
    v = json.loads(CONSTANTS_FILE.read_text())["versions"][version]
    cols, n = as_columns(cfg)
    return predict_columns(
        cols,
        n,
        gqa_aware=np.full(n, v["gqa_aware_attention"]),
        kv_mean_context=np.full(n, v["kv_at_mean_context"]),
    )


@pytest.mark.parametrize("version", ["0.4.2", "0.11.1"])
def test_continuous_is_the_model_on_the_static_prediction(version: str) -> None:
    cfg = _configs()
    static = _static_as(cfg, version)
    cont = predict({**cfg, "batching": ["continuous"] * 3, "engine_version": [version] * 3})
    c = constants_for("h100_sxm", version)
    b, tp, out = (np.array(cfg[k]) for k in ("batch_size", "tensor_parallel", "output_tokens"))
    want = continuous(static, b, tp, out, 70.0, c)
    for k, v in want.items():
        assert np.allclose(cont[k], v, rtol=1e-12), k
    if version == "0.4.2":  # host time on top of the static batch, the GPU waiting in it
        assert (cont["latency_s"] > static["latency_s"]).all()
        assert (cont["avg_power_w"] < static["avg_power_w"]).all()
        # batch 8 lies below the fitted range: flagged, with the serving part named
        assert "serving: batch_size 8 <" in cont["out_of_range_inputs"][0]
    else:  # current vLLM: the static batch as it runs it, GPU time x0.97, at its power
        assert (cont["latency_s"] < static["latency_s"]).all()
        assert np.allclose(cont["avg_power_w"], static["avg_power_w"], rtol=1e-9)
        # Llama-3.1-8B (4 query heads a KV head): faster than the static prediction as argonne's
        # engines price it (each KV head read once per query head)
        assert (static["latency_s"] < predict(cfg)["latency_s"]).all()


def test_gqa_aware_attention_drops_only_the_gqa_excess() -> None:
    """vLLM 0.11.1 is priced with GQA-aware decode attention (`gqa_aware_attention` in the
    shipped constants): Level 3's `a_attn_gqa` excess is gone on its continuous rows, a
    multi-head model (one query head a KV head) and every static or 0.4.2 row are unchanged."""
    gqa = _configs()
    mha = {**gqa, "n_kv_heads": gqa["n_heads"]}
    for cfg, moved in ((gqa, True), (mha, False)):
        cols, n = as_columns(cfg)
        plain = predict_columns(cols, n)
        aware = predict_columns(cols, n, gqa_aware=np.ones(n, dtype=bool))
        if moved:
            assert (aware["latency_s"] < plain["latency_s"]).all()
            assert (aware["decode_energy_j"] < plain["decode_energy_j"]).all()
            # only decode attention over the KV cache is cheaper (the MLP residual moves both
            # phases a little: it reads the structured decode time)
            att = "breakdown.decode.attention/core_s"
            assert (aware[att] < 0.95 * plain[att]).all()
        else:
            for k in ("latency_s", "energy_j", "ttft_s"):
                assert np.array_equal(aware[k], plain[k]), k
    # which rows: continuous rows of 0.11.1 (and versions it prices), not 0.4.2 or static
    rows = {
        **_configs(),
        "batching": ["continuous", "continuous", "static"],
        "engine_version": ["0.11.1", "0.4.2", "0.11.1"],
    }
    for got in engine_traits(as_columns(rows)[0]):
        assert got.tolist() == [True, False, False]
    for got in engine_traits(as_columns({**rows, "engine_version": ["0.12.0"] * 3})[0]):
        assert got.tolist() == [True, True, False]
    assert engine_traits(as_columns(_configs())[0]) == (None, None)  # static: nothing to change


def test_running_batch_holds_its_kv_at_mean_context() -> None:
    """vLLM 0.11.1's running batch (`kv_at_mean_context`): sequences spread over their output
    hold prompt + half the output each, so a batch whose full-length KV does not fit (a static
    batch runs it in waves) is resident; a batch that fits either way moves little (Level 3
    reads its KV fill)."""
    a = lookup_model("Qwen/Qwen3-8B").resolved()
    arch = {k: v for k, v in dataclasses.asdict(a).items() if k in Architecture.field_names()}
    cfg = {k: [v] * 2 for k, v in arch.items()}
    # 8k-token reasoning outputs on one H100: 64 sequences need ~77 GB of KV at full length (a
    # static batch runs them in 2 waves), ~40 GB at mean context (resident); 8 fit either way
    cfg.update(
        batch_size=[64, 8],
        prompt_tokens=[200] * 2,
        output_tokens=[8000] * 2,
        tensor_parallel=[1] * 2,
        gpu=["h100_sxm"] * 2,
    )
    cols, n = as_columns(cfg)
    full = predict_columns(cols, n)
    mean = predict_columns(cols, n, kv_mean_context=np.ones(n, dtype=bool))
    assert mean["latency_s"][0] < 0.9 * full["latency_s"][0]
    for k in ("latency_s", "energy_j"):  # only Level 3's KV-fill input moves (8 sequences)
        assert mean[k][1] == pytest.approx(full[k][1], rel=0.02), k
    # the KV need the waves are counted from: half the output
    from dse.predict.request import kv_memory, kv_waves

    need_full, free = kv_memory(cols, get_gpu("h100_sxm"))
    need_mean, free2 = kv_memory(cols, get_gpu("h100_sxm"), np.ones(n, dtype=bool))
    assert np.array_equal(free, free2)
    assert need_mean == pytest.approx(need_full * (200 + 4000) / 8200, rel=1e-12)
    b = cols["batch_size"]
    assert kv_waves(b, need_full, free)[1].tolist() == [2.0, 1.0]
    assert kv_waves(b, need_mean, free)[1].tolist() == [1.0, 1.0]


def test_batching_is_validated_once() -> None:
    with pytest.raises(ConfigError, match=r"batching: must be one of static, continuous"):
        predict({**_configs(1), "batching": ["dynamic"]})
    with pytest.raises(ConfigError, match=r"workload.batching: must be one of static"):
        Workload(batching="dynamic").validate()


def test_shipped_constants_carry_provenance() -> None:
    d = json.loads(CONSTANTS_FILE.read_text())
    assert d["engine"] == "vllm" and sorted(d["versions"]) == ["0.11.1", "0.4.2"]
    for version, v in d["versions"].items():
        assert v["default_gpu"] in v["gpus"], version
        assert v["fitted"]["command"].endswith("--write-constants"), version
        assert "commit" in v["source"] and v["terms"], version
        for gpu, e in v["gpus"].items():
            where = f"{version} {gpu}"
            lo, hi = e["batch_size_range"]
            assert 1 <= lo < hi, where
            assert e["rows"] > 100 and len(e["models"]) >= 14, where
            assert len(e["files_sha256"]) == 64, where
            assert e["held_out"]["protocol"] == "leave-one-model-out", where
            assert e["step_s"] >= 0 and e["per_sequence_s"] >= 0, where
            lo, hi = e["band_log"]["energy"]
            assert lo < 0 < hi, where
            for cov in e["held_out"]["band_coverage_nested"].values():
                assert 0.8 <= cov <= 0.95, where
    old = d["versions"]["0.4.2"]["gpus"]["h100_sxm"]
    assert old["per_sequence_s"] > 0 and old["held_out"]["energy_mape"] <= 0.15
    new = d["versions"]["0.11.1"]
    assert set(new["gpus"]) == {"h100_sxm"}  # B200: scored held out, priced with H100's
    # fitted on the static prediction as 0.11.1 runs it (GQA-aware attention, the running
    # batch's KV at its mean context): the scale is near 1 (0.970; 0.887 on the static
    # prediction as is), held out 13.5% (15.2% then)
    assert new["gqa_aware_attention"] is True and new["kv_at_mean_context"] is True
    old_v = d["versions"]["0.4.2"]
    assert old_v["gqa_aware_attention"] is False and old_v["kv_at_mean_context"] is False
    assert new["gpus"]["h100_sxm"]["held_out"]["energy_mape"] <= 0.14
    assert 0.93 < new["gpus"]["h100_sxm"]["gpu_time_scale"] < 1.0
    # the shipped band reaches the prediction as read from the JSON
    for version, v in d["versions"].items():
        assert constants_for("h100_sxm", version).band_log["energy"] == tuple(
            v["gpus"]["h100_sxm"]["band_log"]["energy"]
        )


# ---------------------------------------------------------------------------- measured data
def _bench():
    return load_benchmark("serving_accuracy")


def test_write_constants_never_rewrites_a_version_held_fixed() -> None:
    """`serving_accuracy.py --write-constants` rewrites only the versions named (default the
    newest): 0.4.2's shipped constants are held fixed (test_vllm_042_predictions_unchanged),
    and refitted on today's static prediction its wait power would move 33.6 -> 52.6 W."""
    b = _bench()
    assert b.parser().parse_args(["--write-constants"]).versions == ("0.11.1",)
    with pytest.raises(SystemExit):  # argparse refuses it before anything is measured
        b.parser().parse_args(["--write-constants", "--versions", "0.4.2"])
    with pytest.raises(SystemExit):
        b.parser().parse_args(["--versions", "0.11.1,0.9"])
    shipped = json.loads(CONSTANTS_FILE.read_text())
    # a fit that moved both versions, as the script's fit on today's code does
    fitted = json.loads(CONSTANTS_FILE.read_text())
    fitted["versions"]["0.4.2"]["gpus"]["h100_sxm"]["wait_above_idle_w"] = 52.6
    fitted["versions"]["0.11.1"]["gpus"]["h100_sxm"]["gpu_time_scale"] = 0.5
    out = b.merge_constants(shipped, fitted, ("0.11.1",))
    assert out["versions"]["0.4.2"] == shipped["versions"]["0.4.2"]
    assert out["versions"]["0.11.1"]["gpus"]["h100_sxm"]["gpu_time_scale"] == 0.5
    assert list(out["versions"]) == list(shipped["versions"])
    with pytest.raises(ValueError, match=r"0\.4\.2: held fixed"):
        b.merge_constants(shipped, fitted, ("0.4.2", "0.11.1"))


@pytest.fixture(scope="module")
def measured(data_dir: Path):
    return _bench().measure(data_dir)


@pytest.mark.slow
def test_held_out_serving_energy_h100_within_15_percent(measured) -> None:
    _, own, transfer, _ = measured
    h100 = own[own["gpu"] == "h100_sxm"].iloc[0]
    assert h100["rows"] == 151 and h100["models"] == 22
    assert h100["energy_mape"] <= 0.15
    assert h100["energy_mape"] < 0.5 * h100["static_energy_mape"]
    # the band, calibrated on other models' held-out residuals, holds on a held-out model
    assert 0.85 <= h100["latency_coverage"] <= 0.95
    assert 0.85 <= h100["energy_coverage"] <= 0.95
    a100 = transfer[transfer["gpu"] == "a100_sxm_40gb"].iloc[0]
    assert a100["energy_mape"] < a100["static_energy_mape"]


def test_held_out_model_never_in_its_fit(measured) -> None:
    # a model's predictions do not move when its own measurements do
    from dse.fitting import serving as S

    rows = measured[0]
    rows = rows[rows["gpu"] == "h100_sxm"]
    model = rows["model"].iloc[0]
    moved = rows.copy()
    own = moved["model"] == model
    moved.loc[own, ["time_s", "energy_j"]] *= 3.0
    a = S.leave_one_model_out(rows)
    b = S.leave_one_model_out(moved)
    assert np.array_equal(a.loc[own, "pred_energy_j"], b.loc[own, "pred_energy_j"])
    assert not np.array_equal(a.loc[~own, "pred_energy_j"], b.loc[~own, "pred_energy_j"])


# ---------------------------------------------------------------------------- ml-energy v3
@pytest.fixture(scope="module")
def measured_v3(data_dir: Path):
    if not (data_dir / "ml-energy-v3").is_dir():
        pytest.skip("no ml-energy-v3 in the shared data")
    return _bench().measure_v3(data_dir)


@pytest.mark.slow
def test_current_vllm_fit_on_v3_h100(measured_v3) -> None:
    """vLLM 0.11.1 on ml-energy v3's H100 rows, whole models held out: the shipped terms beat the
    static prediction and the 0.4.2 constants by far; the numbers docs/accuracy.md reports."""
    from dse.fitting import serving as S

    rows, variants, sens, tasks, _ = measured_v3
    assert len(rows) == 181 and rows["model"].nunique() == 14 and set(rows["gpu"]) == {"h100_sxm"}
    v = variants.set_index("variant")
    static = v.loc["static prediction (batching: static)"]
    before = v.loc["vLLM 0.4.2 constants (before)"]
    shipped = v.loc["GPU-time scale (shipped), model held out"]
    # x3.25 too long (energy 58% off on the one power path, 2026-12-03; 65% before it)
    assert before["time_mape"] > 1.5 and before["energy_mape"] > 0.5
    assert shipped["energy_mape"] <= 0.14 and shipped["time_mape"] <= 0.12  # 13.5 / 10.8%
    # the shipped terms beat the static prediction (energy 13.5 against 17.3%, time 10.8 against
    # 16.1%, 2026-12-03); the gain is the static prediction as 0.11.1 runs it (GQA-aware
    # attention, KV at mean context): alone it scores 13.2 / 10.7%, the fitted scale (0.970)
    # stays within a point
    assert shipped["energy_mape"] < static["energy_mape"]
    assert shipped["time_mape"] < 0.9 * static["time_mape"]
    aware = v.loc["static prediction as 0.11.1 runs it (scale 1)"]
    assert aware["time_mape"] < 0.9 * static["time_mape"]
    assert abs(shipped["energy_mape"] - aware["energy_mape"]) < 0.01
    # gpt-oss's MXFP4 experts priced on H100's 4-bit MoE table: its static energy within 15%
    # (median per model; +63% / +26% for -120b / -20b on the bf16 table)
    for model, r in rows[rows["model"].str.startswith("openai/gpt-oss")].groupby("model"):
        ratio = float(np.median(r["static.energy_j"] / r["energy_j"]))
        assert abs(ratio - 1) < 0.15, (model, ratio)
    assert v.loc["GPU-time scale (shipped), shape held out"]["energy_mape"] <= 0.20
    # the constants fitted on every row, as shipped
    c = S.fit_constants(rows, S.VERSIONS["0.11.1"].terms)
    shipped_c = constants_for("h100_sxm", "0.11.1")
    assert c["gpu_time_scale"] == pytest.approx(shipped_c.gpu_time_scale, rel=1e-6)
    # the assumed prompt length moves the static prediction far more than the fitted one
    s = sens.set_index("prompt tokens")
    assert s.loc["2048 every task", "static energy"] > 2 * s.loc["128 every task", "static energy"]
    assert (sens["energy"] <= 0.32).all()  # 2,048 tokens every task: 30.3%
    assert set(tasks["task"]) == {"gpqa", "lm-arena-chat", "sourcegraph-fim"}


@pytest.mark.slow
def test_v3_b200_is_scored_on_its_own_rows_held_out(data_dir: Path) -> None:
    """ml-energy v3's B200 rows (issue 35), priced by B200's artifact: each model's energy by
    terms fitted on B200's other models; H100's rows and the shipped constants do not enter."""
    if not (data_dir / "ml-energy-v3").is_dir():
        pytest.skip("no ml-energy-v3 in the shared data")
    rows, variants, _, tasks, _ = _bench().measure_v3(data_dir, "b200_sxm")
    assert set(rows["gpu"]) == {"b200_sxm"} and len(rows) >= 150
    assert rows["model"].nunique() >= 12
    assert np.all(np.isfinite(rows["static.energy_j"])) and (rows["static.latency_s"] > 0).all()
    v = variants.set_index("variant")
    held = v.loc["GPU-time scale (shipped), model held out"]
    # docs/accuracy.md "B200 SXM and SGLang": not the <= 20% target; gpt-oss bounds it
    assert held["energy_mape"] < v.loc["vLLM 0.4.2 constants (before)"]["energy_mape"]
    assert held["energy_mape"] < 0.6
    # H100's constants (what prices B200) with B200's gpt-oss runs on the MoE kernel they ran
    # (MXFP4 x MXFP8, priced as nvfp4): 23.7%; read as int4 (bf16 activations) 25.8%
    assert v.loc["vLLM 0.11.1 constants of h100_sxm (shipped)"]["energy_mape"] < 0.245
    assert "vLLM 0.11.1 constants of h100_sxm (shipped)" in v.index
    assert set(tasks["task"]) <= {"gpqa", "lm-arena-chat", "sourcegraph-fim"}


def test_v3_b200_gpt_oss_runs_read_as_the_moe_kernel_they_ran(data_dir: Path) -> None:
    """ml-energy v3's B200 gpt-oss runs set VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1 (MXFP4 weights,
    MXFP8 activations), the H100 runs not: B200's are read as `nvfp4` (B200's nvfp4 MoE model
    prices that kernel's measured rows, never in its fit, at 15.3%; the bf16-activation MXFP4
    model at 387%), H100's as `int4`; no other run moves."""
    if not (data_dir / "ml-energy-v3").is_dir():
        pytest.skip("no ml-energy-v3 in the shared data")
    from dse.fitting import serving as S

    rows = S.read_v3(data_dir)
    oss = rows["model"].str.startswith("openai/gpt-oss")
    dtype = rows.groupby([oss, "gpu"])["weight_dtype"].unique()
    assert list(dtype.loc[(True, "b200_sxm")]) == ["nvfp4"]
    assert list(dtype.loc[(True, "h100_sxm")]) == ["int4"]
    assert not rows.loc[~oss, "weight_dtype"].isin(["int4", "nvfp4"]).any()


def test_b200_nvfp4_moe_model_prices_the_mxfp4_mxfp8_kernel(data_dir: Path) -> None:
    """Why B200's MXFP4 x MXFP8 runs are priced as nvfp4 (the test above): on aiconfigurator's
    B200 vLLM w4a8_mxfp4_mxfp8 rows (2 layouts, no model fitted on them) the shipped nvfp4 MoE
    model reads 15.3% (median ratio 0.88), the w4a16_mxfp4 one 387%."""
    import pandas as pd

    from dse.models.artifact import Artifact
    from dse.models.moe import moe_inputs

    path = (
        data_dir / "aiconfigurator/aic-core/src/aiconfigurator_core/systems/data/b200_sxm/moe"
        "/vllm/0.24.0/moe_perf.parquet"
    )
    if not path.is_file():
        pytest.skip(f"no {path}")
    t = pd.read_parquet(path)
    t = t[t["moe_dtype"] == "w4a8_mxfp4_mxfp8"].reset_index(drop=True)
    assert len(t) > 1000
    y, inp = t["latency"].to_numpy() / 1e3, moe_inputs(t)
    art = Artifact.load("b200_sxm")

    def mape(name: str) -> float:
        p = np.asarray(art.model(name).predict(**inp)["latency_s"])
        return float(np.mean(np.abs(p / y - 1.0)))

    assert mape("moe.vllm.nvfp4") < 0.2
    assert mape("moe.vllm.w4a16_mxfp4") > 1.0


def test_unfitted_gpu_is_priced_with_the_default_and_flagged() -> None:
    """B200 has no 0.11.1 constants of its own (held out by model they lose to H100's, docs/
    accuracy.md "B200 SXM and SGLang"): a continuous B200 row is priced with H100's, flagged;
    its static batch still gets 0.11.1's engine traits (they are the version's, not the GPU's)."""
    cfg = {**_configs(1), "gpu": ["b200_sxm"], "batching": ["continuous"]}
    p = predict(cfg)
    assert "serving: host constants of h100_sxm" in p["out_of_range_inputs"][0]
    assert p["out_of_range"][0]
    c = constants_for("b200_sxm", "0.11.1")
    assert c.gpu == "h100_sxm" and c.gpu_time_scale == constants_for("h100_sxm").gpu_time_scale
    static = _static_as({**_configs(1), "gpu": ["b200_sxm"]}, "0.11.1")
    assert p["latency_s"][0] == pytest.approx(c.gpu_time_scale * static["latency_s"][0], rel=1e-9)
    h100 = predict({**_configs(1), "batching": ["continuous"]})
    assert "host constants of" not in h100["out_of_range_inputs"][0]
