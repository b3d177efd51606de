"""The `rope` field (issue 21, attention beyond GQA): attention layers without position encoding
(NoPE: Nemotron-H, Jamba) price no `attention/rope` and are otherwise priced as the same model
with RoPE (ALiBi and learned positions, BLOOM, OPT, Falcon with alibi, keep the RoPE-sized pass
as the stand-in for their positional work); the Hugging Face importer
and the catalogue set it; a bad value gets the located message; the default moves nothing (the
golden tests: tests/predict/test_golden_predictions.py, tests/predict/test_golden_small.py). `--rope maybe` is in
tests/commands/test_bad_inputs_cli.py's catalogue, the inert cases in tests/spec/test_inert.py."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dse.cli import main
from dse.errors import ConfigError
from dse.estimators import tokens2wh as T
from dse.predict import predict
from dse.predict.ops import forward_ops
from dse.predict.request import base_costs, resolve_artifact
from dse.spec import arch as A
from dse.spec import columns as C
from dse.spec import rules as R
from dse.spec.catalogue import lookup_model
from dse.spec.hardware import get_gpu
from dse.spec.hf import import_hf_config, to_hf_config

BASE = dict(d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8, d_ff=14336, vocab_size=128256,
            gpu="h100_sxm", batch_size=4, prompt_tokens=2048, output_tokens=128)  # fmt: skip
# With RoPE and without, dense and sliding/MoE at tensor parallelism 2: one batch, rows in pairs.
PAIRS = [
    BASE,
    {**BASE, "attention_pattern": "sliding,full", "sliding_window": 512, "n_experts": 8,
     "top_k": 2, "tensor_parallel": 2},
    {**BASE, "attention_pattern": "linear*3,full", "linear_kind": "mamba2", "linear_n_groups": 8},
]  # fmt: skip
TINY = {"hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 100}  # fmt: skip
NEMOTRON_H = {"model_type": "nemotron_h", **TINY, "head_dim": 16, "mamba_num_heads": 8,
              "mamba_head_dim": 8, "ssm_state_size": 16, "n_groups": 2, "conv_kernel": 4,
              "hybrid_override_pattern": "M-M*-"}  # fmt: skip
JAMBA = {"model_type": "jamba", **TINY, "num_hidden_layers": 8, "num_experts": 4,
         "num_experts_per_tok": 2}  # fmt: skip


def _raw(rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    keys = set().union(*rows)
    return {k: np.array([r.get(k, C.DEFAULTS.get(k)) for r in rows]) for k in keys}


def _batch(rows: list[dict[str, Any]]) -> tuple[dict[str, np.ndarray], int]:
    return C.as_columns(_raw(rows))


def _with_and_without(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for base in rows for r in (base, {**base, "rope": False})]


# ---------------------------------------------------------------------- pricing
def test_the_default_is_rope() -> None:
    assert C.DEFAULTS["rope"] is True and A.Architecture(64, 2, 4, 128).rope is True
    cols, _ = C.as_columns(BASE)
    assert cols["rope"].dtype == bool and cols["rope"].all()


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_nope_layers_count_no_rope_operator(phase: str) -> None:
    cols, n = _batch(_with_and_without(PAIRS))
    ops = {op.name: op for op in forward_ops(cols, phase)}
    count = np.broadcast_to(ops["attention/rope"].count, (n,))
    attention = np.broadcast_to(ops["attention/qkv"].count, (n,))
    assert list(count) == [32, 0, 32, 0, 8, 0] and list(attention) == [32, 32, 32, 32, 8, 8]


def test_levels_1_2_price_every_other_operator_alike() -> None:
    """The kernels' seconds and joules of each operator (Levels 1-2) are the same with and
    without RoPE, but `attention/rope`'s, which is 0 without."""
    cols, n = _batch(_with_and_without(PAIRS))
    gpu = get_gpu("h100_sxm")
    artifact, _ = resolve_artifact(gpu.name, "auto")
    base = base_costs(cols, n, gpu, artifact)
    for phase in (base.prefill, base.decode):
        for items in (phase.items_s, phase.items_j):
            rope = items["attention/rope"]
            assert (rope[0::2] > 0).all() and (rope[1::2] == 0).all()
            for name, v in items.items():
                if name != "attention/rope":
                    np.testing.assert_allclose(v[1::2], v[0::2], rtol=1e-9, atol=0, err_msg=name)
        with_rope = phase.time_s[0::2] - phase.items_s["attention/rope"][0::2]
        np.testing.assert_allclose(phase.time_s[1::2], with_rope, rtol=1e-9, atol=0)


def test_a_nope_model_prices_no_rope_time() -> None:
    """The prediction's breakdown has no RoPE time; Level 3 scales the phase's other items by
    one factor (it reads the phase's total), so their ratios are the model with RoPE's."""
    rope = predict(BASE)
    nope = predict({**BASE, "rope": False})
    for phase in ("prefill", "decode"):
        assert rope[f"breakdown.{phase}.attention/rope_s"][0] > 0
        assert nope[f"breakdown.{phase}.attention/rope_s"][0] == 0
        keys = [k for k in rope if k.startswith(f"breakdown.{phase}.")]
        keys = [k for k in keys if "rope" not in k and "system_overhead" not in k]
        ratio = np.array([nope[k][0] / rope[k][0] for k in keys if rope[k][0] > 0])
        if phase == "prefill":  # decode's attention over the cache has its own Level-3 factor
            np.testing.assert_allclose(ratio, ratio[0], rtol=1e-9)
    assert nope["ttft_s"][0] < rope["ttft_s"][0]
    assert nope["tpot_s"][0] < rope["tpot_s"][0]


def test_the_roofline_prediction_is_the_rope_models_less_its_rope_time() -> None:
    rows = _with_and_without(PAIRS)
    out = predict(_raw(rows), artifacts={"h100_sxm": None})
    for phase in ("prefill", "decode"):
        rope = out[f"breakdown.{phase}.attention/rope_s"]
        assert (rope[0::2] > 0).all() and (rope[1::2] == 0).all()
        for k, v in out.items():
            if k.startswith(f"breakdown.{phase}.") and "rope" not in k:
                np.testing.assert_allclose(v[1::2], v[0::2], rtol=1e-9, atol=0, err_msg=k)
    rope = {p: out[f"breakdown.{p}.attention/rope_s"][0::2] for p in ("prefill", "decode")}
    less = out["ttft_s"][0::2] - rope["prefill"]
    np.testing.assert_allclose(out["ttft_s"][1::2], less, rtol=1e-9)
    less = out["latency_s"][0::2] - rope["prefill"] - rope["decode"]
    np.testing.assert_allclose(out["latency_s"][1::2], less, rtol=1e-9)


def test_a_mixed_batch_prices_each_row_as_alone() -> None:
    rows = _with_and_without(PAIRS)
    both = predict(_raw(rows))
    for i, r in enumerate(rows):
        alone = predict(r)
        # rel 1e-6: float32 round-off of the MLPs in another batch layout (nn.MLP.predict),
        # 1e-8 on some CPUs; a row priced with its neighbour's RoPE moves by percents
        assert both["latency_s"][i] == pytest.approx(alone["latency_s"][0], rel=1e-6)
        assert both["energy_j"][i] == pytest.approx(alone["energy_j"][0], rel=1e-6)


def test_parameters_memory_and_tokens_to_wh_do_not_count_rope() -> None:
    """RoPE has no parameters, and the FLOP and byte accounting counts matmuls and attention
    only: sizes, memory and the tokens-to-Wh estimate are the same without it."""
    cols, n = _batch(_with_and_without(PAIRS))
    d = C.derived(cols, n)
    for key, v in d.items():
        v = np.asarray(v)
        assert (v[0::2] == v[1::2]).all(), key
    wl = {"batch_size": 4, "prompt_tokens": 2048, "output_tokens": 128}
    a = A.Architecture(**{k: v for k, v in BASE.items() if k in A.Architecture.field_names()})
    for preset in ("corrected", "paper"):
        x = T.estimate(a, wl, "h100_sxm", preset)
        y = T.estimate(replace(a, rope=False), wl, "h100_sxm", preset)
        for key, v in x.items():
            assert np.all(np.asarray(y[key]) == np.asarray(v)), key


# ---------------------------------------------------------------------- Hugging Face, catalogue
@pytest.mark.parametrize("cfg", [NEMOTRON_H, JAMBA], ids=lambda c: c["model_type"])
def test_the_nope_hybrids_import_without_rope(cfg: dict[str, Any]) -> None:
    imp = import_hf_config(cfg)
    assert imp.arch.rope is False
    assert not any("RoPE" in note for note in imp.notes)
    cols, _ = C.as_columns({**imp.arch.to_dict(), "batch_size": 2})
    ops = {op.name: op for op in forward_ops(cols, "prefill")}
    assert float(np.asarray(ops["attention/rope"].count).ravel()[0]) == 0
    assert float(np.asarray(ops["attention/qkv"].count).ravel()[0]) >= 1


FALCON = {"model_type": "falcon", "hidden_size": 64, "num_attention_heads": 4,
          "num_hidden_layers": 2, "vocab_size": 100}  # fmt: skip


@pytest.mark.parametrize(
    ("cfg", "rope"),
    [
        pytest.param({"model_type": "llama", **TINY, "num_hidden_layers": 2}, True, id="llama"),
        pytest.param({"model_type": "bamba", **TINY, "num_hidden_layers": 4,
                      "attn_layer_indices": [1], "mamba_n_heads": 8, "mamba_d_head": 16,
                      "mamba_n_groups": 1, "mamba_d_state": 16}, True, id="bamba"),
        pytest.param({"model_type": "falcon_h1", **TINY, "num_hidden_layers": 2,
                      "mamba_d_ssm": 64, "mamba_n_heads": 8, "mamba_d_state": 16}, True,
                     id="falcon_h1"),
        pytest.param({**FALCON, "alibi": False}, True, id="falcon"),
        pytest.param({**FALCON, "alibi": True}, True, id="falcon alibi"),
        pytest.param({"model_type": "bloom", "hidden_size": 64, "n_head": 4, "n_layer": 2,
                      "vocab_size": 100}, True, id="bloom"),
        pytest.param({"model_type": "opt", "hidden_size": 64, "ffn_dim": 96,
                      "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100,
                      "max_position_embeddings": 64}, True, id="opt"),
    ],
)  # fmt: skip
def test_the_importer_says_which_types_apply_rope(cfg: dict[str, Any], rope: bool) -> None:
    assert import_hf_config(cfg).arch.rope is rope


@pytest.mark.parametrize(
    ("model", "rope"),
    [("Jamba-v0.1", False), ("BLOOM-7B1", True), ("OPT-6.7B", True), ("Falcon-7B", True),
     ("Bamba-9B", True), ("Qwen3-Next-80B-A3B", True), ("Gemma-3-27B", True),
     ("gpt-oss-20b", True), ("DeepSeek-V3", True), ("Llama-3-8B", True)],
)  # fmt: skip
def test_the_catalogue_says_which_models_apply_rope(model: str, rope: bool) -> None:
    assert lookup_model(model).rope is rope


def test_export_refuses_a_model_without_rope() -> None:
    a = A.Architecture(d_model=64, n_layers=2, n_heads=4, d_ff=96, rope=False)
    with pytest.raises(ConfigError) as exc:
        to_hf_config(a)
    assert str(exc.value) == (
        "rope: must be true (every exported model type applies RoPE) to export a Hugging Face "
        "config, got False"
    )


# ---------------------------------------------------------------------- bad values
def _refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err, err
    prefix = f"dse {argv[0]}: error: "
    assert err.startswith(prefix), err
    return err[len(prefix) :].rstrip("\n")


def test_a_bad_rope_in_a_search_space_is_located(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(
        "space:\n  d_model: 64\n  n_layers: 2\n  n_heads: 4\n  d_ff: 8\n  rope: maybe\n"
    )
    msg = _refused(capsys, ["check", str(space)])
    assert msg.endswith(f"{space}:6: space.rope: must be true or false, got 'maybe'"), msg
    space.write_text(
        "space:\n  d_model: 64\n  n_layers: 2\n  n_heads: 4\n  d_ff: 8\n"
        "  rope: {values: [true, maybe]}\n"
    )
    msg = _refused(capsys, ["check", str(space)])
    assert msg.endswith(f"{space}:6: space.rope.values.1: must be true or false, got 'maybe'")


def test_a_bad_rope_in_a_config_entry_and_in_columns(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "exported.yaml"
    path.write_text(
        "configs:\n  - architecture:\n      d_model: 64\n      n_layers: 2\n      n_heads: 4\n"
        "      d_ff: 8\n      rope: maybe\n"
    )
    msg = _refused(capsys, ["predict", "--config", str(path)])
    assert msg.startswith(f"{path}:7: configs.0.architecture.rope: must be true or false"), msg
    with pytest.raises(ConfigError) as exc:
        C.as_columns({"d_model": 64, "n_layers": 2, "n_heads": 4, "d_ff": 8, "rope": "maybe"})
    assert str(exc.value) == "rope: must be true or false, got 'maybe'"
    assert R.check_architecture({**BASE, "rope": 2}) == ["rope: must be true or false, got 2"]


def test_the_flags_set_rope(capsys: pytest.CaptureFixture[str]) -> None:
    """`--rope false` overrides a catalogue model (`dse arch` shows it; predict prices no RoPE)."""
    assert main(["arch", "--model", "llama-3-8b", "--rope", "false"]) == 0
    assert "rope=false" in capsys.readouterr().out.splitlines()[2]
    assert main(["arch", "--model", "llama-3-8b"]) == 0
    assert "rope" not in capsys.readouterr().out.splitlines()[2]
    assert main(["predict", "--model", "llama-3-8b", "--rope", "false", "--json"]) == 0
    pred = json.loads(capsys.readouterr().out)["prediction"]
    assert pred["breakdown.prefill.attention/rope_s"] == 0
