"""YAML search spaces -> a typed `SearchSpace`: parameters, constraints, objectives, study settings.

Schema (documented in docs/search_spaces.md):

    name: dense-8b
    hardware: h100_sxm                 # or {values: [h100_sxm, h200_sxm]}
    workload: {batch_size: 16, prompt_tokens: 1024, output_tokens: 256, tensor_parallel: 1}
    space:                             # Architecture fields, fixed or searched
      d_model: {values: [3072, 4096]}
      n_layers: {low: 24, high: 48, step: 4}
      moe: {n_experts: {values: [1, 8]}, top_k: {values: [1, 2]}}
      training_tokens: 1.5e+13         # training token budget (loss objective / constraint)
    constraints:                       # static (before prediction) and predicted (after)
      active_params: {min: 7.0e9, max: 9.0e9}
      fits_memory: true
      tpot: {max: 0.05}                # seconds; also ttft, latency, energy_per_output_token...
    objectives:                        # exactly these, in this order (default: the first two)
      latency: {metric: request}       # request | ttft | tpot
      energy: {source: hymell}         # hymell | tokens2wh
      loss: {source: chinchilla}       # chinchilla | besiroglu | joint_moe | krajewski2024 | gqa_chen2025 | besiroglu_heads | auto
      throughput: {metric: per_gpu}    # maximised
    study: {sampler: tpe, trials: 2000, seed: 0}

Every user mistake raises ConfigError as `file:line: key.path: rule, got value`.

One file (~1,000 lines) on purpose: the YAML schema, its parameters, objectives, constraints
and study settings are read and checked together (a constraint names an objective, a setting
depends on the sampler); the checks of single values live in `dse.spec.fields`.
"""

from __future__ import annotations

import difflib
import itertools
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dse.errors import ConfigError
from dse.spec import columns as C
from dse.spec import pattern as P
from dse.spec.choices import (
    BATCHING,
    KV_DTYPES,
    LINEAR_KINDS,
    NORMS,
    ROUTINGS,
    WEIGHT_DTYPES,
)
from dse.spec.fields import FIELDS
from dse.spec.fields import check as check_field
from dse.spec.hardware import gpu_names
from dse.spec.workload import ENGINES
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
BOOL_FIELDS = (
    "gated_mlp",
    "tied_embeddings",
    "qkv_bias",
    "shared_expert_gate",
    "qk_norm",
    "attn_output_gate",
    "linear_norm",
    "rope",
)
STR_FIELDS: dict[str, tuple[str, ...]] = {
    "norm": NORMS,
    "weight_dtype": WEIGHT_DTYPES,
    "kv_dtype": KV_DTYPES,
    "engine": ENGINES,
    "batching": BATCHING,
    "routing": ROUTINGS,
    "linear_kind": LINEAR_KINDS,
}
# Fields whose one value is a list (a layer pattern: `attention_pattern: [sliding, full]`);
# searched as `{values: [[full], [sliding, sliding, sliding, full]]}`.
LIST_FIELDS = tuple(k for k, f in FIELDS.items() if f.kind == "pattern")
ARCH_KEYS = tuple(k for k in C.ARCH_FIELDS)
MOE_KEYS = ("n_experts", "top_k", "d_ff_expert", "shared_expert_d_ff", "shared_expert_gate")
WORKLOAD_KEYS = C.WORKLOAD_FIELDS
# Fields of a configuration that are neither Architecture nor Workload fields: they travel in
# the configuration columns (and the trials table) beside `dse.spec.columns.CONFIG_FIELDS`.
EXTRA_FIELDS = ("training_tokens", "lifetime_tokens")
# Extra fields declared under `workload:` (the rest under `space:`): the output tokens the model
# serves over its life, which `lifetime_energy` charges at the predicted energy per token.
WORKLOAD_EXTRA = ("lifetime_tokens",)
SIZE_CONSTRAINTS = ("active_params", "total_params", "kv_bytes_per_token", "memory_bytes")
# Constraints on what the predictor (or a scaling law) says, evaluated after prediction, with
# their units: request latency, TTFT and TPOT in s; HYMELL energy per request and per output
# token in J; output tokens per second per GPU; tokens per second per user (1 / TPOT); loss in
# nats per token (the law's).
PREDICTED_CONSTRAINTS = (
    "latency",
    "ttft",
    "tpot",
    "energy",
    "energy_per_output_token",
    "throughput",
    "user_speed",
    "loss",
)
CONSTRAINT_KEYS = (*SIZE_CONSTRAINTS, "fits_memory", *PREDICTED_CONSTRAINTS)
LATENCY_METRICS = ("request", "ttft", "tpot")
ENERGY_SOURCES = ("hymell", "tokens2wh")
ENERGY_METRICS = ("request", "per_output_token")
ENERGY_PRESETS = ("corrected", "paper")
SIZE_METRICS = ("active_params", "total_params", "kv_bytes_per_token", "memory_bytes")
# Scaling laws of dse.estimators.quality: Hoffmann et al. 2022 (approach 3), its replication by
# Besiroglu et al. 2024, the joint MoE law of Ludziejewski et al. 2025, the fine-grained MoE law
# of Krajewski et al. 2024, the heads law of Chen et
# al. 2025, Besiroglu's law plus that heads term, the linear-complexity law of Shen et al. 2024,
# and `auto` (per row, the most specific of them
# for the row's family).
LOSS_LAWS = (
    "chinchilla",
    "besiroglu",
    "joint_moe",
    "krajewski2024",
    "gqa_chen2025",
    "besiroglu_heads",
    "shen2024",
    "auto",
)
THROUGHPUT_METRICS = ("per_gpu",)
USER_SPEED_METRICS = ("tokens_per_s",)
# How the training energy is priced: a J/FLOP, or the GPU's power over its achieved FLOP/s.
TRAINING_KEYS = ("metric", "direction", "j_per_flop", "achieved_flops_per_s", "power_w")
DIRECTIONS = ("minimize", "maximize")
# Objective kind -> (its keys, the key naming its metric, that key's choices, default metric,
# natural direction). A kind whose metric key is None takes no choice.
OBJECTIVE_KINDS: dict[str, tuple[tuple[str, ...], str, tuple[str, ...], str | None, str]] = {
    "latency": (("metric", "direction"), "metric", LATENCY_METRICS, "request", "minimize"),
    "energy": (
        ("source", "metric", "direction", "preset"),
        "source",
        ENERGY_SOURCES,
        "hymell",
        "minimize",
    ),
    "size": (("metric", "direction"), "metric", SIZE_METRICS, "active_params", "minimize"),
    "loss": (("source", "direction"), "source", LOSS_LAWS, None, "minimize"),
    "throughput": (("metric", "direction"), "metric", THROUGHPUT_METRICS, "per_gpu", "maximize"),
    "user_speed": (
        ("metric", "direction"),
        "metric",
        USER_SPEED_METRICS,
        "tokens_per_s",
        "maximize",
    ),
    # Training energy 6 N D x J/FLOP, and that plus the predicted (HYMELL) energy per output
    # token x workload.lifetime_tokens; J/FLOP given, or the power over the achieved FLOP/s.
    "training_energy": (TRAINING_KEYS, "metric", ("total",), "total", "minimize"),
    "lifetime_energy": (TRAINING_KEYS, "metric", ("total",), "total", "minimize"),
}
# Why a kind's direction is fixed (a size may be maximised: "the largest model that fits").
_BETTER = {
    "latency": "lower latency is better",
    "energy": "lower energy is better",
    "loss": "lower loss is better",
    "throughput": "more tokens per second per GPU is better",
    "user_speed": "more tokens per second per user is better",
    "training_energy": "lower energy is better",
    "lifetime_energy": "lower energy is better",
}
SAMPLERS = ("auto", "exact", "screened", "tpe", "nsga2", "nsga3", "random", "gp", "exhaustive")
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
class Objective:
    """One objective: what it measures (kind and metric or source) and which way is better."""

    kind: str  # latency | energy | size | loss | throughput | user_speed | training_energy | ...
    metric: str  # latency/energy/size/throughput/user_speed metric; "loss" for a loss
    source: str | None = None  # energy: hymell | tokens2wh; loss: the scaling law
    direction: str = "minimize"
    preset: str = "corrected"  # energy from tokens2wh: corrected (ours) | paper (as published)
    j_per_flop: float | None = None  # training_energy / lifetime_energy: J per training FLOP

    @property
    def name(self) -> str:
        """The objective's column name (`obj.<name>` in the trials table)."""
        if self.kind == "latency":
            return f"latency_{self.metric}"
        if self.kind == "energy":
            return f"energy_{self.source}_{self.metric}"
        if self.kind == "loss":
            return f"loss_{self.source}"
        if self.kind == "throughput":
            return f"throughput_{self.metric}"
        if self.kind == "user_speed":
            return "user_tokens_per_s"
        if self.kind in ("training_energy", "lifetime_energy"):
            return self.kind
        return self.metric  # size: active_params, total_params, ...


# SI unit of each objective column, by the first word of its name (`Objective.name`): latency
# and energy columns in s and J, loss in nats per token, sizes in parameters unless bytes.
OBJECTIVE_UNITS = {
    "latency": "s",
    "energy": "J",
    "kv": "bytes",
    "memory": "bytes",
    "loss": "nats",  # per token, as the scaling laws fit it
    "throughput": "tokens/s/GPU",
    "user": "tokens/s",
    "training": "J",  # training_energy
    "lifetime": "J",  # lifetime_energy
}


def objective_unit(name: str) -> str:
    """The SI unit of an objective column from its name (sizes are parameter counts)."""
    return OBJECTIVE_UNITS.get(name.split("_")[0], "parameters")


DEFAULT_OBJECTIVES = (Objective("latency", "request"), Objective("energy", "request", "hymell"))


@dataclass(frozen=True)
class Objectives:
    """The study's objectives in order (the YAML's), each with its direction."""

    items: tuple[Objective, ...] = DEFAULT_OBJECTIVES

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.items)

    @property
    def directions(self) -> tuple[str, ...]:
        """ "minimize" / "maximize" per objective, as Optuna's `create_study(directions=)`."""
        return tuple(o.direction for o in self.items)

    def of(self, kind: str) -> Objective | None:
        """The objective of this kind, if any (a mapping holds at most one per kind)."""
        return next((o for o in self.items if o.kind == kind), None)

    # Shorthands for the kinds other modules ask about.
    @property
    def energy_source(self) -> str | None:
        o = self.of("energy")
        return o.source if o else None

    @property
    def energy_preset(self) -> str:
        o = self.of("energy")
        return o.preset if o else "corrected"

    @property
    def loss_law(self) -> str | None:
        o = self.of("loss")
        return o.source if o else None


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
    # `FILE:LINE: key: ...` of what is allowed but most likely a mistake (a constraint limit
    # outside its plausible range, trials with sampler exact); `load_space` prints them
    warnings: tuple[str, ...] = ()

    @property
    def searched(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.searched)

    @property
    def fixed(self) -> dict[str, Any]:
        return {p.name: p.values[0] for p in self.params if not p.searched}

    @property
    def extra_fields(self) -> tuple[str, ...]:
        """Non-architecture, non-workload columns this space declares (training_tokens)."""
        names = {p.name for p in self.params}
        return tuple(k for k in EXTRA_FIELDS if k in names)

    @property
    def config_fields(self) -> tuple[str, ...]:
        """Every configuration column of this space's batches and trials tables."""
        return (*C.CONFIG_FIELDS, *self.extra_fields)

    @property
    def static_constraints(self) -> dict[str, Any]:
        """Constraints decided before prediction (sizes, memory): what `dse check` counts."""
        return {k: v for k, v in self.constraints.items() if k not in PREDICTED_CONSTRAINTS}

    @property
    def predicted_constraints(self) -> dict[str, Any]:
        """Constraints on predicted metrics (latency, energy, throughput, loss): checked per
        configuration during the sweep, after prediction."""
        return {k: v for k, v in self.constraints.items() if k in PREDICTED_CONSTRAINTS}

    @property
    def loss_laws(self) -> tuple[str, ...]:
        """Every scaling law a loss objective or constraint needs, objective's first."""
        laws = [self.objectives.loss_law, (self.constraints.get("loss") or {}).get("source")]
        return tuple(dict.fromkeys(law for law in laws if law))

    def complete(self, cols: dict[str, Any], *, own: bool = False) -> C.Configs:
        """The checked batch (`dse.spec.columns.as_columns`), keeping this space's extra fields
        (training_tokens, an integer count of tokens) that it would drop. `own`: the arrays of
        `cols` were built for this call (frozen in place, not copied)."""
        out, n = C.as_columns(cols, own=own)
        extra = {}
        for k in self.extra_fields:
            v = np.asarray(cols[k])
            extra[k] = (np.full(n, v.item()) if v.ndim == 0 else v).astype(np.int64)
        return out.with_columns(extra) if extra else out

    def size(self) -> int:
        """Number of distinct configurations (product of each parameter's value count)."""
        return int(np.prod([len(p.values) for p in self.params], dtype=object))

    def enumerate(self, limit: int = 20_000_000) -> C.Configs:
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
        return self.complete(
            {k: (np.full(n, v) if np.ndim(v) == 0 else v) for k, v in cols.items()}, own=True
        )

    def raw_columns(self, rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
        """The columns of a list of sampled searched-parameter dicts over the fixed values, not
        yet checked (`columns_from` checks them; change a copy, then `complete` it)."""
        n = len(rows)
        cols: dict[str, Any] = {k: np.full(n, v) for k, v in self.fixed.items()}
        for p in self.searched:
            cols[p.name] = np.asarray([r[p.name] for r in rows])
        return cols

    def columns_from(self, rows: list[dict[str, Any]]) -> C.Configs:
        """The checked batch of a list of sampled searched-parameter dicts: checked here once,
        `dse.predict.predict` takes it as it is."""
        return self.complete(self.raw_columns(rows), own=True)

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
    """A path as given, or the bundled example of that name (`dense_8b`) when no such file
    exists; neither: a ConfigError naming the shipped spaces whose names are close (ignoring
    case, `_` and `-`: `dense8b` -> `dense_8b`), or listing them for a bare name."""
    p = Path(path)
    if p.exists():
        return p
    from dse.resources import shipped

    stem = p.name[:-5] if p.name.endswith(".yaml") else p.name
    names = bundled_spaces()
    if stem in names:
        return Path(str(shipped("search_spaces") / f"{stem}.yaml"))
    close = close_names(stem, names)
    hint = (
        f"; did you mean the shipped search space {' or '.join(map(repr, close))}?"
        if close
        else f"; shipped search spaces: {', '.join(names)}"
        if len(p.parts) == 1  # a bare name: perhaps meant as a shipped one
        else ""
    )
    raise ConfigError(f"{p}: file not found{hint}")


def close_names(given: str, names: list[str] | tuple[str, ...], n: int = 3) -> list[str]:
    """Names close to `given` when case, `_` and `-` are ignored (an exact match so first),
    each once."""
    key = lambda s: s.lower().replace("_", "").replace("-", "")  # noqa: E731
    by_key: dict[str, str] = {}
    for name in names:
        by_key.setdefault(key(name), name)
    hits = difflib.get_close_matches(key(given), list(by_key), n=n, cutoff=0.6)
    return [by_key[h] for h in hits]


def load_space(path: str | Path, warn: bool = True) -> SearchSpace:
    """Read and validate a search-space YAML file (or a bundled example by name); with `warn`,
    print the space's warnings on stderr (`dse: warning: FILE:LINE: key: ...`)."""
    doc = load_located(resolve_space_path(path))
    space = parse_space(doc)
    if warn:
        import sys

        for w in space.warnings:
            print(f"dse: warning: {w}", file=sys.stderr)
    return space


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

    # hardware (any case: `H100_SXM` is h100_sxm, as --gpu and a CSV's gpu column read it)
    hw = data.get("hardware", "h100_sxm")
    params.append(_param(doc, ("hardware",), "gpu", hw, str_choices=tuple(gpu_names())))

    # workload
    wl = data.get("workload") or {}
    _mapping(doc, ("workload",), wl)
    _no_unknown(doc, ("workload",), wl, (*WORKLOAD_KEYS, *WORKLOAD_EXTRA))
    for key in (*WORKLOAD_KEYS, *WORKLOAD_EXTRA):
        if key in wl:
            params.append(
                _param(doc, ("workload", key), key, wl[key], str_choices=STR_FIELDS.get(key))
            )

    # architecture
    sp = data["space"]
    _mapping(doc, ("space",), sp)
    _no_unknown(
        doc,
        ("space",),
        sp,
        (*ARCH_KEYS, "moe", *(k for k in EXTRA_FIELDS if k not in WORKLOAD_EXTRA)),
    )
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

    if "objectives" in data and not data["objectives"]:
        # `objectives: {}` is not "the default": leaving the key out is
        raise doc.error(
            ("objectives",),
            "must name at least two objectives (leave the key out for the default, "
            f"{' and '.join(Objectives().names)}), got {data['objectives']!r}",
        )
    warnings: list[str] = []
    objectives = _objectives(doc, data.get("objectives") or {})
    constraints = _constraints(doc, data.get("constraints") or {}, objectives, warnings)
    study = _study(doc, data.get("study") or {}, warnings)
    for kind in ("training_energy", "lifetime_energy"):
        if objectives.of(kind) is not None and "training_tokens" not in names:
            raise doc.error(
                ("objectives", kind),
                "needs space.training_tokens (the training token budget), got none",
            )
    if objectives.of("lifetime_energy") is not None and "lifetime_tokens" not in names:
        raise doc.error(
            ("objectives", "lifetime_energy"),
            "needs workload.lifetime_tokens (the output tokens served over the model's life)"
            ", got none",
        )
    if "training_tokens" not in names:
        for keys, needed in (
            (("objectives", "loss"), objectives.loss_law is not None),
            (("constraints", "loss"), "loss" in constraints),
        ):
            if needed:
                raise doc.error(
                    keys, "needs space.training_tokens (the training token budget), got none"
                )
    _check_law_families(doc, params, objectives, constraints)
    space = SearchSpace(
        name=name,
        source=str(doc.path),
        params=tuple(params),
        constraints=constraints,
        objectives=objectives,
        study=study,
        description=str(data.get("description", "")),
        raw=data,
        warnings=tuple(warnings),
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
    if isinstance(v, float) and not math.isfinite(v):  # YAML's .nan / .inf
        raise doc.error(keys, f"must be a finite number, got {v!r}")
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
        if str_choices is not None and name in FIELDS:
            # a declared choice: its rule, case and did-you-mean from dse.spec.fields
            return check_field(name, v, lambda _i, msg: doc.error(at, msg))
        if str_choices is not None:
            if not isinstance(v, str) or v not in str_choices:
                close = difflib.get_close_matches(str(v), str_choices, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise doc.error(at, f"must be one of {', '.join(str_choices)}{hint}, got {v!r}")
            return v
        if name in FIELDS:  # the limits every entry point shares (dse.spec.fields)
            return check_field(name, v, lambda _i, msg: doc.error(at, msg))
        out = _number(doc, at, v, integer=True)
        if out < 0 or (out == 0 and name not in ("shared_expert_d_ff",)):
            raise doc.error(at, f"must be a positive integer, got {v!r}")
        return out

    if isinstance(spec, dict):
        # a version text has no range either (`engine_version: {values: ["0.4.2", "0.11.1"]}`)
        text = bool(str_choices) or (name in FIELDS and FIELDS[name].kind == "version")
        allowed = ("values",) if (is_bool or text) else ("values", "low", "high", "step", "log")
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
    if isinstance(spec, list) and name not in LIST_FIELDS:
        raise doc.error(keys, f"a list of values must be written as {{values: {spec!r}}}")
    return Param(name, keys, (value(spec, keys),), "fixed")


def _choice(doc: Located, keys: KeyPath, v: Any, choices: tuple[str, ...]) -> str:
    """`v` when it is one of `choices`, else the one-form error with a did-you-mean."""
    if v not in choices:
        close = difflib.get_close_matches(str(v), choices, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise doc.error(keys, f"must be one of {', '.join(choices)}{hint}, got {v!r}")
    return str(v)


def _constraints(
    doc: Located, data: Any, objectives: Objectives, warnings: list[str]
) -> dict[str, Any]:
    """The constraints; each limit must be a finite number > 0 (`dse.spec.fields`: NaN would
    rule out every configuration, inf none), and one outside the metric's plausible range adds
    a warning with its unit."""
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
        _no_unknown(doc, keys, spec, ("min", "max", "source") if key == "loss" else ("min", "max"))
        if not (set(spec) & {"min", "max"}):
            raise doc.error(keys, "needs `min`, `max` or both")
        limit = FIELDS[key]
        bounds: dict[str, float | None] = {}
        for bound in ("min", "max"):
            at = (*keys, bound)
            bounds[bound] = (
                check_field(key, spec[bound], lambda _i, msg, at=at: doc.error(at, msg))
                if bound in spec
                else None
            )
            odd = None if bounds[bound] is None else limit.implausible(bounds[bound])
            if odd:
                warnings.append(f"{doc.where(at)}: {odd}")
        lo, hi = bounds["min"], bounds["max"]
        if lo is not None and hi is not None and lo > hi:
            raise doc.error(keys, f"`min <= max` must hold, but got (min={lo:g}, max={hi:g})")
        out[key] = {"min": lo, "max": hi}
        if key == "loss":
            # The law: the constraint's own, else the loss objective's.
            law = spec.get("source", objectives.loss_law)
            if law is None:
                raise doc.error(
                    (*keys, "source"),
                    f"is required when no loss objective names the law ({', '.join(LOSS_LAWS)})"
                    ", got none",
                )
            out[key]["source"] = _choice(doc, (*keys, "source"), law, LOSS_LAWS)
    return out


# Laws that cannot price a family at all (no term for it): the family's field and its test.
# gqa_chen2025 and besiroglu_heads have no expert term (Chen et al. 2025 fit dense GQA only),
# nor has shen2024 (Shen et al. 2024 fit dense LLaMA and linear models only).
DENSE_ONLY_LAWS = ("gqa_chen2025", "besiroglu_heads", "shen2024")


def _check_law_families(
    doc: Located, params: list[Param], objectives: Objectives, constraints: dict[str, Any]
) -> None:
    """A dense-only law asked for a space that searches MoE configurations: the located error
    (the law would price every MoE row by its dense trunk alone). `auto` picks per row."""
    experts = [p for p in params if p.name == "n_experts"]
    most = max((int(v) for v in experts[0].values), default=1) if experts else 1
    if most <= 1:
        return
    asked = [(("objectives", "loss", "source"), objectives.loss_law)]
    if "loss" in constraints:
        asked.append((("constraints", "loss", "source"), constraints["loss"]["source"]))
    for keys, law in asked:
        if law in DENSE_ONLY_LAWS:
            raise doc.error(
                keys,
                f"{law} prices dense models only and space.n_experts reaches {most} "
                f"(use joint_moe, or auto for the most specific law per row), got {law!r}",
            )


def _objectives(doc: Located, data: Any) -> Objectives:
    """The objectives exactly as listed, in their order; none listed: latency and energy of
    the whole request. Each kind appears at most once (the keys of a mapping)."""
    _mapping(doc, ("objectives",), data)
    _no_unknown(doc, ("objectives",), data, tuple(OBJECTIVE_KINDS))
    if not data:
        return Objectives()
    items: list[Objective] = []
    for kind, spec in data.items():
        keys: KeyPath = ("objectives", kind)
        spec = {} if spec is None else spec  # `user_speed:` with nothing after it
        _mapping(doc, keys, spec)
        allowed, choice_key, choices, default, natural = OBJECTIVE_KINDS[kind]
        _no_unknown(doc, keys, spec, allowed)
        if choice_key not in spec and default is None:
            raise doc.error(
                (*keys, choice_key), f"is required (one of {', '.join(choices)}), got none"
            )
        chosen = _choice(doc, (*keys, choice_key), spec.get(choice_key, default), choices)
        direction = _choice(doc, (*keys, "direction"), spec.get("direction", natural), DIRECTIONS)
        if kind != "size" and direction != natural:
            raise doc.error(
                (*keys, "direction"), f"must be {natural} ({_BETTER[kind]}), got {direction!r}"
            )
        if kind == "energy":
            metric = _choice(doc, (*keys, "metric"), spec.get("metric", "request"), ENERGY_METRICS)
            preset = _choice(
                doc, (*keys, "preset"), spec.get("preset", "corrected"), ENERGY_PRESETS
            )
            items.append(Objective(kind, metric, chosen, direction, preset))
        elif kind == "loss":
            items.append(Objective(kind, "loss", chosen, direction))
        elif kind in ("training_energy", "lifetime_energy"):
            jpf = _j_per_flop(doc, keys, spec)
            items.append(Objective(kind, chosen, None, direction, j_per_flop=jpf))
        else:
            items.append(Objective(kind, chosen, None, direction))
    if len(items) < 2:
        raise doc.error(
            ("objectives",),
            "a front needs at least two objectives (e.g. loss and energy), "
            f"got {[o.name for o in items]}",
        )
    return Objectives(tuple(items))


def _j_per_flop(doc: Located, keys: KeyPath, spec: dict[str, Any]) -> float:
    """J per training FLOP: `j_per_flop`, or `power_w` / `achieved_flops_per_s` (both)."""
    given = [k for k in ("j_per_flop", "achieved_flops_per_s", "power_w") if k in spec]
    if "j_per_flop" in spec:
        if len(given) > 1:
            raise doc.error(
                keys,
                "takes j_per_flop or achieved_flops_per_s with power_w, not both, got "
                f"{', '.join(given)}",
            )
        v = _number(doc, (*keys, "j_per_flop"), spec["j_per_flop"], integer=False)
        if not v > 0:
            raise doc.error((*keys, "j_per_flop"), f"must be > 0, got {v}")
        return float(v)
    missing = [k for k in ("achieved_flops_per_s", "power_w") if k not in spec]
    if missing:
        raise doc.error(
            (*keys, missing[0]),
            "is required (or j_per_flop): the training GPU's achieved FLOP/s and its power in W"
            f", got {', '.join(given) or 'neither'}",
        )
    vals = {}
    for k in ("achieved_flops_per_s", "power_w"):
        v = _number(doc, (*keys, k), spec[k], integer=False)
        if not v > 0:
            raise doc.error((*keys, k), f"must be > 0, got {v}")
        vals[k] = float(v)
    return vals["power_w"] / vals["achieved_flops_per_s"]


def _study(doc: Located, data: Any, warnings: list[str]) -> StudySettings:
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
    if sampler in ("exact", "exhaustive") and "trials" in data:
        # a warning, not an error: a `--sampler` flag may pick a sampler that uses it
        warnings.append(
            f"{doc.where(('study', 'trials'))}: ignored by sampler {sampler}, which prices "
            f"every configuration of the space once (trials has no meaning; it applies only "
            f"if --sampler picks a sampling sampler), got {trials}"
        )
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
    if "head_dim" not in by:
        # A derived head_dim (d_model / n_heads) must be even and >= 8 (RoPE rotates pairs),
        # like an explicit one: name the pairs instead of "no configuration is valid".
        dims = sorted(
            {d // h for d, h in itertools.product(vals("d_model", ()), heads) if d % h == 0}
        )
        if dims and not any(hd % 2 == 0 and hd >= 8 for hd in dims):
            raise doc.error(
                by["n_heads"].path,
                "d_model / n_heads (the head_dim) must be an even integer >= 8 (RoPE rotates "
                f"pairs) for some pair, got head_dim {dims} from d_model "
                f"{list(vals('d_model', ()))} and n_heads {list(heads)}",
            )
    ks, es = vals("top_k", (1,)), vals("n_experts", (1,))
    if not any(k <= e for k, e in itertools.product(ks, es)):
        raise doc.error(
            by["top_k"].path, f"must be <= n_experts {list(es)} for some value, got {list(ks)}"
        )
    _check_attention(doc, by, vals)
    tps = vals("tensor_parallel", (1,))
    if not any(h % t == 0 for h, t in itertools.product(heads, tps)):
        raise doc.error(
            by["tensor_parallel"].path,
            f"no value divides any n_heads {list(heads)}, got {list(tps)}",
        )


def _check_attention(doc: Located, by: dict[str, Param], vals: Any) -> None:
    """The attention families' combinations: some pattern must repeat evenly over some
    n_layers, and a sliding window must be shorter than some workload's context (a window of
    at least prompt + output tokens makes the sliding layers full attention); an ffn_pattern
    too must repeat evenly over some n_layers."""
    layers = vals("n_layers", ())
    if "ffn_pattern" in by:
        ffns = vals("ffn_pattern", (P.FFNS.default,))
        if not any(n % P.period(p, P.FFNS) == 0 for p, n in itertools.product(ffns, layers)):
            raise doc.error(
                by["ffn_pattern"].path,
                f"its length must divide n_layers {list(layers)} for some value, got patterns "
                f"{list(ffns)} of {sorted({P.period(p, P.FFNS) for p in ffns})} layers",
            )
    if "attention_pattern" not in by:
        return
    patterns = vals("attention_pattern", (P.FULL,))
    if not any(n % P.period(p) == 0 for p, n in itertools.product(patterns, layers)):
        raise doc.error(
            by["attention_pattern"].path,
            f"its length must divide n_layers {list(layers)} for some value, got patterns "
            f"{list(patterns)} of {sorted({P.period(p) for p in patterns})} layers",
        )
    sliding = [p for p in patterns if P.has_kind(p, "sliding")]
    if not sliding:
        return
    windows = vals("sliding_window", (0,))
    context = max(p + o for p, o in itertools.product(
        vals("prompt_tokens", (C.DEFAULTS["prompt_tokens"],)),
        vals("output_tokens", (C.DEFAULTS["output_tokens"],)),
    ))  # fmt: skip
    if not any(0 < w < context for w in windows):
        where = (
            by["sliding_window"].path if "sliding_window" in by else by["attention_pattern"].path
        )
        raise doc.error(
            where,
            f"a sliding layer needs a window shorter than the context (prompt + output = "
            f"{context} tokens at most) to differ from a full one, got sliding_window "
            f"{list(windows)}",
        )


# ---------------------------------------------------------------------- counting
@dataclass(frozen=True)
class SpaceCount:
    total: int
    valid: int | None  # None when too large to enumerate
    feasible: int | None
    violations: dict[str, int]  # constraint name -> how many configurations break it
    # why the others are not valid architectures: the first rule each breaks (its message,
    # `dse.spec.rules.check_columns`) -> how many, most first
    invalid: dict[str, int] = field(default_factory=dict)


def count_feasible(space: SearchSpace, limit: int = 5_000_000, chunk: int = 500_000) -> SpaceCount:
    """Count valid and feasible configurations by vectorised enumeration (None if too large)."""
    total = space.size()
    if total > limit:
        return SpaceCount(total, None, None, {})
    cols = space.enumerate(limit)
    valid = feasible = 0
    violations: dict[str, int] = {}
    invalid: Counter[str] = Counter()
    for start in range(0, total, chunk):
        part = {k: v[start : start + chunk] for k, v in cols.items()}
        n = len(part["d_model"])
        d = C.derived(part, n)
        # Only what is known before prediction: predicted limits are checked during the sweep.
        cv = C.constraint_values(d, space.static_constraints)
        ok_valid = cv["valid"] <= 0
        valid += int(ok_valid.sum())
        invalid.update(d["invalid"][~ok_valid].tolist())
        feasible += int(C.feasible(cv).sum())
        for name, v in cv.items():
            if name != "valid":
                violations[name] = violations.get(name, 0) + int(((v > 0) & ok_valid).sum())
    return SpaceCount(total, valid, feasible, violations, dict(invalid.most_common()))


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
