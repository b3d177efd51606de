"""The shipped host constants of continuous-batching serving (`serving_constants.json`, beside
this file; written by `benchmarks/serving_accuracy.py --write-constants`) and where a
configuration with `batching: continuous` is priced with them (`apply`).

The JSON holds one entry per GPU measured (fitted on every row of that GPU, with the rows'
files, their hash, the fitted ranges and the held-out scores); a GPU without an entry takes
DEFAULT_GPU's constants and is flagged out of range.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from dse.errors import ConfigError
from dse.models._base import RangeMiss
from dse.models.serving import HostConstants, continuous, range_misses
from dse.spec.hardware import GPU

CONSTANTS_FILE = Path(__file__).with_name("serving_constants.json")
FORMAT_VERSION = 1


@cache
def load_constants(path: str = str(CONSTANTS_FILE)) -> dict[str, Any]:
    """The parsed JSON (read once per path)."""
    try:
        d = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the serving constants: {exc}") from exc
    if d.get("format_version") != FORMAT_VERSION:
        raise ConfigError(
            f"{path}: format_version must be {FORMAT_VERSION}, got {d.get('format_version')!r}"
        )
    return d


def constants_for(gpu: str, path: str = str(CONSTANTS_FILE)) -> HostConstants:
    """The host constants of `gpu`, or DEFAULT_GPU's (its `gpu` then names the lender)."""
    d = load_constants(path)
    name = gpu if gpu in d["gpus"] else d["default_gpu"]
    return HostConstants.from_dict(d["gpus"][name], d["engine"], d["engine_version"], name)


def apply(
    out: dict[str, np.ndarray],
    cols: Mapping[str, np.ndarray],
    gpu: GPU,
    misses: dict[str, RangeMiss],
    flags: dict[str, np.ndarray],
) -> dict[str, np.ndarray]:
    """Reprice in place the rows of `out` (one GPU's static prediction) whose `batching` is
    continuous, and add their range misses and flags; static rows keep every value. Returns
    the columns `out` did not have (the host time, 0 on static rows)."""
    rows = cols["batching"] == "continuous"
    c = constants_for(gpu.name)
    new = continuous(
        out, cols["batch_size"], cols["tensor_parallel"], cols["output_tokens"], gpu.idle_power_w, c
    )
    every = bool(rows.all())
    added = {}
    for k, v in new.items():
        if k in out:
            out[k] = v if every else np.where(rows, v, out[k])
        else:
            added[k] = v if every else np.where(rows, v, 0.0)
    m, f = range_misses(c, cols["batch_size"], cols["tensor_parallel"], cols["engine"], gpu.name)
    for k, miss in m.items():
        misses[k] = miss if every else miss.masked(rows)
    for k, flag in f.items():
        flags[k] = flag & rows
    return added


def any_continuous(cols: Mapping[str, np.ndarray]) -> bool:
    """Whether some configuration asks for continuous batching (columns without `batching`:
    none)."""
    b = cols.get("batching")
    return b is not None and bool((b == "continuous").any())
