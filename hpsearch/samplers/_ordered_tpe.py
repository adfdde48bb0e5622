"""Numeric choices as an ordered scale for Optuna's TPE: ``batch_size: [16, 32, 64]``.

A list in the space is an Optuna ``CategoricalDistribution``, so the study, the
MLflow params and every reader see the listed values themselves, and Optuna's
plots already draw numeric choices on an ordered axis. Its TPE, though, learns
each choice apart: a good trial at 64 says nothing for 32 or 128. Optuna 3.4-4.x
had ``TPESampler(categorical_distance_func=...)`` for this; Optuna 5 removed it and
left the Parzen estimator class as the way to customise TPE
(``TPESampler._parzen_estimator_cls``, "users can overwrite _ParzenEstimator").

:class:`OrderedChoicesParzenEstimator` is Optuna's estimator with numeric choices
learnt as TPE learns an integer parameter, over the choices' ranks: each
observation is a kernel whose width TPE sets from its neighbours' distance, and
its mass on each rank is that choice's weight. A good trial at 64 then also
weighs on 32 and 128, less on 16 and 256, and the sampler climbs towards a good
value's neighbours. The values stay the listed ones. Choices that are not all
numbers (booleans are not) stay unordered.
"""

from __future__ import annotations

import math

import numpy as np
import optuna
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.samplers._tpe.parzen_estimator import _ParzenEstimator, _ParzenEstimatorParameters
from optuna.samplers._tpe.probability_distributions import (
    _BatchedCategoricalDistributions,
    _BatchedDiscreteTruncNormDistributions,
    _BatchedDistributions,
)


def numeric_choices(distribution: CategoricalDistribution) -> bool:
    """Whether the choices are all numbers (booleans are not), at least three of them."""
    choices = distribution.choices
    return len(choices) >= 3 and all(
        isinstance(c, (int, float)) and not isinstance(c, bool) for c in choices
    )


class OrderedChoicesParzenEstimator(_ParzenEstimator):
    """Optuna's Parzen estimator, with numeric choices ranked (see the module docstring)."""

    def _calculate_categorical_distributions(
        self,
        observations: np.ndarray,
        param_name: str,
        search_space: CategoricalDistribution,
        parameters: _ParzenEstimatorParameters,
    ) -> _BatchedDistributions:
        if len(observations) == 0 or not numeric_choices(search_space):
            return super()._calculate_categorical_distributions(
                observations, param_name, search_space, parameters
            )
        n_choices = len(search_space.choices)
        rank = np.argsort(np.argsort(np.asarray(search_space.choices, dtype=float)))
        # The kernels TPE would fit to the ranks as an integer parameter (the prior's
        # included, last), each turned into a weight per choice: its mass on the rank.
        kernels = self._calculate_numerical_distributions(
            rank[observations.astype(int)].astype(float),
            IntDistribution(0, n_choices - 1),
            parameters,
        )
        assert isinstance(kernels, _BatchedDiscreteTruncNormDistributions)
        edges = np.arange(n_choices + 1) - 0.5
        z = (edges[None, :] - kernels.mu[:, None]) / (kernels.sigma[:, None] * math.sqrt(2))
        mass = np.diff(0.5 * (1.0 + _erf(z)), axis=1)  # per kernel, per rank
        # Per kernel, per choice; never quite 0: TPE takes the log of each weight.
        weights = np.maximum(mass[:, rank], _SMALLEST)
        weights /= weights.sum(axis=1, keepdims=True)
        return _BatchedCategoricalDistributions(weights)


_erf = np.vectorize(math.erf, otypes=[float])
_SMALLEST = 1e-300


def order_numeric_choices(sampler: optuna.samplers.BaseSampler) -> None:
    """Make a TPE sampler rank numeric choices; other samplers, and a TPE already
    given its own estimator, are left as they are."""
    if (
        isinstance(sampler, optuna.samplers.TPESampler)
        and sampler._parzen_estimator_cls is _ParzenEstimator
    ):
        sampler._parzen_estimator_cls = OrderedChoicesParzenEstimator
