"""The one artifact finder of the predictor: the frozen artifact of a GPU, or of the GPU that
stands in for it (`dse.spec.stand_ins` "artifact"), read from `resources.surrogates_dir()`
and cached per process; and the artifact of its sibling chip stored next to it ("gemm_tables").
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from dse.errors import ArtifactError
from dse.models.artifact import Artifact
from dse.resources import surrogates_dir
from dse.spec.stand_ins import lender


# ---------------------------------------------------------------------------- artifacts
@cache
def _load_cached(path: str) -> Artifact | None:
    p = Path(path)
    if not (p / "manifest.json").is_file():
        return None
    return Artifact.load(p)


def load_artifact(gpu: str) -> tuple[Artifact | None, str]:
    """The frozen artifact for `gpu` (or its sibling chip's) and the GPU its Level-1 models were
    fitted on (`Artifact.level1_gpu`); (None, "") when there is none. Loaded once per process."""
    return _load_for(str(surrogates_dir()), gpu)


@cache
def _load_for(root: str, gpu: str) -> tuple[Artifact | None, str]:
    """`load_artifact` under the surrogates folder `root` (cached like `_load_cached`: a
    one-configuration call pays no path arithmetic)."""
    for name in (gpu, lender("artifact", gpu)):  # a GPU without one: the same die's
        if name:
            art = _load_cached(str(Path(root) / name))
            if art is not None:
                return art, art.level1_gpu
    return None, ""


def resolve_artifact(gpu: str, artifact: Artifact | str | None) -> tuple[Artifact | None, str]:
    """The artifact a prediction for `gpu` uses and the GPU it was fitted for: any string
    ("auto") finds the frozen one (`load_artifact`), an Artifact is used as given, None is the
    roofline (fitted for `gpu` itself)."""
    if isinstance(artifact, str):
        return load_artifact(gpu)
    return artifact, artifact.level1_gpu if artifact is not None else gpu


@cache
def _sibling_at(folder: str, stamp: int) -> Artifact | None:
    """The artifact in `folder` (None if absent or unreadable); `stamp` (the manifest's mtime)
    keys the cache so a refitted folder is read again."""
    try:
        return Artifact.load(Path(folder))
    except ArtifactError:
        return None


def sibling_artifact(artifact: Artifact) -> Artifact | None:
    """The artifact of `artifact`'s sibling chip (dse.spec.stand_ins "gemm_tables") stored next to it,
    or None."""
    name = lender("gemm_tables", artifact.gpu)
    if not name or artifact.path is None:
        return None
    folder = Path(artifact.path).parent / name
    try:
        stamp = (folder / "manifest.json").stat().st_mtime_ns
    except OSError:
        return None
    return _sibling_at(str(folder), stamp)


# manifest keys of a model fitted on rows of other GPUs than its artifact's (`dse.spec.stand_ins`:
# layer ops, Levels 2-3 and the power model)
_ROWS_FROM = ("rows_from_gpus", "fitted_on_gpus", "fitted_on_gpu")


def fitted_elsewhere(artifact: Artifact | None) -> dict[str, tuple[str, ...]]:
    """GPU -> the models of `artifact` fitted on that other GPU's rows (stand-ins: its manifest
    says so per model), both sorted; {} for the roofline or an artifact fitted on its own rows."""
    if artifact is None:
        return {}
    out: dict[str, list[str]] = {}
    for name, entry in sorted((artifact.manifest.get("models") or {}).items()):
        for key in _ROWS_FROM:
            got = entry.get(key)
            gpus = [got] if isinstance(got, str) else list(got or [])
            for g in sorted(set(gpus) - {artifact.gpu}):
                out.setdefault(str(g), []).append(name)
            if got:
                break
    return {g: tuple(v) for g, v in sorted(out.items())}
