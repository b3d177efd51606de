"""argonne Fig. 22 time-to-first-token rows (kind e2e_ttft)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dse import data
from dse.errors import DataError

TTFT = "argonne/Plots/Fig_22/all_results_TTFT_ITL.csv"


def test_ttft_rows_are_seconds_and_match_the_end_to_end_runs(data_dir: Path) -> None:
    t = data.load(data_dir, ["e2e", "e2e_ttft"])
    ttft, e2e = t["e2e_ttft"], t["e2e"]
    raw = pd.read_csv(data_dir / TTFT, skipinitialspace=True)
    assert len(ttft) == len(raw)
    np.testing.assert_allclose(ttft["latency_s"], raw["TTFT Latency"])
    assert set(ttft["kind"]) == {"e2e_ttft"}
    assert {"h100_sxm", "a100_sxm_40gb", "gh200"} <= set(ttft["gpu"])
    # end_latency is All_results' Latency of the same configuration with output = input length.
    keys = ["gpu", "engine", "model", "batch_size", "input_tokens", "n_gpus"]
    m = ttft.dropna(subset=["end_latency_s"]).merge(e2e, on=keys, suffixes=("", "_e2e"))
    assert len(m) >= 10
    np.testing.assert_allclose(m["end_latency_s"], m["latency_s_e2e"], rtol=1e-9)
    assert (ttft["latency_s"] < ttft["end_latency_s"].fillna(np.inf)).all()


def test_ttft_in_milliseconds_is_refused(data_dir: Path, tmp_path: Path) -> None:
    raw = pd.read_csv(data_dir / TTFT, skipinitialspace=True)
    raw["TTFT Latency"] = raw["TTFT Latency"] * 1e3 * 1e3  # microseconds written as seconds
    dst = tmp_path / TTFT
    dst.parent.mkdir(parents=True)
    raw.to_csv(dst, index=False)
    with pytest.raises(DataError, match=r"all_results_TTFT_ITL\.csv.*TTFT Latency"):
        data.load(tmp_path, ["e2e_ttft"])


def test_ttft_kind_is_registered() -> None:
    assert "e2e_ttft" in data.KINDS
    assert "e2e_ttft" in data.SOURCE_KINDS["argonne"]
