"""The driver's records: Optuna and MLflow agree on every way a trial can end. No Ray needed."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from optuna.trial import TrialState

from hpsearch import attrs
from hpsearch.cli import main
from hpsearch.config import RunConfig, load_config
from hpsearch.pruning import make_judge
from hpsearch.recorder import TrialRecorder, TrialSummary, TrialTemplate
from hpsearch.resources import Admission
from hpsearch.results import load
from hpsearch.study import BudgetCount, StudyHandle, count_budget, open_study
from hpsearch.telemetry import GpuInfo, GpuMonitor, LoadModelBackend, TrialGpuMetrics
from hpsearch.tracking import PARENT_TAG, TRIAL_NUMBER_TAG, MlflowTracker
from hpsearch.trial.protocol import PARAMS_KEY, SPEC_KEY, EventKind, Outcome, WorkerEvent
from tests.conftest import ConfigWriter

ADMISSION = Admission(cpus=1.0, gpus=0.5, reason="test")


@dataclass
class Listener:
    started: list[int] = field(default_factory=list)
    finished: list[TrialSummary] = field(default_factory=list)

    def trial_started(self, number: int, admission: Admission) -> None:
        self.started.append(number)

    def trial_finished(self, summary: TrialSummary) -> None:
        self.finished.append(summary)


@dataclass
class Board:
    """Collects verdicts the way the Ray decision board receives them."""

    verdicts: list[tuple[int, int, bool]] = field(default_factory=list)
    forgotten: list[int] = field(default_factory=list)

    def post(self, number: int, step: int, prune: bool) -> None:
        self.verdicts.append((number, step, prune))

    def forget(self, number: int) -> None:
        self.forgotten.append(number)


@dataclass
class Harness:
    recorder: TrialRecorder
    handle: StudyHandle
    tracker: MlflowTracker
    parent: str
    listener: Listener

    def run_id(self, number: int) -> str:
        return str(self.handle.study.trials[number].user_attrs[attrs.MLFLOW_RUN])


def _harness(
    config: RunConfig,
    tracker: MlflowTracker,
    board: Board | None = None,
    gpu: TrialGpuMetrics | None = None,
) -> Harness:
    handle = open_study(config)
    parent = tracker.start_run("parent")
    listener = Listener()
    recorder = TrialRecorder(
        handle,
        space=config.search_space,
        objectives=config.objective_list,
        tracker=tracker,
        parent_run_id=parent,
        template=TrialTemplate(train=config.train, source=config.source, objectives=("score",)),
        board=board,
        judge=make_judge(config.study.pruner, config.objective_list, handle.study)
        if board is not None
        else None,
        listeners=[listener],
        gpu=gpu,
    )
    return Harness(recorder, handle, tracker, parent, listener)


@pytest.fixture
def harness(config: RunConfig, mlflow_tracker: MlflowTracker) -> Harness:
    return _harness(config, mlflow_tracker)


def _launched(config: dict[str, Any] | None) -> dict[str, Any]:
    """The Tune config of a trial that was launched (not predicted to run out of memory)."""
    assert config is not None
    return config


def _report(step: int, **metrics: float) -> WorkerEvent:
    return WorkerEvent(kind=EventKind.REPORT, step=step, metrics=metrics)


def _end(outcome: Outcome, error: str = "", **metrics: float) -> WorkerEvent:
    return WorkerEvent(kind=EventKind.END, outcome=outcome, error=error, metrics=metrics)


def test_open_trial_gives_tune_a_config(harness: Harness) -> None:
    config = _launched(harness.recorder.open_trial("t0", ADMISSION))
    assert set(config[PARAMS_KEY]) == {"x", "steps"}
    assert config[PARAMS_KEY]["steps"] == 3
    assert config[SPEC_KEY]["number"] == 0
    assert config[SPEC_KEY]["gpus"] == 0.5
    assert harness.recorder.running()[0].gpus == 0.5
    trial = harness.handle.study.trials[0]
    assert trial.state == TrialState.RUNNING
    assert trial.user_attrs[attrs.RESOURCES] == {"cpus": 1.0, "gpus": 0.5, "reason": "test"}


def test_complete_trial_in_optuna_and_mlflow(harness: Harness) -> None:
    recorder = harness.recorder
    params = _launched(recorder.open_trial("t0", ADMISSION))[PARAMS_KEY]
    recorder.trial_started("t0")
    recorder.trial_event("t0", _report(0, score=0.5, speed=10.0))
    recorder.trial_event("t0", _report(1, score=0.75, speed=12.0))
    recorder.trial_event("t0", _end(Outcome.COMPLETE))
    recorder.trial_ended("t0")

    trial = harness.handle.study.trials[0]
    assert trial.state == TrialState.COMPLETE
    assert trial.values == [0.75]
    assert trial.user_attrs[attrs.METRICS] == {"score": 0.75, "speed": 12.0}
    run = harness.tracker.client.get_run(harness.run_id(0))
    assert run.info.status == "FINISHED"
    assert run.data.tags[PARENT_TAG] == harness.parent
    assert run.data.tags[TRIAL_NUMBER_TAG] == "0"
    assert run.data.params["x"] == str(params["x"])
    history = harness.tracker.client.get_metric_history(run.info.run_id, "score")
    assert [(m.step, m.value) for m in history] == [(0, 0.5), (1, 0.75)]
    assert harness.listener.started == [0]
    assert harness.listener.finished[0].outcome is Outcome.COMPLETE
    assert recorder.running() == []
    parent_metrics = harness.tracker.client.get_run(harness.parent).data.metrics
    assert parent_metrics["best_score"] == 0.75
    assert parent_metrics["trials_complete"] == 1


def test_returned_metrics_complete_the_trial(harness: Harness) -> None:
    harness.recorder.open_trial("t0", ADMISSION)
    harness.recorder.trial_started("t0")
    harness.recorder.trial_event("t0", _end(Outcome.COMPLETE, score=0.9))
    harness.recorder.trial_ended("t0")
    assert harness.handle.study.trials[0].values == [0.9]


def test_failed_trial_keeps_the_error_text(harness: Harness) -> None:
    harness.recorder.open_trial("t0", ADMISSION)
    harness.recorder.trial_started("t0")
    harness.recorder.trial_event("t0", _report(0, score=0.5))
    harness.recorder.trial_event("t0", _end(Outcome.FAIL, "Traceback...\nRuntimeError: boom"))
    harness.recorder.trial_ended("t0")

    trial = harness.handle.study.trials[0]
    assert trial.state == TrialState.FAIL
    assert trial.user_attrs[attrs.ERROR].endswith("RuntimeError: boom")
    run = harness.tracker.client.get_run(harness.run_id(0))
    assert run.info.status == "FAILED"
    assert run.data.tags["hpsearch.error"].endswith("RuntimeError: boom")
    error_file = Path(harness.tracker.client.download_artifacts(run.info.run_id, "error.txt"))
    assert "RuntimeError: boom" in error_file.read_text()


@pytest.mark.parametrize(
    ("event", "words"),
    [
        (_report(0, other=1.0), "without reporting the objective metric 'score' (reported: other)"),
        (_report(0, score=float("nan")), "'score' is nan"),
    ],
)
def test_complete_without_a_usable_objective_fails(
    harness: Harness, event: WorkerEvent, words: str
) -> None:
    harness.recorder.open_trial("t0", ADMISSION)
    harness.recorder.trial_started("t0")
    harness.recorder.trial_event("t0", event)
    harness.recorder.trial_event("t0", _end(Outcome.COMPLETE))
    harness.recorder.trial_ended("t0")
    trial = harness.handle.study.trials[0]
    assert trial.state == TrialState.FAIL
    assert words in trial.user_attrs[attrs.ERROR]


def test_worker_crash_fails_the_trial(harness: Harness) -> None:
    harness.recorder.open_trial("t0", ADMISSION)
    harness.recorder.trial_started("t0")
    harness.recorder.trial_ended("t0", crash="RayActorError: the actor died")
    trial = harness.handle.study.trials[0]
    assert trial.state == TrialState.FAIL
    assert "worker died: RayActorError" in trial.user_attrs[attrs.ERROR]


def test_trial_that_never_started_still_gets_a_run(harness: Harness) -> None:
    harness.recorder.open_trial("t0", ADMISSION)
    harness.recorder.trial_ended("t0", crash="could not place the trial")
    run = harness.tracker.client.get_run(harness.run_id(0))
    assert run.info.status == "FAILED"


def test_interrupted_trials_are_requeued_and_not_counted(harness: Harness) -> None:
    params = _launched(harness.recorder.open_trial("t0", ADMISSION))[PARAMS_KEY]
    harness.recorder.trial_started("t0")
    harness.recorder.trial_event("t0", _report(0, score=0.5))

    assert harness.recorder.interrupt_open_trials() == 1

    trials = harness.handle.study.trials
    assert trials[0].state == TrialState.FAIL
    assert trials[0].user_attrs[attrs.OUTCOME] == "interrupted"
    assert trials[1].state == TrialState.WAITING
    assert trials[1].user_attrs[attrs.RETRY_OF] == 0
    assert count_budget(trials) == BudgetCount(finished=0, running=0)
    assert harness.tracker.client.get_run(harness.run_id(0)).info.status == "KILLED"
    again = _launched(harness.recorder.open_trial("t1", ADMISSION))[PARAMS_KEY]
    assert again["x"] == params["x"]


def test_pruner_verdicts_reach_the_board(
    write_config: ConfigWriter, mlflow_tracker: MlflowTracker
) -> None:
    config = load_config(
        write_config(
            {
                "study": {
                    "pruner": {
                        "type": "median",
                        "options": {"n_startup_trials": 1, "n_warmup_steps": 0},
                    }
                }
            }
        )
    )
    board = Board()
    harness = _harness(config, mlflow_tracker, board)
    recorder = harness.recorder
    recorder.open_trial("good", ADMISSION)
    recorder.trial_started("good")
    for step in range(3):
        recorder.trial_event("good", _report(step, score=1.0))
    recorder.trial_event("good", _end(Outcome.COMPLETE))
    recorder.trial_ended("good")

    recorder.open_trial("bad", ADMISSION)
    recorder.trial_started("bad")
    recorder.trial_event("bad", _report(0, score=0.1))
    recorder.trial_event("bad", _end(Outcome.PRUNED))
    recorder.trial_ended("bad")

    assert board.verdicts == [(0, 0, False), (0, 1, False), (0, 2, False), (1, 0, True)]
    assert board.forgotten == [0, 1]
    bad = harness.handle.study.trials[1]
    assert bad.state == TrialState.PRUNED
    assert bad.user_attrs[attrs.PRUNED_AT] == 0
    reason = bad.user_attrs[attrs.PRUNE_REASON]
    assert reason.startswith("score 0.1 at step 0 (best so far) is below the median 1 of 1")
    assert "MedianPruner" in reason
    run = harness.tracker.client.get_run(harness.run_id(1))
    assert run.info.status == "KILLED"
    assert run.data.tags["hpsearch.outcome"] == "pruned"
    assert run.data.tags["hpsearch.state"] == "PRUNED"
    assert run.data.tags["hpsearch.pruned_at_step"] == "0"
    assert run.data.tags["hpsearch.prune_reason"] == reason
    assert harness.listener.finished[1].pruned_at == 0
    assert harness.listener.finished[1].prune_reason == reason


def test_a_trial_that_sent_its_end_keeps_its_outcome_when_the_search_stops(
    harness: Harness,
) -> None:
    harness.recorder.open_trial("done", ADMISSION)
    harness.recorder.trial_started("done")
    harness.recorder.trial_event("done", _report(0, score=0.5))
    harness.recorder.trial_event("done", _end(Outcome.COMPLETE))
    harness.recorder.open_trial("busy", ADMISSION)
    harness.recorder.trial_started("busy")

    assert harness.recorder.interrupt_open_trials() == 1

    states = [t.state for t in harness.handle.study.trials]
    assert states[:2] == [TrialState.COMPLETE, TrialState.FAIL]
    assert harness.handle.study.trials[2].user_attrs[attrs.RETRY_OF] == 1


def test_gpu_placement_load_and_series_reach_mlflow_and_optuna(
    config: RunConfig, mlflow_tracker: MlflowTracker
) -> None:
    backend = LoadModelBackend([GpuInfo(0, "sim", 6141.0, 115.0)])
    monitor = GpuMonitor(backend, interval_s=1.0)
    h = _harness(config, mlflow_tracker, gpu=TrialGpuMetrics(monitor, local_node_id="here"))
    h.recorder.open_trial("t0", ADMISSION)
    h.recorder.open_trial("t1", ADMISSION)
    h.recorder.trial_started("t0")
    h.recorder.trial_started("t1")
    here = {"GPU": 0.5, "gpu_ids": ["0"], "node_id": "here", "pid": 41}
    elsewhere = {"GPU": 0.5, "gpu_ids": ["0"], "node_id": "there", "pid": 42}
    load = {"utilization_pct": 11.4, "memory_mb": 167.0}
    h.recorder.trial_event("t0", WorkerEvent(EventKind.GPU_LOAD, gpu_load=load, assigned=here))
    h.recorder.trial_event("t1", WorkerEvent(EventKind.GPU_LOAD, gpu_load=load, assigned=elsewhere))
    for _ in range(3):
        time.sleep(0.01)
        monitor.sample_now()
    h.recorder.trial_event("t0", WorkerEvent(EventKind.REPORT, step=0, metrics={"score": 0.5}))
    h.recorder.trial_event("t1", WorkerEvent(EventKind.REPORT, step=0, metrics={"score": 0.4}))
    for tune_id in ("t0", "t1"):
        h.recorder.trial_event(tune_id, WorkerEvent(EventKind.END, outcome=Outcome.COMPLETE))
        h.recorder.trial_ended(tune_id)

    client = h.tracker.client
    sampled = client.get_run(h.run_id(0))
    history = client.get_metric_history(h.run_id(0), "gpu_utilization_pct")
    assert [m.value for m in history] == [11.4, 11.4, 11.4]
    assert sampled.data.metrics["gpu_process_memory_peak_mb"] == 167.0
    assert sampled.data.tags["hpsearch.gpu_index"] == "0"
    assert h.handle.study.trials[0].user_attrs[attrs.GPU]["declared_load"] == load
    # The other trial ran on a node whose GPUs this monitor does not read.
    other = client.get_run(h.run_id(1))
    assert "ran on Ray node there" in other.data.tags["hpsearch.gpu_telemetry"]
    assert not [name for name in other.data.metrics if name.startswith("gpu_")]
    assert attrs.GPU not in h.handle.study.trials[1].user_attrs
    assert backend.sample(time.time())[0].utilization_pct == 0.0, "ended trials leave the GPU"


def test_objective_until_a_target_takes_the_value_where_the_target_was_reached(
    write_config: ConfigWriter, mlflow_tracker: MlflowTracker
) -> None:
    config = load_config(
        write_config(
            {
                "objective": None,
                "objectives": [
                    {"metric": "score", "direction": "maximize"},
                    {
                        "metric": "seconds",
                        "direction": "minimize",
                        "until": {"metric": "score", "at_least": 0.9},
                    },
                ],
            }
        )
    )
    harness = _harness(config, mlflow_tracker)
    recorder = harness.recorder
    for tune_id, scores in (("fast", [0.5, 0.95, 0.97]), ("never", [0.4, 0.6, 0.7])):
        recorder.open_trial(tune_id, ADMISSION)
        recorder.trial_started(tune_id)
        for step, score in enumerate(scores):
            recorder.trial_event(tune_id, _report(step, score=score, seconds=10.0 * (step + 1)))
        recorder.trial_event(tune_id, _end(Outcome.COMPLETE))
        recorder.trial_ended(tune_id)

    study = harness.handle.study
    assert study.metric_names == ["score", "seconds@score>=0.9"]
    assert study.trials[0].values == [0.97, 20.0]  # seconds at the first report with score >= 0.9
    assert study.trials[1].values == [0.7, float("inf")]  # never reached: the worst value
    assert [t.number for t in study.best_trials] == [0]
    reached = harness.tracker.client.get_run(harness.run_id(0)).data
    assert reached.metrics["seconds_to_score"] == 20.0
    missed = harness.tracker.client.get_run(harness.run_id(1)).data
    assert "seconds_to_score" not in missed.metrics
    assert missed.tags["hpsearch.seconds_to_score"] == "score>=0.9 not reached"


def _oom_end(step: int | None = 1, cap_mb: float | None = None) -> WorkerEvent:
    oom = {
        "kind": "torch",
        "message": "CUDA out of memory. Tried to allocate 512 MiB",
        "step": step,
        "peak_mb": 2900.0,
        "cap_mb": cap_mb,
    }
    return WorkerEvent(kind=EventKind.END, outcome=Outcome.PRUNED, info={"oom": oom})


def test_out_of_memory_is_pruned_retried_alone_then_infeasible_and_predicted(
    write_config: ConfigWriter, mlflow_tracker: MlflowTracker
) -> None:
    config = load_config(
        write_config({"space": {"batch_size": [64, 128], "x": 0.5}, "study": {"n_trials": 10}})
    )
    handle = open_study(config)
    handle.study.enqueue_trial({"batch_size": 64})
    harness = _harness(config, mlflow_tracker)
    recorder, study = harness.recorder, harness.handle.study

    # 1. Out of memory while sharing a GPU (half of it): pruned, not held against the config.
    assert recorder.open_trial("shared", ADMISSION) is not None
    recorder.trial_started("shared")
    recorder.trial_event("shared", _report(0, score=0.1))
    recorder.trial_event("shared", _oom_end(cap_mb=3070.0))
    assert recorder.trial_ended("shared") is Outcome.PRUNED
    shared = study.trials[0]
    assert shared.state == TrialState.PRUNED
    assert shared.user_attrs[attrs.OOM]["infeasible"] is False
    assert shared.user_attrs[attrs.OOM]["cap_mb"] == 3070.0
    assert "runs again alone on a whole GPU" in shared.user_attrs[attrs.PRUNE_REASON]
    assert shared.constraints == {}
    assert count_budget(study.trials).finished == 0  # its re-run will count instead
    assert recorder.next_runs_alone()

    # 2. The re-run, alone on a whole GPU, runs out too: now it is infeasible.
    whole = Admission(cpus=1.0, gpus=1.0, reason="alone")
    assert recorder.open_trial("alone", whole) is not None
    recorder.trial_started("alone")
    recorder.trial_event("alone", _oom_end(step=None))
    recorder.trial_ended("alone")
    alone = study.trials[1]
    assert alone.params == shared.params
    assert alone.user_attrs[attrs.ALONE_RETRY_OF] == 0
    assert alone.state == TrialState.PRUNED
    assert alone.user_attrs[attrs.INFEASIBLE] is True
    assert alone.constraints == {"oom": 1.0}  # what TPE steers away from
    reason = alone.user_attrs[attrs.PRUNE_REASON]
    assert reason.startswith("oom: CUDA out of memory. Tried to allocate 512 MiB before its first")
    assert "(peak 2900 MiB, whole GPU, 0 co-tenant trial(s))" in reason
    run = harness.tracker.client.get_run(harness.run_id(1))
    assert run.info.status == "FINISHED"
    assert run.data.tags["hpsearch.state"] == "PRUNED"
    assert run.data.tags["hpsearch.prune_kind"] == "oom"
    assert run.data.tags["hpsearch.prune_reason"] == reason
    assert run.data.tags["hpsearch.oom.peak_mb"] == "2900.0"
    assert count_budget(study.trials).finished == 1
    assert not recorder.next_runs_alone()

    # 3. A larger batch with the same other parameters is not launched.
    study.enqueue_trial({"batch_size": 128})
    assert recorder.open_trial("bigger", whole) is None
    predicted = study.trials[2]
    assert predicted.state == TrialState.PRUNED
    assert predicted.user_attrs[attrs.OOM] == {"predicted_from": 1, "kind": "predicted"}
    assert predicted.user_attrs[attrs.PRUNE_REASON].startswith(
        "predicted_oom: needs at least the memory of trial 1"
    )
    assert "batch_size 128 >= 64" in predicted.user_attrs[attrs.PRUNE_REASON]
    assert predicted.constraints == {"oom": 1.0}
    run = harness.tracker.client.get_run(harness.run_id(2))
    assert (run.info.status, run.data.tags["hpsearch.prune_kind"]) == ("FINISHED", "predicted_oom")

    parent = harness.tracker.client.get_run(harness.parent).data.metrics
    assert parent["trials_oom"] == 2
    assert parent["trials_predicted_oom"] == 1
    assert 0 < parent["oom_wasted_gpu_seconds_share"] <= 1

    listed = CliRunner().invoke(main, ["best", config.source, "--oom", "--json"])
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.output)
    assert [r["trial_number"] for r in rows] == [0, 1, 2]
    assert rows[1]["oom"]["infeasible"] is True
    assert rows[2]["prune_reason"].startswith("predicted_oom")
    assert [t.number for t in load(config.source).oom_trials()] == [0, 1, 2]


def test_a_worker_killed_for_host_memory_is_pruned_not_failed(
    harness: Harness,
) -> None:
    recorder = harness.recorder
    recorder.open_trial("t0", ADMISSION)
    recorder.trial_started("t0")
    recorder.trial_event("t0", _report(0, score=0.5))
    crash = (
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on "
        "memory. Memory on the node was 23.1GB / 24GB (0.96)"
    )
    assert recorder.trial_ended("t0", crash=crash) is Outcome.PRUNED
    trial = harness.handle.study.trials[0]
    assert trial.state == TrialState.PRUNED
    assert trial.user_attrs[attrs.OOM]["kind"] == "host"
    assert trial.user_attrs[attrs.OOM]["infeasible"] is True  # sharing a GPU is not the cause
    assert (
        "Ray reported host memory exhaustion (OutOfMemoryError)"
        in (trial.user_attrs[attrs.PRUNE_REASON])
    )
    assert not recorder.next_runs_alone()
