"""The packing policy, pure: GPU views written by hand, no Ray, no GPU."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hpsearch.placement import (
    DeviceReading,
    GpuDecision,
    GpuKey,
    GpuView,
    OomEvent,
    PackingPolicy,
    PackingSpec,
    PackingView,
    TrialOnGpu,
    TrialProfile,
    WorkDone,
)

RTX4050_MB = 6141.0
GPU0 = GpuKey("127.0.0.1", 0)
GPU1 = GpuKey("127.0.0.1", 1)
FAST = PackingSpec(probe_seconds=5.0, cooldown_seconds=20.0)


class Machine:
    """GPUs running trials of one kind: each trial adds ``util`` % and ``memory`` MiB when warm."""

    def __init__(
        self,
        policy: PackingPolicy,
        *,
        util: float,
        memory: float,
        gpus: tuple[GpuKey, ...] = (GPU0,),
        cpus: float = 16.0,
    ) -> None:
        self.policy = policy
        self.util, self.memory = util, memory
        self.gpus = gpus
        self.cpus = cpus
        self.now = 0.0
        self.trials: dict[GpuKey, list[TrialOnGpu]] = {g: [] for g in gpus}
        self.next_number = 0
        self.limits: list[int] = []

    def view(self, ooms: tuple[OomEvent, ...] = ()) -> PackingView:
        views = []
        for key, trials in self.trials.items():
            warm = [t for t in trials if t.warm_at is not None]
            since = max((t.warm_at for t in warm if t.warm_at is not None), default=None)
            views.append(
                GpuView(
                    key=key,
                    memory_total_mb=RTX4050_MB,
                    trials=tuple(trials),
                    measured_since=since if trials else None,
                    utilization_pct=min(100.0, self.util * len(warm)) if trials else None,
                    memory_used_mb=self.memory * len(warm) if trials else None,
                )
            )
        return PackingView(
            now=self.now, gpus=tuple(views), node_cpus={"127.0.0.1": self.cpus}, ooms=ooms
        )

    def fill(self) -> list[GpuKey]:
        """Admit trials while the policy places them; return where each went."""
        placed: list[GpuKey] = []
        while True:
            view = self.view()
            decisions = self.policy.decide(view)
            placement = self.policy.place(view, decisions)
            if placement is None:
                self.limits.append(decisions[self.gpus[0]].limit)
                return placed
            self.trials[placement.gpu].append(TrialOnGpu(self.next_number))
            self.next_number += 1
            placed.append(placement.gpu)

    def warm_up_and_wait(self, seconds: float) -> None:
        self.trials = {
            g: [t if t.warm_at is not None else replace(t, warm_at=self.now) for t in ts]
            for g, ts in self.trials.items()
        }
        self.now += seconds

    def run(self, rounds: int) -> int:
        for _ in range(rounds):
            self.fill()
            self.warm_up_and_wait(FAST.probe_seconds + 1)
        return self.limits[-1]


def test_an_unmeasured_search_runs_one_trial_per_gpu() -> None:
    machine = Machine(PackingPolicy(FAST), util=11, memory=167)
    assert machine.fill() == [GPU0]
    decision = machine.policy.decide(machine.view())[GPU0]
    assert decision.limit == 1
    assert "no trial of this search measured yet" in decision.reason


def test_the_seeds_rtx4050_case_packs_several_trials() -> None:
    # Seed 004: 11% utilisation and 167 MiB of 6 GiB for one trial.
    machine = Machine(PackingPolicy(FAST), util=11, memory=167)
    final = machine.run(6)
    assert final == 8  # 8 x 11% = 88% busy, each at 92% speed: 7.3x one alone (the maximum)
    assert machine.limits[:3] == [1, 8, 8]  # measured alone once, then straight to what fits
    assert len(machine.trials[GPU0]) == 8
    reason = machine.policy.decide(machine.view())[GPU0].reason
    assert "throughput 11.0% each → 8 (≈7.35× one trial alone)" in reason


def test_a_saturating_workload_stays_at_one() -> None:
    machine = Machine(PackingPolicy(FAST), util=95, memory=800)
    assert machine.run(6) == 1
    assert len(machine.trials[GPU0]) == 1


def test_a_memory_heavy_workload_stays_at_one_whatever_its_utilisation() -> None:
    machine = Machine(PackingPolicy(FAST), util=5, memory=3500)
    assert machine.run(6) == 1
    reason = machine.policy.decide(machine.view())[GPU0].reason
    assert "memory 5527/3500 MiB → 1" in reason


def test_saturation_the_estimate_did_not_predict_lowers_the_count() -> None:
    machine = Machine(PackingPolicy(FAST), util=10, memory=200)
    assert machine.run(4) == 8
    machine.util = 20  # the same trials now work the GPU harder (a later, larger config)
    machine.now += FAST.probe_seconds + 1
    decision = machine.policy.decide(machine.view())[GPU0]
    assert decision.limit == 7
    assert decision.changed
    assert decision.previous == 8
    assert decision.reason.startswith("saturated: 100% utilisation with 8 trial(s) >= 100%")
    assert "where 8 × 10% was expected" in decision.reason
    # Asked again before any of the 8 ended, it reads what it fell on: it holds 7 (falling
    # on each admission's question took a GPU from 8 to 2 in 20 ms).
    for _ in range(3):
        machine.now += 0.01
        again = machine.policy.decide(machine.view())[GPU0]
        assert again.limit == 7
        assert again.reason.endswith("at most 7 once one of them ends")
    machine.trials[GPU0].pop()  # one ends: 7 at 20% each still saturate it
    assert machine.policy.decide(machine.view())[GPU0].limit == 6


def test_a_count_measured_to_pay_holds_on_saturation_the_mean_trial_did_not_predict() -> None:
    # A search of light trials (2%) and heavy ones (60%): its mean trial asks 20%. Two
    # heavy ones saturate the GPU, and still step 1.45x as fast together as one alone.
    policy = PackingPolicy(
        PackingSpec(probe_seconds=5.0, cooldown_seconds=20.0, max_trials_per_gpu=2)
    )
    profiles = tuple(TrialProfile(k, 20.0, 2000.0, samples=5) for k in range(4))
    now = 100.0

    def decide(busy: float, work: tuple[WorkDone, ...] = ()) -> GpuDecision:
        trials = tuple(TrialOnGpu(k, warm_at=now - 1.0) for k in range(2))
        reading = DeviceReading(
            busy / 2, 4000.0, samples=5, busy_pct=busy, used_mb=4000.0, processes=2,
            since=now - 1.0, latest=now,
        )  # fmt: skip
        view = PackingView(
            now=now,
            gpus=(GpuView(GPU0, H200_MB, trials, recent=reading),),
            node_cpus={"127.0.0.1": 16.0},
            profiles=profiles if now == 100.0 else (),
            work=work,
        )
        return policy.decide(view)[GPU0]

    assert decide(busy=40.0).limit == 1  # measured since it last moved: next sample
    now += 0.5
    assert decide(busy=40.0).limit == 2
    now += 1.0
    steps = tuple(WorkDone(GPU0, now, k, step_s=0.10, warm=1) for k in range(16)) + tuple(
        WorkDone(GPU0, now, k, step_s=0.138, warm=2) for k in range(16)
    )
    measured = decide(busy=100.0, work=steps)
    assert measured.judged.startswith("2 trial(s) measured 14.49 steps/s, 1.45x 1's")
    for _ in range(3):
        now += 1.0
        held = decide(busy=100.0)
        assert held.limit == 2, held.reason
    # What the judge reads still decides: steps no faster than one alone take it back.
    now += 1.0
    slower = tuple(WorkDone(GPU0, now, k, step_s=0.2, warm=2) for k in range(64))
    assert decide(busy=100.0, work=slower).limit == 1


def test_saturation_the_estimate_predicts_holds_without_flapping() -> None:
    # 45% each: three take turns at 100% busy (2.1x one alone), the most throughput.
    machine = Machine(PackingPolicy(FAST), util=45, memory=200)
    assert machine.run(3) == 3
    for _ in range(4):
        machine.now += FAST.cooldown_seconds
        assert machine.policy.decide(machine.view())[GPU0].limit == 3


def test_an_oom_under_packing_lowers_the_count_and_holds_it_for_the_cool_down() -> None:
    machine = Machine(PackingPolicy(FAST), util=10, memory=300)
    assert machine.run(3) == 8
    oom = OomEvent(GPU0, machine.now, sharing=8)
    decision = machine.policy.decide(machine.view(ooms=(oom,)))[GPU0]
    assert (decision.previous, decision.limit) == (8, 7)
    assert "ran out of memory with 8 trials" in decision.reason
    # A trial ends; within the cool-down the freed place is not refilled past 7.
    machine.trials[GPU0].pop()
    machine.now += FAST.cooldown_seconds / 2
    assert machine.policy.decide(machine.view())[GPU0].limit == 7
    machine.now += FAST.cooldown_seconds
    assert machine.policy.decide(machine.view())[GPU0].limit == 8


def test_an_oom_of_a_trial_alone_changes_nothing() -> None:
    machine = Machine(PackingPolicy(FAST), util=10, memory=300)
    machine.run(3)
    before = machine.policy.decide(machine.view())[GPU0].limit
    oom = OomEvent(GPU0, machine.now, sharing=1)
    assert machine.policy.decide(machine.view(ooms=(oom,)))[GPU0].limit == before


def test_two_gpus_get_balanced_placements() -> None:
    machine = Machine(PackingPolicy(FAST), util=10, memory=200, gpus=(GPU0, GPU1))
    assert machine.fill() == [GPU0, GPU1]  # Ray alone would put both on GPU 0
    machine.run(6)
    counts = [len(machine.trials[g]) for g in (GPU0, GPU1)]
    assert abs(counts[0] - counts[1]) <= 1
    assert sum(counts) >= 8


def test_cpus_bound_the_count() -> None:
    machine = Machine(PackingPolicy(FAST), util=5, memory=100, cpus=3)
    assert machine.run(8) == 3
    assert (
        "CPUs 3 on the node / 1 per trial / 1 GPU(s) → 3"
        in machine.policy.decide(machine.view())[GPU0].reason
    )


def test_memory_of_trials_not_yet_measured_counts_at_the_estimate() -> None:
    # Measure before you admit: a trial that has not allocated yet is not free memory.
    policy = PackingPolicy(FAST)
    machine = Machine(policy, util=5, memory=2000)
    machine.run(3)
    assert machine.limits[-1] == 2
    view = machine.view()
    # The GPU shows one warm trial's 2000 MiB, but a second one was just admitted.
    fresh = TrialOnGpu(99)
    gpu = replace(view.gpus[0], trials=(view.gpus[0].trials[0], fresh), memory_used_mb=2000.0)
    decision = policy.decide(replace(view, gpus=(gpu,)))[GPU0]
    assert decision.limit == 2


def test_off_and_fixed_modes() -> None:
    off = Machine(PackingPolicy(PackingSpec(mode="off")), util=5, memory=100)
    assert off.run(3) == 1
    fixed = Machine(PackingPolicy(PackingSpec(mode="fixed", trials_per_gpu=3)), util=95, memory=100)
    assert fixed.run(2) == 3
    assert fixed.policy.decide(fixed.view())[GPU0].share == pytest.approx(1 / 3)


def test_a_whole_gpu_goes_to_an_empty_gpu_only() -> None:
    policy = PackingPolicy(PackingSpec(mode="fixed", trials_per_gpu=2))
    machine = Machine(policy, util=5, memory=100, gpus=(GPU0, GPU1))
    machine.trials[GPU0].append(TrialOnGpu(0))
    view = machine.view()
    placement = policy.place(view, policy.decide(view), whole_gpu=True)
    assert placement is not None
    assert placement.gpu == GPU1
    assert placement.share == 1.0
    machine.trials[GPU1].append(TrialOnGpu(1, alone=True))
    view = machine.view()
    assert policy.place(view, policy.decide(view), whole_gpu=True) is None
    # The alone trial's GPU takes no neighbour either.
    placement = policy.place(view, policy.decide(view))
    assert placement is not None
    assert placement.gpu == GPU0


def test_a_gpu_without_telemetry_holds_one_trial() -> None:
    machine = Machine(PackingPolicy(FAST), util=5, memory=100)
    machine.run(4)
    view = machine.view()
    remote = GpuView(GpuKey("10.0.0.2", 0), 16000.0, telemetry=False)
    decisions = machine.policy.decide(replace(view, gpus=(*view.gpus, remote)))
    assert decisions[remote.key].limit == 1
    assert "no GPU monitor" in decisions[remote.key].reason


@pytest.mark.parametrize("packing", [FAST, PackingSpec(mode="fixed", trials_per_gpu=4)])
def test_a_gpu_that_admits_one_process_at_a_time_holds_one_trial(packing: PackingSpec) -> None:
    # Exclusive-process compute mode (as clusters often set it), with no MPS daemon of the
    # user's: a second trial's process would find the GPU busy and fail, even where 8 fit.
    machine = Machine(PackingPolicy(packing), util=5, memory=100)
    machine.run(4)
    view = machine.view()
    exclusive = replace(view.gpus[0], key=GPU1, exclusive=True)
    decisions = machine.policy.decide(replace(view, gpus=(*view.gpus, exclusive)))
    assert decisions[GPU0].limit > 1
    assert decisions[GPU1].limit == 1
    assert "compute mode admits one process at a time" in decisions[GPU1].reason


def test_hysteresis_band_cannot_be_negative() -> None:
    # Checked once, where the setting is read: the policy gets only a valid band.
    with pytest.raises(ValueError, match=r"saturation_util \(85\) must not be below target_util"):
        PackingSpec(target_util=90, saturation_util=85)


def test_a_trial_of_a_new_kind_gets_no_neighbour_until_it_is_measured() -> None:
    machine = Machine(PackingPolicy(FAST), util=10, memory=200, gpus=(GPU0, GPU1))
    machine.run(4)
    assert min(len(machine.trials[g]) for g in (GPU0, GPU1)) >= 2
    # A larger configuration than any measured lands on GPU 0; one trial there ends.
    machine.trials[GPU0][0] = TrialOnGpu(90, new_kind=True)
    machine.trials[GPU1].pop()
    view = machine.view()
    decisions = machine.policy.decide(view)
    assert not decisions[GPU0].open
    assert "no new neighbour until trial 90" in decisions[GPU0].reason
    placement = machine.policy.place(view, decisions)
    assert placement is not None
    assert placement.gpu == GPU1
    # Read by two samples past its warm-up, it is not measured yet (a device reading
    # needs two; a trial that may grow into its neighbour's memory, three) ...
    machine.trials[GPU0][0] = replace(machine.trials[GPU0][0], warm_at=machine.now, samples_warm=2)
    assert not machine.policy.decide(machine.view())[GPU0].open
    # ... by three it is, and past probe_seconds too: it takes neighbours again.
    machine.trials[GPU0][0] = replace(machine.trials[GPU0][0], samples_warm=3)
    assert machine.policy.decide(machine.view())[GPU0].open
    machine.trials[GPU0][0] = replace(machine.trials[GPU0][0], samples_warm=0)
    machine.now += FAST.probe_seconds
    assert machine.policy.decide(machine.view())[GPU0].open


# -- short trials: evidence from the GPU's last samples, counts judged by their steps --------

H200_MB = 143771.0
A16_MB = 16384.0


class ShortTrials:
    """A GPU running trials of under a second: its last samples, and the steps its trials do.

    Each decision is one tick of ``interval`` seconds with a fresh sample; the trials
    on the GPU fill whatever the policy allows.
    """

    def __init__(self, policy: PackingPolicy, *, total_mb: float, util: float, memory: float):
        self.policy, self.total_mb, self.util, self.memory = policy, total_mb, util, memory
        self.now = 100.0
        self.trials: list[TrialOnGpu] = []
        self.work: list[WorkDone] = []
        self.decisions: list[GpuDecision] = []

    def tick(self, interval: float = 0.2) -> GpuDecision:
        self.now += interval
        n = max(1, len(self.trials))
        recent = DeviceReading(
            self.util,
            self.memory,
            samples=5,
            busy_pct=self.util * n,
            used_mb=self.memory * n,
            processes=n,
            since=self.now - 1.0,
            latest=self.now,
        )
        view = PackingView(
            now=self.now,
            gpus=(GpuView(GPU0, self.total_mb, tuple(self.trials), recent=recent),),
            node_cpus={"127.0.0.1": 16.0},
            work=tuple(self.work),
        )
        self.work = []
        decision = self.policy.decide(view)[GPU0]
        while len(self.trials) < decision.limit:
            self.trials.append(TrialOnGpu(len(self.trials), started_at=self.now))
        self.decisions.append(decision)
        return decision

    def steps(self, warm: int, seconds: float, count: int = 16) -> None:
        self.work += [WorkDone(GPU0, self.now, k, step_s=seconds, warm=warm) for k in range(count)]


def test_an_idle_roomy_gpu_doubles_at_each_fresh_sample_before_any_trial_warms_up() -> None:
    # The H200 main job: 2% and 830 MiB of 141 GB for the one trial starting up.
    gpu = ShortTrials(PackingPolicy(FAST), total_mb=H200_MB, util=2.0, memory=830.0)
    gpu.trials.append(TrialOnGpu(0, started_at=gpu.now))

    limits = [gpu.tick().limit for _ in range(4)]

    assert limits == [2, 4, 8, 8]
    assert gpu.decisions[0].reason.startswith("trying 2: room: 2% per trial → 2 trial(s)")
    assert "throughput 2.0% each → 8" in gpu.decisions[2].reason


def test_a_crowded_gpu_tries_a_second_trial_then_doubles_only_once_it_paid() -> None:
    # 2.5 GB of 16 GB per trial: two hold more than a quarter, no room to double blind.
    gpu = ShortTrials(PackingPolicy(FAST), total_mb=A16_MB, util=5.0, memory=2500.0)
    gpu.trials.append(TrialOnGpu(0, started_at=gpu.now))
    assert gpu.tick().limit == 2
    assert gpu.tick().limit == 2
    assert "holding 2 until its steps are measured" in gpu.decisions[-1].reason
    # Measured: two trials step as fast as one did alone.
    gpu.steps(1, 0.06)
    gpu.steps(2, 0.06)

    decision = gpu.tick()

    assert decision.judged.startswith("2 trial(s) measured 33.33 steps/s, 2.00x 1's 16.67")
    assert decision.limit == 4
    assert decision.reason.startswith("trying 4: room: ")


def test_a_count_its_steps_show_no_faster_goes_back_and_stays_for_the_cool_down() -> None:
    # CPU-bound trials: eight step at a quarter of the speed four did.
    gpu = ShortTrials(PackingPolicy(FAST), total_mb=H200_MB, util=2.0, memory=830.0)
    gpu.trials.append(TrialOnGpu(0, started_at=gpu.now))
    for _ in range(3):
        gpu.tick()
    gpu.steps(4, 0.06)
    gpu.steps(8, 0.24)

    decision = gpu.tick()

    assert (decision.previous, decision.limit) == (8, 4)
    assert decision.reason.startswith("back to 4: 8 trial(s) measured 33.33 steps/s, 0.50x 4's")
    gpu.trials = gpu.trials[:4]
    for _ in range(int(FAST.cooldown_seconds / 0.2) - 2):
        assert gpu.tick().limit == 4
    gpu.now += 1.0
    assert gpu.tick().limit == 8  # tried again after the cool-down, measured afresh


def test_a_busy_gpus_last_samples_leave_it_at_one_trial() -> None:
    gpu = ShortTrials(PackingPolicy(FAST), total_mb=H200_MB, util=95.0, memory=830.0)
    gpu.trials.append(TrialOnGpu(0, started_at=gpu.now))
    assert [gpu.tick().limit for _ in range(3)] == [1, 1, 1]
    assert "throughput 95.0% each → 1" in gpu.decisions[-1].reason
