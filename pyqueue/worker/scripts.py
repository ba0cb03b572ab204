"""The I/O a consumer script asks for, and the stepper that runs a script.

A script (``pyqueue.worker.consumer``) is a generator: it yields an
operation (:class:`Sql`, :class:`Reset`, :class:`Listen`, :class:`Sleep`)
and gets its result back, or the exception it raised thrown in where it
yielded, so that the script's own ``try``/``with translate_errors()``
handle it as if it had called the database itself. A driver runs a script
with :class:`Step`; the sync driver performs each operation with psycopg
calls, the async one awaits them.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

import psycopg

T = TypeVar("T")

Source = Literal["work", "heartbeat", "listen"]


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


Op = Sql | Reset | Listen | Sleep
Script = Generator[Op, Any, T]


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
                self.op = self._script.throw(error)
            else:
                self.op = self._script.send(self.result)
        except StopIteration as stop:
            self.value = stop.value
            return False
        self.result = None
        return True


def lost_connection(error: psycopg.Error) -> bool:
    """Whether an OperationalError means the connection is gone (not, say, a
    lock_timeout or a deadlock, after which the connection is still fine)."""
    return error.sqlstate is None or error.sqlstate.startswith(("08", "57P"))


def reason(error: BaseException) -> str:
    """An error's text for a log line, or its type when it has none."""
    return str(error).strip() or type(error).__name__
