"""`weight_dtype: nvfp4` on the command line (issue 35): `dse predict` and `dse energy` refuse it
on a GPU without FP4 tensor cores with the reason and no traceback (a --batch CSV row gets it in
its error column); `dse arch` still counts its memory and warns that it cannot run there."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pandas as pd
import pytest

from dse.cli import main
from dse.resources import surrogates_dir
from dse.spec.catalogue import lookup_model
from dse.spec.hardware import fp4_gpu_names

B200 = "b200_sxm"
REFUSAL = (
    "weight_dtype: nvfp4 needs FP4 tensor cores, which h100_sxm lacks (Blackwell and later: "
    f"{', '.join(fp4_gpu_names())}), got 'nvfp4'"
)
NVFP4 = ["--model", "llama-3-8b", "--weight-dtype", "nvfp4"]


@pytest.mark.skipif(
    not (surrogates_dir() / B200 / "manifest.json").is_file(), reason="b200_sxm artifact absent"
)
def test_dse_predict_says_why_without_a_traceback(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["predict", "--model", "llama-3-8b", "--weight-dtype", "nvfp4", "--gpu", "h100_sxm"]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    assert err.strip() == f"dse predict: error: {REFUSAL}"
    # a --batch CSV: the row gets the message in its error column, the B200 row a prediction
    csv_in, csv_out = tmp_path / "in.csv", tmp_path / "out.csv"
    arch = lookup_model("Llama-3-8B")
    head = [
        "d_model",
        "n_layers",
        "n_heads",
        "n_kv_heads",
        "d_ff",
        "vocab_size",
        "gpu",
        "weight_dtype",
    ]
    with csv_in.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(head)
        for gpu in ("h100_sxm", B200):
            w.writerow([*(getattr(arch, k) for k in head[:6]), gpu, "nvfp4"])
    assert main(["predict", "--batch", str(csv_in), "--out", str(csv_out), "-q"]) == 0
    got = pd.read_csv(csv_out, keep_default_na=False)
    assert got["error"].tolist() == [REFUSAL, ""]
    assert float(got["latency_s"][1]) > 0


@pytest.mark.parametrize("cmd", ["predict", "energy"])
def test_predict_and_energy_refuse_nvfp4_on_h100(
    capsys: pytest.CaptureFixture[str], cmd: str
) -> None:
    for argv in ([cmd, *NVFP4, "--gpu", "h100_sxm"], [cmd, *NVFP4]):  # H100: the default GPU
        assert main(argv) == 2
        out, err = capsys.readouterr()
        assert out == "" and "Traceback" not in err
        assert err.strip() == f"dse {cmd}: error: {REFUSAL}"


def test_energy_of_nvfp4_on_b200(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["energy", *NVFP4, "--gpu", B200, "--json"]) == 0
    nvfp4 = json.loads(capsys.readouterr().out)
    assert main(["energy", "--model", "llama-3-8b", "--gpu", B200, "--json"]) == 0
    bf16 = json.loads(capsys.readouterr().out)
    # the corrected preset: weight reads of 0.5625 / 2 of bf16's bytes, linear-layer FLOPs on
    # the FP4 tensor cores (at bf16's peak / FP4's of bf16's energy each)
    c4, c16 = nvfp4["estimates"]["corrected"], bf16["estimates"]["corrected"]
    w4, w16 = c4["breakdown.param_access.total_j"], c16["breakdown.param_access.total_j"]
    assert w4 == pytest.approx(w16 * 0.5625 / 2, rel=1e-9)
    assert c4["breakdown.compute.total_j"] < 0.5 * c16["breakdown.compute.total_j"]


def test_arch_counts_nvfp4_memory_and_warns_where_it_cannot_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["arch", *NVFP4, "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    params = r["params"]["total"]
    assert r["memory_per_gpu_bytes"]["weights"] == pytest.approx(0.5625 * params, rel=1e-9)
    assert r["gpu"]["refusal"] == REFUSAL
    assert main(["arch", *NVFP4]) == 0
    assert f"warning: cannot run there: {REFUSAL}" in capsys.readouterr().out
    assert main(["arch", *NVFP4, "--gpu", B200, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["gpu"]["refusal"] == ""
