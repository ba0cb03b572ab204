"""The SQL pyqueue sends, and the argument checks and row conversions that
the sync and async APIs share: one text per operation, whatever the I/O."""

from __future__ import annotations

import math
import os
import socket
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb

from pyqueue.defaults import CHANNEL, MAX_ERROR_CHARS

# run_at: an explicit time, else now() + delay, else now(); computed in the
# database so that the client's clock never matters.
_RUN_AT = "coalesce(%(run_at)s::timestamptz, now() + %(delay)s::interval, now())"

# group_key (jobq 0.2) is passed by name, and only when given, so that the
# same calls work on a database still at jobq 0.1.
_GROUP_ARG = ", group_key => %(group_key)s::text"
_ENQUEUE = (
    "SELECT jobq.enqueue(%(queue)s::text, %(payload)s::jsonb, " + _RUN_AT + ", "
    "%(priority)s::integer, %(max_attempts)s::integer, %(key)s::text{group})"
)
_ENQUEUE_MANY = (
    "SELECT e.id FROM jobq.enqueue_many(%(queue)s::text, %(payloads)s::jsonb[], " + _RUN_AT + ", "
    "%(priority)s::integer, %(max_attempts)s::integer, %(keys)s::text[]{group}) "
    "WITH ORDINALITY AS e(id, ord) ORDER BY e.ord"
)
ENQUEUE = _ENQUEUE.format(group="")
ENQUEUE_MANY = _ENQUEUE_MANY.format(group="")

# The claimed rows, plus how long their lease runs from now on (in seconds,
# on the database clock, a hair under the lease granted), for the heartbeat.
_CLAIM = (
    "SELECT c.*, extract(epoch FROM c.lease_expires_at - clock_timestamp())::float8 AS lease_seconds "
    "FROM jobq.claim({queues}, %(n)s::integer, %(worker)s::text, %(lease)s::interval) AS c "
    "ORDER BY c.priority, c.run_at, c.id"
)
CLAIM_ONE = _CLAIM.format(queues="%(queues)s::text")
CLAIM_MANY = _CLAIM.format(queues="%(queues)s::text[]")

COMPLETE = "SELECT jobq.complete(%s::bigint, %s::uuid)"
COMPLETE_MANY = "SELECT jobq.complete_many(%s::bigint[], %s::uuid[])"
FAIL = "SELECT jobq.fail(%s::bigint, %s::text, %s::uuid, %s::timestamptz)"
FAIL_MANY = (
    "SELECT f.id, jobq.fail(f.id, f.error, f.lease_token) "
    "FROM unnest(%s::bigint[], %s::text[], %s::uuid[]) AS f(id, error, lease_token)"
)
HEARTBEAT = "SELECT jobq.heartbeat(%s::bigint, %s::uuid, %s::interval)"
HEARTBEAT_MANY = (
    "SELECT h.id, jobq.heartbeat(h.id, h.lease_token, h.extend) "
    "FROM unnest(%s::bigint[], %s::uuid[], %s::interval[]) AS h(id, lease_token, extend)"
)
RELEASE = "SELECT jobq.release(%s::bigint, %s::uuid)"
SNOOZE = "SELECT jobq.snooze(%(id)s::bigint, %(lease_token)s::uuid, " + _RUN_AT + ")"
RELEASE_MANY = (
    "SELECT r.id, jobq.release(r.id, r.lease_token) "
    "FROM unnest(%s::bigint[], %s::uuid[]) AS r(id, lease_token)"
)
REAP = "SELECT jobq.reap(%s::integer)"
# Seconds until the next scheduled job of these queues is due (NULL: none),
# measured on the database clock.
NEXT_RUN_IN = "SELECT extract(epoch FROM jobq.next_run_at(%s::text[]) - clock_timestamp())::float8"
LISTEN = f"LISTEN {CHANNEL}"
# The first responder: of the idle workers LISTENing for the same queues, the
# one holding this session-level advisory lock (on its LISTEN connection)
# claims at once when a NOTIFY comes; the others wait FOLLOWER_DELAY first.
RESPONDER_LOCK = "SELECT pg_try_advisory_lock(1785684596, hashtext(%s::text))"
RESPONDER_UNLOCK = "SELECT pg_advisory_unlock(1785684596, hashtext(%s::text))"

RETRY = "SELECT jobq.retry(%s::bigint)"
RETRY_DEAD = "SELECT jobq.retry_dead(%s::text)"
CANCEL = "SELECT jobq.cancel(%s::bigint)"
PAUSE = "SELECT jobq.pause(%s::text)"
RESUME = "SELECT jobq.resume(%s::text)"
# take(): the job columns except the lease (a taken job holds no lease).
TAKEN_COLUMNS = (
    "id", "queue", "payload", "priority", "attempts", "max_attempts", "run_at", "created_at",
    "job_key", "last_error", "group_key",
)
TAKE = "SELECT " + ", ".join(TAKEN_COLUMNS) + " FROM jobq.take(%s::text, %s::integer)"
# In-transaction workers: one savepoint per job inside the transaction that
# took the batch. Releasing a job's savepoint and opening the next one's go
# in one round trip (no parameters: the simple protocol runs both).
SAVEPOINT = "SAVEPOINT jobq_job"
RELEASE_SAVEPOINT = "RELEASE SAVEPOINT jobq_job"
NEXT_SAVEPOINT = "RELEASE SAVEPOINT jobq_job; SAVEPOINT jobq_job"
UNDO_SAVEPOINT = "ROLLBACK TO SAVEPOINT jobq_job; RELEASE SAVEPOINT jobq_job"
# jobq 0.3: row-lock ready jobs for this transaction (no lease, nothing written),
# then settle each before the commit: done, or a failed attempt (backoff or dead letter).
HOLD = "SELECT " + ", ".join(TAKEN_COLUMNS) + " FROM jobq.hold(%s::text, %s::integer)"
COMPLETE_HELD = "SELECT jobq.complete_held(%s::bigint[])"
FAIL_HELD = "SELECT jobq.fail_held(%s::bigint, %s::text)"
EVERY = (
    "SELECT jobq.every(%(name)s::text, %(schedule)s::text, %(queue)s::text, %(payload)s::jsonb, "
    "%(priority)s::integer, %(max_attempts)s::integer)"
)
UNSCHEDULE = "SELECT jobq.unschedule(%s::text)"
SCHEDULES = (
    "SELECT name, schedule, queue, payload, priority, max_attempts, created_at, updated_at "
    "FROM jobq.schedules ORDER BY name"
)
STATS = (
    "SELECT queue, ready, scheduled, running, dead, oldest_ready_age "
    "FROM jobq.stats ORDER BY queue"
)

# configure_queue's settings and the SQL type of each.
QUEUE_SETTINGS: dict[str, str] = {
    "max_attempts": "integer",
    "backoff_base": "interval",
    "backoff_cap": "interval",
    "backoff_jitter": "double precision",
    "lease": "interval",
    "retention": "interval",
    "dead_retention": "interval",
    "max_payload_bytes": "integer",
    "concurrency": "integer",  # jobq 0.2; 0 removes the limit
    "rate_limit": "integer",  # jobq 0.2; 0 removes the limit
    "rate_interval": "interval",  # jobq 0.2
}

JOB_COLUMNS = (
    "id", "queue", "payload", "priority", "attempts", "max_attempts", "run_at", "created_at",
    "lease_token", "lease_expires_at", "worker", "job_key", "last_error",
)
JOB_COLUMNS_SINCE_0_2 = ("group_key",)  # absent when the database still runs jobq 0.1


def seconds_to_interval(value: timedelta | float, name: str) -> timedelta:
    """A duration given as a timedelta or as seconds, as a timedelta."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name} must be a timedelta or a finite number of seconds, got {value!r}")
    return timedelta(seconds=value)


def schedule_params(delay: timedelta | float | None, run_at: datetime | None) -> dict[str, Any]:
    """The run_at/delay query parameters; delay and run_at exclude each other."""
    if delay is not None and run_at is not None:
        raise ValueError("pass either delay or run_at, not both")
    if run_at is not None and (run_at.tzinfo is None or run_at.utcoffset() is None):
        raise ValueError("run_at must be timezone-aware (e.g. datetime.now(timezone.utc))")
    return {
        "run_at": run_at,
        "delay": None if delay is None else seconds_to_interval(delay, "delay"),
    }


def enqueue_query(
    queue: str,
    payload: Mapping[str, Any],
    *,
    delay: timedelta | float | None,
    run_at: datetime | None,
    priority: int,
    max_attempts: int | None,
    key: str | None,
    group_key: str | None,
) -> tuple[str, dict[str, Any]]:
    params = {
        "queue": queue,
        "payload": Jsonb(payload),
        **schedule_params(delay, run_at),
        "priority": priority,
        "max_attempts": max_attempts,
        "key": key,
        "group_key": group_key,
    }
    return (ENQUEUE if group_key is None else _ENQUEUE.format(group=_GROUP_ARG)), params


def enqueue_many_query(
    queue: str,
    payloads: Sequence[Mapping[str, Any]],
    *,
    delay: timedelta | float | None,
    run_at: datetime | None,
    priority: int,
    max_attempts: int | None,
    keys: Sequence[str | None] | None,
    group_key: str | None,
) -> tuple[str, dict[str, Any]]:
    params = {
        "queue": queue,
        "payloads": [Jsonb(p) for p in payloads],
        **schedule_params(delay, run_at),
        "priority": priority,
        "max_attempts": max_attempts,
        "keys": None if keys is None else list(keys),
        "group_key": group_key,
    }
    return (ENQUEUE_MANY if group_key is None else _ENQUEUE_MANY.format(group=_GROUP_ARG)), params


def snooze_params(
    job_id: int, lease_token: UUID, delay: timedelta | float | None, run_at: datetime | None
) -> dict[str, Any]:
    if delay is None and run_at is None:
        raise ValueError("snooze needs a delay or a run_at")
    return {"id": job_id, "lease_token": lease_token, **schedule_params(delay, run_at)}


def default_worker_name() -> str:
    """``host:pid``, what a worker records on the jobs it claims."""
    return f"{socket.gethostname()}:{os.getpid()}"


def claim_query(
    queue: str | Sequence[str], n: int, worker: str | None, lease: timedelta | None
) -> tuple[str, dict[str, Any]]:
    """The claim statement for one queue (text) or several (text[])."""
    queues: str | list[str]
    if isinstance(queue, str):
        query, queues = CLAIM_ONE, queue
    else:
        query, queues = CLAIM_MANY, list(queue)
    params = {
        "queues": queues,
        "n": n,
        "worker": default_worker_name() if worker is None else worker,
        "lease": lease,
    }
    return query, params


@dataclass(frozen=True)
class ClaimedRow:
    """A claimed row split into the Job's fields and the granted lease length."""

    fields: dict[str, Any]
    lease_seconds: float


def split_claimed_row(row: Mapping[str, Any]) -> ClaimedRow:
    fields = {name: row[name] for name in JOB_COLUMNS}
    fields.update({name: row[name] for name in JOB_COLUMNS_SINCE_0_2 if name in row})
    return ClaimedRow(fields, float(row["lease_seconds"]))


def configure_query(queue: str, settings: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """A jobq.configure_queue() call with the given settings in named notation.

    Interval settings take a timedelta or a number of seconds.
    """
    unknown = sorted(set(settings) - set(QUEUE_SETTINGS))
    if unknown:
        raise TypeError(f"unknown queue setting(s) {', '.join(unknown)}; known: {', '.join(QUEUE_SETTINGS)}")
    params: dict[str, Any] = {"queue": queue}
    args = ["queue => %(queue)s::text"]
    for name, sql_type in QUEUE_SETTINGS.items():
        if name not in settings:
            continue
        value = settings[name]
        if sql_type == "interval" and value is not None:
            value = seconds_to_interval(value, name)
        params[name] = value
        args.append(f"{name} => %({name})s::{sql_type}")
    return f"SELECT * FROM jobq.configure_queue({', '.join(args)})", params


def format_error(error: BaseException) -> str:
    """The full traceback text of an exception, cut to what jobq.fail() keeps.

    jobq keeps the first MAX_ERROR_CHARS characters; when a traceback is
    longer, its end (the exception itself) matters most, so the middle goes.
    """
    text = "".join(traceback.format_exception(error))
    if len(text) <= MAX_ERROR_CHARS:
        return text
    marker = "\n[... traceback shortened ...]\n"
    head = 1000
    tail = MAX_ERROR_CHARS - head - len(marker)
    return text[:head] + marker + text[-tail:]


def ids_and_tokens(pairs: Sequence[tuple[int, UUID]]) -> tuple[list[int], list[UUID]]:
    return [p[0] for p in pairs], [p[1] for p in pairs]

