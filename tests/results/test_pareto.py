"""The Pareto front of a multi-objective study: correct, printed, plotted and written as CSV."""

from __future__ import annotations

import csv
import itertools
import json
import random
from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner
from optuna.distributions import CategoricalDistribution, FloatDistribution

from hpsearch import attrs
from hpsearch.cli import main
from hpsearch.config import load_config
from hpsearch.errors import ResultsError
from hpsearch.results import (
    ANALYSIS_FOLDER,
    CSV_FILE,
    StudyResults,
    _analysis,
    analysis_figures,
    load,
    write_pareto_csv,
)
from hpsearch.study import open_study
from tests.conftest import ConfigWriter

TWO_OBJECTIVES = {
    "objective": None,
    "objectives": [
        {"metric": "acc", "direction": "maximize"},
        {"metric": "seconds", "direction": "minimize"},
    ],
}
DISTRIBUTIONS = {
    "x": FloatDistribution(0.0, 1.0),
    "batch_size": CategoricalDistribution([32, 64, 128]),
}


def _study_with(write_config: ConfigWriter, points: list[tuple[float, float]]) -> Path:
    path = write_config(TWO_OBJECTIVES)
    study = open_study(load_config(path)).study
    for number, (acc, seconds) in enumerate(points):
        study.add_trial(
            optuna.trial.create_trial(
                values=[acc, seconds],
                params={"x": acc, "batch_size": [32, 64, 128][number % 3]},
                distributions=DISTRIBUTIONS,
                user_attrs={attrs.MLFLOW_RUN: f"run-{number}"},
            )
        )
    return path


def _brute_front(points: list[tuple[float, float]]) -> set[int]:
    def dominates(a: tuple[float, float], b: tuple[float, float]) -> bool:
        no_worse = a[0] >= b[0] and a[1] <= b[1]
        return no_worse and (a[0] > b[0] or a[1] < b[1])

    return {
        i
        for i, p in enumerate(points)
        if not any(dominates(q, p) for j, q in enumerate(points) if j != i)
    }


def test_front_is_the_non_dominated_set(write_config: ConfigWriter) -> None:
    points = [(0.9, 10.0), (0.8, 5.0), (0.7, 7.0), (0.95, 20.0), (0.9, 12.0), (0.6, 5.0)]
    results = load(_study_with(write_config, points))
    assert [t.number for t in results.pareto_front()] == [0, 1, 3]
    assert _brute_front(points) == {0, 1, 3}


def test_front_matches_brute_force_on_random_points(write_config: ConfigWriter) -> None:
    rng = random.Random(7)
    # Accuracy costs time, with noise: a front of several points.
    accs = [round(rng.random(), 2) for _ in range(60)]
    points = [(a, round(100 * a + rng.uniform(0, 40), 1)) for a in accs]
    results = load(_study_with(write_config, points))
    front = {t.number for t in results.pareto_front()}
    assert front == _brute_front(points)
    assert 1 < len(front) < len(points)
    for a, b in itertools.combinations(results.pareto_front(), 2):
        assert a.values != b.values or a.number == b.number


def test_single_objective_has_no_pareto_request(write_config: ConfigWriter) -> None:
    path = write_config()
    open_study(load_config(path))
    with pytest.raises(ResultsError, match="one objective"):
        load(path).pareto_front()
    result = CliRunner().invoke(main, ["best", str(path), "--pareto"])
    assert result.exit_code == 2
    assert "drop --pareto" in result.output


def test_best_pareto_json(write_config: ConfigWriter) -> None:
    path = _study_with(write_config, [(0.9, 10.0), (0.8, 5.0), (0.7, 7.0)])
    result = CliRunner().invoke(main, ["best", str(path), "--pareto", "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert [p["trial_number"] for p in payload] == [0, 1]
    assert payload[1]["values"] == {"acc": 0.8, "seconds": 5.0}
    assert payload[1]["params"] == {"x": 0.8, "batch_size": 64}
    assert payload[1]["mlflow_run_id"] == "run-1"
    table = CliRunner().invoke(main, ["best", str(path), "--pareto"])
    assert table.exit_code == 0
    assert "Pareto front" in table.output


def test_figures_and_csv(write_config: ConfigWriter, tmp_path: Path) -> None:
    points = [(0.9, 10.0), (0.8, 5.0), (0.7, 7.0), (0.95, 20.0)]
    results = StudyResults(load(_study_with(write_config, points)).study)
    # Optuna's own figures, per objective, and the front among all trials.
    figures = dict(analysis_figures(results))
    assert set(figures) == {
        f"{ANALYSIS_FOLDER}/{name}.html"
        for name in (
            "pareto_front",
            "optimization_history_acc",
            "optimization_history_seconds",
            "param_importances_acc",
            "param_importances_seconds",
            "parallel_coordinate_acc",
            "parallel_coordinate_seconds",
        )
    }
    front = figures[f"{ANALYSIS_FOLDER}/pareto_front.html"]
    assert "Pareto" in front.layout.title.text
    written = write_pareto_csv(results, tmp_path)
    assert written == tmp_path / CSV_FILE
    with (tmp_path / CSV_FILE).open() as handle:
        rows = list(csv.DictReader(handle))
    assert [int(r["trial_number"]) for r in rows] == [0, 1, 3]
    assert rows[1] == {
        "trial_number": "1",
        "acc": "0.8",
        "seconds": "5.0",
        "batch_size": "64",
        "x": "0.8",
        "mlflow_run_id": "run-1",
    }


def test_no_files_before_a_trial_completes(write_config: ConfigWriter, tmp_path: Path) -> None:
    results = load(_study_with(write_config, []))
    assert write_pareto_csv(results, tmp_path) is None
    assert dict(analysis_figures(results)) == {}


def test_a_large_studys_importances_and_coordinates_are_drawn_from_a_sample(
    write_config: ConfigWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    points = [(0.5 + i / 100, 5.0 + i % 7) for i in range(30)]
    results = StudyResults(load(_study_with(write_config, points)).study)
    monkeypatch.setattr(_analysis, "MOST_TRIALS_DRAWN", 12)
    figures = dict(analysis_figures(results))
    coordinates = figures[f"{ANALYSIS_FOLDER}/parallel_coordinate_acc.html"]
    assert sum(1 for line in coordinates.data if line.mode == "lines") == 12  # one per trial
    history = figures[f"{ANALYSIS_FOLDER}/optimization_history_acc.html"]
    assert len(history.data[0].x) == 30  # the history shows every trial


def test_numeric_choices_are_an_ordered_axis_of_the_figures() -> None:
    # Listed out of order: the axis orders them by value, not by the list.
    batch_size = CategoricalDistribution([64, 256, 16, 128, 32])
    study = optuna.create_study(direction="maximize")
    for size in (16, 32, 64, 128, 256):
        study.add_trial(
            optuna.trial.create_trial(
                params={"batch_size": size},
                distributions={"batch_size": batch_size},
                value=float(size),  # the objective's axis orders the lines too
            )
        )
    figures = dict(analysis_figures(StudyResults(study)))

    coordinates = figures[f"{ANALYSIS_FOLDER}/parallel_coordinate_objective_0.html"]
    axes = list(coordinates.layout.xaxis.ticktext)
    lines = [trace.y for trace in coordinates.data if trace.mode == "lines"]
    by_objective = sorted(lines, key=lambda y: y[0])  # the objective is the first axis
    heights = [y[axes.index("batch_size")] for y in by_objective]
    assert heights == sorted(heights)
    assert len(set(heights)) == 5
