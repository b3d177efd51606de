"""`dse predict` stays light: one configuration must not import pandas, Optuna, plotly,
scikit-learn or scipy (the model modules import pandas only inside their fitting code). Each
case runs the command in a fresh interpreter and reads back `sys.modules` after it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("pandas", "pyarrow", "optuna", "plotly", "sklearn", "scipy", "torch")

# Runs `dse <argv>` in this interpreter, then prints the exit code and the heavy top-level
# packages that got imported as the last line of stderr.
PROBE = """
import json, sys
from dse.cli import main
code = main(sys.argv[1:])
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(json.loads(%r)))
sys.stdout.flush()
print(json.dumps({"code": code, "heavy": heavy}), file=sys.stderr)
"""


def run_probe(*args: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    r = subprocess.run(
        [sys.executable, "-c", PROBE % json.dumps(HEAVY), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert r.stderr.strip(), r
    return r, json.loads(r.stderr.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "args",
    [
        ("--model", "llama-3-8b", "--gpu", "h100_sxm", "--json"),
        ("--model", "llama-3-8b", "--gpu", "h100_sxm"),  # the table
        # MoE, tensor parallel (all-reduce), long decode
        (
            "--model", "mixtral-8x7b", "--gpu", "h200_sxm", "--tp", "2",
            "--batch-size", "64", "--output-tokens", "2048", "--json",
        ),
        (
            "--d-model", "4096", "--n-layers", "32", "--n-heads", "32", "--n-kv-heads", "8",
            "--d-ff", "14336", "--gpu", "a100_sxm", "--json",
        ),
    ],
)  # fmt: skip
@pytest.mark.slow
def test_predict_one_configuration_imports_no_heavy_package(args: tuple[str, ...]) -> None:
    r, probe = run_probe("predict", *args)
    assert probe["code"] == 0, r.stderr
    if "--json" in args:
        pred = json.loads(r.stdout)["prediction"]
        assert pred["latency_s"] > 0 and pred["energy_j"] > 0
    else:
        assert "time to first token" in r.stdout
    assert probe["heavy"] == [], f"dse predict {' '.join(args)} imported {probe['heavy']}"


def test_predict_batch_csv_may_use_pandas_but_nothing_heavier(tmp_path: Path) -> None:
    src = tmp_path / "in.csv"
    src.write_text(
        "d_model,n_layers,n_heads,n_kv_heads,d_ff,gpu,batch_size\n"
        "4096,32,32,8,14336,h100_sxm,8\n"
        "2048,16,16,16,8192,a100_sxm,2\n"
    )
    out = tmp_path / "out.csv"
    r, probe = run_probe("predict", "--batch", str(src), "--out", str(out))
    assert probe["code"] == 0, r.stderr
    assert out.read_text().count("\n") == 3
    assert set(probe["heavy"]) <= {"pandas", "pyarrow"}, probe["heavy"]
