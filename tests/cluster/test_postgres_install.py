"""The tests' PostgreSQL runs from a checkout that other users cannot enter (root's home)."""

from __future__ import annotations

import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.conftest import reachable_by_others, runnable_by_others


@pytest.fixture
def open_folder() -> Iterator[Path]:
    """A folder under the system's temporary one that every user may enter (pytest's own
    ``tmp_path`` lies under a folder only its user may)."""
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        folder.chmod(0o755)
        yield folder


def test_a_private_checkouts_server_programs_are_copied_where_its_user_can_run_them(
    open_folder: Path,
) -> None:
    home = open_folder / "root"  # as root's home: 0700
    site = home / "hpsearch/.venv/lib/python3.11/site-packages"
    programs = site / "pgserver/pginstall/bin"
    programs.mkdir(parents=True)
    (programs / "initdb").write_text("#!/bin/sh\n")
    (programs / "initdb").chmod(0o755)
    (site / "pgserver/pginstall/share").mkdir()
    (site / "pgserver.libs").mkdir()
    (site / "pgserver.libs/libpq.so.5").write_text("")
    home.chmod(0o700)
    scratch = open_folder / "tmp"
    scratch.mkdir()

    assert not reachable_by_others(programs)
    copied = runnable_by_others(programs, scratch)
    assert copied.is_relative_to(scratch)
    assert reachable_by_others(copied)
    assert (copied / "initdb").stat().st_mode & stat.S_IXOTH
    assert (copied.parent / "share").is_dir()  # the installation, whole
    # The libraries where the programs' run path ($ORIGIN/../../../pgserver.libs) finds them.
    assert (copied / "../../../pgserver.libs/libpq.so.5").resolve().is_file()
    assert runnable_by_others(programs, scratch) == copied  # made once
    assert len(list(scratch.iterdir())) == 1

    home.chmod(0o755)  # a checkout anyone may enter: run where it is
    assert runnable_by_others(programs, scratch) == programs
