"""The settings of code brought as it is: an Optuna objective (``train: {optuna: ...}``)
or a Ray Tune trainable (``train: {tune: ...}``). Pure data.

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
    """``train: {tune: package.module:train_fn}``: a Ray Tune trainable, run unchanged: a
    function, or a class (``tune.Trainable``).

    Attributes:
        tune: the trainable, ``package.module:name``: a function called as
            ``train_fn(config)``, or a ``tune.Trainable`` subclass whose ``step()`` runs
            once per report (a ``tune.with_parameters`` wrapper of either too); see
            :mod:`hpsearch.adapters`.
        stop: Tune's ``RunConfig(stop={...})``: a trial ends, completed, at the first
            report in which one of these metrics reaches its value, e.g.
            ``{training_iteration: 20}`` (``training_iteration`` counts the reports
            where the trainable does not report it; ``done: true``, which Tune's
            examples add, is met by a report that says ``done``, as under Tune, which
            compares each as ``result[key] >= value``). Empty: the trainable ends itself
            (its function returns, or its ``step()`` returns ``done: true``).
        checkpoint_frequency: a class trainable's checkpoint every this many steps, as
            Tune's ``CheckpointConfig(checkpoint_frequency)``; 0: only when it ends. An
            interrupted trial resumes from its latest. (A function trainable
            checkpoints when it reports one.)
    """

    tune: str = Field(pattern=TARGET_PATTERN)
    stop: dict[str, float | bool] = Field(default_factory=dict)
    checkpoint_frequency: int = Field(default=0, ge=0)


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
