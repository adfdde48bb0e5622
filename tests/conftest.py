"""Fixtures shared by the whole suite: a project folder, configs, a study, an MLflow store."""

from __future__ import annotations

import contextlib
import copy
import http.client
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest
import yaml

from hpsearch.placement import (
    Admission,
    ClusterCapacity,
    ResourcePolicy,
    RunningTrial,
    StaticPolicy,
)
from hpsearch.runner import VirtualClock
from tests.schedule import DURATIONS, DurationRecorder, longest_first, read_durations

if TYPE_CHECKING:
    # MLflow and the harness (3-4 s of imports here) are imported where used: pytest's
    # controller loads this file too, before its workers start, and runs no test.
    from mlflow.tracking import MlflowClient

    from hpsearch.config import RunConfig
    from hpsearch.tracking import MlflowTracker
    from tests.harness import DriverFactory

REPO_ROOT = Path(__file__).resolve().parents[1]

# Ray starts its workers at niceness 15, below every process of the tests beside them
# (pytest's workers, the drivers they start, mypy): under make test's load a trial's
# worker then waits minutes for a core. With two busy loops at niceness 0 on the two
# cores, the conditional example's first trial had not checkpointed twice after 190 s;
# with its Ray's workers at 0, it had at 43 s (24.5 s alone). Every Ray the tests start
# (in process, in the drivers and nodes they start) reads this from the environment.
os.environ.setdefault("RAY_worker_niceness", "0")

BASE_CONFIG: dict[str, Any] = {
    "study": {"name": "test-study", "sampler": {"type": "random", "seed": 0}, "n_trials": 4},
    "objective": {"metric": "score", "direction": "maximize"},
    "train": "tests.train_functions:quick",
    "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}, "steps": 3},
    "execution": {"max_concurrent": 2},
    # Optuna's figures cost each search's driver 2-3 CPU-seconds to import their
    # libraries, paid by some 30 hpsearch run processes per make test on its 2
    # cores; the tests of the figures turn them on.
    "tracking": {"figures": False},
}

ConfigWriter = Callable[..., Path]

STEP_S = 0.0036  # the simulated workload's step at batch 64, width 256, depth 1


def load_search(
    *,
    util: float | list[float],
    memory: float | list[float],
    trials: int,
    seconds: float,
    gpus: int = 1,
) -> dict[str, Any]:
    """A search of trials that each put ``util`` % and ``memory`` MiB on their GPU."""
    epochs = 4
    return {
        "study": {"n_trials": trials, "sampler": {"type": "random", "seed": 3}},
        "objective": {"metric": "val_accuracy", "direction": "maximize"},
        "train": "hpsearch.workloads.simulated_gpu:train",
        "space": {
            "x": None,  # the base config's entries, deleted
            "steps": None,
            "lr": {"type": "float", "low": 1e-3, "high": 1e-2, "log": True},
            "utilization_pct": util,
            "memory_mb": memory,
            "batch_size": 64,
            "width": 256,
            "depth": 1,
            "epochs": epochs,
            "steps_per_epoch": round(seconds / epochs / STEP_S),
        },
        "execution": {"max_concurrent": None, "num_cpus": 8},
        "packing": {"probe_seconds": 1, "cooldown_seconds": 4},
        "telemetry": {
            "backend": "simulated",
            "interval_s": 0.25,
            "simulated": {"source": "load", "gpus": gpus},
        },
    }


class SwitchAfter(ResourcePolicy):
    """Answers like a static one-trial-per-GPU policy, then two per GPU after ``n`` admissions."""

    def __init__(self, n: int) -> None:
        self.inner = StaticPolicy(trials_per_gpu=1)
        self.n = n
        self.admitted = 0

    def admit(
        self,
        running: Sequence[RunningTrial],
        capacity: ClusterCapacity,
        *,
        whole_gpu: bool = False,
    ) -> Admission | None:
        admission = self.inner.admit(running, capacity, whole_gpu=whole_gpu)
        if admission is not None:
            self.admitted += 1
            if self.admitted == self.n:
                self.inner.trials_per_gpu = 2
        return admission


def mlflow_client(project: Path) -> MlflowClient:
    """A client of the project's MLflow store (the default ``sqlite:///mlruns/mlflow.db``)."""
    from mlflow.tracking import MlflowClient

    return MlflowClient(f"sqlite:///{project / 'mlruns' / 'mlflow.db'}")


def age_heartbeat(storage: str, number: int, seconds: float) -> None:
    """Date the last heartbeat of trial ``number`` ``seconds`` back, in the study's own database.

    Staleness is judged by the database's clock, so this is how a driver that
    stopped stamping long ago is written without waiting (SQLite storages).
    """
    import sqlalchemy

    engine = sqlalchemy.create_engine(storage)
    with engine.begin() as connection:
        connection.execute(
            sqlalchemy.text(
                "UPDATE trial_heartbeats SET heartbeat = datetime(heartbeat, :shift) "
                "WHERE trial_id = (SELECT trial_id FROM trials WHERE number = :number)"
            ),
            {"shift": f"-{int(seconds)} seconds", "number": number},
        )
    engine.dispose()


class RayAddressFile:
    """The file ``ray start --head`` writes (``/tmp/ray/ray_current_cluster``): the cluster a
    plain ``ray.init()`` on this machine joins. A test's head, killed, leaves it naming a
    cluster that is gone, and a user's ``ray.init()`` here then fails ("When connecting to
    an existing cluster, ...") or waits on it for ever; :meth:`restore`, once the test's
    cluster is stopped, leaves the file naming a cluster that still answers, or none."""

    def __init__(self) -> None:
        from ray._common.utils import get_ray_address_file

        self.path = Path(get_ray_address_file(None))
        self._before = self.path.read_text() if self.path.exists() else None

    def restore(self) -> None:
        """The file as it names a cluster that answers: as it is (another test's, started
        since), else as it was before (a user's), else none. Tests on other workers start
        and stop heads at the same time: what was there before may be one of theirs, gone
        by now, and put back blindly it outlived the suite (found on 2026-11-30)."""
        now = self.path.read_text() if self.path.exists() else None
        kept = next((a for a in (now, self._before) if a is not None and _answers(a)), None)
        if kept is None:
            self.path.unlink(missing_ok=True)
        elif kept != now:
            self.path.write_text(kept)


def _answers(address: str) -> bool:
    """Whether something accepts connections at ``host:port`` (a Ray head's GCS)."""
    host, _, port = address.strip().rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1.0):
            return True
    except (OSError, ValueError):
        return False


def merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge ``update`` into a copy of ``base`` (a ``None`` value deletes the key)."""
    merged = copy.deepcopy(base)
    for key, value in update.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--no-processes",
        action="store_true",
        help="the edit loop's lane (make check): only tests not marked process, and any "
        "of them that starts a process fails",
    )
    parser.addoption(
        "--record-durations",
        action="store_true",
        help="merge each test's seconds into tests/durations.json after a run in which "
        "all passed (make durations): the order in which make test hands tests out",
    )


_BYTECODE_OFF = pytest.StashKey[bool]()


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--record-durations") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(DurationRecorder(DURATIONS), "duration-recorder")
    # pytest rewrites each test module's asserts as it collects it, and keeps the result
    # in __pycache__ only where bytecode may be written. Where PYTHONDONTWRITEBYTECODE is
    # set (as on this project's machines), every worker of every run rewrote all of them
    # again: 11.5 s of collection against 6.1-6.6 s read from that cache, on 2 cores.
    # Written while collecting only: the tests' own subprocesses keep the setting.
    config.stash[_BYTECODE_OFF] = sys.dont_write_bytecode
    sys.dont_write_bytecode = False


def pytest_collection_finish(session: pytest.Session) -> None:
    sys.dont_write_bytecode = session.config.stash[_BYTECODE_OFF]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "kit" not in (config.option.markexpr or ""):
        # The kit's own lane (make gpu-kit): minutes of building, downloads included.
        building = [item for item in items if item.get_closest_marker("kit")]
        if building:
            config.hook.pytest_deselected(items=building)
            items[:] = [item for item in items if not item.get_closest_marker("kit")]
    if not config.getoption("--no-processes"):
        # The longest first (tests/schedule.py): the workers' last tests are short, not
        # a lone half-minute one while the other workers idle. (The same order on each.)
        processes = {item.nodeid for item in items if item.get_closest_marker("process")}
        on_ray = {i.nodeid for i in items if "ray_one_gpu" in getattr(i, "fixturenames", ())}
        items[:] = longest_first(items, read_durations(), processes, on_ray)
        return
    starting = [item for item in items if item.get_closest_marker("process")]
    if starting:
        config.hook.pytest_deselected(items=starting)
        items[:] = [item for item in items if not item.get_closest_marker("process")]


@pytest.fixture(autouse=True)
def _marked_if_it_starts_a_process(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In the ``--no-processes`` lane, a test that starts a process fails, naming the marker.

    So the lane cannot drift: a test that starts Ray, a subprocess, a server or a
    DataLoader worker must carry ``@pytest.mark.process`` (and runs in ``make test``).
    """
    if not request.config.getoption("--no-processes"):
        return
    import multiprocessing.util
    import platform

    # Python runs `uname -p` once for the processor's name, and keeps it: MLflow's first
    # import asks (its telemetry schema), so a test that imports MLflow first in its
    # process would otherwise be taken for one that starts a process.
    platform.processor()

    def refuse(*args: object, **kwargs: object) -> NoReturn:
        raise AssertionError(
            f"{request.node.nodeid} starts a process: mark it @pytest.mark.process "
            "(make check runs only the tests that start none)"
        )

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse)
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
        monkeypatch.setattr(os, name, refuse)
    monkeypatch.setattr(multiprocessing.util, "spawnv_passfds", refuse)


@pytest.fixture
def clock() -> VirtualClock:
    """Unix time that moves only when a test moves it (``clock.now += 5``)."""
    return VirtualClock(1000.0)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory standing in for a user's project; ``mlruns/`` goes here.

    Ray workers get the repository on their ``PYTHONPATH``: ``tests.train_functions`` imports there.
    """
    monkeypatch.chdir(tmp_path)
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    monkeypatch.setenv("PYTHONPATH", path)
    return tmp_path


@pytest.fixture(autouse=True)
def _torch_threads_kept() -> Iterator[None]:
    """Torch trains on one intra-op thread in every test, on any machine: a trial run in
    the test process sets the threads to its CPUs, and a later test would train with other
    float reductions (the sequences workload's learning test did); and two test workers
    each spinning two threads on two cores trained nine times slower."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)
    yield
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


@pytest.fixture(scope="session")
def mlflow_store_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty MLflow SQLite store, created once by MLflow itself (its migrations take seconds)."""
    from hpsearch._sqlite import settle
    from hpsearch.tracking import MlflowTracker

    folder = tmp_path_factory.mktemp("mlflow-template")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    MlflowTracker(uri, "template", str(folder / "artifacts"))
    settle(uri)  # the migrations out of the write-ahead log: the file is copied alone
    return folder / "mlflow.db"


@pytest.fixture
def seeded_store(project: Path, mlflow_store_template: Path) -> Path:
    """The project's default MLflow store, already migrated (a copy of the template).

    For tests whose subject is not MLflow's first start; ``tests/test_e2e.py``
    starts from an empty project, as a new user does.
    """
    store = project / "mlruns" / "mlflow.db"
    store.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(mlflow_store_template, store)
    return store


@pytest.fixture
def write_config(project: Path) -> ConfigWriter:
    """Write a config into the project: ``write_config(update_dict, name=...)`` or raw text."""

    def write(update: dict[str, Any] | str | None = None, name: str = "config.yaml") -> Path:
        path = project / name
        if isinstance(update, str):
            path.write_text(update)
        else:
            path.write_text(yaml.safe_dump(merge(BASE_CONFIG, update or {}), sort_keys=False))
        return path

    return write


@pytest.fixture
def config(write_config: ConfigWriter) -> RunConfig:
    """The base config, loaded."""
    from hpsearch.config import load_config

    return load_config(write_config())


@pytest.fixture
def repo_configs(project: Path) -> Path:
    """The repository's ``configs/`` copied into the project."""
    target = project / "configs"
    target.mkdir()
    for source in (REPO_ROOT / "configs").glob("*.yaml"):
        (target / source.name).write_text(source.read_text())
    return target


@pytest.fixture
def mlflow_tracker(seeded_store: Path) -> MlflowTracker:
    """A real MLflow store (SQLite) in the project, experiment ``test-study``."""
    from hpsearch.tracking import MlflowTracker

    return MlflowTracker("sqlite:///mlruns/mlflow.db", "test-study", "mlruns/artifacts")


@pytest.fixture
def nvml_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML's library is missing, whatever this machine has (a GPU machine included)."""
    import pynvml

    def no_library() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", no_library)


class _SessionRay:
    """One in-process Ray per test process (each pytest worker), started when first asked for.

    2 CPUs and 1 logical GPU (no real GPU needed). Searches reuse it (a search runs
    on a Ray already initialised in its process); a test that needs no Ray in the
    process (it starts its own, or checks what a search starts) asks for ``no_ray``,
    and the next test that needs this one starts it again.
    """

    def ensure(self) -> None:
        import ray

        from hpsearch._compat import (
            LOOPBACK_RAY_INIT,
            RAY_ENV_DEFAULTS,
            RAY_WORKER_ENV,
            lean_local_ray,
            ray_on_loopback_only,
        )

        if ray.is_initialized():
            return
        # Started as a search starts its own (hpsearch.runner's ray_cluster): on loopback,
        # without the monitors and idle workers no search uses. On 2 cores, ray.init
        # 5.7 s → 2.6 s, and idle 5.4% → 1.8% of a core while the quick tests run.
        with ray_on_loopback_only(), lean_local_ray():
            ray.init(
                address="local",  # a Ray of its own, even while a test's `ray start` runs
                num_cpus=2,
                num_gpus=1,
                include_dashboard=False,
                log_to_driver=False,
                logging_level=logging.WARNING,
                runtime_env={
                    "env_vars": {
                        "PYTHONPATH": str(REPO_ROOT),
                        **{name: RAY_ENV_DEFAULTS[name] for name in RAY_WORKER_ENV},
                    }
                },
                **LOOPBACK_RAY_INIT,
            )

    @staticmethod
    def stop() -> None:
        ray = sys.modules.get("ray")  # not imported: nothing started, nothing to import
        if ray is not None and ray.is_initialized():
            ray.shutdown()


_SESSION_RAY = _SessionRay()


@pytest.fixture
def ray_one_gpu() -> None:
    """The test process's Ray (2 CPUs, 1 logical GPU), kept for the next test that needs it."""
    _SESSION_RAY.ensure()


@pytest.fixture
def no_ray() -> None:
    """No Ray initialised in this process (the test starts one of its own, or a search does)."""
    _SESSION_RAY.stop()


def pytest_runtest_setup(item: pytest.Item) -> None:
    # make test runs the tests that start no process last (tests/schedule.py): none of
    # them uses Ray, and an idle one would take its share of the cores all through them.
    if not item.get_closest_marker("process"):
        _SESSION_RAY.stop()


def pytest_sessionfinish(session: pytest.Session) -> None:
    _SESSION_RAY.stop()


@pytest.fixture
def driver(seeded_store: Path) -> Iterator[DriverFactory]:
    """The parts of a search wired by the composition root, driven by hand (tests/harness.py)."""
    from tests.harness import drivers

    with drivers() as make:
        yield make


def hpsearch_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``python -m hpsearch ARGS`` in the current folder, to its end."""
    return subprocess.run(
        [sys.executable, "-m", "hpsearch", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


@dataclass(frozen=True)
class CliResult:
    """What an in-process ``hpsearch`` command did, shaped like a finished subprocess."""

    returncode: int
    stdout: str
    stderr: str


def cli(*args: str, env: dict[str, str | None] | None = None) -> CliResult:
    """``hpsearch ARGS`` in this process (no interpreter start, no Ray start of its own).

    A search runs on the Ray already initialised here (``ray_one_gpu``), if any.
    ``env``: variables set while it runs (``None``: unset). For what a subprocess
    alone shows (a signal, a console script, a process of its own), use
    :func:`hpsearch_cli`.
    """
    from click.testing import CliRunner

    from hpsearch.cli import main

    result = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
    return CliResult(result.exit_code, result.stdout, result.stderr)


PORT_TRIES = 3
"""How many free ports a test's server is started on before the test fails: another
process (a Ray's gRPC server, through the whole suite) may bind the port found free in
the seconds before the server does."""


def serve_on_a_free_port(
    start: Callable[[int], subprocess.Popen[Any]],
    health: str,
    timeout: float,
    stop: Callable[[subprocess.Popen[Any]], object] = subprocess.Popen.terminate,
) -> tuple[subprocess.Popen[Any], int]:
    """A server ``start(port)`` started, answering 200 at ``health`` (a path), on a port
    free when chosen; one taken meanwhile (the server exited, or what answers is not
    HTTP) is given up for another, :data:`PORT_TRIES` times. ``stop`` ends one given up
    (a server that leads a process group: its whole group).

    Raises:
        AssertionError: it did not answer in ``timeout`` seconds, or it exited (or its
            port was taken) each time: its log says which.
    """
    taken = []
    for _ in range(PORT_TRIES):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port: int = probe.getsockname()[1]
        server = start(port)
        deadline = time.monotonic() + timeout
        while (state := _http_state(f"http://127.0.0.1:{port}{health}", server)) is False:
            if time.monotonic() > deadline:
                stop(server)
                server.wait(timeout=60)
                raise AssertionError(f"no answer at port {port} in {timeout} s")
            time.sleep(0.5)
        if state:
            return server, port
        stop(server)
        server.wait(timeout=60)
        taken.append(port)
    raise AssertionError(f"the server exited, or found its port taken, on ports {taken}")


def _http_state(url: str, server: subprocess.Popen[Any]) -> bool | None:
    """``True``: ``url`` answers 200; ``False``: not yet; ``None``: its port is another
    program's (the server exited, or what answers is not HTTP: a gRPC server's bytes)."""
    if server.poll() is not None:
        return None
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return bool(reply.status == 200)
    except http.client.HTTPException:
        return None
    except OSError:
        return False


def wait_for(
    condition: Callable[[], bool],
    timeout: float,
    what: str,
    *,
    process: subprocess.Popen[str] | None = None,
) -> None:
    """Poll ``condition`` until it holds; fail the test after ``timeout`` seconds.

    ``process``: the process (started with its output piped) whose work the test
    waits on. If it ends first, the test fails at once; at the timeout it is killed
    (its process group, where it leads one: its Ray too). Either way the failure
    ends with what it printed, to tell a slow start from a stuck or failed search.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if process is not None and process.poll() is not None and not condition():
            raise AssertionError(
                f"the process ended (exit {process.returncode}) before {what}" + _said_by(process)
            )
        time.sleep(0.5)
    if process is not None:
        with contextlib.suppress(ProcessLookupError):
            if os.getpgid(process.pid) == process.pid:
                os.killpg(process.pid, signal.SIGKILL)
            else:
                process.kill()
        raise AssertionError(
            f"timed out waiting for {what} (the process killed)" + _said_by(process)
        )
    raise AssertionError(f"timed out waiting for {what}")


def _said_by(process: subprocess.Popen[str]) -> str:
    """The end of an ended process's stdout and stderr, for a failure's message."""
    try:
        stdout, stderr = process.communicate(timeout=30)
    except (subprocess.TimeoutExpired, ValueError):  # its pipes held open, or read already
        return "; its output could not be read"
    return (
        f"\n--- its stdout, last lines:\n{(stdout or '')[-2000:]}"
        f"\n--- its stderr, last lines:\n{(stderr or '')[-3000:]}"
    )
