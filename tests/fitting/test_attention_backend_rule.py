"""The attention family fits an engine's table on its default backend where the table measured a
shape under several (`dse.fitting.attention.default_backend_rows`: B200's SGLang tables time some
shapes under TRT-LLM MHA and again under FlashInfer or Triton)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from dse.fitting.attention import default_backend_rows
from dse.resources import surrogates_dir


def _rows() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "batch_size": [1, 1, 1, 8, 8, 1],
            "isl": [128, 128, 128, 128, 128, 128],
            "num_heads": [32, 32, 32, 32, 32, 32],
            "num_kv_heads": [8, 8, 8, 8, 8, 8],
            "head_dim": [128, 128, 128, 128, 192, 128],
            "dtype": ["bfloat16"] * 6,
            "kv_cache_dtype": ["bfloat16"] * 5 + ["fp8"],
            "kernel_source": [
                "trtllm_mha",
                "flashinfer",
                "triton",
                "flashinfer",
                "triton",
                "flashinfer",
            ],
            "latency_s": [1.0, 1.4, 2.0, 1.0, 1.0, 1.0],
        }
    )


def test_a_shape_measured_by_the_default_backend_keeps_its_row_only() -> None:
    keep = default_backend_rows(_rows(), "sglang")
    # shape 1 (three backends): TRT-LLM MHA's row; batch 8 (FlashInfer alone), head_dim 192
    # (Triton alone) and the fp8-KV shape (FlashInfer alone) keep theirs
    np.testing.assert_array_equal(keep, [True, False, False, True, True, True])


def test_engines_without_a_default_backend_keep_every_row() -> None:
    assert default_backend_rows(_rows(), "vllm").all()
    assert default_backend_rows(_rows().drop(columns="kernel_source"), "sglang").all()
    assert default_backend_rows(_rows().iloc[:0], "sglang").shape == (0,)


@pytest.mark.parametrize(
    ("gpu", "prefill", "decode"), [("b200_sxm", 32639, 34697), ("h100_sxm", 28630, 33140)]
)
def test_the_shipped_sglang_attention_models_were_fitted_on_the_kept_rows(
    gpu: str, prefill: int, decode: int
) -> None:
    """B200's SGLang models on 32,639 of 36,158 / 34,697 of 40,615 rows; H100's tables measured
    no shape twice (all rows)."""
    path = surrogates_dir() / gpu / "manifest.json"
    if not path.is_file():
        pytest.skip(f"{path} absent")
    models = json.loads(path.read_text())["models"]
    assert models["context_attention.sglang"]["cv"]["rows"] == prefill
    assert models["generation_attention.sglang"]["cv"]["rows"] == decode
