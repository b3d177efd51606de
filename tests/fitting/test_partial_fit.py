"""`dse fit --only FAMILY` over an existing artifact: Levels 2-3 are fitted on every Level-1
model the saved artifact will predict with (the kept ones and this run's), never on the models
of this run alone (which would leave GEMM and power to the roofline stand-in while fitting)."""

from __future__ import annotations

import pytest

from dse.fitting.artifacts import level1_base
from dse.models.artifact import Artifact, FittedModel
from dse.resources import surrogates_dir


@pytest.fixture(scope="module")
def shipped() -> Artifact:
    folder = surrogates_dir() / "a100_sxm"
    if not (folder / "manifest.json").is_file():
        pytest.skip("shipped a100_sxm artifact absent")
    return Artifact.load(folder)


def test_partial_run_builds_levels_2_3_on_kept_and_refitted_level1(shipped: Artifact) -> None:
    layer_op = shipped.model("layer_op.vidur")
    refitted = [FittedModel("layer_op.vidur", layer_op)]
    base, rest = level1_base("a100_sxm", refitted, shipped, "")
    assert rest == []  # merged into the base, nothing left to add
    assert base is not None
    gemm = [n for n in shipped.names() if n.startswith("gemm.")]
    assert gemm and all(base.has(n) for n in gemm)  # the kept GEMM tables price Level 1
    assert base.has("power") == shipped.has("power")
    assert not any(n.startswith(("level2.", "level3.")) for n in base.models)
    # this run's model stands in the place of the kept one
    assert base.model("layer_op.vidur").to_state().keys() == layer_op.to_state().keys()


def test_whole_run_builds_on_its_own_level1_only(shipped: Artifact) -> None:
    refitted = [FittedModel("layer_op.vidur", shipped.model("layer_op.vidur"))]
    base, rest = level1_base("a100_sxm", refitted, None, "")
    assert base is not None and sorted(base.models) == ["layer_op.vidur"]
    assert rest == refitted


def test_only_this_family_without_an_artifact_uses_the_shipped_level1() -> None:
    if not (surrogates_dir() / "a100_sxm" / "manifest.json").is_file():
        pytest.skip("shipped a100_sxm artifact absent")
    base, rest = level1_base("a100_sxm", [], None, "")
    assert base is not None and rest == []
    assert any(n.startswith("gemm.") for n in base.models)


def test_dse_fit_warns_when_levels_2_3_are_carried_over_a_refitted_level1() -> None:
    from dse.commands.fit import stale_levels_note

    carried = ["gemm.vllm.bfloat16", "level2.ffn_dense", "level3.e2e"]
    note = stale_levels_note(["layer_op"], carried)
    assert "level3.e2e" in note and "--only layer_op --only hymell-levels-2-3" in note
    assert stale_levels_note(["layer_op", "hymell-levels-2-3"], ["gemm.vllm.bfloat16"]) == ""
    assert stale_levels_note(None, []) == ""  # a whole fit carries nothing over
    assert stale_levels_note(["gemm"], ["layer_op.vidur"]) == ""  # no Levels 2-3 to go stale


def test_refitting_level1_over_another_chips_kernels_is_refused(data_dir, tmp_path) -> None:
    """An artifact whose Level-1 models came from another chip (GH200's, from H200) refits its
    Levels 2-3 only: a Level-1 family fitted for it on top would mix two chips' kernels."""
    from dse.errors import DataError
    from dse.fitting.run import fit_artifact

    gh200 = surrogates_dir() / "gh200"
    if not (gh200 / "manifest.json").is_file():
        pytest.skip("no shipped gh200 artifact")
    keep = Artifact.load(gh200)
    assert keep.level1_gpu == "h200_sxm" and keep.gpu == "gh200"
    with pytest.raises(DataError, match="would mix two chips' kernels"):
        fit_artifact(data_dir, "gh200", only=["reduction"], keep=keep, log=lambda _: None)
