"""Opening a config's study: its storage, sampler and pruner, created or continued.

The study in its storage is the single source of truth for what was tried and
how it ended. Trials left RUNNING by a driver that died are found by Optuna's
heartbeat, failed, and queued again with the same parameters (see
:mod:`hpsearch.study._heartbeat`); trials interrupted by a stopped search are
queued again by the driver (the new trial carries ``attrs.RETRY_OF``). Either
way a restarted search finishes them and they do not count twice toward
``n_trials``.
"""

from __future__ import annotations

import importlib.metadata
import warnings
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy
from optuna.exceptions import ExperimentalWarning
from optuna.storages import BaseStorage, InMemoryStorage, RDBStorage
from optuna.trial import FrozenTrial

from hpsearch._locks import store_lock
from hpsearch._sqlite import write_ahead
from hpsearch.config import MEMORY_STORAGE, ObjectiveSpec, RunConfig
from hpsearch.errors import StudyError
from hpsearch.pruning import make_pruner
from hpsearch.samplers import make_sampler
from hpsearch.storage_faults import CREATE_TRIES, Stores, cannot_open_line, creation_race
from hpsearch.study._handle import StudyHandle
from hpsearch.study._heartbeat import heartbeat_timing, requeue_lost
from hpsearch.study._space_check import SPACE_ATTR, config_space_check, space_attr

DRIVERS_ATTR = "hpsearch.drivers_started"
"""The study's count of drivers ever started on it (each offsets its sampler's seed)."""
CONFIG_ATTR = "hpsearch.config"
"""The study's user attribute holding the config of its latest run (as JSON)."""
VERSION_ATTR = "hpsearch.version"
TRAIN_ATTR = "hpsearch.train"

DRIVER_SEED_STRIDE = 7919
"""How far apart the seeds of drivers started on one study are (a prime, past any budget)."""


def prepare_storage_url(url: str) -> str:
    """Create the folder of a SQLite file so a first run works from a fresh clone."""
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        if str(path) not in ("", ":memory:"):
            path.parent.mkdir(parents=True, exist_ok=True)
    return url


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
    heartbeat_interval_s, grace_period_s = heartbeat_timing(spec.heartbeat_grace)
    sampler = make_sampler(spec.sampler, config.source, config.search_space)
    pruner = make_pruner(spec.pruner, config.source)
    stale: list[FrozenTrial] = []
    stale_trial = requeue_lost(stale)
    # Several drivers may start on one config at once: one creates the tables.
    with ExitStack() as creating:
        try:
            creating.enter_context(store_lock(spec.storage))
        except sqlalchemy.exc.SQLAlchemyError as exc:
            raise _cannot_open(config, exc) from None
        storage = _open_storage(config, heartbeat_interval_s, grace_period_s, stale_trial)
        study = _open_or_create(config, storage, sampler, pruner)
        study_attrs = study.user_attrs  # a query: read once
        drivers = int(study_attrs.get(DRIVERS_ATTR, 0))
        notes: tuple[str, ...] = ()
        if as_driver:
            notes = _check_space(config, study, study_attrs)
            study.set_user_attr(DRIVERS_ATTR, drivers + 1)
            for key, value in _described(config).items():
                study.set_user_attr(key, value)
            for params in config.enqueued:  # under the lock: a second driver finds them queued
                study.enqueue_trial(params, skip_if_exists=True)
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
    return StudyHandle(study, storage, stale, heartbeat_interval_s, grace_period_s, notes=notes)


def _check_space(
    config: RunConfig, study: optuna.Study, study_attrs: dict[str, Any]
) -> tuple[str, ...]:
    """The config's space against the study's (:mod:`~hpsearch.study._space_check`): the
    notes a driver prints; raises where the two cannot share the study.

    Raises:
        StudyError: naming the parameter, both definitions and the way out.
    """
    check = config_space_check(config, study_attrs, lambda: study.get_trials(deepcopy=False))
    if check.problem:
        raise StudyError(check.problem)
    return check.notes


def _described(config: RunConfig) -> dict[str, Any]:
    """What a study keeps of the search that runs it (its latest driver's)."""
    space = config.search_space.distributions()
    return {
        CONFIG_ATTR: config.model_dump(mode="json", exclude_unset=True),  # as written
        **({SPACE_ATTR: space_attr(space)} if space else {}),
        VERSION_ATTR: _version(),
        TRAIN_ATTR: config.train_label,
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
    write_ahead(spec.storage)
    tries_left = CREATE_TRIES
    while True:
        tries_left -= 1
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
        except sqlalchemy.exc.DBAPIError as exc:
            if tries_left and creation_race(exc):
                continue  # the other program created the tables: open them now
            raise _cannot_open(config, exc) from None
        except Exception as exc:
            raise _cannot_open(config, exc) from None


def _cannot_open(config: RunConfig, exc: Exception) -> StudyError:
    """The one-line error for a study storage that cannot be opened."""
    storage = config.study.storage
    stores = Stores(config.source, storage, config.tracking.uri)
    return StudyError(cannot_open_line(exc, storage, stores))


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
