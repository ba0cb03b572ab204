"""SQLAlchemy 2 sessions and connections where pyqueue takes a connection.

``pyqueue.enqueue(session, ...)`` (and every call of :mod:`pyqueue.client`
that runs one statement) accepts a SQLAlchemy ``Session`` or ``Connection``
on the psycopg dialect (``postgresql+psycopg://``); :mod:`pyqueue.aio`'s
calls accept an ``AsyncSession`` or ``AsyncConnection``. The statement runs
on the psycopg connection under it, in the transaction SQLAlchemy has open
(a ``Session`` starts one if it has none): the job exists iff the caller's
commit happens.

SQLAlchemy is never imported here: an object is recognised only when the
caller's program has imported SQLAlchemy already, and a psycopg connection
costs one isinstance check.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import psycopg

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection as SqlaConnection
    from sqlalchemy.ext.asyncio import AsyncConnection as SqlaAsyncConnection
    from sqlalchemy.ext.asyncio import AsyncSession
    from sqlalchemy.orm import Session

# What the calls take as ``conn``.
Connectable: TypeAlias = "psycopg.Connection[Any] | Session | SqlaConnection"
AsyncConnectable: TypeAlias = "psycopg.AsyncConnection[Any] | AsyncSession | SqlaAsyncConnection"


def native(conn: Connectable) -> psycopg.Connection[Any]:
    """The psycopg connection of ``conn`` (``conn`` itself when it is one)."""
    if isinstance(conn, psycopg.Connection):
        return conn
    orm, engine = sys.modules.get("sqlalchemy.orm"), sys.modules.get("sqlalchemy.engine")
    found: Any = conn
    if orm is not None and isinstance(found, orm.Session):
        found = found.connection()  # the session's transaction, begun if none is
    if engine is not None and isinstance(found, engine.Connection):
        driver = _driver(found, found.connection.driver_connection, psycopg.Connection)
        return cast("psycopg.Connection[Any]", driver)
    return found  # type: ignore[no-any-return]  # not ours to judge: psycopg's errors say what it is


async def anative(conn: AsyncConnectable) -> psycopg.AsyncConnection[Any]:
    """The asyncio twin of :func:`native`."""
    if isinstance(conn, psycopg.AsyncConnection):
        return conn
    extension = sys.modules.get("sqlalchemy.ext.asyncio")
    found: Any = conn
    if extension is not None and isinstance(found, extension.AsyncSession):
        found = await found.connection()
    if extension is not None and isinstance(found, extension.AsyncConnection):
        raw = await found.get_raw_connection()
        driver = _driver(found, raw.driver_connection, psycopg.AsyncConnection)
        return cast("psycopg.AsyncConnection[Any]", driver)
    return found  # type: ignore[no-any-return]


def _driver(sqla: Any, driver: Any, wanted: type[Any]) -> Any:
    if not isinstance(driver, wanted):
        raise TypeError(
            f"conn: a SQLAlchemy connection on {sqla.dialect.name}+{sqla.dialect.driver}; pyqueue runs on "
            "psycopg 3: use the psycopg dialect (postgresql+psycopg://...)")
    return driver
