"""The fresh databases of tests/database_pool.py: each test's own copy of
the template, made ahead, never handed out twice, dropped after use even
with a connection left open, and a failure to make one reaches the test."""

from __future__ import annotations

import psycopg
import pytest
from pytest_postgresql.executors import PostgreSQLExecutor

from tests.conftest import proc_dsn
from tests.database_pool import DatabasePool


def still_there(proc: PostgreSQLExecutor, names: list[str]) -> set[str]:
    with psycopg.connect(proc_dsn(proc, "postgres"), autocommit=True) as admin:
        rows = admin.execute("SELECT datname FROM pg_database WHERE datname = ANY(%s)", (names,)).fetchall()
    return {str(r[0]) for r in rows}


class CountingPool(DatabasePool):
    """A pool that remembers the names it handed out (only those are this test's:
    the session's own pool makes databases of the same prefix meanwhile)."""

    def __init__(self, admin_dsn: str, template: str) -> None:
        self.handed: list[str] = []
        super().__init__(admin_dsn, template)

    def take(self) -> str:
        name = super().take()
        self.handed.append(name)
        return name


def test_each_database_is_a_fresh_copy_of_the_template_dropped_after_use(
        postgresql_proc: PostgreSQLExecutor) -> None:
    template = "pool_test_template"
    with psycopg.connect(proc_dsn(postgresql_proc, "postgres"), autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {template}")
        admin.execute(f"CREATE DATABASE {template}")
    with psycopg.connect(proc_dsn(postgresql_proc, template), autocommit=True) as conn:
        conn.execute("CREATE TABLE marks (test int)")
    pool = CountingPool(proc_dsn(postgresql_proc, "postgres"), template)
    try:
        left_open = []
        for test in range(4):
            name = pool.take()
            conn = psycopg.connect(proc_dsn(postgresql_proc, name), autocommit=True)
            assert conn.execute("SELECT count(*) FROM marks").fetchone() == (0,), f"{name} was used before"
            conn.execute("INSERT INTO marks VALUES (%s)", (test,))
            if test % 2:
                left_open.append(conn)  # a test's stray connection: the drop ends it
            else:
                conn.close()
            pool.give_back(name)
        assert len(set(pool.handed)) == 4, pool.handed
    finally:
        pool.close()
    assert not pool.thread.is_alive()
    made = [f"{pool.names}{n}" for n in range(1, pool.made + 1)]
    assert still_there(postgresql_proc, made) == set(), "the pool left databases behind"
    for conn in left_open:
        assert conn.closed or conn.broken or _ended(conn)
    with psycopg.connect(proc_dsn(postgresql_proc, "postgres"), autocommit=True) as admin:
        admin.execute(f"DROP DATABASE {template}")


def _ended(conn: psycopg.Connection[tuple[object, ...]]) -> bool:
    with pytest.raises(psycopg.OperationalError):
        conn.execute("SELECT 1")
    return True


def test_a_database_that_cannot_be_made_fails_the_test_that_waits(
        postgresql_proc: PostgreSQLExecutor) -> None:
    pool = DatabasePool(proc_dsn(postgresql_proc, "postgres"), "no_such_template")
    try:
        with pytest.raises(RuntimeError, match="pool's thread failed") as failed:
            pool.take()
        assert isinstance(failed.value.__cause__, psycopg.errors.InvalidCatalogName)
    finally:
        pool.close()
