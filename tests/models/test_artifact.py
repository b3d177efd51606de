"""Frozen artifacts: round trip, sklearn-free loading, error messages, fitted ranges."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dse.errors import ArtifactError
from dse.models import model_class
from dse.models.artifact import FORMAT_VERSION, Artifact, default_dir, weights_id
from dse.predict.gemm_choice import Gemm

REPO = Path(__file__).resolve().parents[2]
GPUS = ("h100_sxm", "h200_sxm", "a100_sxm")


def _shapes(n: int = 500, seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    return tuple(np.round(2.0 ** rng.uniform(0, 16, n)) for _ in range(3))


@pytest.mark.parametrize("gpu", GPUS)
def test_shipped_artifact_has_gemm_and_manifest(gpu: str) -> None:
    art = Artifact.load(gpu)
    man = art.manifest
    assert man["format_version"] == FORMAT_VERSION
    assert man["gpu"] == gpu
    assert man["artifact_id"] == weights_id(art.models)
    assert {"numpy", "python"} <= set(man["libraries"])
    assert all(len(f["sha256"]) == 64 for f in man["data_files"])
    names = art.names("gemm")
    assert "gemm.vllm.bfloat16" in names
    for name in names:
        entry = man["models"][name]
        assert set(entry["fitted_range"]) == {"m", "n", "k"}
        assert entry["cv"]["latency_mape_pct"] < 10.0  # held-out (n, k) groups
        assert entry["measured_power"] == (gpu == "h200_sxm")
    assert man["measured_power"] == (gpu == "h200_sxm")


def test_round_trip_gives_identical_predictions(tmp_path: Path) -> None:
    art = Artifact.load("h200_sxm")
    m, n, k = _shapes()
    before = {name: art.model(name).predict(m, n, k) for name in art.names("gemm")}
    art.save(tmp_path / "copy")
    again = Artifact.load(tmp_path / "copy")
    assert again.artifact_id == art.artifact_id
    for name, pred in before.items():
        after = again.model(name).predict(m, n, k)
        for key, v in pred.items():
            np.testing.assert_array_equal(after[key], v, err_msg=f"{name}: {key}")


def test_loading_and_predicting_never_imports_sklearn() -> None:
    code = (
        "import sys\n"
        "from dse.predict.gemm_choice import Gemm\n"
        "g = Gemm.load('h200_sxm')\n"
        "out = g.predict([1, 4096], [4096, 4096], [4096, 4096], 'bfloat16')\n"
        "assert out['energy_j'].shape == (2,)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'sklearn')\n"
        "print('LEAKED', bad) if bad else print('CLEAN')\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
        env={"PYTHONPATH": str(REPO), "PATH": ""},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "CLEAN", res.stdout


def test_missing_artifact_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match=r"manifest\.json missing.*dse fit --data DIR --gpu"):
        Artifact.load(tmp_path / "nowhere")
    with pytest.raises(ArtifactError, match="dse fit"):
        Artifact.load("a100_sxm_40gb")  # registry GPU without a shipped artifact


def _copy(tmp_path: Path) -> Path:
    dst = tmp_path / "h100_sxm"
    shutil.copytree(default_dir("h100_sxm"), dst)
    return dst


def test_corrupt_or_newer_artifacts_fail_with_a_message(tmp_path: Path) -> None:
    d = _copy(tmp_path)
    man = json.loads((d / "manifest.json").read_text())
    (d / "manifest.json").write_text(json.dumps({**man, "format_version": FORMAT_VERSION + 1}))
    with pytest.raises(ArtifactError, match="newer than this dse reads"):
        Artifact.load(d)
    (d / "manifest.json").write_text("{not json")
    with pytest.raises(ArtifactError, match="not valid JSON"):
        Artifact.load(d)
    (d / "manifest.json").write_text(json.dumps(man))
    (d / "weights.npz").write_bytes(b"garbage")
    with pytest.raises(ArtifactError, match="cannot read weights"):
        Artifact.load(d)


def test_tampered_weights_do_not_match_the_id(tmp_path: Path) -> None:
    art = Artifact.load("h100_sxm")
    art.save(tmp_path / "a")
    man = json.loads((tmp_path / "a" / "manifest.json").read_text())
    man["artifact_id"] = "000000000000"
    (tmp_path / "a" / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(ArtifactError, match="do not match"):
        Artifact.load(tmp_path / "a")


def test_out_of_range_flags_inputs_outside_the_fitted_box() -> None:
    art = Artifact.load("h100_sxm")
    name = "gemm.vllm.bfloat16"
    (m_lo, m_hi) = art.manifest["models"][name]["fitted_range"]["m"]
    flags = art.out_of_range(name, m=[m_lo, m_hi, m_hi * 2, 0.5 * m_lo], n=4096, k=4096)
    np.testing.assert_array_equal(flags, [False, False, True, True])
    out = Gemm(art).predict([64, 64], [4096, 4096], [4096, 16], "bfloat16")
    np.testing.assert_array_equal(out["out_of_range"], [False, True])  # k=16 < 32


def test_unknown_model_kind_is_an_artifact_error() -> None:
    with pytest.raises(ArtifactError, match="unknown model kind"):
        model_class("no_such_kind")
    with pytest.raises(ArtifactError, match="outside the dse package"):
        model_class("no_such_kind", "os:system")


def test_dse_surrogates_is_the_one_artifacts_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DSE_SURROGATES moves every finder at once: `Artifact.load(<gpu>)` (dse validate, the GEMM
    tables), `dse fit`'s default output (`default_dir`) and `dse predict` (issue 23)."""
    from dse.predict import load_artifact
    from dse.resources import surrogates_dir
    from dse.spec import hardware

    shipped_id = Artifact.load("h100_sxm").artifact_id
    src = default_dir("h100_sxm")
    art = Artifact.load(src)
    art.manifest["note"] = "the copy under DSE_SURROGATES"
    art.save(tmp_path / "h100_sxm")
    assert art.path == src  # saving elsewhere leaves a (possibly shared) artifact where it was
    monkeypatch.setenv("DSE_SURROGATES", str(tmp_path))
    assert surrogates_dir() == tmp_path
    assert default_dir("h100_sxm") == tmp_path / "h100_sxm"  # where `dse fit --gpu` writes
    assert hardware._artifact_root() == tmp_path
    got = Artifact.load("h100_sxm")
    assert got.path == tmp_path / "h100_sxm" and got.manifest.get("note")
    assert got.artifact_id == shipped_id
    assert load_artifact("h100_sxm")[0].path == tmp_path / "h100_sxm"
    with pytest.raises(ArtifactError, match="dse fit"):
        Artifact.load("h200_sxm")  # not in the DSE_SURROGATES folder: not the shipped one either
