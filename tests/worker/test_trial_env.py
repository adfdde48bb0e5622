"""A trial's code finds its own folder in the environment, where frameworks that write to a
default folder of the working directory (PyTorch Lightning's ``lightning_logs``) put
their output; the user's own setting wins, and the environment is put back after."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hpsearch.trial.protocol import Assignment, Outcome
from hpsearch.worker import execute_trial
from tests.harness import make_launch

HERE = Assignment(cpus=1.0, gpu_ids=(), node_id="node", pid=7)
NAMES = ("HPSEARCH_TRIAL_DIR", "PL_TRAINER_DEFAULT_ROOT_DIR")


def _seen(tmp_path: Path, number: int) -> dict[str, str | None]:
    seen = tmp_path / f"seen-{number}.json"
    launch = make_launch(
        {"seen": str(seen)},
        train="tests.train_functions:writes_framework_output",
        number=number,
        trial_dir=str(tmp_path / f"trial-{number}"),
    )
    assert execute_trial(launch, assigned=HERE, send=lambda _: None).outcome is Outcome.COMPLETE
    found: dict[str, str | None] = json.loads(seen.read_text())
    return found


def test_each_trial_of_a_reused_worker_writes_to_its_own_folder(tmp_path: Path) -> None:
    for name in NAMES:
        assert name not in os.environ, name
    # Two trials in one worker, one after the other, as Ray reuses it.
    assert _seen(tmp_path, 1) == dict.fromkeys(NAMES, str(tmp_path / "trial-1"))
    assert _seen(tmp_path, 2) == dict.fromkeys(NAMES, str(tmp_path / "trial-2"))
    for name in NAMES:
        assert name not in os.environ, name  # put back as it was


def test_a_default_root_dir_the_user_set_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PL_TRAINER_DEFAULT_ROOT_DIR", "/data/runs")
    assert _seen(tmp_path, 1) == {
        "HPSEARCH_TRIAL_DIR": str(tmp_path / "trial-1"),
        "PL_TRAINER_DEFAULT_ROOT_DIR": "/data/runs",
    }
    assert os.environ["PL_TRAINER_DEFAULT_ROOT_DIR"] == "/data/runs"
