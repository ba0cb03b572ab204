"""The asyncio twins of :mod:`pyqueue.client` (exported by :mod:`pyqueue.aio`).

The same calls, made from the same statement builders (``pyqueue._calls``:
same arguments, checks, SQL, results and documentation): each runs one
statement on the caller's ``AsyncConnection`` and never commits for the
caller.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import psycopg

from pyqueue import _statements as s
from pyqueue._calls import (
    async_cancel as cancel,
)
from pyqueue._calls import (
    async_cancel_jobs as cancel_jobs,
)
from pyqueue._calls import (
    async_claim as claim,
)
from pyqueue._calls import (
    async_complete as complete,
)
from pyqueue._calls import (
    async_configure_queue as configure_queue,
)
from pyqueue._calls import (
    async_discard_dead as discard_dead,
)
from pyqueue._calls import (
    async_enqueue as enqueue,
)
from pyqueue._calls import (
    async_enqueue_callback as enqueue_callback,
)
from pyqueue._calls import (
    async_enqueue_many as enqueue_many,
)
from pyqueue._calls import (
    async_every as every,
)
from pyqueue._calls import (
    async_fail as fail,
)
from pyqueue._calls import (
    async_grant_queue as grant_queue,
)
from pyqueue._calls import (
    async_heartbeat as heartbeat,
)
from pyqueue._calls import (
    async_parent_results as parent_results,
)
from pyqueue._calls import (
    async_pause as pause,
)
from pyqueue._calls import (
    async_queue_grants as queue_grants,
)
from pyqueue._calls import (
    async_reap as reap,
)
from pyqueue._calls import (
    async_release as release,
)
from pyqueue._calls import (
    async_result as result,
)
from pyqueue._calls import (
    async_resume as resume,
)
from pyqueue._calls import (
    async_retry as retry,
)
from pyqueue._calls import (
    async_retry_dead as retry_dead,
)
from pyqueue._calls import (
    async_revoke_queue as revoke_queue,
)
from pyqueue._calls import (
    async_schedules as schedules,
)
from pyqueue._calls import (
    async_snooze as snooze,
)
from pyqueue._calls import (
    async_stats as stats,
)
from pyqueue._calls import (
    async_status as status,
)
from pyqueue._calls import (
    async_unschedule as unschedule,
)
from pyqueue._db import arun
from pyqueue.job import AsyncJob, TakenJob
from pyqueue.waiting import async_wait as wait
from pyqueue.workflows import async_chain as chain
from pyqueue.workflows import async_group as group

AsyncConnection = psycopg.AsyncConnection[Any]

__all__ = [
    "cancel", "cancel_jobs", "chain", "claim", "complete", "complete_many", "configure_queue", "discard_dead",
    "enqueue", "enqueue_callback", "enqueue_many", "every", "fail", "grant_queue", "group", "heartbeat",
    "parent_results", "pause", "queue_grants", "reap", "release", "result", "resume", "retry", "retry_dead",
    "revoke_queue", "schedules", "snooze", "stats", "status", "take", "unschedule", "wait",
]


async def complete_many(conn: AsyncConnection, jobs: Sequence[AsyncJob], results: Sequence[Any] | None = None
                        ) -> int:
    """Acknowledge many jobs in one statement; how many still held their lease
    (``results``: as for :func:`pyqueue.complete_many`)."""
    return await arun(conn, s.complete_many(jobs, results)) if jobs else 0


@contextlib.asynccontextmanager
async def take(conn: AsyncConnection, queue: str, n: int = 1) -> AsyncIterator[list[TakenJob]]:
    """The asyncio twin of :func:`pyqueue.take`: up to ``n`` jobs removed inside
    a transaction on ``conn``, done on commit (normal exit), back untouched on
    rollback (exception)."""
    statement = s.take(queue, n)
    async with conn.transaction():
        yield [TakenJob(*row) for row in await arun(conn, statement)]
