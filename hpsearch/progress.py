"""The live progress view of ``hpsearch run``: done/total, running, failed, pruned, best so far."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.text import Text

from hpsearch.config import ObjectiveSpec, RunConfig
from hpsearch.lifecycle import TrialEnded, TrialListener, TrialReported, TrialStarted
from hpsearch.placement import GpuDecision
from hpsearch.pruning import dominates
from hpsearch.study import BudgetCount, TrialBudget
from hpsearch.trial.death import headline
from hpsearch.trial.protocol import Outcome

logger = logging.getLogger(__name__)

RUNNING_SHOWN = 4
"""How many running trials the status line times (the longest-running first)."""

_OUTCOME_STYLE = {
    Outcome.COMPLETE: "green",
    Outcome.FAIL: "red",
    Outcome.PRUNED: "yellow",
    Outcome.INTERRUPTED: "magenta",
}


class ProgressView(TrialListener):
    """Shows a search as it runs: a lifecycle listener and a packing observer.

    On a terminal it redraws one status block in place (rich ``Live``); elsewhere
    (CI logs, pipes) it prints one line per finished trial.

    Args:
        study: the study name.
        objectives: to label the best value.
        n_trials: the study's target total, if any.
        already: trials that counted before this run started.
        best: the study's best trial (number, value) as Optuna's ``best_trial`` names it
            (a single objective; among the trials that keep their constraints, in a
            constrained study): read as the view opens, and again when a trial ends
            with a value that would be a new best, so the line names the trial
            ``hpsearch best`` will. ``None``: the values alone decide.
        console: where to draw.
        clock: the runner's clock (trials' start times are on it), to say how long
            each running trial has run.
    """

    @classmethod
    def for_search(
        cls,
        config: RunConfig,
        study: Any,
        before: BudgetCount | None,
        console: Console,
        clock: Callable[[], float],
    ) -> ProgressView:
        """The view of a search on ``study`` (an Optuna study), which had ``before`` trials,
        counted to its budget's end (``study.n_trials``, or a smaller grid's points)."""
        return cls(
            study.study_name,
            config.objective_list,
            n_trials=TrialBudget.of_search(config).n_trials,
            already=before or BudgetCount(0, 0),
            best=lambda: best_so_far(study),
            console=console,
            clock=clock,
        )

    def __init__(
        self,
        study: str,
        objectives: Sequence[ObjectiveSpec],
        *,
        n_trials: int | None,
        already: BudgetCount,
        best: Callable[[], tuple[int, float] | None] | None = None,
        console: Console | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._study = study
        self._clock = clock
        self._objectives = list(objectives)
        self._n_trials = n_trials
        self._console = console or Console()
        self._lock = threading.Lock()
        self._done = already.finished
        self._running: dict[int, float] = {}  # trial number: when it started
        self._latest: dict[int, str] = {}  # trial number: its last step and metric
        self._failed = 0
        self._pruned = 0
        self._best_of = best
        self._completed = False  # a trial completed while the view was open
        self._best = best() if best is not None else None
        self._front: list[tuple[float, ...]] = []
        self._recent: deque[Text] = deque(maxlen=5)
        self._started = time.monotonic()
        self._live: Live | None = None

    def __enter__(self) -> ProgressView:
        if self._console.is_terminal:
            self._live = Live(self, console=self._console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        else:
            self._console.print(
                f"hpsearch: study '{self._study}' started ({self._status_line().plain})",
                soft_wrap=True,
            )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._live is not None:
            self._live.__exit__(exc_type, exc, tb)
            self._live = None

    def on_started(self, event: TrialStarted) -> None:
        """A trial began running."""
        with self._lock:
            self._running[event.number] = event.at

    def on_reported(self, event: TrialReported) -> None:
        """A running trial reported: keep its step and its first objective's metric."""
        metric = self._objectives[0].metric if self._objectives else ""
        value = event.metrics.get(metric)
        shown = f"step {event.step}"
        if value is not None:
            shown += f" {metric} {value:.4g}"
        with self._lock:
            if event.number in self._running:
                self._latest[event.number] = shown

    def on_ended(self, event: TrialEnded) -> None:
        """A trial ended; count it and remember the best."""
        with self._lock:
            self._running.pop(event.number, None)
            self._latest.pop(event.number, None)
            if event.outcome is not Outcome.INTERRUPTED:
                self._done += 1
            if event.outcome is Outcome.FAIL:
                self._failed += 1
            elif event.outcome is Outcome.PRUNED:
                self._pruned += 1
            elif event.outcome is Outcome.COMPLETE and event.values is not None:
                self._completed = True
                self._note_best(event.number, event.values)
            line = self._trial_line(event)
            self._recent.append(line)
        if self._live is None:
            self._console.print(Text.assemble(line, "  ", self._status_line()), soft_wrap=True)

    def decided(self, gpu: str, decision: GpuDecision) -> None:
        """A GPU's trial count was set, changed or judged, or its monitor lost or back: one
        line with the reason."""
        was = f"{decision.previous} → " if decision.changed else ""
        why = decision.reason if decision.changed or not decision.judged else decision.judged
        if decision.judged and decision.changed:
            why = f"{decision.judged}; {why}" if decision.judged not in why else why
        line = Text.assemble(
            ("packing ", "bold blue"),
            f"{gpu}: {was}{decision.limit} trial(s) · {why}",  # whole: its arithmetic
        )
        with self._lock:
            self._recent.append(line)
        if self._live is None:
            self._console.print(line, soft_wrap=True)

    def series(self, points: dict[str, float]) -> None:
        """The per-GPU series go to the parent run, not to the view."""

    def __rich__(self) -> RenderableType:
        with self._lock:
            return Group(*self._recent, self._status_line())

    def _asked_best(self, by_value: tuple[int, float]) -> tuple[int, float] | None:
        """The study's best, which keeps its constraints (``by_value``, the best by the
        values alone, knows nothing of them); ``None``: no trial keeps them. Not asked, or
        a store that does not answer, leaves the line to the values: the search meets
        that fault where it writes."""
        if self._best_of is None:
            return by_value
        try:
            return self._best_of()
        except Exception as exc:
            logger.debug("the study's best trial was not read: %s", exc)
            return by_value

    def _note_best(self, number: int, values: tuple[float, ...]) -> None:
        if len(self._objectives) == 1:
            value = values[0]
            better = self._best is None or (
                value > self._best[1]
                if self._objectives[0].direction == "maximize"
                else value < self._best[1]
            )
            if better:
                self._best = self._asked_best((number, value))
        else:
            directions = [o.direction for o in self._objectives]
            if not any(dominates(p, values, directions) for p in self._front):
                self._front = [p for p in self._front if not dominates(values, p, directions)] + [
                    values
                ]

    def status_line(self) -> str:
        """The status line as plain text (what the live view shows under the trials)."""
        with self._lock:
            return self._status_line().plain

    def _status_line(self) -> Text:
        total = f"/{self._n_trials}" if self._n_trials else ""
        elapsed = int(time.monotonic() - self._started)
        parts: list[str | tuple[str, str]] = [
            (f"{self._study} ", "bold"),
            (f"{self._done}{total} done", "bold cyan"),
            f" · {len(self._running)} running · {self._failed} failed · {self._pruned} pruned · ",
        ]
        if len(self._objectives) == 1 and self._best is not None:
            parts.append(
                (
                    f"best {self._objectives[0].name} {self._best[1]:.4g} (trial {self._best[0]})",
                    "green",
                )
            )
        elif len(self._objectives) > 1:
            parts.append((f"Pareto front of this run: {len(self._front)} trial(s)", "green"))
        elif self._completed:
            parts.append("no completed trial keeps its constraints yet")
        else:
            parts.append("no completed trial yet")
        parts.append(f" · {_clock_text(elapsed)}")
        if self._running:
            # How long each trial has run, longest first: a hung one shows here long
            # before any timeout. A packed GPU runs many: the longest few, and a count.
            longest = sorted(self._running.items(), key=lambda item: item[1])
            now = self._clock()
            shown = ", ".join(
                f"trial {number} {_clock_text(now - since)}"
                + (f" ({self._latest[number]})" if number in self._latest else "")
                for number, since in longest[:RUNNING_SHOWN]
            )
            more = len(longest) - RUNNING_SHOWN
            parts.append(f" · running: {shown}" + (f" (+{more} more)" if more > 0 else ""))
        return Text.assemble(*parts)

    def _trial_line(self, summary: TrialEnded) -> Text:
        style = _OUTCOME_STYLE[summary.outcome]
        detail = ""
        if summary.values is not None:
            detail = " ".join(
                f"{o.name}={v:.4g}" for o, v in zip(self._objectives, summary.values, strict=True)
            )
        elif summary.outcome is Outcome.PRUNED:
            step = f"at step {summary.pruned_at}: " if summary.pruned_at is not None else ""
            detail = _clipped(f"{step}{summary.prune_reason}", 160)
        elif summary.error:
            detail = _clipped(headline(summary.error), 160)
        return Text.assemble(
            f"trial {summary.number} ",
            (summary.outcome.value.upper(), style),
            f" {detail} ({summary.duration_s:.1f}s)",
        )


def _clipped(text: str, limit: int) -> str:
    """``text`` whole, or its first words up to ``limit`` characters and an ellipsis: a
    line cut mid-sentence ("return its value from the objective, ") reads as the whole."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    words = cut.rsplit(" ", 1)[0] if " " in cut else cut
    return words.rstrip(" ,;:") + "…"


def _clock_text(seconds: float) -> str:
    """``m:ss`` (``h:mm:ss`` past an hour)."""
    whole = max(0, int(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def best_so_far(study: Any) -> tuple[int, float] | None:
    """A single-objective study's best trial so far, as the view opens on it (number, value)."""
    if len(study.directions) != 1:
        return None
    try:
        best = study.best_trial
    except ValueError:  # no complete trial yet
        return None
    return best.number, float(best.value)
