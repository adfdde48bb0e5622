"""Connecting to Ray: a local Ray started for one search, or an existing cluster."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import ray

from hpsearch._compat import (
    LOOPBACK_RAY_INIT,
    RAY_ENV_DEFAULTS,
    RAY_WORKER_ENV,
    lean_local_ray,
    local_ray_cpus,
    ray_auto_address,
    ray_on_loopback_only,
)
from hpsearch._procs import descendants
from hpsearch._ray_watchdog import CLEAN_END, NO_SCRATCH
from hpsearch.config import ExecutionSpec
from hpsearch.errors import HpsearchError
from hpsearch.interrupts import sigterm_as_ctrl_c
from hpsearch.placement import ClusterCapacity, NodeGpus
from hpsearch.telemetry import MPS_ENV, names_mig, visible_gpus
from hpsearch.trial.death import reaper_command

# Set only where the user has not (see hpsearch._compat for Ray's own). CUDA
# numbers GPUs fastest first by default, NVML by PCI bus: in bus order both
# agree, so the GPU id Ray gives a trial is the GPU the monitor reads for it.
T = TypeVar("T")

_DRIVER_DEFAULTS = {**RAY_ENV_DEFAULTS, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
_WORKER_ENV = (*RAY_WORKER_ENV, "CUDA_DEVICE_ORDER")


@contextmanager
def ray_cluster(
    spec: ExecutionSpec, workdir: str, scratch: Path | None = None
) -> Iterator[ClusterCapacity]:
    """Connect to Ray for the duration of a search and yield what it has to give.

    Joins ``spec.address`` when set; else reuses a Ray already initialised in this
    process (tests do that); else starts a local Ray bound to 127.0.0.1 with the
    dashboard off, and stops it afterwards.

    Args:
        spec: the ``execution`` section.
        workdir: put on the workers' ``PYTHONPATH`` so ``train`` imports there as here.
        scratch: a folder of the driver's for the search; a Ray started here runs each
            worker under a reaper that writes there how the worker ended.
    """
    for name, value in _DRIVER_DEFAULTS.items():
        os.environ.setdefault(name, value)
    started_here = False
    session_dir: str | None = None
    if not ray.is_initialized():
        # Only workers of a Ray started here share the driver's folders.
        reaped = scratch if not spec.address else None
        runtime_env = _runtime_env(spec.runtime_env, workdir, reaped)
        common: dict[str, Any] = {
            "runtime_env": runtime_env,
            "log_to_driver": False,
            "logging_level": logging.WARNING,
        }
        try:
            if spec.address:
                _check_reachable(spec.address)
                ray.init(address=spec.address, **common)  # its session is the cluster's
            else:

                def start() -> Any:
                    with ray_on_loopback_only(), lean_local_ray():
                        return ray.init(
                            # A Ray of its own, even where `ray start` runs one on this
                            # machine (Ray would otherwise join that one, not asked for).
                            address="local",
                            num_cpus=spec.num_cpus,
                            num_gpus=spec.num_gpus,
                            include_dashboard=False,
                            **LOOPBACK_RAY_INIT,
                            **common,
                        )

                context = start_once_more_if_slow(start, _stop_half_started)
                # The local Ray's folder under /tmp/ray: logs and sockets, one per run.
                info: dict[str, Any] = getattr(context, "address_info", {})  # a RayContext's
                session_dir = str(info.get("session_dir") or "") or None
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise HpsearchError(_connect_error(spec.address, exc)) from None
        started_here = True
    # Ray's processes to end with the driver, where it started them; the scratch folder,
    # wherever the driver's Ray is its own or a cluster's (a Ray already running in this
    # process outlives the search anyway).
    watchdog = _start_watchdog(not spec.address, scratch) if started_here else None
    try:
        # After ray.init, which makes SIGTERM exit at once, skipping the search's end.
        with sigterm_as_ctrl_c():
            yield current_capacity()
    except Exception:
        session_dir = None  # keep the Ray logs of a search that failed
        raise
    finally:
        if started_here:
            ray.shutdown()
            _remove_session(session_dir)
        if watchdog is not None:
            with contextlib.suppress(OSError):  # it ended: it kills and removes nothing
                os.write(watchdog, CLEAN_END)  # the scratch folder is the runner's to remove
            os.close(watchdog)  # the watchdog finds nothing left, and ends


_WATCHDOG = "hpsearch._ray_watchdog"


def _started_node() -> Any:
    """Ray's handle on the local Ray node this process started (Ray's private
    ``_global_node``, read in this one place): ``None`` before ``ray.init``; its
    ``all_processes`` are empty where this process joined a running cluster."""
    return getattr(ray._private.worker, "_global_node", None)


def _start_watchdog(local: bool, scratch: Path | None) -> int | None:
    """Start :mod:`hpsearch._ray_watchdog` on the local Ray's processes (``local``: the
    driver started them) and ``scratch``; return the pipe's write end, which only this
    process holds (``None``: neither a process of Ray's nor a folder to watch)."""
    node = _started_node() if local else None
    roots = [
        info.process.pid
        for infos in (node.all_processes.values() if node is not None else [])
        for info in infos
        if info.process is not None
    ]
    if not roots and scratch is None:
        return None
    where = str(scratch) if scratch is not None else NO_SCRATCH
    read_end, write_end = os.pipe()  # neither is inherited by what Ray starts (PEP 446)
    try:
        subprocess.Popen(
            [sys.executable, "-m", _WATCHDOG, str(read_end), where, *map(str, roots)],
            pass_fds=(read_end,),
            start_new_session=True,  # a signal to the driver's group leaves it to clean up
            stdin=subprocess.DEVNULL,
        )
    except OSError:
        os.close(write_end)
        return None
    finally:
        os.close(read_end)
    return write_end


GCS_CHECK_TIMEOUT_S = 1
"""How long one question to a local Ray's control store may wait for its answer (seconds)."""


def local_ray_died(wait_s: float, done: Callable[[], bool] = lambda: False) -> bool:
    """Whether the control store (GCS) of a Ray this process started stops answering (or
    ends) within ``wait_s``, or before ``done()``: a SIGTERM to the whole process group
    stops it, the process itself lingering a while. ``False`` for a cluster joined by
    address.
    """
    node = _started_node()
    infos = getattr(node, "all_processes", {}).get("gcs_server", []) if node else []
    if not infos or infos[0].process is None:
        return False
    gcs = infos[0].process
    client = getattr(ray._private.worker.global_worker, "gcs_client", None)
    if client is None:
        return gcs.poll() is not None
    deadline, failed = time.monotonic() + wait_s, 0
    while time.monotonic() < deadline and not done():
        try:
            client.internal_kv_get(b"alive", b"hpsearch", timeout=GCS_CHECK_TIMEOUT_S)
            failed = 0
        except Exception:  # Ray's RpcError: it did not answer in time
            failed += 1
        if done():
            return False  # what was watched ended first: Ray's own shutdown may follow
        if gcs.poll() is not None or failed >= 2:
            return True
        time.sleep(0.2)
    return False


_HEAD_PROCESSES = {"gcs_server": "control store gcs_server", "raylet": "raylet"}
"""The processes of a local Ray a search cannot go on without, and what a person calls them."""


def local_ray_lost() -> str | None:
    """How a process the Ray this process started cannot run without ended mid-search (its
    control store or its raylet: ``raylet (pid 123) was killed by signal 9``), or ``None``
    while both run, and for a cluster joined by address (its processes are not ours)."""
    node = _started_node()
    processes = getattr(node, "all_processes", None) or {}
    for kind, called in _HEAD_PROCESSES.items():
        for info in processes.get(kind, []):
            process = info.process
            code = process.poll() if process is not None else None
            if process is None or code is None:
                continue
            how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
            return f"{called} (pid {process.pid}) {how}"
    return None


def stop_local_ray() -> None:
    """Kill what is left of the Ray this process started, by its processes (no RPC: its
    control store is gone, and Ray's own shutdown would wait on it)."""
    node = _started_node()
    if node is None:
        return
    started = [info.process.pid for infos in node.all_processes.values() for info in infos]
    # Their children too (Ray's agents, the trials' workers): without their raylet
    # they would linger about a minute before noticing.
    children = [pid for parent in started for pid in descendants(parent)]
    with contextlib.suppress(Exception):  # stopping what is already half gone
        node.kill_all_processes(check_alive=False, allow_graceful=False)
    for pid in children:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _remove_session(session_dir: str | None) -> None:
    """Remove a stopped local Ray's session folder (and ``session_latest`` if it points there)."""
    if not session_dir:
        return
    folder = Path(session_dir)
    latest = folder.parent / "session_latest"
    if latest.is_symlink() and latest.resolve() == folder.resolve():
        latest.unlink(missing_ok=True)
    shutil.rmtree(folder, ignore_errors=True)


_HOST_PORT = re.compile(r"^\[?(?P<host>[\w.:-]+?)\]?:(?P<port>\d+)$")


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail in seconds on a ``host:port`` accepting no connection; Ray retries for minutes,
    and for ever on the address ``auto`` finds where that cluster has stopped.

    Raises:
        ConnectionError: nothing accepts connections at ``address``.
        HpsearchError: nor at the one ``auto`` found, with where it was found.
    """
    found = ray_auto_address() if address == "auto" else (address, "")
    match = _HOST_PORT.match(found[0]) if found else None
    if found is None or match is None:  # no cluster to find, "ray://...": Ray's own answer
        return
    try:
        with socket.create_connection((match["host"], int(match["port"])), timeout=timeout_s):
            pass
    except OSError as exc:
        if address == "auto":
            # Left by a `ray start` whose cluster has stopped since (killed, or the machine
            # restarted): `ray stop` would have removed it.
            raise HpsearchError(
                f"execution.address: auto finds the cluster at {found[0]} ({found[1]}), "
                f"and nothing accepts connections there ({exc.strerror or exc}): it has "
                "stopped; start it again (ray start --head), or leave execution.address "
                "out for a Ray of the search's own"
            ) from None
        raise ConnectionError(f"nothing accepts connections at {address}: {exc}") from None


RAY_STARTUP_WAIT_S = 30
"""How long Ray 2.x waits for its raylet to register with its control store, hard-coded
(``ray/_private/node.py``): a busy laptop's start can miss it."""
_SLOW_START = "timed out during startup"
"""Ray's words (a bare ``Exception``) when its raylet missed :data:`RAY_STARTUP_WAIT_S`."""


class RayStartTimedOut(HpsearchError):
    """A local Ray's start missed Ray's own wait for its raylet, twice."""


def start_once_more_if_slow(start: Callable[[], T], stop: Callable[[set[int]], None]) -> T:
    """``start()`` a local Ray; where its raylet missed Ray's wait (a busy machine),
    ``stop()`` what half-started (the processes the start left) and start once more.

    Raises:
        RayStartTimedOut: the second start missed it too: one line, what was waited
            for and what to try.
    """
    for attempt in (1, 2):
        before = set(descendants(os.getpid()))
        try:
            return start()
        except Exception as exc:  # Ray raises a bare Exception for this one
            if _SLOW_START not in str(exc):
                raise
            stop(set(descendants(os.getpid())) - before)
            if attempt == 2:
                raise RayStartTimedOut(_slow_start_line()) from None
    raise AssertionError("unreachable")


def _slow_start_line() -> str:
    cores = os.cpu_count() or 1
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"cannot start a local Ray: twice its raylet did not register with its control store "
        f"within Ray's {RAY_STARTUP_WAIT_S} s (load average {load:.1f} on {cores} core(s)); "
        "run again when the machine is less busy, or start Ray once yourself "
        "(ray start --head --num-cpus N) and set execution.address: auto"
    )


def _stop_half_started(started: set[int]) -> None:
    """Stop what a failed ``ray.init`` left: its connection and the processes it started
    (its control store and raylet, which no node object of Ray's holds any more)."""
    with contextlib.suppress(Exception):
        ray.shutdown()
    for pid in started:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _connect_error(address: str | None, exc: Exception) -> str:
    if not address:
        return (
            f"cannot start a local Ray ({exc}); see the Ray logs under /tmp/ray/session_latest/logs"
        )
    hint = "check the address (ray status on the head node prints it)"
    if os.environ.get("RAY_AUTH_MODE") is None:
        # Ray never sends its token to an address given explicitly unless asked.
        hint += (
            "; if the cluster uses token authentication (Ray's default for ray start), "
            "set RAY_AUTH_MODE=token with the token in ~/.ray/auth_token or RAY_AUTH_TOKEN"
        )
    return f"execution.address: cannot connect to the Ray cluster at '{address}' ({exc}); {hint}"


def _runtime_env(user_env: dict[str, Any], workdir: str, reaped: Path | None) -> dict[str, Any]:
    env = dict(user_env)
    # Ray does not say how a worker that died without a word ended; its reaper does.
    # A user's own py_executable (uv run, a profiler) is kept instead, without one.
    if reaped is not None and "py_executable" not in env:
        env["py_executable"] = reaper_command(reaped)
    env_vars = dict(env.get("env_vars", {}))
    paths = [workdir, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    if "PYTHONPATH" in env_vars:
        paths.insert(0, env_vars["PYTHONPATH"])
    env_vars["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    for name in _WORKER_ENV:
        env_vars.setdefault(name, os.environ[name])
    for name in MPS_ENV:  # a daemon of the user's: its clients are the trials' workers
        if name in os.environ:
            env_vars.setdefault(name, os.environ[name])
    env["env_vars"] = env_vars
    return env


def cpus_a_trial_can_have(spec: ExecutionSpec) -> tuple[float, str] | None:
    """The most CPUs one trial can hold on the Ray a search of ``spec`` runs on, and whose
    they are; ``None`` where that is not known before the search (a cluster joined by
    address may gain nodes: Ray's autoscaler) or the config says it (``num_cpus``).

    A trial is one bundle of Ray's: it runs on one node, so a Ray already running in
    this process answers with its largest node.
    """
    if spec.address or spec.num_cpus is not None:
        return None
    if ray.is_initialized():
        nodes = ray.nodes()  # type: ignore[no-untyped-call]
        most = max((n["Resources"].get("CPU", 0.0) for n in nodes if n.get("Alive")), default=0)
        return float(most), "the largest node of the Ray this process is connected to"
    return float(local_ray_cpus()), "the local Ray (this machine's CPUs)"


def current_capacity() -> ClusterCapacity:
    """The CPUs and GPUs of the connected Ray cluster now (nodes may join or leave)."""
    resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
    return ClusterCapacity(cpus=float(resources.get("CPU", 0)), gpus=float(resources.get("GPU", 0)))


def local_node_id() -> str | None:
    """The Ray node this driver runs on (``None`` for a Ray client, which is on no node)."""
    try:
        node_id: str = ray.get_runtime_context().get_node_id()
    except Exception:  # a Ray client has no node of its own
        return None
    return node_id


def cluster_gpus(
    monitored: Mapping[str, Mapping[int, float | None]], local_node: str | None
) -> list[NodeGpus]:
    """Every alive Ray node with GPUs: its address, CPUs and GPU indices.

    Args:
        monitored: each monitored node's GPUs (index to memory in MiB), by node id; the
            driver's own monitor's under ``local_node`` (or ``""``). A node is read
            through them when they cover its GPUs.
        local_node: the driver's Ray node id.
    """
    nodes = []
    for entry in ray.nodes():  # type: ignore[no-untyped-call]
        if not entry.get("Alive"):
            continue
        resources = entry.get("Resources", {})
        count = int(resources.get("GPU", 0))
        if count <= 0:
            continue
        node_id = str(entry["NodeID"])
        local = local_node is not None and node_id == local_node
        indices, read = _ray_gpus(
            count, local, monitored.get(node_id, monitored.get("") if local else None)
        )
        if read is not None and all(i in read for i in indices):
            memory, watched = {i: read[i] for i in indices}, True
        else:
            memory, watched = dict.fromkeys(indices), False
        nodes.append(
            NodeGpus(
                node_id=node_id,
                node=str(entry["NodeManagerAddress"]),
                cpus=float(resources.get("CPU", 0)),
                gpus=tuple(sorted(memory)),
                memory_mb=memory,
                monitored=watched,
            )
        )
    # The driver's node first, then the others in a stable order.
    return sorted(nodes, key=lambda n: (n.node_id != local_node, n.node, n.node_id))


def _ray_gpus(
    count: int, local: bool, read: Mapping[int, float | None] | None
) -> tuple[list[int], Mapping[int, float | None] | None]:
    """The numbers of a node's ``count`` Ray GPUs as its monitor numbers them, and that
    monitor's GPUs (``None``: none reads them).

    A remote node's monitor reads the GPUs its Ray sees, by NVML's numbers. On the
    driver's, NVML numbers every GPU of the machine, and Ray has the first ``count`` of
    those ``CUDA_VISIBLE_DEVICES`` lists (by index or UUID); simulated GPUs keep their
    own numbers whatever it lists.
    """
    if not local:
        if read is not None and len(read) == count:
            return sorted(read), read
        return list(range(count)), read
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if names_mig(value):
        return list(range(count)), None  # MIG instances: NVML's numbers name whole GPUs
    visible = visible_gpus(value)
    if visible is not None and len(visible) >= count:
        chosen = visible[:count]
        if read is None or all(i in read for i in chosen):
            return chosen, read
    return list(range(count)), read
