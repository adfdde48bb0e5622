"""Several user attributes of one trial written in one transaction.

Optuna writes each ``set_user_attr`` in a transaction of its own: a commit, and
on SQLite a sync to disk, per attribute. The driver records four to six of them
as a trial ends, and is CPU-bound on SQLAlchemy. :func:`set_user_attrs` writes
them in one session where the storage is Optuna's RDB storage (the attribute
writes Optuna itself makes inside ``set_trial_user_attr``, pinned in
``tests/test_compat.py``; on SQLite and PostgreSQL, as one upsert of them all),
and one by one elsewhere (in memory, a gRPC proxy).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import BaseStorage, RDBStorage
from optuna.trial import FrozenTrial, TrialState


def set_user_attrs(trial: optuna.Trial, values: Mapping[str, Any]) -> None:
    """``trial.set_user_attr(key, value)`` for each of ``values``, in one transaction."""
    if len(values) < 2:
        for key, value in values.items():
            trial.set_user_attr(key, value)
        return
    storage = trial.storage
    backend = getattr(storage, "_backend", storage)  # inside Optuna's _CachedStorage
    if not isinstance(backend, RDBStorage):
        for key, value in values.items():
            trial.set_user_attr(key, value)
        return
    from optuna.storages._rdb import models
    from optuna.storages._rdb.storage import _create_scoped_session

    with _create_scoped_session(backend.scoped_session, True) as session:
        upsert = _upsert(backend.engine.name, trial._trial_id, values)
        if upsert is None:
            for key, value in values.items():
                backend._set_trial_attr_without_commit(
                    session, models.TrialUserAttributeModel, trial._trial_id, key, value
                )
        else:
            # What Optuna does per attribute (the trial found and checked, then an
            # upsert), once for them all: one statement instead of two per attribute.
            row = models.TrialModel.find_or_raise_by_id(trial._trial_id, session)
            backend.check_trial_is_updatable(trial._trial_id, cast(TrialState, row.state))
            session.execute(upsert)
    trial._cached_frozen_trial.user_attrs.update(values)


def _upsert(dialect: str, trial_id: int, values: Mapping[str, Any]) -> Any | None:
    """One ``INSERT ... ON CONFLICT DO UPDATE`` of every attribute, as Optuna writes each
    on SQLite and PostgreSQL (``None`` on another database: Optuna's own, one by one)."""
    from optuna.storages._rdb import models

    if dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    elif dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert  # type: ignore[assignment]
    else:
        return None
    table = models.TrialUserAttributeModel
    rows = [
        {"trial_id": trial_id, "key": k, "value_json": json.dumps(v)} for k, v in values.items()
    ]
    statement = insert(table).values(rows)
    return statement.on_conflict_do_update(
        index_elements=[table.trial_id, table.key],
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
    # Optuna's cache holds a trial once it finished (as it ended): one this process
    # finished is written directly, without first asking the storage to refuse it.
    cached = getattr(storage, "_get_cached_trial", None)
    frozen = cached(trial_id) if cached is not None else None
    if frozen is not None:
        _write_user_attr(storage, trial_id, key, value)
        frozen.user_attrs[key] = value  # this process reads it there
    else:
        try:
            storage.set_trial_user_attr(trial_id, key, value)
        except UpdateFinishedTrialError:
            _write_user_attr(storage, trial_id, key, value)
    if isinstance(trial, optuna.Trial):
        trial._cached_frozen_trial.user_attrs[key] = value


def _write_user_attr(storage: BaseStorage, trial_id: int, key: str, value: Any) -> None:
    backend = getattr(storage, "_backend", storage)
    if not isinstance(backend, RDBStorage):
        return
    from optuna.storages._rdb import models
    from optuna.storages._rdb.storage import _create_scoped_session

    # Optuna's own setter checks that the trial still runs: the row is written here.
    with _create_scoped_session(backend.scoped_session, True) as session:
        row = (
            session.query(models.TrialUserAttributeModel)
            .filter_by(trial_id=trial_id, key=key)
            .one_or_none()
        )
        if row is None:
            row = models.TrialUserAttributeModel(trial_id=trial_id, key=key)
            session.add(row)
        row.value_json = json.dumps(value)
