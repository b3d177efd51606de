"""Mamba hybrids against transformers: Nemotron-H (each layer one of Mamba-2, attention, MLP,
MoE), Jamba (Mamba-1 layers, attention every 8th, MoE every 2nd) and Falcon-H1 (attention and
Mamba-2 side by side in every layer).

Parameter counts equal transformers' meta-device build of the config (tiny configs, the public
default of each config class, and what each importer leaves out); the layers of each kind
equal the ones transformers builds; KV cache and the constant state equal closed forms; bad
configs get a located message (exit 2 from the CLI) and `dse predict --hf-config` prices the
Mamba layers on the roofline, named as such."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dse.cli import main
from dse.errors import ConfigError
from dse.predict.ops import forward_ops
from dse.spec import arch as A
from dse.spec import columns as C
from dse.spec.catalogue import model_card
from dse.spec.hf import import_hf_config

try:  # test-only dependencies
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    transformers.logging.set_verbosity_error()
    HAVE_HF = True
except ImportError:  # pragma: no cover
    HAVE_HF = False
needs_hf = pytest.mark.skipif(not HAVE_HF, reason="torch and transformers are not importable")

REPO = Path(__file__).resolve().parents[2]
TINY = {"hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 100}  # fmt: skip
NEMO = {"model_type": "nemotron_h", **TINY, "head_dim": 16, "mamba_num_heads": 8,
        "mamba_head_dim": 8, "ssm_state_size": 16, "n_groups": 2, "conv_kernel": 4}  # fmt: skip
NEMO_MOE = {**NEMO, "layers_block_type": ["linear_attention", "moe", "full_attention", "mlp"],
            "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
            "moe_shared_expert_intermediate_size": 48}  # fmt: skip
JAMBA = {"model_type": "jamba", **TINY, "num_hidden_layers": 8, "num_experts": 4,
         "num_experts_per_tok": 2}  # fmt: skip
FALCON = {"model_type": "falcon_h1", **TINY, "num_hidden_layers": 2, "mamba_d_ssm": 64,
          "mamba_n_heads": 8, "mamba_d_state": 16}  # fmt: skip
CONFIGS: dict[str, dict[str, Any]] = {
    # Nemotron-H: "M-M*-" is Mamba, MLP, Mamba, attention, MLP (Nemotron-H-8B's letters)
    "nemotron_h dense": {**NEMO, "hybrid_override_pattern": "M-M*-"},
    "nemotron_h moe": NEMO_MOE,
    "nemotron_h moe letters": {**NEMO_MOE, "layers_block_type": None,
                               "hybrid_override_pattern": "MEM*EM-E"},
    "nemotron_h biases": {**NEMO_MOE, "use_bias": True, "mlp_bias": True},
    "jamba": JAMBA,
    "jamba dense": {**JAMBA, "num_hidden_layers": 4, "num_experts": 1, "attn_layer_period": 2,
                    "attn_layer_offset": 1, "mamba_d_state": 8},
    "jamba tied, proj bias": {**JAMBA, "tie_word_embeddings": True, "mamba_proj_bias": True},
    "falcon_h1": FALCON,
    "falcon_h1 norm, tied": {**FALCON, "num_hidden_layers": 3, "mamba_d_ssm": None,
                             "mamba_n_heads": 16, "mamba_rms_norm": True, "mamba_n_groups": 2,
                             "head_dim": 24, "tie_word_embeddings": True},
    "falcon_h1 biases": {**FALCON, "attention_bias": True, "mlp_bias": True,
                         "mamba_proj_bias": True, "projectors_bias": True},
}  # fmt: skip


def hf_model(cfg: dict[str, Any]) -> tuple[int, Any, Any]:
    kw = {k: v for k, v in cfg.items() if k != "model_type"}
    conf = AutoConfig.for_model(cfg["model_type"], **kw)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(conf)
    return sum(p.numel() for p in model.parameters()), conf, model


def default_config(model_type: str) -> dict[str, Any]:
    """The public default of the model type's config class (Jamba's is Jamba-v0.1's)."""
    return AutoConfig.for_model(model_type).to_dict()


# ---------------------------------------------------------------------- parameters
@needs_hf
@pytest.mark.parametrize("name", list(CONFIGS))
def test_params_equal_transformers(name: str) -> None:
    imp = import_hf_config(CONFIGS[name])
    n, _, _ = hf_model(CONFIGS[name])
    assert A.total_params(imp.arch) + imp.unmodelled_params == n
    assert imp.exact == ("bias" not in name)
    assert A.params_per_gpu(imp.arch, 1) == pytest.approx(A.total_params(imp.arch), rel=1e-12)


@needs_hf
@pytest.mark.parametrize("model_type", ["nemotron_h", "jamba", "falcon_h1"])
def test_public_default_config_equals_transformers(model_type: str) -> None:
    cfg = default_config(model_type)
    imp = import_hf_config(cfg)
    n, _, model = hf_model(cfg)
    assert imp.exact and A.total_params(imp.arch) == n
    if bool(imp.arch.is_moe):
        # active = all parameters less the idle (E - k) / E share of the routed experts
        routed = sum(p.numel() for k, p in model.named_parameters() if ".experts." in k)
        a = imp.arch
        assert A.active_params(a) == n - routed * (a.n_experts - a.top_k) // a.n_experts


@needs_hf
def test_jamba_v01_is_the_published_52b_with_12b_active() -> None:
    """Jamba-v0.1 (the catalogue entry, JambaConfig's defaults): 52B total, 12B active."""
    card = model_card("jamba-v0.1")
    n, _, _ = hf_model(dict(card.config))
    assert A.total_params(card.arch) == n == 51_570_323_328
    assert A.active_params(card.arch) == pytest.approx(12e9, rel=0.01)
    assert card.arch.attention_pattern == "linear*4,full,linear*3"
    assert card.arch.ffn_pattern == "dense,ffn"


@needs_hf
@pytest.mark.parametrize("name", ["nemotron_h dense", "jamba dense", "falcon_h1"])
def test_matmul_params_are_the_linear_and_conv_weights(name: str) -> None:
    """2 FLOPs per weight and token: matmul_params_per_token counts exactly the weights of
    transformers' nn.Linear and depthwise nn.Conv1d modules (dense models: every one runs)."""
    _, _, model = hf_model(CONFIGS[name])
    weights = {
        id(m.weight): m.weight.numel()
        for m in model.modules()
        if isinstance(m, torch.nn.Linear | torch.nn.Conv1d)
    }
    a = import_hf_config(CONFIGS[name]).arch
    assert A.matmul_params_per_token(a) == sum(weights.values())


def _built_layers(model_type: str, conf: Any) -> tuple[int, int, int, int]:
    """(attention, Mamba, MoE, dense-FFN) layers transformers builds from a config."""
    if model_type == "nemotron_h":
        t = list(conf.layers_block_type)
        return (t.count("full_attention"), t.count("linear_attention"), t.count("moe"),
                t.count("mlp"))  # fmt: skip
    if model_type == "jamba":
        t, e = list(conf.layers_block_type), list(conf.layers_num_experts)
        moe = sum(x > 1 for x in e)
        return t.count("attention"), t.count("mamba"), moe, len(e) - moe
    n = conf.num_hidden_layers  # falcon_h1: attention, Mamba-2 and an MLP in every layer
    return n, n, 0, n


@needs_hf
@pytest.mark.parametrize(
    "name", ["nemotron_h dense", "nemotron_h moe letters", "jamba", "jamba dense", "falcon_h1"]
)
def test_layers_of_each_kind_are_the_ones_transformers_builds(name: str) -> None:
    cfg = CONFIGS[name]
    _, conf, _ = hf_model(cfg)
    a = import_hf_config(cfg).arch
    attn, mamba, moe, dense = _built_layers(cfg["model_type"], conf)
    assert tuple(int(x) for x in A.layer_kinds(a)) == (attn, 0, mamba)
    assert tuple(int(x) for x in A.ffn_layers(a)) == (dense, moe)
    assert a.n_layers == conf.num_hidden_layers


# ---------------------------------------------------------------------- KV cache and state
def test_nemotron_state_and_kv_closed_forms() -> None:
    """Nemotron-H-8B's shapes: 4 attention and 24 Mamba-2 layers of 128 heads x 64, 8 groups x
    state 128, conv 4; the MLP layers hold nothing."""
    a = A.Architecture(d_model=4096, n_layers=52, n_heads=32, n_kv_heads=8, head_dim=128,
                       d_ff=21504, gated_mlp=False, norms_per_layer=1,
                       attention_pattern="linear,none," * 6 + "full",
                       ffn_pattern="none,ffn," * 6 + "none",
                       linear_kind="mamba2", linear_n_heads=128, linear_head_dim=64,
                       linear_n_groups=8, linear_state_dim=128)  # fmt: skip
    assert tuple(int(x) for x in A.layer_kinds(a)) == (4, 0, 24)
    assert int(A.mixer_layers(a)) == 28 and tuple(int(x) for x in A.ffn_layers(a)) == (24, 0)
    b = 2  # bfloat16
    state = 24 * (128 * 128 * 64 + 3 * (2 * 8 * 128 + 128 * 64)) * b
    assert A.state_bytes(a) == state
    for tokens in (100, 32768):
        assert A.kv_cache_bytes_per_gpu(a, tokens) == 4 * 2 * 8 * 128 * b * tokens + state
    # tp = 8: heads and groups split, one KV head per GPU
    assert A.state_bytes(a, 8) == 24 * (16 * 128 * 64 + 3 * (2 * 1 * 128 + 16 * 64)) * b
    assert A.kv_cache_bytes_per_gpu(a, 100, 8) == 4 * 2 * 1 * 128 * b * 100 + A.state_bytes(a, 8)


def test_jamba_mamba1_state_closed_form() -> None:
    """Mamba-1: d_inner channels, each a state of d_state, and the conv's last 3 inputs of x."""
    a = model_card("jamba-v0.1").arch
    inner, b = 8192, 2
    state = 28 * (inner * 16 + 3 * inner) * b
    assert A.state_bytes(a) == state
    assert A.kv_cache_bytes_per_gpu(a, 4096) == 4 * 2 * 8 * 128 * b * 4096 + state
    assert A.state_bytes(a, 4) == state / 4
    # no chunked-prefill term: Mamba-1's selective scan costs the same per token in prefill
    assert A.linear_flops_per_token(a, prefill=True) == A.linear_flops_per_token(a)
    assert A.linear_flops_per_token(a) == A.LINEAR_STATE_FLOPS * inner * 16


def test_falcon_h1_parallel_layers_hold_kv_and_state() -> None:
    a = import_hf_config(FALCON).arch
    assert a.attention_pattern == "full+linear"
    assert tuple(int(x) for x in A.layer_kinds(a)) == (2, 0, 2)
    assert int(A.mixer_layers(a)) == 2
    b, hd = 2, 16
    state = 2 * (8 * 16 * 8 + 3 * (2 * 1 * 16 + 64)) * b
    assert A.state_bytes(a) == state
    assert A.kv_cache_bytes_per_gpu(a, 50) == 2 * 2 * 2 * hd * b * 50 + state
    # decode: every layer's attention sees the context, its Mamba-2 costs one state step
    c = 1000
    want = 2 * 4 * 4 * hd * c + 2 * A.LINEAR_STATE_FLOPS * 8 * 16 * 8
    assert A.attention_flops_per_token(a, c) == want
    assert A.prefill_flops(a, 10) == pytest.approx(
        sum(A.forward_flops_per_token(a, i) for i in range(1, 11))
        + 10 * 2 * A.LINEAR_CHUNK_TOKENS * 8 * (16 + 8),
        rel=1e-12,
    )


# ---------------------------------------------------------------------- pricing operators
def _ops(cfg: dict[str, Any], phase: str, tp: int = 1) -> dict[str, Any]:
    a = import_hf_config(cfg).arch
    cols, _ = C.as_columns({**a.to_dict(), "tensor_parallel": tp, "batch_size": 2})
    return {op.name: op for op in forward_ops(cols, phase)}


def test_nemotron_operators_run_on_their_layers() -> None:
    ops = _ops({**NEMO, "hybrid_override_pattern": "M-M*-"}, "decode", tp=2)
    count = {k: float(v.count[0]) for k, v in ops.items()}
    assert count["linear/scan"] == count["linear/in_proj"] == 2
    assert count["attention/qkv"] == count["attention/core"] == 1
    assert count["ffn/gate_up"] == count["residual/ffn"] == 2  # the two MLP layers
    assert count["residual/attention"] == 3  # the layers with a mixer
    assert count["allreduce"] == 5  # one per block (tp = 2)
    assert count["ffn/moe"] == 0


def test_jamba_operators_price_mamba1_projections_as_gemms() -> None:
    ops = _ops(JAMBA, "prefill")
    count = {k: float(v.count[0]) for k, v in ops.items()}
    assert count["linear/x_proj"] == count["linear/dt_proj"] == count["linear/scan"] == 7
    assert count["ffn/moe"] == 4 and count["ffn/gate_up"] == 4
    assert ops["linear/x_proj"].kind == ops["linear/dt_proj"].kind == "gemm"
    assert ops["linear/x_proj"].dims["n"][0] == math.ceil(64 / 16) + 2 * 16
    assert ops["linear/in_proj"].dims["n"][0] == 2 * 128  # x and z
    # the plain models' operator lists do not change
    plain = _ops({"model_type": "llama", **TINY, "num_hidden_layers": 2}, "prefill")
    assert "linear/x_proj" not in plain and "linear/scan" not in plain


# ---------------------------------------------------------------------- bad configs
@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        ({**NEMO, "hybrid_override_pattern": "M-X*"},
         "config: hybrid_override_pattern: must be a text of the letters M, *, -, E (Mamba-2, "
         "attention, MLP, MoE), got 'M-X*'"),
        ({**NEMO, "layers_block_type": ["mamba", "mlp"]},
         "config: layers_block_type: must be a list of linear_attention, full_attention, mlp, "
         "moe, got ['mamba', 'mlp']"),
        ({**NEMO_MOE, "moe_latent_size": 16},
         "config: moe_latent_size: must be null (experts on a latent projection of the hidden "
         "state are not representable), got 16"),
        ({**NEMO, "use_conv_bias": False},
         "config: use_conv_bias: must be true (Mamba-2's conv has a bias), got False"),
        ({**JAMBA, "attn_layer_offset": 8},
         "config: attn_layer_offset: must be < its period 8 (transformers refuses it), got 8"),
        ({**JAMBA, "mamba_dt_rank": 7},
         "config: mamba_dt_rank: must be 'auto' or ceil(hidden_size / 16) = 4 (the rank the "
         "accounting uses), got 7"),
        ({**FALCON, "mamba_d_head": 5},
         "config: mamba_n_heads x mamba_d_head: must equal the Mamba width 64 (mamba_d_ssm, or "
         "mamba_expand x hidden_size), got 8 x 5"),
        ({**FALCON, "num_hidden_layers": 0},
         "config: num_hidden_layers: must be an integer >= 1, got 0"),
    ],
)  # fmt: skip
def test_bad_configs_are_refused_with_the_key(cfg: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        import_hf_config(cfg)
    assert str(exc.value) == message


def test_bad_config_file_exits_2_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**JAMBA, "attn_layer_offset": 9}))
    assert main(["predict", "--hf-config", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    assert err.strip() == (
        f"dse predict: error: {path}: attn_layer_offset: must be < its period 8 (transformers "
        "refuses it), got 9"
    )


# ---------------------------------------------------------------------- the command line
@pytest.mark.parametrize(
    "cfg", [CONFIGS["nemotron_h moe"], JAMBA, FALCON], ids=lambda c: c["model_type"]
)
def test_predict_hf_config_prices_mamba_on_the_roofline(
    cfg: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert main(["predict", "--hf-config", str(path), "--json"]) == 0
    pred = json.loads(capsys.readouterr().out)["prediction"]
    assert pred["roofline_ops"] == "linear/scan"
    assert np.isfinite(pred["latency_s"]) and pred["latency_s"] > 0
    assert pred["breakdown.decode.linear/scan_s"] > 0
    assert main(["predict", "--hf-config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "priced by the roofline (no fitted model): linear/scan" in out


def test_predict_hf_config_in_a_subprocess(tmp_path: Path) -> None:
    """As a user runs it: `python -m dse predict --hf-config config.json`."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**NEMO, "hybrid_override_pattern": "M-M*-"}))
    run = subprocess.run(
        [sys.executable, "-m", "dse", "predict", "--hf-config", str(path)],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "priced by the roofline (no fitted model): linear/scan" in run.stdout
    assert "request latency" in run.stdout


def test_arch_names_the_layers_of_each_kind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**NEMO_MOE, "layers_block_type": None,
                                "hybrid_override_pattern": "MEM*EM-E"}))  # fmt: skip
    assert main(["arch", "--hf-config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "attention: 1 full + 3 linear (mamba2: 8 heads x 8, 2 groups x state 16, conv 4) + " \
           "4 without a mixer layers" in out  # fmt: skip
    assert "FFN: 1 dense (d_ff) + 3 MoE + 4 without an FFN layers" in out
    assert main(["arch", "--model", "jamba-v0.1", "--json"]) == 0
    at = json.loads(capsys.readouterr().out)["attention"]
    assert at["ffn_layers"] == {"dense": 16, "moe": 16, "none": 0}
    assert at["linear"]["kind"] == "mamba1" and at["linear"]["n_groups"] is None


def test_export_refuses_a_hybrid_pattern() -> None:
    from dse.spec.hf import to_hf_config

    a = A.Architecture(d_model=64, n_layers=2, n_heads=4, d_ff=96, ffn_pattern="ffn,none")
    with pytest.raises(ConfigError, match="ffn_pattern: must be 'ffn' \\(exported model types"):
        to_hf_config(a)


def test_the_hybrids_example_sweeps_to_a_front_of_hybrids(tmp_path: Path) -> None:
    """examples/mamba_hybrids_8b.yaml: YAML lists of both patterns, every linear kind."""
    from dse.sweep import SweepOptions, run_sweep

    space = REPO / "examples" / "mamba_hybrids_8b.yaml"
    out = tmp_path / "r"
    assert not run_sweep(SweepOptions(space_file=space, out=out, quiet=True)).interrupted
    counts = json.loads((out / "summary.json").read_text())["counts"]
    assert counts["trials"] == 64 and counts["distinct_configurations"] == 52
    import pandas as pd

    front = pd.read_csv(out / "front.csv")
    assert len(front) and (front["attention_pattern"] != "full").all()
    assert set(front["ffn_pattern"]) <= {"ffn", "none,ffn"}
