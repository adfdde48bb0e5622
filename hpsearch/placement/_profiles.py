"""What the trials of a search were measured to need: profiles, and the estimate of a new one."""

from __future__ import annotations

import math
from collections import deque

from hpsearch.placement._views import GpuView, TrialProfile
from hpsearch.placement.settings import PackingSpec

_RECENT_PROFILES = 20
"""How many recent trial profiles estimate a new trial (the search drifts as it learns)."""
KNOWN_AFTER = 3
"""Trials measured from their own samples after which their kind is known, however short."""


class TrialProfiles:
    """The recent trials' measured shares of their GPU, learned as GPUs are measured.

    Two ways in: a GPU measured ``probe_seconds`` past every warm-up on it (long
    trials, :meth:`learn`), and trials that ended with samples of their own
    (:meth:`add`): a kind of trial is known after :data:`KNOWN_AFTER` of those,
    whatever each lasted.

    Args:
        settings: the ``packing`` section (its probe time and saturation level).
    """

    def __init__(self, settings: PackingSpec) -> None:
        self._settings = settings
        self._profiles: deque[TrialProfile] = deque(maxlen=_RECENT_PROFILES)
        self._profiled: set[int] = set()
        self._whole = 0  # profiles of GPUs measured whole (long trials)
        self._sampled = 0  # profiles of trials that ended, from their own samples

    def estimate(self) -> TrialProfile | None:
        """A new trial's needs: the 75th percentile of recent utilisation shares, the largest peak.

        ``None`` until the kind is known (a GPU measured whole, or enough trials
        that ended). The largest peak rather than a typical one: memory that is
        not there is an OOM, while utilisation misjudged is only a slower step.
        """
        if not self._profiles or (self._whole == 0 and self._sampled < KNOWN_AFTER):
            return None
        utils = sorted(p.utilization_pct for p in self._profiles)
        memories = [p.memory_mb for p in self._profiles if p.memory_mb is not None]
        util = utils[min(len(utils) - 1, math.ceil(0.75 * len(utils)) - 1)]
        return TrialProfile(-1, util, max(memories) if memories else None)

    def add(self, profile: TrialProfile) -> None:
        """A trial ended, measured from the samples of its run."""
        self._sampled += 1
        self._keep(profile)

    def learn(self, gpu: GpuView, now: float) -> None:
        """Profile each trial of a GPU measured long enough past every warm-up on it.

        A GPU several trials saturate says only that they ask for more than it has:
        their shares are not learned from it.
        """
        if not self.measured(gpu, now) or gpu.utilization_pct is None:
            return
        n = len(gpu.trials)
        if n > 1 and gpu.utilization_pct >= self._settings.saturation_util:
            return
        for trial in gpu.trials:
            memory = trial.memory_mb
            if memory is None and gpu.memory_used_mb is not None:
                memory = gpu.memory_used_mb / n
            self._whole += 1
            self._keep(TrialProfile(trial.number, gpu.utilization_pct / n, memory))

    def measured(self, gpu: GpuView, now: float) -> bool:
        """Every trial on the GPU is warm and the readings cover ``probe_seconds`` since."""
        if not gpu.trials or gpu.measured_since is None or gpu.utilization_pct is None:
            return False
        if any(t.warm_at is None for t in gpu.trials):
            return False
        return now - gpu.measured_since >= self._settings.probe_seconds

    def _keep(self, profile: TrialProfile) -> None:
        if profile.number in self._profiled:
            # Re-measured: keep the later reading (longer window, past any ramp-up).
            self._profiles = deque(
                (p for p in self._profiles if p.number != profile.number),
                maxlen=_RECENT_PROFILES,
            )
        self._profiled.add(profile.number)
        self._profiles.append(profile)
