"""PackingAdmission without Ray: a real monitor over the simulated load-model GPUs, a virtual
clock, and running trials as the packing feedback listener would list them."""

from __future__ import annotations

from dataclasses import replace

from hpsearch.placement import (
    AdmissionRequest,
    ClusterCapacity,
    GpuDecision,
    NodeGpus,
    PackingAdmission,
    PackingPolicy,
    PackingSpec,
    RunningTrial,
)
from hpsearch.runner import VirtualClock
from hpsearch.simulation import LoadModelBackend
from hpsearch.telemetry import (
    ClusterReadings,
    GpuInfo,
    GpuLoad,
    GpuMonitor,
    GpuSample,
    TrialLoad,
)

NODE = "3f2a9c0d1e"  # a Ray node id
ADDRESS = "127.0.0.1"
CAPACITY = ClusterCapacity(cpus=16, gpus=2)


class WithheldUtilization(LoadModelBackend):
    """GPUs whose driver withholds their utilisation (NVML: not supported, as under MIG)."""

    def sample(self, now: float) -> list[GpuSample]:
        return [replace(s, utilization_pct=None) for s in super().sample(now)]


class Rig:
    """Two simulated 6 GB GPUs, their monitor, and the admission policy reading them."""

    def __init__(
        self,
        settings: PackingSpec,
        backend: type[LoadModelBackend] = LoadModelBackend,
        exclusive: tuple[int, ...] = (),
    ) -> None:
        self.clock = VirtualClock(1000.0)
        gpus = [
            GpuInfo(i, "Simulated RTX 4050", 6141.0, 115.0, exclusive=i in exclusive)
            for i in (0, 1)
        ]
        self.backend = backend(gpus)
        self.monitor = GpuMonitor(self.backend, interval_s=0.5, clock=self.clock)
        self.changes: list[tuple[str, int, int | None]] = []
        self.series_points: list[dict[str, float]] = []
        self.monitored = True  # whether the node's GPU monitor reads its GPUs

        self.admission = PackingAdmission(
            PackingPolicy(settings),
            nodes=lambda: [
                NodeGpus(
                    NODE, ADDRESS, 16.0, (0, 1), {0: 6141.0, 1: 6141.0}, monitored=self.monitored
                )
            ],
            request=AdmissionRequest(cpus_per_trial=1.0, max_concurrent=None, ray_gpus=0.125),
            readings=ClusterReadings(NODE, self.monitor),
            observers=[self],
            clock=self.clock,
        )
        self.running: list[RunningTrial] = []

    def decided(self, gpu: str, decision: GpuDecision) -> None:
        self.changes.append((gpu, decision.limit, decision.previous))

    def series(self, points: dict[str, float]) -> None:
        self.series_points.append(points)

    def admit(self) -> RunningTrial | None:
        admission = self.admission.admit(self.running, CAPACITY)
        if admission is None:
            return None
        trial = RunningTrial(
            number=len(self.running),
            cpus=admission.cpus,
            gpus=admission.gpus,
            gpu_index=admission.gpu_index,
            node=admission.node,
            pid=5000 + len(self.running),
        )
        self.running.append(trial)
        return trial

    def warm(self, trial: RunningTrial, util: float, memory: float) -> None:
        """The trial reported its first step and puts its load on its GPU."""
        index = self.running.index(trial)
        assert trial.gpu_index is not None
        self.running[index] = replace(trial, warm_at=self.clock.now)
        self.backend.set_load(
            trial.number, TrialLoad(GpuLoad(util, memory), trial.pid, (trial.gpu_index,))
        )

    def one_per_gpu_measured(self) -> None:
        """A trial on each GPU, warm at 11% and 167 MiB, read for 3 s."""
        trials = [self.admit(), self.admit()]
        for trial in trials:
            assert trial is not None
            self.warm(trial, util=11.0, memory=167.0)
        self.wait(3)

    def wait(self, seconds: float) -> None:
        for _ in range(int(seconds / 0.5)):
            self.clock.now += 0.5
            self.monitor.sample_now()


def test_trials_are_spread_then_packed_from_what_the_monitor_measured() -> None:
    rig = Rig(PackingSpec(probe_seconds=2, cooldown_seconds=10))
    first, second = rig.admit(), rig.admit()
    assert first is not None
    assert second is not None
    assert (first.gpu_index, second.gpu_index) == (0, 1)  # not GPU 0 first
    assert first.gpus == 1.0
    assert rig.admit() is None  # nothing measured yet: one per GPU
    for trial in (first, second):
        rig.warm(trial, util=11.0, memory=167.0)
    rig.wait(3)

    third = rig.admit()

    assert third is not None
    assert third.gpus == 1 / 8  # measured at 11%: eight fit (6.3x one alone)
    assert ("gpu0", 8, 1) in rig.changes
    profile = rig.admission.policy.estimate()
    assert profile is not None
    assert round(profile.utilization_pct) == 11
    assert profile.memory_mb == 167.0  # the process's own memory, read by pid
    assert rig.series_points[-1]["packing_gpu0_trials"] == 1.0  # the third is not counted yet
    assert rig.series_points[-1]["packing_gpu0_trials_allowed"] == 8.0
    assert rig.series_points[-1]["packing_gpu0_utilization_pct"] == 11.0


def test_a_gpu_that_withholds_its_utilisation_holds_one_trial_and_says_why() -> None:
    rig = Rig(PackingSpec(probe_seconds=2, cooldown_seconds=10), backend=WithheldUtilization)
    rig.one_per_gpu_measured()

    assert rig.admit() is None
    decision = rig.admission.policy.decide(rig.admission.view(rig.running))
    reason = decision[next(iter(decision))].reason
    assert reason.startswith("its GPU does not report its utilisation (NVML: not supported")
    assert "packing.mode: fixed" in reason


def test_a_gpu_its_monitor_reads_as_one_process_at_a_time_holds_one_trial() -> None:
    rig = Rig(PackingSpec(probe_seconds=2, cooldown_seconds=10), exclusive=(1,))
    rig.one_per_gpu_measured()

    placed = [rig.admit() for _ in range(10)]

    assert {t.gpu_index for t in placed if t is not None} == {0}  # GPU 1 keeps its one
    decision = rig.admission.policy.decide(rig.admission.view(rig.running))
    gpu1 = next(d for key, d in decision.items() if key.index == 1)
    assert (gpu1.limit, gpu1.reason.split(":")[0]) == (
        1,
        "its compute mode admits one process at a time (exclusive-process)",
    )


def test_an_oom_told_by_the_recorder_lowers_that_gpu_only() -> None:
    rig = Rig(PackingSpec(probe_seconds=1, cooldown_seconds=30))
    for _ in range(4):
        for trial in [t for t in rig.running if t.warm_at is None]:
            rig.warm(trial, util=10.0, memory=200.0)
        rig.wait(1.5)
        while rig.admit() is not None:
            pass
    before = {gpu: limit for gpu, limit, _ in rig.changes}
    assert before["gpu0"] >= 3

    rig.admission.trial_ran_out(0, NODE, rig.clock.now, sharing=before["gpu0"])
    rig.admission.admit(rig.running, CAPACITY)

    gpu, limit, previous = rig.changes[-1]
    assert (gpu, limit, previous) == ("gpu0", before["gpu0"] - 1, before["gpu0"])
    decision = rig.admission.decisions[-1]
    assert "ran out of memory" in str(decision["reason"])


def test_a_lost_monitor_is_said_for_each_of_its_gpus_even_where_the_limit_stays() -> None:
    rig = Rig(PackingSpec(probe_seconds=2, cooldown_seconds=10))
    first, second = rig.admit(), rig.admit()
    assert first is not None
    assert second is not None
    assert rig.changes == [("gpu0", 1, None), ("gpu1", 1, None)]  # nothing measured yet
    rig.admission.admit(rig.running, CAPACITY)
    assert len(rig.changes) == 2  # an unchanged limit is not said again

    rig.monitored = False  # the node's monitor is lost; its GPUs hold one trial, as before
    rig.wait(6)  # past the nodes' re-read
    rig.admission.admit(rig.running, CAPACITY)

    assert rig.changes[2:] == [("gpu0", 1, 1), ("gpu1", 1, 1)]
    last = {d["gpu"]: d for d in rig.admission.decisions}
    assert all("no GPU monitor" in str(d["reason"]) for d in last.values()), last
    rig.admission.admit(rig.running, CAPACITY)
    assert len(rig.changes) == 4  # said once


def test_a_gpus_one_process_and_an_ended_one_are_told_as_profiles() -> None:
    rig = Rig(PackingSpec(probe_seconds=2, cooldown_seconds=10))
    told: list[tuple[int, float, float | None, float | None]] = []
    rig.admission.on_profile(
        lambda number, p, total: told.append((number, p.utilization_pct, p.memory_mb, total))
    )
    admitted = rig.admit()
    assert admitted is not None
    first = rig.running[0] = replace(admitted, started_at=rig.clock.now)
    load = TrialLoad(GpuLoad(3.0, 334.0), first.pid, (0,))
    rig.backend.set_load(first.number, load)  # warming up: no step yet
    rig.wait(3)
    rig.admission.admit(rig.running, CAPACITY)
    assert not told  # a warm-up's samples say little of the work
    rig.warm(first, util=22.0, memory=334.0)
    rig.wait(3)
    rig.admission.admit(rig.running, CAPACITY)
    assert told
    assert told[-1] == (0, 22.0, 334.0, 6141.0)

    told.clear()
    rig.admission.trial_ended(rig.running[0], rig.clock.now)
    rig.running.clear()
    rig.admission.admit(rig.running, CAPACITY)
    assert [t[0] for t in told] == [0]  # its own samples, once it ended
    assert told[0][1] == 22.0
    assert told[0][3] == 6141.0


def test_a_launchs_own_memory_is_told_from_its_first_samples_and_a_roomy_gpu_is_said() -> None:
    rig = Rig(PackingSpec(probe_seconds=2, cooldown_seconds=10))
    held: list[tuple[int, float, float | None]] = []
    rig.admission.on_memory(lambda number, mb, total: held.append((number, mb, total)))
    for _ in range(2):  # one trial on each GPU, warming up
        admitted = rig.admit()
        assert admitted is not None
        index = rig.running.index(admitted)
        trial = rig.running[index] = replace(admitted, started_at=rig.clock.now)
        rig.backend.set_load(trial.number, TrialLoad(GpuLoad(3.0, 700.0), trial.pid, (index,)))
    assert {t.gpu_index for t in rig.running} == {0, 1}
    rig.wait(2)  # no step reported yet: their memory is read all the same
    third = rig.admission.admit(rig.running, CAPACITY)
    assert sorted(held[-2:]) == [(0, 700.0, 6141.0), (1, 700.0, 6141.0)]
    # 700 of 6141 MiB in use: nearly empty, as of its latest sample.
    assert third is not None
    assert third.room_seen_at == rig.clock.now
    for index, trial in enumerate(rig.running):
        rig.backend.set_load(trial.number, TrialLoad(GpuLoad(3.0, 1500.0), trial.pid, (index,)))
    rig.wait(2)
    crowded = rig.admission.admit(rig.running, CAPACITY)
    assert sorted(held[-2:]) == [(0, 1500.0, 6141.0), (1, 1500.0, 6141.0)]
    assert crowded is not None
    assert crowded.room_seen_at is None  # 1500 MiB in use: over a quarter, not roomy


def test_a_gpu_busy_with_little_memory_in_use_is_not_said_roomy() -> None:
    """A model that keeps its GPU busy in a few hundred MiB leaves no room for a fused group
    of it to double: the memory says nearly empty, the work does not."""
    for busy in (60.0, 40.0):
        rig = Rig(PackingSpec(probe_seconds=2, cooldown_seconds=10))
        for _ in range(2):
            admitted = rig.admit()
            assert admitted is not None
            index = rig.running.index(admitted)
            trial = rig.running[index] = replace(admitted, started_at=rig.clock.now)
            load = TrialLoad(GpuLoad(busy, 700.0), trial.pid, (index,))
            rig.backend.set_load(trial.number, load)
        rig.wait(2)
        next_one = rig.admission.admit(rig.running, CAPACITY)
        assert next_one is not None
        # 700 of 6141 MiB in use either way; 60% busy is over half of target_util (100%).
        assert (next_one.room_seen_at is None) == (busy > 50.0)
