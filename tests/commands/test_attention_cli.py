"""The attention families on the command line: `dse arch` says how many layers of each kind a
model has and what its KV cache and state hold; the family flags reach the accounting of
`dse arch`, `dse energy` and `dse predict` (bad values: tests/commands/test_bad_inputs_cli.py)."""

from __future__ import annotations

import json

import pytest

from dse.cli import main
from dse.estimators import tokens2wh as T
from dse.spec import arch as A
from dse.spec.catalogue import lookup_model


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 0, (argv, out, err)
    return out


def _arch_json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    return json.loads(_run(capsys, ["arch", *argv, "--json"]))


def test_arch_gemma3_counts_sliding_layers_and_their_capped_cache(capsys) -> None:
    argv = ["--model", "gemma-3-27b", "--prompt-tokens", "32768"]
    at = _arch_json(capsys, argv)["attention"]
    assert at["layers"] == {"full": 10, "sliding": 52, "linear": 0}
    assert at["sliding_window"] == 1024
    per_layer = 2 * 16 * 128 * 2  # K and V of 16 KV heads of 128, bf16
    assert at["kv_bytes_per_token_full_layers"] == 10 * per_layer
    assert at["kv_bytes_per_token_sliding_layers"] == 52 * per_layer
    ctx = 32768 + 256
    assert at["kv_cache_bytes_per_sequence"] == ctx * 10 * per_layer + 1024 * 52 * per_layer
    assert at["kv_cache_bytes_per_sequence_all_full"] == ctx * 62 * per_layer
    text = _run(capsys, ["arch", *argv])
    assert "attention: 10 full + 52 sliding (window 1,024 tokens) layers" in text
    assert "52 sliding layers: 425,984 (K and V) per token, at most 1,024 tokens" in text
    assert "one sequence at context 33,024: 2.93 GiB (15.62 GiB if every layer" in text


def test_arch_deepseek_v3_shows_the_latent_and_dense_layers(capsys) -> None:
    r = _arch_json(capsys, ["--model", "deepseek-v3"])
    at = r["attention"]
    assert at["mla"] == {"kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64,
                         "qk_nope_head_dim": 128, "v_head_dim": 128}  # fmt: skip
    assert at["n_dense_layers"] == 3 and at["layers"]["full"] == 61
    assert r["kv_bytes_per_token"] == 61 * (512 + 64) * 2 == 70_272
    text = _run(capsys, ["arch", "--model", "deepseek-v3"])
    assert "MLA: kv_lora_rank=512 q_lora_rank=1536 qk_rope_head_dim=64" in text
    assert "first 3 layers dense" in text and "(MLA latent) every token" in text


def test_arch_qwen3_next_shows_the_linear_layers_constant_state(capsys) -> None:
    for ctx in ("1024", "65536"):
        at = _arch_json(capsys, ["--model", "qwen3-next-80b-a3b", "--context", ctx])["attention"]
        assert at["layers"] == {"full": 12, "sliding": 0, "linear": 36}
        state = 36 * (32 * 128 * 128 + 3 * (2 * 16 * 128 + 32 * 128)) * 2
        assert at["state_bytes_per_sequence"] == state
        assert at["kv_cache_bytes_per_sequence"] == int(ctx) * 12 * 2 * 2 * 256 * 2 + state
    text = _run(capsys, ["arch", "--model", "qwen3-next-80b-a3b"])
    assert "12 full + 36 linear (gated_deltanet: 32 heads x 128, 16 groups x state 128" in text
    assert "36 linear layers: a constant state of 37.7 MiB per sequence" in text
    assert "attn_output_gate" in text.splitlines()[2]


def test_arch_of_a_plain_gqa_model_prints_what_it_always_printed(capsys) -> None:
    text = _run(capsys, ["arch", "--model", "llama-3-8b"])
    assert "attention:" not in text and "MLA" not in text
    assert "\nKV cache: 131,072 bytes per token (128.0 KiB)\n" in text


def test_family_flags_reach_dse_arch(capsys) -> None:
    base = ["--model", "llama-3-8b"]
    r = _arch_json(
        capsys, [*base, "--attention-pattern", "sliding*3,full", "--sliding-window", "4096"]
    )
    assert r["architecture"]["attention_pattern"] == "sliding*3,full"
    assert r["attention"]["layers"] == {"full": 8, "sliding": 24, "linear": 0}
    r = _arch_json(capsys, [*base, "--kv-lora-rank", "512", "--qk-rope-head-dim", "64",
                            "--q-lora-rank", "1024", "--v-head-dim", "96"])  # fmt: skip
    assert r["attention"]["mla"]["qk_nope_head_dim"] == 64  # head_dim 128 - rope 64
    assert r["kv_bytes_per_token"] == 32 * 576 * 2
    argv = [*base, "--attention-pattern", "linear*3,full", "--linear-kind", "mamba2",
            "--linear-n-heads", "64", "--linear-head-dim", "64", "--linear-n-groups", "8",
            "--linear-state-dim", "128", "--linear-conv-width", "4", "--attn-output-gate"]  # fmt: skip
    r = _arch_json(capsys, argv)
    a = A.Architecture.from_mapping(r["architecture"])
    assert r["attention"]["linear"]["kind"] == "mamba2" and a.attn_output_gate
    assert r["params"]["total"] == A.total_params(a)
    assert r["attention"]["state_bytes_per_sequence"] == A.state_bytes(a)


def test_family_flags_reach_dse_energy(capsys) -> None:
    wl = ["--prompt-tokens", "32768", "--output-tokens", "64", "--preset", "corrected", "--json"]
    flags = ["--attention-pattern", "sliding*3,full", "--sliding-window", "1024"]
    slid = json.loads(_run(capsys, ["energy", "--model", "llama-3-8b", *flags, *wl]))
    full = json.loads(_run(capsys, ["energy", "--model", "llama-3-8b", *wl]))
    key = "breakdown.attn_read.total_j"
    assert slid["estimates"]["corrected"][key] < 0.3 * full["estimates"]["corrected"][key]
    a = A.Architecture.from_mapping(
        {**lookup_model("llama-3-8b").to_dict(), "attention_pattern": "sliding*3,full",
         "sliding_window": 1024}
    )  # fmt: skip
    wl_map = {"batch_size": 1, "prompt_tokens": 32768, "output_tokens": 64}
    lib = T.estimate(a, wl_map, "h100_sxm", "corrected")
    assert slid["estimates"]["corrected"][key] == pytest.approx(float(lib[key]), rel=1e-12)


@pytest.mark.parametrize(
    ("argv", "op"),
    [
        (["--model", "gemma-3-27b"], "attention/core_sliding"),
        (["--model", "qwen3-next-80b-a3b", "--tp", "4"], "linear/scan"),
        (
            [
                "--model",
                "llama-3-8b",
                "--attention-pattern",
                "sliding*3,full",
                "--sliding-window",
                "512",
            ],
            "attention/core_sliding",
        ),
    ],
)
def test_predict_prices_family_models_and_flags(capsys, argv: list[str], op: str) -> None:
    out = _run(capsys, ["predict", *argv, "--prompt-tokens", "4096", "--gpu", "h200_sxm"])
    assert op in out


def test_a_one_row_column_of_a_pattern_text_is_that_pattern() -> None:
    # `dse predict` builds its one configuration as {field: [value]}: [text] must read as text.
    from dse.spec import pattern as P

    assert P.canonical(["linear*3,full"]) == P.canonical("linear*3,full") == "linear*3,full"
    assert P.canonical(["sliding*3,full", "full"]) == "sliding*3,full*2"
    assert P.canonical(["slide,full"]) is None


def test_predict_reads_an_approximate_hf_config_and_says_so(tmp_path, capsys) -> None:
    """gpt-oss's config (output / router / expert biases and attention sinks have no field):
    `dse predict --hf-config` prices it as `--model` does and says what is not modelled."""
    from dse.spec.catalogue import model_card

    card = model_card("gpt-oss-20b")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(card.config)))
    rc = main(["predict", "--hf-config", str(path), "--gpu", "h100_sxm"])
    got = capsys.readouterr()
    assert rc == 0, got.err
    assert "model_type 'gpt_oss' is approximate" in got.err
    assert f"{card.unmodelled_params:,} parameters are not modelled" in got.err
    rc = main(["predict", "--model", "gpt-oss-20b", "--gpu", "h100_sxm"])
    same = capsys.readouterr().out
    assert rc == 0
    assert got.out.splitlines()[2:6] == same.splitlines()[2:6]  # the same predictions
