"""The driver's records: Optuna and MLflow agree on every way a trial can end. No Ray needed.

The ledger and its listeners are wired by the composition root (see ``conftest``);
each test plays the runner's part by hand.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from optuna.trial import TrialState

from hpsearch import attrs
from hpsearch.cli import main
from hpsearch.config import load_config
from hpsearch.oom import OomReport
from hpsearch.placement import Admission, StaticPolicy
from hpsearch.pruning import LocalVerdictBoard
from hpsearch.results import load
from hpsearch.scheduler import Hold
from hpsearch.simulation import LoadModelBackend
from hpsearch.study import BudgetCount, count_budget, open_study
from hpsearch.telemetry import GpuInfo, GpuLoad
from hpsearch.tracking import PARENT_TAG, TRIAL_NUMBER_TAG
from hpsearch.trial.death import headline
from hpsearch.trial.protocol import (
    Assignment,
    EndReport,
    EventKind,
    Outcome,
    TrialLaunch,
    WorkerEvent,
)
from tests.conftest import ConfigWriter, age_heartbeat
from tests.harness import ADMISSION, DriverFactory, end, report

PRUNE_CONFIG = {
    "study": {"pruner": {"type": "median", "options": {"n_startup_trials": 1, "n_warmup_steps": 0}}}
}


def test_open_gives_the_runner_a_config(write_config: ConfigWriter, driver: DriverFactory) -> None:
    d = driver(load_config(write_config()))
    config = d.ledger.open("t0", ADMISSION)
    assert config is not None
    assert set(config.trial.params) == {"x", "steps"}
    assert config.trial.params["steps"] == 3
    assert config.trial.number == 0
    assert config.admission.gpus == 0.5
    assert [t.gpus for t in d.parts.running.running()] == [0.5]
    trial = d.handle.study.trials[0]
    assert trial.state == TrialState.RUNNING
    assert trial.user_attrs[attrs.RESOURCES] == {"cpus": 1.0, "gpus": 0.5, "reason": "test"}


def test_complete_trial_in_optuna_and_mlflow(
    write_config: ConfigWriter, driver: DriverFactory
) -> None:
    d = driver(load_config(write_config()))
    params = d.launch("t0").trial.params
    d.clock.now += 4.0
    d.ledger.event("t0", report(0, score=0.5, speed=10.0))
    d.ledger.event("t0", report(1, score=0.75, speed=12.0))
    d.ledger.event("t0", end(Outcome.COMPLETE))
    assert d.ledger.ended("t0") is Outcome.COMPLETE

    trial = d.handle.study.trials[0]
    assert trial.state == TrialState.COMPLETE
    assert trial.values == [0.75]
    assert trial.user_attrs[attrs.METRICS] == {"score": 0.75, "speed": 12.0}
    assert trial.user_attrs[attrs.DURATION] == 4.0  # on the runner's clock
    run = d.tracker.client.get_run(d.run_id(0))
    assert run.info.status == "FINISHED"
    assert run.data.tags[PARENT_TAG] == d.parent.run_id
    assert run.data.tags[TRIAL_NUMBER_TAG] == "0"
    assert run.data.params["x"] == str(params["x"])
    history = d.tracker.client.get_metric_history(run.info.run_id, "score")
    assert [(m.step, m.value) for m in history] == [(0, 0.5), (1, 0.75)]
    assert "trial 0 COMPLETE score=0.75 (4.0s)" in d.printed
    assert d.parts.running.running() == []
    d.tracker.flush()  # the parent's records wait a second for the next ones (FLUSH_S)
    parent_metrics = d.tracker.client.get_run(d.parent.run_id).data.metrics
    assert parent_metrics["best_score"] == 0.75
    assert parent_metrics["trials_complete"] == 1


def test_returned_metrics_complete_the_trial(
    write_config: ConfigWriter, driver: DriverFactory
) -> None:
    d = driver(load_config(write_config()))
    d.launch("t0")
    d.ledger.event("t0", end(Outcome.COMPLETE, score=0.9))
    d.ledger.ended("t0")
    assert d.handle.study.trials[0].values == [0.9]
    run = d.tracker.client.get_run(d.run_id(0))
    history = d.tracker.client.get_metric_history(run.info.run_id, "score")
    assert [(m.step, m.value) for m in history] == [(0, 0.9)]


def test_failed_trial_keeps_the_error_text(
    write_config: ConfigWriter, driver: DriverFactory
) -> None:
    d = driver(load_config(write_config()))
    d.launch("t0")
    d.ledger.event("t0", report(0, score=0.5))
    d.ledger.event("t0", end(Outcome.FAIL, "Traceback...\nRuntimeError: boom"))
    d.ledger.ended("t0")

    trial = d.handle.study.trials[0]
    assert trial.state == TrialState.FAIL
    assert trial.user_attrs[attrs.ERROR].endswith("RuntimeError: boom")
    run = d.tracker.client.get_run(d.run_id(0))
    assert run.info.status == "FAILED"
    assert run.data.tags["hpsearch.error"].endswith("RuntimeError: boom")
    error_file = Path(d.tracker.client.download_artifacts(run.info.run_id, "error.txt"))
    assert "RuntimeError: boom" in error_file.read_text()


def test_a_long_error_is_kept_whole_in_error_txt_and_its_ends_in_the_records(
    write_config: ConfigWriter, driver: DriverFactory
) -> None:
    # A script's stderr lines can be long (a printed tensor, a progress bar): 200 kB.
    lines = [f"line {i}: " + "x" * 1000 for i in range(200)]
    error = "Traceback (most recent call last):\n" + "\n".join(lines) + "\nRuntimeError: boom"
    d = driver(load_config(write_config()))
    d.launch("t0")
    d.ledger.event("t0", end(Outcome.FAIL, error))
    d.ledger.ended("t0")

    kept = d.handle.study.trials[0].user_attrs[attrs.ERROR]
    tag = d.tracker.client.get_run(d.run_id(0)).data.tags["hpsearch.error"]
    assert len(kept) <= 16_000  # the study's row
    assert len(tag) <= 5_000 < len(kept)  # what a tag holds
    for text in (kept, tag):
        assert text.startswith("Traceback (most recent call last):\n")  # cut at line breaks
        assert text.endswith(f"\n{lines[-2]}\n{lines[-1]}\nRuntimeError: boom")
        assert "characters left out: the run's error.txt has them" in text
    run = d.tracker.client.get_run(d.run_id(0))
    error_file = Path(d.tracker.client.download_artifacts(run.info.run_id, "error.txt"))
    assert error_file.read_text() == error
    assert load(d.handle.study).trials[0].reason == "RuntimeError: boom"


@pytest.mark.parametrize(
    ("event", "words"),
    [
        (report(0, other=1.0), "without reporting the objective metric 'score' (reported: other)"),
        # A name close to the objective's: one spelling or the other is a slip.
        (report(0, Score=1.0, other=1.0), "(reported: Score, other); did you mean 'Score'? Else"),
        (report(0, score=float("nan")), "'score' is nan"),
    ],
)
def test_complete_without_a_usable_objective_fails(
    write_config: ConfigWriter, driver: DriverFactory, event: WorkerEvent, words: str
) -> None:
    d = driver(load_config(write_config()))
    d.launch("t0")
    d.ledger.event("t0", event)
    d.ledger.event("t0", end(Outcome.COMPLETE))
    assert d.ledger.ended("t0") is Outcome.FAIL
    trial = d.handle.study.trials[0]
    assert trial.state == TrialState.FAIL
    assert words in trial.user_attrs[attrs.ERROR]


def test_a_script_that_printed_its_objective_for_people_fails_with_a_pattern_to_read_it(
    write_config: ConfigWriter, driver: DriverFactory
) -> None:
    d = driver(load_config(write_config()))
    d.launch("t0")
    printed = ("score", "Test set: Average loss: 0.0339, score: 9890/10000 (99%)")
    ending = end(Outcome.COMPLETE, loss=0.1)
    d.ledger.event("t0", replace(ending, end=EndReport(unread=(printed,))))
    assert d.ledger.ended("t0") is Outcome.FAIL
    assert (
        "(reported: loss); its output names it with more than a number; read it with "
        r"train.metrics: {patterns: ['score: [\d.]+/[\d.]+ \((?P<score>[\d.]+)']}; else "
    ) in d.handle.study.trials[0].user_attrs[attrs.ERROR]


def test_worker_crash_fails_the_trial(write_config: ConfigWriter, driver: DriverFactory) -> None:
    d = driver(load_config(write_config()))
    d.launch("t0")
    assert d.ledger.ended("t0", crash="RayActorError: the actor died") is Outcome.FAIL
    trial = d.handle.study.trials[0]
    assert trial.state == TrialState.FAIL
    assert "worker died: RayActorError" in trial.user_attrs[attrs.ERROR]


def test_a_trial_whose_node_died_runs_again_with_its_seed_and_checkpoints(
    write_config: ConfigWriter, driver: DriverFactory
) -> None:
    d = driver(load_config(write_config()))
    spec = d.launch("t0")
    d.ledger.event("t0", report(0, score=0.1))
    crash = (
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n"
        "The actor died because its node has died. Node Id: 5f2a\n"
        "\tthe actor's node was terminated unexpectedly: raylet crashed"
    )
    assert d.ledger.ended("t0", crash=crash) is Outcome.INTERRUPTED
    lost, again = d.handle.study.trials
    assert lost.user_attrs[attrs.OUTCOME] == "interrupted"
    assert lost.user_attrs[attrs.ERROR].startswith("its node was lost")
    assert headline(lost.user_attrs[attrs.ERROR]) == (  # what its one line shows
        "its node was lost; it runs again, from its last checkpoint"
    )
    assert again.state == TrialState.WAITING
    assert again.system_attrs["fixed_params"] == lost.params
    assert again.user_attrs[attrs.RETRY_OF] == 0
    kept = {k: again.user_attrs[k] for k in (attrs.SEED, attrs.CHECKPOINT_DIR)}
    assert kept == {
        attrs.SEED: spec.trial.seed,
        attrs.CHECKPOINT_DIR: spec.trial.checkpoint_dir,
    }
    assert again.user_attrs[attrs.RESUMES_RUN] == d.run_id(0)
    assert count_budget(d.handle.study.trials).finished == 0  # it counts once it has run


def test_a_rerun_resumed_past_its_last_report_completes_with_what_its_attempt_reported(
    write_config: ConfigWriter, driver: DriverFactory
) -> None:
    """A node lost after a trial's last checkpoint but before its last report reached the
    driver: the re-run resumes from that checkpoint with no epoch left, and reports
    nothing. What the lost attempt reported stands, as a restored Ray Tune trial keeps
    its last result."""
    d = driver(load_config(write_config()))
    d.launch("t0")
    d.ledger.event("t0", report(0, score=0.4))
    d.ledger.event("t0", report(1, score=0.6, loss=float("nan")))
    crash = "ray.exceptions.ActorDiedError: The actor died because its node has died."
    assert d.ledger.ended("t0", crash=crash) is Outcome.INTERRUPTED
    again = d.handle.study.trials[1]
    assert again.user_attrs[attrs.RESUMES_METRICS] == {"score": 0.6}  # JSON: no NaN

    d.launch("t1")
    d.ledger.event("t1", end(Outcome.COMPLETE))  # nothing left to train, nothing reported
    assert d.ledger.ended("t1") is Outcome.COMPLETE
    assert d.handle.study.trials[1].values == [0.6]

    d.launch("t2")  # a trial of its own reports its objective, or fails as before
    d.ledger.event("t2", end(Outcome.COMPLETE))
    assert d.ledger.ended("t2") is Outcome.FAIL


def test_trial_that_never_started_still_gets_a_run(
    write_config: ConfigWriter, driver: DriverFactory
) -> None:
    d = driver(load_config(write_config()))
    assert d.ledger.open("t0", ADMISSION) is not None
    d.ledger.ended("t0", crash="could not place the trial")
    run = d.tracker.client.get_run(d.run_id(0))
    assert run.info.status == "FAILED"
    assert d.handle.study.trials[0].user_attrs[attrs.DURATION] == 0.0


def test_interrupted_trials_are_requeued_and_not_counted(
    write_config: ConfigWriter, driver: DriverFactory
) -> None:
    d = driver(load_config(write_config()))
    params = d.launch("t0").trial.params
    d.ledger.event("t0", report(0, score=0.5))

    assert d.ledger.interrupt_open() == 1

    trials = d.handle.study.trials
    assert trials[0].state == TrialState.FAIL
    assert trials[0].user_attrs[attrs.OUTCOME] == "interrupted"
    assert trials[1].state == TrialState.WAITING
    assert trials[1].user_attrs[attrs.RETRY_OF] == 0
    assert count_budget(trials) == BudgetCount(finished=0, running=0)
    assert d.tracker.client.get_run(d.run_id(0)).info.status == "KILLED"
    again = d.launch("t1").trial.params
    assert again["x"] == params["x"]


def test_pruner_verdicts_reach_the_board_and_the_reason_the_records(
    write_config: ConfigWriter, driver: DriverFactory
) -> None:
    d = driver(load_config(write_config(PRUNE_CONFIG)))
    board = d.parts.board
    assert isinstance(board, LocalVerdictBoard)
    d.launch("good")
    d.complete("good", 1.0, 1.0, 1.0)

    d.launch("bad")
    d.ledger.event("bad", report(0, score=0.1))
    assert board.verdict(1, 0) is True
    # Shown within a second (FLUSH_S: the next upkeep writes it), while the trial runs.
    d.tracker.flush()
    live = d.tracker.client.get_run(d.run_id(1))
    assert live.info.status == "RUNNING"
    assert live.data.tags["hpsearch.pruned_at_step"] == "0"
    d.ledger.event("bad", end(Outcome.PRUNED))
    d.ledger.ended("bad")

    assert board.verdict(1, 0) is None  # forgotten at the end
    bad = d.handle.study.trials[1]
    assert bad.state == TrialState.PRUNED
    assert bad.user_attrs[attrs.PRUNED_AT] == 0
    reason = bad.user_attrs[attrs.PRUNE_REASON]
    assert reason.startswith("score 0.1 at step 0 (best so far) is below the median 1 of 1")
    assert "MedianPruner" in reason
    run = d.tracker.client.get_run(d.run_id(1))
    assert run.info.status == "FINISHED"  # KILLED is for interrupted trials
    assert run.data.tags["hpsearch.outcome"] == "pruned"
    assert run.data.tags["hpsearch.state"] == "PRUNED"
    assert run.data.tags["hpsearch.pruned_at_step"] == "0"
    assert run.data.tags["hpsearch.prune_reason"] == reason
    assert f"trial 1 PRUNED at step 0: {reason[:60]}" in d.printed


def test_a_trial_that_pruned_itself_keeps_its_own_message(
    write_config: ConfigWriter, driver: DriverFactory
) -> None:
    d = driver(load_config(write_config()))
    d.launch("t0")
    d.ledger.event("t0", report(0, score=0.5))
    pruned = WorkerEvent(EventKind.END, outcome=Outcome.PRUNED, end=EndReport(reason="too slow"))
    d.ledger.event("t0", pruned)
    d.ledger.ended("t0")
    trial = d.handle.study.trials[0]
    assert trial.user_attrs[attrs.PRUNE_REASON] == "the training function pruned itself: too slow"


def test_a_trial_that_sent_its_end_keeps_its_outcome_when_the_search_stops(
    write_config: ConfigWriter, driver: DriverFactory
) -> None:
    d = driver(load_config(write_config()))
    d.launch("done")
    d.ledger.event("done", report(0, score=0.5))
    d.ledger.event("done", end(Outcome.COMPLETE))
    d.launch("busy")

    assert d.ledger.interrupt_open() == 1

    states = [t.state for t in d.handle.study.trials]
    assert states[:2] == [TrialState.COMPLETE, TrialState.FAIL]
    assert d.handle.study.trials[2].user_attrs[attrs.RETRY_OF] == 1


def test_gpu_placement_load_and_series_reach_mlflow_and_optuna(
    write_config: ConfigWriter, driver: DriverFactory
) -> None:
    gpus = LoadModelBackend([GpuInfo(0, "sim", 6141.0, 115.0)])
    d = driver(load_config(write_config()), gpus=gpus)
    assert d.monitor is not None
    d.launch("t0")
    d.launch("t1")
    node = d.session.local_node_id
    here = Assignment(gpus=0.5, gpu_ids=("0",), node_id=node, pid=41)
    elsewhere = Assignment(gpus=0.5, gpu_ids=("0",), node_id="there", pid=42)
    load = GpuLoad(11.4, 167.0)
    d.ledger.event("t0", WorkerEvent(EventKind.GPU_LOAD, gpu_load=load, assigned=here))
    d.ledger.event("t1", WorkerEvent(EventKind.GPU_LOAD, gpu_load=load, assigned=elsewhere))
    for _ in range(3):
        d.clock.now += 1.0
        d.monitor.sample_now()
    d.ledger.event("t0", report(0, score=0.5))
    d.ledger.event("t1", report(0, score=0.4))
    for trial_id in ("t0", "t1"):
        d.ledger.event(trial_id, end(Outcome.COMPLETE))
        d.ledger.ended(trial_id)

    client = d.tracker.client
    sampled = client.get_run(d.run_id(0))
    history = client.get_metric_history(d.run_id(0), "system/gpu_0_utilization_percentage")
    assert [m.value for m in history] == [11.4, 11.4, 11.4]
    assert sampled.data.metrics["gpu_process_memory_peak_mb"] == 167.0
    assert sampled.data.tags["hpsearch.gpu_index"] == "0"
    assert sampled.data.tags["hpsearch.gpu_ids"] == "0"
    assert d.handle.study.trials[0].user_attrs[attrs.GPU]["declared_load"] == {
        "utilization_pct": 11.4,
        "memory_mb": 167.0,
    }
    assert d.handle.study.trials[0].user_attrs[attrs.ASSIGNED]["pid"] == 41
    # The other trial ran on a node whose GPUs this monitor does not read.
    other = client.get_run(d.run_id(1))
    assert "no GPU monitor reads Ray node there" in other.data.tags["hpsearch.gpu_telemetry"]
    assert not [name for name in other.data.metrics if name.startswith("gpu_")]
    assert attrs.GPU not in d.handle.study.trials[1].user_attrs
    assert gpus.sample(d.clock())[0].utilization_pct == 0.0, "ended trials leave the GPU"


def test_objective_until_a_target_takes_the_value_where_the_target_was_reached(
    write_config: ConfigWriter, driver: DriverFactory
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
    d = driver(config)
    for trial_id, scores in (("fast", [0.5, 0.95, 0.97]), ("never", [0.4, 0.6, 0.7])):
        d.launch(trial_id)
        for step, score in enumerate(scores):
            d.ledger.event(trial_id, report(step, score=score, seconds=10.0 * (step + 1)))
        d.ledger.event(trial_id, end(Outcome.COMPLETE))
        d.ledger.ended(trial_id)

    study = d.handle.study
    assert study.metric_names == ["score", "seconds@score>=0.9"]
    assert study.trials[0].values == [0.97, 20.0]  # seconds at the first report with score >= 0.9
    assert study.trials[1].values == [0.7, float("inf")]  # never reached: the worst value
    assert [t.number for t in study.best_trials] == [0]
    reached = d.tracker.client.get_run(d.run_id(0)).data
    assert reached.metrics["seconds_to_score"] == 20.0
    missed = d.tracker.client.get_run(d.run_id(1)).data
    assert "seconds_to_score" not in missed.metrics
    assert missed.tags["hpsearch.seconds_to_score"] == "score>=0.9 not reached"


def _oom_end(step: int | None = 1, cap_mb: float | None = None) -> WorkerEvent:
    oom = OomReport(
        kind="torch",
        message="CUDA out of memory. Tried to allocate 512 MiB",
        step=step,
        peak_mb=2900.0,
        cap_mb=cap_mb,
    )
    return WorkerEvent(kind=EventKind.END, outcome=Outcome.PRUNED, end=EndReport(oom=oom))


def test_out_of_memory_is_pruned_retried_alone_then_infeasible_and_predicted(
    write_config: ConfigWriter, driver: DriverFactory
) -> None:
    config = load_config(
        write_config({"space": {"batch_size": [64, 128], "x": 0.5}, "study": {"n_trials": 10}})
    )
    d = driver(
        config,
        policy=StaticPolicy(trials_per_gpu=2),
        gpus=LoadModelBackend([GpuInfo(0, "sim", 6141.0, 115.0)]),
    )
    study = d.handle.study
    study.enqueue_trial({"batch_size": 64})

    # 1. Out of memory while sharing a GPU (half of it): pruned, not held against the config.
    shared = d.parts.scheduler.suggest("shared")
    assert isinstance(shared, TrialLaunch)
    assert shared.admission.gpus == 0.5
    d.ledger.started("shared")
    d.clock.now += 3.0
    d.ledger.event("shared", report(0, score=0.1))
    d.ledger.event("shared", _oom_end(cap_mb=3070.0))
    assert d.ledger.ended("shared") is Outcome.PRUNED
    first = study.trials[0]
    assert first.state == TrialState.PRUNED
    assert first.user_attrs[attrs.OOM]["infeasible"] is False
    assert first.user_attrs[attrs.OOM]["cap_mb"] == 3070.0
    assert "runs again alone on a whole GPU" in first.user_attrs[attrs.PRUNE_REASON]
    assert first.constraints == {}
    assert count_budget(study.trials).finished == 0  # its re-run will count instead

    # 2. The re-run gets a whole GPU; it runs out too: now it is infeasible.
    alone = d.parts.scheduler.suggest("alone")
    assert isinstance(alone, TrialLaunch)
    assert alone.admission.gpus == 1.0
    d.ledger.started("alone")
    d.clock.now += 1.0
    d.ledger.event("alone", _oom_end(step=None))
    d.ledger.ended("alone")
    second = study.trials[1]
    assert second.params == first.params
    assert second.user_attrs[attrs.ALONE_RETRY_OF] == 0
    assert second.state == TrialState.PRUNED
    assert second.user_attrs[attrs.INFEASIBLE] is True
    assert second.constraints == {"oom": 1.0}  # what TPE steers away from
    reason = second.user_attrs[attrs.PRUNE_REASON]
    assert reason.startswith("oom: CUDA out of memory. Tried to allocate 512 MiB before its first")
    assert "(peak 2900 MiB, whole GPU, 0 co-tenant trial(s))" in reason
    run = d.tracker.client.get_run(d.run_id(1))
    assert run.info.status == "FINISHED"
    assert run.data.tags["hpsearch.state"] == "PRUNED"
    assert run.data.tags["hpsearch.prune_kind"] == "oom"
    assert run.data.tags["hpsearch.prune_reason"] == reason
    assert run.data.tags["hpsearch.oom.peak_mb"] == "2900.0"
    assert count_budget(study.trials).finished == 1
    # 3. A larger batch with the same other parameters is not launched.
    study.enqueue_trial({"batch_size": 128})
    whole = Admission(cpus=1.0, gpus=1.0, reason="alone")
    assert d.ledger.open("bigger", whole) is None
    predicted = study.trials[2]
    assert predicted.state == TrialState.PRUNED
    assert predicted.user_attrs[attrs.OOM] == {"predicted_from": 1, "kind": "predicted"}
    assert predicted.user_attrs[attrs.PRUNE_REASON].startswith(
        "predicted_oom: needs at least the memory of trial 1"
    )
    assert "batch_size 128 >= 64" in predicted.user_attrs[attrs.PRUNE_REASON]
    assert predicted.constraints == {"oom": 1.0}
    run = d.tracker.client.get_run(d.run_id(2))
    assert (run.info.status, run.data.tags["hpsearch.prune_kind"]) == ("FINISHED", "predicted_oom")

    d.tracker.flush()
    parent = d.tracker.client.get_run(d.parent.run_id).data.metrics
    assert parent["trials_oom"] == 2
    assert parent["trials_predicted_oom"] == 1
    # Every GPU-second of this search (3 s on half a GPU, 1 s on a whole one) ran out.
    assert parent["oom_wasted_gpu_seconds_share"] == pytest.approx(1.0)

    listed = CliRunner().invoke(main, ["best", config.source, "--oom", "--json"])
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.output)
    assert [r["trial_number"] for r in rows] == [0, 1, 2]
    assert rows[1]["oom"]["infeasible"] is True
    assert rows[2]["prune_reason"].startswith("predicted_oom")
    assert [t.number for t in load(config.source).oom_trials()] == [0, 1, 2]


def test_a_worker_killed_for_host_memory_is_pruned_not_failed(
    write_config: ConfigWriter, driver: DriverFactory
) -> None:
    d = driver(load_config(write_config()))
    d.launch("t0")
    d.ledger.event("t0", report(0, score=0.5))
    crash = (
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on "
        "memory. Memory on the node was 23.1GB / 24GB (0.96)"
    )
    assert d.ledger.ended("t0", crash=crash) is Outcome.PRUNED
    trial = d.handle.study.trials[0]
    assert trial.state == TrialState.PRUNED
    assert trial.user_attrs[attrs.OOM]["kind"] == "host"
    assert trial.user_attrs[attrs.OOM]["infeasible"] is True  # sharing a GPU is not the cause
    assert (
        "Ray reported host memory exhaustion (OutOfMemoryError)"
        in (trial.user_attrs[attrs.PRUNE_REASON])
    )
    assert d.handle.study.trials[0].user_attrs[attrs.OOM]["step"] == 0
    assert not any(t.state == TrialState.WAITING for t in d.handle.study.trials)


def test_maintain_stamps_open_trials_reclaims_a_dead_drivers_and_flushes_gpu_series(
    write_config: ConfigWriter, driver: DriverFactory
) -> None:
    config = load_config(write_config())
    gpus = LoadModelBackend([GpuInfo(0, "sim", 6141.0, 115.0)])
    d = driver(config, gpus=gpus)
    assert d.monitor is not None
    # A trial of another driver, which stopped stamping it long ago.
    lost = open_study(config).ask(config.search_space.distributions())
    d.launch("t0")
    here = Assignment(gpus=0.5, gpu_ids=("0",), node_id=d.session.local_node_id, pid=7)
    d.ledger.event("t0", WorkerEvent(EventKind.GPU_LOAD, gpu_load=GpuLoad(20, 100), assigned=here))
    start = d.clock()
    d.ledger.maintain(start)  # stamps t0; nothing is stale yet
    assert d.handle.study.trials[lost.number].state == TrialState.RUNNING
    age_heartbeat(config.study.storage, lost.number, seconds=3600)
    age_heartbeat(config.study.storage, 1, seconds=3600)  # t0 too: only a stamp saves it

    d.ledger.maintain(start + 5.0)  # half the heartbeat interval: t0 is stamped again
    d.ledger.maintain(start + 15.0)  # half the grace period: the dead driver's trial goes

    states = {t.number: t.state for t in d.handle.study.trials}
    assert states[lost.number] == TrialState.FAIL
    assert states[1] == TrialState.RUNNING
    assert [t.state for t in d.handle.study.trials if t.number > 1] == [TrialState.WAITING]
    # GPU series reach MLflow while the trial runs.
    for _ in range(2):
        d.clock.now += 1.0
        d.monitor.sample_now()
    d.ledger.maintain(d.clock() + 20.0)
    series = d.tracker.client.get_metric_history(d.run_id(1), "system/gpu_0_utilization_percentage")
    assert [m.value for m in series] == [20.0, 20.0]


def test_nothing_is_launched_while_the_policy_has_no_room(
    write_config: ConfigWriter, driver: DriverFactory
) -> None:
    d = driver(load_config(write_config({"execution": {"max_concurrent": 1}})))
    assert isinstance(d.parts.scheduler.suggest("a"), TrialLaunch)
    assert d.parts.scheduler.suggest("b") is Hold.WAIT
    assert len(d.handle.study.trials) == 1  # nothing asked of Optuna while waiting


def test_a_worker_past_its_limit_and_the_grace_is_named_for_killing_then_fails_as_killed(
    write_config: ConfigWriter, driver: DriverFactory
) -> None:
    d = driver(load_config(write_config({"execution": {"trial_timeout": 10}})))
    d.launch("t0")
    d.ledger.event("t0", report(0, score=0.5))
    d.clock.now += 10.0
    assert d.ledger.unresponsive() == []  # at its limit, its own timer ends it
    d.clock.now += 4.9
    assert d.ledger.unresponsive() == []
    d.clock.now += 0.1
    assert d.ledger.unresponsive() == ["t0"]

    assert d.ledger.ended("t0", crash="RayActorError: the actor died") is Outcome.FAIL
    (trial,) = d.handle.study.trials
    assert trial.user_attrs[attrs.ERROR] == (
        "timeout: ran past execution.trial_timeout (10 s) did not end, and was killed by the "
        "driver; last reported step: 0"
    )
    assert d.ledger.unresponsive() == []


def test_a_trial_past_its_limit_when_the_search_stops_fails_and_is_not_queued_again(
    write_config: ConfigWriter, driver: DriverFactory
) -> None:
    d = driver(load_config(write_config({"execution": {"trial_timeout": 10}})))
    d.launch("t0")
    d.launch("t1")
    d.ledger.event("t0", report(3, score=0.5))
    d.clock.now += 11.0  # both past the limit

    assert d.ledger.interrupt_open() == 0

    states = [(t.state.name, t.user_attrs[attrs.OUTCOME]) for t in d.handle.study.trials]
    assert states == [("FAIL", "fail"), ("FAIL", "fail")]  # nothing WAITING: not run again
    assert d.handle.study.trials[0].user_attrs[attrs.ERROR].endswith("last reported step: 3")


def test_a_fused_groups_members_share_a_gpu_as_one_process(
    write_config: ConfigWriter, driver: DriverFactory
) -> None:
    # Two groups of two members on one GPU: two processes take turns there, so a
    # member reports 2 sharing, and one that runs out has one co-tenant (the other
    # process), not its fellow member.
    config = load_config(
        write_config(
            {
                "train": "hpsearch.workloads.simulated_gpu:train",
                "space": {"width": [64], "batch_size": [32], "lr": [0.01, 0.02], "epochs": 2},
                "fusion": {
                    "mode": "fixed",
                    "members": 2,
                    "train": "hpsearch.workloads.simulated_gpu:train_members",
                },
                "study": {"n_trials": 6},
            }
        )
    )
    d = driver(
        config,
        policy=StaticPolicy(trials_per_gpu=2),
        gpus=LoadModelBackend([GpuInfo(0, "sim", 6141.0, 115.0)]),
    )
    group, other = d.launch("group"), d.launch("other")
    assert [len(group.members), len(other.members)] == [2, 2]  # two processes, 4 trials
    node = d.session.local_node_id
    for pid, launch in enumerate([group, other]):
        # As a fused worker sends them: each member's first event says where it runs.
        assigned = Assignment(gpus=0.5, gpu_ids=("0",), node_id=node, pid=pid)
        for member in launch.members:
            load = WorkerEvent(
                EventKind.GPU_LOAD,
                gpu_load=GpuLoad(20, 300),
                assigned=assigned,
                member=member.number,
            )
            d.ledger.event("group" if launch is group else "other", load)
    first, second = (m.number for m in group.members)
    d.ledger.event(
        "group", WorkerEvent(EventKind.REPORT, step=0, metrics={"score": 0.5}, member=first)
    )
    d.ledger.event(
        "group",
        WorkerEvent(EventKind.END, outcome=Outcome.PRUNED, end=_oom_end().end, member=first),
    )
    d.ledger.event("group", WorkerEvent(EventKind.END, outcome=Outcome.COMPLETE, member=second))
    d.ledger.ended("group")
    d.tracker.flush()
    run = d.tracker.client.get_run(d.run_id(first))
    assert run.data.metrics["trials_sharing_gpu"] == 2.0
    assert "1 co-tenant trial(s)" in d.handle.study.trials[first].user_attrs[attrs.PRUNE_REASON]


@pytest.mark.parametrize(
    ("first", "limit", "stops"),
    [
        (Outcome.FAIL, 5, True),  # the first five failed: a cause they share
        (Outcome.COMPLETE, 5, False),  # one completed first: failures of their own
        (Outcome.FAIL, 0, False),  # max_initial_failures: 0, never
    ],
)
def test_a_run_whose_first_trials_all_fail_starts_no_more(
    write_config: ConfigWriter, driver: DriverFactory, first: Outcome, limit: int, stops: bool
) -> None:
    d = driver(load_config(write_config({"study": {"max_initial_failures": limit}})))
    outcomes = [first, Outcome.FAIL, Outcome.FAIL, Outcome.FAIL, Outcome.FAIL]
    for index, outcome in enumerate(outcomes):
        d.launch(f"t{index}")
        if outcome is Outcome.COMPLETE:
            d.ledger.event(f"t{index}", report(0, score=0.5))
        error = "ImportError: no module named 'missing'" if outcome is Outcome.FAIL else ""
        d.ledger.event(f"t{index}", end(outcome, error))
        d.ledger.ended(f"t{index}")
    budget = d.parts.budget
    assert budget is not None
    assert budget.stopped == (
        "its first 5 trials failed and none completed (study.max_initial_failures); fix "
        "what they say, or raise it"
        if stops
        else ""
    )
