"""A trial's checkpoints: the latest kept, written whole, found again by the context."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
import torch

from hpsearch import TrialContext
from hpsearch.trial.checkpoints import LATEST, CheckpointFolder


def test_the_latest_checkpoint_is_kept_and_loaded(tmp_path: Path) -> None:
    folder = CheckpointFolder(tmp_path / "trial-3")
    assert folder.latest() is None
    for step in range(3):
        folder.save({"weights": torch.full((2,), float(step)), "epoch": step}, step)
    latest = folder.latest()
    assert latest is not None
    assert latest.step == 2
    state = latest.load()
    assert state["epoch"] == 2
    assert state["weights"].tolist() == [2.0, 2.0]
    assert sorted(p.name for p in folder.path.iterdir()) == [LATEST, "step-2"]


def test_a_file_or_folder_is_copied_as_the_checkpoint(tmp_path: Path) -> None:
    written = tmp_path / "model"
    written.mkdir()
    (written / "weights.bin").write_bytes(b"abc")
    ctx = TrialContext.local(checkpoint_dir=str(tmp_path / "ckpt"))
    ctx.save_checkpoint(written, 5)
    (written / "weights.bin").write_bytes(b"changed")  # the copy is what was saved
    again = TrialContext.local(checkpoint_dir=str(tmp_path / "ckpt")).load_checkpoint()
    assert again is not None
    assert again.step == 5
    assert (again.load() / "weights.bin").read_bytes() == b"abc"


def test_a_save_killed_midway_leaves_the_previous_checkpoint(tmp_path: Path) -> None:
    folder = CheckpointFolder(tmp_path)
    folder.save({"epoch": 1}, 1)
    # What a process killed while writing step 2 leaves: a partial folder, no pointer to it.
    (tmp_path / ".partial-step-2-999").mkdir()
    (tmp_path / ".partial-step-2-999" / "state.pt").write_bytes(b"trunc")
    latest = folder.latest()
    assert latest is not None
    assert latest.step == 1
    assert latest.load() == {"epoch": 1}


def test_steps_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="non-negative integer"):
        CheckpointFolder(tmp_path).save({}, -1)


def test_without_a_folder_the_context_uses_a_temporary_one() -> None:
    ctx = TrialContext.local(seed=7)
    assert ctx.seed == 7
    ctx.save_checkpoint({"a": 1}, 0)
    assert ctx.checkpoint_dir.is_dir()
    found = ctx.load_checkpoint()
    assert found is not None
    assert found.load() == {"a": 1}
    folder = ctx.checkpoint_dir
    del ctx, found
    gc.collect()
    assert not folder.exists()  # removed with the context
