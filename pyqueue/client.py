"""Producer, worker and operator calls on the caller's own connection.

Every function runs one statement on the connection it is given and never
commits: on a connection that is not in autocommit mode the effect belongs
to the caller's transaction (an enqueued job exists iff that transaction
commits; a claim's lease takes hold when it commits). jobq's errors surface
as the typed exceptions of :mod:`pyqueue.errors`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg

from pyqueue import _checks as check
from pyqueue import _queries as q
from pyqueue._db import claimed_rows, dicts, scalar, tuples, undecodable
from pyqueue.defaults import REAP_BATCH
from pyqueue.errors import InvalidPeriodicName, translate_errors
from pyqueue.job import Job, TakenJob

Connection = psycopg.Connection[Any]

__all__ = [
    "QueueStats",
    "Schedule",
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


@dataclass(frozen=True)
class QueueStats:
    """One row of ``jobq.stats``; ``oldest_ready_age`` is None when no job is
    ready (jobq 0.4; older versions say 0)."""

    queue: str
    ready: int
    scheduled: int
    running: int
    dead: int
    oldest_ready_age: timedelta | None


def enqueue(
    conn: Connection,
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
    """Add a job and return its id.

    ``delay`` (a timedelta or non-negative seconds, added to the database's
    now()) and ``run_at`` (timezone-aware) exclude each other; without
    either the job is ready at once. Lower ``priority`` runs first. With
    ``key``, an active job of the queue holding the same key is not
    duplicated: its id is returned instead. Jobs sharing a ``group_key``
    (jobq 0.2) run one at a time, in enqueue order.

    jobq 0.4: ``timeout`` (timedelta or seconds, 1 s .. 1 day) is the longest
    a worker lets the job's handler run (default: the queue's ``timeout``
    setting); ``unique_for`` (with ``key``; 1 s .. 366 days) also
    deduplicates against a job of that key completed within that window,
    returning its id. Both are sent only when given, so the same call works
    on an older jobq.

    Arguments Python cannot send faithfully (NaN in the payload, NUL
    characters, integers beyond the SQL type, a negative delay...) raise the
    typed error the database would use, before anything is sent.
    """
    query, params = q.enqueue_query(queue, payload, delay=delay, run_at=run_at, priority=priority,
                                    max_attempts=max_attempts, key=key, group_key=group_key,
                                    timeout=timeout, unique_for=unique_for)
    with translate_errors():
        return int(scalar(conn, query, params))


def enqueue_many(
    conn: Connection,
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
    """Add one job per payload in one statement; their ids in payload order.

    ``keys`` gives one key (or None) per payload, as ``key`` does for
    :func:`enqueue`; with ``group_key`` the jobs join that serial group in
    payload order; ``timeout`` and ``unique_for`` (jobq 0.4) apply to every
    job, as for :func:`enqueue`.
    """
    query, params = q.enqueue_many_query(queue, payloads, delay=delay, run_at=run_at, priority=priority,
                                         max_attempts=max_attempts, keys=keys, group_key=group_key,
                                         timeout=timeout, unique_for=unique_for)
    with translate_errors():
        return [int(row[0]) for row in tuples(conn, query, params)]


def claim(
    conn: Connection,
    queue: str | Sequence[str],
    n: int = 1,
    *,
    worker: str | None = None,
    lease: timedelta | float | None = None,
) -> list[Job]:
    """Lease up to ``n`` ready jobs of one queue or several, most urgent first.

    ``worker`` (default ``host:pid``) is recorded on the jobs; ``lease``
    (timedelta or seconds) defaults to the queue's setting. The jobs'
    methods use ``conn``. A job whose payload Python cannot decode (nested
    deeper than its recursion limit) is failed with that error and left out.
    """
    query, params = q.claim_query(queue, n, worker, lease)
    with translate_errors():
        rows = claimed_rows(conn, query, params)
    jobs = [Job._claimed(q.split_claimed_row(row), lambda: nullcontext(conn)) for row in rows]
    for job in jobs:
        if (error := undecodable(job.payload)) is not None:
            job.fail(error)
    return [job for job in jobs if undecodable(job.payload) is None]


def complete(conn: Connection, job_id: int, lease_token: UUID | str) -> bool:
    """Acknowledge success; False when the lease was lost or the id is unknown."""
    with translate_errors():
        return bool(scalar(conn, q.COMPLETE, q.lease_params(job_id, lease_token)))


def complete_many(conn: Connection, jobs: Sequence[Job]) -> int:
    """Acknowledge many jobs in one statement; how many still held their lease."""
    if not jobs:
        return 0
    ids, tokens = q.many_lease_params([(job.id, job.lease_token) for job in jobs])
    with translate_errors():
        done = int(scalar(conn, q.COMPLETE_MANY, (ids, tokens)))
    for job in jobs:
        job._mark_acknowledged()
    return done


def fail(
    conn: Connection, job_id: int, lease_token: UUID | str, error: str, *, retry_at: datetime | None = None
) -> bool:
    """Record a failed attempt (retry after backoff or at ``retry_at``, or dead
    letter when out of attempts); False when the lease was lost."""
    params = q.fail_params(job_id, lease_token, error, retry_at)
    with translate_errors():
        return bool(scalar(conn, q.FAIL, params))


def heartbeat(
    conn: Connection, job_id: int, lease_token: UUID | str, extend: timedelta | float | None = None
) -> bool:
    """Extend a lease to now + ``extend`` (timedelta or seconds; default: the
    queue's lease); False when lost."""
    params = q.heartbeat_params(job_id, lease_token, extend)
    with translate_errors():
        return bool(scalar(conn, q.HEARTBEAT, params))


def release(conn: Connection, job_id: int, lease_token: UUID | str) -> bool:
    """Give a claimed, unstarted job back without spending an attempt."""
    with translate_errors():
        return bool(scalar(conn, q.RELEASE, q.lease_params(job_id, lease_token)))


def snooze(
    conn: Connection,
    job_id: int,
    lease_token: UUID | str,
    delay: timedelta | float | None = None,
    *,
    run_at: datetime | None = None,
) -> bool:
    """Put a held job back until now + ``delay`` (or ``run_at``) without spending
    an attempt (jobq 0.2); False when the lease was lost."""
    params = q.snooze_params(job_id, lease_token, delay, run_at)
    with translate_errors():
        return bool(scalar(conn, q.SNOOZE, params))


@dataclass(frozen=True)
class Schedule:
    """One periodic job of ``jobq.schedules`` (registered with :func:`every`).

    jobq 0.4 adds ``runner`` ('pg_cron' or 'workers': who enqueues its
    ticks), ``next_run_at`` and ``last_run_at``; they are None on an older
    database.
    """

    name: str
    schedule: str
    queue: str
    payload: dict[str, Any]
    priority: int
    max_attempts: int | None
    created_at: datetime
    updated_at: datetime
    runner: str | None = None
    next_run_at: datetime | None = None
    last_run_at: datetime | None = None

    @classmethod
    def _from_row(cls, row: Mapping[str, Any]) -> Schedule:
        """From a row of jobq.schedules, whatever columns its version has."""
        return cls(**{name: row[name] for name in SCHEDULE_FIELDS if name in row})


SCHEDULE_FIELDS = tuple(Schedule.__dataclass_fields__)


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
    params = q.take_params(queue, n)
    with conn.transaction():
        with translate_errors():
            rows = tuples(conn, q.TAKE, params)
        yield [TakenJob(*row) for row in rows]


def every(
    conn: Connection,
    name: str,
    schedule: str,
    queue: str,
    payload: Mapping[str, Any] | None = None,
    *,
    priority: int = 0,
    max_attempts: int | None = None,
    runner: str | None = None,
) -> int | None:
    """Enqueue ``payload`` on ``queue`` at every tick of a cron ``schedule``
    (jobq 0.2); one active copy at a time. Re-using a name updates it.

    ``runner`` (jobq 0.4): ``'pg_cron'``, or ``'workers'`` to have pyqueue
    workers enqueue the ticks (each tick once, however many workers run);
    None: pg_cron when installed, else the workers. Sent only when given.
    Returns the pg_cron job id, or None when the workers run it."""
    query, params = q.every_query(name, schedule, queue, payload, priority=priority,
                                  max_attempts=max_attempts, runner=runner)
    with translate_errors():
        jobid = scalar(conn, query, params)
    return None if jobid is None else int(jobid)


def unschedule(conn: Connection, name: str) -> bool:
    """Remove a periodic job registered with :func:`every`; False when unknown."""
    params = (check.text(name, "name", InvalidPeriodicName),)
    with translate_errors():
        return bool(scalar(conn, q.UNSCHEDULE, params))


def schedules(conn: Connection) -> list[Schedule]:
    """The periodic jobs registered with :func:`every`, by name."""
    with translate_errors():
        rows = dicts(conn, q.SCHEDULES)
    return [Schedule._from_row(row) for row in rows]


def retry(conn: Connection, job_id: int) -> bool:
    """Run a dead, cancelled or waiting job again now; False for running,
    completed or unknown jobs."""
    with translate_errors():
        return bool(scalar(conn, q.RETRY, (check.job_id(job_id),)))


def retry_dead(conn: Connection, queue: str) -> int:
    """Bring back every dead job of a queue with fresh attempts; how many."""
    with translate_errors():
        return int(scalar(conn, q.RETRY_DEAD, (q.queue_name(queue),)))


def cancel(conn: Connection, job_id: int) -> bool:
    """Cancel a live job (its holder loses the lease); False for finished or unknown ids."""
    with translate_errors():
        return bool(scalar(conn, q.CANCEL, (check.job_id(job_id),)))


def cancel_jobs(
    conn: Connection,
    queue: str,
    *,
    status: str | None = None,
    payload_contains: Mapping[str, Any] | None = None,
) -> int:
    """Cancel the live jobs of a queue; how many (jobq 0.4).

    ``status`` narrows it to 'ready', 'scheduled' or 'running' jobs (None:
    all three); ``payload_contains`` to jobs whose payload contains that
    JSON object (jsonb ``@>``: ``{"tenant": 7}`` matches any payload with
    tenant 7). Holders of running jobs lose their lease.
    """
    params = q.cancel_jobs_params(queue, status, payload_contains)
    with translate_errors():
        return int(scalar(conn, q.CANCEL_JOBS, params))


def discard_dead(conn: Connection, queue: str, *, older_than: timedelta | float | None = None) -> int:
    """Delete the dead jobs of a queue, or only those dead for longer than
    ``older_than`` (timedelta or seconds); how many (jobq 0.4)."""
    params = q.discard_dead_params(queue, older_than)
    with translate_errors():
        return int(scalar(conn, q.DISCARD_DEAD, params))


def pause(conn: Connection, queue: str) -> bool:
    """Stop claims from a queue (jobq 0.2); True when it was not paused before."""
    with translate_errors():
        return bool(scalar(conn, q.PAUSE, (q.queue_name(queue),)))


def resume(conn: Connection, queue: str) -> bool:
    """Let workers claim from a paused queue again, and wake them (jobq 0.2)."""
    with translate_errors():
        return bool(scalar(conn, q.RESUME, (q.queue_name(queue),)))


def reap(conn: Connection, n: int = REAP_BATCH) -> int:
    """Return up to ``n`` jobs whose lease expired to their queue (or to dead
    letter when out of attempts); how many."""
    with translate_errors():
        return int(scalar(conn, q.REAP, (q.batch_size(n),)))


def stats(conn: Connection) -> list[QueueStats]:
    """``jobq.stats``, one entry per queue, by queue name."""
    with translate_errors():
        rows = dicts(conn, q.STATS)
    return [QueueStats(**row) for row in rows]


def configure_queue(conn: Connection, queue: str, **settings: Any) -> dict[str, Any]:
    """Set some of a queue's settings and return all its effective settings.

    Settings: max_attempts, backoff_base, backoff_cap, backoff_jitter, lease,
    retention, dead_retention, max_payload_bytes, since jobq 0.2
    concurrency, rate_limit, rate_interval, and since jobq 0.4 timeout (the
    default execution timeout of the queue's jobs; 0 removes it); durations
    as timedelta or seconds. Omitted settings stay as they are.
    """
    query, params = q.configure_query(queue, settings)
    with translate_errors():
        rows = dicts(conn, query, params)
    return rows[0]
