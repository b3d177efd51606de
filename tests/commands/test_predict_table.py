"""`dse predict`'s table is data first (`prediction_info` -> PredictionInfo), text second
(`render_table`): the content is checked here as data, for one catalogue model."""

from __future__ import annotations

import numpy as np
import pytest

from dse.commands.predict import (
    PredictionInfo,
    Provenance,
    Total,
    _plain,
    _print_table,
    prediction_info,
    render_table,
)
from dse.spec import columns as C
from dse.spec.catalogue import lookup_model

WORKLOAD = {"batch_size": 8, "prompt_tokens": 1024, "output_tokens": 256, "gpu": "h100_sxm"}


def _config() -> dict[str, object]:
    row = {**lookup_model("Llama-3-8B").to_dict(), **WORKLOAD}
    cols, _ = C.as_columns({k: [v] for k, v in row.items() if v is not None})
    return {k: _plain(cols[k][0]) for k in C.CONFIG_FIELDS}


def _prediction() -> dict[str, object]:
    """A prediction with round numbers (not the predictor's: the table's logic is tested)."""
    return {
        "ttft_s": 0.1,
        "ttft_lo_s": 0.08,
        "ttft_hi_s": 0.125,
        "tpot_s": 0.01,
        "tpot_lo_s": 0.008,
        "tpot_hi_s": 0.0125,
        "latency_s": 2.65,
        "latency_lo_s": 2.12,
        "latency_hi_s": 3.3125,
        "prefill_energy_j": 50.0,
        "decode_energy_j": 1000.0,
        "energy_j": 1050.0,
        "energy_lo_j": 840.0,
        "energy_hi_j": 1312.5,
        "energy_per_output_token_j": 0.5126953125,
        "avg_power_w": 396.2264150943396,
        "out_of_range": True,
        "out_of_range_inputs": "level3: batch 8 > 4 (x2)",
        "out_of_range_degree": 0.69,
        "breakdown.prefill.attention/qkv_s": 0.03,
        "breakdown.prefill.ffn/gate_up_s": 0.06,
        "breakdown.prefill.ffn/moe_s": 0.0,
        "breakdown.prefill.system_overhead_s": 0.01,
        "blocks.prefill.attention_s": 0.03,
        "blocks.prefill.ffn_s": 0.06,
        "blocks.prefill.system_overhead_s": 0.01,
        "breakdown.decode.attention/core_s": 2.0,
        "breakdown.decode.system_overhead_s": 0.5,
        "blocks.decode.attention_s": 2.0,
        "blocks.decode.system_overhead_s": 0.5,
        "source": "hymell",
        "artifact_id": "abc123",
        "artifact_gpu": "h100_sxm",
        "roofline_ops": "attention/qk_norm,embedding",
        "borrowed_ops": "",
        "borrowed_artifacts": "",
        "energy_source": "power model",
        "memory_warning": "memory: tight",
    }


def test_prediction_info_of_a_catalogue_model() -> None:
    info = prediction_info(_config(), _prediction())
    assert info == PredictionInfo(
        architecture=(
            "architecture: d_model=4096 n_layers=32 n_heads=32 n_kv_heads=8 head_dim=128 "
            "d_ff=14336 n_experts=1 top_k=1 vocab_size=128256"
        ),
        workload=(
            "workload:     batch_size=8 prompt_tokens=1024 output_tokens=256 "
            "tensor_parallel=1 engine=vllm gpu=h100_sxm"
        ),
        totals=[
            Total("time to first token", 0.1, "s", 0.08, 0.125),
            Total("time per output token", 0.01, "s", 0.008, 0.0125),
            Total("request latency", 2.65, "s", 2.12, 3.3125),
            Total("prefill energy", 50.0, "J"),
            Total("decode energy", 1000.0, "J"),
            Total("energy", 1050.0, "J", 840.0, 1312.5),
            Total("energy per output token", 0.5126953125, "J"),
            Total("average power per GPU", 396.2264150943396, "W"),
        ],
        blocks={
            "prefill": [
                ("ffn", pytest.approx(60.0)),
                ("attention", pytest.approx(30.0)),
                ("system_overhead", pytest.approx(10.0)),
            ],
            "decode": [("attention", 80.0), ("system_overhead", 20.0)],
        },
        breakdown={  # operators without time (the MoE block of a dense model) are left out
            "prefill": [
                ("ffn/gate_up", 0.06, pytest.approx(60.0)),
                ("attention/qkv", 0.03, pytest.approx(30.0)),
                ("system_overhead", 0.01, pytest.approx(10.0)),
            ],
            "decode": [("attention/core", 2.0, 80.0), ("system_overhead", 0.5, 20.0)],
        },
        provenance=Provenance(
            source="hymell",
            artifact_id="abc123",
            fitted_for=None,  # the configuration's own GPU
            out_of_range=True,
            energy_source="power model",
            roofline_ops=("attention/qk_norm", "embedding"),
            borrowed_ops=(),
            borrowed_artifacts="",
            banded=True,
            out_of_range_inputs="level3: batch 8 > 4 (x2)",
        ),
        warnings=[
            "memory: tight",
            "an input lies outside the range the artifact was fitted on; trust the band less",
        ],
    )


def test_a_stand_in_artifact_and_no_band() -> None:
    r = {k: v for k, v in _prediction().items() if "_lo_" not in k and "_hi_" not in k}
    r.update(artifact_gpu="h200_sxm", out_of_range=False)
    info = prediction_info(_config(), r)
    assert info.provenance.fitted_for == "h200_sxm"
    assert not info.provenance.banded and info.provenance.out_of_range_inputs is None
    assert all(t.lo is None for t in info.totals)
    assert info.warnings == ["memory: tight"]
    text = render_table(info)
    assert "(fitted for h200_sxm)" in text and "[" not in text and "band:" not in text


def test_the_table_prints_the_rendered_info(capsys: pytest.CaptureFixture[str]) -> None:
    from dse.predict import predict

    config = _config()
    cols, _ = C.as_columns({k: [v] for k, v in config.items()})
    r = {k: _plain(v[0]) for k, v in predict(cols).items()}
    info = prediction_info(config, r)
    assert [t.value for t in info.totals[:3]] == [r["ttft_s"], r["tpot_s"], r["latency_s"]]
    for phase in ("prefill", "decode"):
        shares = [share for _, _, share in info.breakdown[phase]]
        assert shares == sorted(shares, reverse=True)
        assert np.isclose(sum(shares), 100.0)
    _print_table(config, r)
    assert capsys.readouterr().out == render_table(info) + "\n"
