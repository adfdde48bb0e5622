"""The parent run's progress, kept as trials end, agrees with Optuna's reading of the study."""

from __future__ import annotations

import random
from pathlib import Path

import optuna
import pytest
import yaml
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState, create_trial

from hpsearch.config import ObjectiveSpec, load_config
from hpsearch.lifecycle import _parent_run
from hpsearch.lifecycle._events import TrialEnded
from hpsearch.lifecycle._parent_run import ParentRun, SearchProgress
from hpsearch.placement import Admission
from hpsearch.results import StudyResults
from hpsearch.study import StudyHandle
from hpsearch.tracking import MlflowTracker, RunStatus
from hpsearch.trial.protocol import Outcome
from tests.conftest import BASE_CONFIG, ConfigWriter

OBJECTIVES = [
    ObjectiveSpec(metric="accuracy", direction="maximize"),
    ObjectiveSpec(metric="seconds", direction="minimize"),
]


def _ended(number: int, outcome: Outcome, values: tuple[float, ...] | None) -> TrialEnded:
    return TrialEnded(
        number=number,
        outcome=outcome,
        values=values,
        metrics={},
        end_metrics={},
        params={},
        admission=Admission(cpus=1.0, gpus=0.5, reason="test"),
        duration_s=2.0,
    )


def test_counts_and_the_pareto_front_size_match_optuna_as_trials_end() -> None:
    rng = random.Random(7)
    study = optuna.create_study(directions=["maximize", "minimize"])
    outcomes = [Outcome.COMPLETE] * 8 + [Outcome.PRUNED, Outcome.FAIL, Outcome.INTERRUPTED]
    ended = []
    for number in range(300):
        outcome = rng.choice(outcomes)
        values = (round(rng.random(), 2), round(rng.random(), 2))  # ties happen
        complete = outcome is Outcome.COMPLETE
        state = {
            Outcome.COMPLETE: TrialState.COMPLETE,
            Outcome.PRUNED: TrialState.PRUNED,
        }.get(outcome, TrialState.FAIL)
        study.add_trial(create_trial(state=state, values=list(values) if complete else None))
        ended.append(_ended(number, outcome, values if complete else None))

    # Half of the study there at the start, the other half ending one by one.
    progress = SearchProgress(OBJECTIVES, study.trials[:150])
    for event in ended[150:]:
        progress.add(event)

    metrics = progress.metrics()
    states = [t.state for t in study.trials]
    assert metrics["trials_complete"] == states.count(TrialState.COMPLETE)
    assert metrics["trials_pruned"] == states.count(TrialState.PRUNED)
    assert metrics["trials_failed"] == states.count(TrialState.FAIL)
    assert progress.step == 300
    assert metrics["pareto_front_size"] == len(study.best_trials)  # ties count, as in Optuna


def test_the_best_value_of_one_objective_follows_its_direction() -> None:
    progress = SearchProgress([ObjectiveSpec(metric="loss", direction="minimize")], [])
    for number, value in enumerate([0.5, 0.3, float("nan"), 0.4]):
        progress.add(_ended(number, Outcome.COMPLETE, (value,)))
    progress.add(_ended(4, Outcome.PRUNED, None))
    assert progress.metrics()["best_loss"] == 0.3
    assert progress.metrics()["trials_pruned"] == 1


class _Metrics:
    """A tracker that keeps the metrics a parent run logs (all this test asks of one)."""

    def __init__(self) -> None:
        self.logged: list[dict[str, float]] = []

    def log_metrics(self, run_id: str, metrics: dict[str, float], step: int) -> None:
        self.logged.append(metrics)


def test_the_figure_process_starts_at_the_first_complete_trial(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started: list[str] = []
    monkeypatch.setattr(_parent_run, "start_figure_process", lambda: started.append("loading"))
    study = optuna.create_study(directions=["maximize", "minimize"])
    storage = study._storage  # the in-memory study's own
    handle = StudyHandle(study, storage, [])
    tracker = _Metrics()
    parent = ParentRun(tracker, "run", "name", handle, OBJECTIVES)  # type: ignore[arg-type]
    parent.on_ended(_ended(0, Outcome.FAIL, None))
    parent.on_ended(_ended(1, Outcome.PRUNED, None))
    assert started == []  # no figure is drawn of a search without a complete trial
    parent.on_ended(_ended(2, Outcome.COMPLETE, (0.9, 1.0)))
    parent.on_ended(_ended(3, Outcome.COMPLETE, (0.8, 2.0)))
    assert started == ["loading"]  # once
    assert len(tracker.logged) == 4


@pytest.mark.parametrize("figures", [True, False])
def test_figures_off_draws_none_and_loads_nothing_and_the_pareto_csv_stays(
    figures: bool,
    project: Path,
    write_config: ConfigWriter,
    mlflow_tracker: MlflowTracker,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(_parent_run, "start_figure_process", lambda: calls.append("loading"))

    def pages(results: StudyResults) -> list[tuple[str, str]]:
        calls.append("drawn")
        return [("analysis/pareto_front.html", "<html></html>")]

    monkeypatch.setattr(_parent_run, "figure_pages", pages)
    document = {k: v for k, v in BASE_CONFIG.items() if k != "objective"}
    document["objectives"] = [{"metric": o.metric, "direction": o.direction} for o in OBJECTIVES]
    document["tracking"] = {"figures": figures}
    config = load_config(write_config(yaml.safe_dump(document)))
    study = optuna.create_study(directions=["maximize", "minimize"])
    handle = StudyHandle(study, study._storage, [])
    parent = ParentRun.start(config, handle, mlflow_tracker)
    for number, values in enumerate([(0.9, 1.0), (0.8, 2.0)]):
        study.add_trial(create_trial(state=TrialState.COMPLETE, values=list(values)))
        parent.on_ended(_ended(number, Outcome.COMPLETE, values))
    parent.record_analysis(StudyResults(study))
    parent.end(RunStatus.FINISHED)

    client = MlflowClient(f"sqlite:///{project / 'mlruns' / 'mlflow.db'}")
    artifacts = {
        f.path
        for folder in ("analysis", "pareto")
        for f in client.list_artifacts(parent.run_id, folder)
    }
    assert calls == (["loading", "drawn"] if figures else [])
    assert ("analysis/pareto_front.html" in artifacts) is figures
    assert any(path.startswith("pareto/") for path in artifacts)
