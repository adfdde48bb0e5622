"""Several user attributes of one trial written in one transaction.

Optuna writes each ``set_user_attr`` in a transaction of its own: a commit, and
on SQLite a sync to disk, per attribute. The driver records four to six of them
as a trial ends, and is CPU-bound on SQLAlchemy. :func:`set_user_attrs` writes
them in one session where the storage is Optuna's RDB storage (the attribute
writes Optuna itself makes inside ``set_trial_user_attr``, pinned in
``tests/test_compat.py``), and one by one elsewhere (in memory, a gRPC proxy).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import optuna
from optuna.storages import RDBStorage


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
        for key, value in values.items():
            backend._set_trial_attr_without_commit(
                session, models.TrialUserAttributeModel, trial._trial_id, key, value
            )
    trial._cached_frozen_trial.user_attrs.update(values)
