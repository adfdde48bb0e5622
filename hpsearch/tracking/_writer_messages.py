"""The messages between a driver and its tracking writer (:mod:`hpsearch.tracking._writer`).

The driver numbers what it sends (``seq``); the writer handles each in order and
answers with :class:`Acked` once everything up to a number is written, so the
driver knows what to send again to a writer that died (:class:`~hpsearch.tracking.ProcessTracker`).
"""

from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hpsearch.tracking._base import MetricRow


STAND_IN_PREFIX = "writing-"
"""The start of the driver's id of a run the writer creates (its store id comes later)."""


class WriteKind(enum.StrEnum):
    """A :class:`~hpsearch.tracking.Tracker` write, by the method it calls in the writer."""

    START_RUN = "start_run"
    LOG_PARAMS = "log_params"
    LOG_METRICS = "log_metrics"
    LOG_SERIES = "log_series"
    SET_TAGS = "set_tags"
    LOG_TEXT = "log_text"
    LOG_FIGURE = "log_figure"
    LOG_FILE = "log_file"
    END_RUN = "end_run"


class ReadKind(enum.StrEnum):
    """A call whose answer the driver waits for (the writes before it written first)."""

    FLUSH = "flush"
    RUNNING_RUN_IDS = "running_run_ids"
    RUNS_OF_TRIAL = "runs_of_trial"
    END_RUNNING_CHILDREN = "end_running_children"
    END_IF_RUNNING = "end_if_running"


@dataclass(frozen=True)
class Open:
    """The writer's first message: the store and experiment to write to.

    Attributes:
        known: the store's ids of runs a writer before this one created, by stand-in id.
    """

    uri: str
    experiment: str
    artifact_location: str | None
    known: dict[str, str]


@dataclass(frozen=True)
class Write:
    """A write to run ``run_id`` (a stand-in id; the writer knows the store's).

    Attributes:
        again: sent before to a writer that died: it may have been written already.
    """

    seq: int
    kind: WriteKind
    run_id: str
    args: tuple[Any, ...]
    again: bool = False


@dataclass(frozen=True)
class Read:
    """A call the driver waits on; run ids among ``args`` may be stand-ins."""

    seq: int
    kind: ReadKind
    args: tuple[Any, ...]


@dataclass(frozen=True)
class Opened:
    """The writer opened the store: the experiment's id."""

    experiment_id: str


@dataclass(frozen=True)
class Created:
    """The run ``stand_in`` stands for exists in the store as ``run_id``."""

    stand_in: str
    run_id: str


@dataclass(frozen=True)
class Acked:
    """Everything up to ``seq`` is written."""

    seq: int


@dataclass(frozen=True)
class Answer:
    """What read ``seq`` returned."""

    seq: int
    value: Any


@dataclass(frozen=True)
class Failure:
    """What message ``seq`` raised in the writer (``seq`` 0: opening the store).

    Attributes:
        kind: the exception's class name.
        text: its message.
        chain: the messages of what it was raised from (SQLAlchemy's, the database's).
        errno: an ``OSError``'s number in its chain (a full disk), if any.
        user_error: it is hpsearch's one-line error for the user (a store that cannot be used).
    """

    seq: int
    kind: str
    text: str
    chain: tuple[str, ...]
    errno: int | None
    user_error: bool


@dataclass(frozen=True)
class SeriesRow:
    """A :class:`~hpsearch.tracking.MetricRow` as sent to the writer."""

    metrics: dict[str, float]
    step: int
    time: float

    @classmethod
    def of(cls, row: MetricRow) -> SeriesRow:
        """``row``'s values, in a form that pickles."""
        return cls(dict(row.metrics), row.step, row.time)


class TrackingWriteError(Exception):
    """A write or read that failed in the tracking writer, raised in the driver.

    Its ``__cause__`` holds the writer's chain of messages (and an ``OSError`` with
    its number), so that :func:`~hpsearch.storage_faults.storage_fault` recognises a
    full disk or a corrupt store as it does in the driver.
    """

    tracking_store = True
    """The fault is the tracking store's (:func:`~hpsearch.storage_faults.storage_fault`)."""


_MOST_LINKS = 12
"""The most links of an exception's chain a :class:`Failure` carries."""


def failure_of(seq: int, exc: BaseException) -> Failure:
    """``exc``, raised in the writer by message ``seq``, as a message."""
    from hpsearch.errors import HpsearchError
    from hpsearch.storage_faults import exception_chain

    links = list(itertools.islice(exception_chain(exc), _MOST_LINKS))
    number = next((link.errno for link in links if isinstance(link, OSError) and link.errno), None)
    return Failure(
        seq,
        type(exc).__name__,
        str(exc),
        tuple(f"{type(link).__name__}: {link}" for link in links),
        number,
        isinstance(exc, HpsearchError),
    )


def raised(failure: Failure) -> Exception:
    """The exception the driver raises for ``failure``."""
    import os

    from hpsearch.errors import HpsearchError

    if failure.user_error:
        return HpsearchError(failure.text)
    error = TrackingWriteError(f"tracking writer: {failure.kind}: {failure.text}")
    cause: Exception = Exception("\n".join(failure.chain))
    if failure.errno is not None:  # a full disk, known by its number as in the driver
        number = OSError(failure.errno, os.strerror(failure.errno))
        number.__cause__ = cause
        cause = number
    error.__cause__ = cause
    return error
