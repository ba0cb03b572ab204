"""pyqueue's calls on SQLAlchemy 2 (psycopg dialect): a Session, a Connection
and an AsyncSession, in the caller's transaction: rolled back, no job;
committed, exactly one, together with the caller's own write."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from sqlalchemy import URL, create_engine, text
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

import pyqueue


def url(dsn: str, driver: str = "psycopg") -> URL:
    """The test database as a SQLAlchemy URL (the server listens on a Unix socket)."""
    info = conninfo_to_dict(dsn)
    return URL.create(f"postgresql+{driver}", username=str(info["user"]), database=str(info["dbname"]),
                      query={"host": str(info["host"]), "port": str(info["port"])})


def jobs_and_orders(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    row = conn.execute("SELECT (SELECT count(*) FROM jobq.jobs), (SELECT count(*) FROM orders)").fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


@pytest.fixture
def orders(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    conn.execute("CREATE TABLE orders (id bigint PRIMARY KEY)")
    return conn


def test_session_rolled_back_leaves_no_job_and_committed_exactly_one(dsn: str,
                                                                    orders: psycopg.Connection[Any]) -> None:
    engine = create_engine(url(dsn))
    try:
        with Session(engine) as session:
            session.execute(text("INSERT INTO orders VALUES (1)"))
            job_id = pyqueue.enqueue(session, "emails", {"order": 1})
            assert session.execute(text("SELECT count(*) FROM jobq.jobs")).scalar_one() == 1
            session.rollback()
        assert jobs_and_orders(orders) == (0, 0)

        with Session(engine) as session:
            job_id = pyqueue.enqueue(session, "emails", {"order": 2})  # first: begins the transaction
            session.execute(text("INSERT INTO orders VALUES (2)"))
            session.commit()
        assert jobs_and_orders(orders) == (1, 1)
        assert pyqueue.status(orders, job_id) == "ready"
    finally:
        engine.dispose()


def test_connection_rolled_back_leaves_no_job_and_committed_exactly_one(
        dsn: str, orders: psycopg.Connection[Any]) -> None:
    engine = create_engine(url(dsn))
    try:
        with engine.connect() as connection:
            connection.execute(text("INSERT INTO orders VALUES (1)"))
            pyqueue.enqueue_many(connection, "emails", [{"order": 1}, {"order": 1, "copy": True}])
            connection.rollback()
        assert jobs_and_orders(orders) == (0, 0)
        with engine.begin() as connection:
            connection.execute(text("INSERT INTO orders VALUES (2)"))
            pyqueue.enqueue(connection, "emails", {"order": 2})
        assert jobs_and_orders(orders) == (1, 1)
    finally:
        engine.dispose()


def test_async_session_rolled_back_leaves_no_job_and_committed_exactly_one(
        dsn: str, orders: psycopg.Connection[Any]) -> None:
    async def scenario() -> None:
        engine = create_async_engine(url(dsn))
        try:
            async with AsyncSession(engine) as session:
                await session.execute(text("INSERT INTO orders VALUES (1)"))
                await pyqueue.aio.enqueue(session, "emails", {"order": 1})
                await session.rollback()
            assert jobs_and_orders(orders) == (0, 0)
            async with AsyncSession(engine) as session, session.begin():
                await session.execute(text("INSERT INTO orders VALUES (2)"))
                await pyqueue.aio.enqueue(session, "emails", {"order": 2})
            assert jobs_and_orders(orders) == (1, 1)
        finally:
            await engine.dispose()

    asyncio.run(scenario())


def test_another_driver_is_refused_with_the_dialect_to_use(dsn: str, orders: psycopg.Connection[Any]) -> None:
    async def scenario() -> None:
        engine = create_async_engine(url(dsn, "asyncpg"))
        try:
            async with AsyncSession(engine) as session:
                refused = r"postgresql\+asyncpg; pyqueue runs on psycopg 3: use the psycopg dialect"
                with pytest.raises(TypeError, match=refused):
                    await pyqueue.aio.enqueue(session, "emails", {"order": 1})
        finally:
            await engine.dispose()

    asyncio.run(scenario())
    assert jobs_and_orders(orders) == (0, 0)
