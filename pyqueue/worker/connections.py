"""The connections of the workers: how they are opened (autocommit, an
application_name, prepared statements off behind PgBouncer, a connect
timeout), one dedicated connection that comes back after it dropped, or a
pool shared by a Worker's threads; and the asyncio twins of the first two."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager
from typing import Any, Protocol

import psycopg
from psycopg_pool import ConnectionPool

from pyqueue.defaults import CONNECT_TIMEOUT
from pyqueue.worker.scripts import read_only_server

Connection = psycopg.Connection[Any]
AsyncConnection = psycopg.AsyncConnection[Any]


def connect(dsn: str, application_name: str, *, prepare: bool) -> Connection:
    """An autocommit connection for a worker. ``prepare=False`` turns psycopg's
    prepared statements off (PgBouncer in transaction mode)."""
    return psycopg.connect(dsn, **connection_kwargs(dsn, application_name, prepare=prepare))


async def aconnect(dsn: str, application_name: str, *, prepare: bool) -> AsyncConnection:
    """The asyncio twin of :func:`connect`."""
    kwargs = connection_kwargs(dsn, application_name, prepare=prepare)
    return await psycopg.AsyncConnection.connect(dsn, **kwargs)


def connection_kwargs(dsn: str, application_name: str, *, prepare: bool) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"autocommit": True, "application_name": application_name}
    if not prepare:
        kwargs["prepare_threshold"] = None
    if "connect_timeout" not in psycopg.conninfo.conninfo_to_dict(dsn):
        kwargs["connect_timeout"] = CONNECT_TIMEOUT
    return kwargs


def is_broken(conn: Connection | AsyncConnection | None) -> bool:
    return conn is None or conn.closed or conn.broken


class ConnectionSource(Protocol):
    """Where a worker gets connections: one dedicated, or a pool."""

    def connection(self) -> AbstractContextManager[Connection]: ...

    def reset(self) -> None:
        """Forget connections that may be broken (after an OperationalError)."""

    def close(self) -> None: ...


class _Dedicated:
    """What a dedicated connection knows, sync or async."""

    def __init__(self, dsn: str, application_name: str, *, prepare: bool) -> None:
        self.dsn = dsn
        self.application_name = application_name
        self.prepare = prepare


class DedicatedConnection(_Dedicated):
    """One connection, opened on first use and reopened after it broke."""

    _conn: Connection | None = None

    def __init__(self, dsn: str, application_name: str, *, prepare: bool) -> None:
        super().__init__(dsn, application_name, prepare=prepare)
        self._lock = threading.Lock()

    @contextmanager
    def connection(self) -> Iterator[Connection]:
        with self._lock:
            if is_broken(self._conn):
                self._close()
                self._conn = connect(self.dsn, self.application_name, prepare=self.prepare)
            conn = self._conn
        assert conn is not None
        yield conn

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def reset(self) -> None:
        with self._lock:
            self._close()

    def close(self) -> None:
        self.reset()


class AsyncDedicatedConnection(_Dedicated):
    """The asyncio twin of :class:`DedicatedConnection`."""

    _conn: AsyncConnection | None = None
    _lock: asyncio.Lock | None = None  # made in the event loop, at first use

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[AsyncConnection]:
        self._lock = self._lock or asyncio.Lock()
        async with self._lock:
            if is_broken(self._conn):
                await self.reset()
                self._conn = await aconnect(self.dsn, self.application_name, prepare=self.prepare)
            conn = self._conn
        assert conn is not None
        yield conn

    async def reset(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.close()

    async def close(self) -> None:
        await self.reset()


class PooledConnections:
    """A psycopg_pool ConnectionPool shared by a Worker's threads."""

    def __init__(self, dsn: str, application_name: str, *, size: int, prepare: bool) -> None:
        self.pool: ConnectionPool[Connection] = ConnectionPool(
            dsn,
            min_size=1,
            max_size=size,
            kwargs=connection_kwargs(dsn, application_name, prepare=prepare),
            timeout=CONNECT_TIMEOUT,
            name=application_name,
            open=True,
        )

    @contextmanager
    def connection(self) -> Iterator[Connection]:
        """A pooled connection; closed (the pool drops it and opens a new one)
        when its server turned out to take no writes (``read_only_server``):
        after a failover the pool must not keep handing out the old primary."""
        with self.pool.connection() as conn:
            try:
                yield conn
            except psycopg.Error as error:
                if read_only_server(error):
                    conn.close()
                raise

    def reset(self) -> None:
        self.pool.check()

    def close(self) -> None:
        self.pool.close()

