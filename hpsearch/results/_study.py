"""What a search found, read from its Optuna study: ``hpsearch.load(...)``.

Works during a search (it reads what the driver has recorded so far) and after.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import optuna
from optuna.trial import FrozenTrial, TrialState

from hpsearch import attrs
from hpsearch.config import DEFAULT_STUDY_STORAGE, MEMORY_STORAGE, load_config
from hpsearch.errors import ResultsError
from hpsearch.storage_faults import CREATE_TRIES, Stores, cannot_open_line, creation_race
from hpsearch.study import config_space_check
from hpsearch.trial.death import headline

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class TrialResult:
    """One trial as the search recorded it.

    Attributes:
        study: the study name.
        number: the Optuna trial number.
        state: ``COMPLETE``, ``PRUNED``, ``FAIL``, ``RUNNING`` or ``WAITING``.
        params: the sampled parameters (constants of the space are not included).
        values: the objective values of a complete trial, in the config's order.
        metrics: the final value of every metric the trial reported.
        mlflow_run_id: the trial's MLflow child run.
        duration_s: seconds from the worker's start to the end.
        error: why a failed trial failed.
        prune_reason: why a pruned trial was pruned.
        oom: for a trial pruned for memory: what ran out and where (see ``attrs.OOM``).
        gpus: the GPUs the trial ran on (none: on CPU, or not started).
        seed: the trial's seed (``ctx.seed``).
        checkpoint_dir: its checkpoint folder, where it saved checkpoints and they were
            kept (the best trial's are; others' are removed when they end).
        fused_group: the fused group it trained in (its first trial's number; ``None``:
            it trained alone).
        user_attrs: what its own code set on it (an Optuna objective's ``set_user_attr``).
        constraints: its constraint values, by name (a sampler's ``constraints_func``
            numbers them from 0; Optuna's ``trial.set_constraint`` names them): each
            holds at 0 or less, and a best trial keeps every one.
    """

    study: str
    number: int
    state: str
    params: dict[str, Any]
    values: list[float] | None
    metrics: dict[str, float] = field(default_factory=dict)
    mlflow_run_id: str | None = None
    duration_s: float | None = None
    error: str | None = None
    prune_reason: str | None = None
    oom: dict[str, Any] | None = None
    gpus: list[str] = field(default_factory=list)
    seed: int | None = None
    checkpoint_dir: str | None = None
    fused_group: int | None = None
    user_attrs: dict[str, Any] = field(default_factory=dict)
    constraints: dict[str, float] = field(default_factory=dict)

    @property
    def value(self) -> float | None:
        """The value of the only objective, as Optuna's ``FrozenTrial.value`` (``None``:
        not complete).

        Raises:
            ResultsError: the trial has several objective values (read ``values``).
        """
        if self.values is None:
            return None
        if len(self.values) != 1:
            raise ResultsError(
                f"trial {self.number} has {len(self.values)} objective values; read values"
            )
        return self.values[0]

    @property
    def reason(self) -> str:
        """Why it ended as it did, in one line: the prune reason, or its error's headline."""
        if self.prune_reason:
            return self.prune_reason.strip().splitlines()[0]
        if self.error:
            return headline(self.error)
        return ""

    @classmethod
    def from_frozen(cls, study: str, trial: FrozenTrial) -> TrialResult:
        """Build from an Optuna trial and the user attrs hpsearch wrote on it."""
        user = trial.user_attrs
        return cls(
            study=study,
            number=trial.number,
            state=trial.state.name,
            params=dict(trial.params),
            values=list(trial.values) if trial.values is not None else None,
            metrics=dict(user.get(attrs.METRICS, {})),
            mlflow_run_id=user.get(attrs.MLFLOW_RUN),
            duration_s=user.get(attrs.DURATION),
            error=user.get(attrs.ERROR),
            prune_reason=user.get(attrs.PRUNE_REASON),
            oom=user.get(attrs.OOM),
            gpus=[str(g) for g in user.get(attrs.ASSIGNED, {}).get("gpu_ids", [])],
            seed=user.get(attrs.SEED),
            checkpoint_dir=_kept_checkpoint(user.get(attrs.CHECKPOINT_DIR)),
            fused_group=(user.get(attrs.FUSED_GROUP) or {}).get("group"),
            user_attrs=attrs.code_attrs(user),
            constraints=dict(trial.constraints),
        )

    def to_dict(self, metric_names: list[str] | None = None) -> dict[str, Any]:
        """The JSON shape ``hpsearch best --json`` prints.

        With ``metric_names`` (the objectives), ``values`` maps each to its value.
        """
        payload: dict[str, Any] = {
            "study": self.study,
            "trial_number": self.number,
            "params": self.params,
            "metrics": self.metrics,
            "mlflow_run_id": self.mlflow_run_id,
            "seed": self.seed,
            "checkpoint_dir": self.checkpoint_dir,
        }
        if self.fused_group is not None:
            payload["fused_group"] = self.fused_group
        if self.user_attrs:
            payload["user_attrs"] = self.user_attrs
        if self.constraints:
            payload["constraints"] = self.constraints
        if metric_names is not None and self.values is not None:
            payload["values"] = dict(zip(metric_names, self.values, strict=True))
        return payload

    def record(self, metric_names: list[str]) -> dict[str, Any]:
        """Everything known of the trial, as ``hpsearch trials --json`` prints it."""
        return {
            **self.to_dict(metric_names),
            "values": (
                dict(zip(metric_names, self.values, strict=True))
                if self.values is not None
                else None
            ),
            "state": self.state,
            "duration_s": self.duration_s,
            "reason": self.reason,
            "error": self.error,
            "prune_reason": self.prune_reason,
            "oom": self.oom,
            "gpus": self.gpus,
            "user_attrs": self.user_attrs,
            "constraints": self.constraints,
        }


class StudyResults:
    """Read access to one study's outcome."""

    def __init__(self, study: optuna.Study) -> None:
        self._study = study

    @property
    def study(self) -> optuna.Study:
        """The underlying Optuna study."""
        return self._study

    @property
    def name(self) -> str:
        """The study name."""
        return self._study.study_name

    @property
    def metric_names(self) -> list[str]:
        """The objective metrics, in order."""
        names = self._study.metric_names
        return (
            list(names) if names else [f"objective_{i}" for i in range(len(self._study.directions))]
        )

    @property
    def is_multi_objective(self) -> bool:
        """Whether the study has more than one objective."""
        return len(self._study.directions) > 1

    @property
    def best_trial(self) -> TrialResult:
        """The best complete trial of a single-objective study.

        Raises:
            ResultsError: no trial has completed yet, or the study has several objectives.
        """
        if self.is_multi_objective:
            raise ResultsError(
                f"study '{self.name}' has {len(self._study.directions)} objectives "
                f"({', '.join(self.metric_names)}), so there is no single best trial; "
                "use best_trials (hpsearch best shows the Pareto front)"
            )
        self._require_complete()
        try:
            best = self._study.best_trial
        except ValueError:  # Optuna's: every complete trial breaks a constraint
            raise ResultsError(self._none_feasible()) from None
        return TrialResult.from_frozen(self.name, best)

    @property
    def best_value(self) -> float:
        """The best trial's value, as Optuna's ``Study.best_value`` (one objective).

        Raises:
            ResultsError: as :attr:`best_trial`.
        """
        return cast("float", self.best_trial.value)  # the best trial is complete

    @property
    def best_params(self) -> dict[str, Any]:
        """The best trial's parameters, as Optuna's ``Study.best_params`` (one objective).

        Raises:
            ResultsError: as :attr:`best_trial`.
        """
        return self.best_trial.params

    @property
    def best_trials(self) -> list[TrialResult]:
        """The Pareto front (several objectives) or the one best trial (one objective)."""
        if not self.is_multi_objective:
            return [self.best_trial]
        self._require_complete()
        front = sorted(self._study.best_trials, key=lambda t: t.number)
        if not front:  # Optuna's front holds only trials that keep their constraints
            raise ResultsError(self._none_feasible())
        return [TrialResult.from_frozen(self.name, t) for t in front]

    def pareto_front(self) -> list[TrialResult]:
        """The complete trials no other complete trial beats on every objective (Optuna's
        ``best_trials``), in trial-number order.

        Raises:
            ResultsError: the study has one objective, or no trial has completed yet.
        """
        if not self.is_multi_objective:
            raise ResultsError(
                f"study '{self.name}' has one objective ({self.metric_names[0]}), so its "
                "Pareto front is its best trial; drop --pareto, or list several objectives "
                "(objectives: [{metric: val_accuracy, direction: maximize}, "
                "{metric: samples_per_sec, direction: maximize}])"
            )
        return self.best_trials

    def oom_trials(self) -> list[TrialResult]:
        """Trials pruned for running out of memory, predicted ones (never launched) included."""
        return [t for t in self.trials if t.oom is not None]

    @property
    def trials(self) -> list[TrialResult]:
        """Every trial, in number order."""
        return [
            TrialResult.from_frozen(self.name, t) for t in self._study.get_trials(deepcopy=False)
        ]

    def trial(self, number: int) -> TrialResult:
        """Trial ``number``.

        Raises:
            ResultsError: the study has no such trial.
        """
        trials = self._study.get_trials(deepcopy=False)
        if not 0 <= number < len(trials):
            raise ResultsError(
                f"study '{self.name}' has no trial {number} (trials 0 to {len(trials) - 1}); "
                f"give a number from 0 to {len(trials) - 1}"
                if trials
                else f"study '{self.name}' has no trial yet; run its search first"
            )
        return TrialResult.from_frozen(self.name, trials[number])

    def trials_dataframe(self) -> pd.DataFrame:
        """One row per trial: Optuna's columns plus ``mlflow_run_id``, the final metrics, and
        the user attrs the trials' own code set (``user_attrs_<name>``, as Optuna names them)."""
        frame = self._study.trials_dataframe(
            attrs=("number", "state", "values", "params", "duration")
        )
        trials = self._study.get_trials(deepcopy=False)
        frame["mlflow_run_id"] = [t.user_attrs.get(attrs.MLFLOW_RUN) for t in trials]
        metric_names = sorted({m for t in trials for m in t.user_attrs.get(attrs.METRICS, {})})
        for metric in metric_names:
            frame[f"metrics_{metric}"] = [
                t.user_attrs.get(attrs.METRICS, {}).get(metric) for t in trials
            ]
        own = [attrs.code_attrs(t.user_attrs) for t in trials]
        for name in sorted({name for found in own for name in found}):
            frame[f"user_attrs_{name}"] = [found.get(name) for found in own]
        return frame

    def why_none_completed(self) -> str | None:
        """Why no trial of the study completed, its most common error first; ``None``: one did.

        Trials interrupted and queued again are left out: they have not ended yet.
        """
        endings = self._endings()
        if endings is None:
            return None
        return endings or f"study '{self.name}' has no ended trial yet"

    def _endings(self) -> str | None:
        """How the study's ended trials ended, none complete ("": none ended; ``None``: one
        completed)."""
        trials = self._study.get_trials(deepcopy=False)
        if any(t.state == TrialState.COMPLETE for t in trials):
            return None
        failed = [
            t
            for t in trials
            if t.state == TrialState.FAIL and t.user_attrs.get(attrs.OUTCOME) != "interrupted"
        ]
        pruned = [t for t in trials if t.state == TrialState.PRUNED]
        causes = Counter(
            [headline(str(t.user_attrs.get(attrs.ERROR, "unknown error"))) for t in failed]
            + [f"pruned: {t.user_attrs.get(attrs.PRUNE_REASON, 'by the pruner')}" for t in pruned]
        )
        if not causes:
            return ""
        cause, count = causes.most_common(1)[0]
        return (
            f"no trial of study '{self.name}' completed ({len(failed)} failed, {len(pruned)} "
            f"pruned); most common ({count} trial(s)): {cause}"
        )

    def _none_feasible(self) -> str:
        """Why a constrained study has no best trial: every complete one broke a constraint."""
        complete = self._study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        return (
            f"study '{self.name}' has {len(complete)} completed trial(s), and each breaks a "
            "constraint (a constraint holds at 0 or less: its sampler's constraints_func, or "
            "trial.set_constraint); run more trials, or relax the constraints"
        )

    def _require_complete(self) -> None:
        endings = self._endings()
        if endings is None:
            return
        if endings:  # trials ended, none complete: how they ended, and where to see each
            raise ResultsError(
                f"{endings}; see each with hpsearch trials CONFIG --state fail "
                "(or trials_dataframe())"
            )
        raise ResultsError(
            f"study '{self.name}' has no completed trial yet; wait for the first trial to finish"
        )


def _kept_checkpoint(folder: str | None) -> str | None:
    """``folder`` when it still holds something (a checkpoint); ``None`` otherwise."""
    if folder and Path(folder).is_dir() and any(Path(folder).iterdir()):
        return folder
    return None


def load(
    source: str | os.PathLike[str] | optuna.Study, *, storage: str | None = None
) -> StudyResults:
    """Open a study's results.

    Args:
        source: a config file path, an ``optuna.Study``, or a study name.
        storage: the study storage URL, for a study name (default: hpsearch's default).

    Raises:
        ConfigError: the config file is invalid.
        ResultsError: no such study in the storage, or one whose space the config's
            cannot share (as ``hpsearch run`` would refuse it).
    """
    if isinstance(source, optuna.Study):
        return StudyResults(source)
    text = os.fspath(source)
    if Path(text).suffix in (".yaml", ".yml") or Path(text).is_file():
        config = load_config(text)
        stores = Stores(text, config.study.storage, config.tracking.uri)
        results = _open(
            config.study.name, config.study.storage, hint=f"hpsearch run {text}", stores=stores
        )
        # A config whose space the study refuses reads another search's trials: the
        # line `hpsearch run` would print, not that study's best.
        study = results.study
        check = config_space_check(config, study.user_attrs, study.get_trials)
        if check.problem:
            raise ResultsError(check.problem)
        return results
    return _open(text, storage or DEFAULT_STUDY_STORAGE, hint="hpsearch run CONFIG")


def _open(name: str, storage: str, hint: str, stores: Stores | None = None) -> StudyResults:
    if storage == MEMORY_STORAGE:
        raise ResultsError(
            f"study.storage is '{MEMORY_STORAGE}': study '{name}' was kept in its search's "
            "memory only; set study.storage to a database (e.g. sqlite:///mlruns/optuna.db) "
            "to read it afterwards"
        )
    if storage.startswith("sqlite:///"):
        path = Path(storage.removeprefix("sqlite:///"))
        if not path.exists():
            raise ResultsError(
                f"no study storage at {path} (from {storage}); run `{hint}` first, "
                "from the same working directory"
            )
    try:
        study = _load_study(name, storage, stores)
    except KeyError:
        names = optuna.get_all_study_names(storage)
        listed = ", ".join(names) if names else "none"
        raise ResultsError(
            f"no study named '{name}' in {storage} (studies there: {listed}); run `{hint}` first"
        ) from None
    return StudyResults(study)


def _load_study(name: str, storage: str, stores: Stores | None) -> optuna.Study:
    """``optuna.load_study``, opened again where a driver was creating the new store's
    tables at the same moment; a store that cannot be opened, as one line naming it
    (with ``stores``, the config's file and key too).

    Raises:
        KeyError: no such study there (Optuna's own answer).
        ResultsError: the store cannot be opened.
    """
    import sqlalchemy.exc

    tries_left = CREATE_TRIES
    while True:
        tries_left -= 1
        try:
            return optuna.load_study(study_name=name, storage=storage)
        except KeyError:
            raise
        except Exception as exc:
            if tries_left and isinstance(exc, sqlalchemy.exc.DBAPIError) and creation_race(exc):
                continue  # the driver created the tables: they are there now
            raise ResultsError(cannot_open_line(exc, storage, stores)) from None
