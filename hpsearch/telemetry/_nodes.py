"""The GPU readings of every monitored node of a cluster, by Ray node id.

The driver's own :class:`~hpsearch.telemetry.GpuMonitor` reads the driver's
node. A monitor on each other node (the runner's, see ``hpsearch.runner``)
streams that node's samples to the driver, where they are kept behind the same
small interface, :class:`GpuReadings`. :class:`ClusterReadings` holds them all;
:class:`ClusterGpuMetrics` cuts each trial's GPU series from the node it ran on.
A node whose monitor is lost is dropped: its GPUs are then not read, and the
packing policy gives them one trial each.
"""

from __future__ import annotations

import threading

from hpsearch.telemetry._base import GpuLoad, GpuReadings, LoadSink, SpeedModel
from hpsearch.telemetry._monitor import GpuMonitor
from hpsearch.telemetry._trials import SeriesPoint, TrialGpuMetrics, TrialGpuReport


class ClusterReadings:
    """Every monitored node's readings, by Ray node id.

    Args:
        local_node: the driver's Ray node (``None``: a driver on no node, a Ray client).
        local: the driver's own monitor of its node's GPUs (``None``: none here).
    """

    def __init__(self, local_node: str | None, local: GpuMonitor | None) -> None:
        self.local_node = local_node
        self.local = local
        self._remote: dict[str, GpuReadings] = {}
        self._sinks: dict[str, LoadSink] = {}
        self._lock = threading.Lock()

    def add(self, node_id: str, readings: GpuReadings, sink: LoadSink | None = None) -> None:
        """Another node's monitor streams here from now on (``sink``: it takes loads)."""
        with self._lock:
            self._remote[node_id] = readings
            if sink is not None:
                self._sinks[node_id] = sink

    def drop(self, node_id: str) -> None:
        """The node's monitor is lost: its GPUs are not read from now on."""
        with self._lock:
            self._remote.pop(node_id, None)
            self._sinks.pop(node_id, None)

    def remote_nodes(self) -> list[str]:
        """The other nodes monitored now."""
        with self._lock:
            return list(self._remote)

    def of(self, node_id: str | None) -> GpuReadings | None:
        """The readings of ``node_id``'s GPUs; ``None`` where nothing reads them."""
        with self._lock:
            remote = self._remote.get(node_id) if node_id is not None else None
        if remote is not None:
            return remote
        # A driver on no node (a Ray client) reads its own machine's GPUs, which no
        # trial's node has.
        if node_id is None or node_id == self.local_node:
            return self.local
        return None

    def sink_of(self, node_id: str | None) -> LoadSink | None:
        """Where declared loads of a remote node's trials go (``None``: local, or none)."""
        with self._lock:
            return self._sinks.get(node_id) if node_id is not None else None

    def monitored(self) -> dict[str, dict[int, float | None]]:
        """Each monitored node's GPUs (index to memory in MiB); the local one as ``""``."""
        with self._lock:
            found = {
                node: {g.index: g.memory_total_mb for g in readings.gpus}
                for node, readings in self._remote.items()
            }
        if self.local is not None:
            found[self.local_node or ""] = {g.index: g.memory_total_mb for g in self.local.gpus}
        return found


class ClusterGpuMetrics:
    """Per-trial GPU series and summaries, each cut from the node the trial ran on.

    One :class:`TrialGpuMetrics` per node, made when its first trial is placed.

    Args:
        readings: every monitored node's samples.
        local_sink: where declared loads of the driver's node go (a load model).
        sharing: how trials sharing a GPU slow each other.
    """

    def __init__(
        self,
        readings: ClusterReadings,
        *,
        sharing: SpeedModel,
        local_sink: LoadSink | None = None,
    ) -> None:
        self._readings = readings
        self._local_sink = local_sink
        self._sharing = sharing
        self._by_node: dict[int, TrialGpuMetrics] = {}  # keyed by id() of the readings
        self._of_trial: dict[int, TrialGpuMetrics] = {}

    def placed(
        self,
        number: int,
        *,
        gpu_ids: list[str],
        node_id: str | None,
        pid: int | None,
        started_at: float,
    ) -> str:
        """Trial ``number`` runs on these GPUs of ``node_id`` since ``started_at``.

        Returns:
            Empty when its GPUs are sampled; else why they are not (for a tag).
        """
        if not gpu_ids:
            return ""
        readings = self._readings.of(node_id)
        if readings is None:
            return f"not sampled: no GPU monitor reads Ray node {node_id}"
        metrics = self._by_node.get(id(readings))
        if metrics is None:
            remote = readings is not self._readings.local
            sink = self._readings.sink_of(node_id) if remote else self._local_sink
            metrics = TrialGpuMetrics(readings, load_sink=sink, sharing=self._sharing)
            self._by_node[id(readings)] = metrics
        self._of_trial[number] = metrics
        return metrics.placed(number, gpu_ids=gpu_ids, pid=pid, started_at=started_at)

    def declared_load(self, number: int, load: GpuLoad) -> None:
        """The trial declared its simulated GPU load (see :class:`TrialGpuMetrics`)."""
        metrics = self._of_trial.get(number)
        if metrics is not None:
            metrics.declared_load(number, load)

    def speed_share(self, number: int, since: float, until: float) -> float | None:
        """The share of its solo speed the trial ran at (see :class:`TrialGpuMetrics`)."""
        metrics = self._of_trial.get(number)
        return metrics.speed_share(number, since, until) if metrics is not None else None

    def new_points(self, number: int) -> list[SeriesPoint]:
        """The trial's samples since the last call, as metrics."""
        metrics = self._of_trial.get(number)
        return metrics.new_points(number) if metrics is not None else []

    def finish(
        self, number: int, ended_at: float
    ) -> tuple[list[SeriesPoint], TrialGpuReport | None]:
        """The trial ended: its last points and its summary."""
        metrics = self._of_trial.pop(number, None)
        return metrics.finish(number, ended_at) if metrics is not None else ([], None)
