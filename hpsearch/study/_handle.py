"""The study a search writes to: Optuna's ask and queue, its lock, and the driver's heartbeat."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import datetime
from typing import Any

import optuna
from optuna.exceptions import ExperimentalWarning, UpdateFinishedTrialError
from optuna.storages import BaseStorage, RDBStorage
from optuna.storages._heartbeat import is_heartbeat_enabled
from optuna.trial import FrozenTrial, TrialState

from hpsearch import attrs
from hpsearch._compat import new_optuna_trial
from hpsearch._locks import store_lock
from hpsearch.study._attrs import set_user_attr_late
from hpsearch.study._heartbeat import (
    GRACE_PERIOD_S,
    HEARTBEAT_INTERVAL_S,
    INTERRUPTED,
    LOST_REASON,
    queue_again,
    unqueued_interruptions,
)


class StudyHandle:
    """The study a search writes to, with heartbeat bookkeeping for the driver's trials."""

    def __init__(
        self,
        study: optuna.Study,
        storage: BaseStorage,
        stale: list[FrozenTrial],
        heartbeat_interval_s: int = HEARTBEAT_INTERVAL_S,
        grace_period_s: int = GRACE_PERIOD_S,
        *,
        notes: tuple[str, ...] = (),
    ) -> None:
        self.study = study
        self.notes = notes
        """What the driver should say as it starts (a space that differs from the study's)."""
        self._storage = storage
        self._stale = stale
        self.heartbeat_interval_s = heartbeat_interval_s
        self.grace_period_s = grace_period_s
        self._study_id = storage.get_study_id_from_name(study.study_name)
        self._trial_ids: dict[int, int] = {}

    @property
    def name(self) -> str:
        """The study name."""
        return self.study.study_name

    def set_late(self, trial: FrozenTrial, key: str, value: Any) -> None:
        """A user attribute of ``trial``, set also where it has ended (see
        :func:`~hpsearch.study.set_user_attr_late`)."""
        set_user_attr_late(self._storage, trial, key, value)

    def trial_count(self) -> int | None:
        """How many trials the study holds, in one ``COUNT`` statement where its storage is
        Optuna's RDB storage (``None`` elsewhere: in memory, the driver's count is the
        study's)."""
        if not isinstance(self._storage, RDBStorage):
            return None
        import sqlalchemy
        from optuna.storages._rdb import models

        trials = models.TrialModel
        count = sqlalchemy.select(sqlalchemy.func.count(trials.trial_id)).where(
            trials.study_id == self._study_id
        )
        return int(_read_one(self._storage, count) or 0)

    def exclusive(self) -> AbstractContextManager[None]:
        """A lock the drivers sharing this study hold to count its trials and ask for one.

        A file lock beside a SQLite database, an advisory lock in PostgreSQL; none for
        other storages (in memory: one driver).
        """
        if not isinstance(self._storage, RDBStorage):
            return nullcontext()
        return store_lock(self._storage.url, self._storage.engine)

    def stamp_alive(self, trials: Sequence[optuna.Trial]) -> None:
        """Record that the driver still runs ``trials`` (Optuna's heartbeat; a database's)."""
        if not isinstance(self._storage, RDBStorage):
            return
        for trial in trials:
            self._storage.record_heartbeat(self._trial_id(trial.number))

    def _trial_id(self, number: int) -> int:
        """The storage's id of trial ``number`` (its public lookup, kept once asked)."""
        if number not in self._trial_ids:
            self._trial_ids[number] = self._storage.get_trial_id_from_study_id_trial_number(
                self._study_id, number
            )
        return self._trial_ids[number]

    def ask(
        self, distributions: dict[str, optuna.distributions.BaseDistribution] | None = None
    ) -> optuna.Trial:
        """A new trial, stamped alive at once.

        Args:
            distributions: parameters to sample now; ``None``: the caller suggests them
                (define-by-run, as a conditional space needs).
        """
        if distributions is None and not self._waiting():
            # No trial waits in the queue: one created here, as Study.ask would, without
            # its scan of the queue through every running trial (see new_optuna_trial).
            trial, trial_id = new_optuna_trial(self.study)
            self._trial_ids[trial.number] = trial_id  # for its heartbeat: no lookup
            self._first_stamp(trial_id)
            return trial
        else:
            with warnings.catch_warnings():
                # Optuna warns that heartbeats are meant for Study.optimize; this driver
                # keeps them for its ask/tell trials itself (see stamp_alive).
                warnings.filterwarnings("ignore", message="Heartbeat of storage")
                trial = self.study.ask(fixed_distributions=distributions)
        self.stamp_alive([trial])
        return trial

    def _first_stamp(self, trial_id: int) -> None:
        """Stamp a trial just created here, which has no heartbeat row yet, in one
        statement: Optuna's ``record_heartbeat`` first looks for the row (the first stamp
        is one insert, as Optuna makes it: the row's time is the database's)."""
        # Only a database's trials are created here (any other storage may hold waiting
        # trials: asked through Study.ask).
        assert isinstance(self._storage, RDBStorage)
        import sqlalchemy
        from optuna.storages._rdb import models

        insert = sqlalchemy.insert(models.TrialHeartbeatModel).values(trial_id=trial_id)
        with self._storage.engine.begin() as connection:
            connection.execute(insert)

    def _waiting(self) -> bool:
        """Whether a trial may wait in the study's queue (asked of the database: the first
        waiting trial's id, Optuna's table read as its own model maps it; a storage of
        another kind: always)."""
        if not isinstance(self._storage, RDBStorage):
            return True
        # Here, not at the top: importing optuna.storages loads no SQLAlchemy.
        import sqlalchemy
        from optuna.storages._rdb import models

        trials = models.TrialModel
        first = (
            sqlalchemy.select(trials.trial_id)
            .where(trials.study_id == self._study_id, trials.state == TrialState.WAITING)
            .limit(1)
        )
        return _read_one(self._storage, first) is not None

    @contextmanager
    def fixed(self, params: Mapping[str, Any]) -> Iterator[None]:
        """Trials asked in this block take ``params`` as they are; the sampler chooses the rest.

        Optuna's ``PartialFixedSampler`` around the study's own sampler: a fused
        group's members share their shapes and vary what the sampler varies.
        """
        if not params:
            yield
            return
        own = self.study.sampler
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExperimentalWarning)
            self.study.sampler = optuna.samplers.PartialFixedSampler(dict(params), own)
        try:
            yield
        finally:
            self.study.sampler = own

    def reclaim_stale(self, now: datetime | None = None) -> list[FrozenTrial]:
        """Fail trials whose driver stopped stamping them; Optuna queues each again. Queue
        again, too, interrupted trials whose driver failed to (:func:`unqueued_interruptions`).

        Args:
            now: the time, as Optuna stamps a trial's end (default: now).

        Returns:
            The trials failed now (their MLflow runs still need ending).
        """
        self._stale.clear()
        storage = self.study._storage
        if is_heartbeat_enabled(storage):
            self._stamp_unstamped()
            # The reason goes on while they are RUNNING: a finished trial cannot change.
            for trial_id in storage._get_stale_trial_ids(self._study_id):  # type: ignore[attr-defined]
                with contextlib.suppress(UpdateFinishedTrialError):  # another driver's now
                    storage.set_trial_user_attr(trial_id, attrs.OUTCOME, INTERRUPTED)
                    storage.set_trial_user_attr(trial_id, attrs.ERROR, LOST_REASON)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExperimentalWarning)
            optuna.storages.fail_stale_trials(self.study)
        # An interrupted trial whose driver failed before queueing its re-run: queued now.
        trials = self.study.get_trials(deepcopy=False)
        now = datetime.now() if now is None else now
        for trial in unqueued_interruptions(trials, now, self.grace_period_s):
            queue_again(self.study, trial)  # its MLflow run: ended as a finished trial's
        return list(self._stale)

    def _stamp_unstamped(self) -> None:
        """Stamp the running trials no driver ever stamped, so that they too go stale.

        A driver stamps a trial just after Optuna creates it. One that died between the
        two (killed, or its disk full) left a running trial with no heartbeat at all,
        which Optuna never judges stale: the next search would wait for it forever.
        Stamped now, it is reclaimed a grace period later unless its driver lives and
        stamps it again.
        """
        if not isinstance(self._storage, RDBStorage):
            return
        # Here, not at the top: importing optuna.storages loads no SQLAlchemy.
        import sqlalchemy
        from optuna.storages._rdb import models

        trials, beats = models.TrialModel, models.TrialHeartbeatModel
        unstamped = sqlalchemy.select(trials.trial_id).where(
            trials.study_id == self._study_id,
            trials.state == TrialState.RUNNING,
            ~sqlalchemy.exists().where(beats.trial_id == trials.trial_id),
        )
        with self._storage.engine.connect() as connection:
            found = [row[0] for row in connection.execute(unstamped)]
        for trial_id in found:
            self._storage.record_heartbeat(trial_id)

    def retry_later(
        self, number: int, params: dict[str, Any], kept: dict[str, Any] | None = None
    ) -> None:
        """Enqueue the parameters of interrupted trial ``number`` to run again.

        Args:
            number: the interrupted trial.
            params: its sampled parameters.
            kept: user attrs the re-run inherits (its seed, its checkpoint folder).
        """
        self.study.enqueue_trial(params, user_attrs={**(kept or {}), attrs.RETRY_OF: number})


def _read_one(storage: RDBStorage, query: Any) -> Any:
    """The first column of ``query``'s first row (``None``: no row), read from ``storage``'s
    database."""
    with storage.engine.connect() as connection:
        if connection.dialect.name == "postgresql":
            # One read needs no transaction: psycopg would send a BEGIN and a
            # ROLLBACK around it, each a round trip of its own, at every trial asked.
            connection.execution_options(isolation_level="AUTOCOMMIT")
        return connection.execute(query).scalar()
