"""Readers of measured-data layouts (aiconfigurator, vidur, argonne, ml-energy, splitwise,
llmcompass) -> tidy pandas tables with SI units in the column names. See docs/data.md."""

from __future__ import annotations

from dse.data._aiconfigurator import read_aiconfigurator
from dse.data._common import COMMON_COLUMNS, normalise_gpu
from dse.data._load import KINDS, READERS, load

__all__ = [
    "COMMON_COLUMNS",
    "KINDS",
    "READERS",
    "load",
    "normalise_gpu",
    "read_aiconfigurator",
]
