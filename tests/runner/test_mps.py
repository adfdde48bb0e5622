"""MPS for a search: started and quit around it where allowed; a stand-in control program
plays NVIDIA's (no GPU here), recording how it was called."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from hpsearch.runner import MPS_ENV, mps_daemon


def _control(folder: Path, *, exit_code: int = 0) -> Path:
    """A stand-in ``nvidia-cuda-mps-control`` that logs its arguments, stdin and pipe folder."""
    script = folder / "nvidia-cuda-mps-control"
    log = folder / "calls.log"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "args=$* pipe=$CUDA_MPS_PIPE_DIRECTORY" >> {log}\n'
        f'if [ "$#" -eq 0 ]; then cat >> {log}; fi\n'
        f"if [ {exit_code} -ne 0 ]; then "
        'echo "An instance of this daemon is already running" >&2; fi\n'
        f"exit {exit_code}\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


@pytest.mark.process
def test_auto_starts_a_daemon_for_the_search_and_quits_it(tmp_path: Path) -> None:
    control = _control(tmp_path)
    with mps_daemon("auto", real_gpus=True, cluster=False, control=str(control)) as state:
        assert state.active
        pipe = os.environ[MPS_ENV[0]]
        assert Path(pipe).is_dir()
        assert pipe in state.detail
    assert MPS_ENV[0] not in os.environ
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert calls == [f"args=-d pipe={pipe}", f"args= pipe={pipe}", "quit"]


@pytest.mark.process
def test_a_daemon_that_fails_to_start_leaves_the_search_without_mps(tmp_path: Path) -> None:
    control = _control(tmp_path, exit_code=1)
    with mps_daemon("auto", real_gpus=True, cluster=False, control=str(control)) as state:
        assert not state.active
        assert MPS_ENV[0] not in os.environ
    assert state.detail == (
        "not started: nvidia-cuda-mps-control -d failed "
        "(An instance of this daemon is already running)"
    )


@pytest.mark.parametrize(
    ("mode", "real_gpus", "cluster", "control", "detail"),
    [
        ("off", True, False, "nvidia-cuda-mps-control", "off (packing.mps)"),
        ("auto", False, False, "nvidia-cuda-mps-control", "no NVIDIA GPU is read here"),
        ("auto", True, True, "nvidia-cuda-mps-control", "runs on a Ray cluster"),
        ("auto", True, False, "no-such-mps-control", "no-such-mps-control is not installed"),
    ],
)
def test_where_mps_is_not_started_the_record_says_why(
    mode: str, real_gpus: bool, cluster: bool, control: str, detail: str
) -> None:
    with mps_daemon(mode, real_gpus=real_gpus, cluster=cluster, control=control) as state:
        assert not state.active
        assert MPS_ENV[0] not in os.environ
    assert detail in state.detail
