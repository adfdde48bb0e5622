"""The search's tracker, built from ``tracking``: opened once its store and the study's agree,
and, at the end, the writes a tracking server's outage kept landed or said.

The study and the MLflow store are two records of one search. Either one's file
deleted or replaced leaves the other pointing at results that are gone; a search
refuses to go on silently beside them (:class:`Afresh` says what the user allowed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hpsearch import attrs, interrupts
from hpsearch.config import RunConfig
from hpsearch.errors import ConfigError, HpsearchError
from hpsearch.lifecycle._tracking_outage import outage_line
from hpsearch.study import StudyHandle
from hpsearch.tracking import (
    OutageTracker,
    ProcessTracker,
    Tracker,
    check_store_uri,
    use_quick_http_settings,
)


@dataclass(frozen=True)
class Afresh:
    """What a run may start afresh, where it would otherwise refuse to leave records behind.

    Attributes:
        mlflow_history: a new MLflow store, the study's runs' one gone (``--new-mlflow-history``).
        study: a new study beside the MLflow runs of an earlier one's trials (``--new-study``).
    """

    mlflow_history: bool = False
    study: bool = False


def open_tracker(
    config: RunConfig, handle: StudyHandle, say: Callable[[str], None], afresh: Afresh
) -> Tracker:
    """MLflow, as ``tracking`` says (a server's writes kept through an outage), once its
    store and the study's are known to agree, or ``afresh`` lets one start anew.

    Raises:
        ConfigError: one store's file is gone while the other holds its records.
    """
    tracking = config.tracking
    if tracking.server:
        use_quick_http_settings()  # a server out of reach is known in seconds
    if not afresh.mlflow_history:
        _check_mlflow_store(config, handle)
    try:
        tracker = _store_tracker(config)
    except ConfigError:
        raise
    except HpsearchError as exc:  # the store cannot be used: the line names the config too
        raise HpsearchError(f"{config.source}: {exc}") from None
    if tracking.server:
        tracker = OutageTracker(tracker, tracking.uri, say)
    if not afresh.study:
        try:
            _check_study_store(config, handle, tracker)
        except BaseException:
            close_tracker(tracker)
            raise
    return tracker


def _store_tracker(config: RunConfig) -> Tracker:
    """The tracker of ``tracking``'s store: written by a process of its own, or here."""
    tracking = config.tracking
    check_store_uri(tracking.uri, config.source)
    if tracking.writes_in_process(config.study.n_trials):
        return ProcessTracker(
            tracking.uri, config.experiment_name, tracking.new_experiment_artifacts
        )
    # MLflow is imported here, where a search opens its records (while its Ray starts).
    from hpsearch.tracking import MlflowTracker

    return MlflowTracker(tracking.uri, config.experiment_name, tracking.new_experiment_artifacts)


def _check_study_store(config: RunConfig, handle: StudyHandle, tracker: Tracker) -> None:
    """Refuse to start a study afresh silently beside the MLflow runs of its earlier trials
    (its store's file deleted or replaced: those trials' results are gone with it).

    A driver started beside this one on the same fresh stores may ask the study's first
    trial and open its run between the two reads: a trial's run is opened after the
    trial is asked, so the study read again then holds that trial, and nothing is gone.
    """
    if handle.study.get_trials(deepcopy=False):
        return
    try:
        earlier = tracker.runs_of_trial(handle.name, 0)
    except Exception:  # a tracking server out of reach: the outage machinery says so
        return
    if earlier and not handle.study.get_trials(deepcopy=False):
        raise ConfigError(
            config.source,
            "study.storage",
            f"study '{handle.name}' has no trials in {config.study.storage}, but the MLflow "
            f"store {config.tracking.uri} holds runs of its trials from an earlier search "
            "(the study's file deleted or replaced?)",
            "restore the study's file, or run again with --new-study to start the study "
            "afresh beside those runs",
        )


def _check_mlflow_store(config: RunConfig, handle: StudyHandle) -> None:
    """Refuse to start a new MLflow store silently under a study whose runs were in the old one."""
    uri = config.tracking.uri
    store = Path(uri.removeprefix("sqlite:///"))
    if not uri.startswith("sqlite:///") or store.exists():
        return
    recorded = sum(
        attrs.MLFLOW_RUN in t.user_attrs for t in handle.study.get_trials(deepcopy=False)
    )
    # A driver started beside this one makes the store before it records a run there.
    if recorded and not store.exists():
        raise ConfigError(
            config.source,
            "tracking.uri",
            f"the MLflow store {uri} is gone, but study '{handle.name}' has {recorded} "
            "trial(s) recorded in it",
            "restore the file, or run again with --new-mlflow-history to go on with a new "
            "MLflow history (the old trials' run ids will point nowhere)",
        )


def close_tracker(tracker: Tracker) -> None:
    """End what a tracker started: a writer process, once every write is written."""
    if isinstance(tracker, ProcessTracker):
        tracker.close()


LAST_TRY_S = 3.0
"""How long a stopped search tries its kept tracking writes once more before it exits."""


def land_tracking_writes(config: RunConfig, tracker: Tracker, say: Callable[[str], None]) -> None:
    """At the search's end, the writes its tracking server's outage kept: landed, or said.

    An ended search waits for the server up to ``tracking.outage_limit``; one that was
    stopped (Ctrl-C, the limit) tries for a few seconds. What is left unwritten is
    said; the runs it leaves RUNNING are ended KILLED by the next ``hpsearch run``.
    """
    close_tracker(tracker)  # a writer process: every write written, and it ends
    if not isinstance(tracker, OutageTracker):
        return
    down = tracker.down_for()
    if down is None:
        return
    limit = config.tracking.outage_limit
    stopped = interrupts.interrupted() or interrupts.stopped_for() is not None
    if not tracker.drain(LAST_TRY_S if stopped else max(LAST_TRY_S, limit - down)):
        return
    left = tracker.give_up()
    say(
        f"{left} MLflow write(s) of this search could not be written (the tracking server "
        f"{tracker.uri} is out of reach); the trials are in the study, and the next "
        "hpsearch run records their runs from it"
    )
    if not stopped:
        interrupts.stop_for(
            outage_line(config.source, tracker.uri, tracker.down_for() or down, limit),
            signal_now=False,
        )
