"""Flags shared by `dse arch`, `dse energy` and `dse predict`, checked by the field table.

Every numeric or choice flag is read as text and checked by `dse.spec.fields.check` when the command
runs, so a bad value gets the project's one message form, `--batch-size: must be an integer in
[1, 1048576], got 0`, exit code 2 and no traceback (argparse's own `type=int` would print
"invalid int value" with no rule). Each flag overrides the field of a catalogue model or a
Hugging Face config.
"""

from __future__ import annotations

import argparse
from typing import Any

from dse.spec import fields as F

# Architecture fields settable by flag in every command.
ARCH_FLAGS: tuple[str, ...] = (
    "d_model",
    "n_layers",
    "n_heads",
    "n_kv_heads",
    "head_dim",
    "d_ff",
    "vocab_size",
    "n_experts",
    "top_k",
    "d_ff_expert",
    "shared_expert_d_ff",
    "weight_dtype",
    "kv_dtype",
    # attention families (docs/architecture.md "Attention families"); the pattern as its text,
    # `--attention-pattern sliding*3,full`
    "attention_pattern",
    "sliding_window",
    "kv_lora_rank",
    "q_lora_rank",
    "qk_rope_head_dim",
    "qk_nope_head_dim",
    "v_head_dim",
    "linear_kind",
    "linear_n_heads",
    "linear_head_dim",
    "linear_n_groups",
    "linear_state_dim",
    "linear_conv_width",
    "n_dense_layers",
    # hybrids: `--ffn-pattern none,ffn` (Nemotron-H), `--linear-norm false` (Falcon-H1),
    # `--rope false` (attention without position encoding: Nemotron-H, Jamba)
    "ffn_pattern",
    "linear_norm",
    "rope",
)
WORKLOAD_FLAGS: tuple[str, ...] = (
    "batch_size",
    "prompt_tokens",
    "output_tokens",
    "tensor_parallel",
)

_FLAG_NAMES = "_field_flags"  # Namespace attribute: field name -> the flag that sets it


def flag_name(name: str) -> str:
    return f"--{name.replace('_', '-')}"


def add_field_flags(
    group: argparse._ArgumentGroup,
    names: tuple[str, ...] | list[str],
    *,
    defaults: dict[str, Any] | None = None,
    aliases: dict[str, tuple[str, ...]] | None = None,
    helps: dict[str, str] | None = None,
) -> None:
    """One flag per field (dest the field name), read as text and checked later by `read_flags`.

    `aliases` gives the option strings of a field (the first is the one messages name), e.g.
    {"tensor_parallel": ("--tp",)}; `defaults` the value when the flag is absent (default None:
    the field is left to the model, the config or `dse.spec.columns.DEFAULTS`).
    """
    defaults = defaults or {}
    aliases = aliases or {}
    helps = helps or {}
    for name in names:
        f = F.field(name)
        opts = aliases.get(name, (flag_name(name),))
        default = defaults.get(name)
        text = f.describe(default)
        if name in helps:
            text = f"{helps[name]}: {text}"
        group.add_argument(
            *opts,
            dest=name,
            default=default,
            metavar=_metavar(f),
            help=text.replace("%", "%%"),
        )
        _register(group, name, opts[0])


def _metavar(f: F.Field) -> str:
    if f.kind == "choice":
        return "NAME"
    if f.kind == "pattern":
        return "KINDS"
    if f.kind == "bool":
        return "BOOL"
    if f.kind == "version":
        return "VERSION"
    return "N" if f.kind == "int" else "X"


def _register(group: argparse._ArgumentGroup, name: str, flag: str) -> None:
    # Argument groups share their parser's defaults, so this lands on the subcommand's Namespace.
    parser = group._defaults  # type: ignore[attr-defined]
    table = parser.setdefault(_FLAG_NAMES, {})
    table[name] = flag


def flag_of(args: argparse.Namespace, name: str) -> str:
    """The flag that sets field `name` in this command (as messages name it)."""
    return getattr(args, _FLAG_NAMES, {}).get(name, flag_name(name))


def read_flag(args: argparse.Namespace, name: str) -> Any:
    """The checked value of one field flag (None when absent)."""
    raw = getattr(args, name, None)
    if raw is None:
        return None
    return F.check(name, raw, flag_of(args, name))


def read_flags(args: argparse.Namespace, names: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """Checked values of the field flags that were given (or defaulted), by field name."""
    out: dict[str, Any] = {}
    for name in names:
        v = read_flag(args, name)
        if v is not None:
            out[name] = v
    return out


def given(args: argparse.Namespace, names: tuple[str, ...] | list[str]) -> list[str]:
    """The flags among `names` (field names) that the user gave."""
    return [flag_of(args, n) for n in names if getattr(args, n, None) is not None]


def conflict(first: str, second: str, value: Any, why: str) -> Exception:
    """`--second: cannot be combined with --first (why), got value`."""
    from dse.errors import ConfigError

    shown = F.show(F.number_or_text(value))
    return ConfigError(f"{second}: cannot be combined with {first} ({why}), got {shown}")
