"""Inert fields: values a configuration ignores, so that configurations differing only there
are one configuration.

A field is inert in a configuration when no quantity computed from it (validity, parameters,
FLOPs, memory, every prediction and estimate) depends on its value there:

- `n_kv_heads` with MLA (`kv_lora_rank > 0`): every head reads the one cached latent;
- `sliding_window` when the attention_pattern has no sliding layer;
- the linear-layer fields (`linear_kind`, `linear_n_heads`, `linear_head_dim`,
  `linear_n_groups`, `linear_state_dim`, `linear_conv_width`, `linear_norm`) when it has no
  linear layer, and `linear_n_groups` for Mamba-1 (its B and C are not grouped);
- the expert fields of a dense model (`n_experts` 1): `d_ff_expert`, `shared_expert_d_ff`,
  `shared_expert_gate`, `n_dense_layers`;
- `rope` when it has no GQA attention layer: no full or sliding layer (every mixer linear or
  none), or MLA (its decoupled RoPE part is `qk_rope_head_dim`).

Whether a field is inert depends only on fields that are not inert in that configuration, so
the configurations that differ from one another only in inert fields are all the combinations
of those fields' values (what `dse.sweep` counts as one configuration: `inert_masks` here,
tests/spec/test_inert.py checks every prediction equal across such a set). A search space that
crosses `kv_lora_rank {0, 512}` with `n_kv_heads {8, 32}` has three configurations, not four.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from dse._same import equals
from dse.spec import pattern as P

LINEAR_FIELDS: tuple[str, ...] = (
    "linear_kind",
    "linear_n_heads",
    "linear_head_dim",
    "linear_n_groups",
    "linear_state_dim",
    "linear_conv_width",
    "linear_norm",
)
EXPERT_FIELDS: tuple[str, ...] = (
    "d_ff_expert",
    "shared_expert_d_ff",
    "shared_expert_gate",
    "n_dense_layers",
)
# Every field that can be inert, and the fields that decide whether it is.
INERT_FIELDS: tuple[str, ...] = (
    "n_kv_heads",
    "sliding_window",
    *LINEAR_FIELDS,
    *EXPERT_FIELDS,
    "rope",
)
DECIDING_FIELDS: tuple[str, ...] = ("kv_lora_rank", "attention_pattern", "linear_kind", "n_experts")


def inert_masks(cols: Mapping[str, Any], n: int) -> dict[str, np.ndarray]:
    """Where each field of `INERT_FIELDS` is inert (True), for n configurations.

    `cols` may hold typed columns (`dse.spec.columns.as_columns`), a table's columns as read
    back (numbers as floats or text, None / NaN where missing) or scalars; a missing column
    takes its field's default."""
    mla = _number(cols.get("kv_lora_rank"), 0.0, n) > 0
    pattern = _text(cols.get("attention_pattern"), P.FULL, n)
    _, full, sliding, linear, _ = (np.broadcast_to(c, (n,)) for c in P.counts(pattern))
    no_sliding, no_linear = sliding == 0, linear == 0
    mamba1 = equals(_text(cols.get("linear_kind"), "", n), "mamba1")
    dense = ~(_number(cols.get("n_experts"), 1.0, n) > 1)
    out = {"n_kv_heads": mla, "sliding_window": no_sliding}
    out.update({name: no_linear for name in LINEAR_FIELDS})
    out["linear_n_groups"] = no_linear | mamba1
    out.update({name: dense for name in EXPERT_FIELDS})
    out["rope"] = mla | ((full + sliding) == 0)  # no GQA attention layer
    return out


def _number(v: Any, default: float, n: int) -> np.ndarray:
    """A column as floats: the default where missing, NaN where not a number."""
    if v is None:
        return np.full(n, default)
    a = np.broadcast_to(np.asarray(v), (n,)) if np.ndim(v) == 0 else np.asarray(v)
    if a.dtype.kind in "biuf":
        x = a.astype(float)
        return np.where(np.isnan(x), default, x) if a.dtype.kind == "f" else x
    uniq, inv = np.unique(a.astype(str), return_inverse=True)
    return np.array([_one_number(u, default) for u in uniq], dtype=float)[inv.reshape(-1)]


def _one_number(text: str, default: float) -> float:
    if text in ("None", "nan", ""):
        return default
    try:
        return float(text)
    except ValueError:
        return float("nan")


def _text(v: Any, default: str, n: int) -> np.ndarray:
    """A column as text: the default where missing (None, NaN)."""
    if v is None:
        return np.full(n, default)
    a = np.broadcast_to(np.asarray(v), (n,)) if np.ndim(v) == 0 else np.asarray(v)
    if a.dtype.kind in "US":
        return a.astype(str)
    return np.array(
        [default if x is None or (isinstance(x, float) and x != x) else str(x) for x in a.tolist()]
    )
