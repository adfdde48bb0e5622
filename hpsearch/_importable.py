"""The user's project on ``sys.path``, as ``python -m`` puts the working directory there."""

from __future__ import annotations

import os
import sys


def ensure_importable_from(directory: str) -> None:
    """Put ``directory`` first on ``sys.path``, as ``python -m`` does for the working directory.

    The ``hpsearch`` console script runs with its own folder on ``sys.path``, not
    the user's project, so ``mypkg.train:train`` would not import without this.
    """
    directory = os.path.abspath(directory)
    if directory not in sys.path:
        sys.path.insert(0, directory)
