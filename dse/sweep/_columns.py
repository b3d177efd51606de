"""Configurations of a discrete search space as columns: by enumeration index or by digits.

Configuration k of a space is the mixed-radix number whose digits index the values of its
searched parameters (in `space.searched` order); `space_columns` decodes indices (the
enumeration of `exact` and `exhaustive`), `digit_columns` digit rows (the `screened` sampler,
on spaces of any size).
"""

from __future__ import annotations

import numpy as np

from dse.spec.space import SearchSpace


def space_columns(space: SearchSpace, index: np.ndarray) -> dict[str, np.ndarray]:
    """Complete configuration columns of the configurations at `index` (enumeration order)."""
    idx = np.asarray(index, dtype=np.int64)
    searched = space.searched
    if not searched:
        return digit_columns(space, np.empty((len(idx), 0), dtype=np.int64))
    digits = np.unravel_index(idx, [len(p.values) for p in searched])
    return digit_columns(space, np.column_stack(digits))


def digit_columns(space: SearchSpace, digits: np.ndarray) -> dict[str, np.ndarray]:
    """Complete configuration columns of configurations given as (n, searched) digit rows, one
    digit per searched parameter (the index of its value): a space of any size, even one whose
    flat index would not fit in 64 bits."""
    digits = np.asarray(digits, dtype=np.int64)
    n = len(digits)
    cols: dict[str, np.ndarray] = {k: np.full(n, v) for k, v in space.fixed.items()}
    for j, p in enumerate(space.searched):
        values = np.asarray(p.values, dtype=object if isinstance(p.values[0], str) else None)
        cols[p.name] = values[digits[:, j]]
    return space.complete(cols)  # as_columns, keeping training_tokens
