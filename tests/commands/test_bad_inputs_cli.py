"""A catalogue of bad inputs to `dse predict`, `dse energy` and `dse arch` (issue 18).

Every case runs the command in-process through `dse.cli.main` (the same code as the console
script; a few cases run a real `python -m dse` subprocess) and asserts exit code 2, no traceback,
and the project's one message form:

- flags:     `--flag: rule, got value`
- CSV cells: `FILE: row N: column: rule, got value` (N as a spreadsheet shows it: header = row 1)
- YAML:      `FILE:LINE: key.path: rule, got value`

Numbers print as Python prints them (nan, 1e+30, 8.5), never as np.float64(...). The expected
limits are written out here, not read from `dse.spec.fields`, so that a changed limit fails a test.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dse.cli import main
from dse.errors import ConfigError
from dse.spec import arch as A
from dse.spec import columns as C
from dse.spec import fields as F
from dse.spec.workload import ENGINES, Workload

REPO = Path(__file__).resolve().parents[2]
MODEL = ["--model", "llama-3-8b"]

# field -> (low, high) of the integer flags every command has
INT_LIMITS: dict[str, tuple[int, int]] = {
    "d_model": (1, 65536),
    "n_layers": (1, 1024),
    "n_heads": (1, 4096),
    "n_kv_heads": (1, 4096),
    "d_ff": (1, 1048576),
    "vocab_size": (1, 4194304),
    "n_experts": (1, 4096),
    "top_k": (1, 4096),
    "d_ff_expert": (1, 1048576),
    "shared_expert_d_ff": (0, 1048576),
    "batch_size": (1, 1048576),
    "prompt_tokens": (1, 16777216),
    "output_tokens": (1, 16777216),
}
# (text typed, as the message shows it)
BAD_NUMBERS: list[tuple[str, str]] = [
    ("0", "0"),
    ("-1", "-1"),
    ("1e30", "1e+30"),
    ("nan", "nan"),
    ("inf", "inf"),
    ("abc", "'abc'"),
    (str(10**23), str(10**23)),
    ("8.5", "8.5"),
]
TP_FLAG = {"predict": "--tp", "energy": "--tp", "arch": "--tensor-parallel"}


def refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run `dse argv`; assert exit 2, no traceback, nothing on stdout; return stderr's text
    after the 'dse CMD: error: ' prefix (which it must start with)."""
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 2, (argv, out, err)
    assert "Traceback" not in err and "np." not in err, err
    assert out == "", out
    prefix = f"dse {argv[0]}: error: "
    assert err.startswith(prefix), err
    return err[len(prefix) :].rstrip("\n")


def _int_rule(name: str, lo: int, hi: int) -> str:
    return f"must be an integer in [{lo}, {hi}]"


# ---------------------------------------------------------------------- numeric flags
def _flag_cases() -> list[tuple[str, str, str, str]]:
    """(command, flag, typed value, expected message) for every numeric flag."""
    cases = []
    for cmd in ("predict", "energy", "arch"):
        limits = dict(INT_LIMITS)
        if cmd == "arch":
            limits["norms_per_layer"] = (1, 8)
        for name, (lo, hi) in limits.items():
            flag = f"--{name.replace('_', '-')}"
            values = [*BAD_NUMBERS, (str(hi + 1), str(hi + 1))]
            for typed, shown in values:
                if typed == "0" and lo == 0:
                    continue  # shared_expert_d_ff 0 is valid (no shared expert)
                cases.append((cmd, flag, typed, f"{flag}: {_int_rule(name, lo, hi)}, got {shown}"))
        for typed, shown in [*BAD_NUMBERS, ("6", "6"), ("7", "7"), ("4098", "4098")]:
            cases.append(
                (cmd, "--head-dim", typed, f"--head-dim: must be an even integer in [8, 4096], got {shown}")
            )  # fmt: skip
        tp = TP_FLAG[cmd]
        for typed, shown in [*BAD_NUMBERS, ("3", "3"), ("2048", "2048")]:
            cases.append(
                (cmd, tp, typed, f"{tp}: must be a power of two in [1, 1024], got {shown}")
            )
    return cases


@pytest.mark.slow
@pytest.mark.parametrize(("cmd", "flag", "value", "message"), _flag_cases())
def test_numeric_flag_is_refused_with_rule_and_value(
    capsys: pytest.CaptureFixture[str], cmd: str, flag: str, value: str, message: str
) -> None:
    assert refused(capsys, [cmd, *MODEL, flag, value]) == message


@pytest.mark.parametrize(
    ("cmd", "argv", "message"),
    [
        *[
            ("energy", ["--time-s", typed], f"--time-s: must be a number in [1e-09, 1e+09], got {shown}")
            for typed, shown in [("0", "0"), ("-1", "-1"), ("nan", "nan"), ("inf", "inf"),
                                 ("abc", "'abc'"), ("1e30", "1e+30")]
        ],
        *[
            ("arch", ["--context", typed], f"--context: must be an integer in [1, 33554432], got {shown}")
            for typed, shown in BAD_NUMBERS
        ],
    ],
)  # fmt: skip
def test_command_only_numeric_flags(
    capsys: pytest.CaptureFixture[str], cmd: str, argv: list[str], message: str
) -> None:
    assert refused(capsys, [cmd, *MODEL, *argv]) == message


# ---------------------------------------------------------------------- choices
KV_DTYPES = "float32, bfloat16, float16, fp8, int8, int4"
DTYPES = f"{KV_DTYPES}, nvfp4"  # weight dtypes: nvfp4 is one, not a KV-cache dtype


@pytest.mark.parametrize(
    ("cmd", "argv", "start", "end"),
    [
        ("predict", ["--engine", "tgi"], f"--engine: must be one of {', '.join(ENGINES)}", ", got 'tgi'"),
        ("predict", ["--engine", "VLLM "], "--engine: must be one of vllm, trtllm", ", got 'VLLM '"),
        *[(cmd, ["--gpu", "h900"], "--gpu: must be one of a100_sxm, ", ", got 'h900'")
          for cmd in ("predict", "energy", "arch")],
        *[(cmd, ["--gpu", ""], "--gpu: must be one of a100_sxm, ", ", got ''")
          for cmd in ("predict", "energy", "arch")],
        *[(cmd, ["--weight-dtype", "fp3"], f"--weight-dtype: must be one of {DTYPES} (did you mean 'fp8'?)", ", got 'fp3'")
          for cmd in ("predict", "energy", "arch")],
        *[(cmd, ["--kv-dtype", "int2"], f"--kv-dtype: must be one of {KV_DTYPES}", ", got 'int2'")
          for cmd in ("predict", "energy", "arch")],
        ("arch", ["--norm", "batchnorm"], "--norm: must be one of rmsnorm, layernorm", ", got 'batchnorm'"),
        ("energy", ["--preset", "best"], "--preset: must be one of paper, corrected, both", ", got 'best'"),
    ],
)  # fmt: skip
def test_bad_choice_names_the_choices(
    capsys: pytest.CaptureFixture[str], cmd: str, argv: list[str], start: str, end: str
) -> None:
    msg = refused(capsys, [cmd, *MODEL, *argv])
    assert msg.startswith(start) and msg.endswith(end), msg


def test_engine_choices_are_one_list_for_cli_and_yaml(tmp_path: Path) -> None:
    """--engine, a search space's workload.engine and a CSV's engine column share ENGINES."""
    from dse.spec.space import STR_FIELDS

    assert F.FIELDS["engine"].options() == ENGINES == STR_FIELDS["engine"]


# ---------------------------------------------------------------------- conflicts and gaps
@pytest.fixture
def hf_config(tmp_path: Path) -> Path:
    p = tmp_path / "config.json"
    p.write_text(
        '{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, '
        '"num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, '
        '"vocab_size": 100}'
    )
    return p


@pytest.fixture
def config_yaml(tmp_path: Path) -> Path:
    p = tmp_path / "exported.yaml"
    p.write_text("configs:\n  - architecture: {d_model: 64, n_layers: 2, n_heads: 4, d_ff: 128}\n")
    return p


@pytest.fixture
def batch_csv(tmp_path: Path) -> Path:
    p = tmp_path / "in.csv"
    p.write_text("d_model,n_layers,n_heads,d_ff\n64,2,4,128\n")
    return p


WHY = "give one of --model, --hf-config, --config, --batch"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "llama-3-8b", "--hf-config", "{hf}"], f"--hf-config: cannot be combined with --model ({WHY}), got '{{hf}}'"),
        (["--model", "llama-3-8b", "--config", "{cfg}"], f"--config: cannot be combined with --model ({WHY}), got '{{cfg}}'"),
        (["--hf-config", "{hf}", "--config", "{cfg}"], f"--config: cannot be combined with --hf-config ({WHY}), got '{{cfg}}'"),
        (["--model", "llama-3-8b", "--batch", "{csv}"], f"--batch: cannot be combined with --model ({WHY}), got '{{csv}}'"),
        (["--config", "{cfg}", "--batch", "{csv}"], f"--batch: cannot be combined with --config ({WHY}), got '{{csv}}'"),
        (["--batch", "{csv}", "--batch-size", "8"], "--batch-size: cannot be combined with --batch (the CSV's batch_size column sets it), got 8"),
        (["--batch", "{csv}", "--tp", "2"], "--tp: cannot be combined with --batch (the CSV's tensor_parallel column sets it), got 2"),
        (["--batch", "{csv}", "--gpu", "h200_sxm"], "--gpu: cannot be combined with --batch (the CSV's gpu column sets it), got 'h200_sxm'"),
        (["--batch", "{csv}", "--d-model", "4096"], "--d-model: cannot be combined with --batch (the CSV's d_model column sets it), got 4096"),
        (["--model", "llama-3-8b", "--out", "x.csv"], "--out: only with --batch (a CSV of configurations), got 'x.csv'"),
        (["--model", "llama-3-8b", "--entry", "1"], "--entry: only with --config, got 1"),
        (["--config", "{cfg}", "--entry", "1"], "--entry: must be an integer in [0, 0], got 1"),
        (["--config", "{cfg}", "--entry", "-1"], "--entry: must be an integer in [0, 2147483647], got -1"),
        (["--config", "{cfg}", "--entry", "abc"], "--entry: must be an integer in [0, 2147483647], got 'abc'"),
        (["--d-model", "4096"], "--n-layers: required unless --model, --hf-config or --config gives the architecture; missing --n-layers, --n-heads, --d-ff"),
        ([], "--d-model: required unless --model, --hf-config or --config gives the architecture; missing --d-model, --n-layers, --n-heads, --d-ff"),
        (["--model", "llama-3-8b", "--n-kv-heads", "5"], "n_kv_heads: must divide n_heads=32, got 5"),
        (["--model", "llama-3-8b", "--n-experts", "8", "--top-k", "9"], "top_k: must be <= n_experts=8, got 9"),
    ],
)  # fmt: skip
def test_predict_sources_conflict_and_gaps(
    capsys: pytest.CaptureFixture[str],
    hf_config: Path,
    config_yaml: Path,
    batch_csv: Path,
    argv: list[str],
    message: str,
) -> None:
    subst = {"{hf}": str(hf_config), "{cfg}": str(config_yaml), "{csv}": str(batch_csv)}
    for k, v in subst.items():
        argv = [v if a == k else a for a in argv]
        message = message.replace(k, v)
    assert refused(capsys, ["predict", *argv]) == message


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["arch", "--model", "llama-3-8b", "--hf-config", "x.json"],
         "--hf-config: cannot be combined with --model (give one of --model, --hf-config), got 'x.json'"),
        (["arch", "--d-model", "4096"],
         "--n-layers: required unless --model NAME or --hf-config PATH gives the architecture; "
         "missing --n-layers, --n-heads, --d-ff"),
        (["energy", "--n-layers", "32"], "--d-model: required unless --model is given"),
        (["arch", "--model", "llama-3-8b", "--n-kv-heads", "0"], "--n-kv-heads: must be an integer in [1, 4096], got 0"),
        (["energy", "--model", "llama-3-8b", "--output-tokens", "-5"],
         "--output-tokens: must be an integer in [1, 16777216], got -5"),
    ],
)  # fmt: skip
def test_arch_and_energy_conflicts_and_gaps(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert refused(capsys, argv) == message


# ---------------------------------------------------------------------- --config YAML entries
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("configs:\n  - architecture:\n      d_model: 0\n      n_layers: 2\n      n_heads: 4\n      d_ff: 8\n",
         ":3: configs.0.architecture.d_model: must be an integer in [1, 65536], got 0"),
        ("configs:\n  - architecture:\n      d_model: 64\n      n_layers: 2\n      n_heads: 4\n      n_kv_heads: abc\n      d_ff: 8\n",
         ":6: configs.0.architecture.n_kv_heads: must be an integer in [1, 4096], got 'abc'"),
        ("configs:\n  - architecture:\n      d_model: 64\n      n_layers: 2\n      n_heads: 4\n      d_ff: 8\n      head_dim: 7\n",
         ":7: configs.0.architecture.head_dim: must be an even integer in [8, 4096], got 7"),
        ("configs:\n  - architecture:\n      d_model: 64\n      n_layers: .inf\n      n_heads: 4\n      d_ff: 8\n",
         ":4: configs.0.architecture.n_layers: must be an integer in [1, 1024], got inf"),
        ("configs:\n  - architecture: {d_model: 64, n_layers: 2, n_heads: 4, d_ff: 8}\n    workload:\n      batch_size: -3\n",
         ":4: configs.0.workload.batch_size: must be an integer in [1, 1048576], got -3"),
        ("configs:\n  - architecture: {d_model: 64, n_layers: 2, n_heads: 4, d_ff: 8}\n    workload:\n      engine: tgi\n",
         ":4: configs.0.workload.engine: must be one of vllm, trtllm, sglang, got 'tgi'"),
        ("configs:\n  - architecture: {d_model: 64, n_layers: 2, n_heads: 4, d_ff: 8}\n    workload:\n      output_tokens: 8.5\n",
         ":4: configs.0.workload.output_tokens: must be an integer in [1, 16777216], got 8.5"),
        ("configs:\n  - architecture:\n      d_model: 64\n      layers: 2\n",
         ":4: configs.0.architecture.layers: unknown key; valid keys: d_model, n_layers,"),
        ("configs:\n  - 5\n", ":2: configs.0: must be a mapping, got 5"),
        ("configs: []\n", ":1: configs: must be a non-empty list of configurations"),
    ],
)  # fmt: skip
def test_predict_config_entry_is_located(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "exported.yaml"
    path.write_text(text)
    msg = refused(capsys, ["predict", "--config", str(path)])
    assert msg.startswith(f"{path}{message}"), msg


# ---------------------------------------------------------------------- --batch CSV
HEADER = (
    "d_model,n_layers,n_heads,n_kv_heads,d_ff,gpu,batch_size,engine,weight_dtype,gated_mlp,head_dim"
)
GOOD = ["4096", "32", "32", "8", "14336", "h100_sxm", "8", "vllm", "bfloat16", "true", "128"]
COLUMNS = HEADER.split(",")


def _csv_with(column: str, cell: str) -> str:
    """A header, one good row (row 2) and a row (row 3) whose `column` cell is `cell`."""
    bad = list(GOOD)
    bad[COLUMNS.index(column)] = cell
    return "\n".join([HEADER, ",".join(GOOD), ",".join(bad)]) + "\n"


BAD_CELLS: list[tuple[str, str, str]] = [
    *[(c, "", f"{c}: must not be empty (a required column), got ''") for c in C.REQUIRED],
    *[("batch_size", cell, f"batch_size: must be an integer in [1, 1048576], got {shown}")
      for cell, shown in [("nan", "nan"), ("NaN", "nan"), ("inf", "inf"), ("-inf", "-inf"),
                          ("-3", "-3"), ("0", "0"), ("1e30", "1e+30"), ("8.5", "8.5"),
                          ("abc", "'abc'"), (str(10**23), str(10**23)), ("1048577", "1048577")]],
    *[("d_model", cell, f"d_model: must be an integer in [1, 65536], got {shown}")
      for cell, shown in [("4096x", "'4096x'"), ("-4096", "-4096"), ("65537", "65537")]],
    *[("n_kv_heads", cell, f"n_kv_heads: must be an integer in [1, 4096], got {shown}")
      for cell, shown in [("0", "0"), ("-1", "-1"), ("eight", "'eight'")]],
    *[("head_dim", cell, f"head_dim: must be an even integer in [8, 4096], got {shown}")
      for cell, shown in [("7", "7"), ("6", "6"), ("1e30", "1e+30")]],
    ("engine", "tgi", "engine: must be one of vllm, trtllm, sglang, got 'tgi'"),
    ("weight_dtype", "fp3", f"weight_dtype: must be one of {DTYPES} (did you mean 'fp8'?), got 'fp3'"),
    ("gated_mlp", "maybe", "gated_mlp: must be true or false, got 'maybe'"),
    ("gated_mlp", "2", "gated_mlp: must be true or false, got '2'"),
]  # fmt: skip


@pytest.mark.parametrize(("column", "cell", "message"), BAD_CELLS)
def test_batch_bad_cell_names_file_row_column_rule_and_value(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, column: str, cell: str, message: str
) -> None:
    path = tmp_path / "in.csv"
    path.write_text(_csv_with(column, cell))
    lines = refused(capsys, ["predict", "--batch", str(path)]).splitlines()
    assert lines[0] == f"{path}: row 3: {message}"
    assert lines[-1] == "(rows are numbered as a spreadsheet shows them: the header is row 1)"


def test_batch_bad_gpu_cell(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text(_csv_with("gpu", "h900"))
    first = refused(capsys, ["predict", "--batch", str(path)]).splitlines()[0]
    assert first.startswith(f"{path}: row 3: gpu: must be one of a100_sxm, ")
    assert first.endswith(", got 'h900'")


def test_batch_lists_every_bad_cell_up_to_a_cap(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "in.csv"
    rows = [HEADER] + [",".join([*GOOD[:6], "-1", *GOOD[7:]])] * 30
    path.write_text("\n".join(rows) + "\n")
    lines = refused(capsys, ["predict", "--batch", str(path)]).splitlines()
    assert len(lines) == 22
    assert lines[0] == f"{path}: row 2: batch_size: must be an integer in [1, 1048576], got -1"
    assert lines[19].startswith(f"{path}: row 21: batch_size:")
    assert lines[20] == "... and 10 more bad cells"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("d_model,n_layers,n_heads\n64,2,4\n", "{p}: missing column(s) d_ff; required: d_model, n_layers, n_heads, d_ff"),
        ("d_model,layers,n_heads,d_ff\n64,2,4,8\n", "{p}: missing column(s) n_layers; required: d_model, n_layers, n_heads, d_ff"),
        ("d_model,n_layers,n_heads,d_ff,batch\n64,2,4,8,1\n", "{p}: unknown column(s) batch (did you mean 'batch_size'?); valid: d_model,"),
        ("d_model,n_layers,n_heads,d_ff,d_ff\n64,2,4,8,8\n", "{p}: row 1: d_ff: must appear once in the header, got it twice"),
        ("d_model,n_layers,,n_heads,d_ff\n64,2,,4,8\n", "{p}: row 1: column 3: must have a name, got ''"),
        ("d_model,n_layers,n_heads,d_ff\n64,2,4,8,9\n", "{p}: row 2: must have 4 cells as the header has, got 5"),
        ("d_model,n_layers,n_heads,d_ff\n64,2,4,8\n64,2\n", "{p}: row 3: must have 4 cells as the header has, got 2"),
        ("", "{p}: empty file, expected a header row naming the columns (required: d_model, n_layers, n_heads, d_ff)"),
        ("\n\n  \n", "{p}: empty file, expected a header row naming the columns"),
        ("d_model,n_layers,n_heads,d_ff\n", "{p}: no configuration rows after the header (row 1)"),
        ("d_model,n_layers,n_heads,d_ff\n\n\n", "{p}: no configuration rows after the header (row 1)"),
        ("d_model,n_layers,n_heads,d_ff\n64,2,4,8\x00\n", "{p}: row 2: must be text, got a NUL byte at offset 38"),
    ],
)  # fmt: skip
def test_batch_bad_file_shape(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "in.csv"
    path.write_text(content)
    msg = refused(capsys, ["predict", "--batch", str(path)])
    assert msg.startswith(message.replace("{p}", str(path))), msg


def test_batch_non_utf8_bytes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_bytes(b"d_model,n_layers,n_heads,d_ff\n64,2,4,8\n\xff\xfe,2,4,8\n")
    msg = refused(capsys, ["predict", "--batch", str(path)])
    assert msg == f"{path}: row 3: must be UTF-8 text, got byte 0xff at offset 39"


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("dir", "{p}: is a directory, expected a CSV file of configurations"),
        ("missing", "{p}: file not found"),
    ],
)
def test_batch_path_is_not_a_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, target: str, message: str
) -> None:
    path = tmp_path if target == "dir" else tmp_path / "nope.csv"
    assert refused(capsys, ["predict", "--batch", str(path)]) == message.replace("{p}", str(path))


def test_batch_given_a_number_points_to_batch_size(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    msg = refused(capsys, ["predict", "--batch", "8"])
    assert msg == (
        "8: file not found (--batch takes a CSV of configurations; the batch size is --batch-size)"
    )


@pytest.mark.parametrize("target", ["dir", "no folder"])
def test_batch_out_is_checked_before_predicting(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, batch_csv: Path, target: str
) -> None:
    out = tmp_path if target == "dir" else tmp_path / "none" / "out.csv"
    msg = refused(capsys, ["predict", "--batch", str(batch_csv), "--out", str(out)])
    expected = (
        f"--out: must be a file path, got the directory {str(out)!r}"
        if target == "dir"
        else f"--out: its folder must exist, got {str(out)!r}"
    )
    assert msg == expected


# ---------------------------------------------------------------------- a real process
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["predict", "--model", "llama-3-8b", "--batch-size", "0"],
         "dse predict: error: --batch-size: must be an integer in [1, 1048576], got 0"),
        (["predict", "--batch", "."], "dse predict: error: .: is a directory, expected a CSV file"),
        (["energy", "--model", "llama-3-8b", "--time-s", "nan"],
         "dse energy: error: --time-s: must be a number in [1e-09, 1e+09], got nan"),
    ],
)  # fmt: skip
@pytest.mark.slow
def test_console_process_exits_2_without_traceback(args: list[str], message: str) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "dse", *args], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert r.stderr.startswith(message), r.stderr


# ---------------------------------------------------------------------- one rule everywhere
def test_same_value_gets_the_same_rule_from_flag_csv_yaml_and_api(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    rule = "batch_size: must be an integer in [1, 1048576], got 0"
    assert (
        refused(capsys, ["predict", *MODEL, "--batch-size", "0"])
        == f"--{rule.replace('_', '-', 1)}"
    )
    csv = tmp_path / "in.csv"
    csv.write_text("d_model,n_layers,n_heads,d_ff,batch_size\n64,2,4,8,0\n")
    assert (
        refused(capsys, ["predict", "--batch", str(csv)]).splitlines()[0] == f"{csv}: row 2: {rule}"
    )
    space = tmp_path / "space.yaml"
    space.write_text(
        "workload:\n  batch_size: 0\nspace:\n  d_model: 64\n  n_layers: 2\n  n_heads: 4\n  d_ff: 8\n"
    )
    assert refused(capsys, ["check", str(space)]).endswith(f"{space}:2: workload.{rule}")
    with pytest.raises(
        ConfigError, match=r"^batch_size: must be an integer in \[1, 1048576\], got 0$"
    ):
        C.as_columns({"d_model": 64, "n_layers": 2, "n_heads": 4, "d_ff": 8, "batch_size": 0})
    with pytest.raises(ConfigError, match=r"^workload\.batch_size: must be an integer"):
        Workload(batch_size=0).validate()


@pytest.mark.parametrize(
    ("column", "values", "message"),
    [
        ("batch_size", np.array([8.0, 8.0, np.nan]), "batch_size[2]: must be an integer in [1, 1048576], got nan"),
        ("batch_size", np.array([8.0, 8.5]), "batch_size[1]: must be an integer in [1, 1048576], got 8.5"),
        ("n_kv_heads", np.array([0, 8]), "n_kv_heads[0]: must be an integer in [1, 4096], got 0"),
        ("weight_dtype", np.array(["bfloat16", "fp3"]), f"weight_dtype[1]: must be one of {DTYPES} (did you mean 'fp8'?), got 'fp3'"),
        ("gated_mlp", np.array(["True", "no"], dtype=object), "gated_mlp[1]: must be true or false, got 'no'"),
        ("tensor_parallel", np.array([1, 6]), "tensor_parallel[1]: must be a power of two in [1, 1024], got 6"),
        ("prompt_tokens", np.array([2**63 + 5, 1], dtype=np.uint64), f"prompt_tokens[0]: must be an integer in [1, 16777216], got {2**63 + 5}"),
    ],
)  # fmt: skip
def test_as_columns_names_column_index_rule_and_python_value(
    column: str, values: np.ndarray, message: str
) -> None:
    cols = {"d_model": 64, "n_layers": 2, "n_heads": 4, "d_ff": 8}
    cols = {k: np.full(len(values), v) for k, v in cols.items()}
    cols[column] = values
    with pytest.raises(ConfigError) as exc:
        C.as_columns(cols)
    assert str(exc.value) == message


# ---------------------------------------------------------------------- the limits themselves
def test_limits_keep_int64_accounting_exact_at_the_corners() -> None:
    """At the largest values the table allows, the int64 accounting equals exact Python-int
    arithmetic (no overflow): parameters, attention FLOPs per token at the longest context,
    and tokens x batch x d_model."""
    hi = {name: int(f.max) for name, f in F.FIELDS.items() if f.kind == "int"}
    shape = {
        k: hi[k]
        for k in ("d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim", "d_ff",
                  "vocab_size", "n_experts", "top_k", "d_ff_expert", "shared_expert_d_ff")
    }  # fmt: skip
    native = A.Architecture.from_columns({k: np.array([v]) for k, v in shape.items()})
    exact = A.Architecture.from_columns({k: np.array([v], dtype=object) for k, v in shape.items()})
    for key, value in A.param_breakdown(exact).items():
        assert int(A.param_breakdown(native)[key][0]) == int(value[0]), key
    context = hi["prompt_tokens"] + hi["output_tokens"]
    assert context <= hi["context"]
    flops = A.attention_flops_per_token(native, np.array([context]))
    assert int(flops[0]) == int(
        A.attention_flops_per_token(exact, np.array([context], dtype=object))[0]
    )
    tokens = hi["batch_size"] * context * hi["d_model"]
    assert tokens < 2**63
    assert int(np.int64(hi["batch_size"]) * np.int64(context) * np.int64(hi["d_model"])) == tokens


def test_every_catalogue_model_is_inside_the_limits() -> None:
    """The limits reject what cannot be a model, never a published one."""
    from dse.spec.catalogue import lookup_model, model_names

    for name in model_names():
        for field, value in lookup_model(name).to_dict().items():
            if value is not None and field in F.FIELDS:
                F.check(field, value, name)


def test_the_corner_configuration_predicts_without_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The smallest model at the longest prompt and output the table allows runs end to end."""
    argv = ["predict", "--d-model", "8", "--n-layers", "1", "--n-heads", "1", "--d-ff", "1",
            "--vocab-size", "1", "--prompt-tokens", "16777216", "--output-tokens", "16777216",
            "--json"]  # fmt: skip
    assert main(argv) == 0
    import json

    pred = json.loads(capsys.readouterr().out)["prediction"]
    assert np.isfinite(pred["latency_s"]) and pred["latency_s"] > 0
    assert np.isfinite(pred["energy_j"]) and pred["energy_j"] > 0


def test_hf_config_beyond_the_limits_names_its_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "config.json"
    path.write_text(
        '{"model_type": "llama", "hidden_size": 131072, "num_hidden_layers": 2, '
        '"num_attention_heads": 1024, "num_key_value_heads": 8, "intermediate_size": 128, '
        '"vocab_size": 100}'
    )
    msg = refused(capsys, ["predict", "--hf-config", str(path)])
    assert msg == f"{path}: d_model: must be an integer in [1, 65536], got 131072"


# ---------------------------------------------------------------------- attention-family flags
# field -> (low, high) of the integer flags of the attention families (issue 21), every command
ATTENTION_INT_LIMITS: dict[str, tuple[int, int]] = {
    "sliding_window": (0, 33554432),
    "kv_lora_rank": (0, 65536),
    "q_lora_rank": (0, 65536),
    "qk_nope_head_dim": (0, 4096),
    "v_head_dim": (0, 4096),
    "linear_n_heads": (0, 65536),
    "linear_head_dim": (0, 4096),
    "linear_n_groups": (0, 4096),
    "linear_state_dim": (0, 4096),
    "linear_conv_width": (1, 64),
    "n_dense_layers": (0, 1024),
}
PATTERN_RULE = (
    "must be a list of full, sliding, linear, none, full+linear, sliding+linear "
    "(each optionally kind*count)"
)
FFN_PATTERN_RULE = "must be a list of ffn, dense, none (each optionally kind*count)"


def _attention_flag_cases() -> list[tuple[str, list[str], str]]:
    """(command, argv after the model, expected message) for every attention-family flag."""
    cases = []
    for cmd in ("predict", "energy", "arch"):
        for name, (lo, hi) in ATTENTION_INT_LIMITS.items():
            flag = f"--{name.replace('_', '-')}"
            values = [("-1", "-1"), ("abc", "'abc'"), ("8.5", "8.5"), ("nan", "nan"),
                      (str(hi + 1), str(hi + 1))]  # fmt: skip
            if lo == 1:
                values.append(("0", "0"))
            for typed, shown in values:
                cases.append(
                    (cmd, [flag, typed], f"{flag}: {_int_rule(name, lo, hi)}, got {shown}")
                )
        for typed, shown in [("-2", "-2"), ("7", "7"), ("4098", "4098"), ("abc", "'abc'")]:
            cases.append(
                (cmd, ["--qk-rope-head-dim", typed],
                 f"--qk-rope-head-dim: must be an even integer in [0, 4096], got {shown}")
            )  # fmt: skip
        for typed in ["slide", "sliding*0", "sliding*x", "full,", "", "full*2000", "3",
                      "full+sliding", "linear+full"]:  # fmt: skip
            cases.append(
                (cmd, ["--attention-pattern", typed],
                 f"--attention-pattern: {PATTERN_RULE}, got {typed!r}")
            )  # fmt: skip
        for typed in ["moe", "ffn*0", "", "full", "dense,"]:
            cases.append(
                (cmd, ["--ffn-pattern", typed], f"--ffn-pattern: {FFN_PATTERN_RULE}, got {typed!r}")
            )
        cases.append(
            (cmd, ["--linear-norm", "maybe"], "--linear-norm: must be true or false, got 'maybe'")
        )
        cases.append((cmd, ["--rope", "maybe"], "--rope: must be true or false, got 'maybe'"))
        cases.append(
            (cmd, ["--linear-kind", "mamba"],
             "--linear-kind: must be one of gated_deltanet, mamba2, mamba1 (did you mean "
             "'mamba2'?), got 'mamba'")
        )  # fmt: skip
        # Values each valid, a rule between fields broken (Llama-3-8B: 32 layers, 32 heads of 128).
        cases += [
            (cmd, ["--attention-pattern", "sliding*3,full"],
             "sliding_window: must be an integer >= 1 when attention_pattern has sliding layers, got 0"),
            (cmd, ["--attention-pattern", "sliding,sliding,full", "--sliding-window", "512"],
             "attention_pattern: its length (3 layers) must divide n_layers=32, got 'sliding*2,full'"),
            (cmd, ["--q-lora-rank", "64"],
             "q_lora_rank: needs kv_lora_rank >= 1 (multi-head latent attention), got 64"),
            (cmd, ["--kv-lora-rank", "9000"],
             "kv_lora_rank: must be <= n_heads x (qk_nope_head_dim + v_head_dim) = 8192 (the "
             "keys and values it compresses), got 9000"),
            (cmd, ["--kv-lora-rank", "512", "--qk-rope-head-dim", "128"],
             "qk_rope_head_dim: must be < head_dim=128 (the rest of each query/key head is "
             "qk_nope_head_dim) with MLA, got 128"),
            (cmd, ["--attention-pattern", "linear*3,full", "--linear-n-groups", "5"],
             "linear_n_groups: must divide linear_n_heads=32, got 5"),
            (cmd, ["--n-experts", "8", "--top-k", "2", "--n-dense-layers", "32"],
             "n_dense_layers: must be < n_layers=32 (the rest are MoE), got 32"),
            # hybrids: the FFN pattern's length, dense first layers beside a pattern, and a
            # layer with neither a mixer nor an FFN
            (cmd, ["--ffn-pattern", "ffn,ffn,dense"],
             "ffn_pattern: its length (3 layers) must divide n_layers=32, got 'ffn*2,dense'"),
            (cmd, ["--n-experts", "8", "--top-k", "2", "--ffn-pattern", "dense,ffn",
                   "--n-dense-layers", "1"],
             "n_dense_layers: must be 0 when ffn_pattern is not 'ffn' (the pattern says which "
             "layers are dense), got 1"),
            (cmd, ["--ffn-pattern", "dense,ffn"],
             "ffn_pattern: a dense layer needs n_experts > 1 (every FFN of a dense model is its "
             "dense FFN: write ffn), got 'dense,ffn'"),
            (cmd, ["--attention-pattern", "linear,none", "--ffn-pattern", "ffn,none"],
             "ffn_pattern: layer 1 has neither a mixer (attention_pattern 'linear,none') nor an "
             "FFN, got 'ffn,none'"),
        ]  # fmt: skip
    return cases


@pytest.mark.slow
@pytest.mark.parametrize(("cmd", "argv", "message"), _attention_flag_cases())
def test_attention_family_flag_is_refused_with_rule_and_value(
    capsys: pytest.CaptureFixture[str], cmd: str, argv: list[str], message: str
) -> None:
    assert refused(capsys, [cmd, *MODEL, *argv]) == message


@pytest.mark.parametrize("cmd", ["predict", "energy", "arch"])
def test_attention_family_flags_are_the_field_tables(cmd: str) -> None:
    """Every attention-family field is a flag of every command, with the field's own rule."""
    from dse.commands import _flags

    for name in (*ATTENTION_INT_LIMITS, "qk_rope_head_dim", "attention_pattern", "linear_kind",
                 "ffn_pattern", "linear_norm", "rope"):  # fmt: skip
        assert name in _flags.ARCH_FLAGS
    assert F.FIELDS["attention_pattern"].rule == PATTERN_RULE
    assert F.FIELDS["ffn_pattern"].rule == FFN_PATTERN_RULE
    for name, (lo, hi) in ATTENTION_INT_LIMITS.items():
        assert (F.FIELDS[name].min, F.FIELDS[name].max) == (lo, hi), name
