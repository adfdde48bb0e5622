"""What the packing policy reads (a view of the GPUs and their trials) and what it answers."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


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
        samples_warm: samples of its GPU taken since it was past its warm-up.
        started_at: when it was admitted (``None``: not known).
        held_mb: the most GPU memory its own process was read to hold in its GPU's
            last ``probe_seconds`` since it started, warm or not (``None``: the driver
            lists no such process, or nothing listens: only fusion does).
    """

    number: int
    warm_at: float | None = None
    cpus: float = 1.0
    memory_mb: float | None = None
    alone: bool = False
    new_kind: bool = False
    samples_warm: int = 0
    started_at: float | None = None
    held_mb: float | None = None


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
        recent: its last few samples per trial process running then, whatever trials
            came and went (``None``: too few yet).
        utilization_withheld: its monitor reads it, but no recent sample held its
            utilisation (NVML: not supported, as for a MIG-enabled GPU).
        exclusive: its compute mode admits one process at a time, and no MPS daemon of
            the user's serves it.
    """

    key: GpuKey
    memory_total_mb: float | None
    trials: tuple[TrialOnGpu, ...] = ()
    measured_since: float | None = None
    utilization_pct: float | None = None
    memory_used_mb: float | None = None
    telemetry: bool = True
    recent: DeviceReading | None = None
    utilization_withheld: bool = False
    exclusive: bool = False


@dataclass(frozen=True)
class DeviceReading:
    """A GPU lately, per trial process that ran on it: the evidence of its last few samples.

    Attributes:
        utilization_pct: the mean of each sample's utilisation over the trials running then.
        memory_mb: the most one trial process held (its own, where the driver lists
            processes; else the GPU's memory over the trials running then).
        samples: how many samples it covers.
        busy_pct: the GPU's own mean utilisation over them.
        used_mb: the most memory the GPU had in use over them.
        processes: how many trial processes ran during every one of them (``None``:
            the count changed).
        since: when the oldest of them was taken.
        latest: when the newest of them was taken.
    """

    utilization_pct: float
    memory_mb: float
    samples: int
    busy_pct: float = 0.0
    used_mb: float | None = None
    processes: int | None = None
    since: float = 0.0
    latest: float = 0.0


@dataclass(frozen=True)
class WorkDone:
    """A trial on ``gpu`` reported a step, or ended: what packing's throughput is measured by.

    Attributes:
        gpu: where it runs.
        at: when.
        number: the trial.
        ended: it ended (else: it reported a step).
        ran_s: for an end, how long it held the GPU.
        step_s: for a step after the trial's first, the seconds since its previous one.
        warm: for such a step, the warm trials (ones that had reported once) on the GPU.
        mps_client: the trial's worker is an MPS client (else its GPU time-slices it).
    """

    gpu: GpuKey
    at: float
    number: int
    ended: bool = False
    ran_s: float = 0.0
    step_s: float | None = None
    warm: int = 0
    mps_client: bool = False


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
        work: steps reported and trials ended since the last view.
        profiles: what trials that ended since the last view were measured to need.
    """

    now: float
    gpus: tuple[GpuView, ...]
    node_cpus: dict[str, float] = field(default_factory=dict)
    new_trial_cpus: float = 1.0
    ooms: tuple[OomEvent, ...] = ()
    work: tuple[WorkDone, ...] = ()
    profiles: tuple[TrialProfile, ...] = ()


@dataclass(frozen=True)
class TrialProfile:
    """What one trial was measured to need: its share of utilisation and its peak memory.

    Attributes:
        number: the trial.
        utilization_pct: its share of its GPU's utilisation.
        memory_mb: its peak memory (``None``: not measured).
        samples: the samples it was measured from (0: a GPU measured whole, long).
        seconds: how long it was measured.
    """

    number: int
    utilization_pct: float
    memory_mb: float | None
    samples: int = 0
    seconds: float = 0.0


class Verdict(enum.Enum):
    """What the measured throughputs say about the counts a GPU held."""

    KEEP = "keep"
    """The highest count measured paid over the best below it (or nothing below was measured)."""
    BACK = "back"
    """It did not pay: back to the best count below it."""


@dataclass(frozen=True)
class Judgement:
    """The highest count measured, judged against the best one below it.

    Attributes:
        verdict: keep it, or go back.
        level: the count judged.
        now: the count from now on (``level``, or the one gone back to).
        throughput: steps per second measured at ``level``.
        below: the count compared with (``None``: none measured).
        gain: ``throughput`` over ``below``'s.
        paid: the gain reached what the count asks (else it is kept for doubt only).
        reason: the arithmetic, for the records.
    """

    verdict: Verdict
    level: int
    now: int
    throughput: float
    below: int | None
    gain: float | None
    paid: bool
    reason: str


@dataclass(frozen=True)
class MpsVerdict:
    """Whether MPS paid on a GPU: the steps of its MPS clients against time-sliced ones beside.

    Attributes:
        count: the warm trials on the GPU while both kinds stepped.
        mps_steps_per_s: an MPS client's steps per second there.
        time_sliced_steps_per_s: a time-sliced worker's, at the same count.
        paid: MPS clients stepped faster by what packing asks of a trial added.
        reason: the arithmetic, for the records.
    """

    count: int
    mps_steps_per_s: float
    time_sliced_steps_per_s: float
    paid: bool
    reason: str


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
        judged: what the counts measured, when a verdict came in this decision.
        judgements: the same, each as its figures.
        mps: whether MPS paid, when its verdict came in this decision.
    """

    limit: int
    share: float
    reason: str
    previous: int | None = None
    open: bool = True
    judged: str = ""
    judgements: tuple[Judgement, ...] = ()
    mps: MpsVerdict | None = None

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
