"""`load`: every reader over one data root, tables concatenated per kind."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import pandas as pd

from dse.data import _common as c
from dse.data._aiconfigurator import read_aiconfigurator
from dse.data._argonne import read_argonne
from dse.data._llmcompass import read_llmcompass
from dse.data._ml_energy import read_ml_energy
from dse.data._splitwise import read_splitwise
from dse.data._vidur import read_vidur
from dse.errors import DataError
from dse.spec.hardware import register_folder_spec

# DeepSeek-V3 latent attention (aiconfigurator): the kernels, and the modules with projections.
MLA_KINDS: tuple[str, ...] = (
    "context_mla",
    "generation_mla",
    "context_mla_module",
    "generation_mla_module",
)

Reader = Callable[[Path | str], dict[str, pd.DataFrame]]

# source name -> reader; a reader returns {} when its folder is absent.
READERS: dict[str, Reader] = {
    "aiconfigurator": read_aiconfigurator,
    "vidur": read_vidur,
    "argonne": read_argonne,
    "ml-energy-v2": read_ml_energy,
    "splitwise": read_splitwise,
    "llmcompass": read_llmcompass,
}

# The kinds each source can produce (lets `load(kinds=...)` skip whole sources).
SOURCE_KINDS: dict[str, frozenset[str]] = {
    "aiconfigurator": frozenset(
        {
            "gemm",
            "context_attention",
            "generation_attention",
            "moe",
            "allreduce",
            *MLA_KINDS,
            "linear_layer",
        }
    ),
    "vidur": frozenset({"layer_op", "allreduce"}),
    "argonne": frozenset({"e2e", "e2e_energy", "e2e_ttft"}),
    "ml-energy-v2": frozenset({"serving_energy"}),
    "splitwise": frozenset({"splitwise"}),
    "llmcompass": frozenset({"gemm", "softmax", "layernorm", "gelu"}),
}

# Every kind a reader can produce (the validate/fit contract).
KINDS: tuple[str, ...] = (
    "gemm",
    "context_attention",
    "generation_attention",
    "moe",
    "allreduce",
    "linear_layer",
    "layer_op",
    "e2e",
    "e2e_energy",
    "e2e_ttft",
    "serving_energy",
    "splitwise",
    "softmax",
    "layernorm",
    "gelu",
    *MLA_KINDS,
)


def load(root: Path | str, kinds: Iterable[str] | None = None) -> dict[str, pd.DataFrame]:
    """Read every source found under `root` into tidy tables keyed by kind.

    Missing source folders are skipped; a malformed file raises DataError naming it. `kinds`
    restricts the result (unknown kind names are an error).
    """
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"{root}: data folder not found")
    # a `dse profile` folder carries the spec of its (possibly unregistered) GPU: the readers'
    # unit checks and the fit need it
    register_folder_spec(root)
    wanted = None if kinds is None else list(kinds)
    if wanted is not None:
        unknown = [k for k in wanted if k not in KINDS]
        if unknown:
            raise DataError(f"unknown data kind(s) {unknown}; valid kinds: {', '.join(KINDS)}")
    per_kind: dict[str, list[pd.DataFrame]] = {}
    for source, reader in READERS.items():
        if wanted is not None and not SOURCE_KINDS[source] & set(wanted):
            continue
        got = read_aiconfigurator(root, wanted) if source == "aiconfigurator" else reader(root)
        for kind, table in got.items():
            if wanted is None or kind in wanted:
                per_kind.setdefault(kind, []).append(table)
    return c.merge_kinds(per_kind)
