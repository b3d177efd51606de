"""`dse export`: selection, YAML/JSON that `dse predict` reads back, Hugging Face folders."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from sweep_results import no_feasible_sweep, run_sweep

from dse.cli import main
from dse.errors import ConfigError
from dse.predict import predict
from dse.report import ResultsError, load_results
from dse.report import _info as I
from dse.report.export import entry_architecture, entry_columns, select, write_export
from dse.spec import arch as A
from dse.spec import columns as C


@pytest.fixture(scope="module")
def dense(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """150 random trials of the dense 7-9B space: GQA from 1 to 8 KV heads."""
    return run_sweep(
        "tests/data/spaces/dense_8b.yaml",
        tmp_path_factory.mktemp("dense"),
        *("--sampler", "random", "--trials", "150", "--seed", "2"),
    )


@pytest.fixture(scope="module")
def moe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_sweep(
        "tests/data/spaces/moe.yaml",
        tmp_path_factory.mktemp("moe"),
        *("--sampler", "random", "--trials", "60", "--seed", "0"),
    )


def _load(path: Path) -> list[dict]:
    text = path.read_text()
    doc = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    assert list(doc) == ["configs"]
    return doc["configs"]


# ---------------------------------------------------------------------- selection
def test_front_is_the_default(dense: Path) -> None:
    res = load_results(dense)
    sel = select(res)
    assert sel.rows["number"].tolist() == res.front["number"].tolist()
    assert "Pareto front" in sel.why


@pytest.mark.parametrize(("by", "column"), [("energy", 1), ("latency", 0)])
def test_top_k_by_one_objective(dense: Path, by: str, column: int) -> None:
    res = load_results(dense)
    sel = select(res, top=4, by=by)
    col = res.objectives[column].column
    assert len(sel.rows) == 4 and sel.rows["feasible"].all()
    # One row per distinct configuration (its first trial): --top 4 gives 4 different ones.
    expect = res.distinct.sort_values([col, "number"]).head(4)
    assert sel.rows["number"].tolist() == expect["number"].tolist()
    fields = [c for c in C.CONFIG_FIELDS if c in sel.rows]
    assert len(sel.rows[fields].astype(str).drop_duplicates()) == 4


def test_top_by_knee_starts_at_the_reports_knee(dense: Path) -> None:
    res = load_results(dense)
    sel = select(res, top=3, by="knee")
    knee = next(m for m in I.pareto_info(res).marks if m.label == "knee")
    assert sel.rows["number"].iloc[0] == knee.number
    assert f"trial {knee.number}" in sel.why


def test_selection_mistakes(dense: Path, tmp_path: Path) -> None:
    res = load_results(dense)
    with pytest.raises(ConfigError, match="either --front or --top"):
        select(res, front=True, top=2)
    with pytest.raises(ConfigError, match="--top: must be an integer >= 1, got 0"):
        select(res, top=0)
    bad = no_feasible_sweep(tmp_path)
    with pytest.raises(ResultsError, match="no feasible trial to export"):
        select(load_results(bad))
    assert main(["export", str(bad)]) == 2


# ---------------------------------------------------------------------- YAML / JSON
@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_round_trip_gives_identical_predictions(dense: Path, tmp_path: Path, fmt: str) -> None:
    dest = write_export(dense, fmt=fmt, out=tmp_path / fmt)
    entries = _load(dest / f"configs.{fmt}")
    res = load_results(dense)
    assert [e["predictions"]["trial"] for e in entries] == res.front["number"].tolist()
    for e in entries:
        assert set(e) == {"architecture", "workload", "gpu", "predictions"}
        assert set(e["architecture"]) == set(C.ARCH_FIELDS)
        assert set(e["workload"]) == set(C.WORKLOAD_FIELDS)
    cols, _ = C.as_columns({k: np.asarray(v) for k, v in entry_columns(entries).items()})
    again = predict(cols)
    for i, e in enumerate(entries):
        stored = e["predictions"]["hymell"]
        for key, v in again.items():
            if np.asarray(v).dtype.kind == "f":
                # Another batch composition moves the 8th significant digit (summation order).
                assert stored[key] == pytest.approx(v[i], rel=1e-6), (key, stored[key], v[i])
        # Sizes agree with the accounting of the architecture as written.
        a = entry_architecture(e)
        assert A.total_params(a) == e["predictions"]["sizes"]["total_params"]


def test_dse_predict_reads_the_export(dense: Path, tmp_path: Path, capsys) -> None:
    dest = write_export(dense, fmt="yaml", out=tmp_path / "y", top=2, by="energy")
    entries = _load(dest / "configs.yaml")
    assert main(["predict", "--config", str(dest / "configs.yaml"), "--entry", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # A batch of one and the sweep's batch may differ in the last digits (summation order, float32 MLP weights).
    hymell = entries[1]["predictions"]["hymell"]
    assert out["prediction"]["latency_s"] == pytest.approx(hymell["latency_s"], rel=1e-6)
    assert out["prediction"]["energy_j"] == pytest.approx(hymell["energy_j"], rel=1e-6)


def test_readme_says_what_and_why(dense: Path, tmp_path: Path) -> None:
    dest = write_export(dense, fmt="json", out=tmp_path / "j", top=3, by="latency")
    text = (dest / "README.md").read_text()
    assert "3 configurations: the 3 feasible configurations with the lowest Request latency" in text
    for e in _load(dest / "configs.json"):
        assert f"| {e['predictions']['trial']} |" in text
    assert "dse predict --config configs.json --entry N" in text


def test_command(dense: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "cli"
    assert main(["export", str(dense), "--top", "2", "--by", "knee", "--out", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    assert len(_load(out / "configs.yaml")) == 2
    with pytest.raises(SystemExit) as exc:  # argparse: --front and --top are exclusive
        main(["export", str(dense), "--front", "--top", "2"])
    assert exc.value.code == 2
    assert main(["export", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["export", str(dense), "--by", "knee"]) == 2
    assert "give --top K as well" in capsys.readouterr().err


# ---------------------------------------------------------------------- Hugging Face
def _meta_param_count(folder: Path) -> tuple[str, int]:
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    cfg = transformers.AutoConfig.from_pretrained(folder)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    return cfg.model_type, sum(p.numel() for p in model.parameters())


def test_hf_dense_gqa(dense: Path, tmp_path: Path) -> None:
    dest = write_export(dense, fmt="hf", out=tmp_path / "hf", top=2, by="knee")
    entries = _load(
        write_export(dense, fmt="yaml", out=tmp_path / "y", top=2, by="knee") / "configs.yaml"
    )
    for e in entries:
        folder = dest / f"trial-{e['predictions']['trial']}"
        cfg = json.loads((folder / "config.json").read_text())
        assert cfg["num_key_value_heads"] == e["architecture"]["n_kv_heads"]
        model_type, n = _meta_param_count(folder)
        assert model_type == "llama"
        assert (
            n == A.total_params(entry_architecture(e)) == e["predictions"]["sizes"]["total_params"]
        )
    # The knee of this space is a GQA model, so num_key_value_heads is exercised.
    assert any(e["architecture"]["n_kv_heads"] < e["architecture"]["n_heads"] for e in entries)
    assert "AutoConfig.from_pretrained" in (dest / "README.md").read_text()


@pytest.mark.slow
def test_hf_moe(moe: Path, tmp_path: Path) -> None:
    dest = write_export(moe, fmt="hf", out=tmp_path / "hf", top=1, by="energy")
    (folder,) = [p for p in dest.iterdir() if p.is_dir()]
    trial = int(folder.name.split("-")[1])
    row = load_results(moe).trials.set_index("number").loc[trial]
    model_type, n = _meta_param_count(folder)
    assert model_type == "mixtral"
    assert n == row["total_params"]


def test_hf_refuses_what_it_cannot_express(tmp_path: Path) -> None:
    space = tmp_path / "plain_mlp.yaml"
    space.write_text(
        "name: plain\nhardware: h100_sxm\n"
        "space: {d_model: 2048, n_layers: {values: [8, 12]}, n_heads: 16, d_ff: 8192,"
        " gated_mlp: false}\n"
    )
    res = run_sweep(space, tmp_path / "res", "--sampler", "exhaustive")
    with pytest.raises(ConfigError, match="gated_mlp: must be true"):
        write_export(res, fmt="hf", out=tmp_path / "hf")


# ---------------------------------------------------------------------- issue 32
# Two dense models at an 8k prompt, ranked by Chinchilla loss, energy and throughput (maximised).
LONG = """\
name: long
hardware: h200_sxm
workload: {batch_size: 8, prompt_tokens: 8192, output_tokens: 256, tensor_parallel: 1}
space:
  d_model: {values: [3072, 4096]}
  n_layers: 32
  n_heads: 32
  n_kv_heads: 8
  d_ff: 14336
  vocab_size: 128256
  training_tokens: 1.5e+13
objectives:
  loss: {source: chinchilla}
  energy: {source: hymell, metric: per_output_token}
  throughput: {metric: per_gpu}
study: {sampler: exhaustive, seed: 0}
"""


@pytest.fixture(scope="module")
def long(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("long")
    (folder / "long.yaml").write_text(LONG)
    return run_sweep(folder / "long.yaml", folder / "res")


def test_hf_config_holds_the_studys_context(long: Path, tmp_path: Path) -> None:
    """8192 + 256 tokens need max_position_embeddings >= 8448: the next power of two, 16384
    (without the key transformers reads Llama's default, 2048)."""
    dest = write_export(long, fmt="hf", out=tmp_path / "hf")
    folders = sorted(p for p in dest.iterdir() if p.is_dir())
    assert folders
    for folder in folders:
        cfg = json.loads((folder / "config.json").read_text())
        assert cfg["max_position_embeddings"] == 16384 >= 8192 + 256
    transformers = pytest.importorskip("transformers")
    assert transformers.AutoConfig.from_pretrained(folders[0]).max_position_embeddings == 16384


@pytest.mark.parametrize(
    ("by", "objective", "maximised"),
    [
        ("loss", "loss_chinchilla", False),
        ("loss_chinchilla", "loss_chinchilla", False),
        ("throughput", "throughput_per_gpu", True),
    ],
)
def test_top_k_by_any_objective_of_the_study(
    long: Path, by: str, objective: str, maximised: bool, tmp_path: Path
) -> None:
    res = load_results(long)
    sel = select(res, top=2, by=by)
    v = sel.rows[f"obj.{objective}"].to_numpy(float)
    assert len(v) == 2 and (v[0] >= v[1] if maximised else v[0] <= v[1])
    assert ("highest" if maximised else "lowest") in sel.why
    assert main(["export", str(long), "--top", "1", "--by", by, "--out", str(tmp_path)]) == 0


def test_by_names_what_the_study_can_rank_by(long: Path, capsys) -> None:
    with pytest.raises(ConfigError, match=r"--by: must be knee or .*\(loss, energy, throughput, "):
        select(load_results(long), top=2, by="latency")
    assert main(["export", str(long), "--top", "2", "--by", "latency"]) == 2
    assert "got 'latency'" in capsys.readouterr().err
