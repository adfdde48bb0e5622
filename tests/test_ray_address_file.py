"""The suite leaves ``ray_current_cluster`` naming a cluster that answers, or none."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.conftest import RayAddressFile


def _dead_address() -> str:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
    return f"127.0.0.1:{port}"  # closed: nothing accepts there now


@pytest.fixture
def address_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))  # Ray's own place for the file, moved
    (tmp_path / "ray").mkdir()
    return tmp_path / "ray" / "ray_current_cluster"


def test_a_head_another_test_started_and_stopped_meanwhile_is_not_put_back(
    address_file: Path,
) -> None:
    address_file.write_text(_dead_address())  # another worker's head, killed since
    kept = RayAddressFile()
    address_file.write_text(_dead_address())  # this test's head, killed before restore
    kept.restore()
    assert not address_file.exists()


def test_a_users_running_cluster_is_put_back_and_a_live_one_started_since_is_kept(
    address_file: Path,
) -> None:
    with (
        socket.create_server(("127.0.0.1", 0)) as users,
        socket.create_server(("127.0.0.1", 0)) as others,
    ):
        user = f"127.0.0.1:{users.getsockname()[1]}"
        address_file.write_text(user)
        kept = RayAddressFile()
        address_file.write_text(_dead_address())
        kept.restore()
        assert address_file.read_text() == user
        other = f"127.0.0.1:{others.getsockname()[1]}"
        address_file.write_text(other)  # another worker's head, still running
        kept.restore()
        assert address_file.read_text() == other
