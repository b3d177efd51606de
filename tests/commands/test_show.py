"""What `dse sweep` and `dse show` print about a front (issue 32): extrapolated rows, constrained
metrics and the limits that never bind, `--compare` naming the limit a model breaks.

Each sweep is exhaustive over 2-4 configurations (a few seconds), run in-process as a user would.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pandas as pd
import pytest

from dse.cli import main
from dse.report import _header_info as IH
from dse.report import load_results
from dse.sweep import extrapolation as X

# A dense study at an 8k prompt trained on 15T tokens: every front row lies outside the
# predictor's level-3 range (prompt 8192 > 2048) and the Chinchilla law's (tokens > 5e11).
DENSE_8K = """\
name: dense8k
hardware: h200_sxm
workload: {{batch_size: 8, prompt_tokens: 8192, output_tokens: 256, tensor_parallel: 1}}
space:
  d_model: {{values: [3072, 4096]}}
  n_layers: {{values: [24, 32]}}
  n_heads: 32
  n_kv_heads: 8
  d_ff: 14336
  vocab_size: 128256
  training_tokens: 1.5e+13
constraints:
  fits_memory: true
  tpot: {{max: {tpot}}}
objectives:
  loss: {{source: chinchilla}}
  energy: {{source: hymell, metric: per_output_token}}
study: {{sampler: exhaustive, seed: 0}}
"""

# Inside every fitted range: Llama-3-8B's shape at a 1k prompt.
INSIDE = """\
name: inside
hardware: h100_sxm
workload: {batch_size: 4, prompt_tokens: 1024, output_tokens: 128, tensor_parallel: 1}
space:
  d_model: 4096
  n_layers: {values: [32, 36]}
  n_heads: 32
  n_kv_heads: 8
  d_ff: 14336
  vocab_size: 128256
objectives:
  latency: {metric: request}
  energy: {source: hymell}
study: {sampler: exhaustive, seed: 0}
"""


def _sweep(tmp: Path, name: str, text: str) -> tuple[Path, str]:
    """(results folder, what `dse sweep` printed) of an exhaustive sweep of `text`."""
    space = tmp / f"{name}.yaml"
    space.write_text(text)
    out = tmp / name
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        assert main(["sweep", str(space), "--out", str(out), "--no-report"]) == 0
    return out, printed.getvalue()


def _show(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    capsys.readouterr()
    assert main(["show", *args]) == 0
    return capsys.readouterr().out


@pytest.fixture(scope="module")
def loose(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The dense 8k study with TPOT <= 50 ms (its front lies at 6-9 ms), and its sweep output."""
    return _sweep(tmp_path_factory.mktemp("loose"), "loose", DENSE_8K.format(tpot=0.05))


# ---------------------------------------------------------------------- item 1: out of range
def test_items_name_the_input_and_its_factor() -> None:
    text = (
        "prefill+decode embedding, norm/input, residual/ffn: width 3072 < 4096 (x0.75); "
        "level3: prompt 8192 > 2048 (x4); prefill level2.attention: seq 9000 > 4096 (x2.2); "
        "decode gemm: outside"
    )
    got = [(i.label, i.factor) for i in X.items(text, "predictor")]
    assert got == [
        ("operator width", "0.75"),
        ("level3 prompt", "4"),
        ("level2 seq", "2.2"),
        ("operator outside", ""),
    ]
    law = X.items("total params 1.2e12 > 5e9 (x240); n_experts 8: dense law fitted", "loss law")
    assert [(i.label, i.short) for i in law] == [
        ("loss-law total params", "loss-law total params x240"),
        ("loss-law n_experts", "loss-law n_experts"),
    ]
    assert X.items("", "predictor") == X.items("nan", "loss law") == []


def test_row_texts_say_shared_inputs_once_and_name_three_per_row() -> None:
    rows = pd.DataFrame(
        {
            "pred.out_of_range": [True, True, False],
            "pred.out_of_range_inputs": [
                "level3: prompt 8192 > 2048 (x4); level3: batch 64 > 32 (x2); "
                "level3: d_model 3072 < 4096 (x0.75); level3: n_layers 24 < 28 (x0.857); "
                "prefill gemm: m 9e4 > 1e4 (x9)",
                "level3: prompt 8192 > 2048 (x4)",
                "",
            ],
            "loss_out_of_range": [True, True, True],
            "loss_out_of_range_inputs": ["tokens 1.5e13 > 5e11 (x30)"] * 3,
        }
    )
    texts, common = X.row_texts(rows)
    assert common == ["loss-law tokens x30"]  # on every row: said once
    assert texts == [
        "operator m x9, level3 prompt x4, level3 batch x2, +2",  # farthest first
        "level3 prompt x4",
        "",
    ]
    s = X.summarise(rows)
    assert (s.outside, s.by_source) == (3, {"predictor": 2, "loss law": 3})
    assert s.line().startswith("out of range: 3 of 3 front rows — loss-law tokens (3), level3 ")
    assert X.summarise(rows.iloc[:0]).line() == ""


def test_sweep_and_show_say_how_much_of_the_front_is_out_of_range(
    loose: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    folder, printed = loose
    line = "out of range: 4 of 4 front rows — level3 prompt (4), loss-law tokens (4)"
    assert line in printed  # `dse sweep`'s terminal output
    shown = _show(capsys, str(folder))
    assert line in shown
    # Alike on every row: said once, not per row; the column tells the rows apart.
    assert "on every front row: level3 prompt x4, loss-law tokens x30" in shown
    header = shown.splitlines()[1]
    assert "out of range" in header
    assert "level3 n_layers x0.857" in shown  # the 24-layer rows, below the fitted 28
    # The report's banner counts the same inputs (one function for both).
    warn = " ".join(IH.header_info(load_results(folder)).warnings)
    assert "level3 prompt ×4" in warn and "(tokens ×4)" in warn


def test_nothing_is_said_when_the_front_is_inside_every_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, printed = _sweep(tmp_path, "inside", INSIDE)
    shown = _show(capsys, str(folder))
    for text in (printed, shown):
        assert "out of range" not in text


# ---------------------------------------------------------------------- item 3: limits
def test_show_has_every_constrained_metric_and_says_a_limit_never_binds(
    loose: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    folder, _ = loose
    shown = _show(capsys, str(folder))
    assert "tpot [ms]" in shown.splitlines()[1]
    front = load_results(folder).front
    top_ms = front["pred.tpot_s"].max() * 1e3
    assert 5 < top_ms < 10  # 6-9 ms against a 50 ms limit
    assert f"tpot <= 50 ms never binds: front max {top_ms:.4g} ms; no trial broke it" in shown


def test_a_binding_limit_is_not_called_idle_and_compare_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TPOT <= 7 ms excludes Llama-3-8B's shape (8.3 ms), the lowest loss: the limit binds,
    and `--compare llama-3-8b` says which limit it breaks and by how much."""
    folder, _ = _sweep(tmp_path, "tight", DENSE_8K.format(tpot=0.007))
    shown = _show(capsys, str(folder), "--compare", "llama-3-8b")
    assert "never binds" not in shown
    llama = shown.split("Llama-3-8B (catalogue)")[1]
    assert "no: tpot 8.3" in llama and " ms > 7 ms" in llama


MOE = """\
name: moe
hardware: h200_sxm
workload: {batch_size: 8, prompt_tokens: 1024, output_tokens: 256, tensor_parallel: 1}
space:
  d_model: 4096
  n_layers: 32
  n_heads: 32
  n_kv_heads: 8
  d_ff: 8192
  vocab_size: 32000
  moe:
    n_experts: 8
    top_k: {values: [1, 2]}
    d_ff_expert: 14336
constraints:
  fits_memory: true
objectives:
  latency: {metric: request}
  energy: {source: hymell}
study: {sampler: exhaustive, seed: 0}
"""


def test_compare_ignores_d_ff_of_a_model_whose_every_layer_is_moe(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Mixtral's d_ff (14336) is unused: every layer is MoE. A space fixing d_ff 8192 for its
    all-MoE configurations places Mixtral-8x7B (its top-2 is one of the searched values)."""
    folder, _ = _sweep(tmp_path, "moe", MOE)
    shown = _show(capsys, str(folder), "--compare", "mixtral-8x7b")
    assert "Mixtral-8x7B (catalogue)" in shown
    assert "the front dominates Mixtral-8x7B" in shown or "would join the front" in shown
