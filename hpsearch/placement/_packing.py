"""Utilisation-aware packing: how many trials each GPU may hold now, the share each gets, and why.

A pure policy: it reads a :class:`PackingView` (what the monitor measured on
each GPU, which trials run where, the OOMs seen) and answers, per GPU, how many
trials it may hold and the memory share a new one gets, with a sentence a
person can check. No Ray, no NVML, no clock of its own: the runner builds the
view (:class:`~hpsearch.placement.PackingAdmission`) and the tests write it by hand.

The rules, per GPU, in ``auto`` mode:

* Until a trial of the search has been measured past its warm-up, a GPU holds
  one trial (a trial of unknown size gets no neighbours). Later, a trial of a
  new kind (larger than any measured, see ``TrialOnGpu.new_kind``) closes its
  GPU to new neighbours until it has been measured too.
* From a measured profile (a trial's share of the GPU's utilisation and its
  peak memory) a new trial is estimated; the count rises by one when the GPU's
  utilisation plus the estimate stays under ``target_util`` and its memory plus
  the estimate fits the memory less ``memory_headroom``. Memory counts every
  trial admitted, measured or not: free memory read before the last trial has
  allocated is not free.
* It rises at most one step per ``probe_seconds`` (each step is measured before
  the next) and not for ``cooldown_seconds`` after a fall.
* It falls by one when the GPU is measured saturated (``saturation_util``), when
  its memory comes within half the headroom of full, and after an OOM of a trial
  that shared the GPU (to one less than were sharing it).
* It never exceeds ``max_trials_per_gpu`` nor what the node's CPUs can feed
  (each trial counts its CPUs, DataLoader workers included).

The gap between ``target_util`` (rise only below) and ``saturation_util`` (fall
only above) is the hysteresis that keeps the count from flapping.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hpsearch.placement._capacity import fit
from hpsearch.placement._profiles import TrialProfiles
from hpsearch.placement._views import (
    GpuDecision,
    GpuKey,
    GpuView,
    PackingView,
    Placement,
    TrialOnGpu,
    TrialProfile,
)
from hpsearch.placement.settings import PackingSpec


@dataclass
class _GpuState:
    limit: int
    reason: str
    changed_at: float
    lowered_at: float = -math.inf
    oom_seen: float = -math.inf


class PackingPolicy:
    """Decides per GPU how many trials it holds, and places new trials on the GPU with room.

    Keeps the state hysteresis needs (each GPU's limit and when it last moved)
    and the recent trial profiles; everything else comes in the view.
    """

    def __init__(self, settings: PackingSpec) -> None:
        self.settings = settings  # its band (target below saturation) checked when it was read
        self._state: dict[GpuKey, _GpuState] = {}
        self._profiles = TrialProfiles(settings)

    def estimate(self) -> TrialProfile | None:
        """A new trial's needs, from the recent trials' measured profiles."""
        return self._profiles.estimate()

    # -- profiles -----------------------------------------------------------------

    # -- decisions ----------------------------------------------------------------

    def decide(self, view: PackingView) -> dict[GpuKey, GpuDecision]:
        """Each GPU's limit now, with the share a new trial gets and the reason."""
        previous = {key: state.limit for key, state in self._state.items()}
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
        gpus_per_node: dict[str, int] = {}
        for gpu in view.gpus:
            gpus_per_node[gpu.key.node] = gpus_per_node.get(gpu.key.node, 0) + 1
        decisions = {}
        for gpu in view.gpus:
            limit, reason = self._limit(gpu, view, gpus_per_node[gpu.key.node])
            state = self._state.get(gpu.key)
            if state is None:
                state = _GpuState(limit, reason, view.now)
                self._state[gpu.key] = state
            elif limit != state.limit:
                if limit < state.limit:
                    state.lowered_at = view.now
                state.limit, state.changed_at = limit, view.now
            state.reason = reason
            waiting = self._new_kind_waiting(gpu, view.now)
            if waiting is not None:
                reason = (
                    f"{reason}; no new neighbour until trial {waiting.number} (larger than "
                    f"any trial measured) has run {self.settings.probe_seconds:g} s past warm-up"
                )
            decisions[gpu.key] = GpuDecision(
                limit, 1.0 / limit, reason, previous.get(gpu.key), open=waiting is None
            )
        return decisions

    def _new_kind_waiting(self, gpu: GpuView, now: float) -> TrialOnGpu | None:
        """A trial of a new kind on the GPU not yet measured (``auto`` only)."""
        if self.settings.mode != "auto":
            return None
        for trial in gpu.trials:
            if trial.new_kind and (
                trial.warm_at is None or now - trial.warm_at < self.settings.probe_seconds
            ):
                return trial
        return None

    def _limit(  # noqa: PLR0911 - one return per rule reads better than a chain of flags
        self, gpu: GpuView, view: PackingView, gpus_on_node: int
    ) -> tuple[int, str]:
        """The GPU's limit now and why: a fall, a hold, or a rise to what fits."""
        s = self.settings
        state = self._state.get(gpu.key)
        current = state.limit if state is not None else 1
        if s.mode == "off":
            return 1, "packing off: one trial per GPU"
        if s.mode == "fixed":
            return s.trials_per_gpu, f"packing fixed: {s.trials_per_gpu} trial(s) per GPU"
        if not gpu.telemetry:
            return 1, "no GPU monitor reads this GPU: one trial per GPU"
        estimate = self.estimate()
        if estimate is None:
            return 1, (
                "no trial of this search measured yet: one per GPU until one has run "
                f"{s.probe_seconds:g} s past its warm-up"
            )
        by_util, hard, arithmetic = self._ceiling(gpu, view, estimate, gpus_on_node)
        fall = self._fall(gpu, view.now, current, estimate)
        if fall is not None:
            return fall
        if state is not None and view.now - state.oom_seen < s.cooldown_seconds:
            return min(current, by_util, hard), state.reason
        if current > hard:
            return hard, arithmetic
        if current > by_util:
            return current, (
                f"holding {current}: {arithmetic}; utilisation lowers a count only when "
                f"measured at {s.saturation_util:g}%"
            )
        if current == min(by_util, hard):
            return current, arithmetic
        # A rise: only from a full GPU, once per probe period, none in the cool-down.
        if len(gpu.trials) < current or (
            state is not None
            and (
                view.now - state.changed_at < s.probe_seconds
                or view.now - state.lowered_at < s.cooldown_seconds
            )
        ):
            return current, state.reason if state is not None else arithmetic
        return self._rise(gpu, view.now, current, min(by_util, hard), estimate, arithmetic)

    def _fall(
        self, gpu: GpuView, now: float, current: int, estimate: TrialProfile
    ) -> tuple[int, str] | None:
        """One trial less on saturation the estimate did not predict, or nearly full memory.

        Time-sliced trials past 100% of duty read 100%: saturation that the
        estimate predicts is where the most throughput is. Saturation it does not
        predict says the trials grew; one fewer, measured again, tells by how much.
        """
        s = self.settings
        n = len(gpu.trials)
        util = gpu.utilization_pct
        expected = n * estimate.utilization_pct
        if (
            self._profiles.measured(gpu, now)
            and util is not None
            and util >= s.saturation_util
            and expected < s.saturation_util
            and n > 1
        ):
            return max(1, min(current, n) - 1), (
                f"saturated: {util:.0f}% utilisation with {n} trial(s) >= "
                f"{s.saturation_util:g}%, where {n} × {estimate.utilization_pct:.0f}% "
                "was expected"
            )
        total, used = gpu.memory_total_mb, gpu.memory_used_mb
        if total and used is not None and used >= total * (1 - s.memory_headroom / 2):
            return max(1, min(current, n) - 1), (
                f"memory pressure: {used:.0f} of {total:.0f} MiB used with {n} trial(s)"
            )
        return None

    def _rise(  # noqa: PLR0917 - the rise's inputs, computed by _limit
        self,
        gpu: GpuView,
        now: float,
        current: int,
        target: int,
        estimate: TrialProfile,
        arithmetic: str,
    ) -> tuple[int, str]:
        """Straight to what fits, if the GPU's memory, with the trials to come, allows it."""
        s = self.settings
        util_now = self._utilization(gpu, estimate, self._profiles.measured(gpu, now))
        memory_now = self._memory(gpu, estimate)
        total = gpu.memory_total_mb
        memory_text = ""
        if total and memory_now is not None and estimate.memory_mb:
            usable = total * (1 - s.memory_headroom)
            room = math.floor((usable - memory_now) / estimate.memory_mb)
            if room < 1:
                return current, (
                    f"full: {memory_now:.0f} + {estimate.memory_mb:.0f} MiB for one more "
                    f"> {usable:.0f} MiB usable"
                )
            target = min(target, len(gpu.trials) + room)
            memory_text = (
                f", {memory_now:.0f} + {target - len(gpu.trials)} × "
                f"{estimate.memory_mb:.0f} <= {usable:.0f} MiB"
            )
        if target <= current:
            return current, arithmetic
        return target, (
            f"room: {util_now:.0f}% now, {estimate.utilization_pct:.0f}% per trial → {target} "
            f"trial(s){memory_text}; {arithmetic}"
        )

    def _ceiling(
        self, gpu: GpuView, view: PackingView, estimate: TrialProfile, gpus_on_node: int
    ) -> tuple[int, int, str]:
        """The most trials of the estimated size the GPU should hold, with the arithmetic.

        Returns the count by utilisation (the most predicted throughput, see
        :func:`hpsearch.telemetry.fit`), the bound by everything else (memory,
        CPUs, the maximum) and the arithmetic. Only the second lowers a count:
        utilisation lowers it when measured saturated, which is the hysteresis.
        """
        s = self.settings
        fitted = fit(
            estimate.utilization_pct,
            estimate.memory_mb,
            gpu.memory_total_mb,
            most=s.max_trials_per_gpu,
            target_util_pct=s.target_util,
            memory_headroom=s.memory_headroom,
        )
        by_util = fitted.by_utilization or s.max_trials_per_gpu
        hard = [s.max_trials_per_gpu]
        if fitted.by_memory is not None:
            hard.append(fitted.by_memory)
        parts = [f"max {s.max_trials_per_gpu}"]
        parts += fitted.arithmetic(estimate.utilization_pct, estimate.memory_mb)
        cpus = view.node_cpus.get(gpu.key.node)
        if cpus:
            by_cpu = max(1, math.floor(cpus / max(view.new_trial_cpus, 1e-9) / gpus_on_node))
            hard.append(by_cpu)
            parts.append(
                f"CPUs {cpus:g} on the node / {view.new_trial_cpus:g} per trial / "
                f"{gpus_on_node} GPU(s) → {by_cpu}"
            )
        ceiling = min(by_util, *hard)
        return by_util, min(hard), f"at most {ceiling} ({'; '.join(parts)})"

    def _utilization(self, gpu: GpuView, estimate: TrialProfile, measured: bool) -> float:
        """The GPU's utilisation now: measured when settled, else estimated per trial."""
        if measured and gpu.utilization_pct is not None:
            return gpu.utilization_pct
        # Trials not yet measured count at the estimate, not at what the GPU shows now.
        return len(gpu.trials) * estimate.utilization_pct

    def _memory(self, gpu: GpuView, estimate: TrialProfile) -> float | None:
        """Memory the GPU's trials hold or will: measured, or the estimate for those not yet."""
        if estimate.memory_mb is None:
            return gpu.memory_used_mb
        expected = sum(
            t.memory_mb if t.memory_mb is not None else estimate.memory_mb for t in gpu.trials
        )
        return max(expected, gpu.memory_used_mb or 0.0)

    # -- placement ----------------------------------------------------------------

    def place(
        self,
        view: PackingView,
        decisions: dict[GpuKey, GpuDecision],
        *,
        whole_gpu: bool = False,
    ) -> Placement | None:
        """The GPU a new trial goes to, or ``None`` when none has room now.

        The GPU with the most room relative to its limit wins (fewest trials, then
        the lowest utilisation, then the lowest index), so trials spread over GPUs
        instead of filling GPU 0 first. ``whole_gpu``: only an empty GPU, whole.
        """
        candidates = []
        for gpu in view.gpus:
            decision = decisions[gpu.key]
            n = len(gpu.trials)
            if any(t.alone for t in gpu.trials):
                continue
            if whole_gpu and n:
                continue
            if not whole_gpu and (n >= decision.limit or not decision.open):
                continue
            if not self._cpus_free(gpu.key.node, view):
                continue
            candidates.append((n / decision.limit, n, gpu.utilization_pct or 0.0, gpu.key, gpu))
        if not candidates:
            return None
        candidates.sort(key=lambda c: (c[0], c[1], c[2], c[3].node, c[3].index))
        gpu = candidates[0][4]
        decision = decisions[gpu.key]
        co_tenants = tuple(sorted(t.number for t in gpu.trials))
        if whole_gpu:
            return Placement(
                gpu.key, 1.0, (), "alone on a whole GPU: it ran out of memory under a shared cap"
            )
        share = decision.share
        reason = f"{decision.reason} (trial {len(gpu.trials) + 1} of {decision.limit})"
        return Placement(gpu.key, share, co_tenants, reason)

    @staticmethod
    def _cpus_free(node: str, view: PackingView) -> bool:
        total = view.node_cpus.get(node)
        if total is None:
            return True
        used = sum(t.cpus for g in view.gpus if g.key.node == node for t in g.trials)
        return used + view.new_trial_cpus <= total + 1e-9
