"""Optuna objectives, unchanged: ``train: {optuna: mymod:objective}``.

An Optuna user's ``def objective(trial)`` suggests its own parameters
(define-by-run), reports, asks whether to prune, raises ``optuna.TrialPruned``
and returns a float (or a tuple, one value per objective). hpsearch runs it in a
trial's worker as it runs a training function, with packing, out-of-memory
handling, MLflow runs, ``trials``, ``best``, ``rerun`` and checkpoints.

The ``trial`` it gets is a real :class:`optuna.Trial` of the driver's study: the
driver serves its storage over Optuna's gRPC storage proxy
(:class:`~hpsearch.trial.other_tools.StudyAccess`), and the worker loads the study through
:class:`optuna.storages.GrpcStorageProxy` with the driver's sampler (pickled once
per search, its random state reseeded per trial as Optuna's own parallel
``optimize`` does). So ``suggest_*`` are the configured sampler's decisions,
written to the study as the trial makes them. What differs from Optuna's own
``Trial``:

* ``report(value, step)`` also goes to ``ctx.report``: the value is the first
  objective's metric, recorded by the driver (the MLflow metric) and judged by
  the configured pruner (Optuna's intermediate value is written as Optuna
  writes it, in single-objective studies);
* ``should_prune()`` is that pruner's verdict (``ctx.should_prune``);
* ``optuna.TrialPruned`` prunes the trial as ``hpsearch.TrialPruned`` does;
* ``trial.study.stop()`` ends the search as it ends ``optimize``: no trial starts after
  it, those running finish (``ctx.stop_search``).

``set_user_attr``, ``trial.number``, ``trial.params`` and the ``suggest_*``
calls are Optuna's own, but for ``suggest_categorical`` among choices a study's
storage cannot hold (classes, functions: ``[nn.ReLU, nn.Tanh]``, which Optuna's
default in-memory study takes): those are suggested by their names (``ReLU``), and the
objective gets the object. The trial's checkpoint folder is
``trial.user_attrs["hpsearch.checkpoint_dir"]`` (and ``HPSEARCH_CHECKPOINT_DIR``).
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import optuna
from optuna.storages import GrpcStorageProxy

from hpsearch._compat import study_stops
from hpsearch.trial.context import TrialContext, TrialPruned
from hpsearch.trial.other_tools import StudyAccess


def pickled_sampler(sampler: optuna.samplers.BaseSampler) -> str:
    """The sampler as :class:`StudyAccess` carries it: by cloudpickle, so that a function
    it holds from a notebook or the started script (a dict config's ``constraints_func``
    lambda) travels by value, as the dict config's ``train`` does."""
    import cloudpickle  # type: ignore[import-untyped]  # no stubs

    return base64.b64encode(cloudpickle.dumps(sampler)).decode("ascii")


def objective_train(
    objective: Callable[[Any], Any], access: StudyAccess, objectives: Sequence[str]
) -> Callable[[dict[str, Any], TrialContext], dict[str, float] | None]:
    """The ``train(params, ctx)`` that runs ``objective`` on the trial's live Optuna trial."""

    def train(params: dict[str, Any], ctx: TrialContext) -> dict[str, float] | None:
        host, _, port = access.address.rpartition(":")
        with warnings.catch_warnings():  # experimental in Optuna 5, and said in every trial
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            storage = GrpcStorageProxy(host=host, port=int(port))
        try:
            sampler = pickle.loads(base64.b64decode(access.sampler))  # the driver's own sampler
            sampler.reseed_rng()  # as Optuna's parallel optimize: each trial its own draws
            study = optuna.load_study(study_name=access.study, storage=storage, sampler=sampler)
            study_id = storage.get_study_id_from_name(access.study)
            trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, ctx.trial_number)
            trial = _ReportingTrial(study, trial_id, ctx, objectives[0])
            os.environ["HPSEARCH_CHECKPOINT_DIR"] = str(ctx.checkpoint_dir)
            try:
                with study_stops(study, ctx.stop_search):
                    returned = objective(trial)
            except optuna.TrialPruned as pruned:
                raise TrialPruned(
                    str(pruned) or "the objective raised optuna.TrialPruned"
                ) from None
        finally:
            storage.close()
        return _values(returned, objectives)

    return train


def _values(returned: Any, objectives: Sequence[str]) -> dict[str, float] | None:
    """An objective's return as metrics: a number for one objective, a sequence for several."""
    if returned is None:
        return None
    if isinstance(returned, Sequence) and not isinstance(returned, str):
        if len(returned) != len(objectives):
            raise TypeError(
                f"the objective returned {len(returned)} values for {len(objectives)} "
                f"objective(s) ({', '.join(objectives)})"
            )
        return {name: float(value) for name, value in zip(objectives, returned, strict=True)}
    if len(objectives) != 1:
        raise TypeError(
            f"the objective returned one value for {len(objectives)} objectives; "
            "return a tuple, one value per objective, in the config's order"
        )
    return {objectives[0]: float(returned)}


class _ReportingTrial(optuna.Trial):
    """Optuna's trial, its reports and prune questions answered by hpsearch."""

    def __init__(self, study: optuna.Study, trial_id: int, ctx: TrialContext, metric: str) -> None:
        super().__init__(study, trial_id)
        self._hpsearch_ctx = ctx
        self._hpsearch_metric = metric

    def report(self, value: float, step: int) -> None:
        if len(self.study.directions) == 1:  # Optuna refuses them in multi-objective studies
            super().report(value, step)  # the intermediate value, as Optuna keeps it
        self._hpsearch_ctx.report(int(step), {self._hpsearch_metric: float(value)})

    def should_prune(self) -> bool:
        return self._hpsearch_ctx.should_prune()

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        """Optuna's, and for choices a study's storage cannot hold (classes, functions,
        objects: ``[nn.ReLU, nn.Tanh]``, which Optuna keeps only in memory), a choice among
        their names, the object itself returned."""
        options = tuple(choices)
        try:
            json.dumps(options)
        except (TypeError, ValueError):
            labels = choice_labels(options)
            return options[labels.index(super().suggest_categorical(name, labels))]
        return super().suggest_categorical(name, options)


def choice_labels(options: Sequence[Any]) -> tuple[str, ...]:
    """A name for each choice, the same in every process: a class's or function's name, a
    value's repr (an object's type where its repr holds its address), unique by position."""
    labels = []
    for option in options:
        label = getattr(option, "__qualname__", None) or repr(option)
        if " at 0x" in label:
            label = type(option).__qualname__
        labels.append(label)
    repeated = {label for label in labels if labels.count(label) > 1}
    return tuple(f"{label} #{i}" if label in repeated else label for i, label in enumerate(labels))
