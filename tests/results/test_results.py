"""hpsearch.load: best trial, Pareto front, data frame, and errors for missing studies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
import sqlalchemy.exc

from hpsearch import attrs, load
from hpsearch.config import load_config
from hpsearch.errors import ResultsError
from hpsearch.study import StudyHandle, open_study
from tests.conftest import ConfigWriter

TWO_OBJECTIVES = {
    "objective": None,
    "objectives": [
        {"metric": "score", "direction": "maximize"},
        {"metric": "speed", "direction": "maximize"},
    ],
}


def _finish(handle: StudyHandle, x: float, values: list[float], metrics: dict[str, float]) -> None:
    # x as the config's space declares it (float in [0, 1]), fixed to this value.
    handle.study.enqueue_trial({"x": x})
    trial = handle.ask({"x": optuna.distributions.FloatDistribution(0.0, 1.0)})
    trial.set_user_attr(attrs.METRICS, metrics)
    trial.set_user_attr(attrs.MLFLOW_RUN, f"run-{trial.number}")
    handle.study.tell(trial, values)


def test_best_trial_and_dataframe(write_config: ConfigWriter) -> None:
    path = write_config()
    handle = open_study(load_config(path))
    study = handle.study
    for x in (0.2, 0.9, 0.5):
        _finish(handle, x, [x], {"score": x, "speed": 10 * x})
    failed = handle.ask({})
    study.tell(failed, state=optuna.trial.TrialState.FAIL)

    results = load(path)
    best = results.best_trial
    assert best.number == 1
    assert best.values == [0.9]
    assert best.params == {"x": 0.9}
    assert best.metrics == {"score": 0.9, "speed": 9.0}
    assert best.mlflow_run_id == "run-1"
    assert best.to_dict() == {
        "study": "test-study",
        "trial_number": 1,
        "params": best.params,
        "metrics": {"score": 0.9, "speed": 9.0},
        "mlflow_run_id": "run-1",
        "seed": None,
        "checkpoint_dir": None,
    }
    assert results.best_trials == [best]
    # Optuna's names for them, as an Optuna user reads a study.
    assert (best.value, results.best_value, results.best_params) == (0.9, 0.9, {"x": 0.9})
    assert results.trials[3].value is None  # failed
    frame = results.trials_dataframe()
    assert list(frame["mlflow_run_id"][:3]) == ["run-0", "run-1", "run-2"]
    assert list(frame["metrics_speed"][:3]) == [2.0, 9.0, 5.0]
    assert [t.state for t in results.trials] == ["COMPLETE", "COMPLETE", "COMPLETE", "FAIL"]
    assert load("test-study").best_trial == best  # by name, default storage
    assert load(study).best_trial == best


def test_what_a_trials_own_code_set_on_it_is_shown_apart_from_hpsearchs(
    write_config: ConfigWriter,
) -> None:
    path = write_config()
    handle = open_study(load_config(path))
    _finish(handle, 0.2, [0.2], {"score": 0.2})
    best = handle.ask({"x": optuna.distributions.FloatDistribution(0.0, 1.0)})
    best.set_user_attr("note", "an objective's")  # in its worker, through the study
    best.set_user_attr(attrs.DURATION, 1.5)  # and hpsearch's own
    handle.study.tell(best, [0.9])

    results = load(path)
    assert results.best_trial.user_attrs == {"note": "an objective's"}  # not hpsearch's
    assert results.best_trial.to_dict()["user_attrs"] == {"note": "an objective's"}
    assert "user_attrs" not in results.trials[0].to_dict()  # none set: as before
    assert [t.record(["score"])["user_attrs"] for t in results.trials] == [
        {},
        {"note": "an objective's"},
    ]
    frame = results.trials_dataframe()
    note = frame["user_attrs_note"]  # Optuna's column name; missing where none was set
    assert note.isna().tolist() == [True, False]
    assert note[1] == "an objective's"
    assert not [c for c in frame.columns if c.startswith("user_attrs_hpsearch")]


def test_pareto_front(write_config: ConfigWriter) -> None:
    path = write_config(TWO_OBJECTIVES)
    handle = open_study(load_config(path))
    _finish(handle, 0.1, [0.9, 1.0], {})
    _finish(handle, 0.2, [0.5, 5.0], {})
    _finish(handle, 0.3, [0.4, 4.0], {})  # dominated by the second
    results = load(path)
    assert results.is_multi_objective
    assert [t.number for t in results.best_trials] == [0, 1]
    with pytest.raises(ResultsError, match="no single best trial"):
        _ = results.best_trial
    with pytest.raises(ResultsError, match="no single best trial"):
        _ = results.best_value
    with pytest.raises(ResultsError, match="trial 0 has 2 objective values; read values"):
        _ = results.trials[0].value


@pytest.mark.parametrize("objectives", [{}, TWO_OBJECTIVES])
def test_a_constrained_study_whose_trials_each_break_a_constraint_has_no_best(
    write_config: ConfigWriter, objectives: dict[str, Any]
) -> None:
    path = write_config(objectives)
    handle = open_study(load_config(path))
    values = [0.5] * len(handle.study.directions)
    for x in (0.2, 0.9):
        handle.study.enqueue_trial({"x": x})
        trial = handle.ask({"x": optuna.distributions.FloatDistribution(0.0, 1.0)})
        trial.set_constraint("x_below_0_1", x - 0.1)  # Optuna's: held at 0 or less
        handle.study.tell(trial, values)
    results = load(path)
    assert [t.constraints for t in results.trials] == [
        {"x_below_0_1": pytest.approx(0.1)},  # what trials CONFIG N and --json show
        {"x_below_0_1": pytest.approx(0.8)},
    ]
    assert results.trials[0].to_dict()["constraints"] == results.trials[0].constraints
    with pytest.raises(ResultsError) as none:
        _ = results.best_trials
    assert str(none.value) == (
        "study 'test-study' has 2 completed trial(s), and each breaks a constraint (a "
        "constraint holds at 0 or less: its sampler's constraints_func, or "
        "trial.set_constraint); run more trials, or relax the constraints"
    )


def test_no_completed_trial_yet(write_config: ConfigWriter) -> None:
    path = write_config()
    open_study(load_config(path))
    with pytest.raises(ResultsError, match="no completed trial yet"):
        _ = load(path).best_trial
    # Trials that ended without completing: how they ended, and where to see each.
    handle = open_study(load_config(path))
    failed = handle.ask({"x": optuna.distributions.FloatDistribution(0.0, 1.0)})
    failed.set_user_attr(attrs.ERROR, "Traceback (most recent call last):\nValueError: bad x")
    handle.study.tell(failed, state=optuna.trial.TrialState.FAIL)
    with pytest.raises(ResultsError) as none:
        _ = load(path).best_trial
    assert str(none.value) == (
        "no trial of study 'test-study' completed (1 failed, 0 pruned); most common "
        "(1 trial(s)): ValueError: bad x; see each with hpsearch trials CONFIG --state fail "
        "(or trials_dataframe())"
    )


def test_missing_storage_and_missing_study(write_config: ConfigWriter, project: Path) -> None:
    path = write_config()
    with pytest.raises(ResultsError, match="no study storage at"):
        load(path)
    assert not (project / "mlruns" / "optuna.db").exists()  # reading creates nothing
    open_study(load_config(path))
    with pytest.raises(ResultsError, match=r"no study named 'other'.*studies there: test-study"):
        load("other")


def test_a_store_being_created_by_a_driver_is_read_and_one_that_cannot_be_opened_is_said(
    write_config: ConfigWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_config()
    handle = open_study(load_config(path))
    _finish(handle, 0.5, [1.0], {"score": 1.0})
    # A driver creates the new store's tables as the results are read: the reader's
    # CREATE collides (PostgreSQL's words below); the tables are there, and a second
    # try reads them.
    real = optuna.load_study
    calls: list[str] = []

    def racing(**kwargs: Any) -> optuna.Study:
        calls.append(kwargs["study_name"])
        if len(calls) == 1:
            raise sqlalchemy.exc.IntegrityError(
                "CREATE TYPE trialstate",
                {},
                Exception('duplicate key value violates unique constraint "pg_type_typname"'),
            )
        return real(**kwargs)

    monkeypatch.setattr(optuna, "load_study", racing)
    assert load(path).best_trial.values == [1.0]
    assert calls == ["test-study", "test-study"]
    monkeypatch.setattr(optuna, "load_study", real)

    # A server out of reach: one line naming the file, the key and the fix.
    unreachable = write_config(
        {"study": {"storage": "postgresql+psycopg://hpsearch@127.0.0.1:1/nowhere"}},
        name="remote.yaml",
    )
    with pytest.raises(ResultsError) as refused:
        load(unreachable)
    said = str(refused.value)
    assert said.startswith(f"{unreachable}: study.storage: cannot open 'postgresql+psycopg://")
    assert "OperationalError" in said
    assert said.endswith("check the URL and that the database is reachable")
    assert "\n" not in said


def test_a_study_with_no_completed_trial_names_its_most_common_error(
    write_config: ConfigWriter,
) -> None:
    path = write_config()
    handle = open_study(load_config(path))
    study = handle.study
    errors = [
        "Traceback (most recent call last):\n  File ...\nValueError: bad width",
        "Traceback (most recent call last):\n  File ...\nValueError: bad width",
        "trial worker died: exit code 3\nRay: The actor died\nlast 1 line(s) of its stderr:\nbye",
    ]
    for error in errors:
        trial = handle.ask({})
        trial.set_user_attr(attrs.ERROR, error)
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
    pruned = handle.ask({})
    pruned.set_user_attr(attrs.PRUNE_REASON, "oom: CUDA out of memory")
    study.tell(pruned, state=optuna.trial.TrialState.PRUNED)

    results = load(path)
    assert results.why_none_completed() == (
        "no trial of study 'test-study' completed (3 failed, 1 pruned); "
        "most common (2 trial(s)): ValueError: bad width"
    )
    _finish(handle, 0.5, [0.5], {"score": 0.5})
    assert load(path).why_none_completed() is None
