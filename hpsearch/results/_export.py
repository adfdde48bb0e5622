"""A config that runs one trial of a study again: its parameters fixed, the rest as written.

``hpsearch best --export`` writes it; ``hpsearch rerun`` runs it. Each searched
parameter of the space becomes a list of one choice (its value in the trial), so
the config still validates as a search, of one configuration; constants stay as
they were, and parameters of branches the trial did not take are left out. The
study's seed is the trial's, so the one trial of the new study runs with the
original's seed (``ctx.seed``). The study gets a name of its own, so the run
counts toward no budget of the original study, and its MLflow runs go to the
original experiment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from hpsearch.config import RunConfig
from hpsearch.errors import ResultsError
from hpsearch.results._study import TrialResult


def trial_config(
    config: RunConfig, trial: TrialResult, study_name: str, *, enqueued: bool = False
) -> dict[str, Any]:
    """The config, as written, that runs ``trial``'s configuration once, as study ``study_name``.

    Args:
        enqueued: the caller enqueues the trial's parameters in the new study (an Optuna
            objective's own suggestions can be fixed no other way).

    Raises:
        ResultsError: the trial has no parameters yet (queued, not started), or it is an
            Optuna objective's and nothing enqueues its parameters.
    """
    if not trial.params:
        raise ResultsError(f"trial {trial.number} of study '{trial.study}' has no parameters yet")
    if config.optuna_objective is not None and not enqueued:
        raise ResultsError(
            f"trial {trial.number} of study '{trial.study}' ran an Optuna objective, whose "
            f"suggestions a config cannot fix; run it again with hpsearch rerun CONFIG "
            f"{trial.number} (its parameters are enqueued in the rerun's study)"
        )
    data = config.model_dump(mode="json", exclude_unset=True)
    space: dict[str, Any] = {}
    chosen = config.search_space.trial_params(trial.params)
    for name, entry in data.get("space", {}).items():
        if name in trial.params:
            space[name] = [trial.params[name]]  # one choice: still a search, of this value only
        elif name in chosen:  # a constant that applies
            space[name] = {k: v for k, v in entry.items() if k != "when"}
        # else: a parameter of another branch, which this trial did not have
    data["space"] = space
    study = dict(data["study"])
    study.update(name=study_name, n_trials=1)
    if trial.seed is not None:
        # Trial 0 of the new study gets the study's seed plus 0: the original trial's seed.
        study["sampler"] = {**study.get("sampler", {}), "seed": trial.seed}
    for key in ("timeout", "timeout_grace", "enqueue"):  # its one trial is this one
        study.pop(key, None)
    study["pruner"] = {"type": "none"}  # the trial runs to its end, as it did or would have
    data["study"] = study
    tracking = dict(data.get("tracking", {}))
    tracking.setdefault("experiment", config.experiment_name)  # beside the original runs
    data["tracking"] = tracking
    return data


def write_trial_config(data: dict[str, Any], path: Path, note: str) -> None:
    """Write ``data`` as YAML to ``path``, headed by a comment saying where it came from."""
    text = yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
    path.write_text(f"# {note}\n{text}", encoding="utf-8")
