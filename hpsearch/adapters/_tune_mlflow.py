"""Ray's ``setup_mlflow`` in a trial (a Tune trainable's, as Ray's guide calls it, or any
other form's): its run in the search's store.

Under Tune, ``setup_mlflow(config)`` names its experiment after the Ray trial (its id,
then its name), and ``setup_mlflow(config, experiment_name="...")`` needs that experiment
made first: Ray's docs make it in the driver's script (``mlflow.set_experiment``), which a
search does not run. Neither is in a search's store, and every trial of such a trainable
failed with Ray's "Experiment ... does not exist". In a trial whose own MLflow calls go to
the search's store (:func:`~hpsearch.tracking.trial_runs`), the setup Ray's function calls
is answered for that store: with no experiment named, its run goes to the search's
experiment, nested under the trial's run; an experiment it names is made there if
missing, as the driver's script made it under Tune. A trainable given a store of its own
(``tracking_uri=...``, ``MLFLOW_TRACKING_URI``), or run outside a trial, gets Ray's own
behaviour.

Ray's module is not imported here (it imports MLflow, half a second of every worker's
start): it is answered when it is imported, at the top of a trainable's module or
inside its function.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import warnings
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

from hpsearch.tracking import TrialOf

_INTEGRATION = "ray.air.integrations.mlflow"
"""Ray's module whose ``setup_mlflow`` builds its helper, ``_MLflowLoggerUtil``, at call time."""

_ANSWERED = "_hpsearch_answered"
"""Set on Ray's helper class once this module's subclass stands in for it."""


def answer_setup_mlflow() -> None:
    """Answer Ray's ``setup_mlflow`` in this process for the search's store: now, if its
    module is imported, else as it is (idempotent)."""
    module = sys.modules.get(_INTEGRATION)
    if module is not None:
        _answer(module)
    elif not any(isinstance(f, _OnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _OnImport())


class _OnImport(importlib.abc.MetaPathFinder):
    """Finds Ray's integration module as the path finder does, and answers it once loaded."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != _INTEGRATION:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        load = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            load(module)
            _answer(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]  # this spec's own loader
        return spec


def _answer(module: ModuleType) -> None:
    helper = getattr(module, "_MLflowLoggerUtil", None)
    if helper is None or getattr(helper, _ANSWERED, False):
        return

    class InSearch(helper):  # type: ignore[misc, valid-type]
        """Ray's helper, with the experiment its ``setup_mlflow`` defaults to or names
        found (or made) in the search's store."""

        def setup_mlflow(self, *given: Any, **settings: Any) -> None:
            ours = os.environ.get("MLFLOW_TRACKING_URI")
            # Ray's setup_mlflow names each setting; any other call is Ray's own.
            named = not given and TrialOf.from_env() is not None
            if named and settings.get("tracking_uri") in (None, ours):
                settings.update(_in_search(settings))
            super().setup_mlflow(*given, **settings)

    setattr(InSearch, _ANSWERED, True)
    # A module global, which setup_mlflow reads at each call (however it was imported).
    vars(module)["_MLflowLoggerUtil"] = InSearch


def _in_search(settings: dict[str, Any]) -> dict[str, Any]:
    """The experiment settings of Ray's helper, for the search's store: the Ray trial's id
    and name (``setup_mlflow``'s defaults) dropped, so MLflow's default (the search's
    experiment) is taken, and a named experiment made if missing."""
    from ray import tune

    changed: dict[str, Any] = {"create_experiment_if_not_exists": True}
    try:
        with warnings.catch_warnings():  # outside a Tune session: "Returning None", said
            warnings.simplefilter("ignore")
            context = tune.get_context()
            trial_id, trial_name = context.get_trial_id(), context.get_trial_name()
    except RuntimeError:  # no Tune session: setup_mlflow defaulted to nothing
        return changed
    if settings.get("experiment_id") == trial_id:
        changed["experiment_id"] = None
    if settings.get("experiment_name") == trial_name:
        changed["experiment_name"] = None
    return changed
