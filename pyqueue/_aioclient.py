"""The asyncio twins of :mod:`pyqueue.client` (exported by :mod:`pyqueue.aio`).

Same SQL, same argument checks (``pyqueue._queries``), same return values;
each call runs one statement on the caller's ``AsyncConnection`` and never
commits for the caller.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg

from pyqueue import _checks as check
from pyqueue import _queries as q
from pyqueue._db import aclaimed_rows, adicts, ascalar, atuples, undecodable
from pyqueue.client import QueueStats, Schedule
from pyqueue.defaults import REAP_BATCH
from pyqueue.errors import InvalidPeriodicName, translate_errors
from pyqueue.job import AsyncJob, TakenJob

AsyncConnection = psycopg.AsyncConnection[Any]

__all__ = [
    "cancel",
    "cancel_jobs",
    "claim",
    "complete",
    "complete_many",
    "configure_queue",
    "discard_dead",
    "enqueue",
    "enqueue_many",
    "every",
    "fail",
    "heartbeat",
    "pause",
    "reap",
    "release",
    "resume",
    "retry",
    "retry_dead",
    "schedules",
    "snooze",
    "stats",
    "take",
    "unschedule",
]


@contextlib.asynccontextmanager
async def take(conn: AsyncConnection, queue: str, n: int = 1) -> AsyncIterator[list[TakenJob]]:
    """The asyncio twin of :func:`pyqueue.take`: up to ``n`` jobs removed inside
    a transaction on ``conn``, done on commit (normal exit), back untouched on
    rollback (exception)."""
    params = q.take_params(queue, n)
    async with conn.transaction():
        with translate_errors():
            rows = await atuples(conn, q.TAKE, params)
        yield [TakenJob(*row) for row in rows]


async def enqueue(
    conn: AsyncConnection,
    queue: str,
    payload: Mapping[str, Any],
    *,
    delay: timedelta | float | None = None,
    run_at: datetime | None = None,
    priority: int = 0,
    max_attempts: int | None = None,
    key: str | None = None,
    group_key: str | None = None,
    timeout: timedelta | float | None = None,
    unique_for: timedelta | float | None = None,
) -> int:
    """Add a job in the caller's transaction; its id (see :func:`pyqueue.enqueue`)."""
    query, params = q.enqueue_query(queue, payload, delay=delay, run_at=run_at, priority=priority,
                                    max_attempts=max_attempts, key=key, group_key=group_key,
                                    timeout=timeout, unique_for=unique_for)
    with translate_errors():
        return int(await ascalar(conn, query, params))


async def enqueue_many(
    conn: AsyncConnection,
    queue: str,
    payloads: Sequence[Mapping[str, Any]],
    *,
    delay: timedelta | float | None = None,
    run_at: datetime | None = None,
    priority: int = 0,
    max_attempts: int | None = None,
    keys: Sequence[str | None] | None = None,
    group_key: str | None = None,
    timeout: timedelta | float | None = None,
    unique_for: timedelta | float | None = None,
) -> list[int]:
    """Add one job per payload in one statement (see :func:`pyqueue.enqueue_many`)."""
    query, params = q.enqueue_many_query(queue, payloads, delay=delay, run_at=run_at, priority=priority,
                                         max_attempts=max_attempts, keys=keys, group_key=group_key,
                                         timeout=timeout, unique_for=unique_for)
    with translate_errors():
        return [int(row[0]) for row in await atuples(conn, query, params)]


async def claim(
    conn: AsyncConnection,
    queue: str | Sequence[str],
    n: int = 1,
    *,
    worker: str | None = None,
    lease: timedelta | float | None = None,
) -> list[AsyncJob]:
    """Lease up to ``n`` ready jobs (see :func:`pyqueue.claim`); their methods use ``conn``."""
    query, params = q.claim_query(queue, n, worker, lease)
    with translate_errors():
        rows = await aclaimed_rows(conn, query, params)

    @contextlib.asynccontextmanager
    async def same_connection() -> AsyncIterator[AsyncConnection]:
        yield conn

    jobs = [AsyncJob._claimed(q.split_claimed_row(row), same_connection) for row in rows]
    for job in jobs:
        if (error := undecodable(job.payload)) is not None:
            await job.fail(error)
    return [job for job in jobs if undecodable(job.payload) is None]


async def complete(conn: AsyncConnection, job_id: int, lease_token: UUID | str) -> bool:
    params = q.lease_params(job_id, lease_token)
    with translate_errors():
        return bool(await ascalar(conn, q.COMPLETE, params))


async def complete_many(conn: AsyncConnection, jobs: Sequence[AsyncJob]) -> int:
    if not jobs:
        return 0
    ids, tokens = q.many_lease_params([(job.id, job.lease_token) for job in jobs])
    with translate_errors():
        done = int(await ascalar(conn, q.COMPLETE_MANY, (ids, tokens)))
    for job in jobs:
        job._mark_acknowledged()
    return done


async def fail(
    conn: AsyncConnection,
    job_id: int,
    lease_token: UUID | str,
    error: str,
    *,
    retry_at: datetime | None = None,
) -> bool:
    params = q.fail_params(job_id, lease_token, error, retry_at)
    with translate_errors():
        return bool(await ascalar(conn, q.FAIL, params))


async def heartbeat(
    conn: AsyncConnection, job_id: int, lease_token: UUID | str, extend: timedelta | float | None = None
) -> bool:
    params = q.heartbeat_params(job_id, lease_token, extend)
    with translate_errors():
        return bool(await ascalar(conn, q.HEARTBEAT, params))


async def release(conn: AsyncConnection, job_id: int, lease_token: UUID | str) -> bool:
    params = q.lease_params(job_id, lease_token)
    with translate_errors():
        return bool(await ascalar(conn, q.RELEASE, params))


async def snooze(
    conn: AsyncConnection,
    job_id: int,
    lease_token: UUID | str,
    delay: timedelta | float | None = None,
    *,
    run_at: datetime | None = None,
) -> bool:
    """Put a held job back for later without spending an attempt (see :func:`pyqueue.snooze`)."""
    params = q.snooze_params(job_id, lease_token, delay, run_at)
    with translate_errors():
        return bool(await ascalar(conn, q.SNOOZE, params))


async def reap(conn: AsyncConnection, n: int = REAP_BATCH) -> int:
    params = (q.batch_size(n),)
    with translate_errors():
        return int(await ascalar(conn, q.REAP, params))


async def stats(conn: AsyncConnection) -> list[QueueStats]:
    with translate_errors():
        rows = await adicts(conn, q.STATS)
    return [QueueStats(**row) for row in rows]


async def every(
    conn: AsyncConnection,
    name: str,
    schedule: str,
    queue: str,
    payload: Mapping[str, Any] | None = None,
    *,
    priority: int = 0,
    max_attempts: int | None = None,
    runner: str | None = None,
) -> int | None:
    """Register a periodic job (see :func:`pyqueue.every`)."""
    query, params = q.every_query(name, schedule, queue, payload, priority=priority,
                                  max_attempts=max_attempts, runner=runner)
    with translate_errors():
        jobid = await ascalar(conn, query, params)
    return None if jobid is None else int(jobid)


async def unschedule(conn: AsyncConnection, name: str) -> bool:
    params = (check.text(name, "name", InvalidPeriodicName),)
    with translate_errors():
        return bool(await ascalar(conn, q.UNSCHEDULE, params))


async def schedules(conn: AsyncConnection) -> list[Schedule]:
    with translate_errors():
        rows = await adicts(conn, q.SCHEDULES)
    return [Schedule._from_row(row) for row in rows]


async def retry(conn: AsyncConnection, job_id: int) -> bool:
    params = (check.job_id(job_id),)
    with translate_errors():
        return bool(await ascalar(conn, q.RETRY, params))


async def retry_dead(conn: AsyncConnection, queue: str) -> int:
    params = (q.queue_name(queue),)
    with translate_errors():
        return int(await ascalar(conn, q.RETRY_DEAD, params))


async def cancel(conn: AsyncConnection, job_id: int) -> bool:
    params = (check.job_id(job_id),)
    with translate_errors():
        return bool(await ascalar(conn, q.CANCEL, params))


async def cancel_jobs(
    conn: AsyncConnection,
    queue: str,
    *,
    status: str | None = None,
    payload_contains: Mapping[str, Any] | None = None,
) -> int:
    """Cancel the live jobs of a queue; how many (see :func:`pyqueue.cancel_jobs`)."""
    params = q.cancel_jobs_params(queue, status, payload_contains)
    with translate_errors():
        return int(await ascalar(conn, q.CANCEL_JOBS, params))


async def discard_dead(
    conn: AsyncConnection, queue: str, *, older_than: timedelta | float | None = None
) -> int:
    """Delete dead jobs of a queue; how many (see :func:`pyqueue.discard_dead`)."""
    params = q.discard_dead_params(queue, older_than)
    with translate_errors():
        return int(await ascalar(conn, q.DISCARD_DEAD, params))


async def pause(conn: AsyncConnection, queue: str) -> bool:
    params = (q.queue_name(queue),)
    with translate_errors():
        return bool(await ascalar(conn, q.PAUSE, params))


async def resume(conn: AsyncConnection, queue: str) -> bool:
    params = (q.queue_name(queue),)
    with translate_errors():
        return bool(await ascalar(conn, q.RESUME, params))


async def configure_queue(conn: AsyncConnection, queue: str, **settings: Any) -> dict[str, Any]:
    """Set some of a queue's settings (see :func:`pyqueue.configure_queue`)."""
    query, params = q.configure_query(queue, settings)
    with translate_errors():
        rows = await adicts(conn, query, params)
    return rows[0]
