"""A trial's objective values from what it reported, ``until`` targets included. Pure."""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping, Sequence

from hpsearch.config import ObjectiveSpec
from hpsearch.telemetry import objective_reading
from hpsearch.trial.text_metrics import pattern_for

QUOTED_CHARS = 160
"""The most of an output line a trial's failure quotes."""


class ObjectiveValues:
    """Reads the objective values of a trial from its metrics.

    Args:
        objectives: the config's objectives, in order.
        source: the config file, for the message when an objective is missing.
        how_to_report: how the trials report a metric, for that message
            (``RunConfig.how_to_report``: a function's ``ctx.report``, a script's line).
    """

    def __init__(
        self,
        objectives: Sequence[ObjectiveSpec],
        source: str,
        how_to_report: Callable[[str], str],
    ) -> None:
        self.objectives = list(objectives)
        self._source = source
        self._how_to_report = how_to_report

    def note_targets(self, metrics: Mapping[str, float], reached: dict[int, float]) -> None:
        """Keep each ``until`` objective's value at the first report that reached its target."""
        for index, objective in enumerate(self.objectives):
            target = objective.until
            if target is None or index in reached or not target.reached(dict(metrics)):
                continue
            value = objective_reading(metrics, objective.metric)
            if value is not None:
                reached[index] = value

    def values(
        self,
        metrics: Mapping[str, float],
        reached: Mapping[int, float],
        unread: Sequence[tuple[str, str]] = (),
    ) -> tuple[tuple[float, ...] | None, str]:
        """The objective values of a completed trial, or why there are none (``unread``:
        the lines of a script's output that named a missing one with more than a number)."""
        values = []
        for index, objective in enumerate(self.objectives):
            if objective.until is not None:
                # Never reached: the worst value, so the trial is dominated on this axis.
                worst = math.inf if objective.direction == "minimize" else -math.inf
                values.append(reached.get(index, worst))
                continue
            value = objective_reading(metrics, objective.metric)
            if value is None:
                reported = ", ".join(sorted(metrics)) or "nothing"
                fix = (
                    f"{self._how_to_report(objective.metric)}, "
                    f"or fix the objective in {self._source}"
                )
                close = difflib.get_close_matches(objective.metric, list(metrics), n=1)
                named = dict(unread).get(objective.metric)
                if named is not None:  # printed for people: a count, a percent, words
                    fix = f"{_unread_fix(objective.metric, named)}; else {fix}"
                elif close:  # a slip in the config's spelling, or in the code's
                    fix = f"did you mean '{close[0]}'? Else {fix}"
                return None, (
                    f"train finished without reporting the objective metric '{objective.metric}' "
                    f"(reported: {reported}); {fix}"
                )
            if not math.isfinite(value):
                return None, f"the objective metric '{objective.metric}' is {value}"
            values.append(value)
        return tuple(values), ""


def _unread_fix(metric: str, line: str) -> str:
    """What a trial whose output named ``metric`` on ``line``, with no number read as it,
    is told: a pattern that reads it where one can be made (the same for every trial of
    the script, as the line's numbers are not), else the line."""
    pattern = pattern_for(line, metric)
    if pattern is None:
        quoted = line if len(line) <= QUOTED_CHARS else f"{line[: QUOTED_CHARS - 1]}…"
        return f"its output names it, but not as a number: {quoted!r}; print it as a number"
    # As YAML reads it in single quotes: backslashes as they are, a quote doubled.
    yaml_quoted = pattern.replace("'", "''")
    return (
        "its output names it with more than a number; read it with "
        f"train.metrics: {{patterns: ['{yaml_quoted}']}}"
    )
