"""Every model family `dse fit` runs and `dse validate` scores, in fitting order: one explicit
table (`FAMILIES`); nothing registers itself on import.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from dse.fitting import allreduce, attention, layer_ops, level3, moe, reductions
from dse.fitting.gemm import fit_gemm_family, predict_gemm_rows
from dse.fitting.power import fit_power_family
from dse.models.artifact import Artifact, FittedModel
from dse.models.reductions import LLMCOMPASS_OPS


@dataclass(frozen=True)
class Family:
    """A group of models fitted together by `dse fit` and scored by `dse validate`.

    fit(ctx) -> list[FittedModel]: `ctx` is a `dse.fitting.run.FitContext` (gpu, seed,
      `ctx.table(kind)` = `dse.data.load` rows of that kind for ALL GPUs, `ctx.fitted` = the
      models fitted earlier in this run). Return [] when there is no data for ctx.gpu.
    predict_rows(artifact, kind, rows) -> DataFrame aligned with rows, with float columns
      `latency_pred_s` and `energy_pred_j` (NaN = cannot predict that row; it is counted).
    validates: the data kinds `predict_rows` handles. order: lower fits first.
    """

    name: str
    fit: Callable[[Any], list[FittedModel]]
    predict_rows: Callable[[Artifact, str, pd.DataFrame], pd.DataFrame] | None = None
    validates: tuple[str, ...] = ()
    order: int = 100


# Every model family `dse fit` runs and `dse validate` scores (for its `validates` kinds), in
# fitting order.
FAMILIES: tuple[Family, ...] = (
    Family("power", fit_power_family, order=10),
    Family("gemm", fit_gemm_family, predict_gemm_rows, ("gemm",), order=20),
    Family(
        "layer_op",
        layer_ops.fit_layer_op_family,
        layer_ops.predict_layer_op_rows,
        ("layer_op",),
        order=30,
    ),
    Family(
        "reduction",
        reductions.fit_reduction_family,
        reductions.predict_reduction_rows,
        LLMCOMPASS_OPS,
        order=31,
    ),
    Family(
        "allreduce",
        allreduce.fit_allreduce_family,
        allreduce.predict_allreduce_rows,
        ("allreduce",),
        order=32,
    ),
    Family(
        "attention",
        attention.fit_attention_family,
        attention.predict_attention_rows,
        ("context_attention", "generation_attention"),
        order=40,
    ),
    Family("moe", moe.fit_moe_family, moe.predict_moe_rows, ("moe",), order=41),
    Family(
        level3.FAMILY,
        level3._family_fit,
        level3._family_predict_rows,
        ("e2e", "e2e_energy", "e2e_ttft", "serving_energy"),
        order=900,
    ),
)


def families() -> list[Family]:
    """The model families in fitting order."""
    return sorted(FAMILIES, key=lambda f: (f.order, f.name))
