"""A resource policy: how much of the cluster each new trial gets, decided at its launch.

``admit`` is asked before each trial with the trials running now and what the
cluster has; it answers the new trial's resources, or ``None`` to wait. This one
runs at most two trials at once, each on a whole GPU where there is one, else on
one CPU, and says why in the reason every trial's MLflow run carries.
"""

from __future__ import annotations

from collections.abc import Sequence

from hpsearch.placement import Admission, ClusterCapacity, ResourcePolicy, RunningTrial


class TwoAtMost(ResourcePolicy):
    """Two trials at once at most: a whole GPU each where there are GPUs."""

    def admit(
        self,
        running: Sequence[RunningTrial],
        capacity: ClusterCapacity,
        *,
        whole_gpu: bool = False,
    ) -> Admission | None:
        if len(running) >= 2:
            return None  # wait: the scheduler asks again when a trial ends
        gpus_free = capacity.gpus - sum(trial.gpus for trial in running)
        if capacity.gpus > 0 and gpus_free < 1:
            return None
        gpus = 1.0 if capacity.gpus > 0 else 0.0
        return Admission(cpus=1.0, gpus=gpus, reason=f"two at most ({len(running) + 1} of 2)")
