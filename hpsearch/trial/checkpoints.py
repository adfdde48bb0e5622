"""A trial's checkpoints: one folder per trial, its latest checkpoint kept, written atomically.

The folder belongs to the trial's configuration, not to one attempt: a trial
interrupted (Ctrl-C, a killed driver, a lost node) is queued again, and its
re-run gets the same folder, so it resumes from the last checkpoint (see
:func:`trial_folder`). A checkpoint is ``step-<N>/`` in the folder, holding
``state.pt`` (an object saved with ``torch.save``) or ``files/`` (a file or
folder the training function wrote, copied); ``LATEST`` names the newest. Each
is complete before ``LATEST`` points to it, so a process killed mid-save leaves
the previous checkpoint in place.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LATEST = "LATEST"
"""The file naming the newest checkpoint of a folder."""
_STATE = "state.pt"
_FILES = "files"
_STEP_DIR = re.compile(r"^step-(\d+)$")


@dataclass(frozen=True)
class Checkpoint:
    """One saved checkpoint.

    Attributes:
        step: the step it was saved at (resume from the step after it).
        path: the saved object's file (``state.pt``), or the copied file or folder.
    """

    step: int
    path: Path

    def load(self) -> Any:
        """The saved object (``torch.load``), or :attr:`path` for a saved file or folder."""
        if self.path.name != _STATE:
            return self.path
        import torch

        # The trial's own file, written by torch.save in this folder: trusted.
        return torch.load(self.path, map_location="cpu", weights_only=False)


def study_folder(root: str, study: str) -> str:
    """A study's folder under ``root`` (its checkpoints, or its trials' own folders), absolute:
    workers run elsewhere."""
    return str(Path(root, re.sub(r"[^\w.-]", "_", study)).resolve())


def trial_folder(root: str, study: str, number: int) -> str:
    """Trial ``number``'s folder under ``root``, absolute: ``<root>/<study>/trial-<number>``.

    Under ``execution.checkpoint_dir`` it holds the trial's checkpoints, and the
    re-runs of an interrupted trial use the first run's (the ledger passes it on);
    under ``execution.trials_dir`` it is a command's ``HPSEARCH_TRIAL_DIR``.
    """
    return str(Path(study_folder(root, study), f"trial-{number}"))


class CheckpointFolder:
    """Saves and finds a trial's checkpoints in its folder (created on first save)."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.path = Path(folder)

    def save(self, obj_or_path: Any, step: int) -> Checkpoint:
        """Save ``obj_or_path`` as the checkpoint of ``step``; earlier ones are removed.

        Args:
            obj_or_path: an existing file or folder (copied), or any object
                ``torch.save`` can write (a state dict, a dict of them).
            step: the step it belongs to (an epoch).
        """
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"save_checkpoint: step must be a non-negative integer, got {step!r}")
        self.path.mkdir(parents=True, exist_ok=True)
        name = f"step-{step}"
        partial = self.path / f".partial-{name}-{os.getpid()}"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        if isinstance(obj_or_path, str | os.PathLike) and Path(obj_or_path).exists():
            source = Path(obj_or_path)
            target = partial / _FILES / source.name
            target.parent.mkdir()
            if source.is_dir():
                shutil.copytree(source, target)
            else:
                shutil.copy2(source, target)
            saved = Path(_FILES) / source.name
        else:
            import torch

            torch.save(obj_or_path, partial / _STATE)
            saved = Path(_STATE)
        final = self.path / name
        if final.exists():
            shutil.rmtree(final)
        partial.rename(final)
        pointer = self.path / f".{LATEST}-{os.getpid()}"
        pointer.write_text(str(Path(name) / saved), encoding="utf-8")
        os.replace(pointer, self.path / LATEST)  # atomic: the old checkpoint until here
        for entry in self.path.iterdir():
            if entry.name not in (name, LATEST) and entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
        return Checkpoint(step, final / saved)

    def latest(self) -> Checkpoint | None:
        """The newest complete checkpoint, or ``None`` when the trial saved none."""
        try:
            relative = (self.path / LATEST).read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return None
        match = _STEP_DIR.match(Path(relative).parts[0]) if relative else None
        path = self.path / relative
        if match is None or not path.exists():
            return None
        return Checkpoint(int(match.group(1)), path)
