"""The Ray Tune runner: trials as Tune trials, on a local Ray or a cluster joined by address."""

from __future__ import annotations

import os
import re
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import ray
from ray import tune
from ray.tune.experiment import Trial

from hpsearch._compat import (
    ray_worker_deaths_unsaid,
    tune_kills_stuck_workers_at_its_end_wait,
    tune_max_pending_trials,
)
from hpsearch.config import ExecutionSpec, RunConfig, TelemetrySpec
from hpsearch.errors import ConfigError
from hpsearch.interrupts import (
    note_interrupted,
    on_sigterm,
    terminated,
    terminated_by,
    terminated_exit_code,
)
from hpsearch.placement import ClusterCapacity, NodeGpus
from hpsearch.pruning import RayVerdictBoard, VerdictBoard
from hpsearch.runner._adapters import (
    Failure,
    LedgerCallback,
    NewWorkersStart,
    SchedulerSearcher,
    SearchStopper,
)
from hpsearch.runner._base import RunnerSession, TrialEvents, TrialRunner, TrialSource
from hpsearch.runner._cluster import (
    cluster_gpus,
    cpus_a_trial_can_have,
    current_capacity,
    local_node_id,
    local_ray_died,
    local_ray_lost,
    ray_cluster,
    stop_local_ray,
)
from hpsearch.runner._node_monitors import NodeMonitors
from hpsearch.runner._trainable import run_trial, trial_resources
from hpsearch.runner._tune_dicts import launch_of
from hpsearch.simulation import SimulatedSpec
from hpsearch.telemetry import ClusterReadings, GpuMonitor

LOST_RAY_WAIT_S = 45.0
"""After a SIGTERM, how long at most the driver watches its local Ray for having been
stopped too, while Tune runs: under 60 s, after which Ray's own client ends a process
whose control store is gone (exit 1). A loaded machine took over 3 s to end it."""
LOCAL_RAY_POLL_S = 0.5
"""How often the driver checks that its local Ray's control store and raylet still run:
without either, Tune would wait for ever for a node to run the next trial on."""
SIGNAL_GRACE_S = 2.0
"""How long the driver lets its own ending (Ctrl-C, SIGTERM) go first, where its local Ray
ended with it."""
EXIT_RAY_LOST = 2
"""The exit code of a search whose local Ray ended under it, as of a fault it cannot go on
with (:func:`hpsearch.interrupts.stop_for`)."""
LOST_RAY_LOCK_S = 10.0
"""How long the close-out without Ray waits for the driver's side of Tune to finish."""

RAY_RESULTS_DIR = Path("mlruns") / "ray"
"""Where Ray Tune keeps trial folders, under the working directory."""


class RayTuneRunner(TrialRunner):
    """Runs trials with Ray Tune: a local Ray started for the search, or ``execution.address``.

    Args:
        storage_path: Tune's trial folders (default ``mlruns/ray`` in the working directory).
    """

    def __init__(self, storage_path: Path = RAY_RESULTS_DIR) -> None:
        self._storage_path = storage_path

    def check(self, config: RunConfig) -> None:
        """Refuse trials that ask more CPUs than the Ray they would run on has: Ray would
        hold each one back for ever, and the search would wait with nothing running."""
        room = cpus_a_trial_can_have(config.execution)
        asked = config.execution.cpus_per_trial
        if room is None or asked <= room[0]:
            return
        most, whose = room
        raise ConfigError(
            config.source,
            "execution.cpus_per_trial",
            f"a trial asks {asked:g} CPUs, but {whose} has {most:g}, so no trial would ever start",
            f"set it to at most {most:g}",
        )

    @contextmanager
    def connect(
        self, execution: ExecutionSpec, workdir: str, simulated: SimulatedSpec | None = None
    ) -> Iterator[RunnerSession]:
        # Simulated GPUs are read through their load model; Ray's GPUs are logical ones.
        with (
            # Files the driver and the workers of this machine share for the search:
            # simulated GPUs' pace, the trials' stderr, the workers' exits.
            tempfile.TemporaryDirectory(prefix="hpsearch-") as tmp,
            # Each trial's line says how it ended: not Ray's "A worker died" before it,
            # while Ray runs (it is left when Ray stops, or a late one would print).
            ray_worker_deaths_unsaid(),
            ray_cluster(execution, workdir, scratch=Path(tmp)),
        ):
            session = _RaySession(self._storage_path, execution.reuse_workers)
            session.scratch = Path(tmp)
            yield session


class _RaySession(RunnerSession):
    def __init__(self, storage_path: Path, reuse_workers: bool) -> None:
        self.clock: Callable[[], float] = time.time
        self.local_node_id = local_node_id()
        self._storage_path = storage_path
        self._reuse_workers = reuse_workers
        self._close: Callable[[], None] | None = None

    def on_lost(self, close: Callable[[], None]) -> None:
        self._close = close

    def capacity(self) -> ClusterCapacity:
        return current_capacity()

    def gpu_nodes(self, monitored: Mapping[str, Mapping[int, float | None]]) -> list[NodeGpus]:
        return cluster_gpus(monitored, self.local_node_id)

    def verdict_board(self) -> VerdictBoard:
        return RayVerdictBoard()

    def driver_address(self) -> str:
        # Ray's own address for this node: the one workers on other nodes reach too.
        return str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]

    def sampling(self, monitor: GpuMonitor) -> AbstractContextManager[GpuMonitor]:
        return monitor  # its own thread, started and stopped by the with block

    def node_monitors(
        self, spec: TelemetrySpec, readings: ClusterReadings, say: Callable[[str], None]
    ) -> AbstractContextManager[object]:
        return NodeMonitors(spec, readings, say)

    def run(self, source: TrialSource, events: TrialEvents, *, name: str, max_pending: int) -> None:
        failure = Failure()
        tuner = tune.Tuner(
            tune.with_resources(run_trial, trial_resources),
            tune_config=tune.TuneConfig(
                search_alg=SchedulerSearcher(source, upkeep=events.maintain, failure=failure),
                scheduler=NewWorkersStart(),
                num_samples=-1,
                reuse_actors=self._reuse_workers,
                trial_name_creator=_trial_name,
                trial_dirname_creator=_trial_name,
            ),
            run_config=tune.RunConfig(
                name=re.sub(r"[^\w.-]+", "_", name),
                storage_path=str(self._storage_path.resolve()),
                verbose=0,
                callbacks=[LedgerCallback(events, failure)],
                stop=SearchStopper(source, failure),
                log_to_file=True,
                failure_config=tune.FailureConfig(max_failures=0),
            ),
        )
        fitted = threading.Event()
        # With a custom searcher Tune lets one trial start at a time; trials of a
        # packed GPU must be able to start together.
        watch = threading.Thread(target=self._watch_local_ray, args=(failure, fitted), daemon=True)
        with (
            tune_max_pending_trials(max_pending),
            tune_kills_stuck_workers_at_its_end_wait(),
            on_sigterm(lambda: self._close_if_ray_died(failure, fitted.is_set)),
        ):
            watch.start()
            try:
                tuner.fit()
            finally:
                fitted.set()  # Tune ended (Ray still there): no close-out without it
            if _tune_caught_sigint():
                note_interrupted()
        failure.raise_first()  # now that Tune has stopped the trials

    def _watch_local_ray(self, failure: Failure, fitted: threading.Event) -> None:
        """Until Tune ends, check that the local Ray's control store and raylet run; once
        one has ended (the OOM killer, a kill), close out without Ray and exit: Tune would
        wait for ever for a node to run trials on, or Ray's client end the process a
        minute later without a word."""
        while not fitted.wait(LOCAL_RAY_POLL_S):
            lost = local_ray_lost()
            if lost is None:
                continue
            # A signal to the whole process group (Ctrl-C, SIGTERM) may end Ray with the
            # driver: the driver's own ending says so, as it would with Ray there.
            if fitted.wait(SIGNAL_GRACE_S) or terminated():
                return
            self._close_without_ray(
                failure,
                f"error: the local Ray's {lost} mid-search; the search cannot go on "
                "without it and stopped as on Ctrl-C: its running trials run again on "
                "the next hpsearch run (dmesg says whether the OOM killer ended it)\n",
                EXIT_RAY_LOST,
            )
            return  # it exits, unless the search has nothing to close

    def _close_if_ray_died(self, failure: Failure, fitted: Callable[[], bool]) -> None:
        """After a SIGTERM: if it stopped the local Ray too (before Tune ended: ``fitted``),
        close out without it and exit.

        Tune's own ending then waits on Ray's control store for a minute and the process
        dies without a word, leaving its trials and runs RUNNING; here they are
        recorded as for Ctrl-C (queued again, KILLED) instead.
        """
        if self._close is None or not local_ray_died(LOST_RAY_WAIT_S, fitted):
            return
        self._close_without_ray(
            failure,
            f"terminated ({terminated_by()}); Ray's own processes were stopped by it too: the "
            "running trials will run again on the next run\n",
            terminated_exit_code(),
        )

    def _close_without_ray(self, failure: Failure, line: str, code: int) -> None:
        """Record the search's end as Ctrl-C does, without Ray, print ``line`` and exit
        with ``code`` (Ray gone, nothing else can end the process in time)."""
        if self._close is None:
            return
        # What runs on the driver's side of Tune finishes first (Tune's thread then hangs in Ray).
        locked = failure.lock.acquire(timeout=LOST_RAY_LOCK_S)
        try:
            self._close()
        finally:
            stop_local_ray()
            sys.stderr.write(line)
            sys.stderr.flush()
            if locked:
                failure.lock.release()
            os._exit(code)


def _tune_caught_sigint() -> bool:
    """Whether Tune's fit ended on Ctrl-C: Tune ends the run quietly on the first SIGINT
    and puts back the handler it found, so its own is no longer installed."""
    if threading.current_thread() is not threading.main_thread():
        return False  # Tune catches no signal off the main thread
    handler = signal.getsignal(signal.SIGINT)
    return getattr(handler, "__name__", "") != "signal_interrupt_tune_run"


def _trial_name(trial: Trial) -> str:
    numbers = [member.number for member in launch_of(trial.config).members]
    return "trial_" + "_".join(str(n) for n in numbers)
