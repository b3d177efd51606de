"""B200 SXM's shipped artifact (issue 35): a B200 prediction is priced by it, names it, and says
which of its parts are fitted on another GPU's rows (layer ops, Levels 2-3 on H100's; power on
H200's) and which operators the roofline still prices; its power stays physical."""

from __future__ import annotations

import numpy as np
import pytest

from dse.models.artifact import Artifact
from dse.predict import predict
from dse.predict.artifacts import fitted_elsewhere
from dse.resources import surrogates_dir
from dse.spec.catalogue import lookup_model
from dse.spec.hardware import get_gpu

GPU = "b200_sxm"
FOLDER = surrogates_dir() / GPU
pytestmark = pytest.mark.skipif(
    not (FOLDER / "manifest.json").is_file(), reason="shipped b200_sxm artifact absent"
)
# what a user searching B200 with vLLM needs (docs/accuracy.md "B200 SXM and SGLang")
MODELS = (
    "power",
    "gemm.vllm.bfloat16",
    "gemm.vllm.nvfp4",
    "gemm.vllm.fp8_block",
    "moe.vllm.bfloat16",
    "allreduce.nccl.nccl",
    "layer_op.vidur",
    "level2.ffn_dense",
    "level3.e2e",
    "context_attention.vllm",
    "generation_attention.vllm",
)


@pytest.fixture(scope="module")
def art() -> Artifact:
    return Artifact.load(FOLDER)


def test_the_artifact_holds_the_vllm_models(art: Artifact) -> None:
    assert art.gpu == GPU and art.level1_gpu == GPU
    missing = [m for m in MODELS if not art.has(m)]
    assert not missing, missing


def _configs(model: str, **workload: object) -> dict[str, np.ndarray]:
    arch = lookup_model(model).to_dict()
    batches = np.array([1, 8, 64])
    n = len(batches)
    cols = {k: np.array([v] * n) for k, v in arch.items()}
    cols.update(
        batch_size=batches,
        prompt_tokens=np.array([512, 1024, 4096]),
        output_tokens=np.array([64, 256, 128]),
        tensor_parallel=np.ones(n, dtype=int),
        engine=np.array(["vllm"] * n),
        gpu=np.array([GPU] * n),
    )
    for k, v in workload.items():
        cols[k] = np.array([v] * n)
    return cols


@pytest.mark.parametrize("weight_dtype", ["bfloat16", "fp8"])
def test_a_b200_prediction_names_its_artifact_not_the_roofline(
    art: Artifact, weight_dtype: str
) -> None:
    p = predict(_configs("Llama-3-8B", weight_dtype=weight_dtype))
    assert set(p["artifact_id"]) == {art.artifact_id}
    assert set(p["artifact_gpu"]) == {GPU}
    assert set(p["source"]) == {"hymell"}
    for ops in p["roofline_ops"]:  # GEMMs and attention kernels are B200's fitted models
        priced = set(str(ops).split(",")) - {""}
        assert not priced & {"attention/qkv", "attention/out", "ffn/gate_up", "ffn/down"}, ops
        assert "attention/core" not in priced, ops
    assert all("transferred" in s for s in p["energy_source"])  # no measured B200 power


def test_the_stand_ins_are_named(art: Artifact) -> None:
    lent = fitted_elsewhere(art)
    assert "power" in lent.get("h200_sxm", ())
    if art.has("layer_op.vidur"):
        assert "layer_op.vidur" in lent["h100_sxm"]
    assert GPU not in lent


def test_b200_power_is_physical() -> None:
    spec = get_gpu(GPU)
    for model in ("Llama-3-8B", "Qwen3-30B-A3B"):
        p = predict(_configs(model))
        tp = 1.0
        decode_s = p["latency_s"] - p["ttft_s"]
        for e, t in ((p["prefill_energy_j"], p["ttft_s"]), (p["decode_energy_j"], decode_s)):
            w = np.asarray(e) / (np.asarray(t) * tp)
            assert np.all(w >= spec.idle_power_w * (1 - 1e-9)), (model, w)
            assert np.all(w <= spec.board_power_w * (1 + 1e-9)), (model, w)
        assert np.allclose(p["prefill_energy_j"] + p["decode_energy_j"], p["energy_j"])


def test_fitted_elsewhere_of_an_artifact_on_its_own_rows() -> None:
    h200 = Artifact.load(surrogates_dir() / "h200_sxm")
    lent = fitted_elsewhere(h200)
    assert "h200_sxm" not in lent  # its own power rows are no stand-in
    assert "layer_op.vidur" in lent["h100_sxm"] and "level3.e2e" in lent["h100_sxm"]
    assert fitted_elsewhere(None) == {}


def test_a_weight_dtype_without_a_gemm_table_falls_back_to_the_roofline() -> None:
    """fp8 weights on an artifact fitted with bf16 GEMMs only (B200's first artifact, before its
    fp8 tables): the GEMMs are priced by the roofline and flagged; it used to raise ArtifactError
    from the GEMM adapter and fail the whole prediction."""
    art = Artifact.load(FOLDER)
    for name in [n for n in art.names("gemm") if not n.endswith(".bfloat16")]:
        del art.models[name]
        art.manifest["models"] = {k: v for k, v in art.manifest["models"].items() if k != name}
    p = predict(_configs("Llama-3-8B", weight_dtype="fp8"), artifacts={GPU: art})
    for ops in p["roofline_ops"]:
        assert {"ffn/gate_up", "ffn/down", "attention/qkv"} <= set(str(ops).split(",")), ops
    assert np.all(np.isfinite(p["energy_j"])) and np.all(p["latency_s"] > 0)
    bf16 = predict(_configs("Llama-3-8B"), artifacts={GPU: art})  # its own table still prices
    assert not any("ffn/gate_up" in str(ops) for ops in bf16["roofline_ops"])


# B200 vLLM GEMM latency, (n, k) held out as `dse fit`'s CV scores it (manifest, 300 boosting
# rounds of the latency trees): issue 35's <= 4% is not met. 600 / 1200 rounds were measured and
# not shipped (bf16 4.16 / 4.13%, nvfp4 4.12%, fp8_block 4.71%; docs/dev/accuracy-journal.md
# "B200 vLLM GEMM: latency boosting rounds"): a refit of these tables must beat these.
B200_VLLM_GEMM_CV = {"bfloat16": 4.237, "fp8_block": 4.618, "nvfp4": 4.135, "fp8": 9.048}


def test_b200_vllm_gemm_cv_is_by_weight_shape_on_every_row(art: Artifact) -> None:
    models = art.manifest["models"]
    for dtype, mape in B200_VLLM_GEMM_CV.items():
        name = f"gemm.vllm.{dtype}"
        cv = models[name]["cv"]
        assert cv["scheme"] == "GroupKFold(5) by (n, k) weight shape", name
        assert (cv["rows"], cv["groups"]) == (28786, 389), name  # every row, every shape
        assert cv["latency_mape_pct"] == pytest.approx(mape, abs=5e-4), name
        # the shipped latency trees take `GemmModel`'s default rounds (none set per table)
        assert "tree_iter" not in models[name].get("fit_options", {}), name
