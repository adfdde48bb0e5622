"""A GPU monitor on every other Ray node, streaming its samples to the driver.

The driver's own monitor reads the GPUs of the node it runs on. For every other
alive node with GPUs, :class:`NodeMonitors` starts a small actor pinned to that
node by id (no CPU of its own), which opens the search's telemetry backend there
(NVML, or that node's simulated GPUs, as many as Ray gives the node) and samples
it in a thread. The driver pulls new samples every sampling interval and keeps
them in :class:`~hpsearch.telemetry.ClusterReadings`, where packing and the
trials' GPU series read them as they read the local ones.

A node whose monitor cannot start, or dies, is dropped with one line on the
console: its GPUs then run one trial each, and the search goes on.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from types import TracebackType
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from hpsearch.config import TelemetrySpec
from hpsearch.gpu_telemetry import open_backend
from hpsearch.telemetry import (
    HISTORY_S,
    ClusterReadings,
    GpuInfo,
    GpuMonitor,
    GpuSample,
    TelemetryUnavailable,
    TrialLoad,
    names_mig,
    visible_gpus,
)

logger = logging.getLogger(__name__)

NODES_EVERY_S = 5.0
"""Seconds between looks for nodes that joined the cluster."""
START_TIMEOUT_S = 60.0
"""How long a node's monitor may take to start (a worker process, the backend)."""
PULL_TIMEOUT_S = 10.0
"""How long one pull may take before the node's monitor is taken for lost."""


class NodeMonitorActor:
    """Samples the GPUs of the node it runs on; the driver takes the samples.

    Run as a Ray actor pinned to its node. Messages are the telemetry's own typed
    records (:class:`GpuInfo`, :class:`GpuSample`, :class:`TrialLoad`).

    Of a node's real GPUs it shows those its Ray sees (the raylet's
    ``CUDA_VISIBLE_DEVICES``, which this actor keeps: it asks Ray for no GPU), by
    NVML's numbers: a node given GPUs 2 and 3 of its machine reads as those two, not
    the machine's first two.

    Args:
        spec: the search's ``telemetry`` section.
        gpus: how many GPUs Ray gives this node (the simulated GPUs' count).

    Raises:
        TelemetryUnavailable: nothing to read, or the node's GPUs are MIG instances
            (NVML's numbers name whole GPUs, not them).
    """

    def __init__(self, spec: TelemetrySpec, gpus: int) -> None:
        if spec.backend == "simulated":
            simulation = spec.simulation.model_copy(update={"gpus": gpus})
            spec = spec.model_copy(update={"simulation": simulation})
        opened = open_backend(spec)
        if opened.backend is None:
            raise TelemetryUnavailable(opened.line)
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        self._shown: set[int] | None = None
        if not opened.backend.simulated:
            if names_mig(visible):
                opened.backend.close()
                raise TelemetryUnavailable("its GPUs are MIG instances, which NVML does not number")
            shown = visible_gpus(visible)
            # Ray has the first of them (its num_gpus may take fewer).
            self._shown = set(shown[:gpus]) if shown is not None else None
        self._sink = opened.load_sink
        self._monitor = GpuMonitor(
            opened.backend, interval_s=spec.interval_s, window_s=spec.window_s
        ).start()

    def gpus(self) -> list[GpuInfo]:
        """The node's GPUs (those its Ray sees)."""
        return [g for g in self._monitor.gpus if self._shown is None or g.index in self._shown]

    def samples(self, after: float) -> list[GpuSample]:
        """Every kept sample of the node's GPUs taken after ``after``, oldest first."""
        found = [s for g in self.gpus() for s in self._monitor.history(g.index, after)]
        return sorted(found, key=lambda s: (s.time, s.index))

    def set_load(self, key: int, load: TrialLoad) -> None:
        """A trial on this node declared its simulated load (a load model shows it)."""
        if self._sink is not None:
            self._sink.set_load(key, load)

    def clear_load(self, key: int) -> None:
        """A trial on this node ended."""
        if self._sink is not None:
            self._sink.clear_load(key)


class RemoteNode:
    """A node's samples as the driver keeps them, pulled from its :class:`NodeMonitorActor`.

    Implements :class:`~hpsearch.telemetry.GpuReadings` and
    :class:`~hpsearch.telemetry.LoadSink` (declared loads go to the node's load model).

    Args:
        node_id: the Ray node.
        address: how the node is named in messages (its address and id).
        actor: its monitor.
        gpus: its GPUs.
        keep: how many samples of each GPU are kept.
    """

    def __init__(
        self, node_id: str, address: str, actor: Any, gpus: list[GpuInfo], keep: int
    ) -> None:
        self.node_id = node_id
        self.address = address
        self._actor = actor
        self._gpus = gpus
        self._history: dict[int, deque[GpuSample]] = {g.index: deque(maxlen=keep) for g in gpus}
        self._latest = 0.0
        self._lock = threading.Lock()

    @property
    def gpus(self) -> list[GpuInfo]:
        """The node's GPUs."""
        return list(self._gpus)

    def pull(self) -> None:
        """Take the node's new samples.

        Raises:
            ray.exceptions.RayError: the node's monitor is lost (or took too long).
        """
        samples: list[GpuSample] = ray.get(
            self._actor.samples.remote(self._latest), timeout=PULL_TIMEOUT_S
        )
        with self._lock:
            for sample in samples:
                history = self._history.get(sample.index)
                if history is not None:
                    history.append(sample)
                self._latest = max(self._latest, sample.time)

    def history(self, index: int, since: float | None = None) -> list[GpuSample]:
        """Kept samples of GPU ``index`` taken after ``since`` (all kept ones by default)."""
        with self._lock:
            samples = list(self._history.get(index, ()))
        return samples if since is None else [s for s in samples if s.time > since]

    def sample_now(self) -> list[GpuSample]:
        """The node's latest reading of each GPU, pulled now where it answers."""
        with contextlib.suppress(ray.exceptions.RayError):
            self.pull()  # if lost, the monitors' thread says so, and drops the node
        with self._lock:
            return [h[-1] for h in self._history.values() if h]

    def set_load(self, key: int, load: TrialLoad) -> None:
        self._actor.set_load.remote(key, load)

    def clear_load(self, key: int) -> None:
        self._actor.clear_load.remote(key)


class NodeMonitors:
    """Starts a monitor on every other GPU node of the cluster and pulls its samples.

    Use as a context manager: a thread looks for GPU nodes every few seconds and
    pulls every monitored node's samples each sampling interval; the monitors are
    ended with the block.

    Args:
        spec: the search's ``telemetry`` section (what each node's monitor opens).
        readings: where the nodes' samples are kept for the search.
        say: prints one line (a node's monitor that cannot start, or is lost).
    """

    def __init__(
        self, spec: TelemetrySpec, readings: ClusterReadings, say: Callable[[str], None]
    ) -> None:
        self._spec = spec
        self._readings = readings
        self._say = say
        # As long a history as the driver's own monitor keeps.
        self._keep = max(2, round(HISTORY_S / spec.interval_s) + 1)
        self._nodes: dict[str, RemoteNode] = {}
        self._actors: list[Any] = []
        self._given_up: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> NodeMonitors:
        self._look_for_nodes()  # before the first trial: their GPUs pack from the start
        self._thread = threading.Thread(
            target=self._loop, name="hpsearch-node-monitors", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        for actor in self._actors:
            try:
                ray.kill(actor)
            except Exception:  # already gone with its node
                logger.debug("node monitor already gone", exc_info=True)

    def _loop(self) -> None:
        looked = time.monotonic()
        while not self._stop.wait(self._spec.interval_s):
            try:
                if time.monotonic() - looked >= NODES_EVERY_S:
                    looked = time.monotonic()
                    self._look_for_nodes()
                for node in list(self._nodes.values()):
                    try:
                        node.pull()
                    except ray.exceptions.RayError as exc:
                        self._lose(node.node_id, _first_line(exc))
            except Exception:  # Ray going away under the search: it says so itself
                logger.debug("node monitors", exc_info=True)

    def _look_for_nodes(self) -> None:
        try:
            entries = ray.nodes()  # type: ignore[no-untyped-call]
        except Exception:  # the cluster is going away; the search says so itself
            logger.debug("cannot list Ray nodes", exc_info=True)
            return
        starting = []
        for entry in entries:
            node_id = str(entry.get("NodeID", ""))
            gpus = int(entry.get("Resources", {}).get("GPU", 0))
            known = node_id in self._nodes or node_id in self._given_up
            if not entry.get("Alive") or gpus <= 0 or known:
                continue
            if node_id == self._readings.local_node and self._readings.local is not None:
                continue  # the driver's own monitor reads it
            address = f"{entry.get('NodeManagerAddress', '')} ({node_id[:8]})"
            pinned = NodeAffinitySchedulingStrategy(node_id, soft=False)
            actor: Any = _ACTOR.options(scheduling_strategy=pinned).remote(self._spec, gpus)
            self._actors.append(actor)
            starting.append((node_id, address, actor, actor.gpus.remote()))
        # Started together, then waited for: nodes start their monitors in parallel.
        for node_id, address, actor, asked in starting:
            try:
                info: list[GpuInfo] = ray.get(asked, timeout=START_TIMEOUT_S)
            except Exception as exc:  # a backend that cannot open there, a worker that died
                self._given_up.add(node_id)
                self._say(
                    f"no GPU monitor on node {address} ({_first_line(exc)}): "
                    "its GPUs run one trial each"
                )
                continue
            node = RemoteNode(node_id, address, actor, info, self._keep)
            self._nodes[node_id] = node
            self._readings.add(node_id, node, sink=node)

    def _lose(self, node_id: str, why: str) -> None:
        node = self._nodes.pop(node_id, None)
        if node is None:
            return
        self._given_up.add(node_id)
        self._readings.drop(node_id)
        self._say(
            f"the GPU monitor of node {node.address} is lost ({why}): "
            "its GPUs run one trial each from now on"
        )


# No CPU of its own: it must start on a node whose CPUs the trials hold.
_ACTOR: Any = ray.remote(num_cpus=0)(NodeMonitorActor)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    # Ray's errors wrap the cause in a traceback: its last line says what happened.
    lines = [line for line in text.splitlines() if line.strip()]
    return (lines[-1] if lines else type(exc).__name__)[:300]
