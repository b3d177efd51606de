"""nvfp4 weights in predictions (issue 35): on B200 their GEMMs are priced by the fitted
`gemm.vllm.nvfp4` table (x and W in 4.5 bits, the FP4 tensor cores), faster than bf16 where the
GEMMs weigh; the totals stay physical on every GPU x dtype; a GPU without FP4 tensor cores
refuses them (the predictor, `dse predict`, a sweep) with the reason instead of a guess."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dse.cli import main
from dse.errors import ConfigError
from dse.predict import predict
from dse.predict.artifacts import resolve_artifact
from dse.predict.pricing import gemm_peak
from dse.predict.request import base_costs
from dse.resources import surrogates_dir
from dse.spec import arch as A
from dse.spec import columns as C
from dse.spec.catalogue import lookup_model
from dse.spec.hardware import fp4_gpu_names, get_gpu

B200 = "b200_sxm"
pytestmark = pytest.mark.skipif(
    not (surrogates_dir() / B200 / "manifest.json").is_file(), reason="b200_sxm artifact absent"
)
GEMM_OPS = ("attention/qkv", "attention/out", "ffn/gate_up", "ffn/down", "lm_head")
REFUSAL = (
    "weight_dtype: nvfp4 needs FP4 tensor cores, which h100_sxm lacks (Blackwell and later: "
    f"{', '.join(fp4_gpu_names())}), got 'nvfp4'"
)


def _rows(
    gpu: str,
    dtypes: list[str],
    batch: int = 64,
    tp: int = 1,
    prompt: int = 2048,
    output: int = 128,
    model: str = "Llama-3-8B",
) -> dict[str, list]:
    arch = lookup_model(model).to_dict()
    n = len(dtypes)
    rows = {k: [v] * n for k, v in arch.items()}
    rows.update(
        gpu=[gpu] * n,
        weight_dtype=dtypes,
        batch_size=[batch] * n,
        prompt_tokens=[prompt] * n,
        output_tokens=[output] * n,
        tensor_parallel=[tp] * n,
    )
    return rows


def test_b200_nvfp4_gemms_are_priced_by_the_nvfp4_table() -> None:
    """The pricer's provenance (`PhaseCost.sources`, per operator the model of each row): the
    nvfp4 row's GEMMs by gemm.vllm.nvfp4, the bf16 row's by gemm.vllm.bfloat16, in both phases;
    no operator of either falls back to the roofline."""
    cols, n = C.as_columns(_rows(B200, ["nvfp4", "bfloat16"]))
    artifact, _ = resolve_artifact(B200, "auto")
    base = base_costs(cols, n, get_gpu(B200), artifact)
    for phase in (base.prefill, base.decode):
        for op in GEMM_OPS:
            models = phase.sources[op].split("+")
            rows = phase.source_rows.get(op, np.zeros(n, dtype=np.int8))
            assert models[rows[0]] == "gemm.vllm.nvfp4", (op, phase.sources[op])
            assert models[rows[1]] == "gemm.vllm.bfloat16", (op, phase.sources[op])
    p = predict(cols)
    assert set(p["roofline_ops"]) == {""}  # every GEMM of both rows is a fitted B200 table
    assert set(p["borrowed_ops"]) == {""}


@pytest.mark.parametrize("batch", [32, 128])
def test_b200_nvfp4_is_faster_than_bf16_where_the_gemms_weigh(batch: int) -> None:
    """Prefill of a large batch is compute-bound: nvfp4's GEMMs run on the FP4 tensor cores
    (~4x bf16's peak on B200); decode reads 0.5625 / 2 of bf16's weight bytes. Measured tables,
    so not the peak ratio: prefill GEMMs ~1.8x faster, decode GEMMs ~1.4x (margins below)."""
    p = predict(_rows(B200, ["bfloat16", "nvfp4"], batch=batch))
    bf16, fp4 = 0, 1

    def gemm_s(phase: str) -> np.ndarray:
        return sum(np.asarray(p[f"breakdown.{phase}.{op}_s"]) for op in GEMM_OPS)

    for phase in ("prefill", "decode"):
        g = gemm_s(phase)
        assert g[fp4] < 0.85 * g[bf16], (phase, g)
    assert p["ttft_s"][fp4] < 0.85 * p["ttft_s"][bf16]
    assert p["tpot_s"][fp4] < p["tpot_s"][bf16]
    assert p["energy_j"][fp4] < p["energy_j"][bf16]


GRID = [
    (gpu, dt)
    for gpu in ("h100_sxm", "h200_sxm", B200)
    for dt in ("bfloat16", "fp8", "nvfp4")
    if dt != "nvfp4" or gpu == B200
]


@pytest.mark.parametrize(("gpu", "dtype"), GRID)
def test_predictions_stay_physical_over_gpu_and_weight_dtype(gpu: str, dtype: str) -> None:
    """Over batch x tensor parallelism: power per GPU between idle and board power in each
    phase, the phases summing to the whole; TPOT no faster than streaming this GPU's weight
    shard once (0.5625 bytes per nvfp4 weight) and TTFT no faster than the prompt's linear-layer
    FLOPs at the dtype's tensor-core peak (FP4's for nvfp4 on B200)."""
    spec = get_gpu(gpu)
    batches, tps = (1, 32), (1, 2)
    rows: dict[str, list] = {}
    for b in batches:
        for tp in tps:
            for k, v in _rows(gpu, [dtype], batch=b, tp=tp, prompt=1024).items():
                rows.setdefault(k, []).extend(v)
    cols, _ = C.as_columns(rows)
    p = predict(cols)
    tp = cols["tensor_parallel"].astype(float)
    decode_s = p["latency_s"] - p["ttft_s"]
    for e, t in ((p["prefill_energy_j"], p["ttft_s"]), (p["decode_energy_j"], decode_s)):
        w = np.asarray(e) / (np.asarray(t) * tp)
        assert np.all(w >= spec.idle_power_w * (1 - 1e-9)), (gpu, dtype, w)
        assert np.all(w <= spec.board_power_w * (1 + 1e-9)), (gpu, dtype, w)
    np.testing.assert_allclose(p["prefill_energy_j"] + p["decode_energy_j"], p["energy_j"])
    a = C.architecture(cols)
    weights = A.params_per_gpu(a, tp) * A.dtype_bytes(a.weight_dtype)
    assert np.all(p["tpot_s"] >= weights / spec.hbm_bw_bytes_per_s), (gpu, dtype)
    pb = A.param_breakdown(a)
    linear = np.asarray(pb["active"]) - np.asarray(pb["embedding"])
    tokens = cols["batch_size"] * cols["prompt_tokens"]
    gemm_dtype = "nvfp4" if dtype == "nvfp4" else ("fp8" if dtype == "fp8" else "bfloat16")
    floor = 2 * linear * tokens / tp / gemm_peak(gemm_dtype, spec)
    assert np.all(p["ttft_s"] >= floor), (gpu, dtype, p["ttft_s"], floor)


def test_the_fp4_roofline_peak_prices_nvfp4_gemms_on_b200_only() -> None:
    b200, h100 = get_gpu(B200), get_gpu("h100_sxm")
    assert gemm_peak("nvfp4", b200) == b200.peak_fp4_flops_per_s
    assert gemm_peak("fp8", b200) == b200.peak_fp8_flops_per_s
    assert gemm_peak("bfloat16", b200) == b200.peak_bf16_flops_per_s
    np.testing.assert_array_equal(
        gemm_peak(np.array(["nvfp4", "bfloat16", "fp8"]), b200),
        [b200.peak_fp4_flops_per_s, b200.peak_bf16_flops_per_s, b200.peak_fp8_flops_per_s],
    )
    assert gemm_peak("nvfp4", h100) == h100.peak_fp8_flops_per_s  # never reached: invalid there


def test_the_predictor_refuses_nvfp4_on_a_gpu_without_fp4_tensor_cores() -> None:
    with pytest.raises(ConfigError) as e:
        predict(_rows("h100_sxm", ["bfloat16", "nvfp4"]))
    assert str(e.value) == REFUSAL
    p = predict(_rows("h100_sxm", ["bfloat16", "fp8"]))  # the rest of H100 is unchanged
    assert np.all(np.isfinite(p["latency_s"]))


SPACE = """\
name: nvfp4-gpus
hardware: {values: [h100_sxm, b200_sxm]}
workload: {batch_size: 16, prompt_tokens: 512, output_tokens: 64, tensor_parallel: 1}
space:
  d_model: 4096
  n_layers: 32
  n_heads: 32
  n_kv_heads: 8
  d_ff: 14336
  vocab_size: 128256
  weight_dtype: {values: [bfloat16, fp8, nvfp4]}
constraints:
  fits_memory: true
objectives:
  latency: {metric: tpot}
  energy: {source: hymell, metric: per_output_token}
study: {sampler: exhaustive, seed: 0}
"""


def test_a_sweep_over_gpu_and_weight_dtype_counts_h100_nvfp4_infeasible(tmp_path: Path) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(SPACE)
    out = tmp_path / "r"
    assert main(["sweep", str(space), "--out", str(out), "-q", "--no-report"]) == 0
    t = pd.read_parquet(out / "trials.parquet")
    assert len(t) == 6
    bad = (t["gpu"] == "h100_sxm") & (t["weight_dtype"] == "nvfp4")
    assert bad.sum() == 1
    assert t.loc[bad, "invalid_reason"].tolist() == [REFUSAL]
    assert not t.loc[bad, "feasible"].any()
    assert t.loc[~bad, "feasible"].all()
    assert (t.loc[~bad, "invalid_reason"].fillna("") == "").all()
    assert np.isfinite(t.loc[~bad, "obj.latency_tpot"]).all()
    b200 = t[t["gpu"] == B200].set_index("weight_dtype")
    # the same model on B200: nvfp4 ahead of bf16 in both objectives
    for obj in ("obj.latency_tpot", "obj.energy_hymell_per_output_token"):
        assert b200.loc["nvfp4", obj] < b200.loc["bfloat16", obj], obj


def test_b200_nvfp4_experts_take_the_nvfp4_moe_table_and_each_row_its_own() -> None:
    """A MoE block on nvfp4 weights is priced by B200's `moe.vllm.nvfp4` model (vLLM's FP4
    MoE kernel), faster than the bf16 table for a decode step of a large batch; one call mixing
    bf16, int4 (the 4-bit MXFP4 table) and nvfp4 rows gives each row what it gets alone."""
    rows = _rows(B200, ["bfloat16", "int4", "nvfp4"], batch=128, prompt=1024, output=64,
                 model="Qwen3-30B-A3B")  # fmt: skip
    together = predict(rows)
    key = "breakdown.decode.ffn/moe_s"
    for i in range(3):
        alone = predict({k: [v[i]] for k, v in rows.items()})
        for k in ("latency_s", "energy_j", key):
            # rel 1e-6: float32 MLPs may differ in the last bits across batch layouts on another
            # CPU's BLAS; a row priced by the wrong table is off by 2x or more
            assert together[k][i] == pytest.approx(alone[k][0], rel=1e-6), (i, k)
    bf16, _, fp4 = together[key]
    assert fp4 < bf16, (fp4, bf16)
    assert np.isfinite(together["energy_j"]).all()
    art, _ = resolve_artifact(B200, "auto")
    assert "moe.vllm.nvfp4" in art.manifest["models"]
