"""Artifacts a fit works with: a transient artifact of the models fitted so far, the merge of two,
the Level-1 base of an artifact and an artifact without its Levels 2-3.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dse.models.artifact import Artifact, FittedModel

# ---------------------------------------------------------------------------- artifacts
LEVEL_PREFIXES = ("level2.", "level3.")  # names of the models of the Levels 2-3 family


def transient_artifact(gpu: str, fitted: list[FittedModel]) -> Artifact:
    """An in-memory artifact of models fitted earlier in a run (no file hashing, no id)."""
    models = {fm.name: {k: np.asarray(v) for k, v in fm.model.to_state().items()} for fm in fitted}
    entries = {
        fm.name: {
            "kind": type(fm.model).kind,
            "class": f"{type(fm.model).__module__}:{type(fm.model).__qualname__}",
            "fitted_range": {k: list(v) for k, v in fm.model.fitted_range().items()},
        }
        for fm in fitted
    }
    manifest = {"artifact_id": "unsaved", "gpu": gpu, "models": entries}
    return Artifact(manifest=manifest, models=models)


def merge(
    base: Artifact | None, gpu: str, fitted: list[FittedModel], data_root: str | Path
) -> Artifact:
    """`base` with the models in `fitted` added or replaced (same names), manifest merged."""
    new = Artifact.from_fitted(gpu, fitted, data_root=data_root)
    if base is None:
        return new
    models = {k: v for k, v in base.models.items() if k not in new.models}
    models.update(new.models)
    manifest = dict(base.manifest)
    entries = {k: v for k, v in base.manifest["models"].items() if k not in new.models}
    entries.update(new.manifest["models"])
    manifest["models"] = entries
    seen = {f["path"] for f in manifest.get("data_files", [])}
    manifest["data_files"] = list(manifest.get("data_files", [])) + [
        f for f in new.manifest["data_files"] if f["path"] not in seen
    ]
    manifest["libraries"] = new.manifest["libraries"]
    return Artifact(manifest=manifest, models=models)


def level1_base(
    gpu: str, earlier: list[FittedModel], keep: Artifact | None, root: str | Path
) -> tuple[Artifact | None, list[FittedModel]]:
    """The Level-1 models Levels 2-3 are fitted on, and the fitted models still to be merged.

    A whole `dse fit` run: the Level-1 models fitted earlier in it (`earlier`). A partial run
    (`dse fit --only ...` over an existing artifact, `keep`): the kept artifact's Level-1 models
    with this run's refitted families in their place. Levels 2-3 must see every Level-1 model
    the artifact will predict with (GEMM, power, ...), or Level 3 learns to correct operators
    priced by the roofline stand-in that the saved artifact then prices with its fitted models.
    `--only` this family alone with no artifact at the output: the shipped one's Level 1."""
    if keep is None and not earlier:
        from dse.resources import surrogates_dir

        folder = surrogates_dir() / gpu
        keep = Artifact.load(folder) if (folder / "manifest.json").is_file() else None
    kept = without_levels(keep, LEVEL_PREFIXES)
    if kept is None or not kept.models:
        return (transient_artifact(gpu, earlier) if earlier else None), earlier
    return (merge(kept, gpu, earlier, root) if earlier else kept), []


def without_levels(art: Artifact | None, prefixes: tuple[str, ...]) -> Artifact | None:
    """A view of `art` without the models whose names start with any of `prefixes`."""
    if art is None:
        return None
    keep = [n for n in art.models if not n.startswith(prefixes)]
    return Artifact(
        manifest={**art.manifest, "models": {n: art.manifest["models"][n] for n in keep}},
        models={n: art.models[n] for n in keep},
    )
