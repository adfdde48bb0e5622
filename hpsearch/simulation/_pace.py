"""A simulated GPU's pace for trials that run in real time, in other processes.

The simulated-time runner plays each trial at its shared speed itself. Under
Ray, a simulated trial runs in a worker process and sleeps its modelled
epochs: to slow down as a shared GPU would, it needs the speed the load model
gives it. :class:`PacePublisher` (in the driver) writes every trial's share of
its solo speed to a small JSON file each time a trial's load starts or ends;
:class:`PaceReader` (in the worker, through ``ctx.simulated_speed_share()``)
reads its own, at most every few tenths of a second. A worker that cannot read
the file (another machine, not written yet) runs at its solo speed.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from hpsearch.simulation._sharing import cpu_rate
from hpsearch.telemetry import TrialLoad

READ_EVERY_S = 0.1
"""How often a worker reads the pace file again (its neighbours change seldom)."""

PACE_FILE = "simulated-gpu-pace.json"
"""Where, in the runner's scratch folder, simulated GPUs publish the trials' pace."""


class SharedGpus(Protocol):
    """A load model: takes the trials' loads and says how fast each then runs."""

    def set_load(self, key: int, load: TrialLoad) -> None:
        """Trial ``key`` puts ``load`` on its GPUs from now on."""

    def clear_load(self, key: int) -> None:
        """Trial ``key`` ended."""

    def speed_shares(self) -> dict[int, float]:
        """Each trial's share of its solo speed under the loads now declared."""


class PacePublisher:
    """Forwards trials' loads to the load model and publishes their speed shares.

    A trial's pace is its GPU's share (the load model's), times the node's CPUs
    over the CPUs the trials keep busy when they want more than there are
    (``cpu_rate``), as in the simulated-time runner.

    Args:
        model: the simulated GPUs' load model.
        path: the file the workers read (written whole, then renamed into place).
        cores: the CPUs of the trials' node (``None``: CPUs never slow them).
    """

    def __init__(self, model: SharedGpus, path: Path, cores: float | None = None) -> None:
        self._model = model
        self.path = path
        self._cores = cores
        self._cpus: dict[int, float] = {}
        self._write()

    @classmethod
    def in_scratch(
        cls, model: SharedGpus | None, scratch: Path | None, cores: float | None
    ) -> PacePublisher | None:
        """The publisher of a search whose simulated trials run in real time in other
        processes: the pace file in the runner's ``scratch`` folder (``None`` where
        there is no load ``model`` or no such folder: no trial reads a pace)."""
        if model is None or scratch is None:
            return None
        return cls(model, scratch / PACE_FILE, cores)

    def set_load(self, key: int, load: TrialLoad) -> None:
        """Trial ``key`` puts ``load`` on its GPUs from now on."""
        self._model.set_load(key, load)
        self._cpus[key] = load.load.cpus
        self._write()

    def clear_load(self, key: int) -> None:
        """Trial ``key`` ended."""
        self._model.clear_load(key)
        self._cpus.pop(key, None)
        self._write()

    def speed_shares(self) -> dict[int, float]:
        """Each trial's share of its solo speed: its GPU's, slowed by the node's CPUs."""
        shares = self._model.speed_shares()
        if self._cores is None:
            return shares
        host = cpu_rate(self._cores, list(self._cpus.values()))
        return {key: share * host for key, share in shares.items()}

    def close(self) -> None:
        """Remove the file."""
        self.path.unlink(missing_ok=True)

    def _write(self) -> None:
        shares = {str(key): share for key, share in self.speed_shares().items()}
        partial = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        partial.write_text(json.dumps(shares), encoding="utf-8")
        os.replace(partial, self.path)  # readers see the old file or the new one, whole


class PaceReader:
    """One trial's share of its solo speed, read from the driver's pace file.

    Args:
        path: the pace file.
        number: the trial's number.
        clock: monotonic seconds.
    """

    def __init__(self, path: str, number: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._path = Path(path)
        self._key = str(number)
        self._clock = clock
        self._read_at = -float("inf")
        self._share = 1.0

    def share(self) -> float:
        """The trial's share now (1.0 while the file says nothing of it)."""
        now = self._clock()
        if now - self._read_at >= READ_EVERY_S:
            self._read_at = now
            self._share = self._read()
        return self._share

    def _read(self) -> float:
        try:
            shares = json.loads(self._path.read_text(encoding="utf-8"))
            return min(1.0, max(0.01, float(shares.get(self._key, 1.0))))
        except (OSError, ValueError, TypeError, AttributeError):
            return 1.0
