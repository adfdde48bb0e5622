"""The hpsearch command end to end as a user runs it: a fresh project, all real.

The first search of a fresh project runs as a user starts it, in a process of its
own with a Ray of its own; the commands after it run in the test's process, on
its Ray, where the process is not what is tested.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import psutil
import pytest
import yaml

import hpsearch
from hpsearch import attrs
from hpsearch.config import DEFAULT_ARTIFACT_LOCATION, DEFAULT_TRACKING_URI
from hpsearch.tracking import MlflowTracker, RunStatus
from tests.conftest import (
    ConfigWriter,
    RayAddressFile,
    cli,
    hpsearch_cli,
    mlflow_client,
    serve_on_a_free_port,
)

pytestmark = pytest.mark.process


def _study(name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage="sqlite:///mlruns/optuna.db")


def _runs(project: Path, experiment: str) -> tuple[list[Any], list[Any]]:
    client = mlflow_client(project)
    found = client.get_experiment_by_name(experiment)
    assert found is not None
    runs = client.search_runs([found.experiment_id], max_results=1000)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    return parents, children


@pytest.mark.usefixtures("ray_one_gpu")
def test_debug_config_runs_resumes_and_agrees(repo_configs: Path, project: Path) -> None:
    first = hpsearch_cli("run", "configs/debug.yaml", "--n-trials", "2")
    assert first.returncode == 0, first.stderr

    study = _study("digits-debug")
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 2
    # Its runs table, sorted by the objective, best first: the trials listed flat.
    found = mlflow_client(project).get_experiment_by_name("digits-debug")
    assert found is not None
    assert (
        f"runs table: http://127.0.0.1:5000/#/experiments/{found.experiment_id}/runs"
        "?orderByKey=metrics.%60val_accuracy%60&orderByAsc=false "
        "(serve it with: hpsearch ui configs/debug.yaml)"
    ) in first.stdout
    parents, children = _runs(project, "digits-debug")
    assert len(parents) == 1
    assert len(children) == 2
    client = mlflow_client(project)
    by_id = {r.info.run_id: r for r in children}
    for trial in study.trials:
        run = by_id[trial.user_attrs[attrs.MLFLOW_RUN]]
        assert run.info.status == "FINISHED"
        assert run.data.tags["mlflow.parentRunId"] == parents[0].info.run_id
        assert run.data.tags["optuna.trial_number"] == str(trial.number)
        assert {k: run.data.params[k] for k in trial.params} == {
            k: str(v) for k, v in trial.params.items()
        }
        assert run.data.params["epochs"] == "3"
        accuracy = client.get_metric_history(run.info.run_id, "val_accuracy")
        assert [m.step for m in accuracy] == [0, 1, 2]
        assert accuracy[-1].value == trial.value
        assert len(client.get_metric_history(run.info.run_id, "samples_per_sec")) == 3

    best = json.loads(cli("best", "configs/debug.yaml", "--json").stdout)
    assert best["study"] == "digits-debug"
    assert best["trial_number"] == study.best_trial.number
    assert best["params"] == study.best_trial.params
    assert best["mlflow_run_id"] == study.best_trial.user_attrs[attrs.MLFLOW_RUN]
    assert (
        best["metrics"]["val_accuracy"] == by_id[best["mlflow_run_id"]].data.metrics["val_accuracy"]
    )
    results = hpsearch.load("configs/debug.yaml")
    assert results.best_trial.to_dict(results.metric_names) == best
    assert best["values"] == {"val_accuracy": study.best_value}

    before = {t.number: (t.params, t.values, t.datetime_complete) for t in study.trials}
    second = cli("run", "configs/debug.yaml", "--n-trials", "3")
    assert second.returncode == 0, second.stderr
    study = _study("digits-debug")
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 3
    assert {
        n: (t.params, t.values, t.datetime_complete) for n, t in enumerate(study.trials) if n < 2
    } == before
    parents, children = _runs(project, "digits-debug")
    assert (len(parents), len(children)) == (2, 3)

    third = cli("run", "configs/debug.yaml", "--n-trials", "3")
    assert third.returncode == 0
    assert "nothing to do" in third.stdout
    assert len(_study("digits-debug").trials) == 3


@pytest.mark.usefixtures("ray_one_gpu", "seeded_store")
def test_phase1_searches_accuracy_against_speed(repo_configs: Path, project: Path) -> None:
    # The main job, cut to 10 trials of 6 epochs: model and throughput knobs, two
    # objectives, the dominated pruning rule (from 8 finished trials, past 5 epochs
    # of warm-up), the Pareto front.
    config = yaml.safe_load((repo_configs / "phase1.yaml").read_text())
    config["space"]["epochs"] = 6
    (repo_configs / "phase1.yaml").write_text(yaml.safe_dump(config))
    run = cli("run", "configs/phase1.yaml", "--n-trials", "10")
    assert run.returncode == 0, run.stderr
    best = cli("best", "configs/phase1.yaml", "--pareto", "--json")
    assert best.returncode == 0, best.stderr
    front = json.loads(best.stdout)
    assert front
    points = [(t["values"]["val_accuracy"], t["values"]["samples_per_sec"]) for t in front]
    for a in points:  # nothing on the front beats another front point on both
        assert not any(b[0] >= a[0] and b[1] >= a[1] and b != a for b in points)
    knobs = ("batch_size", "grad_accum_steps", "num_workers", "precision")
    assert all(set(knobs) <= set(t["params"]) for t in front)

    study = _study("digits-phase1")
    assert len(study.trials) == 10
    assert {t.state.name for t in study.trials} <= {"COMPLETE", "PRUNED"}
    for trial in study.trials:
        effective = trial.user_attrs[attrs.KNOBS]["effective"]
        assert effective["batch_size"] == trial.params["batch_size"]
    parents, _ = _runs(project, "digits-phase1")
    client = mlflow_client(project)
    files = {f.path for f in client.list_artifacts(parents[0].info.run_id, "analysis")}
    assert "analysis/pareto_front.html" in files


@dataclass(frozen=True)
class RayHead:
    """A running ``ray start --head``: its address, its node's id, the environment to join it."""

    address: str
    node_id: str
    env: dict[str, str]


def _node_id(head: subprocess.Popen[str]) -> str:
    """The id of the node ``ray start`` started: its raylet's ``--node_id`` argument."""
    for process in psutil.Process(head.pid).children(recursive=True):
        for argument in process.cmdline():
            if argument.startswith("--node_id="):
                return argument.removeprefix("--node_id=")
    raise AssertionError("no raylet under `ray start`")


@pytest.fixture
def ray_head(project: Path) -> Iterator[RayHead]:
    """A Ray cluster started with ``ray start --head`` on 127.0.0.1, with token authentication."""
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": os.urandom(16).hex()}
    ray = str(Path(sys.executable).parent / "ray")
    address_file = RayAddressFile()
    # --block keeps `ray start` as the parent of this cluster's processes: ending its
    # process group stops this cluster only (`ray stop` would stop every Ray here).
    head = subprocess.Popen(
        [
            ray,
            "start",
            "--head",
            "--port=0",  # Ray's pick: a port probed free here could be taken before it binds
            "--node-ip-address=127.0.0.1",
            "--num-cpus=2",
            "--include-dashboard=false",
            "--disable-usage-stats",
            "--block",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        printed = []
        address = None
        assert head.stdout is not None
        for line in head.stdout:  # its port, in the command it says adds a node
            printed.append(line)
            if (said := re.search(r"ray start --address='[^']*:(\d+)'", line)) is not None:
                address = f"127.0.0.1:{said[1]}"
                break
            if "will now block forever" in line:  # said after the address: none came
                break
        assert head.poll() is None, "".join(printed)
        assert address is not None, "".join(printed)
        yield RayHead(address, _node_id(head), env)
    finally:
        # The whole group at once: `ray start` waits half a minute on SIGTERM.
        os.killpg(head.pid, signal.SIGKILL)
        head.wait(timeout=60)
        address_file.restore()


def test_joins_a_running_cluster_by_address(ray_head: RayHead, write_config: ConfigWriter) -> None:
    path = write_config()
    run = hpsearch_cli("run", str(path), "--address", ray_head.address, env=ray_head.env)
    assert run.returncode == 0, run.stderr
    trials = _study("test-study").trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 4
    assert {t.user_attrs[attrs.ASSIGNED]["node_id"] for t in trials} == {ray_head.node_id}

    # Without an address, a search starts a Ray of its own, even with one running here.
    own = write_config({"study": {"name": "own-ray"}, "execution": {"num_cpus": 1}}, "own.yaml")
    local = hpsearch_cli("run", str(own), env=ray_head.env)
    assert local.returncode == 0, local.stderr
    nodes = {t.user_attrs[attrs.ASSIGNED]["node_id"] for t in _study("own-ray").trials}
    assert len(nodes) == 1
    assert ray_head.node_id not in nodes


@pytest.mark.usefixtures("no_ray")  # with a Ray in the process, a search would use it
def test_wrong_address_is_a_one_line_error(write_config: ConfigWriter) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    run = cli(
        "run",
        str(write_config()),
        "--address",
        f"127.0.0.1:{port}",
        env={"RAY_AUTH_MODE": None},
    )
    assert run.returncode == 2
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("error: execution.address: cannot connect")
    assert "RAY_AUTH_MODE=token" in last


def test_ui_serves_the_store_to_loopback_and_to_the_machines_name(project: Path) -> None:
    # The store a search writes (the UI is the subject here, not the search).
    tracker = MlflowTracker(DEFAULT_TRACKING_URI, "test-study", DEFAULT_ARTIFACT_LOCATION)
    tracker.end_run(tracker.start_run("parent"), RunStatus.FINISHED)
    log = project / "ui.log"

    def start(port: int) -> subprocess.Popen[bytes]:
        with log.open("a") as errors:
            return subprocess.Popen(
                [sys.executable, "-m", "hpsearch", "ui", "--host", "0.0.0.0", "--port", str(port)],
                stdout=subprocess.DEVNULL,
                stderr=errors,
            )

    # On every interface, the UI answers to this machine's name (a LAN, a tunnel's
    # far end) as well as to loopback: MLflow alone answers 403 "Invalid Host header".
    server, port = serve_on_a_free_port(start, "/health", 120)
    base = f"http://127.0.0.1:{port}"
    try:
        for name in ("127.0.0.1", socket.gethostname()):
            request = urllib.request.Request(
                f"{base}/api/2.0/mlflow/experiments/get-by-name?experiment_name=test-study",
                headers={"Host": f"{name}:{port}"},
            )
            with urllib.request.urlopen(request, timeout=10) as response:
                experiment = json.load(response)["experiment"]
            assert experiment["name"] == "test-study", name
        # Opens on its runs table in MLflow 3, not on the GenAI overview.
        kind = {t["key"]: t["value"] for t in experiment["tags"]}["mlflow.experimentKind"]
        assert kind == "custom_model_development"
        # Without MLflow's job runner and its Huey workers (GenAI jobs).
        commands = [" ".join(c.cmdline()) for c in psutil.Process(server.pid).children(True)]
        assert commands
        assert not [c for c in commands if "huey" in c or "_job_runner" in c], commands
    finally:
        server.terminate()
        server.wait(timeout=60)
    assert "Warning" not in log.read_text()  # the UI's dependency warnings are silenced


def test_ui_on_a_port_another_program_holds_says_so_and_exits_2(project: Path) -> None:
    import socket

    (project / "mlruns").mkdir()
    (project / "mlruns" / "mlflow.db").touch()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = cli("ui", "--port", str(port))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"error: port {port} on 127.0.0.1 is taken (Address already in use): another MLflow "
        f"UI, or another program; pass --port {port + 1}, or stop what holds it"
    )
    assert "MLflow UI on" not in result.stdout  # not said to run


def test_ui_on_a_store_that_is_not_there_names_the_path(project: Path) -> None:
    result = cli("ui", "--port", "5999")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"error: no MLflow store at {project / 'mlruns' / 'mlflow.db'} (tracking.uri "
        "sqlite:///mlruns/mlflow.db); run a search first, or start hpsearch ui from the "
        "folder the search ran in"
    )
    assert not (project / "mlruns" / "mlflow.db").exists()  # no empty store made


@pytest.mark.usefixtures("ray_one_gpu", "seeded_store")
def test_a_search_in_which_no_trial_completed_exits_1_naming_the_error(
    write_config: ConfigWriter,
) -> None:
    path = write_config({"train": "tests.train_functions:forgets_metric", "study": {"n_trials": 2}})
    result = cli("run", str(path))
    assert result.returncode == 1, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "error: no trial of study 'test-study' completed (2 failed, 0 pruned); most common "
        "(2 trial(s)): train finished without reporting the objective metric 'score' "
        "(reported: other); report it with ctx.report(step, score=...)"
    ), last
    assert "wait for the first trial" not in result.stdout
