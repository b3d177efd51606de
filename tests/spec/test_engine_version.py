"""`workload.engine_version` (issue 33, "Serving on today's engines"): the field's rule from every
entry point (API, YAML, CLI flag, batch CSV), its default (the newest version fitted), the
out-of-range flag of a version not fitted, the GPU-time scale of vLLM 0.11.1 on a hand-worked
case, and vLLM 0.4.2's continuous-batching predictions unchanged by the version field."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from dse.cli import main
from dse.errors import ConfigError
from dse.models.serving import HostConstants, continuous, range_misses
from dse.predict import predict
from dse.predict.serving import (
    CONSTANTS_FILE,
    constants_for,
    fitted_versions,
    nearest_version,
    version_key,
)
from dse.spec.arch import Architecture
from dse.spec.catalogue import lookup_model
from dse.spec.choices import DEFAULT_ENGINE_VERSION
from dse.spec.fields import check
from dse.spec.space import load_space
from dse.spec.workload import Workload

RULE = "must be a version text like '0.11.1' (quoted in YAML)"
# vLLM 0.4.2's H100 constants as shipped before the version was a field (format 1 of
# serving_constants.json, commit 753b23e): its predictions must not move
V042_H100 = dict(
    step_s=0.005978098769434253,
    per_sequence_s=0.00031382780877268145,
    per_extra_gpu_s=0.011519443214142657,
    wait_above_idle_w=33.55738454115291,
)


def _configs(n: int = 3) -> dict[str, list]:
    a = lookup_model("Llama-3.1-8B").resolved()
    arch = {k: v for k, v in dataclasses.asdict(a).items() if k in Architecture.field_names()}
    cfg = {k: [v] * n for k, v in arch.items()}
    cfg.update(
        batch_size=[64, 256, 512][:n],
        prompt_tokens=[256] * n,
        output_tokens=[400] * n,
        tensor_parallel=[1, 1, 2][:n],
        gpu=["h100_sxm"] * n,
        batching=["continuous"] * n,
    )
    return cfg


# ---------------------------------------------------------------------------- the field
@pytest.mark.parametrize("good", ["0.11.1", "0.4.2", "1.3.0rc20", "0.6.3.post1", "v0.11.1", "1"])
def test_version_texts_are_accepted(good: str) -> None:
    assert check("engine_version", good) == good.removeprefix("v")


@pytest.mark.parametrize(("bad", "shown"), [("abc", "'abc'"), ("", "''"), ("0.11 .1", "'0.11 .1'"),
                                            (0.11, "0.11"), (True, "True")])  # fmt: skip
def test_bad_version_gets_the_rule_and_the_value(bad: object, shown: str) -> None:
    with pytest.raises(ConfigError) as exc:
        Workload(engine_version=bad).validate()  # type: ignore[arg-type]
    assert str(exc.value) == f"workload.engine_version: {RULE}, got {shown}"


def test_bad_version_in_a_batch_names_the_row() -> None:
    with pytest.raises(ConfigError) as exc:
        predict({**_configs(2), "engine_version": ["0.4.2", "x"]})
    assert str(exc.value) == f"engine_version[1]: {RULE}, got 'x'"


def test_bad_version_in_yaml_is_located(tmp_path: Path) -> None:
    path = tmp_path / "space.yaml"
    path.write_text(
        "name: t\nhardware: h100_sxm\n"
        "workload: {batch_size: 64, batching: continuous, engine_version: 0.11}\n"
        "space: {d_model: 1024, n_layers: 4, n_heads: 8, d_ff: 4096}\n"
    )
    with pytest.raises(ConfigError) as exc:
        load_space(path)
    assert f"{path}:3: workload.engine_version: {RULE}, got 0.11" in str(exc.value)
    # a range of versions has no meaning
    path.write_text(path.read_text().replace("0.11}", "{low: '0.4.2', high: '0.11.1'}}"))
    with pytest.raises(ConfigError, match=r"workload\.engine_version\.low: unknown key"):
        load_space(path)
    path.write_text(path.read_text().replace("{low: '0.4.2', high: '0.11.1'}", "'0.4.2'"))
    space = load_space(path)
    assert [p.values for p in space.params if p.name == "engine_version"] == [("0.4.2",)]


def test_bad_version_flag_and_csv_cell_are_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["predict", "--model", "llama-3-8b", "--batching", "continuous"]
    assert main([*argv, "--engine-version", "latest"]) == 2
    err = capsys.readouterr().err
    assert f"--engine-version: {RULE}, got 'latest'" in err and "Traceback" not in err
    csv = tmp_path / "in.csv"
    csv.write_text(
        "d_model,n_layers,n_heads,d_ff,batching,engine_version\n"
        "4096,32,32,14336,continuous,0.4.2\n4096,32,32,14336,continuous,new\n"
    )
    assert main(["predict", "--batch", str(csv)]) == 2
    err = capsys.readouterr().err
    assert f"{csv}: row 3: engine_version: {RULE}, got 'new'" in err


def test_flag_reaches_the_prediction(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["predict", "--model", "llama-3-8b", "--batching", "continuous", "--batch-size", "64"]
    assert main([*argv, "--engine-version", "0.4.2", "--json"]) == 0
    old = json.loads(capsys.readouterr().out)
    assert main([*argv, "--json"]) == 0
    new = json.loads(capsys.readouterr().out)
    assert (
        old["config"]["engine_version"] == "0.4.2" and new["config"]["engine_version"] == "0.11.1"
    )
    assert old["prediction"]["latency_s"] > 1.5 * new["prediction"]["latency_s"]


# ---------------------------------------------------------------------------- the default
def test_default_is_the_newest_version_fitted() -> None:
    d = json.loads(CONSTANTS_FILE.read_text())
    newest = max(d["versions"], key=version_key)
    assert DEFAULT_ENGINE_VERSION == newest == fitted_versions()[-1] == "0.11.1"
    assert Workload().engine_version == newest
    cfg = _configs()
    a, b = predict(cfg), predict({**cfg, "engine_version": [newest] * 3})
    for k in a:
        assert np.array_equal(a[k], b[k]), k


def test_static_batching_ignores_the_version() -> None:
    cfg = {**_configs(), "batching": ["static"] * 3}
    a, b = predict(cfg), predict({**cfg, "engine_version": ["0.4.2"] * 3})
    for k in a:
        assert np.array_equal(a[k], b[k]), k


# ---------------------------------------------------------------------------- range
def test_version_not_fitted_is_flagged_and_priced_with_the_nearest() -> None:
    assert nearest_version("0.11.1") == "0.11.1"
    assert nearest_version("0.6.0") == "0.4.2"  # the newest fitted one not newer
    assert nearest_version("0.12.0") == "0.11.1"
    assert nearest_version("0.3.0") == "0.4.2"  # older than all: the oldest
    cfg = _configs()
    p = predict({**cfg, "engine_version": ["0.11.1", "0.6.0", "0.4.2"]})
    flag = "serving: engine_version not fitted"
    assert [flag in t for t in p["out_of_range_inputs"]] == [False, True, False]
    assert p["out_of_range"][1]
    old = predict({**cfg, "engine_version": ["0.4.2"] * 3})
    assert p["latency_s"][1] == old["latency_s"][1]  # 0.6.0 priced with 0.4.2's constants
    new = predict({**cfg, "engine_version": ["0.12.0"] * 3})
    assert all(flag in t for t in new["out_of_range_inputs"])


def test_range_misses_flag_the_version() -> None:
    c = constants_for("h100_sxm", "0.11.1")
    b, tp, eng = np.array([64.0, 64.0]), np.array([1, 1]), np.array(["vllm", "vllm"])
    _, flags = range_misses(c, b, tp, eng, "h100_sxm", np.array(["0.11.1", "0.9.0"]))
    assert flags["serving: engine_version not fitted (constants of vllm 0.11.1)"].tolist() == [
        False,
        True,
    ]


# ---------------------------------------------------------------------------- the model
def test_gpu_time_scale_hand_worked() -> None:
    # s = 0.8, no host time: every time and energy x0.8, so power per GPU is the static one;
    # latency 1 s -> 0.8 s, energy 1000 J -> 800 J on 2 GPUs: 500 W per GPU either way
    one = lambda v: np.array([v], dtype=float)  # noqa: E731
    static = {k: one(v) for k, v in dict(
        ttft_s=0.2, tpot_s=0.08, latency_s=1.0, prefill_energy_j=100.0, decode_energy_j=900.0,
        energy_j=1000.0, ttft_lo_s=0.1, ttft_hi_s=0.4, tpot_lo_s=0.04, tpot_hi_s=0.16,
        latency_lo_s=0.5, latency_hi_s=2.0, energy_lo_j=500.0, energy_hi_j=2000.0).items()}  # fmt: skip
    c = HostConstants("vllm", "x", "h100_sxm", 0.0, 0.0, 0.0, 0.0, (1.0, 512.0), (1, 2),
                      gpu_time_scale=0.8)  # fmt: skip
    out = continuous(static, one(100), one(2), one(11), 70.0, c)
    assert out["latency_s"][0] == pytest.approx(0.8)
    assert out["ttft_s"][0] == pytest.approx(0.16) and out["tpot_s"][0] == pytest.approx(0.064)
    assert out["energy_j"][0] == pytest.approx(800.0)
    assert out["prefill_energy_j"][0] + out["decode_energy_j"][0] == pytest.approx(800.0)
    assert out["avg_power_w"][0] == pytest.approx(500.0)
    assert out["latency_hi_s"][0] == pytest.approx(1.6)
    assert out["ttft_lo_s"][0] == pytest.approx(0.08)
    assert out["breakdown.decode.host_s"][0] == 0.0


def test_breakdown_sums_to_the_scaled_latency() -> None:
    p = predict(_configs())
    parts = sum(v for k, v in p.items() if k.startswith("breakdown."))
    assert np.allclose(parts, p["latency_s"], rtol=1e-9)


def test_vllm_042_predictions_unchanged() -> None:
    """0.4.2's shipped constants are the ones fitted before the field existed, and its
    predictions are the continuous model on the static prediction with them (as before)."""
    c = constants_for("h100_sxm", "0.4.2")
    assert {k: getattr(c, k) for k in V042_H100} == V042_H100 and c.gpu_time_scale == 1.0
    cfg = _configs()
    static = predict({**cfg, "batching": ["static"] * 3})
    cont = predict({**cfg, "engine_version": ["0.4.2"] * 3})
    b, tp, out = (np.array(cfg[k]) for k in ("batch_size", "tensor_parallel", "output_tokens"))
    before = HostConstants("vllm", "0.4.2", "h100_sxm", **V042_H100,
                           batch_range=(63.0, 1476.0), tensor_parallel=(1, 2, 4, 8))  # fmt: skip
    want = continuous(static, b, tp, out, 70.0, before)
    for k in ("latency_s", "tpot_s", "energy_j", "avg_power_w", "breakdown.decode.host_s"):
        assert np.array_equal(cont[k], want[k]), k
    assert np.array_equal(cont["ttft_s"], static["ttft_s"])
