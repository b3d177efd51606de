"""Attention beyond GQA (issue 21): the fields, their rules and their located messages.

The layer pattern, sliding window, MLA ranks and linear-layer sizes are declared once in
`dse.spec.fields`; these tests hold every entry point (columns, YAML spaces, the scalar check) to
the same rule and message, and check that a pattern is written compactly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dse.errors import ConfigError
from dse.spec import columns as C
from dse.spec import pattern as P
from dse.spec.arch import Architecture
from dse.spec.rules import check_architecture
from dse.spec.space import load_space

BASE = {"d_model": 4096, "n_layers": 32, "n_heads": 32, "n_kv_heads": 8, "d_ff": 14336}


@pytest.mark.parametrize(
    ("raw", "text", "period"),
    [
        (["sliding", "sliding", "sliding", "full"], "sliding*3,full", 4),
        ("sliding*3,full", "sliding*3,full", 4),
        (["sliding", "full", "sliding", "full"], "sliding,full", 2),  # a repeated period
        (["full"], "full", 1),
        ("linear*3, full", "linear*3,full", 4),
    ],
)
def test_patterns_are_written_compactly(raw: object, text: str, period: int) -> None:
    assert P.canonical(raw) == text
    assert P.period(text) == period


def test_layer_counts_repeat_the_pattern() -> None:
    assert P.layer_counts("sliding*3,full", 32) == (8, 24, 0)
    full, sliding, linear = P.layer_counts(np.array(["full", "linear*3,full"]), np.array([8, 48]))
    assert full.tolist() == [8, 12] and sliding.tolist() == [0, 0] and linear.tolist() == [0, 36]


@pytest.mark.parametrize("bad", ["slidin,full", ["full", 3], [], "full*0", "sliding*x"])
def test_a_bad_pattern_names_the_rule(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"attention_pattern: must be a list of full, sliding"):
        C.as_columns({**BASE, "attention_pattern": bad})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"attention_pattern": ["sliding", "sliding", "full"], "sliding_window": 512},
            "attention_pattern: its length (3 layers) must divide n_layers=32, got 'sliding*2,full'",
        ),
        (
            {"attention_pattern": "sliding,full"},
            "sliding_window: must be an integer >= 1 when attention_pattern has sliding layers, got 0",
        ),
        (
            {"kv_lora_rank": 8192, "qk_rope_head_dim": 64},
            "kv_lora_rank: must be <= n_heads x (qk_nope_head_dim + v_head_dim) = 6144",
        ),
        (
            {"kv_lora_rank": 512, "qk_rope_head_dim": 128},
            "qk_rope_head_dim: must be < head_dim=128",
        ),
        (
            {"kv_lora_rank": 512, "qk_rope_head_dim": 64, "q_lora_rank": 9000},
            "q_lora_rank: must be <= n_heads x (qk_nope_head_dim + qk_rope_head_dim) = 4096",
        ),
        ({"q_lora_rank": 1536}, "q_lora_rank: needs kv_lora_rank >= 1"),
        ({"kv_lora_rank": 512, "qkv_bias": True}, "qkv_bias: must be false with kv_lora_rank"),
        (
            {"attention_pattern": "linear*3,full", "linear_n_heads": 32, "linear_n_groups": 5},
            "linear_n_groups: must divide linear_n_heads=32, got 5",
        ),
        (
            {"n_experts": 8, "top_k": 2, "n_dense_layers": 32},
            "n_dense_layers: must be < n_layers=32",
        ),
    ],
)
def test_bad_combinations_get_the_rule_and_the_values(change: dict, message: str) -> None:
    errors = check_architecture({**BASE, **change})
    assert errors and errors[0].startswith(message), errors
    cols, n = C.as_columns({**BASE, **change})
    assert C.derived(cols, n)["invalid"][0] == errors[0]  # the same first message per row


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("sliding_window", -1, "sliding_window: must be an integer in [0, 33554432], got -1"),
        ("qk_rope_head_dim", 63, "qk_rope_head_dim: must be an even integer in [0, 4096], got 63"),
        ("linear_kind", "mamba", "linear_kind: must be one of gated_deltanet, mamba2"),
    ],
)
def test_field_limits_are_the_table_s(field: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        C.as_columns({**BASE, field: value})


SPACE = """\
name: attn
workload: {{prompt_tokens: 32768, output_tokens: 256}}
space:
  d_model: 4096
  n_layers: 32
  n_heads: 32
  n_kv_heads: 8
  d_ff: 14336
{extra}
"""


def _space(tmp_path: Path, extra: str) -> Path:
    p = tmp_path / "space.yaml"
    p.write_text(SPACE.format(extra=extra))
    return p


def test_a_space_searches_patterns_written_as_lists(tmp_path: Path) -> None:
    space = load_space(
        _space(
            tmp_path,
            "  attention_pattern: {values: [[full], [sliding, sliding, sliding, full]]}\n"
            "  sliding_window: {values: [1024, 4096]}",
        )
    )
    cols = space.enumerate()
    assert sorted(set(cols["attention_pattern"].tolist())) == ["full", "sliding*3,full"]
    fixed = load_space(
        _space(tmp_path, "  attention_pattern: [sliding, full]\n  sliding_window: 4096")
    )
    assert fixed.fixed["attention_pattern"] == "sliding,full"


@pytest.mark.parametrize(
    ("extra", "line", "message"),
    [
        (
            "  attention_pattern: [sliding, sliding, full]\n  sliding_window: 4096",
            9,
            "space.attention_pattern: its length must divide n_layers [32] for some value",
        ),
        (
            "  attention_pattern: [sliding, full]\n  sliding_window: 65536",
            10,
            "space.sliding_window: a sliding layer needs a window shorter than the context",
        ),
        (
            "  attention_pattern: [sliding, fill]",
            9,
            "space.attention_pattern: must be a list of full, sliding, linear",
        ),
        ("  kv_lora_rank: -3", 9, "space.kv_lora_rank: must be an integer in [0, 65536], got -3"),
    ],
)
def test_space_mistakes_get_located_messages(
    tmp_path: Path, extra: str, line: int, message: str
) -> None:
    with pytest.raises(ConfigError) as err:
        load_space(_space(tmp_path, extra))
    assert f"space.yaml:{line}: {message}" in str(err.value)


def test_defaults_leave_an_architecture_as_it_was() -> None:
    a = Architecture(**BASE)
    assert a.attention_pattern == "full" and a.sliding_window == 0 and a.kv_lora_rank == 0
    assert Architecture.from_mapping({**BASE, "attention_pattern": ["full"]}) == a.resolved()
