"""The `dse` command as a user runs it: help, clear errors with exit 2, predict modes."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from dse.cli import COMMANDS, _available

REPO = Path(__file__).resolve().parents[2]


def dse(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dse", *args],
        capture_output=True,
        text=True,
        cwd=cwd or REPO,
        timeout=120,
    )


@pytest.mark.slow
def test_help_lists_every_available_subcommand() -> None:
    r = dse("--help")
    assert r.returncode == 0
    flat = " ".join(r.stdout.split())  # argparse wraps long help lines
    for name in _available():
        assert f"    {name} " in r.stdout, name
        assert " ".join(COMMANDS[name][1].split()) in flat, name


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(_available()))
def test_each_subcommand_help_has_an_example(name: str) -> None:
    r = dse(name, "--help")
    assert r.returncode == 0, r.stderr
    assert "example" in r.stdout.lower()


@pytest.mark.slow
def test_check_reports_errors_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "space:\n  d_model: 4096\n  n_layers: {low: 8, high: 4}\n  n_heads: 32\n  d_ff: 1\n"
    )
    r = dse("check", str(bad))
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert f"{bad}:3: space.n_layers: `low <= high` must hold" in r.stderr


@pytest.mark.slow
def test_check_counts_the_example_space() -> None:
    r = dse("check", "search_spaces/dense_8b.yaml")
    assert r.returncode == 0, r.stderr
    assert "configurations:      2,268" in r.stdout or "configurations:" in r.stdout
    assert "feasible:" in r.stdout


ARCH = [
    "--d-model",
    "4096",
    "--n-layers",
    "32",
    "--n-heads",
    "32",
    "--n-kv-heads",
    "8",
    "--d-ff",
    "14336",
    "--vocab-size",
    "128256",
]


def test_predict_json_is_consistent() -> None:
    r = dse("predict", *ARCH, "--batch-size", "4", "--gpu", "h200_sxm", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    p = out["prediction"]
    assert out["config"]["gpu"] == "h200_sxm"
    assert p["latency_s"] == pytest.approx(p["ttft_s"] + 255 * p["tpot_s"], rel=1e-9)
    assert p["energy_j"] == pytest.approx(p["prefill_energy_j"] + p["decode_energy_j"], rel=1e-9)
    assert p["energy_per_output_token_j"] == pytest.approx(p["energy_j"] / (4 * 256), rel=1e-9)
    assert "artifact_id" in p and "out_of_range" in p


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--gpu", "h900"],
            "--gpu: must be one of a100_sxm, a100_sxm_40gb, b200_sxm, gh200, h100_sxm",
        ),
        (["--n-heads", "30", "--n-kv-heads", "30"], "n_heads: must divide d_model=4096"),
        (["--n-kv-heads", "5"], "n_kv_heads: must divide n_heads=32, got 5"),
        (["--n-layers", "320", "--gpu", "a100_sxm_40gb"], "does not fit in memory"),
    ],
)
@pytest.mark.slow
def test_predict_bad_input_is_a_clear_error(args: list[str], message: str) -> None:
    full = list(ARCH)
    for flag, value in zip(args[::2], args[1::2], strict=True):
        if flag in full:
            full[full.index(flag) + 1] = value
        else:
            full += [flag, value]
    r = dse("predict", *full)
    assert r.returncode == 2
    assert message in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.slow
def test_predict_batch_marks_rows_that_break_a_rule(tmp_path: Path) -> None:
    """Values of their columns that make no valid or runnable configuration get a message in
    the `error` column; the other rows are predicted (an empty optional cell is its default)."""
    src = tmp_path / "in.csv"
    src.write_text(
        "d_model,n_layers,n_heads,n_kv_heads,d_ff,gpu,batch_size\n"
        "4096,32,32,8,14336,h100_sxm,8\n"
        "4096,32,32,5,14336,h100_sxm,8\n"
        "4096,320,32,8,14336,a100_sxm_40gb,8\n"
        "4096,32,30,30,14336,h100_sxm,8\n"
        "2048,16,16,,8192,A100_SXM,2\n"
    )
    out = tmp_path / "out.csv"
    r = dse("predict", "--batch", str(src), "--out", str(out))
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(out, keep_default_na=False)
    assert len(df) == 5
    errors = df["error"].tolist()
    assert errors[0] == "" and errors[4] == ""
    assert errors[1] == "n_kv_heads: must divide n_heads=32, got 5"
    assert errors[2].startswith("does not fit in memory")
    assert errors[3].startswith("n_heads: must divide d_model=4096")
    lat = pd.to_numeric(df["latency_s"], errors="coerce")
    assert lat[0] > 0 and lat[4] > 0 and lat[1:4].isna().all()
    # the input cells come back as written, the empty n_kv_heads defaulted to n_heads (MHA)
    assert df["gpu"].tolist()[4] == "A100_SXM" and df["n_kv_heads"].tolist()[4] == ""
    mha = tmp_path / "mha.csv"
    mha.write_text(
        "d_model,n_layers,n_heads,n_kv_heads,d_ff,gpu,batch_size\n2048,16,16,16,8192,a100_sxm,2\n"
    )
    r2 = dse("predict", "--batch", str(mha))
    assert r2.returncode == 0, r2.stderr
    assert pd.read_csv(io.StringIO(r2.stdout))["latency_s"][0] == lat[4]


def test_predict_batch_refuses_bad_cells_naming_each(tmp_path: Path) -> None:
    """A cell that is no value of its column refuses the file: every such cell is named by
    file, spreadsheet row (header = row 1), column, rule and value."""
    src = tmp_path / "in.csv"
    src.write_text(
        "d_model,n_layers,n_heads,n_kv_heads,d_ff,gpu,batch_size\n"
        "4096,32,32,8,14336,h100_sxm,8\n"
        "4096,x,32,8,14336,h900,8\n"
        "\n"
        "4096,32,32,8,14336,h100_sxm,nan\n"
    )
    r = dse("predict", "--batch", str(src))
    assert r.returncode == 2 and r.stdout == ""
    assert "Traceback" not in r.stderr
    lines = r.stderr.splitlines()
    assert lines[0] == (
        f"dse predict: error: {src}: row 3: n_layers: must be an integer in [1, 1024], got 'x'"
    )
    assert lines[1].startswith(f"{src}: row 3: gpu: must be one of a100_sxm,")
    assert lines[1].endswith(", got 'h900'")
    # the blank line is row 4, as a spreadsheet shows it
    assert lines[2] == f"{src}: row 5: batch_size: must be an integer in [1, 1048576], got nan"


def test_predict_batch_missing_column_is_an_error(tmp_path: Path) -> None:
    src = tmp_path / "in.csv"
    src.write_text("d_model,n_layers\n4096,32\n")
    r = dse("predict", "--batch", str(src))
    assert r.returncode == 2
    assert "missing column(s) n_heads, d_ff" in r.stderr


def test_predict_batch_given_a_number_points_to_batch_size(tmp_path: Path) -> None:
    r = dse("predict", "--model", "llama-3-8b", "--batch", "8", cwd=tmp_path)
    assert r.returncode == 2
    assert "8: file not found" in r.stderr and "--batch-size" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.slow
def test_unknown_flag_names_the_subcommand_and_the_closest_flag() -> None:
    r = dse("predict", "--layers", "32", "--ffn=14336", "--gpu", "h100_sxm")
    assert r.returncode == 2
    assert "usage: dse predict" in r.stderr  # the subcommand's usage, not the top-level one
    assert "unrecognized arguments: --layers 32 --ffn=14336" in r.stderr
    # the closest flag first (--n-dense-layers, an attention-family flag, comes second)
    assert "--layers: did you mean --n-layers or --n-dense-layers?" in r.stderr
    assert "--ffn: did you mean --d-ff?" in r.stderr
    assert "Traceback" not in r.stderr
    r = dse("predcit", "--model", "llama-3-8b")
    assert r.returncode == 2 and "unknown command 'predcit'; did you mean predict?" in r.stderr
    r = dse("sweep", "x.yaml", "--trails", "5")
    assert r.returncode == 2 and "--trails: did you mean --trials?" in r.stderr


def test_cli_imports_what_it_uses() -> None:
    """A plain `pip install .` console script starts without the modules that runpy, pytest or
    an editable install happen to import first (importlib.util once slipped through)."""
    code = (
        "import importlib, sys; sys.modules.pop('importlib.util', None); "
        "delattr(importlib, 'util') if hasattr(importlib, 'util') else None; "
        "from dse.cli import main; sys.exit(main(['gpus']))"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert r.returncode == 0, r.stderr
    assert "h100_sxm" in r.stdout


@pytest.mark.slow
def test_predict_flags_a_run_beyond_the_model_context() -> None:
    """llama-7b has a 2048-token context: 2048 + 2048 tokens is flagged, 1024 + 1024 is not."""
    base = ("predict", "--model", "huggyllama/llama-7b", "--gpu", "h100_sxm", "--batch-size", "1")
    over = dse(*base, "--prompt-tokens", "2048", "--output-tokens", "2048", "--json")
    assert over.returncode == 0, over.stderr
    p = json.loads(over.stdout)["prediction"]
    assert p["beyond_context"] is True and p["context_tokens"] == 2048
    ok = dse(*base, "--prompt-tokens", "1024", "--output-tokens", "1024", "--json")
    assert "beyond_context" not in json.loads(ok.stdout)["prediction"]
    table = dse(*base, "--prompt-tokens", "2048", "--output-tokens", "2048")
    assert "exceed the model's context of 2048 tokens" in table.stdout


@pytest.mark.slow
def test_predict_warns_when_the_batch_queues_and_refuses_what_cannot_run(tmp_path: Path) -> None:
    """dse predict uses dse.spec.arch's memory rule: Llama-2-7B's 64 x 4096-token MHA cache cannot
    be resident at once on a 40 GB A100 (a warning, as the engine queues), Llama-3-70B's bf16
    weights cannot fit on one H100 (an error)."""
    base = ["--model", "llama-2-7b", "--gpu", "a100_sxm_40gb", "--batch-size", "64"]
    r = dse("predict", *base, "--prompt-tokens", "2048", "--output-tokens", "2048", "--json")
    assert r.returncode == 0, r.stderr
    assert "queues or preempts" in json.loads(r.stdout)["prediction"]["memory_warning"]
    r = dse("predict", "--model", "llama-3-70b", "--gpu", "h100_sxm")
    assert r.returncode == 2 and "does not fit in memory" in r.stderr
    src = tmp_path / "in.csv"
    src.write_text(
        "d_model,n_layers,n_heads,d_ff,vocab_size,gpu,batch_size,prompt_tokens,output_tokens\n"
        "4096,32,32,11008,32000,a100_sxm_40gb,64,2048,2048\n"
        "4096,32,32,11008,32000,a100_sxm_40gb,1,128,16\n"
    )
    r = dse("predict", "--batch", str(src))
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(io.StringIO(r.stdout), keep_default_na=False)
    assert "queues or preempts" in df["warning"][0] and df["warning"][1] == ""
    assert (df["error"] == "").all()
