"""Batches of configurations as columns: architecture + workload + GPU, and what follows from them.

A configuration batch is a mapping of column name -> numpy array of length n, with one column per
`Architecture` field, per `Workload` field, and `gpu`. Everything here is vectorised.

`as_columns` is the one checker: it completes a batch (defaults, derived defaults) and checks
every value against the field table, and returns a `Configs`, the checked batch. A `Configs` is
made only there, is read-only (its arrays reject writes), and says by its type that its columns
were checked: `dse.predict.predict` takes one without checking it again, so a sweep's batch is
checked once (`SearchSpace.columns_from`). `derived` (validity, sizes, memory) is computed from a
`Configs`, not kept in it: its answers depend on the GPU table and on what the caller asks for.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from dataclasses import fields
from typing import TYPE_CHECKING, Any

import numpy as np

from dse.errors import ConfigError
from dse.spec import arch as A
from dse.spec import rules as R
from dse.spec.fields import FIELDS, is_one_pattern, object_array
from dse.spec.fields import check as check_field
from dse.spec.hardware import fp4_gpu_names, get_gpu
from dse.spec.workload import Workload

if TYPE_CHECKING:  # pandas is imported only where a DataFrame or a missing value needs it
    import pandas as pd

ARCH_FIELDS: tuple[str, ...] = tuple(A.Architecture.field_names())
WORKLOAD_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Workload))
CONFIG_FIELDS: tuple[str, ...] = (*ARCH_FIELDS, *WORKLOAD_FIELDS, "gpu")

# Defaults for columns a batch may omit (None: derived from other columns).
DEFAULTS: dict[str, Any] = {
    **{
        f.name: f.default
        for f in fields(A.Architecture)
        if f.name not in ("d_model", "n_layers", "n_heads", "d_ff")
    },
    **{f.name: f.default for f in fields(Workload)},
    "gpu": "h100_sxm",
}
REQUIRED: tuple[str, ...] = ("d_model", "n_layers", "n_heads", "d_ff")
# Each default as a one-row column, repeated to a batch's length (np.full infers the dtype
# from a Python value on every call: ~30 defaulted columns a one-configuration call pays for).
_DEFAULT_ROW: dict[str, np.ndarray] = {
    k: np.full(1, v) for k, v in DEFAULTS.items() if v is not None
}
# The one-row default columns, read-only (`as_columns` of one configuration shares them).
_DEFAULT_ONE: dict[str, np.ndarray] = {k: v.repeat(1) for k, v in _DEFAULT_ROW.items()}
for _v in _DEFAULT_ONE.values():
    _v.setflags(write=False)
# Columns of layer patterns (`dse.spec.pattern`): a list is one value, not a column.
PATTERN_FIELDS: tuple[str, ...] = tuple(k for k, f in FIELDS.items() if f.kind == "pattern")
# Derived defaults: a column left out (or an empty CSV cell) takes this column's value: MHA when
# n_kv_heads is absent, the expert width of the dense FFN. (head_dim = d_model / n_heads is
# resolved after the checks, see `as_columns`.)
DERIVED_FROM: dict[str, str] = {"n_kv_heads": "n_heads", "d_ff_expert": "d_ff"}


# The fields of the attention families' validity rules (`dse.spec.rules._attention_rules`).
ATTENTION_FIELDS: tuple[str, ...] = (
    "attention_pattern",
    "sliding_window",
    "kv_lora_rank",
    "q_lora_rank",
    "qk_rope_head_dim",
    "qk_nope_head_dim",
    "v_head_dim",
    "qkv_bias",
    "attn_output_gate",
    "linear_kind",
    "linear_n_heads",
    "linear_n_groups",
    "n_dense_layers",
    "ffn_pattern",
)


# The key only `as_columns` (and unpickling) holds: a `Configs` is never built unchecked.
_CHECKED = object()
# Columns a `Configs` holds besides CONFIG_FIELDS that the check itself made.
CHECK_COLUMNS: tuple[str, ...] = ("head_dim_defaulted",)


class Configs(Mapping[str, np.ndarray]):
    """A checked batch of configurations: complete columns (`as_columns`), n rows each.

    A read-only mapping of column name -> numpy array whose arrays reject writes, so a
    column cannot change after its check; `dict(configs)` is a plain (unchecked) copy to change.
    Made by `as_columns` / `Configs.check` only; `take` (rows) and `with_columns` (columns
    outside the configuration, e.g. a space's training_tokens) keep it checked.
    """

    __slots__ = ("_cols", "n")

    def __init__(self, cols: dict[str, np.ndarray], n: int, *, _key: object = None) -> None:
        if _key is not _CHECKED:
            raise TypeError(
                "Configs is made by dse.spec.columns.as_columns or Configs.check (the checker), "
                "not built directly"
            )
        self._cols = cols
        self.n = n

    @classmethod
    def check(cls, configs: pd.DataFrame | Mapping[str, Any]) -> Configs:
        """The checked batch of `configs` (`as_columns`); a `Configs` comes back as it is."""
        return as_columns(configs)[0]

    def __getitem__(self, key: str) -> np.ndarray:
        return self._cols[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._cols)

    def __len__(self) -> int:
        return len(self._cols)

    def __contains__(self, key: object) -> bool:
        return key in self._cols

    def __repr__(self) -> str:
        return f"Configs(n={self.n}, columns={len(self._cols)})"

    def __reduce__(self) -> tuple[Any, ...]:
        # pickled arrays come back writeable: frozen again on the way in
        return (_restore, (self._cols, self.n))

    def take(self, rows: Any, same: Collection[str] = ()) -> Configs:
        """The rows `rows` (indices or a boolean mask) as a Configs: checked rows stay checked.

        `same`: columns the caller knows hold one value in every row (a space's fixed fields
        and defaults, `dse.sweep.space_index.constant_columns`): their first m rows, a
        read-only view, rather than a gather (~9 of the ~13 ms a 131,072-row chunk's ~50
        columns take, most of them constant)."""
        r = np.asarray(rows)
        by_index = r.dtype.kind in "iu"  # `take`: ~2x a fancy index's speed on ~50 columns
        if not same:
            part = {k: v.take(r, axis=0) if by_index else v[rows] for k, v in self._cols.items()}
            return Configs(_frozen(part, own=True), len(part["gpu"]), _key=_CHECKED)
        m = int(np.count_nonzero(r)) if r.dtype == bool else len(r)
        gathered = _frozen(
            {
                k: v.take(r, axis=0) if by_index else v[r]
                for k, v in self._cols.items()
                if k not in same or m > self.n
            },
            own=True,
        )
        # a view of a read-only column is read-only itself: nothing to copy or freeze
        part = {k: gathered[k] if k in gathered else v[:m] for k, v in self._cols.items()}
        return Configs(part, m, _key=_CHECKED)

    def with_columns(self, extra: Mapping[str, Any]) -> Configs:
        """This batch plus columns outside the configuration (a space's training_tokens, which
        the predictor does not read), each n long; a configuration column cannot be replaced
        (that would skip its check: change `dict(configs)` and check it again)."""
        taken = [k for k in extra if k in CONFIG_FIELDS or k in CHECK_COLUMNS]
        if taken:
            raise ValueError(f"with_columns: {', '.join(taken)}: checked columns are not replaced")
        add = {k: np.asarray(v) for k, v in extra.items()}
        for k, v in add.items():
            if v.shape != (self.n,):
                raise ValueError(f"with_columns: {k}: must hold {self.n} rows, got shape {v.shape}")
        return Configs({**self._cols, **_frozen(add, own=False)}, self.n, _key=_CHECKED)


def _frozen(cols: dict[str, np.ndarray], own: bool) -> dict[str, np.ndarray]:
    """`cols` with every array read-only. An array that may be someone else's (a view, or not
    `own`ed) is copied first, so freezing a checked column never freezes a caller's input.
    (~1 us a column: a one-row call freezes ~50; `setflags` is the cheaper spelling.)"""
    for k, v in cols.items():
        if v.base is not None or not own:
            v = cols[k] = v.copy()
        v.setflags(write=False)
    return cols


def _restore(cols: dict[str, np.ndarray], n: int) -> Configs:
    return Configs(_frozen(dict(cols), own=False), n, _key=_CHECKED)


def as_columns(
    configs: pd.DataFrame | Mapping[str, Any], *, own: bool = False
) -> tuple[Configs, int]:
    """Normalise and check a DataFrame or mapping: complete columns (defaults filled, derived
    resolved, every value checked against the field table) as a `Configs`, and n.

    A `Configs` is already checked: it comes back as it is. `own=True`: the caller hands its
    arrays over (built for this call, e.g. `SearchSpace.columns_from`), frozen in place rather
    than copied."""
    if isinstance(configs, Configs):
        return configs, configs.n
    if _is_frame(configs):
        raw = {c: configs[c].to_numpy() for c in configs.columns}
    else:
        raw = dict(configs)
    inputs = {id(v) for v in raw.values() if isinstance(v, np.ndarray)} if not own else set()
    n = 1
    for k, v in raw.items():
        if k in PATTERN_FIELDS and not isinstance(v, np.ndarray):
            continue  # a list here is one pattern ([sliding, full]), not a column's length
        if np.ndim(v) > 0:
            n = len(v)
            break
    missing = [c for c in REQUIRED if c not in raw]
    if missing:
        raise ConfigError(f"configuration is missing required field(s): {', '.join(missing)}")
    cols: dict[str, np.ndarray] = {}
    defaulted: set[str] = set()  # filled from the field table's default: valid as declared
    for name in CONFIG_FIELDS:
        if name not in raw:
            t = _DEFAULT_ROW.get(name)
            if t is None:  # derived below
                cols[name] = None  # type: ignore[assignment]
            else:  # one value for every row (a pattern's default is its text), a new array
                defaulted.add(name)
                # one row: the read-only default column made once (read-only: sharing it
                # between batches cannot change one of them)
                cols[name] = _DEFAULT_ONE[name] if n == 1 else t.repeat(n)
            continue
        v = raw[name]
        nd = v.ndim if isinstance(v, np.ndarray) else np.ndim(v)
        if v is None or (nd > 0 and _all_missing(v)):
            # a column of None / NaN is an absent one: its default (an empty list stays an error)
            t = _DEFAULT_ROW.get(name) if v is None or np.size(v) else None
            if t is not None:
                defaulted.add(name)
            cols[name] = None if t is None else t.repeat(n)  # type: ignore[assignment]
            continue
        if name in PATTERN_FIELDS and not isinstance(v, np.ndarray):
            # One pattern for every row ([sliding, full] from YAML), or one per row: a list of
            # the batch's length of texts or of lists (like every other column).
            per_row = n > 1 and len(v) == n and not isinstance(v, str)
            per_row = per_row and all(isinstance(x, str | list | tuple) for x in v)
            v = [v] * n if is_one_pattern(v) and not per_row else v
            arr = object_array(v) if any(not isinstance(x, str) for x in v) else np.asarray(v)
        else:
            arr = np.asarray(v)
        if arr.ndim == 0:
            arr = np.full(n, arr.item())
        cols[name] = arr
    # Derived defaults (DERIVED_FROM), and head_dim = d_model / n_heads.
    for name, source in DERIVED_FROM.items():
        if cols[name] is None:
            cols[name] = cols[source].copy()
    # head_dim defaults to d_model / n_heads; remember where it was defaulted, because only
    # there must n_heads divide d_model (an explicit head_dim may differ, as in Mistral-Nemo).
    if cols["head_dim"] is None:
        cols["head_dim"] = np.full(n, FIELDS["head_dim"].min)
        cols["head_dim_defaulted"] = np.ones(n, dtype=bool)
    else:
        # None / NaN entries take the default; every other entry is checked below.
        missing_hd = _is_missing(cols["head_dim"])
        cols["head_dim"] = np.where(missing_hd, FIELDS["head_dim"].min, cols["head_dim"])
        cols["head_dim_defaulted"] = missing_hd
    # Every value against the field table (dse.spec.fields): types, limits, choices. The GPU name is
    # judged per row (`dse predict` marks the row, the sweep reports the space).
    for name in ARCH_FIELDS + WORKLOAD_FIELDS:
        if name not in defaulted:
            cols[name] = check_field(name, cols[name], name)
    default_hd = cols["d_model"] // cols["n_heads"]
    cols["head_dim"] = np.where(cols["head_dim_defaulted"], default_hd, cols["head_dim"])
    cols["gpu"] = cols["gpu"].astype(str)
    for k, v in cols.items():  # a caller's array (passed through unchanged) is copied, not frozen
        if id(v) in inputs:
            cols[k] = v.copy()
    return Configs(_frozen(cols, own=True), n, _key=_CHECKED), n


def _is_frame(x: Any) -> bool:
    """A pandas DataFrame, told without importing pandas (a CLI call need not load it)."""
    return type(x).__name__ == "DataFrame" and type(x).__module__.split(".")[0] == "pandas"


def _is_missing(v: Any) -> np.ndarray:
    """True where an entry of a column is missing: None or NaN."""
    a = np.asarray(v)
    if a.dtype.kind == "f":
        return np.isnan(a)
    if a.dtype.kind != "O":
        return np.zeros(a.shape, dtype=bool)
    return np.array([x is None or (isinstance(x, float) and x != x) for x in a], dtype=bool)


def _all_missing(v: Any) -> bool:
    a = np.asarray(v)
    # Fast paths (pd.isna on 10^5 strings costs milliseconds per column): numbers, booleans and
    # fixed-width strings hold no missing value but NaN.
    if a.size and a.dtype.kind in "biuUS":
        return False
    if a.size and a.dtype.kind in "fc":
        return bool(np.isnan(a).all())
    import pandas as pd

    try:
        return bool(pd.isna(np.asarray(v, dtype=object)).all())
    except (TypeError, ValueError):
        return False


def architecture(cols: Mapping[str, np.ndarray]) -> A.Architecture:
    """The batched Architecture of complete columns."""
    return A.Architecture(**{k: cols[k] for k in ARCH_FIELDS})


def gpu_table(gpus: np.ndarray, attr: str) -> np.ndarray:
    """Per-row GPU spec values (e.g. 'hbm_capacity_bytes') for an array of registry names."""
    out = np.empty(len(gpus), dtype=float)
    if len(gpus) and _one_value(gpus):
        # one GPU over the batch (most of a sweep's chunks): no np.unique, which hashes every
        # name (~9 ms a 131,072-row chunk, twice a `derived`)
        value = getattr(get_gpu(str(gpus[0])), attr)
        out.fill(np.nan if value is None else float(value))
        return out
    for name in np.unique(gpus):
        value = getattr(get_gpu(str(name)), attr)
        out[gpus == name] = np.nan if value is None else float(value)
    return out


def _one_value(a: np.ndarray) -> bool:
    """Whether every entry of a non-empty column equals its first (its last checked first)."""
    return bool(a[-1] == a[0]) and bool((a == a[0]).all())


def derived(
    cols: Mapping[str, np.ndarray], n: int, messages: bool = False, texts: bool = True
) -> dict[str, np.ndarray]:
    """Validity and sizes of every configuration: the inputs of constraints and reports.

    Keys: invalid_code (0 when valid, else the first broken rule: `dse.spec.rules.check_codes`),
    invalid (its message, '' when valid; left out with `texts=False`, for the scans that need
    only the verdict: an invalid row's text is formatted in Python), total_params,
    active_params, kv_bytes_per_token, memory_bytes (per GPU with the whole batch resident),
    memory_required_bytes (per GPU with one sequence's KV cache: the least the engine runs
    with), memory_capacity_bytes, fits_memory (the required bytes fit: the configuration can run), memory_margin (usable
    memory left with the whole batch, a fraction of the usable; < 0: sequences queue).
    With `messages`, also memory_refusal and memory_warning, the text `dse predict` prints
    ('' where there is none; `dse.spec.arch.memory_messages`).
    """
    out = rule_codes(cols, n, texts=texts)
    a = architecture(cols).resolved()  # resolved once: its parameter counts are kept on it
    sizes = arch_sizes(cols, n, a)
    mem_cols, mem = memory_sizes(cols, n, a)
    cap = gpu_table(cols["gpu"], "hbm_capacity_bytes")
    extra: dict[str, np.ndarray] = {}
    if messages:
        extra["memory_refusal"], extra["memory_warning"] = A.memory_messages(mem, cap, cols["gpu"])
    return {**out, **sizes, **mem_cols, **capacity_columns(mem, cap, n), **extra}


# `derived` in pieces, each reading fewer columns, so that a caller whose rows repeat those
# columns (the exact sweep's grid, `dse.sweep._grid_derived`) can compute a piece once per
# distinct combination of them: every value is a function of its own row alone.
def rule_codes(cols: Mapping[str, np.ndarray], n: int, texts: bool = True) -> dict[str, np.ndarray]:
    """`derived`'s invalid_code (and, with `texts`, invalid first): the architecture fields,
    tensor_parallel, and the GPU only where some row has FP4 weights."""
    check = {
        k: cols[k]
        for k in (
            "d_model",
            "n_layers",
            "n_heads",
            "d_ff",
            "n_kv_heads",
            "n_experts",
            "top_k",
            "d_ff_expert",
            *ATTENTION_FIELDS,
        )
    }
    check["head_dim"] = cols["head_dim"]
    tp, hdd = cols["tensor_parallel"], cols.get("head_dim_defaulted")
    code = R.check_codes(check, n, tp, head_dim_defaulted=hdd)
    # the weight dtype's kernels must exist on the row's GPU (nvfp4: FP4 tensor cores), judged
    # after the architecture's rules (its code is the last of `reasons()`); the GPU table is read
    # only when some row has FP4 weights (a sweep's chunk rarely does)
    off_gpu = np.zeros(n, dtype=bool)
    if A.fp4_weights(cols["weight_dtype"]).any():
        has_fp4 = np.isfinite(gpu_table(cols["gpu"], "peak_fp4_flops_per_s"))
        off_gpu = (code == 0) & R.weight_dtype_off_gpu(cols["weight_dtype"], has_fp4)
        code[off_gpu] = R.weight_dtype_off_gpu_code()
    out: dict[str, np.ndarray] = {}
    if texts:  # the text of the invalid rows only (their rules again, on those rows)
        out["invalid"] = np.full(n, "", dtype=object)
        bad = np.flatnonzero((code != 0) & ~off_gpu)
        if len(bad):
            out["invalid"][bad] = R.messages(check, bad, tp, head_dim_defaulted=hdd)
        gpu_bad = np.flatnonzero(off_gpu)
        if len(gpu_bad):
            wd, gpus = (np.broadcast_to(np.asarray(cols[k]), (n,)) for k in ("weight_dtype", "gpu"))
            out["invalid"][gpu_bad] = R.check_weight_dtype_on_gpu(
                wd[gpu_bad], gpus[gpu_bad], False, fp4_gpu_names()
            )
    out["invalid_code"] = code
    return out


def arch_sizes(
    cols: Mapping[str, np.ndarray], n: int, a: A.Architecture | None = None
) -> dict[str, np.ndarray]:
    """`derived`'s total_params, active_params and kv_bytes_per_token: the architecture
    fields alone (`a`: their resolved Architecture, when the caller has it)."""
    a = architecture(cols).resolved() if a is None else a
    p = A.param_breakdown(a)
    return {
        "total_params": np.broadcast_to(p["total"], (n,)),
        "active_params": np.broadcast_to(p["active"], (n,)),
        "kv_bytes_per_token": np.broadcast_to(A.kv_bytes_per_token(a), (n,)).astype(float),
    }


def memory_sizes(
    cols: Mapping[str, np.ndarray], n: int, a: A.Architecture | None = None
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """`derived`'s memory_bytes and memory_required_bytes (per GPU, bytes), and the whole
    `memory_breakdown`: the architecture and workload fields, not the GPU."""
    return memory_of_batch(cols, n, memory_per_sequence(cols, a))


def memory_per_sequence(
    cols: Mapping[str, np.ndarray], a: A.Architecture | None = None
) -> dict[str, Any]:
    """`memory_breakdown`'s terms that do not read the batch size (`dse.spec.arch.
    memory_per_sequence`): the architecture fields, tensor_parallel, the tokens and engine."""
    a = architecture(cols).resolved() if a is None else a
    return A.memory_per_sequence(
        a, cols["prompt_tokens"], cols["output_tokens"], cols["tensor_parallel"], cols["engine"]
    )


def memory_of_batch(
    cols: Mapping[str, np.ndarray], n: int, parts: Mapping[str, Any]
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """`memory_sizes` from the rows' `memory_per_sequence` terms."""
    mem = A.memory_of_batch(
        parts,
        cols["batch_size"],
        cols["prompt_tokens"],
        cols["output_tokens"],
        cols["tensor_parallel"],
    )
    return {
        "memory_bytes": np.broadcast_to(mem["total"], (n,)).astype(float),
        "memory_required_bytes": np.broadcast_to(mem["required"], (n,)).astype(float),
    }, mem


def capacity_columns(mem: Mapping[str, Any], cap: np.ndarray, n: int) -> dict[str, np.ndarray]:
    """`derived`'s columns that read the GPU's memory `cap` (bytes per row): capacity,
    fits_memory and memory_margin, from `memory_breakdown`'s required and total bytes."""
    return {
        "memory_capacity_bytes": cap,
        "fits_memory": A.fits_memory(mem["required"], cap),
        "memory_margin": np.broadcast_to(A.memory_margin(mem, cap), (n,)),
    }


def constraint_values(
    d: Mapping[str, np.ndarray], constraints: Mapping[str, Any]
) -> dict[str, np.ndarray]:
    """Optuna-style constraint values (<= 0 feasible) for each declared constraint.

    `d` holds the metric of every constraint by its name: the sizes of `derived`, and for
    constraints on predictions (ttft, tpot, loss, throughput...) what `dse.sweep` computed.
    Bounds are relative (value / bound - 1 for a max, 1 - value / bound for a min) so that they
    are comparable across constraints and units; validity is 1 for an invalid configuration, 0
    otherwise. A metric that could not be computed (NaN) breaks its bound by 1.
    """
    out: dict[str, np.ndarray] = {"valid": (np.asarray(d["invalid_code"]) != 0).astype(float)}
    for name, spec in constraints.items():
        if name == "fits_memory":
            if spec:
                out["fits_memory"] = (
                    d["memory_required_bytes"] / A.usable_bytes(d["memory_capacity_bytes"]) - 1.0
                )
            continue
        if name not in d:
            metrics = ", ".join(k for k in d if k != "invalid_code")
            raise ConfigError(f"constraints.{name}: no such metric among {metrics}")
        value = np.asarray(d[name], dtype=float)
        if spec.get("min") is not None:
            out[f"{name}_min"] = 1.0 - value / float(spec["min"])
        if spec.get("max") is not None:
            out[f"{name}_max"] = value / float(spec["max"]) - 1.0
    return {k: np.where(np.isfinite(v), v, 1.0) for k, v in out.items()}


def feasible(values: Mapping[str, np.ndarray]) -> np.ndarray:
    """True where every constraint value is <= 0."""
    arrs = list(values.values())
    ok = np.ones(len(arrs[0]), dtype=bool)
    for v in arrs:
        ok &= v <= 0
    return ok
