"""Readers of measured-data layouts -> tidy pandas tables with SI units in the column names.

`load(root)` reads every source found under a folder laid out like `../shared/data` and returns
one table per kind (gemm, context_attention, generation_attention, moe, allreduce, layer_op, e2e,
e2e_energy, serving_energy, splitwise, softmax, layernorm, gelu, and the MLA kinds context_mla,
generation_mla, context_mla_module, generation_mla_module); each `read_<source>(root)` reads one
source. Every table starts with `COMMON_COLUMNS`. Schema and row counts: docs/data.md.
"""

from __future__ import annotations

from dse.data._aiconfigurator import read_aiconfigurator
from dse.data._argonne import read_argonne
from dse.data._common import COMMON_COLUMNS, normalise_gpu
from dse.data._linear_layers import floor_s as linear_layer_floor_s
from dse.data._llmcompass import read_llmcompass
from dse.data._load import KINDS, MLA_KINDS, READERS, SOURCE_KINDS, load
from dse.data._ml_energy import read_ml_energy
from dse.data._splitwise import read_splitwise
from dse.data._vidur import read_vidur, vidur_gpu

__all__ = [
    "COMMON_COLUMNS",
    "KINDS",
    "MLA_KINDS",
    "READERS",
    "SOURCE_KINDS",
    "linear_layer_floor_s",
    "load",
    "normalise_gpu",
    "read_aiconfigurator",
    "read_argonne",
    "read_llmcompass",
    "read_ml_energy",
    "read_splitwise",
    "read_vidur",
    "vidur_gpu",
]
