"""Model classes are an explicit table (issue 23): artifact.MODEL_CLASSES maps each kind to its
class, each class declares the same kind, and the shipped artifacts load by kind."""

from __future__ import annotations

import json

import pytest

from dse.models import MODEL_CLASSES, model_class
from dse.models.artifact import Artifact
from dse.resources import shipped


@pytest.mark.parametrize("kind", sorted(MODEL_CLASSES))
def test_each_kind_names_a_class_that_declares_it(kind: str) -> None:
    cls = model_class(kind)
    assert cls.kind == kind
    assert f"{cls.__module__}:{cls.__qualname__}" == MODEL_CLASSES[kind]
    for method in ("predict", "to_state", "from_state"):
        assert callable(getattr(cls, method, None)), (kind, method)


@pytest.mark.parametrize("gpu", ["h100_sxm", "h200_sxm", "a100_sxm"])
def test_shipped_artifacts_hold_only_known_kinds_and_load_every_model(gpu: str) -> None:
    folder = shipped("surrogates") / gpu
    manifest = json.loads((folder / "manifest.json").read_text())
    kinds = {m["kind"] for m in manifest["models"].values()}
    assert kinds <= set(MODEL_CLASSES), kinds - set(MODEL_CLASSES)
    art = Artifact.load(folder)
    for name, entry in manifest["models"].items():
        assert type(art.model(name)).kind == entry["kind"], name
