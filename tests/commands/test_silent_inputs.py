"""Inputs that were silently accepted or half-explained (issue 32): each is now a located error
(`FILE:LINE: key: rule, got value`, exit 2, no traceback) or a warning on stderr that names the
value, its unit and what is plausible.

Runs the commands in-process through `dse.cli.main`, on real files, as tests/commands/test_bad_inputs_cli.py
does. The expected limits and ranges are written out here, not read from `dse.spec.fields`, so a
changed one fails a test.
"""

from __future__ import annotations

import csv
import io
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from dse.cli import main
from dse.commands import predict as P
from dse.spec import fields as F
from dse.spec.space import CONSTRAINT_KEYS, load_space

REPO = Path(__file__).resolve().parents[2]
SPACE = "space:\n  d_model: 64\n  n_layers: 2\n  n_heads: 4\n  d_ff: 128\n"  # lines 1-5


def refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run `dse argv`: exit 2, no traceback, nothing on stdout; stderr after 'dse CMD: error: '."""
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 2, (argv, out, err)
    assert "Traceback" not in err and "internal error" not in err, err
    assert out == "", out
    prefix = f"dse {argv[0]}: error: "
    assert err.startswith(prefix), err
    return err[len(prefix) :].rstrip("\n")


def space_file(tmp_path: Path, tail: str, head: str = SPACE) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(head + tail)
    return p


# ---------------------------------------------------------------------- 1. NaN and inf
LIMITED = [k for k in CONSTRAINT_KEYS if k != "fits_memory"]


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf", ".NaN", "nan", "inf"])
@pytest.mark.parametrize("key", LIMITED)
def test_nan_or_inf_constraint_limit_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, key: str, value: str
) -> None:
    """NaN ruled out every configuration without a word (0 feasible); inf none."""
    extra = "  training_tokens: 1.0e+12\n" if key == "loss" else ""
    src = ", source: chinchilla" if key == "loss" else ""
    p = space_file(tmp_path, extra + f"constraints:\n  {key}: {{max: {value}{src}}}\n")
    line = 8 if extra else 7
    shown = value.replace(".", "").lower()  # as Python prints the float: nan, inf, -inf
    msg = refused(capsys, ["check", str(p)])
    assert msg == f"{p}:{line}: constraints.{key}.max: must be a finite number > 0, got {shown}"


@pytest.mark.parametrize(
    ("tail", "line", "key"),
    [
        ("study: {trials: .nan}\n", 6, "study.trials"),
        ("study: {trials: .inf}\n", 6, "study.trials"),
        ("study: {seed: .nan}\n", 6, "study.seed"),
        ("study: {batch_size: -.inf}\n", 6, "study.batch_size"),
        ("constraints:\n  tpot: {min: .nan}\n", 7, "constraints.tpot.min"),
    ],
)
def test_nan_or_inf_study_number_is_a_located_error_not_a_crash(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tail: str, line: int, key: str
) -> None:
    """`trials: .nan` was an internal error (int(nan)); every YAML number is now finite."""
    p = space_file(tmp_path, tail)
    msg = refused(capsys, ["check", str(p)])
    assert msg.startswith(f"{p}:{line}: {key}: must be a finite number"), msg
    assert re.search(r", got -?(nan|inf)$", msg), msg


def test_range_step_nan_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    head = SPACE.replace("n_layers: 2", "n_layers: {low: 2, high: 8, step: .nan}")
    p = space_file(tmp_path, "", head)
    msg = refused(capsys, ["check", str(p)])
    assert msg == f"{p}:3: space.n_layers.step: must be a finite number, got nan"


# ---------------------------------------------------------------------- 2. plausible ranges
# metric -> (unit, plausible range): a limit outside is warned about, not refused
PLAUSIBLE = {
    "latency": ("s", (1e-3, 86400.0)),
    "ttft": ("s", (1e-4, 3600.0)),
    "tpot": ("s", (1e-4, 10.0)),
    "energy": ("J", (1e-2, 1e9)),
    "energy_per_output_token": ("J", (1e-5, 1e4)),
    "throughput": ("tokens/s", (1e-2, 1e7)),
    "user_speed": ("tokens/s", (0.1, 1e4)),
    "loss": ("nats/token", (1.0, 15.0)),
    "active_params": ("parameters", (1e6, 1e13)),
    "total_params": ("parameters", (1e6, 1e13)),
    "kv_bytes_per_token": ("bytes", (1e2, 1e8)),
    "memory_bytes": ("bytes", (1e8, 1e12)),
}


def test_every_constraint_limit_is_declared_once_with_unit_and_plausible_range() -> None:
    assert set(PLAUSIBLE) == set(LIMITED)
    for key, (unit, plausible) in PLAUSIBLE.items():
        f = F.FIELDS[key]
        assert (f.group, f.kind, f.unit, f.plausible) == ("constraint", "float", unit, plausible)
        assert f.rule == "must be a finite number > 0"
        lo, hi = plausible
        assert f.implausible(lo) is None and f.implausible(hi) is None
        assert f"[{lo:g}, {hi:g}] {unit}" in (f.implausible(hi * 5) or "")
        assert f.implausible(lo / 5) is not None


def test_a_unit_slip_in_a_limit_is_warned_with_value_unit_and_range(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`tpot: {max: 50}` (50 ms meant) passed `dse check` and then ruled nothing out."""
    p = space_file(tmp_path, "constraints:\n  tpot: {max: 50}\n  active_params: {min: 7}\n")
    assert main(["check", str(p)]) == 0
    out, err = capsys.readouterr()
    assert "is valid" in out
    warnings = [line for line in err.splitlines() if line]
    assert warnings == [
        f"dse: warning: {p}:7: constraints.tpot.max: 50 s is outside the plausible range "
        "[0.0001, 10] s of tpot (time per output token); check its unit (the limit is kept as "
        "written)",
        f"dse: warning: {p}:8: constraints.active_params.min: 7 parameters is outside the "
        "plausible range [1e+06, 1e+13] parameters of active_params (1e6 to 1e13, not "
        "billions); check its unit (the limit is kept as written)",
    ]
    assert load_space(p, warn=False).constraints["tpot"] == {"min": None, "max": 50.0}


def test_plausible_limits_and_the_shipped_spaces_warn_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    p = space_file(tmp_path, "constraints:\n  tpot: {max: 0.05}\n  throughput: {min: 500}\n")
    assert main(["check", str(p)]) == 0
    assert capsys.readouterr().err == ""
    shipped = [
        *(REPO / "search_spaces").glob("*.yaml"),
        *(REPO / "tests/data/spaces").glob("*.yaml"),
    ]
    assert shipped
    for path in shipped:
        assert load_space(path, warn=False).warnings == (), path


# ---------------------------------------------------------------------- 3. empty objectives
@pytest.mark.parametrize(("tail", "shown"), [("objectives: {}\n", "{}"), ("objectives:\n", "None")])
def test_empty_objectives_are_refused_not_the_default(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tail: str, shown: str
) -> None:
    p = space_file(tmp_path, tail)
    assert refused(capsys, ["check", str(p)]) == (
        f"{p}:6: objectives: must name at least two objectives (leave the key out for the "
        f"default, latency_request and energy_hymell_request), got {shown}"
    )


def test_omitted_objectives_still_give_the_default(tmp_path: Path) -> None:
    space = load_space(space_file(tmp_path, ""))
    assert space.objectives.names == ("latency_request", "energy_hymell_request")


# ---------------------------------------------------------------------- 5. trials with exact
@pytest.mark.parametrize("sampler", ["exact", "exhaustive"])
def test_trials_with_a_sampler_that_prices_everything_is_warned(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, sampler: str
) -> None:
    p = space_file(tmp_path, f"study: {{sampler: {sampler}, trials: 3}}\n")
    assert main(["check", str(p)]) == 0
    out, err = capsys.readouterr()
    assert err == (
        f"dse: warning: {p}:6: study.trials: ignored by sampler {sampler}, which prices every "
        "configuration of the space once (trials has no meaning; it applies only if --sampler "
        "picks a sampling sampler), got 3\n"
    )
    assert f"sampler={sampler} trials=every configuration" in out


@pytest.mark.parametrize(
    "tail", ["study: {sampler: exact}\n", "study: {sampler: tpe, trials: 3}\n"]
)
def test_trials_that_mean_something_are_not_warned(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tail: str
) -> None:
    assert main(["check", str(space_file(tmp_path, tail))]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("sampler", ["exact", "exhaustive"])
def test_trials_flag_with_a_sampler_that_prices_everything_is_warned(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, sampler: str
) -> None:
    """`dse sweep --sampler exact --trials 3`: the flag is named as ignored, as in the YAML."""
    from dse.sweep import SweepOptions
    from dse.sweep._run import settings

    p = space_file(tmp_path, "study: {sampler: tpe, trials: 5}\n")
    space = load_space(p)
    rec = settings(space, SweepOptions(space_file=p, sampler=sampler, trials=3, quiet=True))
    assert rec.trials == space.size()
    err = capsys.readouterr().err
    assert f"--trials 3 ignored by sampler {sampler}" in err
    settings(space, SweepOptions(space_file=p, sampler="tpe", trials=3, quiet=True))
    assert "--trials 3 ignored" not in capsys.readouterr().err


# ---------------------------------------------------------------------- 6. GPU name case
@pytest.mark.parametrize(
    ("hardware", "gpus"),
    [
        ("H100_SXM", ("h100_sxm",)),
        ("H200_sxm", ("h200_sxm",)),
        ("{values: [A100_SXM, h200_sxm]}", ("a100_sxm", "h200_sxm")),
    ],
)
def test_hardware_is_read_in_any_case_as_gpu_and_csv_read_it(
    tmp_path: Path, hardware: str, gpus: tuple[str, ...]
) -> None:
    space = load_space(space_file(tmp_path, f"hardware: {hardware}\n"))
    assert next(p for p in space.params if p.name == "gpu").values == gpus
    assert F.check("gpu", hardware.strip("{}").split("[")[-1].split(",")[0]) == gpus[0]


def test_hardware_in_two_cases_is_one_value_repeated(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    p = space_file(tmp_path, "hardware: {values: [H100_SXM, h100_sxm]}\n")
    msg = refused(capsys, ["check", str(p)])
    assert msg == f"{p}:6: hardware.values: must not repeat a value, got ['H100_SXM', 'h100_sxm']"


def test_unknown_hardware_still_names_the_registry(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    p = space_file(tmp_path, "hardware: H900\n")
    msg = refused(capsys, ["check", str(p)])
    assert msg.startswith(f"{p}:6: hardware: must be one of a100_sxm, ") and msg.endswith(
        ", got 'H900'"
    )


# ---------------------------------------------------------------------- 7. suggestions
def test_unknown_model_suggests_each_model_once(capsys: pytest.CaptureFixture[str]) -> None:
    msg = refused(capsys, ["predict", "--model", "gpt-5"])
    assert msg == "unknown model 'gpt-5'; did you mean 'GPT-J-6B'?"
    for name in ("llama-3-9b", "mistral", "lama"):
        msg = refused(capsys, ["predict", "--model", name])
        names = re.findall(r"'([^']+)'", msg.split("did you mean", 1)[1])
        assert names and len({n.lower() for n in names}) == len(names), msg


@pytest.mark.parametrize("given", ["dense8b", "Dense-8B", "DENSE_8B.yaml", "heads-study"])
def test_missing_space_suggests_the_shipped_space_ignoring_case_and_separators(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str
) -> None:
    monkeypatch.chdir(tmp_path)
    want = "heads_study" if "heads" in given else "dense_8b"
    assert refused(capsys, ["check", given]) == (
        f"{given}: file not found; did you mean the shipped search space '{want}'?"
    )


def test_missing_space_with_no_close_name_lists_the_shipped_spaces(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    msg = refused(capsys, ["check", "zzz"])
    assert msg.startswith("zzz: file not found; shipped search spaces: ") and "dense_8b" in msg
    assert refused(capsys, ["check", "sub/zzz.yaml"]) == "sub/zzz.yaml: file not found"


# ---------------------------------------------------------------------- 8. why invalid
def test_check_counts_invalid_architectures_by_the_rule_they_break(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    head = (
        "space:\n  d_model: {values: [3584, 4096]}\n  n_layers: 2\n"
        "  n_heads: {values: [28, 32]}\n  n_kv_heads: {values: [4, 8, 16]}\n  d_ff: 128\n"
        "  head_dim: 128\n"
    )
    assert main(["check", str(space_file(tmp_path, "", head))]) == 0
    out = capsys.readouterr().out
    assert "  valid architectures: 8 of 12\n" in out
    assert "    4 invalid, by the first rule each breaks:\n" in out
    rules = re.findall(r"^ +(\d+)  (n_kv_heads: .*)$", out, re.M)
    assert sorted(rules) == [
        ("2", "n_kv_heads: must divide n_heads=28, got 16"),
        ("2", "n_kv_heads: must divide n_heads=28, got 8"),
    ]


def test_check_lists_the_most_common_rules_and_sums_the_rest(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    head = (
        "space:\n  d_model: 4096\n  n_layers: 2\n  n_heads: {values: [24, 28, 30, 36, 40, 44, 64]}\n"
        "  n_kv_heads: {values: [16, 32]}\n  d_ff: 128\n  head_dim: 128\n"
    )
    assert main(["check", str(space_file(tmp_path, "", head))]) == 0
    out = capsys.readouterr().out
    counts = [int(n.replace(",", "")) for n in re.findall(r"^ {4} +([\d,]+)  ", out, re.M)]
    assert len(counts) == 6  # five rules, then the rest summed
    assert "... 7 more rules and values" in out  # 12 of the 14 pairs break a rule
    assert sum(counts) == 12 and "valid architectures: 2 of 14" in out


# ---------------------------------------------------------------------- 9. dse arch memory
def test_arch_memory_lines_say_what_they_count(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["arch", "--model", "llama-3-8b", "--batch-size", "64", "--tensor-parallel", "2"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    table = out.split("memory per GPU:", 1)[1]
    got = {
        m[0]: (float(m[1]), m[2]) for m in re.findall(r"^  (\w+) +([\d.]+) GiB  (.+)$", table, re.M)
    }
    assert list(got) == ["weights", "kv_cache", "activations", "reserved", "total", "required"]
    assert got["weights"][1] == "parameters held by this GPU (1/2 of them)"
    assert got["kv_cache"][1] == "KV cache of the whole batch: 64 sequences x (1024 + 256 tokens)"
    assert got["total"][1].startswith("weights + kv_cache + activations + reserved")
    assert got["required"][1].startswith("weights + activations + reserved + ONE sequence's KV")
    parts = sum(got[k][0] for k in ("weights", "kv_cache", "activations", "reserved"))
    assert got["total"][0] == pytest.approx(parts, abs=0.02)  # printed to 0.01 GiB each
    one = got["kv_cache"][0] / 64
    assert got["required"][0] == pytest.approx(parts - got["kv_cache"][0] + one, abs=0.03)


# ---------------------------------------------------------------------- 4. --out is --batch
def _csv(path: Path, rows: list[dict[str, object]]) -> Path:
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def test_batch_out_that_is_the_input_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = _csv(tmp_path / "c.csv", [{"d_model": 512, "n_layers": 2, "n_heads": 8, "d_ff": 2048}])
    before = src.read_bytes()
    (tmp_path / "link.csv").symlink_to(src)
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    for out in ("../c.csv", str(src), "../link.csv", "./../sub/../c.csv"):
        msg = refused(capsys, ["predict", "--batch", "../c.csv", "--out", out])
        assert msg == (
            f"--out: must not be the --batch input '../c.csv' (it would be overwritten), "
            f"got {out!r}"
        )
    assert src.read_bytes() == before


# ---------------------------------------------------------------------- 10. chunks, progress
def _mixed_csv(path: Path) -> Path:
    """60 rows mixing GPUs (any case), MoE and dense, sliding and full layers, tensor
    parallelism, and rows that break a rule (n_kv_heads 3) or do not fit."""
    rng = np.random.default_rng(0)
    rows = []
    for _ in range(60):
        d = int(rng.choice([2048, 4096]))
        pattern = str(rng.choice(["full", "sliding,full", ""]))
        rows.append(
            {
                "d_model": d,
                "n_layers": int(rng.choice([8, 16])),
                "n_heads": int(rng.choice([16, 32])),
                "n_kv_heads": int(rng.choice([4, 8, 3])),
                "d_ff": 4 * d,
                "n_experts": int(rng.choice([1, 1, 8])),
                "top_k": int(rng.choice([1, 2])),
                "attention_pattern": pattern,
                "sliding_window": 512 if pattern else "",
                "batch_size": int(rng.choice([1, 8, 64])),
                "gpu": str(rng.choice(["h100_sxm", "A100_SXM", "h200_sxm"])),
                "tensor_parallel": int(rng.choice([1, 2])),
            }
        )
    return _csv(path, rows)


def _read(path: Path) -> tuple[list[str], list[list[str]]]:
    with open(path, newline="") as fh:
        records = list(csv.reader(fh))
    return records[0], records[1:]


def _facts(text: str) -> set[tuple[str, str, str]]:
    """The misses an out_of_range_inputs text states, as (phase, operator, miss): the text
    groups operators alike over the rows predicted together, the facts are per row."""
    out = set()
    for part in filter(None, text.split("; ")):
        where, _, miss = part.rpartition(": ")
        phases, _, ops = where.partition(" ")
        for phase in phases.split("+"):
            for op in ops.split(", ") if ops else [""]:
                out.add((phase, op, miss))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("chunk", [1, 7, 25])
def test_batch_in_chunks_predicts_what_one_call_predicts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, chunk: int
) -> None:
    src = _mixed_csv(tmp_path / "in.csv")
    P._run_batch(str(src), str(tmp_path / "whole.csv"), quiet=True, chunk_rows=10**6)
    P._run_batch(str(src), str(tmp_path / "chunk.csv"), quiet=True, chunk_rows=chunk)
    capsys.readouterr()
    head_w, rows_w = _read(tmp_path / "whole.csv")
    head_c, rows_c = _read(tmp_path / "chunk.csv")
    assert head_c == head_w and len(rows_c) == len(rows_w) == 60
    errors = [r[head_w.index("error")] for r in rows_w]
    assert 0 < sum(e != "" for e in errors) < 60  # both kinds of rows are in the file
    for j, name in enumerate(head_w):
        for i, (a, b) in enumerate(
            zip([r[j] for r in rows_w], [r[j] for r in rows_c], strict=True)
        ):
            if name == "out_of_range_inputs":
                assert _facts(a) == _facts(b), (i, a, b)
                continue
            try:
                x, y = float(a), float(b)
            except ValueError:
                assert a == b, (name, i, a, b)
                continue
            assert y == pytest.approx(x, rel=1e-6, abs=1e-300), (name, i, a, b)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_batch_progress_bar_on_a_terminal_only_and_not_with_quiet(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = _mixed_csv(tmp_path / "in.csv")
    out = str(tmp_path / "out.csv")
    assert main(["predict", "--batch", str(src), "--out", out]) == 0  # stderr: no terminal
    assert capsys.readouterr().err.startswith("wrote 60 rows")
    for quiet, shown in (([], True), (["-q"], False)):
        term = _Terminal()
        monkeypatch.setattr(sys, "stderr", term)
        assert main(["predict", "--batch", str(src), "--out", out, *quiet]) == 0
        monkeypatch.undo()
        text = term.getvalue()
        assert ("predict: 100%" in text) == shown, text
        assert "wrote 60 rows" in text
