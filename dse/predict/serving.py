"""The shipped host constants of continuous-batching serving (`serving_constants.json`, beside
this file; written by `benchmarks/serving_accuracy.py --write-constants`) and where a
configuration with `batching: continuous` is priced with them (`apply`).

The JSON holds one entry per engine version fitted (`versions`: vLLM 0.4.2 from ml-energy v2,
vLLM 0.11.1 from ml-energy v3), each with its source, the command that fitted it, and one entry
per GPU measured (fitted on every row of that GPU, with the rows' files, their hash, the fitted
ranges and the held-out scores). A GPU without an entry takes the version's `default_gpu`
constants, and a version not fitted the nearest fitted one's (`nearest_version`); both are
flagged out of range.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from dse._same import equals
from dse.errors import ConfigError
from dse.models.base import RangeMiss, all_true, any_true
from dse.models.serving import HostConstants, continuous, range_misses
from dse.spec.hardware import GPU

CONSTANTS_FILE = Path(__file__).with_name("serving_constants.json")
FORMAT_VERSION = 2  # 2: constants per engine version (`versions`); 1 held vLLM 0.4.2 only


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


def version_key(version: str) -> tuple[int, ...]:
    """The numbers of a version text, for ordering ('0.11.1' -> (0, 11, 1); a tag such as
    'rc1' is ignored)."""
    return tuple(int(x) for x in re.findall(r"[0-9]+", version.split("+")[0])[:4])


def fitted_versions(path: str = str(CONSTANTS_FILE)) -> tuple[str, ...]:
    """The engine versions with constants, oldest first."""
    return tuple(sorted(load_constants(path)["versions"], key=version_key))


def nearest_version(version: str, path: str = str(CONSTANTS_FILE)) -> str:
    """The fitted version whose constants price `version`: itself when fitted, else the newest
    fitted one not newer than it, else the oldest fitted one."""
    fitted = fitted_versions(path)
    if version in fitted:
        return version
    older = [v for v in fitted if version_key(v) <= version_key(version)]
    return older[-1] if older else fitted[0]


def constants_for(
    gpu: str, version: str | None = None, path: str = str(CONSTANTS_FILE)
) -> HostConstants:
    """The host constants of `gpu` under engine `version` (None: the newest fitted; a version
    not fitted: `nearest_version`'s), or the version's default GPU's (its `gpu` then names the
    lender)."""
    d = load_constants(path)
    v = fitted_versions(path)[-1] if version is None else nearest_version(version, path)
    entry = d["versions"][v]
    name = gpu if gpu in entry["gpus"] else entry["default_gpu"]
    return HostConstants.from_dict(entry["gpus"][name], d["engine"], v, name)


def apply(
    out: dict[str, np.ndarray],
    cols: Mapping[str, np.ndarray],
    gpu: GPU,
    misses: dict[str, RangeMiss],
    flags: dict[str, np.ndarray],
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Reprice in place the rows of `out` (one GPU's static prediction) whose `batching` is
    continuous, each with the constants of its `engine_version`, and add their range misses
    and flags; static rows keep every value. Returns the columns `out` did not have (the host
    time, 0 on static rows) and each row's GPU-time scale (1 on static rows), by which the
    caller scales the breakdown so that its parts still sum to the latency."""
    n = len(out["latency_s"])
    continuous_rows = equals(cols["batching"], "continuous")
    asked = cols.get("engine_version")
    if asked is None:
        asked = np.full(n, fitted_versions()[-1])
    asked = np.asarray(asked).astype(str)
    scale = np.ones(n)
    added: dict[str, np.ndarray] = {}
    static = dict(out)  # every version prices the same static prediction
    for version in np.unique(asked[continuous_rows]):
        rows = continuous_rows & (asked == version)
        every = all_true(rows)
        c = constants_for(gpu.name, str(version))
        new = continuous(
            static,
            cols["batch_size"],
            cols["tensor_parallel"],
            cols["output_tokens"],
            gpu.idle_power_w,
            c,
        )
        for k, v in new.items():
            if k in static:
                out[k] = v if every else np.where(rows, v, out[k])
            else:
                added[k] = v if every else np.where(rows, v, added.get(k, 0.0))
        scale = np.where(rows, c.gpu_time_scale, scale)
        m, f = range_misses(
            c, cols["batch_size"], cols["tensor_parallel"], cols["engine"], gpu.name, asked
        )
        for k, miss in m.items():
            miss = miss if every else miss.masked(rows)
            misses[k] = miss if k not in misses else _merge(misses[k], miss, rows)
        for k, flag in f.items():
            flags[k] = (flag & rows) | flags.get(k, np.zeros(n, dtype=bool))
    return added, scale


def engine_traits(cols: Mapping[str, np.ndarray]) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Per row, how the static prediction of a continuous run is priced for its engine version
    (the version entry's fields; a version not fitted: `nearest_version`'s): (GQA-aware decode
    attention, `gqa_aware_attention`: Level 3 without argonne's GQA excess; the running batch's
    KV at its mean context, `kv_at_mean_context`: prompt + half the output a sequence, so the
    measured running batch fits where a static batch of full-length sequences ran in waves).
    vLLM 0.11.1 has both. None for a trait no row has (static rows have none)."""
    if not any_continuous(cols):
        return None, None
    n = len(cols["batching"])
    asked = cols.get("engine_version")
    asked = np.full(n, fitted_versions()[-1]) if asked is None else np.asarray(asked).astype(str)
    continuous_rows = equals(cols["batching"], "continuous")
    versions = load_constants()["versions"]
    out = {k: np.zeros(n, dtype=bool) for k in ("gqa_aware_attention", "kv_at_mean_context")}
    for version in np.unique(asked[continuous_rows]):
        entry = versions[nearest_version(str(version))]
        for k, v in out.items():
            if entry.get(k, False):
                v |= continuous_rows & (asked == version)
    aware, mean = (v if any_true(v) else None for v in out.values())
    return aware, mean


def _merge(a: RangeMiss, b: RangeMiss, rows: np.ndarray) -> RangeMiss:
    """Two versions' misses of one input: `b` on `rows`, `a` elsewhere."""
    return RangeMiss(
        np.where(rows, b.excess, a.excess),
        np.where(rows, b.value, a.value),
        np.where(rows, b.bound, a.bound),
    )


def any_continuous(cols: Mapping[str, np.ndarray]) -> bool:
    """Whether some configuration asks for continuous batching (columns without `batching`:
    none)."""
    b = cols.get("batching")
    return b is not None and any_true(equals(b, "continuous"))
