"""The fitted models of HYMELL, one class per file, and the table that finds a class by the
`kind` an artifact's manifest records (issue 23)."""

from __future__ import annotations

import importlib

from dse.errors import ArtifactError

# Model kind (as a manifest records it) -> "module:Class". An explicit table: loading an artifact
# imports the module of each kind it holds, and nothing registers itself on import. The class
# paths manifests record are for the reader; loading goes by kind (tests/models/test_artifact_kinds.py).
MODEL_CLASSES: dict[str, str] = {
    "allreduce": "dse.models.allreduce:AllReduceModel",
    "collective": "dse.models.allreduce:CollectiveModel",
    "context_attention": "dse.models.attention:ContextAttentionModel",
    "generation_attention": "dse.models.attention:GenerationAttentionModel",
    "gemm": "dse.models.gemm:GemmModel",
    "layer_op": "dse.models.layer_ops:LayerOpModel",
    "reduction_op": "dse.models.reductions:ReductionOpModel",
    "level2_block": "dse.models.level2:Level2Block",
    "level3_e2e": "dse.models.level3:Level3",
    "level3_power": "dse.models.level3_power:Power3",
    "linear_layer": "dse.models.linear_layers:LinearLayerModel",
    "moe": "dse.models.moe:MoEModel",
    "moe_physics": "dse.models.moe_physics:MoEModel",
    "moe_kernels": "dse.models.moe_kernels:KernelMoEModel",
    "context_mla": "dse.models.mla:ContextMLAModel",
    "generation_mla": "dse.models.mla:GenerationMLAModel",
    "power": "dse.models.power:PowerModel",
}


def class_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def model_class(kind: str, path: str | None = None) -> type:
    """The class of model `kind` (MODEL_CLASSES), its module imported on first use. `path`, the
    class a manifest recorded, is only judged when the kind is unknown (never imported)."""
    where = MODEL_CLASSES.get(kind)
    if where is None:
        if path and not path.split(":", 1)[0].startswith("dse."):
            raise ArtifactError(f"model class {path!r} is outside the dse package; refusing it")
        raise ArtifactError(
            f"unknown model kind {kind!r}; known kinds: {', '.join(sorted(MODEL_CLASSES))}. "
            "Upgrade dse or re-fit the artifact with `dse fit`"
        )
    module, _, name = where.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as exc:
        raise ArtifactError(
            f"model kind {kind!r} needs module {module!r}, which cannot be imported ({exc}); "
            "upgrade dse or re-fit the artifact with `dse fit`"
        ) from None
