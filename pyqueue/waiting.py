"""Waiting for a job's end: :func:`wait` returns a completed job's
result, or raises :class:`~pyqueue.JobDead`, :class:`~pyqueue.JobCancelled`
or :class:`~pyqueue.WaitTimeout`.

The steps are written once (a script of statements and pauses); the sync
call runs them on a ``Connection``, its asyncio twin on an
``AsyncConnection``. On a connection in autocommit mode the wait LISTENs on
``jobq_finished`` and marks the job watched (``jobq.watch``), so it wakes as
soon as the job ends, and still asks ``jobq.status`` every second in case a
notification is lost (a pooler in between). On a connection that is not in
autocommit mode it only polls ``jobq.status``, 10 ms doubling up to 500 ms:
each statement of a READ COMMITTED transaction sees the latest commits, a
REPEATABLE READ snapshot never would (the wait then ends in WaitTimeout).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Generator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg

from pyqueue import _checks as check
from pyqueue import _queries as q
from pyqueue import _workflow_statements as w
from pyqueue._db import Statement, arun, run
from pyqueue.errors import InvalidInterval, JobCancelled, JobDead, MissingLease, WaitTimeout, translate_errors

POLL_FIRST = 0.01  # seconds: the first pause of a polling wait, doubled each time ...
POLL_MAX = 0.5  # ... up to this
LISTEN_RECHECK = 1.0  # seconds: a listening wait asks jobq.status at least this often
FINISHED = frozenset({"completed", "dead", "cancelled"})


@dataclass(frozen=True)
class Pause:
    """Wait up to ``seconds``; a listening wait ends early on the job's notification."""

    seconds: float


Script = Generator[Statement[Any] | Pause, Any, Any]


def wait_script(job_id: int, timeout: timedelta | float | None, listening: bool) -> Script:
    """Until the job ends: its result, or the error that says how it ended."""
    checked_id = check.job_id(job_id)
    if checked_id is None:
        raise check.refuse(MissingLease, "job_id must not be None", "Pass the id enqueue() returned.")
    limit = check.seconds(timeout, "timeout", InvalidInterval)
    seconds = math.inf if limit is None else max(0.0, limit.total_seconds())
    deadline = time.monotonic() + seconds
    state = yield (w.watch if listening else w.status)(checked_id)
    pause = POLL_FIRST
    while state not in FINISHED:
        left = deadline - time.monotonic()
        if left <= 0:
            raise WaitTimeout(job_id, seconds, state)
        yield Pause(min(left, LISTEN_RECHECK if listening else pause))
        pause = min(pause * 2, POLL_MAX)
        state = yield w.status(job_id)
    if state == "dead":
        raise JobDead(job_id)
    if state == "cancelled":
        raise JobCancelled(job_id)
    return (yield w.result(checked_id))


def wait(conn: psycopg.Connection[Any], job_id: int, timeout: timedelta | float | None = None) -> Any:
    """Wait until job ``job_id`` ends and return its result.

    Returns the result of a completed job (None when it completed without
    one); raises :class:`~pyqueue.JobDead` when the job is dead,
    :class:`~pyqueue.JobCancelled` when it was cancelled,
    :class:`~pyqueue.WaitTimeout` (a ``TimeoutError``) when it has not ended
    after ``timeout`` (a timedelta or seconds; None: no limit) and
    :class:`~pyqueue.UnknownJob` when jobq does not know the id.

    Give a connection in autocommit mode: the wait LISTENs on channel
    ``jobq_finished`` (and UNLISTENs when done) and wakes on the job's
    notification. On a connection in a transaction it polls ``jobq.status``
    instead (10 ms doubling up to 500 ms), which needs READ COMMITTED: a
    REPEATABLE READ snapshot never sees the job end. Never wait in the
    transaction that enqueued the job: no worker sees it before the commit.
    """
    listening = conn.autocommit
    script = wait_script(job_id, timeout, listening)
    op = next(script)  # the arguments are checked before anything is sent
    if listening:
        conn.execute(q.LISTEN_FINISHED)
    try:
        while True:
            if isinstance(op, Pause):
                answer: Any = _pause(conn, job_id, op.seconds, listening)
            else:
                answer = run(conn, op)
            op = script.send(answer)
    except StopIteration as done:
        return done.value
    finally:
        if listening and not conn.closed:
            conn.execute(q.UNLISTEN_FINISHED)


def _pause(conn: psycopg.Connection[Any], job_id: int, seconds: float, listening: bool) -> bool:
    if not listening:
        time.sleep(seconds)
        return False
    with translate_errors():
        for notify in conn.notifies(timeout=seconds):
            if notify.payload == str(job_id):
                return True
    return False


async def async_wait(
    conn: psycopg.AsyncConnection[Any], job_id: int, timeout: timedelta | float | None = None
) -> Any:
    listening = conn.autocommit
    script = wait_script(job_id, timeout, listening)
    op = next(script)  # the arguments are checked before anything is sent
    if listening:
        await conn.execute(q.LISTEN_FINISHED)
    try:
        while True:
            if isinstance(op, Pause):
                answer: Any = await _apause(conn, job_id, op.seconds, listening)
            else:
                answer = await arun(conn, op)
            op = script.send(answer)
    except StopIteration as done:
        return done.value
    finally:
        if listening and not conn.closed:
            await conn.execute(q.UNLISTEN_FINISHED)


async def _apause(conn: psycopg.AsyncConnection[Any], job_id: int, seconds: float, listening: bool) -> bool:
    if not listening:
        await asyncio.sleep(seconds)
        return False
    with translate_errors():
        async for notify in conn.notifies(timeout=seconds):
            if notify.payload == str(job_id):
                return True
    return False


async_wait.__doc__ = wait.__doc__
async_wait.__name__ = async_wait.__qualname__ = "wait"
