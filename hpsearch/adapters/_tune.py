"""Ray Tune function trainables, unchanged: ``train: {tune: mymod:train_fn}``.

A Ray Tune user's ``def train_fn(config)`` (or a ``tune.with_parameters(...)``
wrapper of one) reports with ``tune.report(metrics, checkpoint=...)`` and resumes
from ``tune.get_checkpoint()``. hpsearch runs it in a trial's worker, with its
parameters as ``config`` (dotted names nested again: ``model.lr`` is
``config["model"]["lr"]``):

* each ``tune.report(metrics)`` is a hpsearch report (``ctx.report``) of its
  numeric metrics, at a step counting the reports (or its ``training_iteration``
  / ``step`` / ``epoch`` metric); the pruner's verdict stops the trial there, as
  a Tune scheduler would;
* a reported ``Checkpoint`` is copied into the trial's checkpoint folder
  (``ctx.checkpoint_dir``, kept for its re-run when it is interrupted), and
  ``tune.get_checkpoint()`` returns that folder's checkpoint, or ``None``.

Both calls reach Ray's training session whatever way they were imported
(``tune.report``, ``ray.train.report``, ``from ray.tune import report``): while the
function runs, the session answers them for hpsearch; what hpsearch's own worker
reports through it passes through unchanged.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hpsearch.trial.context import TrialContext, TrialPruned
from hpsearch.trial.protocol import EVENT_KEY

_STEP_KEYS = ("training_iteration", "step", "epoch")
"""Metrics a report's step is read from, in order, when the function reports one."""


def tune_train(
    function: Callable[..., Any],
) -> Callable[[dict[str, Any], TrialContext], dict[str, float] | None]:
    """The ``train(params, ctx)`` that runs a Tune function trainable for one trial (the
    numbers of a dict it returns, as Tune takes it, are its final metrics)."""

    def train(params: dict[str, Any], ctx: TrialContext) -> dict[str, float] | None:
        with _answering(ctx):
            returned = function(nested(params))
        if not isinstance(returned, Mapping):
            return None
        return {k: float(v) for k, v in returned.items() if _is_number(v)}

    return train


def nested(params: Mapping[str, Any]) -> dict[str, Any]:
    """Dotted parameter names as the nested config a Tune ``param_space`` gives."""
    config: dict[str, Any] = {}
    for name, value in params.items():
        *parents, leaf = name.split(".")
        level = config
        for parent in parents:
            level = level.setdefault(parent, {})
        level[leaf] = value
    return config


class _Session:
    """Ray's training session, with the function's reports and checkpoints answered by
    hpsearch (anything else, and hpsearch's own events, go to Ray's)."""

    def __init__(self, real: Any, ctx: TrialContext) -> None:
        self._real = real
        self._ctx = ctx
        self._reports = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    @property
    def loaded_checkpoint(self) -> Any:
        from ray.tune import Checkpoint

        folder = Path(self._ctx.checkpoint_dir)
        if folder.is_dir() and any(folder.iterdir()):
            return Checkpoint.from_directory(str(folder))
        return None

    def report(self, metrics: dict[str, Any], *, checkpoint: Any = None) -> None:
        if EVENT_KEY in metrics:  # hpsearch's own worker, reporting an event to Tune
            self._real.report(metrics, checkpoint=checkpoint)
            return
        if checkpoint is not None:
            _copy_into(Path(checkpoint.path), Path(self._ctx.checkpoint_dir))
        step = next((int(metrics[k]) for k in _STEP_KEYS if _is_number(metrics.get(k))), None)
        values = {k: float(v) for k, v in metrics.items() if _is_number(v)}
        self._ctx.report(self._reports if step is None else step, **values)
        self._reports += 1
        if self._ctx.should_prune():
            raise TrialPruned(f"pruned after report {self._reports}")


@contextmanager
def _answering(ctx: TrialContext) -> Iterator[None]:
    from ray.train._internal import session

    real = session.get_session()
    # The module's global, which every report and get_checkpoint reads at call time.
    vars(session)["_session"] = _Session(real, ctx)
    try:
        yield
    finally:
        vars(session)["_session"] = real


def _copy_into(source: Path, folder: Path) -> None:
    """Replace the folder's checkpoint with ``source``'s files, whole or not at all."""
    if source.resolve() == folder.resolve():
        return
    staging = folder.with_name(folder.name + ".incoming")
    previous = folder.with_name(folder.name + ".previous")
    for leftover in (staging, previous):
        shutil.rmtree(leftover, ignore_errors=True)
    shutil.copytree(source, staging)
    if folder.exists():
        folder.rename(previous)
    staging.rename(folder)
    shutil.rmtree(previous, ignore_errors=True)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
