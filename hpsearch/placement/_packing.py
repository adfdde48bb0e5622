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
from collections import deque
from dataclasses import dataclass, field

from hpsearch.placement._capacity import fit
from hpsearch.placement._settings import PackingSpec

_RECENT_PROFILES = 20
"""How many recent trial profiles estimate a new trial (the search drifts as it learns)."""


@dataclass(frozen=True)
class GpuKey:
    """One GPU of the cluster: its Ray node and its index on that node.

    Attributes:
        node: the Ray node id (unique; several nodes may share an address).
        index: the GPU's index on the node.
        address: the node's address, for people (not part of the key).
    """

    node: str
    index: int
    address: str = field(default="", compare=False)

    def label(self, single_node: bool = True) -> str:
        """``gpu0``, or ``<node id prefix>/gpu0`` when the cluster has several nodes."""
        return f"gpu{self.index}" if single_node else f"{self.node[:8]}/gpu{self.index}"


@dataclass(frozen=True)
class TrialOnGpu:
    """A running trial, as the policy sees it.

    Attributes:
        number: the Optuna trial number.
        warm_at: when it was past its warm-up (its first report); ``None``: not yet.
        cpus: CPUs it keeps busy (1 plus its DataLoader workers, when known).
        memory_mb: its own peak GPU memory since warm-up, when measured.
        alone: it runs alone on a whole GPU (an OOM under a shared cap, run again).
        new_kind: it is larger, in the parameters that grow memory, than any trial
            measured so far: its GPU takes no new neighbour until it is measured.
    """

    number: int
    warm_at: float | None = None
    cpus: float = 1.0
    memory_mb: float | None = None
    alone: bool = False
    new_kind: bool = False


@dataclass(frozen=True)
class GpuView:
    """One GPU now.

    Attributes:
        key: which GPU.
        memory_total_mb: its memory (``None``: unknown).
        trials: the trials running on it.
        measured_since: start of the window the readings below cover (the latest
            of its trials' warm-ups); ``None`` when nothing is measured.
        utilization_pct: mean utilisation over that window.
        memory_used_mb: peak memory used over that window.
        telemetry: whether a monitor reads this GPU at all (none: a node whose monitor is lost).
    """

    key: GpuKey
    memory_total_mb: float | None
    trials: tuple[TrialOnGpu, ...] = ()
    measured_since: float | None = None
    utilization_pct: float | None = None
    memory_used_mb: float | None = None
    telemetry: bool = True


@dataclass(frozen=True)
class OomEvent:
    """A trial ran out of memory on ``gpu`` while ``sharing`` trials (itself included) ran there."""

    gpu: GpuKey
    at: float
    sharing: int


@dataclass(frozen=True)
class PackingView:
    """Everything a decision reads.

    Attributes:
        now: the current time (same clock as the trials' times).
        gpus: every GPU of the cluster.
        node_cpus: CPUs of each node (by ``GpuKey.node``).
        new_trial_cpus: CPUs a new trial is expected to use.
        ooms: OOMs of trials since the last view (the policy keeps what it needs).
    """

    now: float
    gpus: tuple[GpuView, ...]
    node_cpus: dict[str, float] = field(default_factory=dict)
    new_trial_cpus: float = 1.0
    ooms: tuple[OomEvent, ...] = ()


@dataclass(frozen=True)
class TrialProfile:
    """What one trial was measured to need: its share of utilisation and its peak memory."""

    number: int
    utilization_pct: float
    memory_mb: float | None


@dataclass(frozen=True)
class GpuDecision:
    """How many trials a GPU may hold now, the share a new one gets, and why.

    Attributes:
        limit: trials the GPU may hold.
        share: the share of the GPU (and of its memory) a trial admitted now gets.
        reason: the arithmetic or the event behind the limit.
        previous: the limit before this decision (``None`` for the first one).
        open: whether the GPU takes a new trial now if it has room (not while a
            trial of a new kind on it waits to be measured).
    """

    limit: int
    share: float
    reason: str
    previous: int | None = None
    open: bool = True

    @property
    def changed(self) -> bool:
        """Whether the limit moved in this decision."""
        return self.previous is not None and self.previous != self.limit


@dataclass(frozen=True)
class Placement:
    """Where the next trial runs and with what: the policy's answer to one admission."""

    gpu: GpuKey
    share: float
    co_tenants: tuple[int, ...]
    reason: str


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
        self._profiles: deque[TrialProfile] = deque(maxlen=_RECENT_PROFILES)
        self._profiled: set[int] = set()

    # -- profiles -----------------------------------------------------------------

    def estimate(self) -> TrialProfile | None:
        """A new trial's needs: the 75th percentile of recent utilisation shares, the largest peak.

        The largest peak rather than a typical one: memory that is not there is an
        OOM, while utilisation misjudged is only a slower step.
        """
        if not self._profiles:
            return None
        utils = sorted(p.utilization_pct for p in self._profiles)
        memories = [p.memory_mb for p in self._profiles if p.memory_mb is not None]
        util = utils[min(len(utils) - 1, math.ceil(0.75 * len(utils)) - 1)]
        return TrialProfile(-1, util, max(memories) if memories else None)

    def _learn(self, gpu: GpuView, now: float) -> None:
        """Profile each trial of a GPU measured long enough past every warm-up on it.

        A GPU several trials saturate says only that they ask for more than it has:
        their shares are not learned from it.
        """
        if not self._measured(gpu, now) or gpu.utilization_pct is None:
            return
        n = len(gpu.trials)
        if n > 1 and gpu.utilization_pct >= self.settings.saturation_util:
            return
        for trial in gpu.trials:
            memory = trial.memory_mb
            if memory is None and gpu.memory_used_mb is not None:
                memory = gpu.memory_used_mb / n
            profile = TrialProfile(trial.number, gpu.utilization_pct / n, memory)
            if trial.number in self._profiled:
                # Re-measured: keep the later reading (longer window, past any ramp-up).
                self._profiles = deque(
                    (p for p in self._profiles if p.number != trial.number),
                    maxlen=_RECENT_PROFILES,
                )
            self._profiled.add(trial.number)
            self._profiles.append(profile)

    def _measured(self, gpu: GpuView, now: float) -> bool:
        """Every trial on the GPU is warm and the readings cover ``probe_seconds`` since."""
        if not gpu.trials or gpu.measured_since is None or gpu.utilization_pct is None:
            return False
        if any(t.warm_at is None for t in gpu.trials):
            return False
        return now - gpu.measured_since >= self.settings.probe_seconds

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
            self._learn(gpu, view.now)
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
            self._measured(gpu, now)
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
        util_now = self._utilization(gpu, estimate, self._measured(gpu, now))
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
                f"CPUs {cpus:g}/{view.new_trial_cpus:g} per trial/{gpus_on_node} GPU(s) → {by_cpu}"
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
