"""An MPS daemon that dies mid-search: the search goes on, time-sliced, and loses nothing.

No GPU here: the fake NVML driver (tests/telemetry) reports one nearly empty H200, so
packing shares it at once and asks for MPS there; a stand-in control program starts a
"daemon" process that dies a moment later, as a killed one does.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

import hpsearch
from hpsearch.runner import SimulatedRunner
from tests.conftest import ConfigWriter, load_search, merge, mlflow_client
from tests.telemetry.conftest import FakeGpu, FakeNvml


def _control(folder: Path) -> Path:
    folder.mkdir()
    script = folder / "nvidia-cuda-mps-control"
    log = folder / "calls.log"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "args=$* gpu=$CUDA_VISIBLE_DEVICES" >> {log}\n'
        'if [ "$1" = "-d" ]; then\n'
        # The daemon: up long enough to be found, then gone (killed) mid-search.
        '  (sleep 0.1; rm -f "$CUDA_MPS_PIPE_DIRECTORY/control") > /dev/null 2>&1 &\n'
        '  touch "$CUDA_MPS_PIPE_DIRECTORY/control"\n'
        "  exit 0\n"
        "fi\n"
        f"cat >> {log}\n"
        "exit 1\n"  # quit to a daemon that is gone: the program fails
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return log


@pytest.mark.process  # the stand-in control program and its daemon are processes
@pytest.mark.usefixtures("seeded_store")
def test_an_mps_daemon_gone_mid_search_loses_no_completed_trial(
    write_config: ConfigWriter,
    project: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    gpu = FakeGpu(name="NVIDIA H200", utilization=2, used_mib=830.0, total_mib=143771.0)
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml([gpu]))
    log = _control(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_MPS_PIPE_DIRECTORY", raising=False)
    search = merge(
        load_search(util=2, memory=830, trials=16, seconds=8),
        {"execution": {"num_gpus": 1}, "telemetry": {"backend": "nvml", "simulated": None}},
    )

    outcome = hpsearch.run(write_config(search), runner=SimulatedRunner())

    trials = outcome.results.study.trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 16
    assert max(t.user_attrs["hpsearch.gpu"]["trials_sharing_max"] for t in trials) > 1
    printed = capsys.readouterr().out
    assert "MPS on gpu0: active (a control daemon on " in printed
    calls = log.read_text().splitlines()
    assert [c for c in calls if c.startswith("args=")] == ["args=-d gpu=0", "args= gpu=0"]
    assert calls[-1] == "quit"  # told to quit at the end, though gone: the search ended
    assert outcome.mlflow_parent_run_id is not None
    parent = mlflow_client(project).get_run(outcome.mlflow_parent_run_id)
    assert parent.data.tags["hpsearch.mps"].startswith("gpu0: active (a control daemon on ")
    assert parent.info.status == "FINISHED"
