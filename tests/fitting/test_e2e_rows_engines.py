"""Level 3's inputs (`dse.fitting.e2e_rows.price_rows`) for end-to-end rows of several engines:
an SGLang row is priced by SGLang's own kernel tables, apart from the other engines' rows (the
pricer takes one engine's tables per batch), each row as if it came alone."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dse.fitting.e2e_rows import e2e_configs, price_rows
from dse.predict.artifacts import resolve_artifact
from dse.resources import surrogates_dir

pytestmark = pytest.mark.skipif(
    not (surrogates_dir() / "h100_sxm" / "manifest.json").is_file(), reason="no h100_sxm artifact"
)


def test_rows_of_sglang_and_other_engines_are_priced_each_as_alone() -> None:
    rows = pd.DataFrame(
        {
            "model": ["meta-llama/Meta-Llama-3-8B"] * 3,
            "gpu": "h100_sxm",
            "engine": ["sglang", "vllm", "trtllm"],
            "batch_size": 16,
            "input_tokens": 512,
            "output_tokens": 128,
            "n_gpus": 1,
        }
    )
    cfg, kept = e2e_configs(rows)
    assert len(kept) == 3
    art, _ = resolve_artifact("h100_sxm", "auto")
    both, _ = price_rows(cfg, art, "h100_sxm")
    for i in range(3):
        alone, _ = price_rows(cfg.iloc[[i]].reset_index(drop=True), art, "h100_sxm")
        for key in ("t_pre_s", "t_dec_s"):
            np.testing.assert_allclose(getattr(both, key)[i], getattr(alone, key)[0], rtol=1e-6)
    # SGLang's GEMM and attention tables, not vLLM's: its kernel time differs from the vLLM
    # row's, while TensorRT-LLM's row is priced with vLLM's tables (the same kernels)
    assert abs(np.log(both.t_pre_s[0] / both.t_pre_s[1])) > 1e-3
    np.testing.assert_allclose(both.t_pre_s[2], both.t_pre_s[1], rtol=1e-9)
