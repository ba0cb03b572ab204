"""The I/O a consumer script asks for, and the stepper that runs a script.

A script (``pyqueue.worker.consumer``) is a generator: it yields an
operation (:class:`Sql`, :class:`Pipelined`, :class:`Reset`, :class:`Listen`,
:class:`Sleep`)
and gets its result back, or the exception it raised thrown in where it
yielded, so that the script's own ``try``/``with translate_errors()``
handle it as if it had called the database itself. A driver runs a script
with :class:`Step`; the sync driver performs each operation with psycopg
calls, the async one awaits them.

An error that means the server takes no writes now (a standby after a
failover, a primary fenced read-only: SQLSTATE 25006) reaches the script as
:class:`ServerReadOnly`, an OperationalError: every script already handles
that as a lost connection (reconnect, back off, put the acks back), never
as the failure of a job.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

import psycopg

T = TypeVar("T")

Source = Literal["work", "heartbeat", "listen"]

READ_ONLY = "25006"  # read_only_sql_transaction
NOT_IN_PREREQUISITE_STATE = "55000"  # with "recovery is in progress": a standby


@dataclass(frozen=True, slots=True)
class Sql:
    """Run ``query`` on a connection of ``on``; the result is the first column of
    the first row (``rows="scalar"``), every row as a tuple (``"tuples"``), or
    the rows of a claim as dicts with their payloads loaded (``"claimed"``)."""

    query: str
    params: Any = None
    rows: Literal["scalar", "tuples", "claimed"] = "scalar"
    on: Source = "work"


@dataclass(frozen=True, slots=True)
class Pipelined:
    """Run ``steps`` (each an :class:`Sql` on ``"work"``) one after the other on
    the work connection in one round trip: psycopg's pipeline mode, one Sync
    at the end, so that the server runs them as one implicit transaction. The
    result is the list of their results (each read as its ``rows`` says); an
    error in any of them undoes them all and is the one thrown in."""

    steps: tuple[Sql, ...]


@dataclass(frozen=True, slots=True)
class Reset:
    """Forget the connection(s) of ``on``: they may be broken (``"listen"``: close it)."""

    on: Source


@dataclass(frozen=True, slots=True)
class Listen:
    """Open the LISTEN connection if there is none (or it broke); the result
    is True when a new one was opened."""


@dataclass(frozen=True, slots=True)
class Sleep:
    """Sleep ``seconds``, but not past a stop."""

    seconds: float


Op = Sql | Pipelined | Reset | Listen | Sleep
Script = Generator[Op, Any, T]


class ServerReadOnly(psycopg.OperationalError):
    """The server refused a write because it takes none now: a standby (after
    a failover the old primary may come back as one), or a primary fenced
    with ``default_transaction_read_only`` during a switchover. Raised from
    the server's error (its ``__cause__``) so that the workers treat it as
    what it is: the connection is of no use any more, reconnect (a DSN with
    ``target_session_attrs=read-write`` finds the new primary), back off,
    and never count it against a job's attempts."""


def read_only_server(error: BaseException) -> bool:
    """Whether a database error means "this server takes no writes (now)":
    SQLSTATE 25006 ("cannot execute ... in a read-only transaction", "cannot
    execute ... during recovery"), or 55000 "recovery is in progress"."""
    if isinstance(error, ServerReadOnly):
        return True
    if not isinstance(error, psycopg.Error):
        return False
    return error.sqlstate == READ_ONLY or (
        error.sqlstate == NOT_IN_PREREQUISITE_STATE and "recovery is in progress" in str(error))


def as_reconnect(error: Exception) -> Exception:
    """``error``, or a :class:`ServerReadOnly` raised from it when it means the
    server takes no writes: every script handles that as a lost connection."""
    if isinstance(error, ServerReadOnly) or not read_only_server(error):
        return error
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    lost = ServerReadOnly(f"the server takes no writes now ({text}): reconnecting to the primary")
    lost.__cause__ = error
    return lost


class Step(Generic[T]):
    """Runs a script for a driver: ``while step.next(): step.result = perform(step.op)``
    (or ``step.error = exc``); then ``step.value`` is what the script returned."""

    def __init__(self, script: Script[T]) -> None:
        self._script = script
        self.op: Op = Sleep(0.0)
        self.result: Any = None
        self.error: Exception | None = None
        self.value: T

    def next(self) -> bool:
        """Hand the last result (or error) to the script; False once it returned."""
        try:
            if self.error is not None:
                error, self.error = self.error, None
                self.op = self._script.throw(as_reconnect(error))
            else:
                self.op = self._script.send(self.result)
        except StopIteration as stop:
            self.value = stop.value
            return False
        self.result = None
        return True


def lost_connection(error: psycopg.Error) -> bool:
    """Whether an OperationalError means the connection is gone (not, say, a
    lock_timeout or a deadlock, after which the connection is still fine), or
    of no use: its server takes no writes now (:class:`ServerReadOnly`)."""
    if isinstance(error, ServerReadOnly):
        return True
    return error.sqlstate is None or error.sqlstate.startswith(("08", "57P"))


def reason(error: BaseException) -> str:
    """An error's text for a log line, or its type when it has none."""
    return str(error).strip() or type(error).__name__
