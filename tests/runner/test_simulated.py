"""Whole searches in simulated time: every production part but Ray, on a virtual clock.

The simulated runner plays the simulated GPU workload's plan for each trial,
so what took minutes of real trials under Ray takes seconds, and what ran at
once is known exactly (each trial's GPU series counts the trials that shared
its GPU, on the virtual clock).
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from optuna.trial import FrozenTrial
from rich.console import Console

import hpsearch
from hpsearch import attrs
from hpsearch.api import RunOutcome
from hpsearch.config import load_config
from hpsearch.errors import HpsearchError
from hpsearch.oom import OomRecord
from hpsearch.placement import (
    Admission,
    ClusterCapacity,
    ResourcePolicy,
    RunningTrial,
)
from hpsearch.runner import SimulatedRunner
from hpsearch.simulation import TrialPlan
from hpsearch.study import open_study
from hpsearch.tracking import TRIAL_NUMBER_TAG, MemoryTracker, Tracker
from hpsearch.workloads.simulated_gpu import gpu_profile, plan
from tests.conftest import ConfigWriter, SwitchAfter, load_search, mlflow_client

pytestmark = pytest.mark.usefixtures("seeded_store")

UTILIZATION = "system/gpu_0_utilization_percentage"
OWN_MEMORY = "system/gpu_0_process_memory_megabytes"


def _run(
    path: Path, policy: ResourcePolicy | None = None, tracker: Tracker | None = None
) -> RunOutcome:
    return hpsearch.run(path, runner=SimulatedRunner(), policy=policy, tracker=tracker)


def _sharing(trial: FrozenTrial) -> int:
    """The most trials that ran on the trial's GPU at once while it ran (virtual clock)."""
    return int(trial.user_attrs[attrs.GPU]["trials_sharing_max"])


def _decisions(project: Path, run_id: str) -> list[dict[str, Any]]:
    client = mlflow_client(project)
    path = client.download_artifacts(run_id, "packing_decisions.json", str(project))
    decisions: list[dict[str, Any]] = json.loads(Path(path).read_text())
    return decisions


def test_trials_that_leave_the_gpu_idle_are_packed_and_spread_over_two_gpus(
    write_config: ConfigWriter, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The seeds' RTX 4050 case: 11% utilisation, 167 MiB of 6 GiB per trial.
    path = write_config(load_search(util=11, memory=167, trials=20, seconds=8, gpus=2))

    outcome = _run(path)

    study = outcome.results.study
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 20
    printed = capsys.readouterr().out
    assert "packing gpu0: 1 trial(s) · no trial of this search measured yet" in printed
    assert re.search(r"packing gpu1: 1 → \d trial\(s\) · trying \d: room: ", printed)
    first, second = (t.user_attrs[attrs.RESOURCES] for t in study.trials[:2])
    assert {first["gpu"], second["gpu"]} == {0, 1}  # spread, not GPU 0 first
    assert first["gpus"] == 1.0  # unmeasured: alone
    for gpu in (0, 1):
        on_gpu = [t for t in study.trials if t.user_attrs[attrs.RESOURCES]["gpu"] == gpu]
        # Eight CPUs over two GPUs feed four trials each, and both GPUs got there.
        assert max(_sharing(t) for t in on_gpu) == 4
    shares = [t.user_attrs[attrs.RESOURCES]["gpus"] for t in study.trials]
    assert min(shares) == 0.25  # later trials got smaller shares as counts rose
    assert any(t.user_attrs[attrs.RESOURCES]["co_tenants"] for t in study.trials)

    client = mlflow_client(project)
    assert outcome.mlflow_parent_run_id is not None
    allowed = client.get_metric_history(outcome.mlflow_parent_run_id, "packing_gpu0_trials_allowed")
    assert max(m.value for m in allowed) == 4
    assert client.get_metric_history(outcome.mlflow_parent_run_id, "packing_gpu1_trials")
    decisions = _decisions(project, outcome.mlflow_parent_run_id)
    rises = [d for d in decisions if d["previous"] and d["limit"] > d["previous"]]
    assert rises
    assert all("room: " in d["reason"] for d in rises)
    run = client.search_runs(
        [client.get_experiment_by_name("test-study").experiment_id],  # type: ignore[union-attr]
        f"tags.`{TRIAL_NUMBER_TAG}` = '5'",
    )[0]
    assert run.data.tags["hpsearch.gpu"] in {"0", "1"}
    assert "hpsearch.co_tenants_at_start" in run.data.tags
    assert run.data.tags["hpsearch.mps"] == "off"
    # Each report says how many shared the GPU while its speed was measured.
    sharing = client.get_metric_history(run.info.run_id, "trials_sharing_gpu")
    assert [m.step for m in sharing] == [0, 1, 2, 3]
    assert max(m.value for m in sharing) > 1
    parent = client.get_run(outcome.mlflow_parent_run_id).data.tags
    # Each GPU, once shared, would have had MPS: not with simulated GPUs.
    unreal = "not started: no NVIDIA GPU is read here; time-sliced"
    assert parent["hpsearch.mps"] == f"gpu0: {unreal}; gpu1: {unreal}"
    assert f"MPS on gpu0: {unreal}" in printed
    assert parent["hpsearch.packing_mode"] == "auto"


def test_the_speed_objective_is_each_trials_solo_speed_however_packed(
    write_config: ConfigWriter, project: Path
) -> None:
    # Trials of a modelled size, three to a GPU: each measures its neighbours' load
    # in its samples_per_sec, and the objective is what it would measure alone.
    config = load_search(util=60, memory=300, trials=6, seconds=8)
    config["space"].update(utilization_pct=None, memory_mb=None, width=[256, 1024])
    config["objective"] = None  # the base config's, deleted
    config["objectives"] = [
        {"metric": "val_accuracy", "direction": "maximize"},
        {"metric": "samples_per_sec", "direction": "maximize"},
    ]
    config["packing"] = {"mode": "fixed", "trials_per_gpu": 3}

    outcome = _run(write_config(config))

    trials = outcome.results.study.trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 6
    slowed = 0
    for trial in trials:
        solo = gpu_profile(64, trial.params["width"], 1).samples_per_sec
        metrics = trial.user_attrs[attrs.METRICS]
        assert trial.values[1] == pytest.approx(solo, rel=1e-6)
        assert metrics["samples_per_sec_solo"] == trial.values[1]
        # As measured: its last epoch's rate, slowed by whoever shared the GPU then.
        assert metrics["samples_per_sec"] == pytest.approx(solo * metrics["gpu_speed_share"])
        slowed += metrics["gpu_speed_share"] < 0.99
    assert slowed >= 3
    client = mlflow_client(project)
    run = client.search_runs(
        [client.get_experiment_by_name("test-study").experiment_id],  # type: ignore[union-attr]
        f"tags.`{TRIAL_NUMBER_TAG}` = '0'",
    )[0]
    shares = client.get_metric_history(run.info.run_id, "gpu_speed_share")
    assert [m.step for m in shares] == [0, 1, 2, 3]
    assert min(m.value for m in shares) < 0.99


@pytest.mark.parametrize(
    ("util", "memory", "why"),
    [(95, 800, "throughput 95.0% each → 1"), (20, 3500, "memory 5527/3500 MiB → 1")],
    ids=["saturating", "memory-heavy"],
)
def test_trials_that_fill_the_gpu_run_one_at_a_time(
    write_config: ConfigWriter, project: Path, util: float, memory: float, why: str
) -> None:
    path = write_config(load_search(util=util, memory=memory, trials=5, seconds=3))

    outcome = _run(path)

    study = outcome.results.study
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 5
    assert [_sharing(t) for t in study.trials] == [1] * 5
    assert outcome.mlflow_parent_run_id is not None
    decisions = _decisions(project, outcome.mlflow_parent_run_id)
    assert {d["limit"] for d in decisions} == {1}
    reasons = [t.user_attrs[attrs.RESOURCES]["reason"] for t in study.trials[1:]]
    assert any(why in r for r in reasons), reasons


def test_an_oom_under_packing_lowers_the_count(write_config: ConfigWriter, project: Path) -> None:
    # Light trials pack; then a 4 GB one, admitted among them, gets a cap of a third
    # or half of 6141 MiB, runs out, is retried alone, and its GPU takes one fewer.
    path = write_config(load_search(util=11, memory=[167, 4000], trials=12, seconds=6))
    study = open_study(load_config(path)).study
    for memory in [167] * 6 + [4000] + [167] * 3:
        study.enqueue_trial({"lr": 3e-3, "memory_mb": memory})

    outcome = _run(path)

    study = outcome.results.study
    assert not [t for t in study.trials if t.state.name == "FAIL"]
    assert outcome.mlflow_parent_run_id is not None
    decisions = _decisions(project, outcome.mlflow_parent_run_id)
    lowered = [d for d in decisions if "ran out of memory" in d["reason"]]
    assert lowered, decisions
    assert all(d["limit"] < d["previous"] for d in lowered)
    heavy = study.trials[6]
    assert heavy.state.name == "PRUNED"
    assert heavy.user_attrs[attrs.OOM]["co_tenants"] >= 1
    retried = [t for t in study.trials if t.user_attrs.get(attrs.ALONE_RETRY_OF) == 6]
    assert [t.state.name for t in retried] == ["COMPLETE"]
    assert retried[0].user_attrs[attrs.RESOURCES]["gpus"] == 1.0
    assert _sharing(retried[0]) == 1


def test_an_oom_while_sharing_counts_its_co_tenant_and_spares_it(
    write_config: ConfigWriter,
) -> None:
    # Two at a time on one 6 GB GPU: 64x8192 needs 4.5 GB (fits alone, not in 3 GB),
    # 64x512 about 0.4 GB; the two start together and the small one outlives the OOM.
    path = write_config(
        {
            "train": "hpsearch.workloads.simulated_gpu:train",
            "study": {"n_trials": 3},
            "space": {
                "x": None,
                "steps": None,
                "batch_size": 64,
                "width": [512, 8192],
                "depth": 4,
                "epochs": 2,
                "steps_per_epoch": 100,
            },
            "objective": {"metric": "val_accuracy", "direction": "maximize"},
            "execution": {"max_concurrent": 2},
            "packing": {"mode": "fixed", "trials_per_gpu": 2},
            "telemetry": {"backend": "simulated", "interval_s": 0.2},
            "oom": {"grows_memory": ["width"]},
        }
    )
    queued = open_study(load_config(path)).study
    for width in (8192, 512):
        queued.enqueue_trial({"width": width})

    trials = _run(path).results.study.trials

    heavy, light = trials[:2]
    assert heavy.state.name == "PRUNED"
    record = OomRecord.from_dict(heavy.user_attrs[attrs.OOM])
    assert record.co_tenants == 1
    assert record.report is not None
    assert record.report.cap_mb == pytest.approx(3070.5)
    assert not record.infeasible
    assert light.state.name == "COMPLETE"  # the neighbour went on
    (alone,) = [t for t in trials if t.user_attrs.get(attrs.ALONE_RETRY_OF) == heavy.number]
    assert alone.state.name == "COMPLETE"
    assert alone.user_attrs[attrs.RESOURCES]["gpus"] == 1.0


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
            "execution": {"max_concurrent": 2},
            "packing": {"mode": "fixed", "trials_per_gpu": 2},
            "telemetry": {"backend": "simulated", "interval_s": 0.1},
        }
    )
    console = Console(file=io.StringIO(), width=200)
    outcome = hpsearch.run(path, console=console, runner=SimulatedRunner())
    assert "GPU telemetry: simulated: 1 GPU" in console.file.getvalue()  # type: ignore[attr-defined]

    client = mlflow_client(project)
    trials = outcome.results.study.trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 4
    sharing = []
    for trial in trials:
        run = client.get_run(trial.user_attrs[attrs.MLFLOW_RUN])
        metrics, tags = run.data.metrics, run.data.tags
        series = {
            name: client.get_metric_history(run.info.run_id, name)
            # MLflow's system-metric names: the run's System metrics tab shows them.
            for name in (UTILIZATION, "system/gpu_0_memory_usage_megabytes", OWN_MEMORY)
        }
        assert all(series.values()), f"trial {trial.number} lacks a GPU series"
        assert [m.step for m in series[UTILIZATION]] == list(range(len(series[UTILIZATION])))
        profile = gpu_profile(trial.params["batch_size"], trial.params["width"], 1)
        # The trial process's own memory is what its workload declared.
        assert metrics["gpu_process_memory_peak_mb"] == pytest.approx(profile.memory_mb)
        assert metrics["gpu_memory_peak_mb"] >= profile.memory_mb
        # Its GPU showed its own load once declared, and at times its co-tenant's too.
        others = [gpu_profile(b, w, 1).utilization_pct for b in (32, 512) for w in (128, 1024)]
        assert metrics["gpu_utilization_p95_pct"] >= profile.utilization_pct - 1e-6
        assert metrics["gpu_utilization_mean_pct"] <= profile.utilization_pct + max(others)
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
    assert "gpu_monitor_cpu_share_pct" in parent.data.metrics  # its level: bench_monitor.py
    report_files = [a.path for a in client.list_artifacts(parent.info.run_id)]
    assert "gpu_report.txt" in report_files


def test_a_trial_known_to_need_more_than_a_share_waits_for_a_whole_gpu(
    write_config: ConfigWriter,
) -> None:
    # Two per 6 GB GPU (3 GB each): 64x8192 needs 4.7 GB. The first runs out under its
    # share and re-runs alone; the next ones are known to need as much, and wait for a
    # whole GPU instead of running out first.
    path = write_config(
        {
            "train": "hpsearch.workloads.simulated_gpu:train",
            "study": {"n_trials": 5},
            "space": {
                "x": None,
                "steps": None,
                "batch_size": [64, 128],
                "width": [512, 8192],
                "depth": 4,
                "epochs": 2,
                "steps_per_epoch": 100,
            },
            "objective": {"metric": "val_accuracy", "direction": "maximize"},
            "execution": {"max_concurrent": 2},
            "packing": {"mode": "fixed", "trials_per_gpu": 2},
            "telemetry": {"backend": "simulated", "interval_s": 5},
            "oom": {"grows_memory": ["batch_size", "width"]},
        }
    )
    queued = open_study(load_config(path)).study
    for batch, width in ((64, 8192), (64, 512), (64, 8192), (128, 8192), (64, 512)):
        queued.enqueue_trial({"batch_size": batch, "width": width})

    trials = _run(path).results.study.trials

    assert not [t for t in trials if t.state.name == "FAIL"]
    first, _, second, larger = trials[:4]
    assert OomRecord.from_dict(first.user_attrs[attrs.OOM]).report is not None  # ran out once
    for trial in (second, larger):
        resources = trial.user_attrs[attrs.RESOURCES]
        assert trial.state.name == "COMPLETE", trial.user_attrs.get(attrs.PRUNE_REASON)
        assert attrs.OOM not in trial.user_attrs  # it never ran out
        assert resources["gpus"] == 1.0
        assert resources["waits_for_whole_gpu"].startswith("needs at least 3070 MiB (as trial 0")
    ran_out = [t for t in trials if attrs.OOM in t.user_attrs]
    assert [t.number for t in ran_out] == [0]


def test_search_learns_to_stay_out_of_memory(write_config: ConfigWriter) -> None:
    # scripts/bench_oom.py's search on a 1 GB simulated GPU, 100 trials, one at a time,
    # so the seeded search is the same every run; the bench measures it over seeds.
    batches = [64, 128, 256, 512, 1024, 2048, 4096, 8192]
    widths = [256, 512, 1024, 2048, 4096, 8192]
    path = write_config(
        {
            "train": "hpsearch.workloads.simulated_gpu:train",
            "study": {"n_trials": 100, "sampler": {"type": "tpe", "seed": 0}},
            "space": {
                "x": None,
                "steps": None,
                "batch_size": batches,
                "width": widths,
                "depth": {"type": "int", "low": 1, "high": 4},
                "lr": {"type": "float", "low": 1e-4, "high": 3e-2, "log": True},
                "epochs": 3,
                "steps_per_epoch": 5,
                "memory_budget_mb": 1024.0,
            },
            "objective": {"metric": "val_accuracy", "direction": "maximize"},
            "packing": {"mode": "fixed", "trials_per_gpu": 1},
            "telemetry": {"backend": "simulated", "simulated": {"memory_total_mb": 1024.0}},
            "oom": {"grows_memory": ["batch_size", "width", "depth"], "memory_neutral": ["lr"]},
        }
    )
    # What is learned lives in the study; MLflow's 100 runs would double the test's time.
    trials = _run(path, tracker=MemoryTracker()).results.study.trials
    assert len(trials) == 100
    assert not [t for t in trials if t.state.name == "FAIL"]
    records = {t.number: OomRecord.from_dict(t.user_attrs.get(attrs.OOM, {})) for t in trials}
    ran_out = [t for t in trials if attrs.OOM in t.user_attrs and not records[t.number].predicted]
    predicted = [t for t in trials if records[t.number].predicted]
    for trial in ran_out + predicted:
        assert trial.state.name == "PRUNED"
        assert trial.constraints == {"oom": 1.0}
    # Blind sampling would run out in a third of the trials (the share of the grid that
    # does not fit); the constraint and the predictor keep it to under half of that.
    grid = [(b, w, d) for b in batches for w in widths for d in range(1, 5)]
    infeasible = sum(gpu_profile(b, w, d).memory_mb > 1024 for b, w, d in grid) / len(grid)
    assert infeasible > 0.3
    launched = len(trials) - len(predicted)
    assert len(ran_out) / launched < infeasible / 2
    assert predicted, "a suggestion at least as large as one that ran out is not launched"
    early = sum(t.number < 50 for t in ran_out)
    late = len(ran_out) - early
    assert late < early, f"OOM trials: {early} in the first half, {late} in the second"


def test_a_policy_change_mid_search_changes_how_many_run_at_once(
    write_config: ConfigWriter,
) -> None:
    path = write_config(load_search(util=11, memory=167, trials=7, seconds=4))

    trials = _run(path, policy=SwitchAfter(3)).results.study.trials

    shares = [t.user_attrs[attrs.RESOURCES]["gpus"] for t in trials]
    assert shares == [1.0] * 3 + [0.5] * 4
    assert [_sharing(t) for t in trials[:3]] == [1, 1, 1]  # a whole GPU each: one at a time
    assert [_sharing(t) for t in trials[3:5]] == [2, 2]  # half a GPU each: two at once


def test_a_nearly_empty_gpu_doubles_its_count_once_a_sample(
    write_config: ConfigWriter, project: Path
) -> None:
    # As the H200 did (main-job-2026-11-27-nvidia-h200.json: 2, 4 and 8 trials at 0.6,
    # 0.81 and 1.02 s, sampled every 0.2 s): the decisions made when a sample is due
    # read that sample, so each doubling waits one sample, not two.
    config = load_search(util=3, memory=400, trials=12, seconds=0.5)
    config["space"]["cold_start_s"] = 2.0  # no step lands between samples while it ramps
    config["packing"] = {"max_trials_per_gpu": 8}
    config["telemetry"]["simulated"]["memory_total_mb"] = 23034.0  # an L4: room for 8
    path = write_config(config)

    outcome = hpsearch.run(path, runner=SimulatedRunner(tick_s=0.25))

    assert outcome.mlflow_parent_run_id is not None
    decisions = _decisions(project, outcome.mlflow_parent_run_id)
    rises = {d["limit"]: d["time"] for d in decisions if d["limit"] > (d["previous"] or 1)}
    assert sorted(rises) == [2, 4, 8]
    assert rises[4] - rises[2] == pytest.approx(0.25, abs=0.01)
    assert rises[8] - rises[4] == pytest.approx(0.25, abs=0.01)


def test_a_search_that_cannot_admit_anything_stops_with_a_clear_error(
    write_config: ConfigWriter,
) -> None:
    class Never(ResourcePolicy):
        def admit(
            self,
            running: Sequence[RunningTrial],
            capacity: ClusterCapacity,
            *,
            whole_gpu: bool = False,
        ) -> Admission | None:
            return None

    path = write_config(load_search(util=11, memory=167, trials=2, seconds=4))
    runner = SimulatedRunner(stall_s=30.0)
    with pytest.raises(HpsearchError, match="stalled: nothing ran or was admitted for 30"):
        hpsearch.run(path, runner=runner, policy=Never())


@pytest.mark.parametrize("grace", [None, 2])
def test_study_timeout_ends_the_search_short_and_its_grace_stops_running_trials(
    write_config: ConfigWriter, grace: int | None
) -> None:
    # One at a time (95% busy), 10 s each: at 25 s the third trial is 5 s from its end.
    search = load_search(util=95, memory=2000, trials=6, seconds=10)
    search["study"].update({"timeout": 25, "timeout_grace": grace})
    path = write_config(search)

    outcome = _run(path)

    trials = outcome.results.study.trials
    assert outcome.timed_out
    if grace is None:  # running trials finish, as in Optuna
        assert [t.state.name for t in trials] == ["COMPLETE"] * 3
        assert (outcome.short_of, outcome.interrupted, outcome.overdue) == (3, 0, False)
        assert 30 <= outcome.elapsed_s < 32
        return
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE", "FAIL", "WAITING"]
    assert (outcome.short_of, outcome.interrupted, outcome.overdue) == (4, 1, True)
    assert 27 <= outcome.elapsed_s < 28
    error = trials[2].user_attrs[attrs.ERROR]
    assert "2 s (study.timeout_grace) after study.timeout (25 s)" in error, error
    # It runs again, the same configuration, on the next hpsearch run.
    assert trials[3].system_attrs["fixed_params"] == trials[2].params


def test_a_trial_whose_model_raises_fails_with_its_traceback_and_the_search_goes_on(
    write_config: ConfigWriter,
) -> None:
    # As a worker's train raising: the trial fails, the search goes on.
    search = load_search(util=20, memory=300, trials=3, seconds=2)
    search["space"]["width"] = [256, 7]  # the model below refuses an odd width
    search["execution"] = {"max_concurrent": 1, "num_cpus": 8}
    path = write_config(search)
    queued = open_study(load_config(path)).study
    for width in (256, 7, 256):
        queued.enqueue_trial({"width": width})

    def model(
        params: dict[str, Any], gpu_memory_mb: float | None, memory_cap_mb: float | None
    ) -> TrialPlan:
        if params["width"] % 2:
            raise ValueError(f"odd width {params['width']}")
        return plan(params, gpu_memory_mb, memory_cap_mb)

    outcome = hpsearch.run(path, runner=SimulatedRunner(model))

    trials = outcome.results.study.trials
    assert [t.state.name for t in trials] == ["COMPLETE", "FAIL", "COMPLETE"]
    assert "ValueError: odd width 7" in trials[1].user_attrs[attrs.ERROR]


MEMBERS_TRAIN = "hpsearch.workloads.simulated_gpu:train_members"


def _fused_search(members: int, trials: int, **space: Any) -> dict[str, Any]:
    config = load_search(util=11, memory=1400, trials=trials, seconds=8)
    config["space"].update(space)
    config["packing"] = {"mode": "off"}
    config["fusion"] = {"mode": "fixed", "members": members, "train": MEMBERS_TRAIN}
    return config


def test_a_fused_group_plays_as_one_process_its_members_slowed_by_the_fused_rule(
    write_config: ConfigWriter,
) -> None:
    from hpsearch.simulation import GroupPlan

    config = _fused_search(members=4, trials=8)
    path = write_config(config)

    outcome = _run(path)

    trials = outcome.results.study.trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 8
    assert [t.user_attrs[attrs.FUSED_GROUP]["members"] for t in trials] == [4] * 8
    assert len({t.user_attrs[attrs.FUSED_GROUP]["group"] for t in trials}) == 2
    space = {k: v for k, v in config["space"].items() if v is not None and not isinstance(v, dict)}
    for trial in trials:
        alone = plan({**space, **trial.params}, 6141.0)
        group = GroupPlan((alone,) * 4)
        solo = alone.epochs[-1].metrics["samples_per_sec"]
        # Each member measured its share of the group's speed; its twin is its own alone.
        measured = trial.user_attrs[attrs.METRICS]
        assert measured["samples_per_sec"] == pytest.approx(solo / group.slowdown(4))
        assert measured["samples_per_sec_solo"] == pytest.approx(solo)
        assert trial.value == pytest.approx(alone.epochs[-1].metrics["val_accuracy"])
    # One group after the other, each four epochs at the group's pace: 2 x 8 s x slowdown.
    slowdown = GroupPlan((plan(space, 6141.0),) * 4).slowdown(4)
    assert outcome.elapsed_s == pytest.approx(2 * 8 * slowdown, rel=0.02)


def test_a_fused_group_out_of_memory_is_split_in_halves_as_in_a_worker(
    write_config: ConfigWriter, project: Path
) -> None:
    # 1400 MiB a member, 900 of it beyond the context: four need 4100 of 3000, two fit.
    config = _fused_search(members=4, trials=6)
    config["telemetry"]["simulated"]["memory_total_mb"] = 3000
    path = write_config(config)

    outcome = _run(path)

    trials = outcome.results.study.trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 6
    assert [t.user_attrs[attrs.FUSED_GROUP]["members"] for t in trials] == [4] * 4 + [2] * 2
    assert not any(attrs.OOM in t.user_attrs for t in trials)  # no member is charged
    client = mlflow_client(project)
    assert outcome.mlflow_parent_run_id is not None
    local = client.download_artifacts(
        outcome.mlflow_parent_run_id, "packing_decisions.json", str(project)
    )
    [decision] = [d for d in json.loads(Path(local).read_text()) if d["decides"] == "members"]
    assert decision["reason"] == "a group of 4 ran out of memory: at most 2"


def test_a_member_alone_out_of_memory_is_charged_as_a_trial_is(write_config: ConfigWriter) -> None:
    config = _fused_search(members=2, trials=2)
    config["telemetry"]["simulated"]["memory_total_mb"] = 1000  # one member needs 1400
    path = write_config(config)

    trials = _run(path).results.study.trials

    assert [t.state.name for t in trials] == ["PRUNED"] * 2
    for trial in trials:
        assert trial.user_attrs[attrs.OOM]["peak_mb"] == pytest.approx(1000)


def test_the_simulated_runner_refuses_a_members_function_it_does_not_model(
    write_config: ConfigWriter,
) -> None:
    config = _fused_search(members=2, trials=2)
    config["fusion"]["train"] = "hpsearch.workloads.digits:train_members"
    path = write_config(config)

    with pytest.raises(HpsearchError, match=r"fusion\.train") as raised:
        _run(path)
    assert MEMBERS_TRAIN in str(raised.value)


def test_enqueued_trials_run_first_and_a_second_run_does_not_queue_them_again(
    write_config: ConfigWriter,
) -> None:
    config = load_search(util=11, memory=167, trials=4, seconds=8)
    config["space"]["width"] = [128, 256, 512]
    config["study"]["enqueue"] = [{"lr": 0.00123, "width": 512}, {"width": 128}]
    path = write_config(config)
    first = _run(path).results.study.trials
    assert first[0].params == {"lr": 0.00123, "width": 512}
    assert first[1].params["width"] == 128  # its lr sampled
    assert len({t.params["lr"] for t in first}) == 4
    # The study has run them: the next run samples, whatever the config still lists.
    config["study"]["n_trials"] = 6
    again = _run(write_config(config)).results.study.trials
    assert [t.state.name for t in again] == ["COMPLETE"] * 6
    assert 0.00123 not in {t.params["lr"] for t in again[4:]}
