"""Producer, worker and operator calls on the caller's own connection.

Every function runs one statement on the connection it is given and never
commits: on a connection that is not in autocommit mode the effect belongs
to the caller's transaction (an enqueued job exists iff that transaction
commits; a claim's lease takes hold when it commits). jobq's errors surface
as the typed exceptions of :mod:`pyqueue.errors`.

Each call is written once, in ``pyqueue._statements`` (arguments, checks,
SQL, result, documentation); ``pyqueue._calls`` makes it this module's call
and its asyncio twin in :mod:`pyqueue.aio`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg

from pyqueue import _statements as s
from pyqueue._calls import (
    cancel,
    cancel_jobs,
    claim,
    complete,
    configure_queue,
    discard_dead,
    enqueue,
    enqueue_callback,
    enqueue_many,
    every,
    fail,
    grant_queue,
    heartbeat,
    parent_results,
    pause,
    queue_grants,
    reap,
    release,
    result,
    resume,
    retry,
    retry_dead,
    revoke_queue,
    schedules,
    snooze,
    stats,
    status,
    unschedule,
)
from pyqueue._db import run
from pyqueue._grant_statements import QueueGrant
from pyqueue._statements import QueueStats, Schedule
from pyqueue.job import Job, TakenJob
from pyqueue.waiting import wait
from pyqueue.workflows import Group, Step, chain, group

Connection = psycopg.Connection[Any]

# The calls (pyqueue.aio has the same names, its twins) and the result types.
__all__ = [
    "Group", "QueueGrant", "QueueStats", "Schedule", "Step", "cancel", "cancel_jobs", "chain", "claim",
    "complete", "complete_many", "configure_queue", "discard_dead", "enqueue", "enqueue_callback",
    "enqueue_many", "every", "fail", "grant_queue", "group", "heartbeat", "parent_results", "pause",
    "queue_grants", "reap", "release", "result", "resume", "retry", "retry_dead", "revoke_queue", "schedules",
    "snooze", "stats", "status", "take", "unschedule", "wait",
]


def complete_many(conn: Connection, jobs: Sequence[Job], results: Sequence[Any] | None = None) -> int:
    """Acknowledge many jobs in one statement; how many still held their lease.

    ``results`` (jobq 0.6): one result (any JSON value, or None for none)
    per job, as for :func:`complete`."""
    return run(conn, s.complete_many(jobs, results)) if jobs else 0


@contextmanager
def take(conn: Connection, queue: str, n: int = 1) -> Iterator[list[TakenJob]]:
    """Exactly-once processing for work that only touches this database.

    Removes up to ``n`` ready jobs inside a transaction on ``conn`` (a
    savepoint when one is already open) and yields them; apply them to your
    tables inside the ``with`` block. On a normal exit the transaction
    commits: the jobs are done together with your writes. On an exception it
    rolls back: the jobs are back in the queue, untouched (attempts
    unchanged), and nothing you wrote stays::

        with pyqueue.take(conn, "ledger", 10) as jobs:
            for job in jobs:
                conn.execute("UPDATE accounts SET cents = cents + %s WHERE id = %s",
                             (job.payload["cents"], job.payload["account"]))
    """
    statement = s.take(queue, n)
    with conn.transaction():
        yield [TakenJob(*row) for row in run(conn, statement)]
