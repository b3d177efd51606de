"""Samplers by name, the exhaustive sampler, and what `auto` picks.

Determinism across restarts: the sampler is rebuilt for every batch with a seed drawn from
(study seed, trials already done), so a study resumed after a crash continues exactly as the
uninterrupted run would (the journal holds whole batches, so both see the same history).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial

from dse.errors import ConfigError
from dse.spec.space import SAMPLERS, SearchSpace
from dse.sweep._evaluate import Predictor
from dse.sweep._planned import PlannedSampler
from dse.sweep.study_record import StudyRecord

# `exact` (and `auto`) enumerate a space of up to this many configurations (`--max-configs`):
# about 60-120 s on one core at the 1.7-3e5 configurations/s measured in docs/sweeps.md, with
# memory bounded by the front. Beyond it, sample (`auto` then picks tpe or nsga2).
EXACT_MAX_CONFIGS = 20_000_000
# `auto` otherwise: `screened`. At 5,000 trials it reached 100.00% of the exact hypervolume of
# the 3.1M-configuration benchmark space (TPE 99.79%, NSGA-II 99.30%) and 99.96% of the best
# known front of a 776M-configuration one (TPE 99.46%, NSGA-II 96.89%), in about the time
# NSGA-II takes and a seventh of TPE's (benchmarks/sweep_quality.py, docs/sweeps.md).
AUTO_SAMPLER = "screened"
# Gaussian-process sampling refits a GP per trial at a cost growing like trials^3; a
# two-objective GP trial already takes seconds at a few dozen trials (docs/sweeps.md).
GP_MAX_TRIALS = 300
# Exhaustive sweeps store one trial per configuration; beyond this, use `--reference exact`.
EXHAUSTIVE_MAX_TRIALS = 1_000_000
EXHAUSTIVE_BATCH = 1024  # configurations evaluated per predictor call in exhaustive mode


def distributions(space: SearchSpace) -> dict[str, BaseDistribution]:
    """The Optuna distribution of every searched parameter (ranges: int, lists: categorical)."""
    out: dict[str, BaseDistribution] = {}
    for p in space.searched:
        if p.kind == "int":
            out[p.name] = IntDistribution(int(p.low), int(p.high), step=int(p.step or 1), log=p.log)  # type: ignore[arg-type]
        else:
            out[p.name] = CategoricalDistribution(list(p.values))
    return out


def config_params(space: SearchSpace, index: np.ndarray | int) -> list[dict[str, Any]]:
    """Searched-parameter dicts of configurations by their index in `space.enumerate()` order."""
    searched = space.searched
    idx = np.atleast_1d(np.asarray(index, dtype=np.int64))
    if not searched:
        return [{} for _ in idx]
    digits = np.unravel_index(idx, [len(p.values) for p in searched])
    cols = [[p.values[int(i)] for i in d] for p, d in zip(searched, digits, strict=True)]
    return [
        {p.name: col[j] for p, col in zip(searched, cols, strict=True)} for j in range(len(idx))
    ]


def resolve(
    name: str, space: SearchSpace, trials: int, max_configs: int = EXACT_MAX_CONFIGS
) -> str:
    """The concrete sampler for `name` (`auto` decided here), or a ConfigError."""
    if name not in SAMPLERS:
        import difflib

        close = difflib.get_close_matches(name, SAMPLERS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"--sampler: must be one of {', '.join(SAMPLERS)}{hint}, got {name!r}")
    size = space.size()
    if max_configs < 1:
        raise ConfigError(f"--max-configs: must be an integer >= 1, got {max_configs}")
    if name == "auto":
        return "exact" if size <= max_configs else AUTO_SAMPLER
    if name == "exact" and size > max_configs:
        raise ConfigError(
            f"--max-configs: sampler exact enumerates at most {max_configs:,} configurations, "
            f"got a space of {size:,} ({space.source}); use --sampler {AUTO_SAMPLER} (or auto, "
            "which samples a space this large), or raise --max-configs"
        )
    if name == "exhaustive" and size > EXHAUSTIVE_MAX_TRIALS:
        raise ConfigError(
            f"{space.source}: sampler exhaustive stores one trial per configuration and the "
            f"space has {size:,} (limit {EXHAUSTIVE_MAX_TRIALS:,}); use --sampler exact, which "
            "stores only the front and a sample"
        )
    if name == "gp" and trials > GP_MAX_TRIALS:
        raise ConfigError(
            f"sampler gp: a Gaussian process refits on every trial at a cost growing like "
            f"trials^3, so it applies to budgets up to {GP_MAX_TRIALS:,} trials, got "
            f"{trials:,}; use tpe or nsga2"
        )
    if name in ("nsga2", "nsga3", "tpe", "gp", "random", "screened") and not space.searched:
        return "exhaustive"
    return name


def explain(
    name: str, space: SearchSpace, trials: int, max_configs: int = EXACT_MAX_CONFIGS
) -> str:
    """Why `auto` took the sampler it took (one sentence, for stderr)."""
    size = space.size()
    picked = resolve(name, space, trials, max_configs)
    if picked in ("exact", "exhaustive"):
        return (
            f"sampler auto -> {picked}: the space has {size:,} configurations (at most "
            f"{max_configs:,}, --max-configs), so each is evaluated once and the front is "
            "exact"
        )
    return (
        f"sampler auto -> {picked}: the space has {size:,} configurations, more than "
        f"{max_configs:,} to enumerate (--max-configs), so each batch of trials is chosen from "
        "candidates the predictor screens"
    )


def budget_warning(sampler: str, space: SearchSpace, trials: int) -> str | None:
    """A warning when a sampler's budget exceeds the space: some trials must repeat."""
    size = space.size()
    if sampler in ("exhaustive", "exact") or trials <= size:
        return None
    return (
        f"warning: the budget of {trials:,} trials exceeds the {size:,} configurations of the "
        f"space: at least {trials - size:,} trials repeat a configuration (told its stored "
        "values, not predicted again) and a sampler may still miss some; `--sampler "
        "exact` (or auto) evaluates each configuration exactly once"
    )


def batch_seed(seed: int, done: int, salt: int = 0) -> int:
    """The seed of the sampler that draws the batch starting after `done` trials."""
    return int(np.random.SeedSequence([seed, done, salt]).generate_state(1)[0])


def _known_space(base: type[BaseSampler]) -> type[BaseSampler]:
    """`base` told the search space instead of inferring it from every finished trial.

    Optuna samplers intersect the distributions of all completed trials to find the relative
    search space, incrementally per sampler instance; since each batch gets a fresh, reseeded
    sampler, that would rescan the whole history once per batch. Every dse trial draws every
    searched parameter from the same distributions, so the space is known up front. The class
    keeps the base's name: genetic samplers key their per-trial records by class name.
    """

    def __init__(self: Any, *args: Any, dists: dict[str, BaseDistribution], **kwargs: Any) -> None:
        base.__init__(self, *args, **kwargs)
        self._dse_dists = {k: d for k, d in dists.items() if not d.single()}

    def infer_relative_search_space(
        self: Any, study: optuna.Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return dict(self._dse_dists)

    return type(
        base.__name__,
        (base,),
        {
            "__init__": __init__,
            "infer_relative_search_space": infer_relative_search_space,
            "__module__": __name__,
            "__doc__": base.__doc__,
        },
    )


_KNOWN: dict[str, type[BaseSampler]] = {}


def _cls(name: str, base: type[BaseSampler]) -> type[BaseSampler]:
    if name not in _KNOWN:
        _KNOWN[name] = _known_space(base)
    return _KNOWN[name]


def make(
    name: str,
    space: SearchSpace,
    seed: int,
    batch_size: int,
    offset: int = 0,
    predictor: Predictor | None = None,
) -> BaseSampler:
    """A fresh sampler (`name` already resolved). GA samplers breed one generation per batch;
    `screened` prices its candidates with `predictor` (None: the default one)."""
    dists = distributions(space)
    pop = max(batch_size, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # experimental-feature warnings
        if name == "tpe":
            tpe = _cls(name, optuna.samplers.TPESampler)
            return tpe(seed=seed, multivariate=True, constant_liar=True, dists=dists)  # type: ignore[call-arg]
        if name == "nsga2":
            nsga2 = _cls(name, optuna.samplers.NSGAIISampler)
            return nsga2(seed=seed, population_size=pop, dists=dists)  # type: ignore[call-arg]
        if name == "nsga3":
            nsga3 = _cls(name, optuna.samplers.NSGAIIISampler)
            return nsga3(seed=seed, population_size=pop, dists=dists)  # type: ignore[call-arg]
        if name == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        if name == "gp":
            try:
                import torch

                # The GP's matrices are tiny (trials x trials): thread start-up costs more than
                # it saves, 5-10x slower per trial with the default threads (docs/sweeps.md).
                torch.set_num_threads(1)
                gp = _cls(name, optuna.samplers.GPSampler)
                return gp(seed=seed, deterministic_objective=True, dists=dists)  # type: ignore[call-arg]
            except ImportError as exc:
                raise ConfigError(f"sampler gp needs PyTorch and SciPy ({exc})") from None
        if name == "exhaustive":
            return ExhaustiveSampler(space, offset)
        if name == "screened":
            from dse.sweep._screened import ScreenedSampler

            return ScreenedSampler(space, dists, seed, batch_size, predictor)
    raise ConfigError(f"--sampler: unknown sampler {name!r}")


class ExhaustiveSampler(PlannedSampler):
    """Trial number k (+ offset) takes configuration k of `space.enumerate()` order.

    Used by the single-process sweep, whose trial numbers are exactly 0, 1, 2, ... because the
    journal holds whole batches. Shared storages enqueue the configurations instead.
    """

    name = "exhaustive"

    def __init__(self, space: SearchSpace, offset: int = 0) -> None:
        super().__init__(distributions(space))
        self._space = space
        self._offset = offset

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        index = trial.number + self._offset
        if index >= self._space.size():
            raise ConfigError(f"exhaustive sampler: configuration {index} is past the space")
        return config_params(self._space, index)[0]


def sampler_for(
    rec: StudyRecord, space: SearchSpace, done: int, predictor: Predictor | None, salt: int = 0
) -> optuna.samplers.BaseSampler:
    """The fresh sampler that draws the batch starting after `done` trials (`salt`: a shared
    study's worker, so workers draw different batches)."""
    return make(
        rec.sampler,
        space,
        batch_seed(rec.seed, done, salt),
        rec.batch_size,
        predictor=predictor,
    )
