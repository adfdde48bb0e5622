"""What a runner is: where trials execute, behind one small interface (Syne Tune's backend).

The composition root connects a :class:`TrialRunner` for the search and gets a
:class:`RunnerSession`: the resources it has, its nodes' GPUs, its clock, a
board for pruning verdicts, and :meth:`RunnerSession.run`, which launches what
the scheduler suggests and tells the ledger what happens to each trial. Ray
Tune is one runner (:class:`~hpsearch.runner.RayTuneRunner`); a simulated-time
runner (:class:`~hpsearch.runner.SimulatedRunner`) is another.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Protocol

from hpsearch.config import ExecutionSpec, RunConfig, TelemetrySpec
from hpsearch.placement import ClusterCapacity, NodeGpus
from hpsearch.pruning import VerdictBoard
from hpsearch.scheduler import Hold
from hpsearch.simulation import SimulatedSpec
from hpsearch.telemetry import ClusterReadings, GpuMonitor
from hpsearch.trial.protocol import Outcome, TrialLaunch, WorkerEvent


class TrialSource(Protocol):
    """Suggests the trials to launch (the :class:`~hpsearch.scheduler.Scheduler`)."""

    def suggest(self, launch_id: str) -> TrialLaunch | Hold:
        """What to launch next (one trial, or several fused), or why nothing starts now."""

    def overdue(self) -> bool:
        """Whether the trials still running must be stopped now (the search ran out of time)."""


class TrialEvents(Protocol):
    """Told what happens to launched trials (the :class:`~hpsearch.lifecycle.TrialLedger`)."""

    def started(self, launch_id: str) -> None:
        """The launch's worker started."""

    def event(self, launch_id: str, event: WorkerEvent) -> None:
        """One event from the launch's worker."""

    def ended(self, launch_id: str, crash: str | None = None) -> Outcome | None:
        """The runner is done with the launch (``crash``: its worker died)."""

    def maintain(self, now: float | None = None) -> None:
        """Periodic upkeep, about once a second."""

    def unresponsive(self) -> list[str]:
        """Launches whose worker ran past ``execution.trial_timeout`` and did not end
        itself: the runner kills them from outside."""


class RunnerSession(ABC):
    """A connection to where trials run, for the length of one search.

    Attributes:
        clock: Unix time as the runner keeps it (virtual in a simulated search);
            every part that times trials reads this one.
        local_node_id: the node the driver's GPU monitor reads (``None``: none).
        scratch: a folder the driver and the workers of its machine share for the
            search (simulated GPUs' pace, each trial's stderr); ``None``: trials run in
            the driver (the simulated-time runner plays sharing itself).
    """

    clock: Callable[[], float]
    local_node_id: str | None
    scratch: Path | None = None

    def driver_address(self) -> str:
        """The address the workers reach the driver at (a server it runs for them)."""
        return "127.0.0.1"

    @abstractmethod
    def capacity(self) -> ClusterCapacity:
        """The CPUs and GPUs the runner has now."""

    @abstractmethod
    def gpu_nodes(self, monitored: Mapping[str, Mapping[int, float | None]]) -> list[NodeGpus]:
        """Every node with GPUs.

        Args:
            monitored: each monitored node's GPUs (index to memory in MiB), by node id;
                the driver's own monitor's under its node id or ``""``.
        """

    @abstractmethod
    def verdict_board(self) -> VerdictBoard:
        """A board where pruning verdicts reach the trials' workers."""

    @abstractmethod
    def sampling(self, monitor: GpuMonitor) -> AbstractContextManager[GpuMonitor]:
        """Keep ``monitor`` sampling while the search runs (a thread, or the virtual clock)."""

    def node_monitors(
        self, spec: TelemetrySpec, readings: ClusterReadings, say: Callable[[str], None]
    ) -> AbstractContextManager[object]:
        """Monitor the GPUs of the other nodes into ``readings`` while the search runs.

        A runner of one machine has none to monitor (the default).

        Args:
            spec: the search's ``telemetry`` section.
            readings: where each node's samples are kept.
            say: prints one line (a node whose monitor cannot start, or is lost).
        """
        return nullcontext()

    def on_lost(self, close: Callable[[], None]) -> None:
        """What to do when a SIGTERM stopped the runner's own processes with the driver
        (a signal to its whole process group or tree): ``close`` records the search's
        end without the runner, and the process exits 143. Default: nothing (a runner
        in the driver's process cannot be lost apart from it)."""
        return  # nothing of its own to lose

    @abstractmethod
    def run(self, source: TrialSource, events: TrialEvents, *, name: str, max_pending: int) -> None:
        """Launch what ``source`` suggests until it says the search is finished.

        Returns once the last trial has ended, or at once, leaving trials open for
        the caller to record as interrupted, when ``source`` says they are overdue.

        Args:
            source: suggests trials.
            events: told what happens to them.
            name: the search's name (folders, logs).
            max_pending: most trials that may be starting at once.
        """


class TrialRunner(ABC):
    """Connects to where trials execute (``hpsearch.run(..., runner=...)``)."""

    def check(self, config: RunConfig) -> None:
        """Refuse a config this runner cannot run, before anything is opened (default: none).

        Raises:
            ConfigError: naming the key and the fix.
        """
        return  # a runner that runs any training function refuses nothing

    @abstractmethod
    def connect(
        self, execution: ExecutionSpec, workdir: str, simulated: SimulatedSpec | None = None
    ) -> AbstractContextManager[RunnerSession]:
        """A session for one search, closed when the search ends.

        Args:
            execution: the config's ``execution`` section.
            workdir: the user's working directory (``train`` imports from there).
            simulated: the simulated GPUs, when the search runs on them.
        """
