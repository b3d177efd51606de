"""B200 SXM's TensorRT-LLM 1.3.0rc20 kernel models (issue 35): the artifact holds a GEMM model per
dtype, prefill and decode attention and the MoE kernel sums of bf16, fp8, fp8_block and nvfp4 (and
MXFP4 x MXFP8's fused MoE model, command BT3), fitted
on B200's own TRT-LLM tables with `dse fit`'s CV in the manifest; `dse validate` scores B200's
TRT-LLM kernel rows with them (before: GEMM and attention rows with vLLM's models, MoE rows unpredicted). `dse predict`
keeps pricing `engine: trtllm` with vLLM's tables, as on H100: routing TRT-LLM to its own tables
with Levels 2-3 refitted reads argonne's H100 TRT-LLM rows worse held out over H100's Level 1
(3.68 -> 3.98%; over B200's, a transfer, 4.16 -> 3.45%), experiments/trtllm_own_tables.py;
docs/dev/accuracy-journal.md "B200 TensorRT-LLM kernel models"."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dse.fitting.attention import predict_attention_rows
from dse.fitting.gemm import predict_gemm_rows
from dse.fitting.moe import predict_moe_rows
from dse.models.artifact import Artifact
from dse.predict import predict
from dse.resources import surrogates_dir
from dse.spec.catalogue import lookup_model

GPU = "b200_sxm"
FOLDER = surrogates_dir() / GPU
pytestmark = pytest.mark.skipif(
    not (FOLDER / "manifest.json").is_file(), reason="shipped b200_sxm artifact absent"
)
VERSION = "1.3.0rc20"
# `dse fit`'s held-out latency MAPE (%) per model, as shipped (manifest `cv.latency_mape_pct`):
# GEMM by (n, k) weight shape, attention by head configuration, MoE by layout
_NK = "GroupKFold(5) by (n, k) weight shape"
_HEADS = (
    "3 seeded group folds by head configuration ('num_heads', 'num_kv_heads', 'head_dim') "
    "(CV fits on <= 8000 rows)"
)
_LAYOUT = (
    "3 seeded group folds by layer shape ('hidden_size', 'inter_size', 'topk', 'num_experts') "
    "(CV fits on <= 8000 rows)"
)
TRTLLM_CV: dict[str, tuple[str, float]] = {
    "gemm.trtllm.bfloat16": (_NK, 4.388),
    "gemm.trtllm.fp8": (_NK, 2.916),
    "gemm.trtllm.fp8_block": (_NK, 2.733),
    "gemm.trtllm.nvfp4": (_NK, 2.357),
    "context_attention.trtllm": (_HEADS, 3.381),
    "generation_attention.trtllm": (_HEADS, 3.865),
    "moe.trtllm.bfloat16": (_LAYOUT, 14.742),
    "moe.trtllm.fp8": (_LAYOUT, 16.259),
    "moe.trtllm.fp8_block": (_LAYOUT, 4.959),
    "moe.trtllm.nvfp4": (_LAYOUT, 28.658),
    "moe.trtllm.w4a8_mxfp4_mxfp8": (_LAYOUT, 13.766),
}


@pytest.fixture(scope="module")
def art() -> Artifact:
    return Artifact.load(FOLDER)


def test_the_artifact_holds_trtllm_models_fitted_on_b200s_own_tables(art: Artifact) -> None:
    models = art.manifest["models"]
    for name, (scheme, mape) in TRTLLM_CV.items():
        entry = models.get(name)
        assert entry is not None, f"{name} missing from {FOLDER}"
        assert entry["engine"] == "trtllm", name
        assert entry.get("engine_versions", [VERSION]) == [VERSION], name  # MoE's: data_files
        assert entry["cv"]["scheme"] == scheme, name
        assert entry["cv"]["latency_mape_pct"] == pytest.approx(mape, abs=5e-4), name
        assert "rows_from_gpus" not in entry and "fitted_on_gpus" not in entry, name  # its own
    files = {f["path"] for f in art.manifest["data_files"]}
    for table in ("gemm", "attention", "moe"):
        assert any(f"b200_sxm/{table}/trtllm/{VERSION}/" in f for f in files), table


def _rows(kind: str, dtype: str, count: int, **cols: object) -> pd.DataFrame:
    """`count` B200 TensorRT-LLM rows of `kind` as `dse.data` reads them (no latency: priced)."""
    base = {"gpu": GPU, "engine": "trtllm", "engine_version": VERSION, "kind": kind, "dtype": dtype}
    return pd.DataFrame(
        {k: v if isinstance(v, np.ndarray) else [v] * count for k, v in {**base, **cols}.items()}
    )


def test_dse_validate_scores_b200_trtllm_gemm_rows_with_trtllm_models(art: Artifact) -> None:
    m = np.array([1, 64, 512, 4096])
    for dtype in [n.split(".")[-1] for n in TRTLLM_CV if n.startswith("gemm.")]:
        rows = _rows("gemm", dtype, len(m), m=m, n=4096, k=4096)
        got = predict_gemm_rows(art, "gemm", rows)
        lat = got["latency_pred_s"].to_numpy(float)
        assert np.all(np.isfinite(lat) & (lat > 0)), dtype
        assert lat[-1] > 2 * lat[0], (dtype, lat)  # 4096 tokens against 1: compute-bound
        assert set(got["band_model"]) == {f"gemm.trtllm.{dtype}"}, (dtype, set(got["band_model"]))


def test_dse_validate_scores_b200_trtllm_attention_rows_with_trtllm_models(
    art: Artifact,
) -> None:
    heads = dict(num_heads=32, num_kv_heads=8, head_dim=128, kv_cache_dtype="bfloat16")
    for kind, cols in (
        ("context_attention", dict(batch_size=4, isl=2048, kv_len=0, **heads)),
        ("generation_attention", dict(batch_size=16, isl=1, kv_len=2048, **heads)),
    ):
        rows = _rows(kind, "bfloat16", 1, window_size=0, **cols)
        got = predict_attention_rows(art, kind, rows)
        assert np.all(got["latency_pred_s"].to_numpy(float) > 0), kind
        assert set(got["band_model"]) == {f"{kind}.trtllm"}, kind


def test_dse_validate_scores_b200_trtllm_moe_rows(art: Artifact) -> None:
    tokens = np.array([1, 64, 1024])
    rows = _rows(
        "moe",
        "bfloat16",
        len(tokens),
        num_tokens=tokens,
        hidden_size=4096,
        inter_size=14336,
        topk=2,
        num_experts=8,
        moe_tp_size=1,
        moe_ep_size=1,
        distribution="balanced",
        gated=True,
        kernel_source="moe_torch_flow_cutlass",
    )
    got = predict_moe_rows(art, "moe", rows)  # main's artifact: NaN (no model of the table)
    lat = got["latency_pred_s"].to_numpy(float)
    assert np.all(np.isfinite(lat) & (lat > 0)) and lat[-1] > lat[0], lat
    assert set(got["band_model"]) == {"moe.trtllm.bfloat16"}


@pytest.mark.parametrize(
    ("dtype", "kernel", "layout"),
    [
        # nvfp4: three kernels in the table (CUTLASS, min-latency, non-gated), one model
        ("nvfp4", "moe_torch_flow_cutlass", (4096, 14336, 2, 8)),
        ("nvfp4", "moe_torch_flow_min_latency", (7168, 2048, 8, 256)),
        # MXFP4 weights x MXFP8 activations (gpt-oss's layout among its 3)
        ("w4a8_mxfp4_mxfp8", "moe_torch_flow", (2880, 2880, 4, 32)),
    ],
)
def test_dse_validate_scores_b200_trtllm_4bit_moe_rows(
    art: Artifact, dtype: str, kernel: str, layout: tuple[int, int, int, int]
) -> None:
    """Issue 35: B200's TRT-LLM nvfp4 and MXFP4 x MXFP8 MoE rows are priced by their own
    models (main's artifact before: NaN, no model of the table)."""
    hidden, inter, topk, experts = layout
    tokens = np.array([1, 64, 1024])
    rows = _rows(
        "moe",
        dtype,
        len(tokens),
        num_tokens=tokens,
        hidden_size=hidden,
        inter_size=inter,
        topk=topk,
        num_experts=experts,
        moe_tp_size=1,
        moe_ep_size=1,
        distribution="balanced",
        gated=True,
        kernel_source=kernel,
    )
    got = predict_moe_rows(art, "moe", rows)
    lat = got["latency_pred_s"].to_numpy(float)
    assert np.all(np.isfinite(lat) & (lat > 0)) and lat[-1] > lat[0], (dtype, lat)
    assert set(got["band_model"]) == {f"moe.trtllm.{dtype}"}, dtype
    entry = art.manifest["models"][f"moe.trtllm.{dtype}"]
    assert kernel in entry["kernel_sources"], (dtype, entry["kernel_sources"])


def test_a_b200_trtllm_prediction_keeps_vllms_tables(art: Artifact) -> None:
    """`engine: trtllm` is priced by vLLM's kernel tables on purpose (as on H100): Level 3 is
    fitted on argonne's TRT-LLM rows priced so, and pricing them by TRT-LLM's own tables reads
    them worse held out (module docstring)."""
    cols = {k: [v] for k, v in lookup_model("Mixtral-8x7B").to_dict().items()}
    cols.update(
        batch_size=[16],
        prompt_tokens=[2048],
        output_tokens=[512],
        tensor_parallel=[2],
        engine=["trtllm"],
        gpu=[GPU],
    )
    p = predict(cols, models=True)
    used = set(str(p["kernel_models"][0]).split(","))
    assert {"gemm.vllm.bfloat16", "moe.vllm.bfloat16", "context_attention.vllm"} <= used, used
    assert not {n for n in used if ".trtllm" in n}, used
    assert set(p["artifact_id"]) == {art.artifact_id}
