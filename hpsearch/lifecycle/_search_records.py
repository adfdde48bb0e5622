"""The records of one search: opened before it, the parent run around it, kept after it.

Before a search its study and tracker are opened (the trials a dead driver left
reclaimed, the runs an outage kept unwritten recorded); while it runs the
parent run is open; after it, however it ended, the parent run is ended with
its status, the tracker's waiting writes land, both stores settle, and what the
search did becomes a :class:`~hpsearch.results.RunOutcome`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

from hpsearch._sqlite import settle
from hpsearch.config import RunConfig
from hpsearch.lifecycle._checkpoints import sweep_checkpoints
from hpsearch.lifecycle._mlflow import reclaim_stale_trials, record_unwritten_runs
from hpsearch.lifecycle._parent_run import ParentRun
from hpsearch.lifecycle._tracking import (
    Afresh,
    close_tracker,
    land_tracking_writes,
    open_tracker,
)
from hpsearch.results import RunOutcome, StudyResults
from hpsearch.study import (
    BudgetCount,
    BudgetDecision,
    StudyHandle,
    TrialBudget,
    count_budget,
    open_study,
)
from hpsearch.tracking import RunStatus, Tracker, check_store_uri
from hpsearch.trial.checkpoints import study_folder


@dataclass(frozen=True)
class SearchEnd:
    """What the runner's session did: trials finished and interrupted, how long, why it ended.

    Attributes:
        finished: trials this driver finished (complete, pruned or failed).
        interrupted: trials stopped by an interruption (enqueued to run again).
        elapsed_s: how long the search ran on the runner's clock.
        timed_out: ``study.timeout`` ended the search.
        overdue: trials still running past the timeout's grace were stopped.
        stopped: why a trial's request ended the search (``ctx.stop_search``); empty: none.
    """

    finished: int
    interrupted: int
    elapsed_s: float
    timed_out: bool
    overdue: bool
    stopped: str = ""


@dataclass(frozen=True)
class OpeningRecords:
    """A search's records while they open (:meth:`SearchRecords.opening`).

    Attributes:
        records: waits for the records and returns them, or raises what opening them
            raised.
        has_work: the study has trials left to run (or running): the search will
            need its runner.
    """

    records: Callable[[], SearchRecords]
    has_work: bool


class SearchRecords:
    """The study and the tracker of one search, and the study's count before it.

    Build it with :meth:`open`; :meth:`run` runs a search inside its parent run.
    """

    def __init__(
        self,
        config: RunConfig,
        handle: StudyHandle,
        tracker: Tracker,
        say: Callable[[str], None],
    ) -> None:
        self.config = config
        self.handle = handle
        self.tracker = tracker
        self._say = say
        # The study as it was before this search's first trial: read once.
        self.before: BudgetCount = count_budget(handle.study.get_trials(deepcopy=False))
        self._budget = TrialBudget.of_search(config)

    @classmethod
    def open(
        cls,
        config: RunConfig,
        say: Callable[[str], None],
        afresh: Afresh,
        tracker: Tracker | None = None,
    ) -> SearchRecords:
        """Open the study (as its driver) and the tracker (``tracker``, where one is given),
        reclaim the trials a dead driver left and record the runs an outage kept unwritten.

        Raises:
            ConfigError: the two stores disagree (see :func:`open_tracker`).
        """
        if tracker is None:
            check_store_uri(config.tracking.uri, config.source)  # before the study is made
        return cls._beside(config, _open_study(config, say), say, afresh, tracker)

    @classmethod
    def _beside(
        cls,
        config: RunConfig,
        handle: StudyHandle,
        say: Callable[[str], None],
        afresh: Afresh,
        tracker: Tracker | None,
    ) -> SearchRecords:
        """The records of the opened study: its tracker, its dead drivers' trials reclaimed."""
        ours = tracker is None  # not `or`: a tracker of the user's may have a length
        tracker = open_tracker(config, handle, say, afresh) if tracker is None else tracker
        try:
            reclaim_stale_trials(handle, tracker)
            recorded = record_unwritten_runs(handle, tracker)
        except BaseException:
            if ours:
                close_tracker(tracker)
            raise
        if recorded:
            say(
                f"{recorded} MLflow run(s) recorded from the study: their trials ended while "
                "the tracking server was out of reach and their search stopped"
            )
        return cls(config, handle, tracker, say)

    @classmethod
    @contextmanager
    def opening(
        cls,
        config: RunConfig,
        say: Callable[[str], None],
        afresh: Afresh,
        tracker: Tracker | None = None,
    ) -> Iterator[OpeningRecords]:
        """Open the records as :meth:`open` does, the tracker's part on a thread of its own
        while the caller starts what else the search needs: a local Ray's processes take
        seconds to start, most of which the driver spends waiting, and opening the
        tracker (MLflow imported, its store read) is about as long.

        The study opens first, here: what it refuses is said at once, and a study already
        at its budget with no trial running (it runs nothing, and needs no runner) opens
        the rest here too. However the block ends, the opening is waited for on the way
        out: none of it goes on behind the caller's back.
        """
        if tracker is None:
            # A tracking store refused by its URL alone is said before the study is made.
            check_store_uri(config.tracking.uri, config.source)
        handle = _open_study(config, say)
        count = count_budget(handle.study.get_trials(deepcopy=False))
        if _at_budget(TrialBudget.of_search(config), count):
            records = cls._beside(config, handle, say, afresh, tracker)
            try:
                yield OpeningRecords(lambda: records, has_work=False)
            finally:
                if tracker is None:
                    close_tracker(records.tracker)
            return
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="hpsearch-records") as pool:
            opened = pool.submit(cls._beside, config, handle, say, afresh, tracker)
            try:
                yield OpeningRecords(opened.result, has_work=True)
            finally:
                # A search that ran closed its tracker at its end (run); one that did
                # not get that far (at its budget, its runner refused) does it here.
                if tracker is None and opened.exception() is None:
                    close_tracker(opened.result().tracker)

    def nothing_to_do(self) -> RunOutcome | None:
        """The outcome of a search whose study already reached its budget (said in one
        line), or ``None`` when there is a search to run."""
        before = self.before
        if not _at_budget(self._budget, before):
            return None
        grid = self._budget.grid
        if grid is not None and grid == self._budget.n_trials:
            self._say(
                f"study '{self.handle.name}' already has {before.finished} finished trials: "
                f"every point of its grid ({grid}) has run, nothing to do; "
                "add values to the space, or choose another study.sampler"
            )
        else:
            self._say(
                f"study '{self.handle.name}' already has {before.finished} finished trials "
                f"(study.n_trials is {self.config.study.n_trials}): nothing to do; "
                "raise study.n_trials or pass --n-trials to run more"
            )
        return RunOutcome(StudyResults(self.handle.study), None, 0, 0)

    def run(self, search: Callable[[ParentRun], SearchEnd]) -> RunOutcome:
        """Run ``search`` inside the parent run, then keep its records, however it ended.

        The parent run ends FINISHED, KILLED (trials interrupted, or Ctrl-C) or FAILED
        (any other error, which goes on up).
        """
        config = self.config
        parent = ParentRun.start(config, self.handle, self.tracker)
        status = RunStatus.FAILED
        try:
            ended = search(parent)
            status = RunStatus.KILLED if ended.interrupted else RunStatus.FINISHED
        except KeyboardInterrupt:
            status = RunStatus.KILLED
            raise
        finally:
            parent.end(status)
            land_tracking_writes(config, self.tracker, self._say)
            for store in (config.study.storage, config.tracking.uri):
                settle(store)
        study = self.handle.study
        trials = study.get_trials(deepcopy=False)
        folder = study_folder(config.execution.checkpoint_dir, config.study.name)
        sweep_checkpoints(study, folder, trials)
        # What this driver finished itself (another driver may share the study).
        return RunOutcome(
            StudyResults(study),
            parent.store_id or parent.run_id,
            ended.finished,
            ended.interrupted,
            ended.elapsed_s,
            timed_out=ended.timed_out,
            overdue=ended.overdue,
            stopped=ended.stopped,
            short_of=self._budget.short_of(count_budget(trials)),
            mlflow_experiment_id=self.tracker.experiment_id,
        )


def _open_study(config: RunConfig, say: Callable[[str], None]) -> StudyHandle:
    """The study, opened as its driver, its notes said."""
    handle = open_study(config, as_driver=True)
    for note in handle.notes:
        say(note)
    return handle


def _at_budget(budget: TrialBudget, count: BudgetCount) -> bool:
    """The study reached its budget and runs no trial: a search has nothing to do."""
    return budget.decide(count) is BudgetDecision.FINISHED and not count.running
