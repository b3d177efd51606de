"""Per-layer attention patterns: which layers are full attention, sliding window or linear.

A pattern is a short list of layer kinds repeated over the model's layers, written in YAML as
`attention_pattern: [sliding, sliding, sliding, full]` (3:1 sliding:full) and carried in
configuration columns as its canonical text, `"sliding*3,full"` (a kind, optionally `*count`,
comma-separated, runs merged). The default `"full"` is every existing architecture: all layers
full attention. The pattern's length must divide n_layers (`dse.spec.arch` checks it); the
accounting only needs how many layers of each kind there are (`layer_counts`), since every
per-layer quantity is a sum over layers and the order does not change a sum.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

# full: causal attention over the whole context; sliding: over the last `sliding_window`
# tokens only (Mistral, Gemma 2/3, gpt-oss); linear: a linear-attention / state-space layer
# with a constant-size state (Qwen3-Next's Gated DeltaNet, Mamba-2 in Bamba).
LAYER_KINDS: tuple[str, ...] = ("full", "sliding", "linear")
FULL = "full"
# Hugging Face `layer_types` names (transformers 5) -> our kinds.
HF_LAYER_TYPES: dict[str, str] = {
    "full_attention": "full",
    "sliding_attention": "sliding",
    "linear_attention": "linear",
    "mamba": "linear",
}
RULE = "must be a list of full, sliding, linear (each optionally kind*count)"


def expand(raw: Any) -> list[str] | None:
    """The list of layer kinds of a pattern given as a list or a text ('sliding*3,full'), or
    None when it is not one (an unknown kind, a bad count, an empty list)."""
    if isinstance(raw, np.ndarray):
        raw = raw.tolist()
    if isinstance(raw, str):
        items: Sequence[Any] = [p for p in raw.replace(" ", "").split(",")]
    elif isinstance(raw, list | tuple):
        items = raw
    else:
        return None
    out: list[str] = []
    # A list item may itself be a text of several kinds ('sliding*3,full'): a one-row column
    # of a pattern's text ([text], as `dse predict` builds its one configuration) is that text.
    parts = [
        p
        for item in items
        for p in (item.replace(" ", "").split(",") if isinstance(item, str) else [item])
    ]
    for item in parts:
        if not isinstance(item, str):
            return None
        kind, _, count = item.strip().partition("*")
        if kind not in LAYER_KINDS:
            return None
        if count:
            if not count.isdigit() or int(count) < 1 or int(count) > 1024:
                return None
            out.extend([kind] * int(count))
        else:
            out.append(kind)
    return out or None


def canonical(raw: Any) -> str | None:
    """The canonical text of a pattern (runs merged: 'sliding*3,full'), or None if invalid.

    A list that repeats a shorter period is written as that period ([sliding, full, sliding,
    full] -> 'sliding,full'), so equal patterns compare equal as text."""
    kinds = expand(raw)
    if kinds is None:
        return None
    n = len(kinds)
    for p in range(1, n + 1):
        if n % p == 0 and kinds[:p] * (n // p) == kinds:
            kinds = kinds[:p]
            break
    runs: list[str] = []
    i = 0
    while i < len(kinds):
        j = i
        while j < len(kinds) and kinds[j] == kinds[i]:
            j += 1
        runs.append(kinds[i] if j - i == 1 else f"{kinds[i]}*{j - i}")
        i = j
    return ",".join(runs)


@lru_cache(maxsize=256)
def _counts_of(text: str) -> tuple[int, int, int, int]:
    """(period, full, sliding, linear) layers in one period of a canonical pattern."""
    kinds = expand(text) or [FULL]
    return (len(kinds), *(kinds.count(k) for k in LAYER_KINDS))


def period(pattern: Any) -> Any:
    """Layers in one repetition of the pattern (scalar or per element)."""
    return _per_pattern(pattern, 0)


def layer_counts(pattern: Any, n_layers: Any) -> tuple[Any, Any, Any]:
    """(full, sliding, linear) layers of a model: n_layers / period x the kind's share of one
    period. Scalars for a scalar pattern, else arrays; a pattern whose period does not divide
    n_layers (reported by the validity rules) is floored."""
    L = np.asarray(n_layers)
    p, *kinds = _counts(pattern)
    reps = L // np.maximum(p, 1)
    return tuple(reps * c for c in kinds)  # type: ignore[return-value]


def _per_pattern(pattern: Any, i: int) -> Any:
    return _counts(pattern)[i]


def _counts(pattern: Any) -> tuple[Any, ...]:
    """(period, full, sliding, linear) of a pattern, or of each element of an array of them."""
    if pattern is None:
        return (1, 1, 0, 0)
    if isinstance(pattern, str):
        return _counts_of(pattern)
    arr = np.asarray(pattern)
    if arr.ndim == 0:
        return _counts_of(str(arr.item()))
    first = arr.flat[0] if arr.size else FULL
    if arr.size and (arr == first).all():  # one pattern for the whole batch (a sweep's usual)
        return tuple(np.full(arr.shape, c, dtype=np.int64) for c in _counts_of(str(first)))
    uniq, inv = np.unique(arr.astype(str), return_inverse=True)
    table = np.array([_counts_of(str(u)) for u in uniq], dtype=np.int64)
    rows = inv.reshape(arr.shape)
    return tuple(table[rows, i] for i in range(table.shape[1]))


def has_kind(pattern: Any, kind: str) -> Any:
    """True where the pattern has at least one layer of `kind`."""
    return np.asarray(_per_pattern(pattern, 1 + LAYER_KINDS.index(kind))) > 0


def from_layer_types(types: Sequence[str]) -> str | None:
    """The canonical pattern of a Hugging Face `layer_types` list (None: an unknown type)."""
    kinds = [HF_LAYER_TYPES.get(str(t)) for t in types]
    if any(k is None for k in kinds):
        return None
    return canonical(kinds)
