"""What a search runs beside its runner's session while it lasts, built from the config:
the GPU monitors (``telemetry``) and MPS for its shared GPUs (``packing.mps``)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

from hpsearch.config import RunConfig
from hpsearch.placement import GpuKey
from hpsearch.runner._base import RunnerSession
from hpsearch.runner._mps import MpsDaemons
from hpsearch.telemetry import ClusterReadings, GpuMonitor, TelemetryBackend


@contextmanager
def gpu_readings(
    config: RunConfig,
    backend: TelemetryBackend | None,
    session: RunnerSession,
    say: Callable[[str], None],
) -> Iterator[ClusterReadings | None]:
    """The GPU monitors of the search, sampling while it runs (none without GPU telemetry).

    The driver's node is read by a monitor here, on the runner's clock; every other
    node with GPUs by a monitor of its own, when the runner has other nodes (a
    driver without a GPU of its own may still read a cluster's).
    """
    telemetry = config.telemetry
    if telemetry.backend == "off" or (backend is None and not config.execution.address):
        yield None
        return
    monitor = None
    if backend is not None:
        monitor = GpuMonitor(
            backend,
            interval_s=telemetry.interval_s,
            window_s=telemetry.window_s,
            clock=session.clock,
        )
    readings = ClusterReadings(session.local_node_id, monitor)
    with (
        session.sampling(monitor) if monitor is not None else nullcontext(),
        session.node_monitors(telemetry, readings, say),
    ):
        yield readings


@contextmanager
def mps_daemons(
    config: RunConfig,
    backend: TelemetryBackend | None,
    session: RunnerSession,
    say: Callable[[str], None],
    said: Callable[[str], None],
) -> Iterator[MpsDaemons]:
    """MPS for the GPUs the search shares, where ``packing.mps`` allows it.

    Args:
        say: where a line about MPS goes while the search runs.
        said: told what happened, per GPU, once the daemons are quit (the parent run's tag).
    """
    packing = config.packing_in_effect
    daemons = MpsDaemons(
        packing.mps if packing is not None else "off",
        folder=session.scratch or Path(tempfile.gettempdir()),
        real_gpus=backend is not None and not backend.simulated,
        cluster=bool(config.execution.address),
        say=say,
    )
    try:
        yield daemons
    finally:
        daemons.close()
        said(daemons.detail())


def mps_starter(mps: MpsDaemons | None, local: str | None) -> Callable[[GpuKey], None] | None:
    """What starts MPS for a shared GPU of the driver's machine (``None``: nothing does)."""
    if mps is None:
        return None

    def shared(gpu: GpuKey) -> None:
        if gpu.node == local:
            mps.shared(gpu.index)

    return shared
