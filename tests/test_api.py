"""Searches through hpsearch.run on a real Ray with logical GPUs, real Optuna and real MLflow."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from rich.console import Console

import hpsearch
from hpsearch import attrs
from hpsearch.resources import (
    Admission,
    ClusterCapacity,
    ResourcePolicy,
    RunningTrial,
    StaticPolicy,
)
from hpsearch.workloads.simulated_gpu import gpu_profile
from tests.conftest import ConfigWriter

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("ray_one_gpu")]


class SwitchAfter(ResourcePolicy):
    """Answers like a static one-trial-per-GPU policy, then two per GPU after ``n`` admissions."""

    def __init__(self, n: int) -> None:
        self.inner = StaticPolicy(trials_per_gpu=1)
        self.n = n
        self.admitted = 0

    def admit(self, running: Sequence[RunningTrial], capacity: ClusterCapacity) -> Admission | None:
        admission = self.inner.admit(running, capacity)
        if admission is not None:
            self.admitted += 1
            if self.admitted == self.n:
                self.inner.trials_per_gpu = 2
        return admission


def _mlflow(project: Path) -> MlflowClient:
    return MlflowClient(f"sqlite:///{project / 'mlruns' / 'mlflow.db'}")


def _max_overlap(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    level = peak = 0
    for _, change in events:
        level += change
        peak = max(peak, level)
    return peak


def test_policy_change_mid_search_reaches_the_next_trials(write_config: ConfigWriter) -> None:
    path = write_config(
        {
            "train": "tests.train_functions:timed",
            "study": {"n_trials": 7},
            "space": {"sleep": 1.5, "steps": None},
            "execution": {"max_concurrent": None},
        }
    )
    policy = SwitchAfter(3)

    outcome = hpsearch.run(path, policy=policy)

    trials = outcome.results.trials
    assert [t.state for t in trials] == ["COMPLETE"] * 7
    study_trials = outcome.results.study.trials
    requested = [t.user_attrs[attrs.RESOURCES]["gpus"] for t in study_trials]
    assigned = [t.user_attrs[attrs.ASSIGNED]["GPU"] for t in study_trials]
    seen_by_worker = [t.metrics["gpu"] for t in trials]
    assert requested == [1.0] * 3 + [0.5] * 4
    assert assigned == requested
    assert seen_by_worker == requested
    intervals = [(t.metrics["started"], t.metrics["ended"]) for t in trials]
    assert _max_overlap(intervals[:3]) == 1  # a whole GPU each: one at a time
    assert _max_overlap(intervals[3:]) == 2  # half a GPU each: two at once


def test_every_way_a_trial_ends_is_recorded(write_config: ConfigWriter, project: Path) -> None:
    path = write_config(
        {
            "train": "tests.train_functions:behaves",
            "study": {"n_trials": 4},
            "execution": {"trials_per_gpu": 0},
        }
    )
    outcome = hpsearch.run(path)

    by_number = {t.number: t for t in outcome.results.trials}
    assert by_number[0].state == "COMPLETE"
    assert by_number[0].values == [0.5]
    assert by_number[1].state == "FAIL"
    assert by_number[1].error is not None
    assert "ValueError: trial 1 went wrong" in by_number[1].error
    assert by_number[2].state == "COMPLETE"
    assert by_number[2].values == [0.75]
    assert by_number[2].metrics == {"score": 0.75, "extra": 1.0}
    assert by_number[3].state == "FAIL"
    assert "without reporting the objective metric 'score'" in (by_number[3].error or "")

    client = _mlflow(project)
    statuses = {n: client.get_run(t.mlflow_run_id or "").info.status for n, t in by_number.items()}
    assert statuses == {0: "FINISHED", 1: "FAILED", 2: "FINISHED", 3: "FAILED"}
    failed = client.get_run(by_number[1].mlflow_run_id or "")
    assert "ValueError: trial 1 went wrong" in failed.data.tags["hpsearch.error"]
    assert outcome.finished == 4
    assert outcome.results.best_trial.number == 2


def test_pruner_stops_trials_through_should_prune(
    write_config: ConfigWriter, project: Path
) -> None:
    path = write_config(
        {
            "train": "tests.train_functions:prunable",
            "study": {
                "n_trials": 8,
                "pruner": {
                    "type": "median",
                    "options": {"n_startup_trials": 2, "n_warmup_steps": 1},
                },
            },
            "space": {"steps": 6},
            "execution": {"trials_per_gpu": 0, "max_concurrent": 1},
        }
    )
    outcome = hpsearch.run(path)

    pruned = [t for t in outcome.results.study.trials if t.state.name == "PRUNED"]
    assert pruned, "the median pruner should stop the trials below the median"
    client = _mlflow(project)
    for trial in pruned:
        step = trial.user_attrs[attrs.PRUNED_AT]
        assert 1 <= step < 5
        assert max(trial.intermediate_values) == step  # it stopped at the verdict
        reason = trial.user_attrs[attrs.PRUNE_REASON]
        assert f"score {trial.intermediate_values[step]:.4g} at step {step}" in reason
        assert "below the median" in reason
        run = client.get_run(trial.user_attrs[attrs.MLFLOW_RUN])
        assert run.info.status == "KILLED"
        assert run.data.tags["hpsearch.state"] == "PRUNED"
        assert run.data.tags["hpsearch.pruned_at_step"] == str(step)
        assert run.data.tags["hpsearch.prune_reason"] == reason
    completed = [t for t in outcome.results.study.trials if t.state.name == "COMPLETE"]
    assert all(len(t.intermediate_values) == 6 for t in completed)


def test_accuracy_against_speed_prunes_dominated_trials_and_plots_the_front(
    write_config: ConfigWriter, project: Path
) -> None:
    path = write_config(
        {
            "train": "tests.train_functions:two_objectives",
            "objective": None,
            "objectives": [
                {"metric": "acc", "direction": "maximize"},
                {"metric": "speed", "direction": "maximize"},
            ],
            "study": {
                "n_trials": 10,
                "sampler": {"type": "random", "seed": 3},
                "pruner": {
                    "type": "dominated",
                    "options": {"n_startup_trials": 2, "n_warmup_steps": 1},
                },
            },
            "space": {
                "x": {"type": "float", "low": 0.0, "high": 1.0},
                "handicap": [False, True],
                "precision": ["fp32", "fp16"],
                "batch_size": [4],
            },
            "execution": {"trials_per_gpu": 0, "max_concurrent": 1},
        }
    )
    outcome = hpsearch.run(path)
    study = outcome.results.study
    client = _mlflow(project)

    pruned = [t for t in study.trials if t.state.name == "PRUNED"]
    assert pruned, "a handicapped trial is beaten on both objectives by an earlier one"
    for trial in pruned:
        assert trial.params["handicap"] is True
        step = trial.user_attrs[attrs.PRUNED_AT]
        assert step >= 1  # warm-up
        assert trial.user_attrs[attrs.PRUNE_REASON].startswith(f"dominated at step {step} by")
        run = client.get_run(trial.user_attrs[attrs.MLFLOW_RUN])
        assert run.data.tags["hpsearch.state"] == "PRUNED"
        assert run.data.tags["hpsearch.prune_reason"] == trial.user_attrs[attrs.PRUNE_REASON]
        assert "dominated at step" in run.data.tags["hpsearch.prune_reason"]

    front = outcome.results.pareto_front()
    assert front
    assert all(not t.params["handicap"] for t in front)
    assert len({t.params["x"] for t in front}) == len(front)

    # The knobs in effect: fp16 ran as fp32 on this CPU, and each run says so.
    for trial in study.trials:
        run = client.get_run(trial.user_attrs[attrs.MLFLOW_RUN])
        assert run.data.tags["knob.precision"] == "fp32"
        assert run.data.params["precision"] == trial.params["precision"]
        assert trial.user_attrs[attrs.KNOBS]["effective"]["precision"] == "fp32"
        notes = run.data.tags["hpsearch.knob_notes"]
        assert ("fp16 autocast" in notes) == (trial.params["precision"] == "fp16")
        assert "samples_per_sec" in run.data.metrics  # the meter's figures

    parent = client.get_run(outcome.mlflow_parent_run_id or "")
    files = {f.path for f in client.list_artifacts(parent.info.run_id, "pareto")}
    assert files == {"pareto/pareto_front.png", "pareto/pareto_front.csv"}
    local = client.download_artifacts(parent.info.run_id, "pareto/pareto_front.csv", str(project))
    rows = Path(local).read_text().splitlines()
    assert rows[0].startswith("trial_number,acc,speed,")
    assert len(rows) == 1 + len(front)


def test_search_on_simulated_gpus_gives_every_trial_gpu_series(
    write_config: ConfigWriter, project: Path
) -> None:
    path = write_config(
        {
            "train": "hpsearch.workloads.simulated_gpu:train",
            "study": {"n_trials": 4},
            "space": {
                "x": None,
                "steps": None,
                "batch_size": [32, 512],
                "width": [128, 1024],
                "depth": 1,
                "epochs": 3,
                "steps_per_epoch": 60,
            },
            "objective": {"metric": "val_accuracy", "direction": "maximize"},
            "execution": {"trials_per_gpu": 2, "max_concurrent": 2},
            "telemetry": {"backend": "simulated", "interval_s": 0.1},
        }
    )
    console = Console(file=io.StringIO(), width=200)
    outcome = hpsearch.run(path, console=console)
    assert "GPU telemetry: simulated: 1 GPU" in console.file.getvalue()  # type: ignore[attr-defined]

    client = _mlflow(project)
    trials = outcome.results.study.trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 4
    sharing = []
    for trial in trials:
        run = client.get_run(trial.user_attrs[attrs.MLFLOW_RUN])
        metrics, tags = run.data.metrics, run.data.tags
        series = {
            name: client.get_metric_history(run.info.run_id, name)
            for name in ("gpu_utilization_pct", "gpu_memory_used_mb", "gpu_process_memory_mb")
        }
        assert all(series.values()), f"trial {trial.number} lacks a GPU series"
        assert [m.step for m in series["gpu_utilization_pct"]] == list(
            range(len(series["gpu_utilization_pct"]))
        )
        profile = gpu_profile(trial.params["batch_size"], trial.params["width"], 1)
        # The trial process's own memory is what its workload declared.
        assert metrics["gpu_process_memory_peak_mb"] == pytest.approx(profile.memory_mb)
        assert metrics["gpu_memory_peak_mb"] >= profile.memory_mb
        assert 0 <= metrics["gpu_utilization_mean_pct"] <= 100
        assert tags["hpsearch.gpu_index"] == "0"
        assert tags["hpsearch.gpu_name"] == "Simulated RTX 4050 Laptop GPU"
        record = trial.user_attrs[attrs.GPU]
        assert record["summary"]["gpu_memory_peak_mb"] == pytest.approx(
            metrics["gpu_memory_peak_mb"], abs=1e-3
        )
        sharing.append((metrics["gpu_trials_sharing_max"], tags["hpsearch.gpu_co_tenants"]))
    # Two trials at half a GPU each ran side by side: someone had a co-tenant.
    assert any(count == 2 and co != "none" for count, co in sharing)

    parent = client.get_run(outcome.mlflow_parent_run_id or "")
    assert "gpu0_utilization_mean_pct" in parent.data.metrics
    assert parent.data.metrics["gpu_monitor_cpu_share_pct"] < 0.5
    report_files = [a.path for a in client.list_artifacts(parent.info.run_id)]
    assert "gpu_report.txt" in report_files


@pytest.mark.usefixtures("nvml_missing")
def test_search_without_a_gpu_says_so_once_and_records_no_gpu_metrics(
    write_config: ConfigWriter, project: Path
) -> None:
    path = write_config({"study": {"n_trials": 2}, "execution": {"trials_per_gpu": 0}})
    console = Console(file=io.StringIO(), width=200)
    outcome = hpsearch.run(path, console=console)

    output = console.file.getvalue()  # type: ignore[attr-defined]
    assert output.count("GPU telemetry off: no NVIDIA driver here") == 1
    assert "trials run on CPU" in output
    client = _mlflow(project)
    for trial in outcome.results.trials:
        run = client.get_run(trial.mlflow_run_id or "")
        assert not [name for name in run.data.metrics if name.startswith("gpu")]
