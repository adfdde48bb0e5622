"""Servers the cluster tests need, started as a user starts them, on 127.0.0.1 only.

- PostgreSQL: the server binaries of the ``pgserver`` wheel (a dev dependency, so
  ``make test`` has them on a fresh machine): ``initdb`` then ``pg_ctl start``.
- An MLflow tracking server: ``mlflow server``, backed by a PostgreSQL database,
  serving artifacts from a folder.

The docs' cluster guide (docs/guides/clusters.md) gives the same commands.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpsearch.cli import JOB_EXECUTION
from tests.conftest import RayAddressFile, serve_on_a_free_port
from tests.faults.conftest import drivers  # noqa: F401  (the fixture, shared here)


class RayNodes:
    """Ray nodes started as users start them (``ray start``), each in its own process group.

    Args:
        env: the nodes' environment (and the driver's, to reach them).
    """

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.started: list[subprocess.Popen[str]] = []
        self.port = free_port()
        self._address_file = RayAddressFile()

    def start(self, *args: str) -> subprocess.Popen[str]:
        """``ray start ARGS`` on 127.0.0.1, blocking in the background."""
        ray = str(Path(sys.executable).parent / "ray")
        common = ["--node-ip-address=127.0.0.1", "--disable-usage-stats", "--block"]
        node = subprocess.Popen(
            [ray, "start", *args, *common],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
            env=self.env,
            start_new_session=True,  # its group is that node: killing it loses the node
        )
        self.started.append(node)
        return node

    def head(self, *args: str) -> subprocess.Popen[str]:
        """The head node (no dashboard), on this object's port, once its control store
        accepts connections (a driver started sooner is refused, as a user's would be)."""
        node = self.start("--head", f"--port={self.port}", "--include-dashboard=false", *args)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and node.poll() is None:
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return node
            time.sleep(0.2)
        raise AssertionError(f"the head node never accepted connections (exit {node.poll()})")

    def worker(self, *args: str) -> subprocess.Popen[str]:
        """A node joining the head."""
        return self.start(f"--address=127.0.0.1:{self.port}", *args)

    def kill(self, node: subprocess.Popen[str]) -> None:
        """Kill the node's whole process group (raylet, workers): the machine is gone."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.pid, signal.SIGKILL)
        node.wait()

    def kill_all(self) -> None:
        for node in self.started:
            self.kill(node)
        self._address_file.restore()


def ray_node_env(**extra: str) -> dict[str, str]:
    """The environment of token-authenticated nodes on 127.0.0.1 and of their drivers."""
    return {
        **os.environ,
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": os.urandom(16).hex(),
        **extra,
    }


# PostgreSQL refuses to run as root; as root, the server runs as this user.
SERVER_USER = "pgserver"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _postgres_bin() -> Path:
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the pgserver wheel is missing: run `make setup`")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def reachable_by_others(path: Path) -> bool:
    """Whether another user may run what ``path`` holds: it and every folder above it let
    others through (a checkout under root's own home, ``/root``, is mode 0700)."""
    return all(folder.stat().st_mode & stat.S_IXOTH for folder in (path, *path.parents))


def runnable_by_others(bin_folder: Path, scratch: Path) -> Path:
    """PostgreSQL's programs where the server's user may run them: ``bin_folder`` itself,
    or, where a folder above it lets no other user through, a copy under ``scratch``
    (a folder every user may enter), made once.

    The copy keeps the wheel's layout: ``pgserver/pginstall`` (34 MB: the programs find
    their own files beside them) and the libraries ``pgserver.libs`` that the programs'
    run path names (``$ORIGIN/../../../pgserver.libs``).
    """
    if reachable_by_others(bin_folder):
        return bin_folder
    package = bin_folder.parents[1]
    libs = package.with_name(f"{package.name}.libs")
    copy = scratch / "postgres"
    if not copy.is_dir():
        installation = bin_folder.parent.relative_to(package)
        shutil.copytree(package / installation, copy / package.name / installation, symlinks=True)
        if libs.is_dir():
            shutil.copytree(libs, copy / libs.name, symlinks=True)
    return copy / bin_folder.relative_to(package.parent)


class Postgres:
    """A PostgreSQL server in ``folder``, listening on 127.0.0.1, trusting local logins."""

    def __init__(self, folder: Path) -> None:
        self.bin = _postgres_bin()
        self.data = folder / "data"
        self.port = free_port()
        self.user: str | None = None
        if os.geteuid() == 0:
            with contextlib.suppress(KeyError):
                pwd.getpwnam(SERVER_USER)
                self.user = SERVER_USER
            if self.user is None:
                subprocess.run(["useradd", "--no-create-home", SERVER_USER], check=True)
                self.user = SERVER_USER
            folder.chmod(0o777)
            self.bin = runnable_by_others(self.bin, folder)  # removed with it at the end
        self._run("initdb", "-D", str(self.data), "--auth=trust", "-U", "postgres", "-E", "utf8")
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-w",
            "-l",
            str(folder / "postgres.log"),
            "-o",
            f"-h 127.0.0.1 -p {self.port} -k {folder}",
            "start",
        )

    def _run(self, program: str, *args: str) -> None:
        subprocess.run(
            [str(self.bin / program), *args],
            check=True,
            capture_output=True,
            user=self.user,
            timeout=60,
        )

    def url(self, database: str) -> str:
        """A SQLAlchemy URL of ``database`` on this server."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, prefix: str) -> str:
        """A new, empty database; its URL."""
        name = f"{prefix}_{uuid.uuid4().hex[:8]}"
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", name)
        return self.url(name)

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "stop")


class MlflowServer:
    """``mlflow server`` on 127.0.0.1: runs in PostgreSQL or SQLite, artifacts in a folder."""

    def __init__(self, backend: str, artifacts: Path) -> None:
        self.log = artifacts.parent / "mlflow-server.log"
        mlflow = str(Path(sys.executable).parent / "mlflow")

        def start(port: int) -> subprocess.Popen[bytes]:
            with open(self.log, "a") as log:
                return subprocess.Popen(
                    [
                        mlflow,
                        "server",
                        "--backend-store-uri",
                        backend,
                        "--artifacts-destination",
                        str(artifacts),
                        "--host",
                        "127.0.0.1",
                        "--port",
                        str(port),
                        "--workers",
                        "1",
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    # As hpsearch ui runs it: without the job runner of MLflow's GenAI
                    # features (seven polling workers, for the whole test session).
                    env={**os.environ, JOB_EXECUTION: "false"},
                )

        try:
            self.process, self.port = serve_on_a_free_port(start, "/health", 120, _kill_group)
        except AssertionError as exc:
            raise RuntimeError(f"mlflow server: {exc}: {self.log.read_text()[-2000:]}") from None
        self.uri = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        _kill_group(self.process)
        self.process.wait()


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL to the process group ``process`` leads (a server and its workers)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    """A PostgreSQL server for the session (each test makes its own databases)."""
    folder = Path(tempfile.mkdtemp(prefix="hpsearch-pg-"))  # short: its socket lives here
    server = Postgres(folder)
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def mlflow_server(postgres: Postgres) -> Iterator[MlflowServer]:
    """An MLflow tracking server for the session, backed by PostgreSQL."""
    folder = Path(tempfile.mkdtemp(prefix="hpsearch-mlflow-"))
    server = MlflowServer(postgres.create_database("mlflow"), folder / "artifacts")
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)
