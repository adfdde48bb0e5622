"""The seam between the driver and a trial's worker: what the driver sends (``protocol``:
the launch and its settings, ``script``: a command's settings, ``other_tools``: an Optuna
objective's or a Tune trainable's), what the user's code receives (``context``: the
trial's context), and what both sides derive (``seeds``, ``checkpoints``, ``death``:
what a worker that died hard left behind, with ``_reaper``, its parent process).

What runs in the worker is :mod:`hpsearch.worker`; the user's code as it is called,
:mod:`hpsearch.adapters`. The modules are imported by name (a worker and the config
each import only what they need).
"""

__all__ = [
    "checkpoints",
    "context",
    "death",
    "members",
    "other_tools",
    "protocol",
    "script",
    "seeds",
    "text_metrics",
    "tune_trainable",
]
"""Its public modules (imported by name: ``from hpsearch.trial import protocol`` loads that
one alone)."""
