"""Utilisation-aware packing: how many trials each GPU may hold now, the share each gets, and why.

A pure policy: it reads a :class:`PackingView` (what the monitor measured on
each GPU, which trials run where, the work they did, the OOMs seen) and
answers, per GPU, how many trials it may hold and the memory share a new one
gets, with a sentence a person can check. No Ray, no NVML, no clock of its
own: the runner builds the view (:class:`~hpsearch.placement.PackingAdmission`)
and the tests write it by hand.

The rules, per GPU, in ``auto`` mode:

* **Evidence.** A GPU holds one trial until something says what a trial asks
  of it: the GPU's last few samples with trials on it (utilisation and memory
  per trial process, :func:`~hpsearch.placement.device_reading`), trials that
  ended measured from their own samples (known after a few, however short),
  or a GPU measured ``probe_seconds`` past its trials' warm-up. From that
  profile a new trial is estimated, and the count that fits follows: the most
  predicted throughput by utilisation, bounded by memory less
  ``memory_headroom``, the node's CPUs and ``max_trials_per_gpu``. Memory
  counts every trial admitted, measured or not.
* **The ramp.** The count doubles (1, 2, 4, 8, ...) towards what fits. On a
  roomy GPU (its last samples show at most
  :data:`~hpsearch.placement._room.ROOMY_SHARE` of its usable
  memory in use) it doubles as soon as fresh samples confirm the room, so the
  new trials' start-ups overlap; elsewhere the first doubling rests on the
  evidence and each later one on the count having been measured to pay. Every
  count is judged by the steps its trials complete per second
  (:mod:`hpsearch.placement._ramp`): kept while it gains
  :data:`~hpsearch.placement.MIN_GAIN` per trial added over the best count
  below, else back to that count for ``cooldown_seconds``. Trials of a second
  reach their count in seconds.
* **Long trials** (they outlast ``probe_seconds``, or do too few steps in it to
  be judged by their work) rise straight to what fits once measured, at most
  one step per ``probe_seconds``.
* **Falls.** The count falls by one when the GPU is measured saturated
  (``saturation_util``) where the estimate did not predict it and the count's
  steps did not measure it paying (the estimate is the search's mean trial, and
  heavier ones may saturate a GPU and still gain together), when its memory
  comes within half the headroom of full, and after an OOM of a trial that
  shared the GPU (to one less than were sharing it); no rise for
  ``cooldown_seconds`` after a fall. One fall at a time: the next is measured
  once the GPU holds no more trials than its count.
* A trial of a new kind (larger than any measured, see ``TrialOnGpu.new_kind``)
  closes its GPU to new neighbours until it has been measured too.

The gap between ``target_util`` (rise only below) and ``saturation_util`` (fall
only above) is the hysteresis that keeps the count from flapping.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hpsearch.placement._evidence import MIN_SAMPLES
from hpsearch.placement._place import place
from hpsearch.placement._profiles import TrialProfiles
from hpsearch.placement._ramp import StepRates
from hpsearch.placement._room import GpuRoom
from hpsearch.placement._views import (
    GpuDecision,
    GpuKey,
    GpuView,
    Judgement,
    PackingView,
    Placement,
    TrialOnGpu,
    TrialProfile,
    Verdict,
)
from hpsearch.placement.settings import PackingSpec

EXCLUSIVE_REASON = (
    "its compute mode admits one process at a time (exclusive-process): one trial per GPU; "
    "nvidia-smi -c DEFAULT, or an MPS daemon started before hpsearch run "
    "(nvidia-cuda-mps-control -d), lets it hold more"
)
"""Why a GPU in exclusive-process compute mode holds one trial, whatever the mode."""
NEW_KIND_SAMPLES = 3
"""Samples of its GPU past warm-up that measure a trial of a new kind (larger than any
measured) before it gets a neighbour: more than a device reading needs, for a trial that
may grow into its neighbour's memory."""


@dataclass
class _GpuState:
    limit: int
    reason: str
    changed_at: float
    rates: StepRates = field(default_factory=StepRates)
    lowered_at: float = -math.inf
    oom_seen: float = -math.inf
    paid: set[int] = field(default_factory=set)
    """Counts measured to pay over the best below them."""
    judged: list[Judgement] = field(default_factory=list)
    """Judgements made in this decision (for the records)."""


class PackingPolicy:
    """Decides per GPU how many trials it holds, and places new trials on the GPU with room.

    Keeps the state hysteresis and the judging need (each GPU's limit, when it last
    moved, what each count measured) and the recent trial profiles; everything
    else comes in the view.
    """

    def __init__(self, settings: PackingSpec) -> None:
        self.settings = settings  # its band (target below saturation) checked when it was read
        self._state: dict[GpuKey, _GpuState] = {}
        self._profiles = TrialProfiles(settings)
        self._room = GpuRoom(settings, self._profiles)

    def roomy(self, gpu: GpuView) -> bool:
        """Whether the GPU's last samples show it nearly empty of memory and of work (``auto``
        only): room for what it holds to double, a fused group's members included (see
        :meth:`~hpsearch.placement._room.GpuRoom.idle`)."""
        return self.settings.mode == "auto" and self._room.idle(gpu)

    def estimate(self) -> TrialProfile | None:
        """A new trial's needs, from the recent trials' measured profiles."""
        return self._profiles.estimate()

    # -- decisions ----------------------------------------------------------------

    def decide(self, view: PackingView) -> dict[GpuKey, GpuDecision]:
        """Each GPU's limit now, with the share a new trial gets and the reason."""
        previous = {key: state.limit for key, state in self._state.items()}
        self._take_events(view)
        gpus_per_node: dict[str, int] = {}
        for gpu in view.gpus:
            gpus_per_node[gpu.key.node] = gpus_per_node.get(gpu.key.node, 0) + 1
        decisions = {}
        for gpu in view.gpus:
            state = self._state_of(gpu.key, view.now)
            limit, reason = self._limit(gpu, view, state, gpus_per_node[gpu.key.node])
            if limit != state.limit:
                if limit < state.limit:
                    state.lowered_at = view.now
                state.limit, state.changed_at = limit, view.now
            state.reason = reason
            waiting = self._new_kind_waiting(gpu, view.now)
            if waiting is not None:
                reason = (
                    f"{reason}; no new neighbour until trial {waiting.number} (larger than "
                    "any trial measured) has been measured past its warm-up"
                )
            judged, state.judged = tuple(state.judged), []
            mps = state.rates.mps_verdict()
            decisions[gpu.key] = GpuDecision(
                limit,
                1.0 / limit,
                reason,
                previous.get(gpu.key),
                open=waiting is None,
                judged="; ".join([*(j.reason for j in judged), *([mps.reason] if mps else [])]),
                judgements=judged,
                mps=mps,
            )
        return decisions

    def _state_of(self, key: GpuKey, now: float) -> _GpuState:
        state = self._state.get(key)
        if state is None:
            state = _GpuState(1, "", now)
            self._state[key] = state
        return state

    def _take_events(self, view: PackingView) -> None:
        """What happened since the last view: OOMs, profiles of ended trials, steps done."""
        for oom in view.ooms:
            state = self._state.get(oom.gpu)
            if state is not None and oom.sharing > 1:
                state.oom_seen = max(state.oom_seen, oom.at)
                state.limit = min(state.limit, max(1, oom.sharing - 1))
                state.lowered_at = view.now
                state.changed_at = view.now
                state.reason = (
                    f"a trial ran out of memory with {oom.sharing} trials on the GPU: "
                    f"at most {state.limit} until the cool-down "
                    f"({self.settings.cooldown_seconds:g} s) has passed"
                )
        for gpu in view.gpus:
            self._profiles.learn(gpu, view.now)
        for profile in view.profiles:
            self._profiles.add(profile)
        for work in view.work:
            state = self._state.get(work.gpu)
            if state is not None and work.step_s is not None:
                state.rates.add(work.warm, work.step_s, work.mps_client, work.number)

    def _new_kind_waiting(self, gpu: GpuView, now: float) -> TrialOnGpu | None:
        """A trial of a new kind on the GPU not yet measured (``auto`` only): past its warm-up
        for ``probe_seconds``, or for a few samples of its GPU, whichever comes first.

        A roomy GPU (see :meth:`roomy`) takes a neighbour anyway: were the new trial
        to grow to several times what it holds now, the two would still fit.
        """
        if self.settings.mode != "auto" or self._room.roomy(gpu):
            return None
        for trial in gpu.trials:
            if not trial.new_kind:
                continue
            if trial.warm_at is None or (
                now - trial.warm_at < self.settings.probe_seconds
                and trial.samples_warm < NEW_KIND_SAMPLES
            ):
                return trial
        return None

    def _limit(  # noqa: PLR0911 - one return per rule reads better than a chain of flags
        self, gpu: GpuView, view: PackingView, state: _GpuState, gpus_on_node: int
    ) -> tuple[int, str]:
        """The GPU's limit now and why: a fall, a hold, a verdict or a rise."""
        s = self.settings
        current = state.limit
        if s.mode == "off":
            return 1, "packing off: one trial per GPU"
        if gpu.exclusive:
            return 1, EXCLUSIVE_REASON
        if s.mode == "fixed":
            return s.trials_per_gpu, f"packing fixed: {s.trials_per_gpu} trial(s) per GPU"
        if not gpu.telemetry:
            return 1, "no GPU monitor reads this GPU: one trial per GPU"
        estimate, provisional = self._evidence(gpu)
        if estimate is None:
            return (current, state.reason) if current > 1 else (1, _unmeasured(gpu))
        by_util, hard, arithmetic = self._room.ceiling(gpu, view, estimate, gpus_on_node)
        paid = state.rates.pays(len(gpu.trials))
        fall = self._room.fall(gpu, view.now, current, estimate, paid=paid)
        if fall is not None:
            return fall
        if view.now - state.oom_seen < s.cooldown_seconds:
            return min(current, by_util, hard), state.reason
        if current > hard:
            return hard, arithmetic
        back = self._judged(state, current)
        if back is not None:
            return back
        if current > by_util:
            return current, (
                f"holding {current}: {arithmetic}; utilisation lowers a count only when "
                f"measured at {s.saturation_util:g}%"
            )
        target = min(by_util, hard)
        if current >= target:
            return current, state.reason if current in state.paid else arithmetic
        # A rise: only from a full GPU, none in the cool-down.
        if len(gpu.trials) < current or view.now - state.lowered_at < s.cooldown_seconds:
            return current, state.reason or arithmetic
        return self._grow(gpu, view.now, state, target, estimate, provisional, arithmetic)

    def _grow(  # noqa: PLR0917 - the rise's inputs, computed by _limit
        self,
        gpu: GpuView,
        now: float,
        state: _GpuState,
        target: int,
        estimate: TrialProfile,
        provisional: bool,
        arithmetic: str,
    ) -> tuple[int, str]:
        """Double the count towards ``target`` when the evidence allows it now.

        * A roomy GPU (its last samples, one taken since the count last moved, show
          it nearly empty) doubles at once: its new trials' start-ups overlap, and
          the counts are judged by their steps as they work.
        * On the GPU's last samples alone, a GPU tries a second trial, no more.
        * Once trials are measured (past warm-up for ``probe_seconds``, or a few that
          ended), a count their steps showed paying doubles; one not measured so
          (long trials report too few steps) rises straight to what fits, at most
          one step per ``probe_seconds``.
        """
        s = self.settings
        current = state.limit
        fresh = gpu.recent is not None and gpu.recent.latest > state.changed_at
        doubling = (fresh and self._room.roomy(gpu)) or current in state.paid
        if doubling or (provisional and current == 1):
            limit, reason = self._room.rise(
                gpu, current, min(target, 2 * current), estimate, arithmetic
            )
            return limit, (f"trying {limit}: {reason}" if limit > current else reason)
        if provisional or now - state.changed_at < s.probe_seconds:
            return current, (
                f"holding {current} until its steps are measured, or its trials are "
                f"measured {s.probe_seconds:g} s past their warm-up; {arithmetic}"
            )
        return self._room.rise(gpu, current, target, estimate, arithmetic)

    def _judged(self, state: _GpuState, current: int) -> tuple[int, str] | None:
        """The steps' verdict on the counts held: ``None`` to go on, else the count back to."""
        judgement = state.rates.judge(current)
        if judgement is None:
            return None
        state.judged.append(judgement)
        if judgement.verdict is Verdict.BACK:
            state.paid.discard(judgement.level)
            state.rates.forget(judgement.level)
            return judgement.now, (
                f"back to {judgement.now}: {judgement.reason}; no larger count for "
                f"{self.settings.cooldown_seconds:g} s"
            )
        if judgement.paid:
            state.paid.update(c for c in state.rates.measured() if c <= judgement.level)
        state.reason = f"kept {judgement.level}: {judgement.reason}"
        return None

    def _evidence(self, gpu: GpuView) -> tuple[TrialProfile | None, bool]:
        """The estimate of a new trial, and whether it rests on the GPU's last samples only.

        The search's measured profiles when its kind is known; else the GPU's last
        few samples with trials on it (enough to try one count more, not to jump).
        """
        estimate = self.estimate()
        if estimate is not None:
            return estimate, False
        recent = gpu.recent
        if recent is None:
            return None, False
        return TrialProfile(-1, recent.utilization_pct, recent.memory_mb, recent.samples), True

    # -- placement ----------------------------------------------------------------

    def place(
        self,
        view: PackingView,
        decisions: dict[GpuKey, GpuDecision],
        *,
        whole_gpu: bool = False,
    ) -> Placement | None:
        """The GPU a new trial goes to, or ``None`` when none has room now (see
        :func:`hpsearch.placement._place.place`)."""
        return place(view, decisions, whole_gpu=whole_gpu)


def _unmeasured(gpu: GpuView) -> str:
    """Why a GPU with no estimate yet holds one trial."""
    if gpu.utilization_withheld:
        return (
            "its GPU does not report its utilisation (NVML: not supported, as for a "
            "MIG-enabled GPU), which auto packs by: one per GPU; packing.mode: fixed "
            "with trials_per_gpu packs the count you choose"
        )
    return (
        "no trial of this search measured yet: one per GPU until its GPU has been "
        f"read {MIN_SAMPLES} times with it running"
    )
