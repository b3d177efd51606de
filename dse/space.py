"""YAML search spaces -> a typed `SearchSpace`: parameters, constraints, objectives, study settings.

Schema (documented in docs/search_spaces.md):

    name: dense-8b
    hardware: h100_sxm                 # or {values: [h100_sxm, h200_sxm]}
    workload: {batch_size: 16, prompt_tokens: 1024, output_tokens: 256, tensor_parallel: 1}
    space:                             # Architecture fields, fixed or searched
      d_model: {values: [3072, 4096]}
      n_layers: {low: 24, high: 48, step: 4}
      moe: {n_experts: {values: [1, 8]}, top_k: {values: [1, 2]}}
    constraints: {active_params: {min: 7.0e9, max: 9.0e9}, fits_memory: true}
    objectives:
      latency: {metric: request}       # request | ttft | tpot
      energy: {source: hymell}         # hymell | tokens2wh
    study: {sampler: tpe, trials: 2000, seed: 0}

Every user mistake raises ConfigError as `file:line: key.path: rule, got value`.
"""

from __future__ import annotations

import difflib
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dse import configs as C
from dse.arch import DTYPE_BYTES, NORMS
from dse.errors import ConfigError
from dse.hardware import gpu_names
from dse.workload import ENGINES
from dse.yamlio import NAME_RULE, KeyPath, Located, load_located, safe_name

TOP_KEYS = (
    "name",
    "description",
    "hardware",
    "workload",
    "space",
    "constraints",
    "objectives",
    "study",
)
BOOL_FIELDS = ("gated_mlp", "tied_embeddings", "qkv_bias", "shared_expert_gate", "qk_norm")
STR_FIELDS: dict[str, tuple[str, ...]] = {
    "norm": NORMS,
    "weight_dtype": tuple(DTYPE_BYTES),
    "kv_dtype": tuple(DTYPE_BYTES),
    "engine": ENGINES,
}
ARCH_KEYS = tuple(k for k in C.ARCH_FIELDS)
MOE_KEYS = ("n_experts", "top_k", "d_ff_expert", "shared_expert_d_ff", "shared_expert_gate")
WORKLOAD_KEYS = C.WORKLOAD_FIELDS
SIZE_CONSTRAINTS = ("active_params", "total_params", "kv_bytes_per_token", "memory_bytes")
CONSTRAINT_KEYS = (*SIZE_CONSTRAINTS, "fits_memory")
LATENCY_METRICS = ("request", "ttft", "tpot")
ENERGY_SOURCES = ("hymell", "tokens2wh")
ENERGY_METRICS = ("request", "per_output_token")
ENERGY_PRESETS = ("corrected", "paper")
SIZE_METRICS = ("active_params", "total_params", "kv_bytes_per_token")
SAMPLERS = ("auto", "tpe", "nsga2", "nsga3", "random", "gp", "exhaustive")
# Ranges wider than this many values are treated as too large to enumerate per parameter.
MAX_RANGE_VALUES = 1_000_000


@dataclass(frozen=True)
class Param:
    """One configuration column: fixed (one value) or searched (a finite set of values)."""

    name: str  # column name (Architecture / Workload field, or "gpu")
    path: KeyPath  # where it was declared in the YAML
    values: tuple[Any, ...]  # every allowed value, in declaration order
    kind: str  # "fixed" | "categorical" | "int"
    low: int | None = None
    high: int | None = None
    step: int | None = None
    log: bool = False

    @property
    def searched(self) -> bool:
        return len(self.values) > 1


@dataclass(frozen=True)
class Objectives:
    latency_metric: str = "request"
    energy_source: str = "hymell"
    energy_metric: str = "request"
    size_metric: str | None = None  # optional third objective
    energy_preset: str = "corrected"  # tokens2wh only: corrected (ours) | paper (as published)

    @property
    def names(self) -> tuple[str, ...]:
        base = (
            f"latency_{self.latency_metric}",
            f"energy_{self.energy_source}_{self.energy_metric}",
        )
        return (*base, self.size_metric) if self.size_metric else base


@dataclass(frozen=True)
class StudySettings:
    sampler: str = "auto"
    trials: int = 2000
    seed: int = 0
    batch_size: int = 64  # trials asked, evaluated in one predictor call, and told back together


@dataclass(frozen=True)
class SearchSpace:
    name: str
    source: str
    params: tuple[Param, ...]
    constraints: dict[str, Any] = field(default_factory=dict)
    objectives: Objectives = field(default_factory=Objectives)
    study: StudySettings = field(default_factory=StudySettings)
    description: str = ""
    raw: dict[str, Any] = field(default_factory=dict)  # the YAML as read, for the study record

    @property
    def searched(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.searched)

    @property
    def fixed(self) -> dict[str, Any]:
        return {p.name: p.values[0] for p in self.params if not p.searched}

    def size(self) -> int:
        """Number of distinct configurations (product of each parameter's value count)."""
        return int(np.prod([len(p.values) for p in self.params], dtype=object))

    def enumerate(self, limit: int = 20_000_000) -> dict[str, np.ndarray]:
        """Every configuration as complete columns (cartesian product), row-major in declaration order."""
        n = self.size()
        if n > limit:
            raise ConfigError(
                f"{self.source}: space has {n:,} configurations, more than {limit:,} to enumerate"
            )
        searched = self.searched
        cols: dict[str, Any] = dict(self.fixed)
        if searched:
            idx = np.indices([len(p.values) for p in searched]).reshape(len(searched), -1)
            for p, ix in zip(searched, idx, strict=True):
                cols[p.name] = np.asarray(
                    p.values, dtype=object if isinstance(p.values[0], str) else None
                )[ix]
        out, _ = C.as_columns(
            {k: (np.full(n, v) if np.ndim(v) == 0 else v) for k, v in cols.items()}
        )
        return out

    def columns_from(self, rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
        """Complete columns for a list of sampled searched-parameter dicts."""
        n = len(rows)
        cols: dict[str, Any] = {k: np.full(n, v) for k, v in self.fixed.items()}
        for p in self.searched:
            cols[p.name] = np.asarray([r[p.name] for r in rows])
        out, _ = C.as_columns(cols)
        return out

    def examples(self, k: int = 3, seed: int = 0) -> list[dict[str, Any]]:
        """k configurations drawn uniformly (for `dse check`)."""
        rng = np.random.default_rng(seed)
        return [
            {
                **self.fixed,
                **{p.name: p.values[int(rng.integers(len(p.values)))] for p in self.searched},
            }
            for _ in range(k)
        ]


# ---------------------------------------------------------------------- loading
def bundled_spaces() -> list[str]:
    """Names of the example spaces shipped with the package (search_spaces/*.yaml)."""
    from dse.resources import shipped

    return sorted(
        e.name[:-5] for e in shipped("search_spaces").iterdir() if e.name.endswith(".yaml")
    )


def resolve_space_path(path: str | Path) -> Path:
    """A path as given, or the bundled example of that name (`dense_8b`) when no such file exists."""
    p = Path(path)
    if p.exists():
        return p
    from dse.resources import shipped

    stem = p.name[:-5] if p.name.endswith(".yaml") else p.name
    if stem in bundled_spaces():
        return Path(str(shipped("search_spaces") / f"{stem}.yaml"))
    return p


def load_space(path: str | Path) -> SearchSpace:
    """Read and validate a search-space YAML file (or a bundled example by name)."""
    doc = load_located(resolve_space_path(path))
    return parse_space(doc)


def parse_space(doc: Located) -> SearchSpace:
    data = doc.data
    _no_unknown(doc, (), data, TOP_KEYS)
    for required in ("space",):
        if required not in data:
            raise doc.error((required,), "is required (the architecture fields to search)")
    name = data.get("name") or doc.path.stem
    if not isinstance(name, str):
        raise doc.error(("name",), f"must be a string, got {name!r}")
    if "name" in data and not safe_name(name):
        raise doc.error(("name",), f"{NAME_RULE}, got {name!r}")
    params: list[Param] = []

    # hardware
    hw = data.get("hardware", "h100_sxm")
    params.append(_param(doc, ("hardware",), "gpu", hw, str_choices=tuple(gpu_names())))

    # workload
    wl = data.get("workload") or {}
    _mapping(doc, ("workload",), wl)
    _no_unknown(doc, ("workload",), wl, WORKLOAD_KEYS)
    for key in WORKLOAD_KEYS:
        if key in wl:
            params.append(
                _param(doc, ("workload", key), key, wl[key], str_choices=STR_FIELDS.get(key))
            )

    # architecture
    sp = data["space"]
    _mapping(doc, ("space",), sp)
    _no_unknown(doc, ("space",), sp, (*ARCH_KEYS, "moe"))
    for key in REQUIRED_ARCH:
        if key not in sp:
            raise doc.error(("space", key), "is required")
    for key, spec in sp.items():
        if key == "moe":
            _mapping(doc, ("space", "moe"), spec)
            _no_unknown(doc, ("space", "moe"), spec, MOE_KEYS)
            for mk, mspec in spec.items():
                params.append(
                    _param(doc, ("space", "moe", mk), mk, mspec, is_bool=mk in BOOL_FIELDS)
                )
            continue
        params.append(
            _param(
                doc,
                ("space", key),
                key,
                spec,
                is_bool=key in BOOL_FIELDS,
                str_choices=STR_FIELDS.get(key),
            )
        )
    names = [p.name for p in params]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise doc.error(("space",), f"field {sorted(dup)[0]!r} is declared twice")

    constraints = _constraints(doc, data.get("constraints") or {})
    objectives = _objectives(doc, data.get("objectives") or {})
    study = _study(doc, data.get("study") or {})
    space = SearchSpace(
        name=name,
        source=str(doc.path),
        params=tuple(params),
        constraints=constraints,
        objectives=objectives,
        study=study,
        description=str(data.get("description", "")),
        raw=data,
    )
    _check_combinations(doc, space)
    return space


REQUIRED_ARCH = ("d_model", "n_layers", "n_heads", "d_ff")


def _mapping(doc: Located, keys: KeyPath, value: Any) -> None:
    if not isinstance(value, dict):
        raise doc.error(keys, f"must be a mapping, got {type(value).__name__} {value!r}")


def _no_unknown(
    doc: Located, keys: KeyPath, data: dict[str, Any], allowed: tuple[str, ...]
) -> None:
    for k in data:
        if k not in allowed:
            close = difflib.get_close_matches(str(k), allowed, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise doc.error((*keys, str(k)), f"unknown key{hint}; valid keys: {', '.join(allowed)}")


def _number(doc: Located, keys: KeyPath, v: Any, *, integer: bool) -> Any:
    """Accept ints, floats and numeric strings ('7.0e9', which YAML 1.1 leaves as a string)."""
    if isinstance(v, bool):
        raise doc.error(keys, f"must be a number, got {v!r}")
    if isinstance(v, str):
        try:
            v = float(v)
        except ValueError:
            raise doc.error(keys, f"must be a number, got {v!r}") from None
    if not isinstance(v, int | float):
        raise doc.error(keys, f"must be a number, got {type(v).__name__} {v!r}")
    if integer:
        if float(v) != int(v):
            raise doc.error(keys, f"must be an integer, got {v!r}")
        return int(v)
    return float(v)


def _param(
    doc: Located,
    keys: KeyPath,
    name: str,
    spec: Any,
    *,
    is_bool: bool = False,
    str_choices: tuple[str, ...] | None = None,
) -> Param:
    def value(v: Any, at: KeyPath) -> Any:
        if is_bool:
            if not isinstance(v, bool):
                raise doc.error(at, f"must be true or false, got {v!r}")
            return v
        if str_choices is not None:
            if not isinstance(v, str) or v not in str_choices:
                close = difflib.get_close_matches(str(v), str_choices, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise doc.error(at, f"must be one of {', '.join(str_choices)}{hint}, got {v!r}")
            return v
        out = _number(doc, at, v, integer=True)
        if out < 0 or (out == 0 and name not in ("shared_expert_d_ff",)):
            raise doc.error(at, f"must be a positive integer, got {v!r}")
        return out

    if isinstance(spec, dict):
        allowed = (
            ("values",) if (is_bool or str_choices) else ("values", "low", "high", "step", "log")
        )
        _no_unknown(doc, keys, spec, allowed)
        if "values" in spec:
            if len(spec) > 1:
                raise doc.error(keys, "give either `values` or `low`/`high`[/`step`], not both")
            vals = spec["values"]
            if not isinstance(vals, list) or not vals:
                raise doc.error((*keys, "values"), f"must be a non-empty list, got {vals!r}")
            out = tuple(value(v, (*keys, "values", str(i))) for i, v in enumerate(vals))
            if len(set(out)) != len(out):
                raise doc.error((*keys, "values"), f"must not repeat a value, got {vals!r}")
            return Param(name, keys, out, "categorical" if len(out) > 1 else "fixed")
        if "low" not in spec or "high" not in spec:
            raise doc.error(keys, "a range needs both `low` and `high` (or give `values`)")
        low = value(spec["low"], (*keys, "low"))
        high = value(spec["high"], (*keys, "high"))
        step = _number(doc, (*keys, "step"), spec.get("step", 1), integer=True)
        log = spec.get("log", False)
        if not isinstance(log, bool):
            raise doc.error((*keys, "log"), f"must be true or false, got {log!r}")
        if low > high:
            raise doc.error(keys, f"`low <= high` must hold, but got (low={low}, high={high})")
        if step < 1:
            raise doc.error((*keys, "step"), f"must be an integer >= 1, got {step}")
        if log and step != 1:
            raise doc.error(keys, "`log: true` cannot be combined with `step`")
        if (high - low) % step:
            raise doc.error(
                keys,
                f"`high - low` must be a multiple of step={step}, but got (low={low}, high={high})",
            )
        count = (high - low) // step + 1
        if count > MAX_RANGE_VALUES:
            raise doc.error(
                keys, f"range has {count:,} values, more than {MAX_RANGE_VALUES:,}; add a `step`"
            )
        vals = tuple(range(low, high + 1, step))
        return Param(name, keys, vals, "int" if len(vals) > 1 else "fixed", low, high, step, log)
    if isinstance(spec, list):
        raise doc.error(keys, f"a list of values must be written as {{values: {spec!r}}}")
    return Param(name, keys, (value(spec, keys),), "fixed")


def _constraints(doc: Located, data: Any) -> dict[str, Any]:
    _mapping(doc, ("constraints",), data)
    _no_unknown(doc, ("constraints",), data, CONSTRAINT_KEYS)
    out: dict[str, Any] = {}
    for key, spec in data.items():
        keys = ("constraints", key)
        if key == "fits_memory":
            if not isinstance(spec, bool):
                raise doc.error(keys, f"must be true or false, got {spec!r}")
            out[key] = spec
            continue
        _mapping(doc, keys, spec)
        _no_unknown(doc, keys, spec, ("min", "max"))
        if not spec:
            raise doc.error(keys, "needs `min`, `max` or both")
        lo = _number(doc, (*keys, "min"), spec["min"], integer=False) if "min" in spec else None
        hi = _number(doc, (*keys, "max"), spec["max"], integer=False) if "max" in spec else None
        for bound, v in (("min", lo), ("max", hi)):
            if v is not None and v <= 0:
                raise doc.error((*keys, bound), f"must be > 0, got {v}")
        if lo is not None and hi is not None and lo > hi:
            raise doc.error(keys, f"`min <= max` must hold, but got (min={lo:g}, max={hi:g})")
        out[key] = {"min": lo, "max": hi}
    return out


def _objectives(doc: Located, data: Any) -> Objectives:
    _mapping(doc, ("objectives",), data)
    _no_unknown(doc, ("objectives",), data, ("latency", "energy", "size"))

    def pick(section: str, key: str, choices: tuple[str, ...], default: str | None) -> str | None:
        spec = data.get(section)
        if spec is None:
            return default
        _mapping(doc, ("objectives", section), spec)
        allowed = {
            "latency": ("metric", "direction"),
            "energy": ("source", "metric", "direction", "preset"),
            "size": ("metric", "direction"),
        }[section]
        _no_unknown(doc, ("objectives", section), spec, allowed)
        if spec.get("direction", "minimize") != "minimize":
            raise doc.error(
                ("objectives", section, "direction"), f"must be minimize, got {spec['direction']!r}"
            )
        v = spec.get(key, default)
        if v not in choices:
            close = difflib.get_close_matches(str(v), choices, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise doc.error(
                ("objectives", section, key),
                f"must be one of {', '.join(choices)}{hint}, got {v!r}",
            )
        return v

    return Objectives(
        latency_metric=pick("latency", "metric", LATENCY_METRICS, "request") or "request",
        energy_source=pick("energy", "source", ENERGY_SOURCES, "hymell") or "hymell",
        energy_metric=pick("energy", "metric", ENERGY_METRICS, "request") or "request",
        size_metric=pick("size", "metric", SIZE_METRICS, "active_params")
        if "size" in data
        else None,
        energy_preset=pick("energy", "preset", ENERGY_PRESETS, "corrected") or "corrected",
    )


def _study(doc: Located, data: Any) -> StudySettings:
    _mapping(doc, ("study",), data)
    _no_unknown(doc, ("study",), data, ("sampler", "trials", "seed", "batch_size"))
    sampler = data.get("sampler", "auto")
    if sampler not in SAMPLERS:
        close = difflib.get_close_matches(str(sampler), SAMPLERS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise doc.error(
            ("study", "sampler"), f"must be one of {', '.join(SAMPLERS)}{hint}, got {sampler!r}"
        )
    trials = _number(doc, ("study", "trials"), data.get("trials", 2000), integer=True)
    if trials < 1:
        raise doc.error(("study", "trials"), f"must be an integer >= 1, got {trials}")
    seed = _number(doc, ("study", "seed"), data.get("seed", 0), integer=True)
    batch = _number(doc, ("study", "batch_size"), data.get("batch_size", 64), integer=True)
    if batch < 1:
        raise doc.error(("study", "batch_size"), f"must be an integer >= 1, got {batch}")
    return StudySettings(sampler=sampler, trials=trials, seed=seed, batch_size=batch)


def _check_combinations(doc: Located, space: SearchSpace) -> None:
    """Combinations that no configuration could satisfy, named with the values at fault."""
    by = {p.name: p for p in space.params}

    def vals(name: str, default: tuple[Any, ...]) -> tuple[Any, ...]:
        return by[name].values if name in by else default

    heads, kvs = vals("n_heads", ()), vals("n_kv_heads", ())
    if kvs and not any(h % k == 0 for h, k in itertools.product(heads, kvs)):
        raise doc.error(
            by["n_kv_heads"].path, f"no value divides any n_heads {list(heads)}, got {list(kvs)}"
        )
    if "head_dim" not in by and not any(
        d % h == 0 for d, h in itertools.product(vals("d_model", ()), heads)
    ):
        raise doc.error(
            by["n_heads"].path,
            f"no value divides any d_model {list(vals('d_model', ()))}, got {list(heads)}",
        )
    ks, es = vals("top_k", (1,)), vals("n_experts", (1,))
    if not any(k <= e for k, e in itertools.product(ks, es)):
        raise doc.error(
            by["top_k"].path, f"must be <= n_experts {list(es)} for some value, got {list(ks)}"
        )
    tps = vals("tensor_parallel", (1,))
    if not any(h % t == 0 for h, t in itertools.product(heads, tps)):
        raise doc.error(
            by["tensor_parallel"].path,
            f"no value divides any n_heads {list(heads)}, got {list(tps)}",
        )


# ---------------------------------------------------------------------- counting
@dataclass(frozen=True)
class SpaceCount:
    total: int
    valid: int | None  # None when too large to enumerate
    feasible: int | None
    violations: dict[str, int]  # constraint name -> how many configurations break it


def count_feasible(space: SearchSpace, limit: int = 5_000_000, chunk: int = 500_000) -> SpaceCount:
    """Count valid and feasible configurations by vectorised enumeration (None if too large)."""
    total = space.size()
    if total > limit:
        return SpaceCount(total, None, None, {})
    cols = space.enumerate(limit)
    valid = feasible = 0
    violations: dict[str, int] = {}
    for start in range(0, total, chunk):
        part = {k: v[start : start + chunk] for k, v in cols.items()}
        n = len(part["d_model"])
        d = C.derived(part, n)
        cv = C.constraint_values(d, space.constraints)
        ok_valid = cv["valid"] <= 0
        valid += int(ok_valid.sum())
        feasible += int(C.feasible(cv).sum())
        for name, v in cv.items():
            if name != "valid":
                violations[name] = violations.get(name, 0) + int(((v > 0) & ok_valid).sum())
    return SpaceCount(total, valid, feasible, violations)


def require_feasible(space: SearchSpace, count: SpaceCount) -> None:
    """A space where no configuration satisfies the constraints is a user error."""
    if count.feasible == 0:
        if count.valid == 0:
            raise ConfigError(f"{space.source}: space: no configuration is a valid architecture")
        worst = (
            max(count.violations.items(), key=lambda kv: kv[1]) if count.violations else ("?", 0)
        )
        raise ConfigError(
            f"{space.source}: constraints: no configuration satisfies them; "
            f"{worst[0]} alone rules out {worst[1]:,} of {count.valid:,} valid configurations"
        )
