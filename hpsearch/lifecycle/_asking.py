"""Asking Optuna for a launch's trials: one, or a fused group sharing its first trial's shape.

A group's first trial is asked as any other; the others, up to the fusion
plan's count for its shape, are asked with its shared parameters fixed (the
sampler chooses the rest), each its own Optuna trial. A trial that re-runs an
interrupted one with other shared parameters is held and opens the next launch.
What a group measured goes back to the plan's sizer once every member has
reported its first step (a doubling then waits one report, not a whole
trial), or when it ends, whichever comes first; that it ran out of memory,
when it ends.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from hpsearch.lifecycle._launches import Launches
from hpsearch.lifecycle._records import OpenTrial
from hpsearch.lifecycle._tell import StudyWrites
from hpsearch.placement import Admission
from hpsearch.pruning import forget_intermediate
from hpsearch.space import SearchSpace
from hpsearch.study import StudyHandle
from hpsearch.telemetry import solo_name

SPEED_METRIC = "samples_per_sec"
"""What ``fusion: auto`` measures a group by: its members' speed, and their solo twin's."""


class TrialAsker:
    """Asks the study for the trials of each launch (see the module)."""

    def __init__(self, handle: StudyHandle, space: SearchSpace, launches: Launches) -> None:
        self._handle = handle
        self._space = space
        self._launches = launches
        self.held: list[OpenTrial] = []
        """Trials asked for a group they could not join: the next launch opens with them."""
        self._measured: set[int] = set()
        """The groups (their first trial's number) whose speed the sizer already has."""

    def ask(self, admission: Admission, most: int | None = None) -> list[OpenTrial]:
        """The trials of the next launch: one, or a group of at most ``most``."""
        first = self.held.pop(0) if self.held else self._one(admission)
        records = [first]
        plan = self._launches.fusion
        members = 1 if plan is None else plan.members_for(first.params, admission)
        members = min(members, most or members)
        shared = () if plan is None else plan.shared
        fixed = {name: first.params[name] for name in shared if name in first.params}
        if members > 1 and not first.inherits_seed:
            with self._handle.fixed(fixed):
                while len(records) < members:
                    record = self._one(admission)
                    if any(record.params.get(k) != v for k, v in fixed.items()):
                        self.held.append(record)  # a re-run of another shape: alone, next
                        break
                    records.append(record)
        for record in records:
            record.admission = admission  # its seed is written with it (ledger: admitted)
        if plan is not None:
            plan.sizer.launched(first.number, plan.shape(first.params), len(records))
        return records

    def _one(self, admission: Admission) -> OpenTrial:
        trial = self._handle.ask()
        sampled = self._space.suggest(trial)
        forget_intermediate(trial, trial.user_attrs)
        params = self._space.trial_params(sampled)
        return OpenTrial.asked(trial, sampled, params, admission, self._launches)

    def reported(self, records: Sequence[OpenTrial]) -> None:
        """A launch's trial reported: once each of a group's members has, what they measured."""
        if len(records) > 1 and all(r.last_step is not None for r in records):
            self._measure(records)

    def ended(self, records: Sequence[OpenTrial]) -> None:
        """A launch's trials ended: what a group measured, or that it ran out, to the sizer."""
        plan = self._launches.fusion
        if plan is None or not records:
            return
        split = [r.end.end.fused_oom_at for r in records if r.end and r.end.end]
        ran_out = max((size for size in split if size is not None), default=None)
        if ran_out is not None:
            plan.sizer.ran_out(plan.shape(records[0].params), ran_out)
        if len(records) > 1:
            self._measure(records)
        self._measured.discard(records[0].number)

    def _measure(self, records: Sequence[OpenTrial]) -> None:
        """The group's aggregate speed and one member's alone, to the sizer (once a group)."""
        plan = self._launches.fusion
        if plan is None or records[0].number in self._measured:
            return
        self._measured.add(records[0].number)
        shape = plan.shape(records[0].params)
        speeds = [r.metrics[SPEED_METRIC] for r in records if SPEED_METRIC in r.metrics]
        twin = solo_name(SPEED_METRIC)
        solos = [r.metrics[twin] for r in records if twin in r.metrics]
        aggregate = len(records) * statistics.median(speeds) if speeds else None
        solo = statistics.median(solos) if solos else None
        plan.sizer.measured(shape, len(records), aggregate, solo)


def fuse(records: Sequence[OpenTrial]) -> None:
    """Make the trials of one launch a fused group (several of them): each knows its group."""
    if len(records) < 2:
        return
    for record in records:
        record.group = records[0].number
        StudyWrites.group(record.trial, record.group, len(records))
