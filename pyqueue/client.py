"""Producer, worker and operator calls on the caller's own connection.

Every function runs one statement on the connection it is given and never
commits: on a connection that is not in autocommit mode the effect belongs
to the caller's transaction (an enqueued job exists iff that transaction
commits; a claim's lease takes hold when it commits). jobq's errors surface
as the typed exceptions of :mod:`pyqueue.errors`.

Each call is written once, as a statement builder of ``pyqueue._statements``
(arguments, checks, SQL, result, documentation); ``tools/client_calls.py``
(``make client``) writes the function that sends it here and its asyncio
twin in ``pyqueue._aioclient``, and ``tests/test_layout.py`` fails when they
are stale. ``complete_many`` and ``take``, whose I/O is their own, are
written by hand in both.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeAlias
from uuid import UUID

from pyqueue import _grant_statements as g
from pyqueue import _statements as s
from pyqueue import _workflow_statements as w
from pyqueue._db import Claimed, run, undecodable
from pyqueue._grant_statements import QueueGrant
from pyqueue._sqlalchemy import Connectable, native
from pyqueue._statements import QueueStats, Schedule
from pyqueue.defaults import REAP_BATCH
from pyqueue.job import Job, TakenJob
from pyqueue.waiting import wait
from pyqueue.workflows import Group, Step, chain, group

# A psycopg connection, or a SQLAlchemy Session or Connection on it (pyqueue._sqlalchemy).
Connection: TypeAlias = Connectable

# The calls (pyqueue.aio has the same names, its twins) and the result types.
__all__ = [
    "Group", "QueueGrant", "QueueStats", "Schedule", "Step", "cancel", "cancel_jobs", "chain", "claim",
    "complete", "complete_many", "configure_queue", "discard_dead", "enqueue", "enqueue_callback",
    "enqueue_many", "every", "fail", "grant_queue", "group", "heartbeat", "parent_results", "pause",
    "progress", "queue_grants", "reap", "release", "result", "resume", "retry", "retry_dead", "revoke_queue",
    "schedules", "snooze", "stats", "status", "take", "unschedule", "wait",
]


def _jobs(conn: Connection, claimed: Claimed) -> list[Job]:
    """The claimed rows as jobs whose methods use ``conn``; a job whose payload
    cannot be decoded is failed with that error and left out."""
    connection = native(conn)
    jobs = Job._from_claim(claimed, lambda: contextlib.nullcontext(connection))
    for job in jobs:
        if (error := undecodable(job.payload)) is not None:
            job.fail(error)
    return [job for job in jobs if undecodable(job.payload) is None]


# --- BEGIN calls written by tools/client_calls.py from their statement builders: do not edit ---


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
    depends_on: Iterable[int] | None = None,
    on_parent_failure: str = "cancel",
    meta: Mapping[str, Any] | None = None,
    fair_key: str | None = None,
    on_duplicate: str = "keep",
) -> int:
    """Add a job and return its id.

    ``delay`` (a timedelta or non-negative seconds, added to the database's
    now()) and ``run_at`` (timezone-aware) exclude each other; without
    either the job is ready at once. Lower ``priority`` runs first. With
    ``key``, an active job of the queue holding the same key is not
    duplicated: its id is returned instead. Jobs sharing a ``group_key``
    run one at a time, in enqueue order.

    ``timeout`` (timedelta or seconds, 1 s .. 1 day) is the longest
    a worker lets the job's handler run (default: the queue's ``timeout``
    setting); ``unique_for`` (with ``key``; 1 s .. 366 days) also
    deduplicates against a job of that key completed within that window,
    returning its id. Both are sent only when given, so the same call works
    on an older jobq.

    With ``depends_on`` (job ids) the job waits (status
    ``waiting``) until every one of those jobs has completed, then becomes
    ready in the transaction that completed the last one. When one of them
    is dead or cancelled, ``on_parent_failure`` decides: ``'cancel'`` (the
    default) cancels the job and its own dependents, ``'run'`` counts the
    failed parent as finished. A parent id jobq never issued raises
    :class:`~pyqueue.UnknownJob`; a None or duplicate id
    :class:`~pyqueue.InvalidDependency`. The job reads its parents' results
    with :func:`parent_results`. See :func:`chain` and :func:`group`.

    ``meta`` (jobq 0.12.0) is a small JSON object kept beside the payload,
    never part of it: tags, the trace context :mod:`pyqueue.tracing`
    writes. Handlers read it as ``job.meta``; ``jobq.jobs``, the dashboard
    and :func:`cancel_jobs` (``meta_contains``) filter by it. It is capped
    like the payload (the queue's ``max_payload_bytes``).

    ``fair_key`` (a tenant or customer id, 1 to 512 characters) is the key
    a fair queue (``configure_queue(queue, fair=True)``, jobq 0.12) serves
    round-robin: one key's backlog never holds up another's. Sent only
    when given.

    ``on_duplicate`` (with ``key``; jobq 0.12) says what a duplicate does:
    ``'keep'`` (the default) returns the job holding the key, unchanged;
    ``'replace'`` gives that job, when it is waiting, ready or scheduled,
    the new payload and meta, run time and priority (debounce: each enqueue
    pushes the run back); ``'replace_payload'`` only the payload and meta
    (throttle: it runs when first planned, with the latest payload). A
    running job is never changed: it hands its key to a new job, whose id
    is returned.

    Arguments Python cannot send faithfully (NaN in the payload, NUL
    characters, integers beyond the SQL type, a negative delay...) raise the
    typed error the database would use, before anything is sent.
    """
    return run(conn, s.enqueue(
        queue, payload, delay=delay, run_at=run_at, priority=priority, max_attempts=max_attempts, key=key,
        group_key=group_key, timeout=timeout, unique_for=unique_for, depends_on=depends_on,
        on_parent_failure=on_parent_failure, meta=meta, fair_key=fair_key, on_duplicate=on_duplicate))


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
    depends_on: Iterable[int] | None = None,
    on_parent_failure: str = "cancel",
    metas: Sequence[Mapping[str, Any]] | None = None,
    fair_keys: Sequence[str | None] | None = None,
    on_duplicate: str = "keep",
) -> list[int]:
    """Add one job per payload in one statement; their ids in payload order.

    ``keys`` gives one key (or None) per payload, as ``key`` does for
    :func:`enqueue`; with ``group_key`` the jobs join that serial group in
    payload order; ``timeout`` and ``unique_for`` apply to every job, as for
    :func:`enqueue`; so do ``depends_on`` and ``on_parent_failure`` (every
    job of the call waits for the same parents), and ``on_duplicate`` (to
    every job with a key; a key given twice in one call: the last wins).
    ``metas`` gives one meta object per payload (see :func:`enqueue`);
    ``fair_keys`` one fair key (or None) per payload, as ``fair_key`` does
    for :func:`enqueue`.
    """
    return run(conn, s.enqueue_many(
        queue, payloads, delay=delay, run_at=run_at, priority=priority, max_attempts=max_attempts, keys=keys,
        group_key=group_key, timeout=timeout, unique_for=unique_for, depends_on=depends_on,
        on_parent_failure=on_parent_failure, metas=metas, fair_keys=fair_keys, on_duplicate=on_duplicate))


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
    return _jobs(conn, run(conn, s.claim(queue, n, worker=worker, lease=lease)))


def complete(conn: Connection, job_id: int, lease_token: UUID | str, result: Any = None) -> bool:
    """Acknowledge success; False when the lease was lost or the id is unknown.

    ``result``: any JSON value (dict, list, str, number, bool) kept as the
    job's result (:func:`result`, :func:`wait`, :func:`parent_results`);
    None: no result. A result over the queue's
    max_payload_bytes raises :class:`~pyqueue.PayloadTooLarge` and the job
    stays running."""
    return run(conn, s.complete(job_id, lease_token, result))


def fail(
    conn: Connection,
    job_id: int,
    lease_token: UUID | str,
    error: str,
    *,
    retry_at: datetime | None = None,
) -> bool:
    """Record a failed attempt (retry after backoff or at ``retry_at``, or dead
    letter when out of attempts); False when the lease was lost."""
    return run(conn, s.fail(job_id, lease_token, error, retry_at=retry_at))


def heartbeat(
    conn: Connection,
    job_id: int,
    lease_token: UUID | str,
    extend: timedelta | float | None = None,
) -> bool:
    """Extend a lease to now + ``extend`` (timedelta or seconds; default: the
    queue's lease); False when lost."""
    return run(conn, s.heartbeat(job_id, lease_token, extend))


def progress(conn: Connection, job_id: int, lease_token: UUID | str, progress: Any) -> bool:
    """Store the progress of a running job held under ``lease_token``: any
    JSON value (None clears it), over the queue's ``max_payload_bytes``
    raises PayloadTooLarge; False when the lease was lost (jobq 0.11.0)."""
    return run(conn, s.progress(job_id, lease_token, progress))


def release(conn: Connection, job_id: int, lease_token: UUID | str) -> bool:
    """Give a claimed, unstarted job back without spending an attempt."""
    return run(conn, s.release(job_id, lease_token))


def snooze(
    conn: Connection,
    job_id: int,
    lease_token: UUID | str,
    delay: timedelta | float | None = None,
    *,
    run_at: datetime | None = None,
) -> bool:
    """Put a held job back until now + ``delay`` (or ``run_at``) without spending
    an attempt; False when the lease was lost."""
    return run(conn, s.snooze(job_id, lease_token, delay, run_at=run_at))


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
    """Enqueue ``payload`` on ``queue`` at every tick of a cron ``schedule``;
    one active copy at a time. Re-using a name updates it.

    ``runner``: ``'pg_cron'``, or ``'workers'`` to have pyqueue workers
    enqueue the ticks (each tick once, however many workers run); None:
    pg_cron when installed, else the workers. Sent only when given (so the
    call works on a jobq older than runners).
    Returns the pg_cron job id, or None when the workers run it."""
    return run(conn, s.every(
        name, schedule, queue, payload, priority=priority, max_attempts=max_attempts, runner=runner))


def unschedule(conn: Connection, name: str) -> bool:
    """Remove a periodic job registered with :func:`every`; False when unknown."""
    return run(conn, s.unschedule(name))


def schedules(conn: Connection) -> list[Schedule]:
    """The periodic jobs registered with :func:`every`, by name."""
    return run(conn, s.schedules())


def retry(conn: Connection, job_id: int) -> bool:
    """Run a dead, cancelled or waiting job again now; False for running,
    completed or unknown jobs."""
    return run(conn, s.retry(job_id))


def retry_dead(conn: Connection, queue: str) -> int:
    """Bring back every dead job of a queue with fresh attempts; how many."""
    return run(conn, s.retry_dead(queue))


def cancel(conn: Connection, job_id: int) -> bool:
    """Cancel a live job (its holder loses the lease); False for finished or unknown ids."""
    return run(conn, s.cancel(job_id))


def cancel_jobs(
    conn: Connection,
    queue: str,
    *,
    status: str | None = None,
    payload_contains: Mapping[str, Any] | None = None,
    meta_contains: Mapping[str, Any] | None = None,
) -> int:
    """Cancel the live jobs of a queue; how many.

    ``status`` narrows it to 'ready', 'scheduled' or 'running' jobs (None:
    all three); ``payload_contains`` to jobs whose payload contains that
    JSON object (jsonb ``@>``: ``{"tenant": 7}`` matches any payload with
    tenant 7); ``meta_contains`` (jobq 0.12.0) to jobs whose meta contains
    that object. Holders of running jobs lose their lease.
    """
    return run(conn, s.cancel_jobs(
        queue, status=status, payload_contains=payload_contains, meta_contains=meta_contains))


def discard_dead(conn: Connection, queue: str, *, older_than: timedelta | float | None = None) -> int:
    """Delete the dead jobs of a queue, or only those dead for longer than
    ``older_than`` (timedelta or seconds); how many."""
    return run(conn, s.discard_dead(queue, older_than=older_than))


def pause(conn: Connection, queue: str) -> bool:
    """Stop claims from a queue; True when it was not paused before."""
    return run(conn, s.pause(queue))


def resume(conn: Connection, queue: str) -> bool:
    """Let workers claim from a paused queue again, and wake them."""
    return run(conn, s.resume(queue))


def reap(conn: Connection, n: int = REAP_BATCH) -> int:
    """Return up to ``n`` jobs whose lease expired to their queue (or to dead
    letter when out of attempts); how many."""
    return run(conn, s.reap(n))


def stats(conn: Connection) -> list[QueueStats]:
    """``jobq.stats``, one entry per queue, by queue name."""
    return run(conn, s.stats())


def configure_queue(conn: Connection, queue: str, **settings: Any) -> dict[str, Any]:
    """Set some of a queue's settings and return all its effective settings.

    Settings: max_attempts, backoff_base, backoff_cap, backoff_jitter, lease,
    retention, dead_retention, max_payload_bytes, concurrency, rate_limit,
    rate_interval, timeout (the default execution timeout of the queue's
    jobs; 0 removes it) and result_retention (how long a completed job with
    a result is kept, at least retention; 0 .. 3650 days); durations as
    timedelta or seconds. Fair queues (jobq 0.12): fair (True: claims serve
    the queue's fair keys round-robin; False also drops the two below),
    fair_weights (a dict of fair key to turns per round, 1..1000; {}
    removes them) and per_key_concurrency (running jobs per fair key; 0
    removes the limit). Omitted settings stay as they are.
    """
    return run(conn, s.configure_queue(queue, **settings))


def enqueue_callback(
    conn: Connection,
    queue: str,
    payload: Mapping[str, Any],
    members: Iterable[int],
    *,
    delay: timedelta | float | None = None,
    run_at: datetime | None = None,
    priority: int = 0,
    max_attempts: int | None = None,
    meta: Mapping[str, Any] | None = None,
) -> int:
    """Add a batch callback and return its id.

    The job waits until every job of ``members`` (any queues) has finished
    (completed, dead or cancelled), then becomes ready once, its payload
    extended with ``"batch": {"completed": c, "dead": d, "cancelled": x,
    "members": n}``. ``delay``/``run_at``, ``priority`` and ``max_attempts``
    and ``meta`` are as for :func:`enqueue`. Member ids as for ``depends_on``:
    :class:`~pyqueue.UnknownJob`, :class:`~pyqueue.InvalidDependency`.
    """
    return run(conn, w.enqueue_callback(
        queue, payload, members, delay=delay, run_at=run_at, priority=priority, max_attempts=max_attempts,
        meta=meta))


def result(conn: Connection, job_id: int) -> Any:
    """The result of a completed job (any JSON value, decoded).

    None while the job is unfinished, when it completed without a result (or
    with JSON null), and when it is dead or cancelled (:func:`status` tells
    these apart). :class:`~pyqueue.UnknownJob` for an id jobq never issued
    or has forgotten (kept for the queue's ``result_retention``)."""
    return run(conn, w.result(job_id))


def status(conn: Connection, job_id: int) -> str:
    """The state of a job: 'waiting', 'ready', 'scheduled',
    'running', 'completed', 'dead' or 'cancelled'; :class:`~pyqueue.UnknownJob`
    for an unknown (or forgotten) id."""
    return run(conn, w.status(job_id))


def parent_results(conn: Connection, job_id: int) -> dict[int, Any]:
    """The results of a job's parents (its ``depends_on``): a dict
    from parent id to result, in parent id order; None for a parent without
    a result (yet, or forgotten). Empty for a job without parents;
    :class:`~pyqueue.UnknownJob` for an unknown id."""
    return run(conn, w.parent_results(job_id))


def grant_queue(conn: Connection, role: str, queue_pattern: str, privilege: str) -> bool:
    """Let ``role`` ``privilege`` on the queues ``queue_pattern`` matches
    (as jobq_admin); True when the grant is new.

    ``privilege`` is 'produce' (enqueue, enqueue_many, enqueue_callback),
    'consume' (claim, take, hold) or 'read' (result, status, parent_results,
    watch, the rows of jobq.jobs); ``queue_pattern`` a queue name, or a
    prefix followed by ``*`` ('billing.*'; '*' alone: every queue). Opt-in:
    a queue that grants of a privilege match allows it only to their roles
    (and the roles inheriting from them, and sessions that SET ROLE to
    them) and jobq_admin; others get :class:`~pyqueue.QueuePrivilegeDenied`, or, reading, the
    :class:`~pyqueue.UnknownJob` of an unknown id. Queues no grant matches
    keep the role-level rules.
    """
    return run(conn, g.grant_queue(role, queue_pattern, privilege))


def revoke_queue(conn: Connection, role: str, queue_pattern: str, privilege: str) -> bool:
    """Remove a :func:`grant_queue` grant, named by the same arguments
    (as jobq_admin); True when there was one."""
    return run(conn, g.revoke_queue(role, queue_pattern, privilege))


def queue_grants(conn: Connection) -> list[QueueGrant]:
    """The per-queue privileges, ``jobq.queue_grants``, by pattern."""
    return run(conn, g.queue_grants())


# --- END calls written by tools/client_calls.py ---


def complete_many(conn: Connection, jobs: Sequence[Job], results: Sequence[Any] | None = None) -> int:
    """Acknowledge many jobs in one statement; how many still held their lease.

    ``results``: one result (any JSON value, or None for none) per job, as
    for :func:`complete`."""
    if not jobs:
        return 0
    done = run(conn, s.complete_many([(job.id, job.lease_token) for job in jobs], results))
    for job in jobs:
        job._mark_acknowledged()
    return done


@contextlib.contextmanager
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
    with native(conn).transaction():
        yield [TakenJob(*row) for row in run(conn, statement)]
