"""The base of the samplers that decide a trial's whole configuration themselves.

`exhaustive` (configuration k for trial k) and `screened` (the best candidates of a screen)
never let Optuna sample a parameter on its own: every searched parameter comes from
`sample_relative` over the space's fixed distributions, and a parameter outside them is an
error, not a random draw.
"""

from __future__ import annotations

from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial

from dse.errors import ConfigError


class PlannedSampler(BaseSampler):
    """A sampler whose `sample_relative` returns every searched parameter of a trial."""

    name = "planned"  # the sampler's name in messages

    def __init__(self, dists: dict[str, BaseDistribution]) -> None:
        self._dists = dists

    def infer_relative_search_space(
        self, study: optuna.Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return dict(self._dists)

    def sample_independent(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        raise ConfigError(f"{self.name} sampler: parameter {param_name!r} is not in the space")
