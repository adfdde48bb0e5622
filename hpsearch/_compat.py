"""Every private name of another package hpsearch relies on, in one place.

Each shim has a test in ``tests/test_compat.py`` that fails when the library
changes under it. Of Optuna, hpsearch uses private names where its public API
costs the driver most of its time per trial, each pinned by a test there too:
a new trial asked as ``Study.ask`` asks it (:func:`new_optuna_trial`), a trial's
attributes written in one upsert and the queue looked up in the trials table
(Optuna's RDB models, in :mod:`hpsearch.study`), and TPE's Parzen estimator,
which :mod:`hpsearch.samplers._ordered_tpe` extends the way Optuna documents
("users can overwrite _ParzenEstimator"). Lost trials are re-queued by Optuna's
own ``RetryHeartbeatStaleTrialCallback``. Of MLflow, the table creation its SQL store
runs on a new database (:func:`create_mlflow_tables`), for the template new stores
are copied from (:mod:`hpsearch.tracking._store_template`), and its SQLite settings
given once per connection instead of once per session
(:func:`mlflow_sqlite_settings_per_connection`).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna
    from mlflow.tracking import MlflowClient

TUNE_MAX_PENDING_TRIALS = "TUNE_MAX_PENDING_TRIALS_PG"
"""Tune's limit on trials starting at once (``ray.tune.execution.tune_controller``); with a
custom searcher it lets one trial start at a time, and trials of a packed GPU start together."""

RAY_ENV_DEFAULTS = {
    # Ray's usage reporting, off for the users of a tool that starts Ray for them.
    "RAY_USAGE_STATS_ENABLED": "0",
    # Tune's console tables (ray.tune.experimental.output) would fight the progress view.
    "RAY_AIR_NEW_OUTPUT": "0",
    # Tune's CSV/JSON/TensorBoard loggers (ray.tune.utils.callback): results live in
    # Optuna and MLflow.
    "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "1",
    # Tune's chdir into each trial folder (ray.train.constants) would break relative paths.
    "RAY_CHDIR_TO_TRIAL_DIR": "0",
    # Ray Train's first API (ray.train.v2._internal.constants). Under Train V2, Ray's
    # default, ray.train.report, get_checkpoint and get_context raise inside a Tune
    # function; under the first, they are Tune's. Tune code written before V2 (`from
    # ray import train; train.report(...)`, as Ray's docs had it) then runs unchanged.
    "RAY_TRAIN_V2_ENABLED": "0",
}
"""Environment variables Ray reads in the driver and the workers, set where the user has not."""

RAY_WORKER_ENV = ("RAY_CHDIR_TO_TRIAL_DIR", "RAY_TRAIN_V2_ENABLED")
"""Of those, the ones the trial workers must see too."""

LOOPBACK_RAY_INIT: dict[str, Any] = {"_node_ip_address": "127.0.0.1"}
"""``ray.init``'s private argument for the address a local Ray's node binds to (loopback)."""

_SINGLE_MACHINE_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


@contextmanager
def ray_on_loopback_only() -> Iterator[None]:
    """While a local Ray starts, keep 127.0.0.1 as its node address: its servers listen there.

    On Linux Ray takes the machine's network address as the node address, even
    when given 127.0.0.1, and its GCS, raylet and workers then listen on every
    interface. With the single-machine mode of this setting (meant for laptops)
    the node address stays 127.0.0.1 and every server binds there. Ray reads it
    from the environment (for the processes it spawns) and, in this process,
    from a constant computed when Ray was imported
    (``ray._private.ray_constants.ENABLE_RAY_CLUSTER``); both are set while
    Ray starts. A search's local Ray is one machine by definition.
    """
    from ray._private import ray_constants

    saved_env = os.environ.get(_SINGLE_MACHINE_ENV)
    saved_flag = ray_constants.ENABLE_RAY_CLUSTER
    os.environ[_SINGLE_MACHINE_ENV] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved_flag
        if saved_env is None:
            os.environ.pop(_SINGLE_MACHINE_ENV, None)
        else:
            os.environ[_SINGLE_MACHINE_ENV] = saved_env


def local_ray_cpus() -> int:
    """The CPUs a local Ray started without ``num_cpus`` has: Ray's own count of this
    machine's (a container's CPU quota and affinity included), or Python's where Ray no
    longer has that private helper."""
    try:
        from ray._private.utils import get_num_cpus
    except ImportError:
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    return int(get_num_cpus())


def ray_auto_address() -> tuple[str, str] | None:
    """The ``host:port`` Ray's ``address="auto"`` joins, and where Ray read it:
    ``RAY_ADDRESS``, else the file of the cluster ``ray start`` last started here
    (``/tmp/ray/ray_current_cluster``). ``None`` where there is none, or this Ray no
    longer has its private helpers (Ray's own lookup then answers)."""
    try:
        from ray._common.utils import get_ray_address_file
        from ray._private.services import canonicalize_bootstrap_address

        # Ray warns of other Ray instances running here as it picks the file's: said
        # again by ray.init where it joins; where it cannot, the error line says which.
        services = logging.getLogger("ray._private.services")
        level = services.level
        services.setLevel(logging.ERROR)
        try:
            address = canonicalize_bootstrap_address("auto")
        finally:
            services.setLevel(level)
        where = "RAY_ADDRESS" if os.environ.get("RAY_ADDRESS") else get_ray_address_file(None)
    except Exception:  # no cluster found (Ray says so itself), or the helpers changed
        return None
    return (address, where) if isinstance(address, str) else None


NO_IDLE_WORKERS: dict[str, Any] = {"prestart_worker_first_driver": False}
"""Ray's system setting (``RAY_prestart_worker_first_driver``) for the one idle worker per
CPU its raylet starts when the first driver connects."""


@contextmanager
def lean_local_ray() -> Iterator[None]:
    """While a local Ray starts, leave out the helper processes a search never uses: the
    autoscaler's monitor (one machine, no nodes to add), the log monitor (the driver reads
    no worker output: ``log_to_driver=False``) and the idle workers the raylet starts,
    one per CPU, for the first driver (:data:`NO_IDLE_WORKERS`); and, where
    ``include_dashboard`` is False, the dashboard's head process.

    With the dashboard off, Ray still starts that process, loading only its usage-stats
    module (``RAY_USAGE_STATS_ENABLED=0`` here), and ``ray.init`` waits for its address.
    Left out, as Ray leaves it out where it fails to start: on 2 cores, ``ray.init``
    2.2 s → 1.4 s and 0.8 CPU-seconds fewer per start.

    Those idle workers run in Ray's default environment; every worker of a search runs
    in the search's own (its ``PYTHONPATH``, variables and reaper), so Ray starts new
    ones for the trials and the idle ones never run anything. Seen on 2 cores: two idle
    workers of 0.4 CPU-seconds each, started beside the trials' first workers, and 68 of
    them over a ``make test``.

    ``ray.init`` has no argument for the monitors (``ray start`` and Ray's own
    ``RayParams`` do: ``no_monitor``, ``include_log_monitor``), so the parameters it
    builds are amended while it runs. Measured on 2 cores: ``ray.init`` 3.4 s → 2.5 s,
    ``ray.shutdown`` 1.4 s → 0.1 s, and two Python processes fewer competing with the
    raylet's registration, which Ray waits for 30 s at most.
    """
    from ray._private import node, parameter

    original = parameter.RayParams.__init__
    original_api_server = node.Node.start_api_server

    def lean(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.no_monitor = True
        self.include_log_monitor = False
        self._system_config = {**(self._system_config or {}), **NO_IDLE_WORKERS}

    def api_server_if_dashboard(self: Any, **kwargs: Any) -> None:
        if kwargs.get("include_dashboard") is not False:
            original_api_server(self, **kwargs)

    parameter.RayParams.__init__ = lean  # type: ignore[method-assign]
    node.Node.start_api_server = api_server_if_dashboard  # type: ignore[method-assign]
    try:
        yield
    finally:
        parameter.RayParams.__init__ = original  # type: ignore[method-assign]
        node.Node.start_api_server = original_api_server  # type: ignore[method-assign]


TUNE_END_WAIT_S = 5
"""How long Tune's end of an experiment waits for its workers to stop before it kills the
rest (``TuneController._cleanup_trials``: at most 5 s)."""


@contextmanager
def tune_kills_stuck_workers_at_its_end_wait() -> Iterator[None]:
    """While Tune runs, a worker that has not stopped when its experiment ends is killed
    after Tune's own wait for them (:data:`TUNE_END_WAIT_S`), not 10 s after it was asked.

    Tune's end waits up to 5 s for its workers to stop, then gives each one still there
    until ``_actor_force_cleanup_timeout`` (10 s, set in ``TuneController.__init__``, no
    setting reads it) from when it was asked, before it kills it. A worker that cannot
    stop (stopped with SIGSTOP, a C loop holding the GIL) held a search that
    ``study.timeout_grace`` had stopped, or that Ctrl-C or a failure ended, 5 s more.
    """
    from ray.tune.execution import tune_controller

    original = tune_controller.TuneController.__init__

    def sooner(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self._actor_force_cleanup_timeout = TUNE_END_WAIT_S

    tune_controller.TuneController.__init__ = sooner  # type: ignore[method-assign]
    try:
        yield
    finally:
        tune_controller.TuneController.__init__ = original  # type: ignore[method-assign]


_UNSAID_LOCK = threading.Lock()
_unsaid: list[Any] = [0, None]
"""How many searches of this process leave Ray's death messages out now, and what printed
them before the first did."""

RAY_WORKER_DEATH = "A worker died or was killed while executing a task"
"""How the raylet's message on a worker that exited without Ray's leave begins (Ray 2.60),
which Ray's driver prints to stdout as ``(raylet) A worker died ...``."""


@contextmanager
def ray_worker_deaths_unsaid() -> Iterator[None]:
    """While a search runs, the raylet's message on a dead worker is not printed.

    Every trial that ends says how, on its own line: a worker that ended itself at
    ``execution.trial_timeout`` or at a hang, or died of a signal or out of memory,
    is named there with its reason. Ray's message, printed before it by the driver's
    error thread (``ray._private.worker.listen_error_messages``, through the module's
    ``print_to_stdstream``), says "an unexpected system error" and lists the OOM
    killer and SIGSEGV as causes, whatever the cause was. Its other messages print.
    """
    from ray._private import worker

    # Searches that overlap in one process share the one wrapper: the first in puts it
    # there, the last out takes it away (two wrappers, undone out of order, would leave
    # one there for good).
    with _UNSAID_LOCK:
        if _unsaid[0] == 0:
            _unsaid[1] = worker.print_to_stdstream
            original = _unsaid[1]

            def said_unless_a_death(data: dict[str, Any], ignore_prefix: bool) -> None:
                lines = data.get("lines") or []
                if (
                    data.get("pid") == "raylet"
                    and lines
                    and all(str(line).startswith(RAY_WORKER_DEATH) for line in lines)
                ):
                    return
                original(data, ignore_prefix)

            worker.print_to_stdstream = said_unless_a_death
        _unsaid[0] += 1
    try:
        yield
    finally:
        with _UNSAID_LOCK:
            _unsaid[0] -= 1
            if _unsaid[0] == 0:
                worker.print_to_stdstream = _unsaid[1]


@contextmanager
def tune_max_pending_trials(count: int) -> Iterator[None]:
    """Let Tune start up to ``count`` trials at once (it reads this when ``fit()`` starts)."""
    previous = os.environ.get(TUNE_MAX_PENDING_TRIALS)
    os.environ[TUNE_MAX_PENDING_TRIALS] = str(max(1, count))
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(TUNE_MAX_PENDING_TRIALS, None)
        else:
            os.environ[TUNE_MAX_PENDING_TRIALS] = previous


def new_optuna_trial(study: optuna.Study) -> tuple[optuna.Trial, int]:
    """A new trial of ``study`` and its storage id, as ``Study.ask`` creates one when no
    trial waits in the queue (Optuna 5: ``study.py``, ``ask``).

    ``Study.ask`` first looks for a waiting trial through its cached storage, which
    reads every running trial of the study back, in full, at every ask (about 2 ms
    of the driver's 34 per trial in ``bench_scale``). The driver asks its database whether any trial
    waits first (one small query) and, where none does, asks here: the trial created
    through the study's cached storage, the per-ask cache of the study's trials that
    samplers read dropped (so each new trial's sampler sees the trials asked before
    it), and the ``optuna.Trial`` built, as ``ask`` does. Private names: the study's
    storage, its id and that cache.
    """
    import optuna

    study._thread_local.cached_all_trials = None
    storage = study._storage
    trial_id = storage.create_new_trial(study._study_id)
    created = _created_trial(storage, trial_id)
    if created is None:
        return optuna.Trial(study, trial_id), trial_id
    return _trial_of(study, trial_id, created), trial_id


def _created_trial(storage: Any, trial_id: int) -> optuna.trial.FrozenTrial | None:
    """A copy of the trial ``storage`` created and cached a moment ago, as a read of it
    would return it (``None``: a storage that caches no created trial).

    ``optuna.Trial(study, id)`` reads the new trial back from the storage, and Optuna's
    cached storage reads a running trial from its database, in full: six statements
    (the trial and its five tables of params and attributes, all empty) for what
    ``create_new_trial`` has just built and cached. Private names: Optuna's
    ``_CachedStorage`` and its per-study cache.
    """
    import copy

    from optuna.storages._cached_storage import _CachedStorage

    if not isinstance(storage, _CachedStorage):
        return None
    with storage._lock:
        place = storage._trial_id_to_study_id_and_number.get(trial_id)
        if place is None:
            return None
        study_id, number = place
        return copy.deepcopy(storage._studies[study_id].trials[number])


def _trial_of(study: optuna.Study, trial_id: int, frozen: optuna.trial.FrozenTrial) -> optuna.Trial:
    """``optuna.Trial(study, trial_id)`` built on ``frozen``, its state as just read: what
    ``Trial.__init__`` sets (Optuna 5: ``trial/_trial.py``), that read aside."""
    import optuna
    from optuna import pruners

    trial = optuna.Trial.__new__(optuna.Trial)
    trial.study = study
    trial._trial_id = trial_id
    trial.storage = study._storage
    trial._cached_frozen_trial = frozen
    study.sampler.before_trial(pruners._filter_study(study, frozen), frozen)
    trial.relative_search_space = None
    trial._relative_params = None
    trial._fixed_params = frozen.system_attrs.get("fixed_params", {})
    return trial


def tell_optuna(
    study: optuna.Study,
    trial: optuna.Trial,
    values: list[float] | None = None,
    state: optuna.trial.TrialState | None = None,
    *,
    held: bool = False,
) -> None:
    """``study.tell(trial, values, state=state)``, less the copy of the told trial it returns;
    with ``held``, less the read of the trial before it too.

    ``Study.tell`` is ``_tell_with_warning`` followed by a read of the trial back from
    the storage and a deep copy of it (Optuna 5: ``study.py``, ``tell``): a second
    read of the trial with its params, attributes and steps, 7 of the 84 SQL
    statements of a trial in ``bench_scale``, for a value the driver never uses.
    ``_tell_with_warning`` itself first reads the running trial in full (six
    statements on an RDB storage: the trial, then its values, params, attributes and
    steps), to check it still runs and to hand it to the sampler's ``after_trial``.

    ``held``: this process is the trial's only writer (no worker writes to the study),
    so the copy of it the ``optuna.Trial`` holds (``_cached_frozen_trial``, which
    Optuna's own setters and :func:`hpsearch.study.set_user_attrs` keep) is what that
    read returns. A completed or failed trial is then told as ``_tell_with_warning``
    tells it, from that copy: values checked (infeasible ones fail the trial, with
    Optuna's warning), the sampler's ``after_trial``, the state and values written
    (the storage still refuses a trial that no longer runs). A pruned trial is read,
    since its value is its last step's, which a pruner writes to the storage.
    Private names: ``optuna.study._tell``'s ``_tell_with_warning`` and
    ``_check_values_are_feasible``, ``optuna.pruners._filter_study``, and the
    trial's ``_cached_frozen_trial``.
    """
    from optuna.study._tell import _tell_with_warning
    from optuna.trial import TrialState

    frozen = trial._cached_frozen_trial
    if not held or state not in (None, TrialState.FAIL) or frozen.state != TrialState.RUNNING:
        _tell_with_warning(study=study, trial=trial, value_or_values=values, state=state)
        return
    from optuna import pruners
    from optuna._warnings import optuna_warn
    from optuna.study._tell import _check_values_are_feasible

    study._thread_local.cached_all_trials = None  # as _tell_with_warning: stale once told
    told: list[float] | None = None
    if state is None:
        problem = (
            "The value None could not be cast to float."
            if values is None
            else _check_values_are_feasible(study, values)
        )
        if problem is None and values is not None:
            state, told = TrialState.COMPLETE, [float(v) for v in values]
        else:
            state = TrialState.FAIL
            optuna_warn(str(problem))
    try:
        filtered = pruners._filter_study(study, frozen)
        filtered.sampler.after_trial(filtered, frozen, state, told)
    finally:
        study._storage.set_trial_state_values(frozen._trial_id, state, told)


MLFLOW_SQLITE_PRAGMAS = (
    "PRAGMA foreign_keys = ON;",
    "PRAGMA busy_timeout = 20000;",
    "PRAGMA case_sensitive_like = true;",
)
"""The settings MLflow's SQL store gives a SQLite connection at the start of every
session (``mlflow.store.db.utils._get_managed_session_maker``)."""


def mlflow_sqlite_settings_per_connection(client: MlflowClient) -> bool:
    """Give the SQLite connections of ``client``'s store MLflow's settings once, as each
    connects, and run its sessions without them; whether the store was such a store.

    MLflow's SQL store runs :data:`MLFLOW_SQLITE_PRAGMAS` at the start of every session
    on SQLite: seven sessions and 21 statements per trial through SQLAlchemy's ORM,
    about 2 ms of the driver's CPU per trial in ``bench_scale``. All three are settings
    of the connection, which the engine's pool keeps: set as it connects, they hold
    for every session on it. The sessions are MLflow's own (its managed-session factory,
    told the database is not SQLite, which changes nothing else in it). A store with a
    read replica, or of another database, is left as it is. Private names: the client's
    store, the store's ``engine``, ``read_engine``, ``db_type`` and
    ``ManagedSessionMaker``, and the factory.
    """
    import sqlalchemy
    from mlflow.store.db import utils as db_utils
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    store = client._tracking_client.store
    if not isinstance(store, SqlAlchemyStore) or store.db_type != "sqlite":
        return False
    if store.read_engine is not None:
        return False
    engine = store.engine
    if not sqlalchemy.event.contains(engine, "connect", _mlflow_sqlite_settings):
        sqlalchemy.event.listen(engine, "connect", _mlflow_sqlite_settings)
        engine.dispose()  # connections opened before it: opened again, with the settings
    sessions = sqlalchemy.orm.sessionmaker(bind=engine)
    store.ManagedSessionMaker = db_utils._get_managed_session_maker(
        sessions, "sqlite, settings per connection"
    )
    return True


def _mlflow_sqlite_settings(connection: Any, _record: Any) -> None:
    cursor = connection.cursor()
    try:
        for pragma in MLFLOW_SQLITE_PRAGMAS:
            cursor.execute(pragma)
    finally:
        cursor.close()


def create_mlflow_tables(url: str) -> None:
    """Create MLflow's tables in the empty database at ``url``, migrated to the installed
    MLflow's head, as MLflow's SQL store does on its first start
    (``mlflow.store.db.utils._initialize_tables``), and nothing else: no experiment."""
    import sqlalchemy
    from mlflow.store.db.utils import _initialize_tables

    engine = sqlalchemy.create_engine(url)
    try:
        _initialize_tables(engine)  # type: ignore[no-untyped-call]
    finally:
        engine.dispose()


@contextmanager
def study_stops(study: optuna.Study, stop: Callable[[str], None]) -> Iterator[None]:
    """While an objective runs on ``study`` in a worker: its ``study.stop()`` works as in
    ``optimize`` (which alone lets it), and, once it returns, asks ``stop`` to end the search.

    Private names: the study's ``_thread_local.in_optimize_loop``, which ``stop`` checks,
    and ``_stop_flag``, which it sets.
    """
    local = study._thread_local
    was = getattr(local, "in_optimize_loop", False)
    local.in_optimize_loop = True
    try:
        yield
    finally:
        local.in_optimize_loop = was
        if getattr(study, "_stop_flag", False):
            stop("study.stop()")
