"""`dse energy` and `dse predict` speak one language: one definition per name, and the
analytical estimator run over the predictor's times when the user asks for them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ARGS = ("--model", "llama-3-8b", "--batch-size", "8", "--prompt-tokens", "1024",
        "--output-tokens", "256", "--gpu", "h100_sxm")  # fmt: skip


def dse(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dse", *args], capture_output=True, text=True, cwd=REPO, timeout=120
    )


def _json(*args: str) -> dict:
    r = dse(*args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.slow
def test_energy_per_output_token_means_what_predict_means() -> None:
    est = _json("energy", *ARGS)["estimates"]
    pred = _json("predict", *ARGS)["prediction"]
    gen = 8 * 256
    for preset in ("paper", "corrected"):
        e = est[preset]
        # The whole request's energy per output token, prefill included, in both commands.
        assert e["energy_per_output_token_j"] == pytest.approx(e["energy_j"] / gen, rel=1e-12)
        assert e["decode_energy_per_output_token_j"] == pytest.approx(
            e["decode_energy_j"] / gen, rel=1e-12
        )
        assert e["prefill_energy_per_input_token_j"] == pytest.approx(
            e["prefill_energy_j"] / (8 * 1024), rel=1e-12
        )
        assert "energy_per_input_token_j" not in e
    assert pred["energy_per_output_token_j"] == pytest.approx(pred["energy_j"] / gen, rel=1e-9)


@pytest.mark.slow
def test_times_predicted_runs_the_static_term_over_predict_times() -> None:
    own = _json("energy", *ARGS, "--preset", "corrected")
    doc = _json("energy", *ARGS, "--preset", "corrected", "--times", "predicted")
    pred = _json("predict", *ARGS)["prediction"]
    c, t = doc["estimates"]["corrected"], doc["predicted_times"]
    assert t["ttft_s"] == pytest.approx(pred["ttft_s"], rel=1e-9)
    assert t["ttft_s"] + t["decode_s"] == pytest.approx(pred["latency_s"], rel=1e-9)
    assert c["prefill_time_s"] == pytest.approx(pred["ttft_s"], rel=1e-9)
    assert c["time_s"] == pytest.approx(pred["latency_s"], rel=1e-9)
    assert t["energy_j"] == pytest.approx(pred["energy_j"], rel=1e-9)
    # The roofline's own prefill time differs from the predictor's: the option changes the answer.
    assert own["estimates"]["corrected"]["prefill_time_s"] > 2 * c["prefill_time_s"]
    # Only the static term moves with the time.
    for comp in ("compute", "param_access", "kv_write", "attn_read"):
        assert c[f"breakdown.{comp}.total_j"] == pytest.approx(
            own["estimates"]["corrected"][f"breakdown.{comp}.total_j"], rel=1e-12
        )
    text = dse("energy", *ARGS, "--preset", "corrected", "--times", "predicted")
    assert text.returncode == 0, text.stderr
    assert "times from dse predict (hymell" in text.stdout
    assert "dse predict's energy of the same batch" in text.stdout


def test_times_predicted_refuses_a_given_time() -> None:
    r = dse("energy", *ARGS, "--times", "predicted", "--time-s", "3")
    assert r.returncode == 2
    assert "--times predicted" in r.stderr and "Traceback" not in r.stderr
