"""The settings of code brought as it is: an Optuna objective (``train: {optuna: ...}``)
or a Ray Tune function trainable (``train: {tune: ...}``). Pure data.

The config composes :class:`OptunaObjectiveSpec` as its ``train``; every
trial's worker gets :class:`StudyAccess` with its settings
(:mod:`hpsearch.adapters` runs the objective).
"""

from __future__ import annotations

from pydantic import Field

from hpsearch._settings import Settings

TARGET_PATTERN = r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$"
"""``package.module:function``, as ``train`` (in each of its forms) names a function."""


class OptunaObjectiveSpec(Settings):
    """``train: {optuna: package.module:objective}``: an Optuna objective, run unchanged.

    Attributes:
        optuna: the objective, ``package.module:function``, called as ``objective(trial)``.
    """

    optuna: str = Field(pattern=TARGET_PATTERN)


class TuneTrainableSpec(Settings):
    """``train: {tune: package.module:train_fn}``: a Ray Tune function trainable, run unchanged.

    Attributes:
        tune: the trainable, ``package.module:name``, called as ``train_fn(config)``
            (a ``tune.with_parameters`` wrapper too); see :mod:`hpsearch.adapters`.
    """

    tune: str = Field(pattern=TARGET_PATTERN)


class StudyAccess(Settings):
    """How a worker reaches the driver's study: its storage proxy, its name, its sampler.

    Attributes:
        address: ``host:port`` of the driver's gRPC storage proxy.
        study: the study's name.
        sampler: the driver's sampler, pickled and base64-encoded.
    """

    address: str
    study: str
    sampler: str
