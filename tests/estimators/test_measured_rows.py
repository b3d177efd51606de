"""The estimator's measured rows are cut from dse.data's tables (issue 36): one reader of the
measured files, one GPU-name map (dse.data's), one model catalogue (dse.spec.catalogue)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from dse.data import load
from dse.errors import DataError
from dse.estimators import measured as M
from dse.spec.catalogue import lookup_model

# Calls that would read a file (or list a folder) without dse.data.
_FILE_CALLS = {"open", "read_csv", "read_parquet", "read_json", "read_text", "read_bytes",
               "glob", "rglob", "iterdir", "loads"}  # fmt: skip


def _called_names(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            f = node.func
            names.add(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", ""))
    return names


def test_measured_rows_read_no_file_and_map_no_gpu_name_themselves() -> None:
    src = Path(M.__file__)
    assert not _called_names(src) & _FILE_CALLS
    # device strings as the sources write them ("Nvidia H100 GPU") are dse.data's business
    strings = [
        n.value
        for n in ast.walk(ast.parse(src.read_text()))
        if isinstance(n, ast.Constant) and isinstance(n.value, str)
    ]
    assert not [s for s in strings if "nvidia" in s.lower()]


def test_every_calibration_model_comes_from_the_catalogue() -> None:
    for name in M.MODELS:
        assert M.architecture(name) == lookup_model(name).resolved(), name


_ARGONNE_HEADER = (
    "Hardware,Num of Hardware,Framework,Model,Input Output Length,Batch Size,Latency,Throughput,"
    "avg_power"
)


def _folder(tmp_path: Path) -> Path:
    """A measured-data folder of real files: 3 argonne energy rows, 3 ml-energy runs."""
    argonne = tmp_path / "argonne" / "Plots" / "Fig_16_a_b"
    argonne.mkdir(parents=True)
    (argonne / "power_results.csv").write_text(
        "\n".join(
            [
                _ARGONNE_HEADER,
                # kept: 16 prompts x (128 + 128) tokens in 2 s -> 2048 tok/s; 350 W on GPU 0
                "Nvidia H100 GPU,2,vLLM,meta-llama/Llama-2-7b-hf,128,16,2.0,2048,350000",
                # not a calibration model
                "Nvidia H100 GPU,1,vLLM,BAAI/Aquila-7B,128,16,2.0,2048,350000",
                # not a GPU the estimator is calibrated on
                "AMD MI250 GPU,1,vLLM,meta-llama/Llama-2-7b-hf,128,16,2.0,2048,350000",
            ]
        )
        + "\n"
    )
    base = tmp_path / "ml-energy-v2" / "data" / "llm_text_generation" / "chat"
    runs = {
        # a spelling the old private map did not list: dse.data's map names it a100_sxm_40gb
        "a100/meta-llama/Meta-Llama-3.1-8B-Instruct/bs64+tp1+pp1.json": ("A100 SXM4 40GB", 1),
        "h100/meta-llama/Meta-Llama-3.1-8B-Instruct/bs64+tp1+pp1.json": (
            "NVIDIA H100 80GB HBM3",
            1,
        ),
        "h100/meta-llama/Meta-Llama-3.1-8B-Instruct/bs64+tp1+pp2.json": (
            "NVIDIA H100 80GB HBM3",
            2,
        ),
    }
    for rel, (gpu, pp) in runs.items():
        path = base / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            json.dumps(
                {
                    "Model": "meta-llama/Meta-Llama-3.1-8B-Instruct",
                    "GPU": gpu,
                    "TP": 1,
                    "PP": pp,
                    "Energy/req (J)": 500.0,
                    "Avg TPOT (s)": 0.05,
                    "Token tput (tok/s)": 200.0,  # 500 J / 250 tokens x 200 tok/s = 400 W
                    "Avg Output Tokens": 250.0,
                    "Avg BS (reqs)": 20.0,
                    "Max BS (reqs)": 64,
                }
            )
        )
    return tmp_path


def test_rows_are_dse_data_rows(tmp_path: Path) -> None:
    root = _folder(tmp_path)
    tables = M.read(root)
    assert set(tables) == set(load(root))  # the same reader, nothing of its own

    power, files = M.argonne_power(tables)
    assert files == ["argonne/Plots/Fig_16_a_b/power_results.csv"]
    assert len(power) == 1
    row = power.iloc[0]
    assert (row["gpu"], row["engine"], row["model"]) == ("h100_sxm", "vllm",
                                                         "meta-llama/Llama-2-7b-hf")  # fmt: skip
    assert (row["tensor_parallel"], row["batch_size"]) == (2.0, 16.0)
    assert (row["prompt_tokens"], row["output_tokens"]) == (128.0, 128.0)
    assert row["time_s"] == 2.0
    assert row["measured_j"] == pytest.approx(2.0 * 350.0)  # s x W (mW / 1000), GPU 0
    assert row["scope"] == "gpu0"

    serving, files = M.ml_energy(tables)
    assert sorted(serving["gpu"]) == ["a100_sxm_40gb", "h100_sxm"]  # the pp 2 run is left out
    assert len(files) == 2
    for _, r in serving.iterrows():
        assert r["time_s"] == pytest.approx(20.0 * 250.0 / 200.0)  # B x tokens / (tok/s)
        assert r["measured_j"] == pytest.approx(20.0 * 500.0)  # B requests x J per request
        assert r["prompt_tokens"] == M.ML_ENERGY_PROMPT_TOKENS
        assert r["scope"] == "all"


def test_missing_source_is_a_data_error(tmp_path: Path) -> None:
    tables = M.read(_folder(tmp_path))
    with pytest.raises(DataError, match="no argonne e2e rows"):
        M.argonne_latency(tables)
    with pytest.raises(DataError, match="no aiconfigurator gemm rows"):
        M.aic_h200_kernels(tables)
