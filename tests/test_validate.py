"""`dse validate`: the documented JSON structure, per-group MAPE, unpredicted rows counted."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from dse.cli import main

GEMM = "aiconfigurator/aic-core/src/aiconfigurator_core/systems/data/{gpu}/gemm/{eng}/{ver}"
KEYS = {"source", "gpu", "engine", "kind", "dtype", "rows", "latency_mape_pct", "energy_mape_pct"}


@pytest.fixture(scope="module")
def small_data(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 600-row slice of the H100 vLLM GEMM table in the shared layout (a held-out share has
    exactly this layout)."""
    root = tmp_path_factory.mktemp("data")
    rel = GEMM.format(gpu="h100_sxm", eng="vllm", ver="0.24.0")
    raw = pd.read_parquet(data_dir / rel / "gemm_perf.parquet")
    part = raw.groupby("gemm_dtype", group_keys=False).sample(200, random_state=0)
    (root / rel).mkdir(parents=True)
    part.to_parquet(root / rel / "gemm_perf.parquet", index=False)
    return root


def test_validate_json_structure(small_data: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "acc.json"
    rc = main(["validate", "--data", str(small_data), "--gpu", "h100_sxm", "--json", str(out)])
    assert rc == 0
    report = json.loads(out.read_text())
    assert set(report) == {"artifacts", "results"}
    assert set(report["artifacts"]) == {"h100_sxm"}
    assert len(report["artifacts"]["h100_sxm"]) == 12
    res = report["results"]
    assert {r["dtype"] for r in res} == {"bfloat16", "fp8", "fp8_block"}
    for r in res:
        assert set(r) >= KEYS
        assert (r["source"], r["gpu"], r["engine"], r["kind"]) == (
            "aiconfigurator", "h100_sxm", "vllm", "gemm",
        )  # fmt: skip
        assert r["rows"] == 200 and r["unpredicted_rows"] == 0
        assert 0 < r["latency_mape_pct"] < 10  # rows the fit saw: in-sample, not the claim
        assert r["energy_mape_pct"] is None  # no measured power on H100
    printed = capsys.readouterr().out
    assert "lat MAPE%" in printed and "h100_sxm" in printed


def test_rows_without_an_artifact_are_counted_not_dropped(small_data: Path, tmp_path: Path) -> None:
    empty = tmp_path / "no_artifacts"
    empty.mkdir()
    out = tmp_path / "acc.json"
    rc = main(
        ["validate", "--data", str(small_data), "--artifacts", str(empty), "--json", str(out)]
    )
    assert rc == 0
    report = json.loads(out.read_text())
    assert report["artifacts"] == {}
    assert sum(r["rows"] for r in report["results"]) == 600
    for r in report["results"]:
        assert r["unpredicted_rows"] == r["rows"] and r["latency_mape_pct"] is None
        assert "no artifact" in r["unpredicted_reason"]


def test_validate_missing_folder_is_a_clear_error(tmp_path: Path, capsys) -> None:
    rc = main(["validate", "--data", str(tmp_path / "absent")])
    assert rc == 2
    assert "data folder not found" in capsys.readouterr().err
