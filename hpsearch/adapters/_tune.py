"""Ray Tune function trainables, unchanged: ``train: {tune: mymod:train_fn}``.

A Ray Tune user's ``def train_fn(config)`` (or a ``tune.with_parameters(...)``
wrapper of one) reports with ``tune.report(metrics, checkpoint=...)`` and resumes
from ``tune.get_checkpoint()``. hpsearch runs it in a trial's worker, with its
parameters as ``config`` (dotted names nested again: ``model.lr`` is
``config["model"]["lr"]``):

* each ``tune.report(metrics)`` is a hpsearch report (``ctx.report``) of its
  numeric metrics (a nested dict's named ``outer/inner``, as Tune names them), at
  a step counting the reports (or its ``training_iteration`` / ``step`` /
  ``epoch`` metric); the pruner's verdict stops the trial there, as a Tune
  scheduler would;
* a reported ``Checkpoint`` is copied into the trial's checkpoint folder
  (``ctx.checkpoint_dir``, kept for its re-run when it is interrupted), and
  ``tune.get_checkpoint()`` returns that folder's checkpoint, or ``None``;
* ``tune.get_context().get_trial_dir()`` is the trial's own folder
  (``HPSEARCH_TRIAL_DIR``), kept after the search as Tune keeps a trial's.

Both calls reach Ray's training session whatever way they were imported
(``tune.report``, ``ray.train.report``, ``from ray.tune import report``): while the
function runs, the session answers them for hpsearch; what hpsearch's own worker
reports through it passes through unchanged.

A class trainable (a ``tune.Trainable`` subclass) runs as Tune runs it: constructed
with the config (its ``setup``), then ``train()`` (its ``step()`` and Tune's
auto-filled metrics) reported once a step until a result says ``done``, ``stop``
is met or the pruner stops it, then ``stop()`` (its ``cleanup``). Its
``save_checkpoint`` writes a checkpoint every ``checkpoint_frequency`` steps and
at its end, and an interrupted trial is restored from its latest
(``load_checkpoint``, its iteration count with it). Its ``logdir`` is in the
trial's own folder.

``stop`` (Tune's ``RunConfig(stop={...})``) ends a trial, completed, at the first
report in which one of its metrics reaches its value, and so does a report that says
``done: True``, as under Tune.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from hpsearch.adapters.forms import is_class_trainable
from hpsearch.trial.context import TrialContext, TrialPruned, as_metric_value
from hpsearch.trial.protocol import EVENT_KEY

_STEP_KEYS = ("training_iteration", "step", "epoch")
"""Metrics a report's step is read from, in order, when the function reports one."""


_PROGRESS_FILE = ".hpsearch_trainable.json"
"""Beside a class trainable's checkpoint: the iteration and time it was saved at."""


_BOOKKEEPING = frozenset({"pid", "timestamp", "config"})
"""What ``Trainable.train()`` adds to a result that says nothing of the training: numbers,
and the trial's config (its parameters, already the run's params, not metrics)."""


class _StopMet(BaseException):
    """``stop`` was met: the trial ends there, completed. A ``BaseException``, as
    ``KeyboardInterrupt`` is, so that a trainable's ``except Exception`` lets it through."""


def tune_train(
    function: Callable[..., Any],
    *,
    stop: Mapping[str, float] | None = None,
    checkpoint_frequency: int = 0,
    trial_dir: str = "",
) -> Callable[[dict[str, Any], TrialContext], dict[str, float] | None]:
    """The ``train(params, ctx)`` that runs a Tune trainable for one trial (the numbers of
    a dict a function returns, as Tune takes it, are its final metrics).

    Args:
        function: a function trainable, or a ``tune.Trainable`` subclass.
        stop: Tune's stopping criteria (``train.tune``'s ``stop``).
        checkpoint_frequency: a class trainable's steps between checkpoints (0: at its end).
        trial_dir: the trial's own folder (a class trainable's ``logdir`` goes there).
    """
    criteria = dict(stop or {})
    run = (
        _class_run(function, criteria, checkpoint_frequency, trial_dir)
        if is_class_trainable(function)
        else function
    )

    def train(params: dict[str, Any], ctx: TrialContext) -> dict[str, float] | None:
        try:
            with _answering(ctx, criteria, trial_dir):
                returned = run(nested(params))
        except _StopMet:
            return None
        if not isinstance(returned, Mapping):
            return None
        return _numbers(_flat(returned))

    return train


def _say_unreported(stop: Mapping[str, float], reported: Mapping[str, Any]) -> None:
    """Warn, as Tune does, of a ``stop`` metric the first report does not hold."""
    for name in stop:
        if name not in reported:
            warnings.warn(
                f"train.stop: '{name}' is not among the metrics the trainable reported "
                f"({', '.join(sorted(reported))}); if it is never reported, the trial runs "
                "until the trainable ends it",
                stacklevel=3,
            )


def _met(stop: Mapping[str, float], metrics: Mapping[str, Any]) -> bool:
    """Whether one of Tune's dict criteria is met: a metric at least its value (Tune's
    ``result[key] >= value``, so ``done: true`` is met by a result that says done)."""
    numbers = _numbers(metrics)
    flags = {k: float(v) for k, v in metrics.items() if isinstance(v, bool)}
    values = {**flags, **numbers}
    return any(k in values and values[k] >= v for k, v in stop.items())


def _class_run(
    cls: type, stop: Mapping[str, float], frequency: int, trial_dir: str
) -> Callable[[dict[str, Any]], None]:
    """A function trainable that runs the class trainable ``cls`` as Tune's loop does."""

    def run(config: dict[str, Any]) -> None:
        from ray import tune

        # Without a trial folder (a trial run by hand), its logdir goes with it.
        with nullcontext(trial_dir) if trial_dir else tempfile.TemporaryDirectory() as folder:
            trainable = _constructed(cls, config, Path(folder))
            saves = _overrides(cls, "save_checkpoint")
            try:
                _restore(trainable, tune.get_checkpoint())
                while True:
                    result = {k: v for k, v in trainable.train().items() if k not in _BOOKKEEPING}
                    ends = bool(result.get("done")) or _met(stop, result)
                    due = bool(result.get("should_checkpoint")) or (
                        frequency > 0 and int(result["training_iteration"]) % frequency == 0
                    )
                    if saves and (due or ends):
                        _report_saved(trainable, result)
                    else:
                        tune.report(result)
                    if ends:
                        return
            finally:
                trainable.stop()

    return run


def _constructed(cls: type, config: dict[str, Any], folder: Path) -> Any:
    """``cls(config)`` (its ``setup``), its ``logdir`` made in ``folder`` (the trial's own),
    not in ``~/ray_results`` where a Trainable outside Tune makes it."""
    import ray.tune.trainable.trainable as module

    folder.mkdir(parents=True, exist_ok=True)
    names = vars(module)  # the module's global, which Trainable._setup_logdir alone reads
    default = names["DEFAULT_STORAGE_PATH"]
    names["DEFAULT_STORAGE_PATH"] = str(folder)
    try:
        return cls(config)
    finally:
        names["DEFAULT_STORAGE_PATH"] = default


def _overrides(cls: type, name: str) -> bool:
    from ray.tune import Trainable

    return getattr(cls, name) is not getattr(Trainable, name)


def _report_saved(trainable: Any, result: dict[str, Any]) -> None:
    """Report ``result`` with a checkpoint the trainable saves now (its progress beside)."""
    from ray import tune

    with tempfile.TemporaryDirectory(prefix="hpsearch-trainable-") as folder:
        trainable.save(folder)
        progress = {k: result.get(k) for k in ("training_iteration", "time_total_s")}
        (Path(folder) / _PROGRESS_FILE).write_text(json.dumps(progress))
        tune.report(result, checkpoint=tune.Checkpoint.from_directory(folder))


def _restore(trainable: Any, checkpoint: Any) -> None:
    """Restore ``trainable`` from its trial's latest checkpoint, its iteration with it."""
    if checkpoint is None:
        return
    import ray.train._internal.checkpoint_manager as manager

    # What Tune hands restore(): the checkpoint and the metrics it was saved with.
    result = vars(manager)["_TrainingResult"]
    progress_file = Path(checkpoint.path) / _PROGRESS_FILE
    progress = json.loads(progress_file.read_text()) if progress_file.exists() else {}
    trainable.restore(result(checkpoint=checkpoint, metrics=progress))


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
    """Ray's training session, with the function's reports, checkpoints and trial folder
    answered by hpsearch (anything else, and hpsearch's own events, go to Ray's)."""

    def __init__(
        self, real: Any, ctx: TrialContext, stop: Mapping[str, float], trial_dir: str
    ) -> None:
        self._real = real
        self._ctx = ctx
        self._stop = stop
        self._trial_dir = trial_dir
        self._reports = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    @property
    def trial_dir(self) -> Any:
        """``tune.get_context().get_trial_dir()``: the trial's own folder, which is kept
        (Ray's, in its session folder, goes when the search ends)."""
        if not self._trial_dir:
            return self._real.trial_dir  # a trial run by hand
        Path(self._trial_dir).mkdir(parents=True, exist_ok=True)
        return self._trial_dir

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
        metrics = _flat(metrics)
        values = _numbers(metrics)
        step = next((int(values[k]) for k in _STEP_KEYS if k in values), None)
        self._ctx.report(self._reports if step is None else step, values)  # "step" a metric too
        self._reports += 1
        # What Tune adds to every result, so a stop on it is no unreported metric.
        reported = {"training_iteration": self._reports, "done": False, **metrics}
        if self._reports == 1:
            _say_unreported(self._stop, reported)
        # A result saying done ends the trial, completed, as Tune ends it (Ray's PBT
        # example loops until it reports done: True).
        if _met(self._stop, reported) or bool(metrics.get("done")):
            raise _StopMet
        if self._ctx.should_prune():
            raise TrialPruned(f"pruned after report {self._reports}")


@contextmanager
def _answering(ctx: TrialContext, stop: Mapping[str, float], trial_dir: str) -> Iterator[None]:
    from ray.train._internal import session

    real = session.get_session()
    # The module's global, which every report and get_checkpoint reads at call time.
    vars(session)["_session"] = _Session(real, ctx, stop, trial_dir)
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


def _flat(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """A result's nested dicts as Tune names their entries: ``{"val": {"acc": 1}}`` is
    ``val/acc``, the name an objective's ``metric`` gives (Tune's ``TuneConfig(metric=...)``)."""
    from ray.tune.utils import flatten_dict

    flat: dict[str, Any] = flatten_dict(dict(metrics), delimiter="/")
    return flat


def _numbers(metrics: Mapping[str, Any]) -> dict[str, float]:
    """A result's numbers, as ``ctx.report`` takes them: NumPy's (``np.float32``, ``np.int64``:
    what a mean or a count of an array is) and a 0-d tensor's included, not a boolean; the
    rest (text, lists) is Tune's to keep, not a metric."""
    values: dict[str, float] = {}
    for name, value in metrics.items():
        with contextlib.suppress(TypeError):
            values[name] = as_metric_value(name, value)
    return values


def asked_resources(trainable: Any) -> dict[str, float]:
    """What a trainable asks of Tune through ``tune.with_resources`` (``CPU``, ``GPU``, ...,
    summed over its bundles); empty: nothing.

    Tune keeps a function's request on the function (``_resources``, private), and a class
    trainable's in its public ``default_resource_request``.
    """
    request = getattr(trainable, "_resources", None)
    if request is None and is_class_trainable(trainable):
        cls: Any = trainable
        try:
            request = cls.default_resource_request({})
        except Exception:  # a request built from config keys: not known here
            request = None
    asked: dict[str, float] = {}
    for bundle in getattr(request, "bundles", None) or []:
        for name, amount in bundle.items():
            asked[name] = asked.get(name, 0.0) + float(amount)
    return asked
