"""Running one statement on a caller's connection (sync or async), whatever its row factory.

A :class:`Statement` says what to send and what the answer becomes, once;
:func:`run` sends it on a sync connection and :func:`arun` on an asyncio
one: the only places where the client calls' I/O differs.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

import psycopg
from psycopg.rows import dict_row, tuple_row
from psycopg.types.json import set_json_loads

from pyqueue.errors import translate_errors

Connection = psycopg.Connection[Any]
AsyncConnection = psycopg.AsyncConnection[Any]
T = TypeVar("T")
# How a statement's answer is read: the first column of the first row, every
# row as a tuple or a dict, or claimed rows (payloads loaded without raising).
Read = Literal["scalar", "tuples", "dicts", "claimed"]


@dataclass(frozen=True)
class Statement(Generic[T]):
    """One statement of a call, whatever the I/O: its text, its checked
    parameters, how its answer is read and what the answer becomes."""

    sql: str
    params: Any
    read: Read
    result: Callable[[Any], T]


def run(conn: Connection, statement: Statement[T]) -> T:
    """Send ``statement`` on ``conn`` (jobq's errors raised typed); its result."""
    with translate_errors():
        answer = READ[statement.read](conn, statement.sql, statement.params)
    return statement.result(answer)


async def arun(conn: AsyncConnection, statement: Statement[T]) -> T:
    """The asyncio twin of :func:`run`."""
    with translate_errors():
        answer = await AREAD[statement.read](conn, statement.sql, statement.params)
    return statement.result(answer)


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


class UndecodablePayload(dict[str, Any]):
    """Stands for a payload that PostgreSQL accepted but Python's json cannot
    load (nested deeper than the interpreter's recursion limit). A claim fails
    such a job with ``error`` instead of handing it out, so one poison
    payload cannot crash the worker and strand the rest of its batch."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


def _load_json(data: str | bytes) -> Any:
    try:
        return json.loads(data)
    except RecursionError as error:
        return UndecodablePayload(f"payload could not be decoded in Python: RecursionError: {error}")


def undecodable(payload: Any) -> str | None:
    """The decoding error of a claimed job's payload, or None when it loaded."""
    return payload.error if isinstance(payload, UndecodablePayload) else None


def claimed_rows(conn: Connection, query: str, params: Any) -> list[dict[str, Any]]:
    """The rows of a claim, payloads loaded without ever raising RecursionError."""
    with conn.cursor(row_factory=dict_row) as cur:
        set_json_loads(_load_json, cur)
        return cur.execute(query, params).fetchall()



async def aclaimed_rows(conn: AsyncConnection, query: str, params: Any) -> list[dict[str, Any]]:
    """The asyncio twin of :func:`claimed_rows`."""
    async with conn.cursor(row_factory=dict_row) as cur:
        set_json_loads(_load_json, cur)
        await cur.execute(query, params)
        return await cur.fetchall()


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


READ: dict[str, Callable[[Connection, str, Any], Any]] = {
    "scalar": scalar, "tuples": tuples, "dicts": dicts, "claimed": claimed_rows,
}
AREAD: dict[str, Callable[[AsyncConnection, str, Any], Awaitable[Any]]] = {
    "scalar": ascalar, "tuples": atuples, "dicts": adicts, "claimed": aclaimed_rows,
}
