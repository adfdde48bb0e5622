"""One test per shim in ``hpsearch._compat``: each fails when the library changes under it."""

from __future__ import annotations

import importlib
import inspect
import os
from pathlib import Path
from typing import Any

import optuna
import pytest

from hpsearch import _compat
from hpsearch._compat import study_stops


def _source_of(module: str) -> str:
    return Path(inspect.getfile(importlib.import_module(module))).read_text(encoding="utf-8")


def test_ray_still_decides_single_machine_mode_from_the_constant_we_patch() -> None:
    from ray._private import ray_constants, services

    assert isinstance(ray_constants.ENABLE_RAY_CLUSTER, bool)
    assert "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER" in _source_of("ray._private.ray_constants")
    assert "ray_constants.ENABLE_RAY_CLUSTER" in inspect.getsource(services)
    before = ray_constants.ENABLE_RAY_CLUSTER
    with _compat.ray_on_loopback_only():
        assert ray_constants.ENABLE_RAY_CLUSTER is False
        assert os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"
    assert ray_constants.ENABLE_RAY_CLUSTER is before


def test_ray_init_still_takes_the_node_address_argument() -> None:
    import ray

    source = inspect.getsource(ray.init)  # a private keyword, read from **kwargs
    for name in _compat.LOOPBACK_RAY_INIT:
        assert f'kwargs.pop("{name}"' in source, f"ray.init no longer reads {name}"


def test_ray_still_starts_its_monitors_by_the_parameters_a_lean_start_sets() -> None:
    from ray._private import parameter

    node = _source_of("ray._private.node")
    assert "self._ray_params.no_monitor" in node
    assert "self._ray_params.include_log_monitor" in node
    plain = parameter.RayParams()
    assert (plain.no_monitor, plain.include_log_monitor) == (False, None)
    with _compat.lean_local_ray():
        lean = parameter.RayParams()
    assert lean.no_monitor is True
    # Ray annotates it Optional[str]; it is read as a flag (node.py: if ...include_log_monitor);
    # None would be made True by node.py's update_if_absent.
    assert lean.include_log_monitor is not None
    assert not lean.include_log_monitor
    assert lean._system_config == _compat.NO_IDLE_WORKERS  # the raylet reads it (test_cluster)
    assert parameter.RayParams().no_monitor is False  # put back


def test_tune_still_reads_its_pending_trials_limit() -> None:
    assert _compat.TUNE_MAX_PENDING_TRIALS in _source_of("ray.tune.execution.tune_controller")
    previous = os.environ.get(_compat.TUNE_MAX_PENDING_TRIALS)
    with _compat.tune_max_pending_trials(4):
        assert os.environ[_compat.TUNE_MAX_PENDING_TRIALS] == "4"
    assert os.environ.get(_compat.TUNE_MAX_PENDING_TRIALS) == previous


@pytest.mark.parametrize(
    ("name", "module"),
    [
        ("RAY_USAGE_STATS_ENABLED", "ray._common.usage.usage_constants"),
        ("RAY_AIR_NEW_OUTPUT", "ray.tune.experimental.output"),
        ("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "ray.tune.utils.callback"),
        ("RAY_CHDIR_TO_TRIAL_DIR", "ray.train.constants"),
        ("RAY_TRAIN_V2_ENABLED", "ray.train.v2._internal.constants"),
    ],
)
def test_ray_still_reads_each_environment_default(name: str, module: str) -> None:
    assert name in _compat.RAY_ENV_DEFAULTS
    assert name in _source_of(module), f"{module} no longer reads {name}"


def test_optunas_parzen_estimator_still_has_what_the_ordered_choices_extend() -> None:
    # hpsearch.samplers._ordered_tpe subclasses TPE's estimator and swaps it in through the
    # sampler's attribute: each private name and signature it relies on, pinned.
    import optuna
    from optuna.samplers._tpe import parzen_estimator, probability_distributions

    from hpsearch.samplers import _ordered_tpe

    estimator = parzen_estimator._ParzenEstimator
    assert _ordered_tpe.OrderedChoicesParzenEstimator.__mro__[1] is estimator
    assert list(inspect.signature(estimator._calculate_categorical_distributions).parameters) == [
        "self",
        "observations",
        "param_name",
        "search_space",
        "parameters",
    ]
    assert list(inspect.signature(estimator._calculate_numerical_distributions).parameters) == [
        "self",
        "observations",
        "search_space",
        "parameters",
    ]
    assert hasattr(parzen_estimator, "_ParzenEstimatorParameters")
    truncnorm = probability_distributions._BatchedDiscreteTruncNormDistributions
    assert {"mu", "sigma"} <= set(truncnorm._fields)
    categorical = probability_distributions._BatchedCategoricalDistributions
    assert list(categorical._fields) == ["weights"]
    assert hasattr(probability_distributions, "_BatchedDistributions")
    sampler = optuna.samplers.TPESampler(seed=0)
    assert sampler._parzen_estimator_cls is estimator  # the hook the sampler reads
    assert "self._parzen_estimator_cls(" in _source_of("optuna.samplers._tpe.sampler")
    _ordered_tpe.order_numeric_choices(sampler)
    assert sampler._parzen_estimator_cls is _ordered_tpe.OrderedChoicesParzenEstimator


def test_optunas_private_names_the_driver_writes_and_serves_through_are_still_there() -> None:
    # study/_attrs.py writes a trial's attributes in one session; study/_proxy.py serves
    # the study with Optuna's own gRPC server; lifecycle/_records.py reads a trial back.
    from optuna.storages import RDBStorage
    from optuna.storages._grpc.server import make_server
    from optuna.storages._rdb import models
    from optuna.storages._rdb.storage import _create_scoped_session

    assert list(inspect.signature(make_server).parameters)[:3] == ["storage", "host", "port"]
    assert list(inspect.signature(RDBStorage._set_trial_attr_without_commit).parameters) == [
        "self",
        "session",
        "model_cls",
        "trial_id",
        "key",
        "value",
    ]
    assert callable(_create_scoped_session)
    assert hasattr(models, "TrialUserAttributeModel")
    # study/_attrs.py's one upsert of several attributes: Optuna's per-attribute steps.
    attribute_write = inspect.getsource(RDBStorage._set_trial_attr_without_commit)
    assert "trial = models.TrialModel.find_or_raise_by_id(trial_id, session)" in attribute_write
    assert "self.check_trial_is_updatable(trial_id, trial.state)" in attribute_write
    assert "index_elements=[model_cls.trial_id, model_cls.key]" in attribute_write
    # Its check, made a condition of that upsert: only a finished trial is refused.
    check = inspect.getsource(RDBStorage.check_trial_is_updatable)
    assert "if trial_state.is_finished():" in check
    assert {"trial_id", "key", "value_json"} <= set(
        models.TrialUserAttributeModel.__table__.c.keys()
    )
    # study/_handle.py asks the trials table whether a trial waits in the queue, and
    # stamps the running trials that have no heartbeat row.
    assert {"trial_id", "study_id", "state"} <= set(models.TrialModel.__table__.c.keys())
    assert models.TrialHeartbeatModel.__tablename__ == "trial_heartbeats"
    assert "trial_id" in models.TrialHeartbeatModel.__table__.c
    study = optuna.create_study()
    trial = study.ask()
    assert isinstance(trial._trial_id, int)
    assert trial._cached_frozen_trial.number == trial.number
    assert study._storage is trial.storage


def test_optunas_ask_still_creates_a_trial_as_the_driver_does_when_none_waits() -> None:
    # study/_handle.py asks as Study.ask does where no trial waits in the queue:
    # the per-ask cache of the study's trials dropped, then optuna.Trial(study, id).
    ask = _source_of("optuna.study.study").split("    def ask(", 1)[1].split("    def tell(")[0]
    assert "self._thread_local.cached_all_trials = None" in ask
    assert "trial_id = self._pop_waiting_trial_id()" in ask
    assert "trial_id = self._storage.create_new_trial(self._study_id)" in ask
    assert "trial = optuna.Trial(self, trial_id)" in ask
    study = optuna.create_study()
    study._thread_local.cached_all_trials = []  # what a sampler's read leaves
    trial, trial_id = _compat.new_optuna_trial(study)
    assert study._thread_local.cached_all_trials is None
    assert (trial.number, trial_id) == (
        0,
        study._storage.get_trial_id_from_study_id_trial_number(study._study_id, 0),
    )


def test_a_new_trial_on_a_database_is_the_trial_optuna_reads_back(tmp_path: Path) -> None:
    # study/_handle.py's new trial, on Optuna's cached RDB storage, is built on the
    # trial the storage cached as it created it: what Trial.__init__ sets, unread.
    study = optuna.create_study(storage=f"sqlite:///{tmp_path}/s.db")
    init = inspect.getsource(optuna.Trial.__init__)
    assert "self._cached_frozen_trial = self.storage.get_trial(self._trial_id)" in init
    assert "self.study.sampler.before_trial(study, self._cached_frozen_trial)" in init
    trial, trial_id = _compat.new_optuna_trial(study)
    read = optuna.Trial(study, trial_id)
    assert set(vars(trial)) == set(vars(read))
    assert trial._cached_frozen_trial == read._cached_frozen_trial
    assert trial._cached_frozen_trial is not read._cached_frozen_trial
    assert (trial.study, trial.storage, trial._fixed_params) == (study, study._storage, {})
    # Still the trial Optuna samples and records through, and its cache is its own.
    value = trial.suggest_float("x", 0.0, 1.0)
    trial.set_user_attr("k", 1)
    assert study.trials[0].params == {"x": value}
    assert study.trials[0].user_attrs == {"k": 1}


def test_mlflows_sqlite_settings_are_still_three_pragmas_set_per_session(tmp_path: Path) -> None:
    # tracking/_mlflow.py gives a SQLite store's connections MLflow's settings as they
    # connect; its sessions then run without them.
    import sqlalchemy
    from mlflow.store.db import db_types
    from mlflow.store.db import utils as db_utils
    from mlflow.tracking import MlflowClient

    sessions = inspect.getsource(db_utils._get_managed_session_maker)
    assert list(inspect.signature(db_utils._get_managed_session_maker).parameters) == [
        "SessionMaker",
        "db_type",
    ]
    said = [line.strip() for line in sessions.splitlines() if "PRAGMA" in line]
    assert said == [f'session.execute(sql.text("{p}"))' for p in _compat.MLFLOW_SQLITE_PRAGMAS]
    assert "if db_type == SQLITE:" in sessions
    assert db_types.SQLITE == "sqlite"  # what the store's db_type is read against
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/runs.db")
    assert _compat.mlflow_sqlite_settings_per_connection(client)
    store = client._tracking_client.store
    statements: list[str] = []
    sqlalchemy.event.listen(
        store.engine, "before_cursor_execute", lambda *a: statements.append(a[2])
    )
    with store.ManagedSessionMaker() as session:
        foreign_keys = session.execute(sqlalchemy.text("PRAGMA foreign_keys")).scalar()
        timeout = session.execute(sqlalchemy.text("PRAGMA busy_timeout")).scalar()
        like = session.execute(sqlalchemy.text("SELECT 'a' LIKE 'A'")).scalar()
    assert (foreign_keys, timeout, like) == (1, 20000, 0)
    assert not [s for s in statements if "PRAGMA" in s and "=" in s]  # none per session
    experiment = client.create_experiment("e")  # the store still writes through them
    assert client.get_experiment(experiment).name == "e"
    assert not _compat.mlflow_sqlite_settings_per_connection(
        MlflowClient(tracking_uri="http://127.0.0.1:9")  # a server: not set here
    )


def test_optunas_tell_is_still_its_private_tell_and_a_read_back() -> None:
    # lifecycle/_tell.py tells through _tell_with_warning, as Study.tell does, and skips
    # the read back of the told trial (and its deep copy) that Study.tell returns.
    from optuna.study._tell import _tell_with_warning

    tell = _source_of("optuna.study.study").split("    def tell(", 1)[1].split("\n    def ")[0]
    assert "_tell_with_warning(" in tell
    assert "return copy.deepcopy(_get_frozen_trial(self, trial))" in tell
    assert list(inspect.signature(_tell_with_warning).parameters)[:4] == [
        "study",
        "trial",
        "value_or_values",
        "state",
    ]
    study = optuna.create_study()
    done, pruned = study.ask(), study.ask()
    done.report(0.5, step=1)
    _compat.tell_optuna(study, done, [0.7])
    pruned.report(0.25, step=1)
    _compat.tell_optuna(study, pruned, state=optuna.trial.TrialState.PRUNED)
    told = study.get_trials(deepcopy=False)
    assert [(t.state.name, t.values) for t in told] == [("COMPLETE", [0.7]), ("PRUNED", [0.25])]


class _Seen(optuna.samplers.RandomSampler):
    """A random sampler that keeps what its ``after_trial`` was handed."""

    def __init__(self) -> None:
        super().__init__(seed=0)
        self.told: list[tuple[optuna.trial.FrozenTrial, str, list[float] | None]] = []

    def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
        self.told.append((trial, state.name, values))


def test_optunas_tell_still_reads_the_trial_then_hands_it_to_the_sampler_and_writes() -> None:
    # _compat.tell_optuna(held=True) tells a completed or failed trial as
    # _tell_with_warning does, from the trial's own copy instead of a read of it.
    tell = inspect.getsource(optuna.study._tell._tell_with_warning)
    for step in (
        "study._thread_local.cached_all_trials = None",
        "frozen_trial = _get_frozen_trial(study, trial)",
        "values_conversion_failure_message = _check_values_are_feasible(study, values)",
        "state = TrialState.FAIL",
        "optuna_warn(values_conversion_failure_message)",
        "values = [float(value) for value in values]",
        "study = pruners._filter_study(study, frozen_trial)",
        "study.sampler.after_trial(study, frozen_trial, state, values)",
        "study._storage.set_trial_state_values(frozen_trial._trial_id, state, values)",
    ):
        assert step in tell, step


def test_a_held_tell_records_what_a_read_tell_records_without_reading_the_trial(
    tmp_path: Path,
) -> None:
    import sqlalchemy

    def told(held: bool, name: str) -> tuple[list[Any], list[Any], int]:
        sampler = _Seen()
        study = optuna.create_study(
            storage=f"sqlite:///{tmp_path}/{name}.db", sampler=sampler, study_name=name
        )
        trials = [_compat.new_optuna_trial(study)[0] for _ in range(4)]
        for index, trial in enumerate(trials):
            trial.suggest_float("x", 0.0, 1.0)
            trial.set_user_attr("i", index)
        statements: list[str] = []
        engine = study._storage._backend.engine  # type: ignore[attr-defined]
        sqlalchemy.event.listen(engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
        _compat.tell_optuna(study, trials[0], [0.5], held=held)
        with pytest.warns(UserWarning, match="is not acceptable"):
            _compat.tell_optuna(study, trials[1], [float("nan")], held=held)
        _compat.tell_optuna(study, trials[2], state=optuna.trial.TrialState.FAIL, held=held)
        trials[3].report(0.25, step=2)
        _compat.tell_optuna(study, trials[3], state=optuna.trial.TrialState.PRUNED, held=held)
        reads = sum(s.lstrip().upper().startswith("SELECT") for s in statements)
        recorded = [
            (t.state.name, t.values, t.params, t.user_attrs)
            for t in study.get_trials(deepcopy=False)
        ]
        handed = [(t.number, t.params, t.user_attrs, state, v) for t, state, v in sampler.told]
        return recorded, handed, reads

    read, held = told(False, "read"), told(True, "held")
    assert read[0] == held[0]
    assert [s for s, *_ in read[0]] == ["COMPLETE", "FAIL", "FAIL", "PRUNED"]
    assert read[0][3][1] == [0.25]  # a pruned trial's value is its last step's, read
    assert read[1] == held[1]  # the sampler is handed the same trials, states and values
    # Only the pruned trial is read (six statements); the others' reads are left out.
    assert held[2] <= read[2] - 3 * 6


def test_tune_still_gives_workers_that_do_not_stop_ten_seconds_at_its_end() -> None:
    # runner/_tune.py kills them after Tune's own 5 s wait at the end of its run.
    from ray.tune.execution import tune_controller

    controller = tune_controller.TuneController
    assert "self._actor_force_cleanup_timeout: int = 10" in inspect.getsource(controller.__init__)
    end = inspect.getsource(controller._cleanup_trials)
    assert f"time.monotonic() - start < {_compat.TUNE_END_WAIT_S}" in end
    assert "self._cleanup_stopping_actors(force_all=True)" in end
    force = inspect.getsource(controller._cleanup_stopping_actors)
    assert "< self._actor_force_cleanup_timeout" in force
    original = controller.__init__
    with _compat.tune_kills_stuck_workers_at_its_end_wait():
        assert controller.__init__ is not original
    assert controller.__init__ is original


def test_rays_driver_still_prints_the_raylets_messages_through_the_function_we_wrap(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # runner/_tune.py leaves out the raylet's message on a dead worker (its trial's line
    # says how it ended), and prints the others.
    from ray._private import worker

    listener = inspect.getsource(worker.listen_error_messages)
    assert "print_to_stdstream(" in listener
    assert '"pid": "raylet"' in listener
    death = f"{_compat.RAY_WORKER_DEATH} by an unexpected system error. To troubleshoot..."
    other = "Warning: The following resource request cannot be scheduled right now"
    original = worker.print_to_stdstream
    with _compat.ray_worker_deaths_unsaid():
        for line in (death, other):
            worker.print_to_stdstream(
                {"lines": [line], "pid": "raylet", "is_err": False}, ignore_prefix=False
            )
    assert worker.print_to_stdstream is original
    printed = capsys.readouterr().out
    assert _compat.RAY_WORKER_DEATH not in printed
    assert other in printed
    # Two searches of one process that overlap, ended in the order they began.
    first, second = _compat.ray_worker_deaths_unsaid(), _compat.ray_worker_deaths_unsaid()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    worker.print_to_stdstream({"lines": [death], "pid": "raylet", "is_err": False}, False)
    assert capsys.readouterr().out == ""  # still left out: the second search runs
    second.__exit__(None, None, None)
    assert worker.print_to_stdstream is original


def test_optunas_study_stop_still_works_where_a_worker_lets_it() -> None:
    study = optuna.create_study()
    asked: list[str] = []
    with study_stops(study, asked.append):
        study.stop()  # outside optimize, Optuna refuses it: we stand in for its loop
    assert asked == ["study.stop()"]
    with pytest.raises(RuntimeError, match="inside an objective function"):
        study.stop()  # and its check is back as it was
