"""The watchdog's end: what it removes once the driver's pipe closes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hpsearch._ray_watchdog import CLEAN_END, watch


def _scratch(tmp_path: Path) -> Path:
    folder = tmp_path / "hpsearch-scratch"
    (folder / "exits").mkdir(parents=True)
    (folder / "trial-1.stderr").write_text("a trial's output\n")
    return folder


@pytest.mark.parametrize(("said", "kept"), [(b"", False), (CLEAN_END, True)])
def test_the_scratch_folder_goes_only_with_a_driver_that_did_not_end_its_search(
    tmp_path: Path, said: bytes, kept: bool
) -> None:
    folder = _scratch(tmp_path)
    read_end, write_end = os.pipe()
    if said:
        os.write(write_end, said)  # the driver ended its search: the folder is its own
    os.close(write_end)  # the driver exited (a SIGKILL closes it without a word)
    try:
        watch(read_end, [], folder)
    finally:
        os.close(read_end)
    assert folder.exists() is kept
