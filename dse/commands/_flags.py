"""Architecture flags shared by `dse arch`, `dse energy` and `dse predict` (each overrides the
field of a catalogue model or a Hugging Face config)."""

from __future__ import annotations

import argparse

ARCH_FLAGS: dict[str, type] = {
    "d_model": int,
    "n_layers": int,
    "n_heads": int,
    "n_kv_heads": int,
    "head_dim": int,
    "d_ff": int,
    "vocab_size": int,
    "n_experts": int,
    "top_k": int,
    "d_ff_expert": int,
    "shared_expert_d_ff": int,
    "weight_dtype": str,
    "kv_dtype": str,
}


def add_arch_flags(group: argparse._ArgumentGroup, flags: dict[str, type] = ARCH_FLAGS) -> None:
    """--d-model, --n-heads, ... : one flag per field, dest the field name, default None."""
    for name, typ in flags.items():
        group.add_argument(f"--{name.replace('_', '-')}", dest=name, type=typ)
