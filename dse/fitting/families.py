"""Every model family `dse fit` runs and `dse validate` scores, in fitting order: one explicit
table (`FAMILIES`); nothing registers itself on import.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from dse.fitting import (
    allreduce,
    attention,
    layer_ops,
    level2,
    level3,
    linear_layers,
    mla,
    moe,
    reductions,
)
from dse.fitting.bands import BandTable
from dse.fitting.gemm import fit_gemm_family, gemm_band_tables, predict_gemm_rows
from dse.fitting.power import fit_power_family
from dse.models.artifact import Artifact, FittedModel
from dse.models.reductions import LLMCOMPASS_OPS


@dataclass(frozen=True)
class Family:
    """A group of models fitted together by `dse fit` and scored by `dse validate`.

    fit(ctx) -> list[FittedModel]: `ctx` is a `dse.fitting.context.FitContext` (gpu, seed,
      `ctx.table(kind)` = `dse.data.load` rows of that kind for ALL GPUs, `ctx.fitted` = the
      models fitted earlier in this run). Return [] when there is no data for ctx.gpu.
    predict_rows(artifact, kind, rows) -> DataFrame aligned with rows, with float columns
      `latency_pred_s` and `energy_pred_j` (NaN = cannot predict that row; it is counted).
      Optional columns: `latency_lo_s` / `latency_hi_s` (the row's band, NaN: none),
      `band_model` (the model whose band it is) and `band_held_out` (that band's coverage on
      held-out layouts, NaN: not measured).
    validates: the data kinds `predict_rows` handles. order: lower fits first.
    band_tables(ctx) -> list[BandTable]: the held-out CV table of every model of the family in
      the artifact `ctx.keep` (`dse fit --bands-only`: the family's own CV, rerun to calibrate
      the bands of an artifact without refitting it; `dse.fitting.band_calibration`).
    """

    name: str
    fit: Callable[[Any], list[FittedModel]]
    predict_rows: Callable[[Artifact, str, pd.DataFrame], pd.DataFrame] | None = None
    validates: tuple[str, ...] = ()
    order: int = 100
    band_tables: Callable[[Any], list[BandTable]] | None = None


# Every model family `dse fit` runs and `dse validate` scores (for its `validates` kinds), in
# fitting order.
FAMILIES: tuple[Family, ...] = (
    Family("power", fit_power_family, order=10),
    Family("gemm", fit_gemm_family, predict_gemm_rows, ("gemm",), 20, gemm_band_tables),
    Family(
        "layer_op",
        layer_ops.fit_layer_op_family,
        layer_ops.predict_layer_op_rows,
        ("layer_op",),
        order=30,
        band_tables=layer_ops.layer_op_band_tables,
    ),
    Family(
        "reduction",
        reductions.fit_reduction_family,
        reductions.predict_reduction_rows,
        LLMCOMPASS_OPS,
        order=31,
        band_tables=reductions.reduction_band_tables,
    ),
    Family(
        "allreduce",
        allreduce.fit_allreduce_family,
        allreduce.predict_allreduce_rows,
        ("allreduce",),
        order=32,
        band_tables=allreduce.allreduce_band_tables,
    ),
    Family(
        "attention",
        attention.fit_attention_family,
        attention.predict_attention_rows,
        ("context_attention", "generation_attention"),
        order=40,
        band_tables=attention.attention_band_tables,
    ),
    Family(
        "moe",
        moe.fit_moe_family,
        moe.predict_moe_rows,
        ("moe",),
        order=41,
        band_tables=moe.moe_band_tables,
    ),
    Family(
        "mla",
        mla.fit_mla_family,
        mla.predict_mla_rows,
        ("context_mla", "generation_mla"),
        order=42,
        band_tables=mla.mla_band_tables,
    ),
    Family(
        linear_layers.FAMILY,
        linear_layers.fit_linear_family,
        linear_layers.predict_linear_rows,
        (linear_layers.KIND,),
        order=43,
        band_tables=linear_layers.linear_band_tables,
    ),
    Family(
        level3.FAMILY,
        level3._family_fit,
        level3._family_predict_rows,
        ("e2e", "e2e_energy", "e2e_ttft", "serving_energy"),
        order=900,
        band_tables=level2.level2_band_tables,  # Level 3 has its own band (`dse.models.level3`)
    ),
)


def families() -> list[Family]:
    """The model families in fitting order."""
    return sorted(FAMILIES, key=lambda f: (f.order, f.name))
