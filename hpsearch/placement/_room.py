"""What one GPU has room for, read from its samples and the estimate of a new trial.

The arithmetic the packing policy rests on, per GPU: the most trials it should
hold (by utilisation, and bounded by memory, the node's CPUs and the maximum), a
rise bounded by the memory its trials hold or will, and a fall when it is measured
saturated where the estimate did not predict it, or its memory is nearly full.
Pure: the settings and the search's measured profiles in, answers with the
arithmetic a person can check out.
"""

from __future__ import annotations

import math

from hpsearch.placement._capacity import fit
from hpsearch.placement._profiles import TrialProfiles
from hpsearch.placement._views import GpuView, PackingView, TrialProfile
from hpsearch.placement.settings import PackingSpec

ROOMY_SHARE = 0.25
"""A GPU this full at most (a share of its usable memory) takes a neighbour for a trial of a
new kind before that trial is measured."""


class GpuRoom:
    """The room of one GPU for trials of the estimated size, with the arithmetic.

    Args:
        settings: the ``packing`` section.
        profiles: the search's measured trial profiles (whether a GPU has settled).
    """

    def __init__(self, settings: PackingSpec, profiles: TrialProfiles) -> None:
        self.settings = settings
        self._profiles = profiles

    def roomy(self, gpu: GpuView) -> bool:
        """Whether the GPU's last samples show it nearly empty (:data:`ROOMY_SHARE` of its
        usable memory in use at most): room for its trials to double, even were each to
        grow to several times what it holds now."""
        total, recent = gpu.memory_total_mb, gpu.recent
        if not total or recent is None or recent.used_mb is None:
            return False
        return recent.used_mb <= ROOMY_SHARE * total * (1 - self.settings.memory_headroom)

    def idle(self, gpu: GpuView) -> bool:
        """Whether the GPU's last samples show it nearly empty of work as well as of memory
        (:meth:`roomy`, and busy half of ``target_util`` at most): room for what it holds
        to double its kernels too.

        A fused group's members share one process, so doubling them doubles the work it
        launches. Memory alone says nothing of that: a model that keeps its GPU busy may
        hold a few hundred MiB of 16 GB, and doubled on such a reading, a group of it
        ran 16 members at a fraction of a member's speed each.
        """
        recent = gpu.recent
        return (
            self.roomy(gpu)
            and recent is not None
            and 2 * recent.busy_pct <= self.settings.target_util
        )

    def fall(
        self,
        gpu: GpuView,
        now: float,
        current: int,
        estimate: TrialProfile,
        *,
        paid: bool = False,
    ) -> tuple[int, str] | None:
        """One trial less on saturation the estimate did not predict, or nearly full memory.

        Time-sliced trials past 100% of duty read 100%: saturation that the
        estimate predicts is where the most throughput is. Saturation it does not
        predict says the trials grew; one fewer, measured again, tells by how much.
        Where the count the GPU holds was measured to pay (``paid``: its steps beat
        the best count below it), its steps have told already: the judge, which
        keeps reading them, backs off when they stop paying. The estimate is the
        search's mean trial, and trials of one search differ: two of its heavier
        ones saturate a GPU and still finish sooner together than one after the
        other (2% and 60% trials: a count of two measured 1.45x one, then fell to
        one on saturation).
        Until a trial ends on a GPU holding more than ``current`` (the last fall, not
        carried out yet), the answer is ``current``: no rise, and no fall on samples
        of the trials already fallen from.
        """
        s = self.settings
        n = len(gpu.trials)
        util = self.busy(gpu, now)
        expected = n * estimate.utilization_pct
        why = None
        if (
            util is not None
            and util >= s.saturation_util
            and expected < s.saturation_util
            and n > 1
            and not paid
        ):
            why = (
                f"saturated: {util:.0f}% utilisation with {n} trial(s) >= "
                f"{s.saturation_util:g}%, where {n} × {estimate.utilization_pct:.0f}% "
                "was expected"
            )
        total = gpu.memory_total_mb
        used = max(
            (m for m in (gpu.memory_used_mb, gpu.recent.used_mb if gpu.recent else None) if m),
            default=None,
        )
        if (
            why is None
            and total
            and used is not None
            and used >= total * (1 - s.memory_headroom / 2)
        ):
            why = f"memory pressure: {used:.0f} of {total:.0f} MiB used with {n} trial(s)"
        if why is None:
            return None
        if n > current:
            # The last fall is not carried out yet: its trials end as they finish, and
            # until then every decision reads the same samples. Falling again on them
            # took a GPU from 8 to 2 in 20 ms; one fewer is measured before the next.
            return current, f"{why}; at most {current} once one of them ends"
        return max(1, n - 1), why

    def busy(self, gpu: GpuView, now: float) -> float | None:
        """How busy the GPU is measured: over its settled window, else its last samples while
        the trials now on it ran, warm."""
        if self._profiles.measured(gpu, now):
            return gpu.utilization_pct
        recent = gpu.recent
        if (
            recent is not None
            and recent.processes == len(gpu.trials)
            and all(t.warm_at is not None for t in gpu.trials)
        ):
            return recent.busy_pct
        return None

    def rise(
        self,
        gpu: GpuView,
        current: int,
        target: int,
        estimate: TrialProfile,
        arithmetic: str,
    ) -> tuple[int, str]:
        """Up to ``target``, if the GPU's memory, with the trials to come, allows it."""
        s = self.settings
        memory_now = self.memory(gpu, estimate)
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
            f"room: {estimate.utilization_pct:.0f}% per trial → {target} "
            f"trial(s){memory_text}; {arithmetic}"
        )

    def ceiling(
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

    def memory(self, gpu: GpuView, estimate: TrialProfile) -> float | None:
        """Memory the GPU's trials hold or will: measured, or the estimate for those not yet."""
        if estimate.memory_mb is None:
            return gpu.memory_used_mb
        expected = sum(
            t.memory_mb if t.memory_mb is not None else estimate.memory_mb for t in gpu.trials
        )
        return max(expected, gpu.memory_used_mb or 0.0)
