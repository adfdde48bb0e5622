"""Checkpoint upkeep: a trial's folder is removed when it ends, except the best trial's.

A pruned or failed trial's checkpoints go when it ends; an interrupted trial's
stay for its re-run. A complete trial's stay until the search ends, when
:func:`sweep_checkpoints` keeps only the best trials' (and those of trials still
queued or running) — ``hpsearch best --json`` names the best one's folder.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial, TrialState

from hpsearch import attrs
from hpsearch.lifecycle._base import TrialListener
from hpsearch.lifecycle._events import TrialEnded
from hpsearch.trial.protocol import Outcome


class CheckpointKeeper(TrialListener):
    """Removes the checkpoints of each trial that ends pruned or failed."""

    def on_ended(self, event: TrialEnded) -> None:
        if event.outcome in (Outcome.PRUNED, Outcome.FAIL) and event.checkpoint_dir:
            shutil.rmtree(event.checkpoint_dir, ignore_errors=True)


def sweep_checkpoints(study: optuna.Study, folder: str, trials: Sequence[FrozenTrial]) -> int:
    """Remove the checkpoint folders of finished trials, except the best trials'.

    Args:
        study: the study (its best trials are kept).
        folder: the study's checkpoint folder (``<execution.checkpoint_dir>/<study>``).
        trials: the study's trials, read once by the caller; a folder of a trial not
            among them (started since by another driver) is left alone.

    Returns:
        How many folders were removed.
    """
    root = Path(folder)
    if not root.is_dir():
        return 0
    keep = {_folder(t) for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)}
    keep.update(_folder(t) for t in _best(study, trials))
    known = {_folder(t) for t in trials}
    removed = 0
    for entry in root.iterdir():
        path = str(entry.resolve())
        if path in known and path not in keep and entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
            removed += 1
    return removed


def _folder(trial: FrozenTrial) -> str | None:
    folder: str | None = trial.user_attrs.get(attrs.CHECKPOINT_DIR)
    return folder


def _best(study: optuna.Study, trials: Sequence[FrozenTrial]) -> list[FrozenTrial]:
    if not any(t.state == TrialState.COMPLETE for t in trials):
        return []
    if len(study.directions) == 1:
        try:
            return [study.best_trial]
        except ValueError:  # each breaks a constraint: no best to keep, so none is swept
            return [t for t in trials if t.state == TrialState.COMPLETE]
    # Optuna's front holds the trials that keep their constraints (none: none is swept).
    return list(study.best_trials) or [t for t in trials if t.state == TrialState.COMPLETE]
