"""Running one statement on a caller's connection (sync or async), whatever its row factory."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row, tuple_row

Connection = psycopg.Connection[Any]


def scalar(conn: Connection, query: str, params: Any = None) -> Any:
    """The first column of the first row (None when there is no row)."""
    with conn.cursor(row_factory=tuple_row) as cur:
        row = cur.execute(query, params).fetchone()
    return None if row is None else row[0]


def tuples(conn: Connection, query: str, params: Any = None) -> list[tuple[Any, ...]]:
    with conn.cursor(row_factory=tuple_row) as cur:
        return cur.execute(query, params).fetchall()


def dicts(conn: Connection, query: str, params: Any = None) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(query, params).fetchall()


AsyncConnection = psycopg.AsyncConnection[Any]


async def ascalar(conn: AsyncConnection, query: str, params: Any = None) -> Any:
    async with conn.cursor(row_factory=tuple_row) as cur:
        await cur.execute(query, params)
        row = await cur.fetchone()
    return None if row is None else row[0]


async def atuples(conn: AsyncConnection, query: str, params: Any = None) -> list[tuple[Any, ...]]:
    async with conn.cursor(row_factory=tuple_row) as cur:
        await cur.execute(query, params)
        return await cur.fetchall()


async def adicts(conn: AsyncConnection, query: str, params: Any = None) -> list[dict[str, Any]]:
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(query, params)
        return await cur.fetchall()
