"""A sweep whose energy objective is the tokens-to-Wh estimator, with either preset."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dse.cli import main
from dse.estimators.tokens2wh import estimate
from dse.spec import columns as C

SPACE = """\
name: t2wh
hardware: h100_sxm
workload: {{batch_size: 4, prompt_tokens: 256, output_tokens: 64}}
space:
  d_model: {{values: [2048, 4096]}}
  n_layers: {{values: [16, 32]}}
  n_heads: 32
  n_kv_heads: {{values: [8, 32]}}
  d_ff: 8192
objectives:
  latency: {{metric: request}}
  energy: {{source: tokens2wh, preset: {preset}}}
study: {{sampler: exhaustive, trials: 8, seed: 0}}
"""


@pytest.mark.parametrize("preset", ["paper", "corrected"])
def test_tokens2wh_objective_uses_the_chosen_preset(tmp_path: Path, preset: str) -> None:
    space = tmp_path / "s.yaml"
    space.write_text(SPACE.format(preset=preset))
    out = tmp_path / "out"
    assert main(["sweep", str(space), "--out", str(out), "--quiet", "--no-report"]) == 0
    df = pd.read_parquet(out / "trials.parquet").sort_values("number")
    assert len(df) == 8
    cols, _ = C.as_columns({k: df[k].to_numpy() for k in C.CONFIG_FIELDS if k in df})
    time_s = None
    if preset == "corrected":
        ttft = df["pred.ttft_s"].to_numpy()
        time_s = {"prefill": ttft, "decode": df["pred.latency_s"].to_numpy() - ttft}
    want = estimate(
        C.architecture(cols),
        {k: cols[k] for k in ("batch_size", "prompt_tokens", "output_tokens", "tensor_parallel")},
        "h100_sxm",
        preset=preset,
        time_s=time_s,
    )["energy_j"]
    np.testing.assert_allclose(df["obj.energy_tokens2wh_request"].to_numpy(), want, rtol=1e-9)


def test_paper_and_corrected_presets_differ(tmp_path: Path) -> None:
    got = {}
    for preset in ("paper", "corrected"):
        space = tmp_path / f"{preset}.yaml"
        space.write_text(SPACE.format(preset=preset))
        out = tmp_path / preset
        assert main(["sweep", str(space), "--out", str(out), "--quiet", "--no-report"]) == 0
        got[preset] = (
            pd.read_parquet(out / "trials.parquet")
            .sort_values("number")["obj.energy_tokens2wh_request"]
            .to_numpy()
        )
    assert not np.allclose(got["paper"], got["corrected"])
