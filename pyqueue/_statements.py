"""Every client call of pyqueue written once, whatever the I/O.

Each function here has the name, the arguments and the documentation of a
public call, checks its arguments and returns the :class:`~pyqueue._db.Statement`
to send: the SQL text (``pyqueue._queries``), its parameters
(``pyqueue._arguments``) and what the answer becomes.

``tools/client_calls.py`` (``make client``) writes, from each builder, the
function of :mod:`pyqueue.client` that sends its statement on a sync
connection and the one of :mod:`pyqueue._aioclient` that sends it on an
asyncio one: the builder's name, parameters and docstring, with the
connection first. Add or change a call here, then run ``make client``
(``tests/test_layout.py`` fails until you do). A claimed job's methods send
the lease statements on the connection it was claimed through.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from pyqueue import _arguments as a
from pyqueue import _checks as check
from pyqueue import _hooks
from pyqueue import _queries as q
from pyqueue._db import Claimed, Statement
from pyqueue.defaults import REAP_BATCH
from pyqueue.errors import InvalidPeriodicName


@dataclass(frozen=True)
class QueueStats:
    """One row of ``jobq.stats``; ``oldest_ready_age`` is None when no job is
    ready; ``waiting`` counts the jobs waiting for their parents or batch
    members. (An older jobq says 0 for both: its rows lack them.)"""

    queue: str
    ready: int
    scheduled: int
    running: int
    dead: int
    oldest_ready_age: timedelta | None
    waiting: int = 0

    @classmethod
    def _from_row(cls, row: Mapping[str, Any]) -> QueueStats:
        """From a row of jobq.stats, whatever columns its version has."""
        return cls(**{name: row[name] for name in STATS_FIELDS if name in row})


STATS_FIELDS = tuple(QueueStats.__dataclass_fields__)


@dataclass(frozen=True)
class Schedule:
    """One periodic job of ``jobq.schedules`` (registered with :func:`every`).

    ``runner`` is 'pg_cron' or 'workers' (who enqueues its ticks);
    ``runner``, ``next_run_at`` and ``last_run_at`` are None on a jobq
    older than these columns.
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


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _as_claimed(claimed: Claimed) -> Claimed:
    return claimed


def _ids(rows: list[tuple[Any, ...]]) -> list[int]:
    return [int(row[0]) for row in rows]


# --- producers -------------------------------------------------------------------

def enqueue(
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
) -> Statement[int]:
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
    sql, params = a.enqueue_query(queue, payload, delay=delay, run_at=run_at, priority=priority,
                                  max_attempts=max_attempts, key=key, group_key=group_key,
                                  timeout=timeout, unique_for=unique_for, depends_on=depends_on,
                                  on_parent_failure=on_parent_failure, meta=meta, fair_key=fair_key,
                                  on_duplicate=on_duplicate)
    if (producer := _hooks.producer) is None:
        return Statement(sql, params, "scalar", int)
    span, traced = producer.send(queue, "enqueue", meta)
    if traced is not None:
        sql, params = a.enqueue_query(queue, payload, delay=delay, run_at=run_at, priority=priority,
                                      max_attempts=max_attempts, key=key, group_key=group_key,
                                      timeout=timeout, unique_for=unique_for, depends_on=depends_on,
                                      on_parent_failure=on_parent_failure, meta=traced, fair_key=fair_key,
                                      on_duplicate=on_duplicate)
    return Statement(sql, params, "scalar", int, span)


def enqueue_many(
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
) -> Statement[list[int]]:
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
    sql, params = a.enqueue_many_query(queue, payloads, delay=delay, run_at=run_at, priority=priority,
                                       max_attempts=max_attempts, keys=keys, group_key=group_key,
                                       timeout=timeout, unique_for=unique_for, depends_on=depends_on,
                                       on_parent_failure=on_parent_failure, metas=metas, fair_keys=fair_keys,
                                       on_duplicate=on_duplicate)
    if (producer := _hooks.producer) is None:
        return Statement(sql, params, "tuples", _ids)
    span, traced = producer.send_many(queue, metas, len(payloads))
    if traced is not None:
        sql, params = a.enqueue_many_query(queue, payloads, delay=delay, run_at=run_at, priority=priority,
                                           max_attempts=max_attempts, keys=keys, group_key=group_key,
                                           timeout=timeout, unique_for=unique_for, depends_on=depends_on,
                                           on_parent_failure=on_parent_failure, metas=traced,
                                           fair_keys=fair_keys, on_duplicate=on_duplicate)
    return Statement(sql, params, "tuples", _ids, span)


# --- workers: claim and the lease -------------------------------------------------

def claim(
    queue: str | Sequence[str],
    n: int = 1,
    *,
    worker: str | None = None,
    lease: timedelta | float | None = None,
) -> Statement[Claimed]:
    """Lease up to ``n`` ready jobs of one queue or several, most urgent first.

    ``worker`` (default ``host:pid``) is recorded on the jobs; ``lease``
    (timedelta or seconds) defaults to the queue's setting. The jobs'
    methods use ``conn``. A job whose payload Python cannot decode (nested
    deeper than its recursion limit) is failed with that error and left out.
    """
    sql, params = q.claim_query(queue, n, worker, lease)
    return Statement(sql, params, "claimed", _as_claimed)


def complete(job_id: int, lease_token: UUID | str, result: Any = None) -> Statement[bool]:
    """Acknowledge success; False when the lease was lost or the id is unknown.

    ``result``: any JSON value (dict, list, str, number, bool) kept as the
    job's result (:func:`result`, :func:`wait`, :func:`parent_results`);
    None: no result. A result over the queue's
    max_payload_bytes raises :class:`~pyqueue.PayloadTooLarge` and the job
    stays running."""
    sql, params = a.complete_params(job_id, lease_token, result)
    return Statement(sql, params, "scalar", bool)


def complete_many(
    held: Sequence[tuple[int, UUID]], results: Sequence[Any] | None = None
) -> Statement[int]:
    """Acknowledge many jobs, each ``(job_id, lease_token)``, in one statement;
    how many still held their lease. ``results``: one result (or None) per
    job, as for :func:`complete`. (The client calls mark the jobs
    acknowledged once it ran.)"""
    sql, params = a.many_complete_params(held, results)
    return Statement(sql, params, "scalar", int)


def fail(
    job_id: int, lease_token: UUID | str, error: str, *, retry_at: datetime | None = None
) -> Statement[bool]:
    """Record a failed attempt (retry after backoff or at ``retry_at``, or dead
    letter when out of attempts); False when the lease was lost."""
    return Statement(q.FAIL, a.fail_params(job_id, lease_token, error, retry_at), "scalar", bool)


def heartbeat(
    job_id: int, lease_token: UUID | str, extend: timedelta | float | None = None
) -> Statement[bool]:
    """Extend a lease to now + ``extend`` (timedelta or seconds; default: the
    queue's lease); False when lost."""
    return Statement(q.HEARTBEAT, a.heartbeat_params(job_id, lease_token, extend), "scalar", bool)


def progress(job_id: int, lease_token: UUID | str, progress: Any) -> Statement[bool]:
    """Store the progress of a running job held under ``lease_token``: any
    JSON value (None clears it), over the queue's ``max_payload_bytes``
    raises PayloadTooLarge; False when the lease was lost (jobq 0.11.0)."""
    return Statement(q.PROGRESS, a.progress_params(job_id, lease_token, progress), "scalar", bool)


def release(job_id: int, lease_token: UUID | str) -> Statement[bool]:
    """Give a claimed, unstarted job back without spending an attempt."""
    return Statement(q.RELEASE, a.lease_params(job_id, lease_token), "scalar", bool)


def snooze(
    job_id: int,
    lease_token: UUID | str,
    delay: timedelta | float | None = None,
    *,
    run_at: datetime | None = None,
) -> Statement[bool]:
    """Put a held job back until now + ``delay`` (or ``run_at``) without spending
    an attempt; False when the lease was lost."""
    return Statement(q.SNOOZE, a.snooze_params(job_id, lease_token, delay, run_at), "scalar", bool)


def take(queue: str, n: int = 1) -> Statement[list[tuple[Any, ...]]]:
    """Remove up to ``n`` ready jobs in the caller's transaction: the rows of
    :class:`~pyqueue.TakenJob` (``pyqueue.take`` documents the whole)."""
    return Statement(q.TAKE, a.take_params(queue, n), "tuples", list)


# --- periodic jobs -------------------------------------------------------------------

def every(
    name: str,
    schedule: str,
    queue: str,
    payload: Mapping[str, Any] | None = None,
    *,
    priority: int = 0,
    max_attempts: int | None = None,
    runner: str | None = None,
) -> Statement[int | None]:
    """Enqueue ``payload`` on ``queue`` at every tick of a cron ``schedule``;
    one active copy at a time. Re-using a name updates it.

    ``runner``: ``'pg_cron'``, or ``'workers'`` to have pyqueue workers
    enqueue the ticks (each tick once, however many workers run); None:
    pg_cron when installed, else the workers. Sent only when given (so the
    call works on a jobq older than runners).
    Returns the pg_cron job id, or None when the workers run it."""
    sql, params = a.every_query(name, schedule, queue, payload, priority=priority,
                                max_attempts=max_attempts, runner=runner)
    return Statement(sql, params, "scalar", _optional_int)


def unschedule(name: str) -> Statement[bool]:
    """Remove a periodic job registered with :func:`every`; False when unknown."""
    return Statement(q.UNSCHEDULE, (check.text(name, "name", InvalidPeriodicName),), "scalar", bool)


def schedules() -> Statement[list[Schedule]]:
    """The periodic jobs registered with :func:`every`, by name."""
    return Statement(q.SCHEDULES, None, "dicts", lambda rows: [Schedule._from_row(row) for row in rows])


# --- operators ---------------------------------------------------------------------

def retry(job_id: int) -> Statement[bool]:
    """Run a dead, cancelled or waiting job again now; False for running,
    completed or unknown jobs."""
    return Statement(q.RETRY, (check.job_id(job_id),), "scalar", bool)


def retry_dead(queue: str) -> Statement[int]:
    """Bring back every dead job of a queue with fresh attempts; how many."""
    return Statement(q.RETRY_DEAD, (check.queue_name(queue),), "scalar", int)


def cancel(job_id: int) -> Statement[bool]:
    """Cancel a live job (its holder loses the lease); False for finished or unknown ids."""
    return Statement(q.CANCEL, (check.job_id(job_id),), "scalar", bool)


def cancel_jobs(
    queue: str, *, status: str | None = None, payload_contains: Mapping[str, Any] | None = None,
    meta_contains: Mapping[str, Any] | None = None,
) -> Statement[int]:
    """Cancel the live jobs of a queue; how many.

    ``status`` narrows it to 'ready', 'scheduled' or 'running' jobs (None:
    all three); ``payload_contains`` to jobs whose payload contains that
    JSON object (jsonb ``@>``: ``{"tenant": 7}`` matches any payload with
    tenant 7); ``meta_contains`` (jobq 0.12.0) to jobs whose meta contains
    that object. Holders of running jobs lose their lease.
    """
    return Statement(q.CANCEL_JOBS if meta_contains is None else q.CANCEL_JOBS_META,
                     a.cancel_jobs_params(queue, status, payload_contains, meta_contains), "scalar", int)


def discard_dead(queue: str, *, older_than: timedelta | float | None = None) -> Statement[int]:
    """Delete the dead jobs of a queue, or only those dead for longer than
    ``older_than`` (timedelta or seconds); how many."""
    return Statement(q.DISCARD_DEAD, a.discard_dead_params(queue, older_than), "scalar", int)


def pause(queue: str) -> Statement[bool]:
    """Stop claims from a queue; True when it was not paused before."""
    return Statement(q.PAUSE, (check.queue_name(queue),), "scalar", bool)


def resume(queue: str) -> Statement[bool]:
    """Let workers claim from a paused queue again, and wake them."""
    return Statement(q.RESUME, (check.queue_name(queue),), "scalar", bool)


def reap(n: int = REAP_BATCH) -> Statement[int]:
    """Return up to ``n`` jobs whose lease expired to their queue (or to dead
    letter when out of attempts); how many."""
    return Statement(q.REAP, (check.batch_size(n),), "scalar", int)


def stats() -> Statement[list[QueueStats]]:
    """``jobq.stats``, one entry per queue, by queue name."""
    return Statement(q.STATS, None, "dicts", lambda rows: [QueueStats._from_row(row) for row in rows])


def configure_queue(queue: str, **settings: Any) -> Statement[dict[str, Any]]:
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
    sql, params = a.configure_query(queue, settings)
    return Statement(sql, params, "dicts", lambda rows: rows[0])
