"""What a search leaves behind: no Ray session folder under the temp dir, no Ray process."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.conftest import ConfigWriter, hpsearch_cli

pytestmark = pytest.mark.process


def test_a_finished_search_removes_its_ray_session_folder(
    write_config: ConfigWriter, project: Path
) -> None:
    path = write_config({"study": {"n_trials": 2}})
    # A temp root of its own (short: Ray's sockets live under it), so that other
    # tests' sessions do not count.
    root = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))
    try:
        result = hpsearch_cli("run", str(path), env={**os.environ, "RAY_TMPDIR": str(root)})
        assert result.returncode == 0, result.stderr[-3000:]
        ray_root = root / "ray"
        assert ray_root.is_dir()  # Ray did run under it
        assert not list(ray_root.glob("session_2*"))
        assert not (ray_root / "session_latest").exists()
        # Ray's processes of that session are gone with it.
        leftover = subprocess.run(
            ["pgrep", "-f", str(root)], capture_output=True, text=True, check=False
        )
        assert leftover.stdout.strip() == ""
    finally:
        shutil.rmtree(root, ignore_errors=True)
