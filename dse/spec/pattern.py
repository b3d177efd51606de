"""Per-layer patterns: which mixer (attention, linear layer) and which FFN each layer has.

A pattern is a short list of layer kinds repeated over the model's layers, written in YAML as
`attention_pattern: [sliding, sliding, sliding, full]` (3:1 sliding:full) and carried in
configuration columns as its canonical text, `"sliding*3,full"` (a kind, optionally `*count`,
comma-separated, runs merged). Two fields are patterns, each with its own kinds (`Kinds`):

- `attention_pattern` (`MIXERS`): the mixer of each layer: full, sliding or linear, both an
  attention and a linear layer side by side on the same input (full+linear, sliding+linear:
  Falcon-H1's parallel hybrid heads) or none (a layer that is only an FFN: Nemotron-H's MLP
  layers). Default "full": all layers full attention.
- `ffn_pattern` (`FFNS`): the FFN of each layer: the model's FFN (`ffn`: the experts of an MoE
  model, else its dense FFN), a dense FFN of d_ff in an MoE model (`dense`: Jamba's non-expert
  layers) or none (a layer that is only a mixer: Nemotron-H's Mamba and attention layers).
  Default "ffn": every layer has the model's FFN.

Every existing architecture is the two defaults. Layer i has mixer attention_pattern[i mod p]
and FFN ffn_pattern[i mod q]; each period must divide n_layers (`dse.spec.arch` checks it, and
that no layer has neither). The accounting only needs how many layers of each kind there are
(`layer_counts`, `mixer_layers`, `ffn_counts`), since every per-layer quantity is a sum over
layers and the order does not change a sum.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from dse._same import all_equal


@dataclass(frozen=True)
class Kinds:
    """The layer kinds one pattern field is written in, and the rule its messages state."""

    name: str
    kinds: tuple[str, ...]
    default: str

    @property
    def rule(self) -> str:
        return f"must be a list of {', '.join(self.kinds)} (each optionally kind*count)"


# full: causal attention over the whole context; sliding: over the last `sliding_window`
# tokens only (Mistral, Gemma 2/3, gpt-oss); linear: a linear-attention / state-space layer
# with a constant-size state (Qwen3-Next's Gated DeltaNet, Mamba in Bamba, Jamba, Nemotron-H);
# X+linear: an attention and a linear layer in parallel on the layer's input, their outputs
# summed (Falcon-H1); none: no mixer (the layer is its FFN).
MIXERS = Kinds(
    "attention_pattern",
    ("full", "sliding", "linear", "none", "full+linear", "sliding+linear"),
    "full",
)
# ffn: the model's FFN (n_experts experts when n_experts > 1, else the dense FFN of d_ff);
# dense: a dense FFN of d_ff, also in an MoE model; none: no FFN (the layer is its mixer).
FFNS = Kinds("ffn_pattern", ("ffn", "dense", "none"), "ffn")
KINDS_OF: dict[str, Kinds] = {k.name: k for k in (MIXERS, FFNS)}

FULL = MIXERS.default
# The mixers each attention_pattern kind holds: (full, sliding, linear).
_MIXERS_OF: dict[str, tuple[int, int, int]] = {
    "full": (1, 0, 0),
    "sliding": (0, 1, 0),
    "linear": (0, 0, 1),
    "none": (0, 0, 0),
    "full+linear": (1, 0, 1),
    "sliding+linear": (0, 1, 1),
}
# Hugging Face `layer_types` names (transformers 5) -> our kinds.
HF_LAYER_TYPES: dict[str, str] = {
    "full_attention": "full",
    "sliding_attention": "sliding",
    "linear_attention": "linear",
    "mamba": "linear",
}
RULE = MIXERS.rule


def expand(raw: Any, kinds: Kinds = MIXERS) -> list[str] | None:
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
        if kind not in kinds.kinds:
            return None
        if count:
            if not count.isdigit() or int(count) < 1 or int(count) > 1024:
                return None
            out.extend([kind] * int(count))
        else:
            out.append(kind)
    return out or None


def canonical(raw: Any, kinds: Kinds = MIXERS) -> str | None:
    """The canonical text of a pattern (runs merged: 'sliding*3,full'), or None if invalid.

    A list that repeats a shorter period is written as that period ([sliding, full, sliding,
    full] -> 'sliding,full'), so equal patterns compare equal as text."""
    layers = expand(raw, kinds)
    if layers is None:
        return None
    return _text(_fold(layers))


def _fold(layers: list[str]) -> list[str]:
    """The shortest period whose repetition is `layers`."""
    n = len(layers)
    for p in range(1, n + 1):
        if n % p == 0 and layers[:p] * (n // p) == layers:
            return layers[:p]
    return layers


def _text(layers: list[str]) -> str:
    runs: list[str] = []
    i = 0
    while i < len(layers):
        j = i
        while j < len(layers) and layers[j] == layers[i]:
            j += 1
        runs.append(layers[i] if j - i == 1 else f"{layers[i]}*{j - i}")
        i = j
    return ",".join(runs)


@lru_cache(maxsize=256)
def _counts_of(text: str) -> tuple[int, int, int, int, int]:
    """(period, full, sliding, linear, layers with a mixer) in one period of an
    attention_pattern (a parallel full+linear layer counts as a full and as a linear one)."""
    layers = expand(text) or [FULL]
    full, sliding, linear = (sum(_MIXERS_OF[k][i] for k in layers) for i in range(3))
    return len(layers), full, sliding, linear, sum(k != "none" for k in layers)


@lru_cache(maxsize=256)
def _ffn_counts_of(text: str) -> tuple[int, int, int]:
    """(period, `ffn` layers, `dense` layers) in one period of an ffn_pattern."""
    layers = expand(text, FFNS) or [FFNS.default]
    return len(layers), layers.count("ffn"), layers.count("dense")


def period(pattern: Any, kinds: Kinds = MIXERS) -> Any:
    """Layers in one repetition of the pattern (scalar or per element)."""
    return _columns(pattern, _counts_of if kinds is MIXERS else _ffn_counts_of)[0]


def layer_counts(pattern: Any, n_layers: Any) -> tuple[Any, Any, Any]:
    """(full, sliding, linear) mixers of a model: n_layers / period x the kind's share of one
    period. Scalars for a scalar pattern, else arrays; a pattern whose period does not divide
    n_layers (reported by the validity rules) is floored."""
    return mixer_counts(pattern, n_layers)[:3]  # type: ignore[return-value]


def mixer_layers(pattern: Any, n_layers: Any) -> Any:
    """Layers with a mixer (every layer but the `none` ones of the attention_pattern)."""
    return mixer_counts(pattern, n_layers)[3]


def mixer_counts(pattern: Any, n_layers: Any) -> tuple[Any, Any, Any, Any]:
    """(full, sliding, linear, layers with a mixer) of an attention_pattern over n_layers, the
    pattern column read once."""
    c = _columns(pattern, _counts_of)
    reps = np.asarray(n_layers) // np.maximum(c[0], 1)
    return reps * c[1], reps * c[2], reps * c[3], reps * c[4]


def ffn_counts(pattern: Any, n_layers: Any) -> tuple[Any, Any]:
    """(`ffn` layers, `dense` layers) of an ffn_pattern over n_layers."""
    c = _columns(pattern, _ffn_counts_of)
    reps = np.asarray(n_layers) // np.maximum(c[0], 1)
    return reps * c[1], reps * c[2]


def counts(pattern: Any, kinds: Kinds = MIXERS) -> tuple[Any, ...]:
    """Per pattern (scalar or column, read once), what one period holds: for an
    attention_pattern (period, full, sliding, linear, layers with a mixer), for an ffn_pattern
    (period, ffn, dense); an unknown text ('') counts as the default. Scalars where the column
    holds one pattern (`_columns`)."""
    return _columns(pattern, _counts_of if kinds is MIXERS else _ffn_counts_of)


def _columns(pattern: Any, counts: Callable[[str], tuple[int, ...]]) -> tuple[Any, ...]:
    """`counts` of a pattern (scalars), or of each element of a column of them (int64 arrays,
    each distinct text counted once; scalars when the column holds one pattern: they broadcast
    against the column's other arrays, and a one-row call creates no array for them)."""
    if pattern is None:
        return counts("")
    if isinstance(pattern, str):
        return counts(pattern)
    arr = np.asarray(pattern)
    if arr.ndim == 0:
        return counts(str(arr.item()))
    first = arr.flat[0] if arr.size else ""
    if arr.size == 1 or (arr.size and all_equal(arr)):  # one pattern: a sweep's usual
        return counts(str(first))
    uniq, inv = np.unique(arr.astype(str), return_inverse=True)
    table = np.array([counts(str(u)) for u in uniq], dtype=np.int64)[inv.reshape(-1)]
    return tuple(table[:, j].reshape(arr.shape) for j in range(table.shape[1]))


def has_kind(pattern: Any, kind: str) -> Any:
    """True where the attention_pattern has at least one layer with a `kind` mixer (full,
    sliding or linear; a parallel layer has two)."""
    i = 1 + ("full", "sliding", "linear").index(kind)
    return np.asarray(_columns(pattern, _counts_of)[i]) > 0


@lru_cache(maxsize=256)
def empty_layer(mixers: str, ffns: str) -> int | None:
    """The first layer (0-based) that would have neither a mixer nor an FFN when the two
    patterns are repeated side by side over lcm(p, q) layers, or None when every layer has one."""
    m, f = expand(mixers), expand(ffns, FFNS)
    if m is None or f is None or ("none" not in m or "none" not in f):
        return None
    n = int(np.lcm(len(m), len(f)))
    for i in range(n):
        if m[i % len(m)] == "none" and f[i % len(f)] == "none":
            return i
    return None


def from_layer_types(types: Sequence[str]) -> str | None:
    """The canonical pattern of a Hugging Face `layer_types` list (None: an unknown type)."""
    kinds = [HF_LAYER_TYPES.get(str(t)) for t in types]
    if any(k is None for k in kinds):
        return None
    return canonical(kinds)
