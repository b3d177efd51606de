"""`dse fit --only gemm|attention --model NAME` refits the named tables only (the others are not
fitted at all, not fitted and dropped), and a GEMM refit over an existing artifact adds its energy
with that artifact's power model (a run without `--only power` used to leave it out)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dse.fitting.attention import _attention_tasks
from dse.fitting.context import FitContext
from dse.fitting.gemm import gemm_tasks, power_model_of
from dse.models.artifact import Artifact, FittedModel
from dse.resources import surrogates_dir

GEMM_ROWS = pd.DataFrame(
    {
        "engine": ["vllm", "vllm", "trtllm", "vllm"],
        "dtype": ["bfloat16", "nvfp4", "bfloat16", "nvfp4"],
    }
)


def test_gemm_model_subset_fits_only_the_named_tables() -> None:
    every = FitContext(Path("."), "b200_sxm")
    assert gemm_tasks(every, GEMM_ROWS) == [
        ("trtllm", "bfloat16"),
        ("vllm", "bfloat16"),
        ("vllm", "nvfp4"),
    ]
    one = FitContext(Path("."), "b200_sxm", models=frozenset({"gemm.vllm.nvfp4"}))
    assert gemm_tasks(one, GEMM_ROWS) == [("vllm", "nvfp4")]


def test_attention_model_subset_fits_only_the_named_tables() -> None:
    n = 300  # above MIN_ATTENTION_ROWS for each engine
    table = pd.DataFrame({"gpu": "b200_sxm", "engine": np.repeat(["trtllm", "vllm"], n)})
    tables = {"context_attention": table, "generation_attention": table}
    ctx = FitContext(
        Path("."), "b200_sxm", models=frozenset({"generation_attention.vllm"}), _tables=tables
    )
    assert _attention_tasks(ctx) == [("generation_attention", "vllm")]
    assert len(_attention_tasks(FitContext(Path("."), "b200_sxm", _tables=tables))) == 4


@pytest.fixture(scope="module")
def shipped() -> Artifact:
    folder = surrogates_dir() / "h100_sxm"
    if not (folder / "manifest.json").is_file():
        pytest.skip("shipped h100_sxm artifact absent")
    return Artifact.load(folder)


def test_gemm_refit_over_an_artifact_uses_its_power_model(shipped: Artifact) -> None:
    kept = FitContext(Path("."), "h100_sxm", keep=shipped)
    assert power_model_of(kept) is shipped.model("power")
    assert power_model_of(FitContext(Path("."), "h100_sxm")) is None
    # this run's power model comes first
    own = shipped.model("power")
    ctx = FitContext(Path("."), "h100_sxm", keep=None, fitted={"power": FittedModel("power", own)})
    assert power_model_of(ctx) is own
