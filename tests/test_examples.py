"""The examples under ``examples/`` run as a user runs them: the ``hpsearch`` command, all real.

A training script searched by its flags and a trial rerun to the same accuracy;
Ray Tune's own Hyperband example, as Ray installs it;
a conditional space whose trials, interrupted by Ctrl-C, resume from their
checkpoints on the next run. The command runs in the test's process, on its Ray,
except where a signal is what is tested.
"""

from __future__ import annotations

import json
import math
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from mlflow.tracking import MlflowClient
from optuna.trial import FrozenTrial

from hpsearch import attrs
from tests.conftest import REPO_ROOT, cli, mlflow_client, wait_for

pytestmark = pytest.mark.process

STORAGE = "sqlite:///mlruns/optuna.db"


@pytest.fixture
def examples(project: Path) -> Path:
    """The repository's examples, copied into the project (their configs name them from there)."""
    shutil.copytree(REPO_ROOT / "examples", project / "examples")
    return project / "examples"


@pytest.mark.usefixtures("ray_one_gpu", "seeded_store")
def test_a_training_script_is_searched_by_its_flags_and_a_rerun_reproduces_it(
    examples: Path, project: Path
) -> None:
    first = cli("run", "examples/command/config.yaml", "--n-trials", "2")
    assert first.returncode == 0, first.stderr[-3000:]

    study = optuna.load_study(study_name="command-example", storage=STORAGE)
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 2
    assert [t.user_attrs[attrs.SEED] for t in study.trials] == [1, 2]  # study seed + number
    client = mlflow_client(project)
    for trial in study.trials:
        run_id = trial.user_attrs[attrs.MLFLOW_RUN]
        history = client.get_metric_history(run_id, "val_accuracy")
        assert sorted(m.step for m in history) == [0, 1, 2, 3, 4]  # one report per JSON line
        assert client.get_run(run_id).data.params["width"] == str(trial.params["width"])
        assert client.get_metric_history(run_id, "samples_per_sec")  # the meter, from "samples"
        stdout = client.download_artifacts(run_id, "logs/stdout.txt")
        seed = trial.user_attrs[attrs.SEED]
        assert f"training on 1437 digits, seed {seed}" in Path(stdout).read_text()

    # Trial 1 again, outside the study's budget: its seed, so the same accuracy.
    again = cli("rerun", "examples/command/config.yaml", "1")
    assert again.returncode == 0, again.stderr[-3000:]
    assert len(optuna.load_study(study_name="command-example", storage=STORAGE).trials) == 2
    reruns = [
        name
        for name in optuna.get_all_study_names(STORAGE)
        if name.startswith("command-example-rerun-1-")
    ]
    assert len(reruns) == 1
    rerun = optuna.load_study(study_name=reruns[0], storage=STORAGE).trials[0]
    original = study.trials[1]
    assert rerun.user_attrs[attrs.SEED] == original.user_attrs[attrs.SEED] == 2
    assert rerun.value == original.value  # exactly: same flags, same seed, on CPU
    row = next(line for line in again.stdout.splitlines() if line.startswith("│ val_accuracy"))
    cells = [cell.strip() for cell in row.split("│")[1:-1]]
    assert cells == ["val_accuracy", f"{original.value:.6g}", f"{original.value:.6g}"]


@pytest.mark.usefixtures("ray_one_gpu")
def test_an_interrupted_conditional_search_resumes_its_trials_from_their_checkpoints(
    examples: Path, project: Path
) -> None:
    driver = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hpsearch",
            "run",
            "examples/conditional/config.yaml",
            "--n-trials",
            "2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a failed wait kills its Ray too
    )
    latest = project / "mlruns/checkpoints/conditional-example/trial-0/LATEST"

    def checkpointed_twice() -> bool:
        return latest.is_file() and not latest.read_text().startswith("step-0/")

    wait_for(checkpointed_twice, 240, "trial 0's second checkpoint", process=driver)
    driver.send_signal(signal.SIGINT)  # Ctrl-C
    _, stderr = driver.communicate(timeout=120)
    assert driver.returncode == 130, stderr[-2000:]
    interrupted_at = int(latest.read_text().split("/")[0].removeprefix("step-"))
    # Its running trials ended interrupted, each queued again; their runs and the
    # search's ended KILLED.
    stopped = optuna.load_study(study_name="conditional-example", storage=STORAGE).trials
    interrupted = [t for t in stopped if t.state.name == "FAIL"]
    assert 0 in [t.number for t in interrupted]
    assert all(t.user_attrs[attrs.OUTCOME] == "interrupted" for t in interrupted)
    queued = [t.user_attrs[attrs.RETRY_OF] for t in stopped if t.state.name == "WAITING"]
    assert sorted(queued) == [t.number for t in interrupted]
    client = mlflow_client(project)
    runs = client.search_runs([_experiment_id(client)], max_results=100)
    assert {r.info.status for r in runs if "mlflow.parentRunId" not in r.data.tags} == {"KILLED"}
    killed = {t.user_attrs[attrs.MLFLOW_RUN] for t in interrupted}
    assert {r.info.status for r in runs if r.info.run_id in killed} == {"KILLED"}

    second = cli("run", "examples/conditional/config.yaml", "--n-trials", "2")
    assert second.returncode == 0, second.stderr[-3000:]

    study = optuna.load_study(study_name="conditional-example", storage=STORAGE)
    first, resumed = (
        study.trials[0],
        next(t for t in study.trials if t.user_attrs.get(attrs.RETRY_OF) == 0),
    )
    assert first.user_attrs[attrs.OUTCOME] == "interrupted"
    assert resumed.state.name == "COMPLETE"
    assert resumed.params == first.params
    assert resumed.user_attrs[attrs.SEED] == first.user_attrs[attrs.SEED]
    # The re-run started after the checkpoint the interruption left, not at epoch 0.
    run_id = resumed.user_attrs[attrs.MLFLOW_RUN]
    steps = sorted(m.step for m in client.get_metric_history(run_id, "val_accuracy"))
    assert steps[0] >= interrupted_at + 1
    assert steps == list(range(steps[0], 8))
    assert resumed.user_attrs[attrs.METRICS]["resumed_at"] == steps[0]
    # Its run links to the interrupted one, which holds no final epoch: recorded once.
    assert (
        client.get_run(run_id).data.tags["hpsearch.resumes_run"]
        == (first.user_attrs[attrs.MLFLOW_RUN])
    )
    earlier = client.get_metric_history(first.user_attrs[attrs.MLFLOW_RUN], "val_accuracy")
    assert max(m.step for m in earlier) < 7
    # Each trial has only its branch's parameters, in Optuna and in MLflow.
    for trial in study.trials:
        branch = {"sgd": {"momentum", "nesterov"}, "adam": {"beta1"}}[trial.params["optimizer"]]
        assert set(trial.params) == {"lr", "width", "optimizer", *branch}
        logged = client.get_run(trial.user_attrs[attrs.MLFLOW_RUN]).data.params
        assert set(logged) >= set(trial.params)
        assert not {"momentum", "nesterov", "beta1"} - branch & set(logged)
    # Only the best trial's checkpoints are kept, and `best --json` names them.
    best = json.loads(cli("best", "examples/conditional/config.yaml", "--json").stdout)
    kept = list((project / "mlruns/checkpoints/conditional-example").iterdir())
    assert [str(k) for k in kept] == [best["checkpoint_dir"]]


def _experiment_id(client: MlflowClient) -> str:
    found = client.get_experiment_by_name("conditional-example")
    assert found is not None
    return str(found.experiment_id)


@pytest.mark.usefixtures("ray_one_gpu", "seeded_store")
def test_a_script_that_prints_text_is_searched_with_args_and_a_pattern(
    examples: Path, project: Path
) -> None:
    done = cli("run", "examples/text-output/config.yaml", "--n-trials", "3")
    assert done.returncode == 0, done.stderr[-3000:]

    study = optuna.load_study(study_name="text-output-example", storage=STORAGE)
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 3
    client = mlflow_client(project)
    for trial in study.trials:
        # The branch the trial has, and only it, reached the script's argparse.
        branch = {"sgd": "momentum", "adam": "beta1"}[trial.params["optimizer"]]
        other = {"sgd": "beta1", "adam": "momentum"}[trial.params["optimizer"]]
        assert branch in trial.params
        assert other not in trial.params
        run_id = trial.user_attrs[attrs.MLFLOW_RUN]
        history = client.get_metric_history(run_id, "test_accuracy")
        assert sorted(m.step for m in history) == [0, 1, 2]  # one report per matching line
        assert trial.value == history[-1].value
        assert 0 < trial.value <= 100
        assert client.get_metric_history(run_id, "test_loss")


@pytest.mark.usefixtures("ray_one_gpu", "seeded_store")
def test_a_tune_trainable_and_its_param_space_are_searched_unchanged(
    examples: Path, project: Path
) -> None:
    done = cli("run", "examples/tune_trainable/config.yaml", "--n-trials", "2")
    assert done.returncode == 0, done.stderr[-3000:]

    study = optuna.load_study(study_name="tune-trainable-example", storage=STORAGE)
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 2
    client = mlflow_client(project)
    for trial in study.trials:
        assert set(trial.params) == {"lr", "momentum", "model.width"}  # from the param_space
        history = client.get_metric_history(trial.user_attrs[attrs.MLFLOW_RUN], "val_accuracy")
        assert sorted(m.step for m in history) == [0, 1, 2, 3]  # tune.report's "epoch"
    # Each reported Checkpoint went into the trial's checkpoint folder; the best
    # trial's is kept when the search ends (the others are swept).
    best = max(study.trials, key=lambda t: t.value or 0.0)
    folder = Path(best.user_attrs[attrs.CHECKPOINT_DIR])
    assert json.loads((folder / "epoch.json").read_text()) == {"epoch": 3}


def _search_tune_trainable(project: Path, name: str, trainable: str) -> list[FrozenTrial]:
    """Two trials of ``tests.tune_trainables:<trainable>`` over ``x`` in [0, 1], scored by
    ``score``; the study's trials once the search ended without an error."""
    (project / f"{name}.yaml").write_text(
        f"study: {{name: {name}, n_trials: 2, sampler: {{type: random, seed: 1}}}}\n"
        "objective: {metric: score, direction: maximize}\n"
        f"train: {{tune: tests.tune_trainables:{trainable}}}\n"
        "space: {x: {type: float, low: 0.0, high: 1.0}}\n"
    )
    done = cli("run", f"{name}.yaml")
    assert done.returncode == 0, done.stderr[-3000:]
    return optuna.load_study(study_name=name, storage=STORAGE).trials


@pytest.mark.usefixtures("ray_one_gpu", "seeded_store")
def test_a_with_parameters_trainable_gets_its_data_from_rays_object_store(project: Path) -> None:
    for trial in _search_tune_trainable(project, "wp", "trainable"):
        assert trial.value == pytest.approx(2.0 * trial.params["x"])


@pytest.mark.usefixtures("ray_one_gpu", "seeded_store")
def test_a_trainable_written_before_train_v2_reports_through_ray_train(project: Path) -> None:
    # Ray's own Tune refuses ray.train.report in a Tune function under Train V2, its
    # default; the workers of a search run Ray Train's first API unless told otherwise.
    trials = _search_tune_trainable(project, "v1", "before_train_v2")
    client = mlflow_client(project)
    for trial in trials:
        assert trial.state.name == "COMPLETE"
        assert trial.value == pytest.approx(3.0 * trial.params["x"])
        run_id = trial.user_attrs[attrs.MLFLOW_RUN]
        assert [m.value for m in client.get_metric_history(run_id, "named")] == [1.0] * 3
    # train.report's checkpoints went into the trial's folder (the best trial's is kept).
    best = max(trials, key=lambda t: t.value or 0.0)
    folder = Path(best.user_attrs[attrs.CHECKPOINT_DIR])
    assert json.loads((folder / "state.json").read_text()) == {"step": 2}


@pytest.mark.usefixtures("ray_one_gpu", "seeded_store")
def test_rays_setup_mlflow_logs_into_the_searchs_store_with_or_without_an_experiment(
    project: Path,
) -> None:
    # Under Tune, setup_mlflow(config) names the Ray trial's experiment and a named one
    # must exist (the driver's script makes it): both failed every trial of a search.
    (project / "sm.yaml").write_text(
        "study: {name: sm, n_trials: 2, sampler: {type: grid}}\n"
        "objective: {metric: score, direction: maximize}\n"
        "train: {tune: tests.tune_trainables:logs_with_setup_mlflow}\n"
        "space: {x: 0.5, experiment: {type: categorical, choices: ['', guide]}}\n"
    )
    done = cli("run", "sm.yaml")
    assert done.returncode == 0, done.stderr[-3000:]

    trials = optuna.load_study(study_name="sm", storage=STORAGE).trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 2
    by_experiment = {t.params["experiment"]: t for t in trials}
    client = mlflow_client(project)
    # No experiment named: the search's own, the run nested under the trial's.
    bare = by_experiment[""]
    search = client.get_experiment_by_name("sm")
    assert search is not None
    [own] = client.search_runs(
        [search.experiment_id], filter_string=f"tags.`hpsearch.trial` = '{bare.number}'"
    )
    assert own.data.tags["mlflow.parentRunId"] == bare.user_attrs[attrs.MLFLOW_RUN]
    assert own.data.metrics == {"own_loss": 0.5}
    # One named: made in the search's store, as the driver's script made it under Tune.
    guide = client.get_experiment_by_name("guide")
    assert guide is not None
    [named] = client.search_runs([guide.experiment_id])
    assert named.data.tags["hpsearch.trial"] == str(by_experiment["guide"].number)
    assert named.data.metrics == {"own_loss": 0.5}


@pytest.mark.usefixtures("ray_one_gpu", "seeded_store")
def test_ray_tunes_own_hyperband_example_runs_unchanged_with_its_checkpoints(
    project: Path,
) -> None:
    """``ray/tune/examples/hyperband_function_example.py``, as Ray installs it: its
    trainable checkpoints every 3 steps with ``tune.report(..., checkpoint=...)``,
    and reads ``tune.get_checkpoint()`` first; Hyperband stops the weaker ones. Its
    param_space is built under ``if __name__ == "__main__":``: the guide's two-line module
    holds it (copied as it is)."""
    (project / "hb_space.py").write_text(
        "from ray import tune\n"
        "param_space = {'height': tune.uniform(0, 100)}  # as the example's Tuner has it\n"
    )
    (project / "hb.yaml").write_text(
        "study:\n"
        "  name: ray-hyperband-example\n"
        "  n_trials: 4\n"
        "  sampler: {type: random, seed: 0}\n"
        "  pruner: {type: hyperband, options: {min_resource: 10, max_resource: 100}}\n"
        "objective: {metric: episode_reward_mean, direction: maximize}\n"
        "train: {tune: ray.tune.examples.hyperband_function_example:train_func}\n"
        "space: hb_space:param_space\n"
    )
    done = cli("run", "hb.yaml")
    assert done.returncode == 0, done.stderr[-3000:]

    study = optuna.load_study(study_name="ray-hyperband-example", storage=STORAGE)
    states = [t.state.name for t in study.trials]
    assert set(states) <= {"COMPLETE", "PRUNED"}, states
    completed = [t for t in study.trials if t.state.name == "COMPLETE"]
    assert completed
    client = mlflow_client(project)
    for trial in completed:  # its 100 reports, and its value: tanh(99) * height
        history = client.get_metric_history(
            trial.user_attrs[attrs.MLFLOW_RUN], "episode_reward_mean"
        )
        assert sorted(m.step for m in history) == list(range(100))
        assert trial.value == pytest.approx(trial.params["height"])
    pruned_at = [t.last_step for t in study.trials if t.state.name == "PRUNED"]
    assert all(step is not None and step < 99 for step in pruned_at), pruned_at
    best = max(completed, key=lambda t: t.value or 0.0)
    saved = Path(best.user_attrs[attrs.CHECKPOINT_DIR]) / "checkpoint.json"
    assert json.loads(saved.read_text()) == {"timestep": 99}  # its last Checkpoint


@pytest.mark.usefixtures("ray_one_gpu", "seeded_store")
def test_ray_tunes_own_class_trainable_runs_unchanged_until_its_stop(project: Path) -> None:
    """``MyTrainableClass`` of ``ray/tune/examples/bohb_example.py``, as Ray installs it: a
    ``tune.Trainable`` whose ``step()`` never says done; its Tuner stops it by
    ``training_iteration``, as ``stop`` does here, and checkpoints it as configured."""
    (project / "bohb_space.py").write_text(
        "from ray import tune\n"
        "param_space = {'width': tune.uniform(0, 20), 'height': tune.uniform(-100, 100)}\n"
    )
    (project / "bohb.yaml").write_text(
        "study: {name: ray-class-trainable, n_trials: 2, sampler: {type: random, seed: 0}}\n"
        "objective: {metric: episode_reward_mean, direction: maximize}\n"
        "train:\n"
        "  tune: ray.tune.examples.bohb_example:MyTrainableClass\n"
        "  stop: {training_iteration: 5}\n"
        "  checkpoint_frequency: 2\n"
        "space: bohb_space:param_space\n"
    )
    done = cli("run", "bohb.yaml")
    assert done.returncode == 0, done.stderr[-3000:]

    study = optuna.load_study(study_name="ray-class-trainable", storage=STORAGE)
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 2
    client = mlflow_client(project)
    for trial in study.trials:  # 5 steps, then stopped; its value: tanh(5 / width) * height
        history = client.get_metric_history(
            trial.user_attrs[attrs.MLFLOW_RUN], "episode_reward_mean"
        )
        assert sorted(m.step for m in history) == [1, 2, 3, 4, 5]
        width, height = trial.params["width"], trial.params["height"]
        assert trial.value == pytest.approx(math.tanh(5 / width) * height)
    best = max(study.trials, key=lambda t: t.value or 0.0)
    saved = Path(best.user_attrs[attrs.CHECKPOINT_DIR]) / "checkpoint"
    assert json.loads(saved.read_text()) == {"timestep": 5}  # saved by its save_checkpoint
