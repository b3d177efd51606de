"""What prediction derives from a fitted model's state alone, made once per model and kept
outside the model.

A model's attributes are its parameters and learned state (`to_state` writes them, and
`predict` must leave them unchanged: tests/models/test_models_contract.py), so constants that a
one-configuration call would otherwise rebuild on every call (an all-reduce curve's regime
switches, ...) live here, keyed by the model object (weakly: they go with it) and stamped with
the state arrays they were made from (compared by identity), so that a refit or a new state
rebuilds them.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable
from typing import Any

# model -> (the state objects the values were made from, {key: value})
_CACHE: weakref.WeakKeyDictionary[Any, tuple[tuple[Any, ...], dict[Hashable, Any]]] = (
    weakref.WeakKeyDictionary()
)


def derived(model: Any, state: tuple[Any, ...], key: Hashable, make: Callable[[], Any]) -> Any:
    """`make()` for (model, key), made once while the model's `state` objects (the arrays
    `make` reads) stay the same objects; never stored on the model."""
    entry = _CACHE.get(model)
    if (
        entry is None
        or len(entry[0]) != len(state)
        or any(a is not b for a, b in zip(entry[0], state, strict=True))
    ):
        entry = _CACHE[model] = (state, {})
    values = entry[1]
    try:
        return values[key]
    except KeyError:
        value = values[key] = make()
        return value
