"""A completed trial's objective values, or why it has none: what its failure tells."""

from __future__ import annotations

import re

import yaml

from hpsearch.config import ObjectiveSpec
from hpsearch.lifecycle._objectives import ObjectiveValues
from hpsearch.trial.text_metrics import TextMetrics, TextReader

MNIST_LINE = "Test set: Average loss: 0.0339, Accuracy: 9890/10000 (99%)"


def _values(**unread: str) -> tuple[tuple[float, ...] | None, str]:
    objectives = ObjectiveValues(
        [ObjectiveSpec(metric="Accuracy", direction="maximize")],
        "c.yaml",
        lambda metric: f"print {metric}",
    )
    return objectives.values({"loss": 0.5}, {}, tuple(unread.items()))


def test_an_objective_printed_with_more_than_a_number_is_told_a_pattern_that_reads_it() -> None:
    values, problem = _values(Accuracy=MNIST_LINE)
    assert values is None
    assert problem.startswith(
        "train finished without reporting the objective metric 'Accuracy' (reported: loss); "
        "its output names it with more than a number; read it with train.metrics: "
    )
    assert problem.endswith("; else print Accuracy, or fix the objective in c.yaml")
    # What it says to write is YAML that reads the line's percent.
    written = re.search(r"train\.metrics: (\{patterns: \[.*\]\})", problem)
    assert written is not None
    metrics = TextMetrics(**yaml.safe_load(written.group(1)))
    read = TextReader(metrics).read(MNIST_LINE)
    assert read is not None
    assert read[1] == {"Accuracy": 99.0}


def test_a_line_no_pattern_can_read_is_quoted_and_nothing_unread_says_what_it_said() -> None:
    _, problem = _values(Accuracy="Accuracy: pending")
    assert "its output names it, but not as a number: 'Accuracy: pending'; print it as a" in problem
    _, plain = _values()
    assert plain == (
        "train finished without reporting the objective metric 'Accuracy' (reported: loss); "
        "print Accuracy, or fix the objective in c.yaml"
    )
