"""The driver's study served to its workers over Optuna's gRPC storage proxy.

An Optuna objective (``train: {optuna: ...}``) suggests its parameters in its
trial's worker, on the driver's study. :func:`serve_study` serves the study's
storage (whatever it is: a SQLite file, PostgreSQL, memory) with Optuna's own
proxy server for as long as the search runs; workers reach it through
:class:`optuna.storages.GrpcStorageProxy`. The server is Optuna's
``make_server`` (what ``run_grpc_proxy_server`` runs, without blocking), pinned
in ``tests/test_compat.py``.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

import optuna

GRACE_S = 1.0
"""How long the server lets calls in flight finish when the search ends."""


@contextmanager
def serve_study(study: optuna.Study, host: str) -> Iterator[str]:
    """Serve ``study``'s storage on ``host`` (a free port) while the block runs; yield
    ``host:port``."""
    from optuna.storages._grpc.server import make_server

    port = _free_port(host)
    server = make_server(study._storage, host, port)
    server.start()
    try:
        yield f"{host}:{port}"
    finally:
        server.stop(GRACE_S)


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port
