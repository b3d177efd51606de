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
    assert set(report) == {"artifacts", "results", "implausible_rows"}
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


# ---- held-out folders (H7 stress test): nothing lost, nothing silent ---------------------------

ARGONNE = "argonne/Plots/All_results.csv"


@pytest.fixture(scope="module")
def heldout_like(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Rows of kinds the artifacts have never seen, in the shared layout: an engine version never
    fitted (B200), a dtype never fitted (nvfp4 on H100: no table, no stand-in), argonne rows of an unknown model / engine / GPU, GEMM shapes
    far outside the fitted range, a header-only file and a table no reader knows."""
    root = tmp_path_factory.mktemp("heldout")
    h100 = GEMM.format(gpu="h100_sxm", eng="vllm", ver="0.24.0")
    raw = pd.read_parquet(data_dir / h100 / "gemm_perf.parquet")
    bf16 = raw[raw["gemm_dtype"] == "bfloat16"].sample(40, random_state=1)
    for rel, part in {
        GEMM.format(gpu="b200_sxm", eng="vllm", ver="0.30.0"): bf16.head(10),
        GEMM.format(gpu="h100_sxm", eng="sglang", ver="0.5.10"): bf16.assign(gemm_dtype="nvfp4"),
        GEMM.format(gpu="h100_sxm", eng="vllm", ver="0.99.0"): pd.concat(
            [
                bf16.head(10),  # in range
                # 2^20 tokens, time scaled with m (latency first: it reads the old m)
                bf16.head(10).assign(
                    latency=lambda d: d["latency"] * (1 << 20) / d["m"], m=1 << 20
                ),
            ]
        ),
    }.items():
        (root / rel).mkdir(parents=True)
        part.to_parquet(root / rel / "gemm_perf.parquet", index=False)
    (root / GEMM.format(gpu="h100_sxm", eng="vllm", ver="0.99.0") / "mla_perf.parquet").write_bytes(
        (
            root / GEMM.format(gpu="b200_sxm", eng="vllm", ver="0.30.0") / "gemm_perf.parquet"
        ).read_bytes()
    )
    a = pd.read_csv(data_dir / ARGONNE)
    a = a[(a["Hardware"] == "Nvidia H100 GPU") & (a["Framework"] == "TensorRT-LLM")].head(8)
    a = pd.concat(
        [
            a.head(2),
            a.head(2).assign(Model="newco/Unheard-7B"),
            a.head(2).assign(Framework="MLC-LLM"),  # an engine no model knows (SGLang now is one)
            a.head(2).assign(Hardware="Nvidia B200 GPU"),
        ]
    )
    (root / ARGONNE).parent.mkdir(parents=True)
    a.to_csv(root / ARGONNE, index=False)
    power = root / "argonne/Plots/Fig_16_a_b/power_results.csv"
    power.parent.mkdir(parents=True)
    power.write_text(",".join([*a.columns, "avg_power"]) + "\n")  # header only
    return root


def test_heldout_like_folder_loses_no_row(heldout_like: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "acc.json"
    rc = main(["validate", "--data", str(heldout_like), "--json", str(out)])
    assert rc == 0
    res = json.loads(out.read_text())["results"]
    rows = {k: sum(r["rows"] for r in res if r["kind"] == k) for k in ("gemm", "e2e")}
    assert rows == {"gemm": 10 + 40 + 20, "e2e": 8}

    def one(**key: str) -> dict:
        (hit,) = [r for r in res if all(r[k] == v for k, v in key.items())]
        return hit

    # B200 has an artifact since issue 35: its rows of an engine version never fitted are priced
    b200 = one(gpu="b200_sxm", kind="gemm")
    assert b200["unpredicted_rows"] == 0 and b200["latency_mape_pct"] is not None
    assert one(engine="sglang", dtype="nvfp4")["unpredicted_rows"] == 40
    far = one(gpu="h100_sxm", engine="vllm", kind="gemm")
    # far shapes are predicted and flagged, never dropped
    assert (far["rows"], far["unpredicted_rows"], far["out_of_range_rows"]) == (20, 0, 10)
    assert far["latency_mape_pct"] is not None
    e2e = [r for r in res if r["kind"] == "e2e"]
    assert (
        sum(r["unpredicted_rows"] for r in e2e) == 6
    )  # unknown model, engine, GPU spelling "b200"
    known_engine = one(kind="e2e", gpu="h100_sxm", engine="trtllm")
    assert known_engine["predicted_rows"] == 2
    assert "unknown model 'newco/Unheard-7B'" in known_engine["unpredicted_reason"]
    assert "engine mlc-llm not modelled" in one(kind="e2e", engine="mlc-llm")["unpredicted_reason"]
    assert "dtype nvfp4" in one(engine="sglang", dtype="nvfp4")["unpredicted_reason"]
    err = capsys.readouterr().err
    assert "2 data file(s) gave no rows" in err
    assert "power_results.csv" in err and "mla_perf.parquet" in err
    assert "outside the fitted range" in err


def test_gpu_filter_takes_source_spellings(small_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "acc.json"
    assert main(["validate", "--data", str(small_data), "--gpu", "H100", "--json", str(out)]) == 0
    assert sum(r["rows"] for r in json.loads(out.read_text())["results"]) == 600


def test_a_family_that_fails_loses_only_the_rows_of_its_file(small_data: Path) -> None:
    from dse.data import load
    from dse.fitting.families import Family
    from dse.fitting.validate import predict_table
    from dse.models.artifact import Artifact

    rows = load(small_data)["gemm"]
    bad = "held-out/other_gemm_perf.parquet"
    rows.loc[rows.index[:100], "file"] = bad

    def fragile(artifact: Artifact, kind: str, rows: pd.DataFrame) -> pd.DataFrame:
        if (rows["file"] == bad).any():
            raise KeyError("a column this family expected")
        return pd.DataFrame({"latency_pred_s": 1e-3}, index=rows.index)

    logs: list[str] = []
    fam = Family("fragile", fit=lambda ctx: [], predict_rows=fragile, validates=("gemm",))
    got = predict_table(
        "gemm", rows, {"h100_sxm": Artifact.load("h100_sxm")}, {"gemm": fam}, logs.append
    )
    lost = got["latency_pred_s"].isna()
    assert lost.sum() == 100 and (rows.loc[lost, "file"] == bad).all()
    assert got.loc[lost, "reason"].str.contains("fragile failed on these rows .KeyError").all()
    assert (got.loc[~lost, "reason"] == "").all()
    assert len(logs) == 1 and bad in logs[0]


def test_a_folder_without_sources_says_so(tmp_path: Path, capsys) -> None:
    (tmp_path / "aiconfigurator-copy").mkdir()  # a source folder under another name
    assert main(["validate", "--data", str(tmp_path)]) == 0
    assert "no measured rows found" in capsys.readouterr().err


def test_empty_gemms_are_counted_with_their_reason(data_dir: Path, tmp_path: Path) -> None:
    # upstream TRT-LLM 1.2.0rc5 tables time m = 0 GEMMs (a launch and nothing else)
    rel = GEMM.format(gpu="h100_sxm", eng="trtllm", ver="1.2.0rc5")
    raw = pd.read_parquet(
        data_dir / GEMM.format(gpu="h100_sxm", eng="vllm", ver="0.24.0") / "gemm_perf.parquet"
    )
    part = raw[raw["gemm_dtype"] == "bfloat16"].head(10).copy()
    part.loc[part.index[:3], "m"] = 0
    (tmp_path / rel).mkdir(parents=True)
    part.to_parquet(tmp_path / rel / "gemm_perf.parquet", index=False)
    out = tmp_path / "acc.json"
    assert main(["validate", "--data", str(tmp_path), "--json", str(out)]) == 0
    (r,) = json.loads(out.read_text())["results"]
    assert (r["rows"], r["unpredicted_rows"]) == (10, 3)
    assert r["unpredicted_reason"].startswith("empty GEMM")
