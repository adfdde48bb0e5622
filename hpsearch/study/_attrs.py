"""Several user attributes of one trial written in one transaction.

Optuna writes each ``set_user_attr`` in a transaction of its own: a commit, and
on SQLite a sync to disk, per attribute. The driver records four to six of them
as a trial ends, and is CPU-bound on SQLAlchemy. :func:`set_user_attrs` writes
them in one session where the storage is Optuna's RDB storage (the attribute
writes Optuna itself makes inside ``set_trial_user_attr``, pinned in
``tests/test_compat.py``; on SQLite and PostgreSQL, as one upsert of them all,
whose rows exist only while the trial has not finished: Optuna's check, inside the
one statement), and one by one elsewhere (in memory, a gRPC proxy).
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import BaseStorage, RDBStorage
from optuna.trial import FrozenTrial, TrialState

if TYPE_CHECKING:
    from sqlalchemy.engine import CursorResult


def set_user_attrs(trial: optuna.Trial, values: Mapping[str, Any]) -> None:
    """``trial.set_user_attr(key, value)`` for each of ``values``, in one transaction."""
    if not values:
        return
    backend = _rdb(trial.storage)
    if backend is None:
        for key, value in values.items():
            trial.set_user_attr(key, value)
        return
    _write(backend, trial._trial_id, values, unfinished_only=True)
    trial._cached_frozen_trial.user_attrs.update(values)


def _rdb(storage: BaseStorage) -> RDBStorage | None:
    """Optuna's RDB storage behind ``storage`` (``None``: another storage)."""
    backend = getattr(storage, "_backend", storage)  # inside Optuna's _CachedStorage
    return backend if isinstance(backend, RDBStorage) else None


def _write(
    backend: RDBStorage, trial_id: int, values: Mapping[str, Any], *, unfinished_only: bool
) -> None:
    """``values`` written as the trial's user attributes, in one transaction; with
    ``unfinished_only``, refused as Optuna's setter refuses them (``KeyError``: no such
    trial; ``UpdateFinishedTrialError``: it has finished)."""
    from optuna.storages._rdb import models
    from optuna.storages._rdb.storage import _create_scoped_session

    with _create_scoped_session(backend.scoped_session, True) as session:
        upsert = _upsert(backend.engine.name, len(values), unfinished_only)
        if upsert is None:
            for key, value in values.items():
                if unfinished_only:  # Optuna's own write, which checks the trial
                    backend._set_trial_attr_without_commit(
                        session, models.TrialUserAttributeModel, trial_id, key, value
                    )
                else:
                    _unchecked(session, trial_id, key, value)
            return
        # What Optuna does per attribute (the trial found and checked, then an upsert),
        # as one statement for them all: the check is a condition of the insert.
        # Rows inserted or updated (SQLAlchemy keeps an INSERT's count only when asked).
        params: dict[str, Any] = {"trial_id": trial_id}
        for index, (key, value) in enumerate(values.items()):
            params[f"key_{index}"], params[f"value_{index}"] = key, json.dumps(value)
        written = session.execute(upsert, params, execution_options={"preserve_rowcount": True})
        if cast("CursorResult[Any]", written).rowcount < len(values):
            # Nothing written: the trial is gone or has finished. Optuna's own check
            # says which, with its own error.
            row = models.TrialModel.find_or_raise_by_id(trial_id, session)
            backend.check_trial_is_updatable(trial_id, cast(TrialState, row.state))
            raise UpdateFinishedTrialError(f"trial {trial_id}: its attributes were not written")


def _unchecked(session: Any, trial_id: int, key: str, value: Any) -> None:
    """The attribute's row written, the trial unchecked (a database with no upsert here)."""
    from optuna.storages._rdb import models

    row = (
        session.query(models.TrialUserAttributeModel)
        .filter_by(trial_id=trial_id, key=key)
        .one_or_none()
    )
    if row is None:
        row = models.TrialUserAttributeModel(trial_id=trial_id, key=key)
        session.add(row)
    row.value_json = json.dumps(value)


@functools.cache
def _upsert(dialect: str, count: int, unfinished_only: bool) -> Any | None:
    """One ``INSERT ... ON CONFLICT DO UPDATE`` of ``count`` attributes (parameters
    ``trial_id``, ``key_<i>`` and ``value_<i>``, JSON), as Optuna writes each on SQLite
    and PostgreSQL, with ``unfinished_only`` of no row unless the trial is not finished
    (``None`` on another database: Optuna's own, one by one). Built once per shape:
    building it costs more than running it."""
    import sqlalchemy
    from optuna.storages._rdb import models

    if dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    elif dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert  # type: ignore[assignment]
    else:
        return None
    # Their tables, not the ORM's classes: an ORM statement run with parameters is a
    # bulk insert of objects.
    table, trials = models.TrialUserAttributeModel.__table__, models.TrialModel.__table__
    trial_id = sqlalchemy.bindparam("trial_id", type_=sqlalchemy.Integer)
    unfinished = sqlalchemy.exists().where(
        trials.c.trial_id == trial_id,
        trials.c.state.notin_([s for s in TrialState if s.is_finished()]),
    )
    rows = [
        sqlalchemy.select(
            trial_id,
            sqlalchemy.bindparam(f"key_{index}", type_=sqlalchemy.String),
            sqlalchemy.bindparam(f"value_{index}", type_=sqlalchemy.String),
        ).where(unfinished if unfinished_only else sqlalchemy.true())
        for index in range(count)
    ]
    # SQLite reads "ON CONFLICT" after a SELECT as an upsert only when that SELECT has a
    # WHERE clause: each has one.
    statement = insert(table).from_select(
        ["trial_id", "key", "value_json"],
        rows[0] if len(rows) == 1 else sqlalchemy.union_all(*rows),
    )
    return statement.on_conflict_do_update(
        index_elements=[table.c.trial_id, table.c.key],
        set_={"value_json": statement.excluded.value_json},
    )


def set_user_attr_late(
    storage: BaseStorage, trial: optuna.Trial | FrozenTrial, key: str, value: Any
) -> None:
    """``trial``'s user attribute ``key`` set to ``value``, also once the trial has ended.

    For what is known only later: the MLflow run of a trial opened while the tracking
    server was out of reach, or created by a tracking writer process (often after a
    short trial ended). Optuna refuses to update a finished trial through its
    API; on an RDB storage the attribute is then written directly, elsewhere skipped.
    """
    trial_id = trial._trial_id
    backend = _rdb(storage)
    if backend is None:
        with contextlib.suppress(UpdateFinishedTrialError):  # in memory: no way round it
            storage.set_trial_user_attr(trial_id, key, value)
    else:
        # Written whether the trial still runs or not: asking first would cost a read of
        # the trial (a refusal reads it in full), and the answer changes nothing.
        _write(backend, trial_id, {key: value}, unfinished_only=False)
        # Optuna's cache holds a trial once it finished: this process reads it there.
        cached = getattr(storage, "_get_cached_trial", None)
        frozen = cached(trial_id) if cached is not None else None
        if frozen is not None:
            frozen.user_attrs[key] = value
    if isinstance(trial, optuna.Trial):
        trial._cached_frozen_trial.user_attrs[key] = value
