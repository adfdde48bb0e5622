"""Packing feedback as a listener: the running trials as the resource policy sees them.

The scheduler asks :meth:`RunningTrials.running` before each admission: where
each trial runs, whether it is past its warm-up (packing may measure it), the
CPUs it keeps busy and whether it is larger than any trial measured so far.
The packing policy is told what the trials it placed do: each step they
report and each end (the work its ramp judges a count by, and the spans its
evidence is cut along), and each out-of-memory on a placed GPU, which lowers
that GPU's count.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from hpsearch.lifecycle._base import TrialListener
from hpsearch.lifecycle._events import (
    KnobsReported,
    TrialEnded,
    TrialOpened,
    TrialOutOfMemory,
    TrialPlaced,
    TrialReported,
)
from hpsearch.oom import MeasuredConfigs
from hpsearch.placement import PackingFeedback, RunningTrial


class RunningTrials(TrialListener):
    """The trials holding resources now, kept from the lifecycle's events.

    Args:
        grows_memory: the parameters that grow memory (``oom.grows_memory``), to tell
            a trial of a new kind (larger than any measured) from a known one.
        earlier: the study's trials so far (completed ones count as measured).
        feedback: told what the placed trials do (the packing policy).
        clock: Unix time (the runner's).
    """

    def __init__(
        self,
        grows_memory: Sequence[str],
        earlier: Sequence[FrozenTrial] = (),
        feedback: PackingFeedback | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._measured = MeasuredConfigs(grows_memory)
        for done in earlier:
            if done.state == TrialState.COMPLETE:
                self._measured.add(done.params)
        self._feedback = feedback
        self._clock = clock
        self._trials: dict[int, RunningTrial] = {}  # by the launch's first trial
        self._params: dict[int, dict[str, Any]] = {}
        self._holder: dict[int, int] = {}  # a trial: the first trial of its launch
        self._members: dict[int, set[int]] = {}  # a launch's first trial: its trials open

    def running(self) -> list[RunningTrial]:
        """Trials holding resources now, with where they run and how far they got."""
        return list(self._trials.values())

    def on_opened(self, event: TrialOpened) -> None:
        admission = event.admission
        self._params[event.number] = event.params
        # A fused group's members hold one launch's resources, until the last ends.
        holder = event.number if event.group is None else event.group
        self._holder[event.number] = holder
        self._members.setdefault(holder, set()).add(event.number)
        if holder in self._trials:
            return
        self._trials[holder] = RunningTrial(
            event.number,
            admission.cpus,
            admission.gpus,
            gpu_index=admission.gpu_index,
            node=admission.node,
            alone=event.alone_retry_of is not None,
            new_kind=not self._measured.covers(event.params),
            started_at=self._clock(),
        )

    def on_placed(self, event: TrialPlaced) -> None:
        self._update(event.number, pid=event.assigned.pid, mps_client=event.assigned.mps_client)

    def on_reported(self, event: TrialReported) -> None:
        now = self._clock()
        if event.first:  # past its warm-up: packing may measure it
            self._update(event.number, warm_at=now)
            self._measured.add(self._params.get(event.number, {}))
        trial = self._trials.get(self._holder.get(event.number, event.number))
        if trial is not None and self._feedback is not None:
            self._feedback.trial_reported(trial, event.number, now)

    def on_knobs(self, event: KnobsReported) -> None:
        workers = event.knobs.effective.get("num_workers")
        if isinstance(workers, int):  # the loop's process and its loader workers
            self._update(event.number, busy_cpus=float(1 + workers))

    def on_out_of_memory(self, event: TrialOutOfMemory) -> None:
        admission = event.admission
        if self._feedback is not None and admission.gpu_index is not None:
            self._feedback.trial_ran_out(
                admission.gpu_index, admission.node or "", event.at, event.sharing
            )

    def on_ended(self, event: TrialEnded) -> None:
        self._params.pop(event.number, None)
        holder = self._holder.pop(event.number, event.number)
        members = self._members.get(holder, set())
        members.discard(event.number)
        if members:
            return
        self._members.pop(holder, None)
        trial = self._trials.pop(holder, None)
        if trial is not None and self._feedback is not None:
            self._feedback.trial_ended(trial, self._clock())

    def _update(self, number: int, **changes: Any) -> None:
        holder = self._holder.get(number, number)
        trial = self._trials.get(holder)
        if trial is not None:
            self._trials[holder] = replace(trial, **changes)
