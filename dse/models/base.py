"""What every fitted model shares: the `Model` base (inert constructor, fit -> self, learned
state ending in `_`, to_state / from_state), the range an input was fitted on and how a miss of
it is reported (`RangeMiss`), state helpers (`fitted_range`, `range_to_state`, ...), input
checks and the percentage errors a fit scores itself with.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import numpy as np

from dse._same import all_true as all_true  # the few-value checks, where `dse.spec` has them too
from dse._same import any_true as any_true
from dse._same import filled as filled
from dse.errors import ArtifactError, ConfigError, DataError


def group_folds(groups: np.ndarray, n_folds: int, seed: int = 0) -> list[np.ndarray]:
    """Split the unique group labels into `n_folds` seeded folds; returns the held-out row masks.

    Every row of a group lands in the same fold, so a fold's rows come from shapes the fit of the
    other folds never saw.
    """
    labels, inv = np.unique(np.asarray(groups), return_inverse=True)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(labels))
    fold_of = np.empty(len(labels), dtype=np.int64)
    fold_of[order] = np.arange(len(labels)) % max(1, min(n_folds, len(labels)))
    row_fold = fold_of[inv]
    return [row_fold == f for f in range(max(1, min(n_folds, len(labels))))]


def fitted_range(arrays: Mapping[str, np.ndarray]) -> dict[str, tuple[float, float]]:
    """(min, max) of every numeric input array (what the artifact records as the fitted range)."""
    out: dict[str, tuple[float, float]] = {}
    for key, a in arrays.items():
        v = np.asarray(a, dtype=np.float64)
        v = v[np.isfinite(v)]
        if v.size:
            out[key] = (float(v.min()), float(v.max()))
    return out


def range_to_state(rng: Mapping[str, tuple[float, float]], prefix: str = "range/") -> dict:
    """Fitted ranges as plain arrays: names in one string array, bounds in an (n, 2) array."""
    names = sorted(rng)
    return {
        f"{prefix}names": np.array(names, dtype=str),
        f"{prefix}bounds": np.array([rng[n] for n in names], dtype=np.float64).reshape(-1, 2),
    }


def range_from_state(state: Mapping[str, Any], prefix: str = "range/") -> dict:
    names = [str(n) for n in np.asarray(state[f"{prefix}names"]).ravel()]
    bounds = np.asarray(state[f"{prefix}bounds"], dtype=np.float64).reshape(-1, 2)
    return {n: (float(lo), float(hi)) for n, (lo, hi) in zip(names, bounds, strict=True)}


# Arrays of at most this many values are checked value by value in Python (`within`,
# `_all_finite`): cheaper than numpy's reductions on a few configurations' rows.
_FEW_VALUES = 64


def as_float(name: str, value: Any, n: int | None = None) -> np.ndarray:
    """An input as a 1-d float array (scalars broadcast to n); NaN/inf is an error naming it."""
    if isinstance(value, np.ndarray) and value.dtype == np.float64 and value.ndim == 1:
        # the common case (the adapters pass float columns): no conversion, one finite check
        if not _all_finite(value):
            bad = value[~np.isfinite(value)][:3]
            raise DataError(f"input {name!r} must be finite numbers, got {bad}")
        return value
    a = np.asarray(value, dtype=np.float64)
    if a.ndim == 0 and n is not None:
        a = filled(n, float(a))
    a = np.atleast_1d(a)
    if not _all_finite(a):
        raise DataError(f"input {name!r} must be finite numbers, got {a[~np.isfinite(a)][:3]}")
    return a


def _all_finite(a: np.ndarray) -> bool:
    """np.isfinite(a).all() of a float64 array; a few values (one configuration's rows) by
    math.isfinite, without numpy's reduction machinery (the same test per value)."""
    if a.size <= _FEW_VALUES:
        return all(map(math.isfinite, a.ravel().tolist()))
    return bool(np.isfinite(a).all())


all_finite = _all_finite  # the public name (`dse.predict.adapters` checks model outputs)


def clip(x: Any, lo: Any, hi: Any) -> Any:
    """np.clip(x, lo, hi) (lo <= hi) as its two ufuncs: numpy's wrapper costs more than the
    work on the few values of a one-configuration call."""
    return np.minimum(np.maximum(x, lo), hi)


def as_shape(a: Any, shape: tuple[int, ...]) -> np.ndarray:
    """a broadcast to `shape` (a read-only view), or a itself when it has that shape already
    (np.broadcast_to costs microseconds, which a one-configuration call pays per array)."""
    a = np.asarray(a)
    return a if a.shape == shape else np.broadcast_to(a, shape)


def batch_size_of(arrays: Mapping[str, Any]) -> int:
    """The common length of the array inputs (scalars count as length 1)."""
    sizes = set()
    for v in arrays.values():
        if isinstance(v, np.ndarray):  # the common case, without numpy's dispatch per value
            if v.ndim:
                sizes.add(v.size)
        elif np.ndim(v) > 0:
            sizes.add(int(np.size(v)))
    if len(sizes) > 1:
        raise DataError(f"input arrays must have one length, got lengths {sorted(sizes)}")
    return sizes.pop() if sizes else 1


def need(state: Mapping[str, Any], keys: Iterable[str], what: str) -> None:
    """Raise ArtifactError naming the first missing array of a model's state."""
    for k in keys:
        if k not in state:
            raise ArtifactError(
                f"{what} state incomplete: array {k!r} missing; re-fit with dse fit"
            )


# ---------------------------------------------------------------------------- GPU constants
# The GPU constants a model reads at prediction (SM count, board power, ...) are learned state:
# `fit` copies them from the GPU's spec, `to_state` saves them under this prefix, and predict
# reads them from the model alone, never from the registry (`dse.spec.hardware`), which a
# process can change (issue 36). A class lists the spec fields it keeps in `gpu_fields`.
GPU_SPEC = "gpu_spec/"


def gpu_constants(spec: Any, fields: Iterable[str]) -> dict[str, float]:
    """The values of `fields` of a GPU spec (`dse.spec.hardware.GPU`), as floats."""
    return {f: float(getattr(spec, f)) for f in fields}


def gpu_constants_to_state(values: Mapping[str, float]) -> dict[str, np.ndarray]:
    """GPU constants as state arrays (`GPU_SPEC` + field name -> a float64 scalar)."""
    return {f"{GPU_SPEC}{k}": np.array(float(v), dtype=np.float64) for k, v in values.items()}


def gpu_constants_from_state(
    state: Mapping[str, Any], fields: Iterable[str], what: str
) -> dict[str, float]:
    """The GPU constants `gpu_constants_to_state` wrote; a missing one is an ArtifactError."""
    need(state, [f"{GPU_SPEC}{f}" for f in fields], what)
    return {f: float(np.asarray(state[f"{GPU_SPEC}{f}"])) for f in fields}


# ---------------------------------------------------------------------------- graded range
# An input within this log distance of a bound (1%) is inside: the rounding of a bound (a width
# rounded to a tile, a fitted minimum read back as float) is not an extrapolation.
RANGE_TOL = 0.01


@dataclass(frozen=True)
class RangeMiss:
    """How far an input lies outside a model's fitted [lo, hi], per configuration.

    `excess`: signed distance in the model's coordinates, 0 inside (or within RANGE_TOL of a
    bound), > 0 above the range, < 0 below it: log(value / bound) for a size (the models read
    sizes in log coordinates), (value - bound) / (hi - lo) for an input a model reads linearly
    (Level 3's KV fill) or one whose lower bound is not positive (a window size of 0).
    `value`: the input (at the farthest quadrature node when it has a node axis), `bound`: the
    bound it is outside of. Arrays of one shape."""

    excess: np.ndarray
    value: np.ndarray
    bound: np.ndarray

    @property
    def degree(self) -> np.ndarray:
        """|excess|: 0 inside, growing with the distance from the nearest bound."""
        return np.abs(self.excess)

    @property
    def outside(self) -> np.ndarray:
        return self.excess != 0.0

    def masked(self, keep: np.ndarray) -> RangeMiss:
        """The miss where `keep` (broadcast), inside elsewhere."""
        return RangeMiss(np.where(keep, self.excess, 0.0), self.value, self.bound)

    def worst_node(self) -> RangeMiss:
        """A (k, n) miss over quadrature nodes reduced to (n,): each configuration's farthest."""
        if self.excess.ndim < 2:
            return self
        e = self.excess.reshape(-1, self.excess.shape[-1])
        v = as_shape(self.value, self.excess.shape).reshape(e.shape)
        b = as_shape(self.bound, self.excess.shape).reshape(e.shape)
        i = np.argmax(np.abs(e), axis=0)
        cols = np.arange(e.shape[1])
        return RangeMiss(e[i, cols], v[i, cols], b[i, cols])

    def worse(self, other: RangeMiss) -> RangeMiss:
        """Per configuration, the farther of two misses of one input (e.g. an operator run
        twice, or priced by two tables)."""
        a, b = self.worst_node(), other.worst_node()
        pick = np.abs(b.excess) > np.abs(a.excess)
        if not any_true(pick):
            return a
        return RangeMiss(
            *(np.where(pick, y, x) for x, y in zip(_fields(a), _fields(b), strict=True))
        )


def _fields(m: RangeMiss) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    shape = np.shape(m.excess)
    return m.excess, as_shape(m.value, shape), as_shape(m.bound, shape)


def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """np.broadcast_shapes of shape tuples, in Python (numpy's builds arrays to find it: ~5 us
    a call, which a one-configuration prediction pays a dozen times); ValueError as numpy's
    where they do not broadcast."""
    if not shapes:
        return ()
    first = shapes[0]
    if all(s == first for s in shapes):
        return tuple(first)
    ndim = max(len(s) for s in shapes)
    out = [1] * ndim
    for s in shapes:
        for i, d in enumerate(s, ndim - len(s)):
            if d != 1:
                if out[i] == 1:
                    out[i] = d
                elif out[i] != d:
                    raise ValueError(f"shapes {shapes} cannot be broadcast together")
    return tuple(out)


def within(v: np.ndarray, lo: float, hi: float) -> bool:
    """Every value of a non-empty array inside [lo, hi] (NaN is not): the fast test before a
    `range_miss`; one row is compared as a Python float, without two numpy reductions."""
    if v.size == 1:
        return bool(lo <= float(v.flat[0]) <= hi)
    if 0 < v.size <= _FEW_VALUES:  # a few values (stacked operators of one configuration):
        # Python comparisons cost less than two numpy reductions; NaN fails both, as there
        return all(lo <= float(x) <= hi for x in v.ravel().tolist())
    return bool(v.size and v.min() >= lo and v.max() <= hi)


def range_miss(value: Any, lo: float, hi: float, linear: bool = False) -> RangeMiss:
    """The `RangeMiss` of `value` against [lo, hi] (coordinates: see RangeMiss; `linear`:
    the model reads this input linearly)."""
    v = np.asarray(value, dtype=np.float64)
    lo, hi = float(lo), float(hi)
    span = max(hi - lo, 1e-12)
    if v.size == 1:  # one row: the same rule in Python floats (a dozen numpy calls fewer)
        return _range_miss_one(v, lo, hi, span, linear)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_v = np.log(np.maximum(v, 1e-300))
        above = (v - hi) / span if linear or hi <= 0 else log_v - np.log(hi)
        below = (v - lo) / span if linear or lo <= 0 else log_v - np.log(lo)
    e = np.where(v > hi, above, np.where(v < lo, below, 0.0))
    e = np.where(np.abs(e) <= RANGE_TOL, 0.0, e)
    return RangeMiss(e, v, np.where(v < lo, lo, hi))


def _range_miss_one(v: np.ndarray, lo: float, hi: float, span: float, linear: bool) -> RangeMiss:
    """`range_miss` of a one-element array (NaN: inside, as there)."""
    x = float(v.flat[0])
    e = 0.0
    if x > hi:
        e = (x - hi) / span if linear or hi <= 0 else math.log(max(x, 1e-300)) - math.log(hi)
    elif x < lo:
        e = (x - lo) / span if linear or lo <= 0 else math.log(max(x, 1e-300)) - math.log(lo)
    if abs(e) <= RANGE_TOL:
        e = 0.0
    return RangeMiss(filled(v.shape, e), v, filled(v.shape, lo if x < lo else hi))


def range_misses(rng: Mapping[str, Any], inputs: Mapping[str, Any]) -> dict[str, RangeMiss]:
    """`range_miss` of every input with a range in `rng` (name -> (lo, hi)) that leaves it
    somewhere; arrays broadcast together."""
    out: dict[str, RangeMiss] = {}
    arrays = {k: np.asarray(v, dtype=np.float64) for k, v in inputs.items() if k in rng}
    if not arrays:
        return out
    shape = None  # the arrays' common shape, worked out at the first input outside its range
    for key, a in arrays.items():
        lo, hi = rng[key]
        if within(a, lo, hi):  # the common case: no work
            continue
        if shape is None:
            shape = broadcast_shape(*(a.shape for a in arrays.values()))
        miss = range_miss(np.broadcast_to(a, shape), lo, hi)
        if any_true(miss.outside):
            out[key] = miss
    return out


# ---------------------------------------------------------------------------- the model base
class Model:
    """A fitted model (issue 23). The constructor stores its arguments and nothing else (no I/O,
    no checks); `fit(...)` learns and returns self, with a signature of its own per model (not
    on the base); learned state ends in `_`; `to_state()` / `from_state()` round-trip it
    through plain arrays exactly; `fitted_range()` is the box of every input it was fitted on.

    `_parameter_constraints` maps a constructor parameter to what it may be: a tuple of the
    allowed values, or a type (or tuple of types) the value must be an instance of wrapped in
    `InstanceOf`. `_validate_params()` (called by `fit`) checks them with a ConfigError."""

    kind: ClassVar[str]  # the manifest's kind: the key of dse.models.MODEL_CLASSES
    # the fields of the GPU's spec the model predicts with, kept as learned state (`GPU_SPEC`);
    # an artifact saved before they were kept gets them from the registry once, at load
    # (`dse.models.artifact.Artifact.model`)
    gpu_fields: ClassVar[tuple[str, ...]] = ()
    _parameter_constraints: ClassVar[dict[str, Any]] = {}

    @classmethod
    def _param_names(cls) -> list[str]:
        """The constructor's parameter names, from its signature."""
        sig = inspect.signature(cls.__init__)
        skip = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        return [p.name for p in sig.parameters.values() if p.name != "self" and p.kind not in skip]

    def get_params(self) -> dict[str, Any]:
        """The constructor arguments, as stored (`type(self)(**get_params())` is an unfitted
        copy)."""
        return {name: getattr(self, name) for name in self._param_names()}

    def _validate_params(self) -> None:
        """Raise ConfigError on a constructor argument outside its `_parameter_constraints`."""
        for name, allowed in self._parameter_constraints.items():
            value = getattr(self, name)
            if isinstance(allowed, InstanceOf):
                ok, what = isinstance(value, allowed.types), allowed.describe()
            else:
                ok, what = value in tuple(allowed), "one of " + ", ".join(map(repr, allowed))
            if not ok:
                raise ConfigError(
                    f"The {name!r} parameter of {type(self).__name__} must be {what}; "
                    f"got {value!r}."
                )

    @property
    def is_fitted(self) -> bool:
        """True once `fit` or `from_state` has set learned state (an attribute ending in `_`)."""
        return any(k.endswith("_") and not k.startswith("__") for k in vars(self))

    def _check_fitted(self) -> None:
        if not self.is_fitted:
            raise ArtifactError(
                f"{type(self).__name__} is not fitted: call fit(...) or load it from an artifact"
            )

    def predict(self, **arrays: Any) -> dict[str, np.ndarray]:
        """Vectorised, itemised outputs (at least `latency_s`)."""
        raise NotImplementedError(f"{type(self).__name__}.predict")

    def to_state(self) -> dict[str, np.ndarray]:
        """The learned state as plain arrays (what an artifact's weights.npz stores)."""
        raise NotImplementedError(f"{type(self).__name__}.to_state")

    @classmethod
    def from_state(cls, state: Mapping[str, np.ndarray]) -> Self:
        """The model `to_state` wrote: `cls(**params)`, then its learned state set."""
        raise NotImplementedError(f"{cls.__name__}.from_state")

    def fitted_range(self) -> dict[str, tuple[float, float]]:
        """(min, max) of every input the model was fitted on (its `range_`)."""
        self._check_fitted()
        return dict(self.range_)

    def range_misses(self, **inputs: Any) -> dict[str, RangeMiss]:
        """`range_misses` of the inputs against this model's fitted range."""
        return range_misses(self.fitted_range(), inputs)


@dataclass(frozen=True)
class InstanceOf:
    """A `_parameter_constraints` entry: the value must be an instance of `types`."""

    types: type | tuple[type, ...]

    def describe(self) -> str:
        types = self.types if isinstance(self.types, tuple) else (self.types,)
        return "an instance of " + " or ".join(t.__name__ for t in types)
