"""The environment a trial's code runs in: its own folder, where frameworks put their output.

A trial's worker stays in the folder hpsearch ran from (the user's relative paths, a
``./data`` say, open there), so code that writes its output to a default folder of
the working directory shares it with every other trial running at once. PyTorch
Lightning's ``lightning_logs/version_N`` is the common case: the version is the next
free number when the logger first writes, and two trials starting together took the
same one (16 trials, 8 at once: 15 folders, one holding two trials' checkpoints, with
one ``hparams.yaml`` left of the two). Ray Tune avoids it by running each trial in
its own folder; hpsearch points the defaults there instead:

* ``HPSEARCH_TRIAL_DIR``: the trial's own folder (a command's script already had it),
  for any code that wants a folder of its own;
* ``PL_TRAINER_DEFAULT_ROOT_DIR``: Lightning's ``Trainer(default_root_dir=...)``
  default (Lightning reads ``PL_TRAINER_<ARG>`` for each argument not given), so its
  logs and checkpoints go to the trial's folder. A ``default_root_dir`` the code
  passes, or one set in the environment, wins.

Both are put back as they were when the trial ends (a reused worker's next trial has
its own).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

TRIAL_DIR_ENV = "HPSEARCH_TRIAL_DIR"
"""The trial's own folder (``execution.trials_dir``/study/trial-N)."""

DEFAULTS_ENV = ("PL_TRAINER_DEFAULT_ROOT_DIR",)
"""Frameworks' defaults for their output folder, pointed at the trial's folder."""


@contextmanager
def trial_environment(trial_dir: str) -> Iterator[None]:
    """While a trial's code runs, its folder ``trial_dir`` is :data:`TRIAL_DIR_ENV` and the
    output folder of :data:`DEFAULTS_ENV` (each where the user set none); afterwards the
    environment is as it was. An empty ``trial_dir`` (a trial run by hand) changes nothing.
    """
    if not trial_dir:
        yield
        return
    kept = {name: os.environ.get(name) for name in (TRIAL_DIR_ENV, *DEFAULTS_ENV)}
    os.environ[TRIAL_DIR_ENV] = trial_dir
    for name in DEFAULTS_ENV:
        if kept[name] is None:
            os.environ[name] = trial_dir
    try:
        yield
    finally:
        for name, value in kept.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
