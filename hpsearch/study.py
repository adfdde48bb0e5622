"""The Optuna study: storage, sampler, pruner, the trial budget, and recovery of lost trials.

The study in its storage is the single source of truth for what was tried and
how it ended. Trials left RUNNING by a driver that died are found by Optuna's
heartbeat, failed, and queued again with the same parameters by Optuna's
``RetryHeartbeatStaleTrialCallback``; trials interrupted by a stopped search are
queued again by the driver (the new trial carries ``attrs.RETRY_OF``). Either
way a restarted search finishes them and they do not count twice toward
``n_trials``.
"""

from __future__ import annotations

import enum
import importlib.metadata
import time
import warnings
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy
from optuna.exceptions import ExperimentalWarning
from optuna.storages import (
    BaseStorage,
    InMemoryStorage,
    RDBStorage,
    RetryHeartbeatStaleTrialCallback,
)
from optuna.trial import FrozenTrial, TrialState

from hpsearch import attrs
from hpsearch._locks import store_lock
from hpsearch._options import construct_checked
from hpsearch.config import MEMORY_STORAGE, ObjectiveSpec, PrunerSpec, RunConfig
from hpsearch.errors import StudyError
from hpsearch.samplers import make_sampler
from hpsearch.storage_faults import Stores, storage_fault

HEARTBEAT_INTERVAL_S = 10
"""How often the driver stamps its running trials as alive (at most; a third of the grace)."""
GRACE_PERIOD_S = 30
"""A RUNNING trial whose stamp is older than this belongs to a driver that is gone
(``study.heartbeat_grace``'s default)."""

MAX_LOST_RETRIES = 2
"""How many times a trial lost with its driver is queued again (then it stays FAIL)."""

DRIVERS_ATTR = "hpsearch.drivers_started"
"""The study's count of drivers ever started on it (each offsets its sampler's seed)."""
CONFIG_ATTR = "hpsearch.config"
"""The study's user attribute holding the config of its latest run (as JSON)."""
VERSION_ATTR = "hpsearch.version"
TRAIN_ATTR = "hpsearch.train"

DRIVER_SEED_STRIDE = 7919
"""How far apart the seeds of drivers started on one study are (a prime, past any budget)."""


_PRUNERS: dict[str, Callable[..., optuna.pruners.BasePruner]] = {
    "none": optuna.pruners.NopPruner,
    "median": optuna.pruners.MedianPruner,
    "percentile": optuna.pruners.PercentilePruner,
    "successive_halving": optuna.pruners.SuccessiveHalvingPruner,
    "hyperband": optuna.pruners.HyperbandPruner,
}


def make_pruner(spec: PrunerSpec, source: str = "<config>") -> optuna.pruners.BasePruner:
    """The Optuna pruner a ``study.pruner`` section names, with its options.

    ``dominated`` is hpsearch's own rule (see :mod:`hpsearch.pruning`): the study
    gets Optuna's ``NopPruner``.
    """
    if spec.type == "dominated":
        return optuna.pruners.NopPruner()
    pruner: optuna.pruners.BasePruner = construct_checked(
        _PRUNERS[spec.type], dict(spec.options), "study.pruner", source
    )
    return pruner


def prepare_storage_url(url: str) -> str:
    """Create the folder of a SQLite file so a first run works from a fresh clone."""
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        if str(path) not in ("", ":memory:"):
            path.parent.mkdir(parents=True, exist_ok=True)
    return url


class StudyHandle:
    """The study a search writes to, with heartbeat bookkeeping for the driver's trials."""

    def __init__(
        self,
        study: optuna.Study,
        storage: BaseStorage,
        stale: list[FrozenTrial],
        heartbeat_interval_s: int = HEARTBEAT_INTERVAL_S,
        grace_period_s: int = GRACE_PERIOD_S,
    ) -> None:
        self.study = study
        self._storage = storage
        self._stale = stale
        self.heartbeat_interval_s = heartbeat_interval_s
        self.grace_period_s = grace_period_s
        self._study_id = storage.get_study_id_from_name(study.study_name)
        self._trial_ids: dict[int, int] = {}

    @property
    def name(self) -> str:
        """The study name."""
        return self.study.study_name

    def exclusive(self) -> AbstractContextManager[None]:
        """A lock the drivers sharing this study hold to count its trials and ask for one.

        A file lock beside a SQLite database, an advisory lock in PostgreSQL; none for
        other storages (in memory: one driver).
        """
        if not isinstance(self._storage, RDBStorage):
            return nullcontext()
        return store_lock(self._storage.url, self._storage.engine)

    def stamp_alive(self, trials: Sequence[optuna.Trial]) -> None:
        """Record that the driver still runs ``trials`` (Optuna's heartbeat; a database's)."""
        if not isinstance(self._storage, RDBStorage):
            return
        for trial in trials:
            self._storage.record_heartbeat(self._trial_id(trial.number))

    def _trial_id(self, number: int) -> int:
        """The storage's id of trial ``number`` (its public lookup, kept once asked)."""
        if number not in self._trial_ids:
            self._trial_ids[number] = self._storage.get_trial_id_from_study_id_trial_number(
                self._study_id, number
            )
        return self._trial_ids[number]

    def ask(
        self, distributions: dict[str, optuna.distributions.BaseDistribution] | None = None
    ) -> optuna.Trial:
        """A new trial, stamped alive at once.

        Args:
            distributions: parameters to sample now; ``None``: the caller suggests them
                (define-by-run, as a conditional space needs).
        """
        with warnings.catch_warnings():
            # Optuna warns that heartbeats are meant for Study.optimize; this driver
            # keeps them for its ask/tell trials itself (see stamp_alive).
            warnings.filterwarnings("ignore", message="Heartbeat of storage")
            trial = self.study.ask(fixed_distributions=distributions)
        self.stamp_alive([trial])
        return trial

    def reclaim_stale(self) -> list[FrozenTrial]:
        """Fail trials whose driver stopped stamping them; Optuna queues each again.

        Returns:
            The trials failed now (their MLflow runs still need ending).
        """
        self._stale.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExperimentalWarning)
            optuna.storages.fail_stale_trials(self.study)
        return list(self._stale)

    def retry_later(
        self, number: int, params: dict[str, Any], kept: dict[str, Any] | None = None
    ) -> None:
        """Enqueue the parameters of interrupted trial ``number`` to run again.

        Args:
            number: the interrupted trial.
            params: its sampled parameters.
            kept: user attrs the re-run inherits (its seed, its checkpoint folder).
        """
        self.study.enqueue_trial(params, user_attrs={**(kept or {}), attrs.RETRY_OF: number})


def open_study(
    config: RunConfig,
    *,
    as_driver: bool = False,
) -> StudyHandle:
    """Create the config's study, or load it to continue.

    Args:
        config: the search.
        as_driver: open it to run trials: counted among the study's drivers, whose
            number offsets the sampler's seed (two drivers started at once on one
            config do not suggest the same trials), and the study records the
            config, the hpsearch version and the train target it runs with (for
            optuna-dashboard and other readers of the study alone).

    Raises:
        StudyError: the storage cannot be opened, or the stored study optimises
            other directions than the config.
        ConfigError: sampler or pruner options the Optuna class does not take.
    """
    spec = config.study
    # Optuna's heartbeat takes whole seconds; a driver stamps three times per grace.
    grace_period_s = max(3, round(spec.heartbeat_grace))
    heartbeat_interval_s = min(HEARTBEAT_INTERVAL_S, grace_period_s // 3)
    sampler = make_sampler(spec.sampler, config.source, config.search_space)
    pruner = make_pruner(spec.pruner, config.source)
    stale: list[FrozenTrial] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        # A configuration whose trial was lost with its driver MAX_LOST_RETRIES + 1
        # times (it may be what kills the driver: the host's OOM killer) is not
        # queued again, or every rerun would start with it.
        requeue = RetryHeartbeatStaleTrialCallback(max_retry=MAX_LOST_RETRIES)

    def stale_trial(study: optuna.Study, trial: FrozenTrial) -> None:
        stale.append(trial)  # its MLflow run is ended by the caller
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExperimentalWarning)
            requeue(study, trial)

    # Several drivers may start on one config at once: one creates the tables.
    with ExitStack() as creating:
        try:
            creating.enter_context(store_lock(spec.storage))
        except sqlalchemy.exc.SQLAlchemyError as exc:
            raise _cannot_open(config, exc) from None
        storage = _open_storage(config, heartbeat_interval_s, grace_period_s, stale_trial)
        study = _open_or_create(config, storage, sampler, pruner)
        drivers = int(study.user_attrs.get(DRIVERS_ATTR, 0))
        if as_driver:
            study.set_user_attr(DRIVERS_ATTR, drivers + 1)
            for key, value in _described(config).items():
                study.set_user_attr(key, value)
    existing = len(study.get_trials(deepcopy=False))
    if (existing or drivers) and spec.sampler.seed is not None:
        # A seeded sampler replays the same random stream in every new driver, so a
        # resumed search, or a second driver started beside the first, would repeat
        # suggestions. Offsetting the seed by the trials already there and by the
        # drivers started before keeps it reproducible without repeating itself.
        seed = spec.sampler.seed + existing + DRIVER_SEED_STRIDE * drivers
        study.sampler = make_sampler(
            spec.sampler.model_copy(update={"seed": seed}), config.source, config.search_space
        )
    return StudyHandle(study, storage, stale, heartbeat_interval_s, grace_period_s)


def _described(config: RunConfig) -> dict[str, Any]:
    """What a study keeps of the search that runs it (its latest driver's)."""
    return {
        CONFIG_ATTR: config.model_dump(mode="json", exclude_unset=True),  # as written
        VERSION_ATTR: _version(),
        TRAIN_ATTR: config.train_target or str(config.command and config.command.command),
    }


def _version() -> str:
    try:
        return importlib.metadata.version("hpsearch")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _open_storage(
    config: RunConfig,
    heartbeat_interval_s: int,
    grace_period_s: int,
    stale_trial: Callable[[optuna.Study, FrozenTrial], None],
) -> BaseStorage:
    spec = config.study
    if spec.storage == MEMORY_STORAGE:
        return InMemoryStorage()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExperimentalWarning)
            return RDBStorage(
                prepare_storage_url(spec.storage),
                engine_kwargs=_engine_kwargs(spec.storage),
                heartbeat_interval=heartbeat_interval_s,
                grace_period=grace_period_s,
                heartbeat_stale_trial_callback=stale_trial,
            )
    except Exception as exc:
        raise _cannot_open(config, exc) from None


def _cannot_open(config: RunConfig, exc: Exception) -> StudyError:
    """The one-line error for a study storage that cannot be opened."""
    storage = config.study.storage
    fault = storage_fault(exc, Stores(config.source, storage, config.tracking.uri))
    first = str(exc).splitlines()[0] if str(exc) else ""
    return StudyError(
        fault
        or f"{config.source}: study.storage: cannot open '{storage}' "
        f"({type(exc).__name__}: {first}); check the URL and that the database is reachable"
    )


def _open_or_create(
    config: RunConfig,
    storage: BaseStorage,
    sampler: optuna.samplers.BaseSampler,
    pruner: optuna.pruners.BasePruner,
) -> optuna.Study:
    spec = config.study
    directions = [o.direction for o in config.objective_list]
    study = optuna.create_study(
        study_name=spec.name,
        storage=storage,
        sampler=sampler,
        pruner=pruner,
        directions=directions,
        load_if_exists=True,
    )
    stored = [d.name.lower() for d in study.directions]
    if stored != directions:
        raise StudyError(
            f"{config.source}: objective: study '{spec.name}' in {spec.storage} optimises "
            f"{stored}, the config asks for {directions}; "
            "give the study a new study.name, or restore the objectives it was created with"
        )
    _check_metric_names(study, config.objective_list, config.source)
    return study


def _check_metric_names(study: optuna.Study, objectives: list[ObjectiveSpec], source: str) -> None:
    names = [o.name for o in objectives]
    if study.metric_names is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExperimentalWarning)
            study.set_metric_names(names)
    elif study.metric_names != names:
        raise StudyError(
            f"{source}: objective: study '{study.study_name}' was created for metrics "
            f"{study.metric_names}, the config names {names}; "
            "give the study a new study.name, or restore the metrics it was created with"
        )


def _engine_kwargs(url: str) -> dict[str, Any]:
    # Readers (`hpsearch best` during a search) and the driver share the SQLite
    # file; wait for a lock rather than fail at once.
    if url.startswith("sqlite"):
        return {"connect_args": {"timeout": 30}}
    return {}


class BudgetDecision(enum.Enum):
    """Whether the search may start another trial."""

    START = "start"
    WAIT = "wait"
    FINISHED = "finished"


@dataclass(frozen=True)
class BudgetCount:
    """Trials that count toward ``n_trials``: those finished and those running."""

    finished: int
    running: int


def retried_numbers(trials: Sequence[FrozenTrial]) -> set[int]:
    """Numbers of failed trials that run again: interrupted ones, and those of a lost driver."""
    retried: set[int] = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        for trial in trials:
            retried.update(_retries(trial))
    return retried


def _retries(trial: FrozenTrial) -> list[int]:
    """The failed trials ``trial`` runs again (call with Optuna's experimental warning off)."""
    found = list(RetryHeartbeatStaleTrialCallback.retry_history(trial))
    if attrs.RETRY_OF in trial.user_attrs:
        found.append(int(trial.user_attrs[attrs.RETRY_OF]))
    return found


class BudgetTally:
    """:func:`count_budget` kept across reads of a growing study.

    Finished trials never change, and a trial that re-runs another carries its
    mark from its creation, so the leading run of finished trials (by number) is
    counted once, into sets kept here; each count reads only the trials after it
    and compares them with those sets. Give it the study's trials sorted by
    number, as Optuna returns them.
    """

    def __init__(self) -> None:
        self._settled = 0  # trials[:_settled] are finished and counted below
        self._complete = 0
        self._pruned: set[int] = set()
        self._failed: set[int] = set()
        self._retried: set[int] = set()  # failed trials that some trial runs again
        self._alone: set[int] = set()  # pruned trials that some trial runs again alone
        self._uncounted = 0  # |pruned & alone| + |failed & retried|
        self.unfinished: list[FrozenTrial] = []
        """The trials still running or waiting, as of the last count."""

    def count(self, trials: Sequence[FrozenTrial]) -> BudgetCount:
        """The study's count now (see :func:`count_budget`)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExperimentalWarning)
            while self._settled < len(trials) and trials[self._settled].state.is_finished():
                self._settle(trials[self._settled])
                self._settled += 1
            tail = trials[self._settled :]
            retried = {n for t in tail for n in _retries(t)} - self._retried
        alone = {_alone_of(t) for t in tail} - {None} - self._alone
        states = [t.state for t in tail]
        pruned = {t.number for t in tail if t.state == TrialState.PRUNED}
        failed = {t.number for t in tail if t.state == TrialState.FAIL}
        uncounted = (
            self._uncounted
            + len(pruned & (self._alone | alone))
            + len(failed & (self._retried | retried))
            + len(self._pruned & alone)
            + len(self._failed & retried)
        )
        finished = (
            self._complete
            + states.count(TrialState.COMPLETE)
            + len(self._pruned)
            + len(pruned)
            + len(self._failed)
            + len(failed)
            - uncounted
        )
        self.unfinished = [t for t in tail if not t.state.is_finished()]
        return BudgetCount(finished=finished, running=states.count(TrialState.RUNNING))

    def _settle(self, trial: FrozenTrial) -> None:
        """Count a finished trial for good."""
        if trial.state == TrialState.COMPLETE:
            self._complete += 1
        elif trial.state == TrialState.PRUNED:
            self._pruned.add(trial.number)
            self._uncounted += trial.number in self._alone
        elif trial.state == TrialState.FAIL:
            self._failed.add(trial.number)
            self._uncounted += trial.number in self._retried
        for number in _retries(trial):
            if number not in self._retried:
                self._retried.add(number)
                self._uncounted += number in self._failed
        alone = _alone_of(trial)
        if alone is not None and alone not in self._alone:
            self._alone.add(alone)
            self._uncounted += alone in self._pruned


def _alone_of(trial: FrozenTrial) -> int | None:
    """The trial that ``trial`` re-runs alone on a whole GPU, if it does."""
    number = trial.user_attrs.get(attrs.ALONE_RETRY_OF)
    return int(number) if number is not None else None


def count_budget(trials: Sequence[FrozenTrial]) -> BudgetCount:
    """Count finished trials and running ones.

    Finished: complete, pruned (out-of-memory ones included), and failed; but not
    a trial that runs again: one failed by an interruption or lost with its
    driver, or one that ran out of memory under a shared GPU's cap and re-runs
    alone. Its re-run counts.
    """
    return BudgetTally().count(trials)


class TrialBudget:
    """When the search stops: ``n_trials`` finished in the study in total, or ``timeout`` passed.

    Like ``Study.optimize``, the timeout stops new trials from starting; trials
    already running finish, unless a grace is given: trials still running that
    long after the timeout are overdue, and the runner stops them. Failed trials
    count toward ``n_trials`` (as in ``Study.optimize``), except those interrupted
    by a stopped driver, which are enqueued again and counted once they finish.

    Args:
        n_trials: trials the study should reach, every run's included.
        timeout_s: seconds from now after which no trial starts.
        clock: the runner's clock.
        grace_s: seconds after the timeout at which running trials are stopped.
    """

    def __init__(
        self,
        n_trials: int | None,
        timeout_s: float | None,
        clock: Callable[[], float] = time.monotonic,
        grace_s: float | None = None,
    ) -> None:
        self._n_trials = n_trials
        self._clock = clock
        self._deadline = None if timeout_s is None else clock() + timeout_s
        self._grace_s = grace_s

    def timed_out(self) -> bool:
        """Whether the wall-clock timeout has passed."""
        return self._deadline is not None and self._clock() >= self._deadline

    def overdue(self) -> bool:
        """Whether trials still running must be stopped now (the timeout and its grace passed)."""
        if self._deadline is None or self._grace_s is None:
            return False
        return self._clock() >= self._deadline + self._grace_s

    def short_of(self, count: BudgetCount) -> int:
        """How many finished trials ``count`` lacks of ``n_trials`` (0 without ``n_trials``)."""
        return 0 if self._n_trials is None else max(0, self._n_trials - count.finished)

    def decide(self, count: BudgetCount) -> BudgetDecision:
        """Start another trial, wait for running ones, or finish."""
        if self.timed_out():
            return BudgetDecision.FINISHED
        if self._n_trials is None:
            return BudgetDecision.START
        if count.finished >= self._n_trials:
            return BudgetDecision.FINISHED
        if count.finished + count.running >= self._n_trials:
            return BudgetDecision.WAIT
        return BudgetDecision.START
