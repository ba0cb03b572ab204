"""The dashboard's connections: one psycopg_pool AsyncConnectionPool per app
(autocommit connections, application_name ``pyqueue-dashboard``), opened by
the app's lifespan — or by the first request when the app is mounted inside
another one whose lifespan does not run it — and closed at shutdown.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool
from starlette.requests import Request

from pyqueue.worker.scripts import read_only_server

POOL_TIMEOUT = 10.0  # seconds a request waits for a connection; then the page says the database is down
STATEMENT_TIMEOUT = "15s"  # no dashboard page may hold a statement longer


class Database:
    """The pool, opened once on first use."""

    def __init__(self, dsn: str, *, min_size: int = 1, max_size: int = 4) -> None:
        self.pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] = AsyncConnectionPool(
            dsn, min_size=min_size, max_size=max_size, open=False, timeout=POOL_TIMEOUT,
            kwargs={"autocommit": True, "application_name": "pyqueue-dashboard",
                    "options": f"-c statement_timeout={STATEMENT_TIMEOUT}"},
            name="pyqueue-dashboard",
        )
        self._opened = False
        self._lock = asyncio.Lock()

    async def open(self) -> None:
        async with self._lock:
            if not self._opened:
                await self.pool.open(wait=False)
                self._opened = True

    async def close(self) -> None:
        async with self._lock:
            if self._opened:
                await self.pool.close()
                self._opened = False

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        if not self._opened:
            await self.open()
        async with self.pool.connection() as conn:
            try:
                yield conn
            except psycopg.Error as error:
                if read_only_server(error):  # of no use now: the pool opens a new one (on the primary)
                    await conn.close()
                raise


def connection(request: Request) -> Any:
    """``async with connection(request) as conn``: a pooled autocommit connection."""
    database: Database = request.app.state.database
    return database.connection()
