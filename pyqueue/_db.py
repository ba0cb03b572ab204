"""Running one statement on a caller's connection (sync or async), whatever its row factory.

A :class:`Statement` says what to send and what the answer becomes, once;
:func:`run` sends it on a sync connection and :func:`arun` on an asyncio
one: the only places where the client calls' I/O differs.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar, cast

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row, tuple_row
from psycopg.types.string import TextLoader

from pyqueue._hooks import SentSpan
from pyqueue._sqlalchemy import AsyncConnectable, Connectable, anative, native
from pyqueue.errors import JobqNotInstalled, JobqOutdated, missing_jobq, translate_errors

Connection = psycopg.Connection[Any]
AsyncConnection = psycopg.AsyncConnection[Any]
T = TypeVar("T")
JSON_TYPES = ("json", "jsonb")
JSON_OIDS = frozenset(psycopg.adapters.types[name].oid for name in JSON_TYPES)
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
    # The PRODUCER span it is sent in (pyqueue.tracing; None: tracing is off).
    span: SentSpan | None = None


def run(given: Connectable, statement: Statement[T]) -> T:
    """Send ``statement`` on ``given`` (psycopg, or SQLAlchemy's: pyqueue._sqlalchemy)
    (jobq's errors raised typed); its result."""
    conn = native(given)
    if (span := statement.span) is None:
        return _run(conn, statement)
    with span:
        result = _run(conn, statement)
        span.done(result)
        return result


async def arun(given: AsyncConnectable, statement: Statement[T]) -> T:
    """The asyncio twin of :func:`run`."""
    conn = await anative(given)
    if (span := statement.span) is None:
        return await _arun(conn, statement)
    with span:
        result = await _arun(conn, statement)
        span.done(result)
        return result


def _run(conn: Connection, statement: Statement[T]) -> T:
    try:
        with translate_errors():
            answer = READ[statement.read](conn, statement.sql, statement.params)
    except psycopg.Error as error:
        missing = missing_jobq(error)
        if missing is None:
            raise
        if isinstance(missing, JobqOutdated) and askable(conn):
            try:
                version = scalar(conn, "SELECT jobq.version()") if scalar(conn, HAS_VERSION) else None
            except psycopg.Error:
                raise missing from error
            raise located(missing, version) from error
        raise missing from error
    return statement.result(answer)


async def _arun(conn: AsyncConnection, statement: Statement[T]) -> T:
    try:
        with translate_errors():
            answer = await AREAD[statement.read](conn, statement.sql, statement.params)
    except psycopg.Error as error:
        missing = missing_jobq(error)
        if missing is None:
            raise
        if isinstance(missing, JobqOutdated) and askable(conn):
            try:
                has_version = await ascalar(conn, HAS_VERSION)
                version = await ascalar(conn, "SELECT jobq.version()") if has_version else None
            except psycopg.Error:
                raise missing from error
            raise located(missing, version) from error
        raise missing from error
    return statement.result(answer)


# A missing jobq function or view: which jobq the database has, when the
# connection can still be asked (autocommit, or the call ran outside a
# transaction); inside a failed transaction the error stays as it is.
HAS_VERSION = "SELECT pg_catalog.to_regprocedure('jobq.version()') IS NOT NULL"


def askable(conn: Connection | AsyncConnection) -> bool:
    return not conn.closed and conn.info.transaction_status == TransactionStatus.IDLE


def located(error: JobqOutdated, installed: object) -> JobqNotInstalled | JobqOutdated:
    """``error`` told precisely: jobq is not installed, or which version is."""
    if installed is None:
        return JobqNotInstalled(sqlstate=error.sqlstate, diag=error.diag)
    return JobqOutdated(error.missing, error.needed, str(installed), sqlstate=error.sqlstate, diag=error.diag)


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


def load_json_texts(texts: Sequence[str | None]) -> tuple[list[Any], bool]:
    """JSON texts (None: SQL NULL) decoded, each as ``json.loads`` would, but in
    one call for all of them: the texts of a claim's payloads, joined into one
    JSON array (a JSON value taken from jsonb is whole, so the array holds
    exactly one element per text, a NULL as ``null``). Should that fail (a
    payload nested deeper than Python's recursion limit, which the array's
    own level may tip over), they are decoded one by one, the undecodable ones as
    :class:`UndecodablePayload`. The values, and whether one is such."""
    if None in texts:  # SQL NULLs (a claim's progress and meta, mostly): JSON null in the array
        if texts.count(None) == len(texts):
            return [None] * len(texts), False
        joined = ",".join(["null" if text is None else text for text in texts])
    else:
        joined = ",".join(cast("Sequence[str]", texts))
    try:
        loaded: list[Any] = json.loads("[" + joined + "]")
    except RecursionError:
        pass
    else:
        return loaded, False
    values = [None if text is None else _load_json(text) for text in texts]
    return values, any(isinstance(value, UndecodablePayload) for value in values)


@dataclass(frozen=True, slots=True)
class Claimed:
    """The rows of a claim (or a hold), column by column: ``names`` and one
    sequence of values per name, JSON columns decoded (see :func:`claimed_rows`);
    ``undecodable``: some JSON value is an :class:`UndecodablePayload`."""

    names: tuple[str, ...]
    columns: list[Sequence[Any]]
    undecodable: bool = False

    def __len__(self) -> int:
        return len(self.columns[0]) if self.columns else 0

    def column(self, name: str) -> Sequence[Any]:
        return self.columns[self.names.index(name)]

    def dicts(self) -> list[dict[str, Any]]:
        """The rows as dicts, column name to value."""
        return [dict(zip(self.names, values, strict=True)) for values in zip(*self.columns, strict=True)]


def _raw_json(cursor: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> None:
    """Have ``cursor`` return json and jsonb values as their text (decoded
    together afterwards, see :func:`load_json_texts`)."""
    for name in JSON_TYPES:
        cursor.adapters.register_loader(name, TextLoader)


def _claimed(cursor: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any], rows: list[tuple[Any, ...]]) -> Claimed:
    # The columns' names and types, read from the result as they are
    # (cursor.description would make an object per column and claim).
    result = cursor.pgresult
    if result is None:
        raise psycopg.ProgrammingError("the claim statement returned no rows")
    encoding = cursor.connection.info.encoding
    names = tuple((result.fname(index) or b"").decode(encoding) for index in range(result.nfields))
    columns: list[Sequence[Any]] = list(zip(*rows, strict=True)) if rows else [() for _ in names]
    undecodable = False
    for index in range(result.nfields):
        if result.ftype(index) in JSON_OIDS:
            columns[index], failed = load_json_texts(columns[index])
            undecodable = undecodable or failed
    return Claimed(names, columns, undecodable)


def claimed_rows(conn: Connection, query: str, params: Any) -> Claimed:
    """The rows of a claim, fetched as tuples, their JSON loaded in one go and
    without ever raising RecursionError. A claim's whole cost on the client
    is here, once per batch: no dict per row, one ``json.loads`` per batch."""
    with conn.cursor(row_factory=tuple_row) as cur:
        _raw_json(cur)
        return _claimed(cur, cur.execute(query, params).fetchall())


async def aclaimed_rows(conn: AsyncConnection, query: str, params: Any) -> Claimed:
    """The asyncio twin of :func:`claimed_rows`."""
    async with conn.cursor(row_factory=tuple_row) as cur:
        _raw_json(cur)
        await cur.execute(query, params)
        return _claimed(cur, await cur.fetchall())


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


# --- several statements in one round trip (a worker's acks and its next claim)

Step = tuple[str, Any, str]  # (query, params, how its rows are read: "scalar", "tuples" or "claimed")


def _pipelined_cursor(cursor: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any], rows: str) -> None:
    if rows == "claimed":
        _raw_json(cursor)


def _collected(cursor: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any], rows: str, fetched: list[Any]) -> Any:
    if rows == "claimed":
        return _claimed(cursor, fetched)
    if rows == "scalar":
        return fetched[0][0] if fetched else None
    return fetched


def pipelined(conn: Connection, steps: Sequence[Step]) -> list[Any]:
    """Run ``steps`` in psycopg's pipeline mode: sent together, one Sync after
    the last (the server runs them as one implicit transaction), their
    results read once the Sync came back; one round trip. An error in any
    step undoes them all and is raised."""
    cursors = []
    with conn.pipeline():
        for query, params, rows in steps:
            cur = conn.cursor(row_factory=tuple_row)
            _pipelined_cursor(cur, rows)
            cur.execute(query, params)
            cursors.append(cur)
    # The pipeline's end sent the Sync and read every result: fetching reads memory.
    results = [_collected(cur, step[2], cur.fetchall()) for cur, step in zip(cursors, steps, strict=True)]
    for cur in cursors:
        cur.close()
    return results


async def apipelined(conn: AsyncConnection, steps: Sequence[Step]) -> list[Any]:
    """The asyncio twin of :func:`pipelined`."""
    cursors = []
    async with conn.pipeline():
        for query, params, rows in steps:
            cur = conn.cursor(row_factory=tuple_row)
            _pipelined_cursor(cur, rows)
            await cur.execute(query, params)
            cursors.append(cur)
    results = [_collected(cur, rows, await cur.fetchall())
               for cur, (_, _, rows) in zip(cursors, steps, strict=True)]
    for cur in cursors:
        await cur.close()
    return results
