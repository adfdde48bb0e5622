"""MLflow writing through MlflowTracker against a real SQLite store."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpsearch.errors import ConfigError, HpsearchError
from hpsearch.tracking import (
    PARENT_TAG,
    MlflowTracker,
    RunStatus,
    check_store_uri,
    mlflow_name,
    resolve_tracking_uri,
    runs_table_url,
)


def test_relative_sqlite_uri_is_made_absolute(project: Path) -> None:
    uri = resolve_tracking_uri("sqlite:///mlruns/mlflow.db")
    assert uri == f"sqlite:///{project / 'mlruns' / 'mlflow.db'}"
    assert (project / "mlruns").is_dir()
    assert resolve_tracking_uri("http://127.0.0.1:5000") == "http://127.0.0.1:5000"


def test_a_folder_store_mlflow_refuses_is_one_line_that_names_a_sqlite_file(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # MLflow's classic ./mlruns: MLflow 3 refuses a folder store unless told.
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    for uri, named in [
        ("./mlruns", "sqlite:///mlruns/mlflow.db"),
        (f"file://{project}/runs", f"sqlite:///{project}/runs/mlflow.db"),
    ]:
        with pytest.raises(HpsearchError) as raised:
            MlflowTracker(uri, "exp", None)
        said = str(raised.value)
        assert said.startswith(f"tracking.uri: MLflow store '{uri}' cannot be used (")
        assert said.endswith(
            f"a folder is MLflow's file store: name a SQLite file instead, such as {named} "
            "(`mlflow migrate-filestore` moves the folder's runs there), or set "
            "MLFLOW_ALLOW_FILE_STORE=true"
        )
        assert "\n" not in said


def test_a_folder_store_is_refused_before_anything_runs_unless_mlflow_is_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What hpsearch validate and run check first, where MLflow would refuse it later.
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    with pytest.raises(ConfigError) as raised:
        check_store_uri("./mlruns", "search.yaml")
    assert str(raised.value) == (
        "search.yaml: tracking.uri: './mlruns' is a folder, MLflow's file store, which "
        "MLflow 3 no longer opens; name a SQLite file instead, such as "
        "sqlite:///mlruns/mlflow.db (`mlflow migrate-filestore` moves the folder's runs "
        "there), or set MLFLOW_ALLOW_FILE_STORE=true"
    )
    with pytest.raises(ConfigError, match=r"such as sqlite:////data/runs/mlflow\.db"):
        check_store_uri("file:///data/runs", "search.yaml")
    for fine in ("sqlite:///mlruns/mlflow.db", "http://127.0.0.1:5000", "postgresql://h/db"):
        check_store_uri(fine, "search.yaml")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    check_store_uri("./mlruns", "search.yaml")


def test_parent_and_child_runs(mlflow_tracker: MlflowTracker, project: Path) -> None:
    parent = mlflow_tracker.start_run("study-run", params={"study.name": "test-study"})
    child = mlflow_tracker.start_run(
        "trial-0",
        params={"x": 0.5, "tag": "a"},
        tags={"optuna.trial_number": "0"},
        parent_run_id=parent,
    )
    mlflow_tracker.log_metrics(child, {"score": 1.0, "speed": 10.0}, step=0)
    mlflow_tracker.log_metrics(child, {"score": 2.0}, step=1)
    mlflow_tracker.log_text(child, "Traceback ...", "error.txt")
    mlflow_tracker.set_tags(child, {"long": "x" * 9000})
    mlflow_tracker.end_run(child, RunStatus.FAILED)

    client = mlflow_tracker.client
    run = client.get_run(child)
    assert run.info.status == "FAILED"
    assert run.data.tags[PARENT_TAG] == parent
    assert run.data.params == {"x": "0.5", "tag": "a"}
    assert [(m.step, m.value) for m in client.get_metric_history(child, "score")] == [
        (0, 1.0),
        (1, 2.0),
    ]
    assert len(run.data.tags["long"]) == 5000
    artifact_dir = Path(client.download_artifacts(child, "error.txt"))
    assert artifact_dir.read_text() == "Traceback ..."
    assert str(project / "mlruns" / "artifacts" / "test-study") in run.info.artifact_uri


def test_end_if_running_only_touches_running_runs(mlflow_tracker: MlflowTracker) -> None:
    running = mlflow_tracker.start_run("a")
    done = mlflow_tracker.start_run("b")
    mlflow_tracker.end_run(done, RunStatus.FINISHED)
    mlflow_tracker.end_if_running(running, RunStatus.KILLED)
    mlflow_tracker.end_if_running(done, RunStatus.KILLED)
    mlflow_tracker.end_if_running("no-such-run", RunStatus.KILLED)
    assert mlflow_tracker.client.get_run(running).info.status == "KILLED"
    assert mlflow_tracker.client.get_run(done).info.status == "FINISHED"


def test_existing_experiment_is_reused(mlflow_tracker: MlflowTracker) -> None:
    again = MlflowTracker(mlflow_tracker.uri, "test-study", "mlruns/artifacts")
    assert again.experiment_id == mlflow_tracker.experiment_id


def test_the_runs_table_sorted_by_a_metric() -> None:
    assert runs_table_url("http://h:5000/", "3") == "http://h:5000/#/experiments/3/runs"
    assert runs_table_url("http://h:5000", "3", "val loss", ascending=True) == (
        "http://h:5000/#/experiments/3/runs?orderByKey=metrics.%60val%20loss%60&orderByAsc=true"
    )


def test_names_mlflow_refuses_are_recorded_as_names_it_takes(
    mlflow_tracker: MlflowTracker,
) -> None:
    run = mlflow_tracker.start_run("trial-0", params={"lr (log)": 0.1, "层数": 2})
    # timm's and torchvision's top-1 accuracy, Lightning's nested "val:acc", a path.
    reported = {"acc@1": 0.9, "val:acc": 0.8, "损失": 0.1, "/x//y/": 1.0, "../up": 2.0}
    mlflow_tracker.log_metrics(run, reported, step=0)
    mlflow_tracker.flush()
    data = mlflow_tracker.client.get_run(run).data
    assert data.params == {"lr _log_": "0.1", "层数": "2"}
    assert data.metrics == {"acc_1": 0.9, "val:acc": 0.8, "损失": 0.1, "x/y": 1.0, "_/up": 2.0}
    assert [mlflow_name(n) for n in (".", "a/./b", "")] == ["_", "a/_/b", "_"]
    assert "orderByKey=metrics.%60acc_1%60" in runs_table_url("http://h:5000", "3", "acc@1")


def test_a_runs_records_are_written_together_within_a_second(seeded_store: Path) -> None:
    from hpsearch.tracking import FLUSH_S, RunStatus

    now = [0.0]
    tracker = MlflowTracker(
        "sqlite:///mlruns/mlflow.db", "test-study", "mlruns/artifacts", clock=lambda: now[0]
    )
    run_id = tracker.start_run("t", params={"lr": 0.1})
    tracker.set_tags(run_id, {"hpsearch.gpu": "0"})
    tracker.log_metrics(run_id, {"loss": 1.0}, 0)
    waiting = tracker.client.get_run(run_id).data
    assert (waiting.params, waiting.metrics) == ({}, {})  # nothing written yet

    now[0] += FLUSH_S  # the oldest has waited a second: the next record writes them all
    tracker.log_metrics(run_id, {"loss": 0.5}, 1)
    written = tracker.client.get_run(run_id).data
    assert written.params == {"lr": "0.1"}
    assert written.tags["hpsearch.gpu"] == "0"
    history = tracker.client.get_metric_history(run_id, "loss")
    assert [(m.step, m.value) for m in history] == [(0, 1.0), (1, 0.5)]

    tracker.log_metrics(run_id, {"loss": 0.25}, 2)
    tracker.flush(older_than_s=FLUSH_S)  # an upkeep tick: too recent, it waits
    assert len(tracker.client.get_metric_history(run_id, "loss")) == 2
    tracker.set_tags(run_id, {"hpsearch.outcome": "COMPLETE"})
    tracker.end_run(run_id, RunStatus.FINISHED)  # a run's end writes what waits, first
    ended = tracker.client.get_run(run_id)
    assert ended.info.status == "FINISHED"
    assert ended.data.tags["hpsearch.outcome"] == "COMPLETE"
    assert ended.data.metrics["loss"] == 0.25
