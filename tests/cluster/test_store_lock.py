"""The lock drivers sharing a PostgreSQL store take in turn (an advisory lock)."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy
from sqlalchemy.pool import NullPool, QueuePool

from hpsearch._locks import store_lock
from tests.cluster.conftest import Postgres
from tests.conftest import wait_for

pytestmark = pytest.mark.process  # a PostgreSQL server

BLOCKED = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"


def test_drivers_take_a_postgresql_stores_lock_in_turn_and_its_connection_runs_transactions_again(
    postgres: Postgres,
) -> None:
    url = postgres.create_database("lock")
    engine = sqlalchemy.create_engine(url)  # as Optuna's storage holds one, pooled
    watcher = sqlalchemy.create_engine(url, poolclass=NullPool)
    order: list[str] = []

    def blocked() -> bool:
        with watcher.connect() as connection:
            return connection.execute(sqlalchemy.text(BLOCKED)).scalar() == 1

    def second() -> None:
        with store_lock(url):  # another driver: a connection of its own
            order.append("second")

    other = threading.Thread(target=second)
    with store_lock(url, engine):
        other.start()
        wait_for(blocked, 30, "the second driver to wait for the lock in PostgreSQL")
        order.append("first")
    other.join(timeout=30)
    assert order == ["first", "second"]
    # The lock is taken outside a transaction: the pooled connection it used (the
    # pool's only one) goes back to the storage transactional, as Optuna's writes
    # need (a rollback undoes them).
    assert isinstance(engine.pool, QueuePool)
    assert engine.pool.checkedin() == 1
    with engine.connect() as connection:
        connection.execute(sqlalchemy.text("CREATE TABLE kept (x int)"))
        connection.rollback()
        assert not sqlalchemy.inspect(connection).has_table("kept")
