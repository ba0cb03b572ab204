"""The SQL pyqueue sends, and the argument checks and row conversions that
the sync and async APIs share: one text per operation, whatever the I/O."""

from __future__ import annotations

import os
import socket
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from pyqueue import _checks as check
from pyqueue.defaults import CHANNEL, MAX_ERROR_CHARS
from pyqueue.errors import (
    InvalidArgument,
    InvalidBatchSize,
    InvalidInterval,
    InvalidJobKey,
    InvalidMaxAttempts,
    InvalidPeriodicName,
    InvalidPriority,
    InvalidQueueName,
    InvalidSetting,
    InvalidTime,
    InvalidWorkerName,
)

# run_at: an explicit time, else now() + delay, else now(); computed in the
# database so that the client's clock never matters.
_RUN_AT = "coalesce(%(run_at)s::timestamptz, now() + %(delay)s::interval, now())"

# Options of later jobq versions are passed by name, and only when given, so
# that the same calls work on a database still at an older version:
# group_key (jobq 0.2), timeout and unique_for (jobq 0.4).
_ENQUEUE_OPTIONS = {"group_key": "text", "timeout": "interval", "unique_for": "interval"}
_ENQUEUE = (
    "SELECT jobq.enqueue(%(queue)s::text, %(payload)s::jsonb, " + _RUN_AT + ", "
    "%(priority)s::integer, %(max_attempts)s::integer, %(key)s::text{options})"
)
_ENQUEUE_MANY = (
    "SELECT e.id FROM jobq.enqueue_many(%(queue)s::text, %(payloads)s::jsonb[], " + _RUN_AT + ", "
    "%(priority)s::integer, %(max_attempts)s::integer, %(keys)s::text[]{options}) "
    "WITH ORDINALITY AS e(id, ord) ORDER BY e.ord"
)
ENQUEUE = _ENQUEUE.format(options="")
ENQUEUE_MANY = _ENQUEUE_MANY.format(options="")

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
# jobq 0.4: enqueue every due tick of the worker-run periodic jobs; seconds
# until the next one is due (NULL: no worker-run schedule), on the database clock.
RUN_SCHEDULES = "SELECT extract(epoch FROM jobq.run_schedules() - clock_timestamp())::float8"
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
_EVERY = (
    "SELECT jobq.every(%(name)s::text, %(schedule)s::text, %(queue)s::text, %(payload)s::jsonb, "
    "%(priority)s::integer, %(max_attempts)s::integer{runner})"
)
EVERY = _EVERY.format(runner="")
UNSCHEDULE = "SELECT jobq.unschedule(%s::text)"
# Every column, whatever the version: jobq 0.4 adds runner, next_run_at and last_run_at.
SCHEDULES = "SELECT * FROM jobq.schedules ORDER BY name"
# jobq 0.4 operator verbs.
CANCEL_JOBS = (
    "SELECT jobq.cancel_jobs(%(queue)s::text, status => %(status)s::text, "
    "payload_contains => %(payload_contains)s::jsonb)"
)
DISCARD_DEAD = "SELECT jobq.discard_dead(%(queue)s::text, older_than => %(older_than)s::interval)"
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
    "timeout": "interval",  # jobq 0.4: the queue's default job timeout; 0 removes it
}

JOB_COLUMNS = (
    "id", "queue", "payload", "priority", "attempts", "max_attempts", "run_at", "created_at",
    "lease_token", "lease_expires_at", "worker", "job_key", "last_error",
)
JOB_COLUMNS_SINCE_0_2 = ("group_key",)  # absent when the database still runs jobq 0.1
JOB_COLUMNS_SINCE_0_4 = ("timeout",)  # the job's execution timeout; absent before jobq 0.4


def schedule_params(delay: timedelta | float | None, run_at: datetime | None) -> dict[str, Any]:
    """The run_at/delay query parameters; delay and run_at exclude each other."""
    if delay is not None and run_at is not None:
        raise check.refuse(InvalidTime, "pass either delay or run_at, not both",
                           "delay counts from the database's now(); run_at is an absolute time.")
    return {"run_at": check.moment(run_at, "run_at"), "delay": check.delay(delay)}


def retry_time(retry_at: datetime | None) -> datetime | None:
    return check.moment(retry_at, "retry_at")


def _enqueue_options(
    group_key: str | None, timeout: timedelta | float | None, unique_for: timedelta | float | None
) -> tuple[str, dict[str, Any]]:
    """The named arguments of later jobq versions that were given, and their values."""
    given = {
        "group_key": check.text(group_key, "group_key", InvalidJobKey),
        "timeout": check.seconds(timeout, "timeout", InvalidInterval),
        "unique_for": check.seconds(unique_for, "unique_for", InvalidInterval),
    }
    given = {name: value for name, value in given.items() if value is not None}
    sql = "".join(f", {name} => %({name})s::{_ENQUEUE_OPTIONS[name]}" for name in given)
    return sql, given


def _job_options(priority: int, max_attempts: int | None) -> dict[str, Any]:
    return {
        "priority": check.integer(priority, "priority", InvalidPriority,
                                  hint="Use a priority in -32768..32767 (lower runs first)."),
        "max_attempts": check.integer(max_attempts, "max_attempts", InvalidMaxAttempts,
                                      hint="Use max_attempts in 1..1000, or None for the queue's setting."),
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
    timeout: timedelta | float | None = None,
    unique_for: timedelta | float | None = None,
) -> tuple[str, dict[str, Any]]:
    options, values = _enqueue_options(group_key, timeout, unique_for)
    params = {
        "queue": check.text(queue, "queue", InvalidQueueName),
        "payload": check.payload(payload),
        **schedule_params(delay, run_at),
        **_job_options(priority, max_attempts),
        "key": check.text(key, "job_key", InvalidJobKey),
        **values,
    }
    return (_ENQUEUE.format(options=options) if options else ENQUEUE), params


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
    timeout: timedelta | float | None = None,
    unique_for: timedelta | float | None = None,
) -> tuple[str, dict[str, Any]]:
    options, values = _enqueue_options(group_key, timeout, unique_for)
    params = {
        "queue": check.text(queue, "queue", InvalidQueueName),
        "payloads": check.payloads(payloads),
        **schedule_params(delay, run_at),
        **_job_options(priority, max_attempts),
        "keys": check.texts(keys, "job_keys", InvalidJobKey),
        **values,
    }
    return (_ENQUEUE_MANY.format(options=options) if options else ENQUEUE_MANY), params


def lease_params(job_id: int, lease_token: UUID | str) -> tuple[int | None, UUID | None]:
    """A job id and its lease token, checked (complete, release)."""
    return check.job_id(job_id), check.lease_token(lease_token)


def fail_params(
    job_id: int, lease_token: UUID | str, error: str, retry_at: datetime | None = None
) -> tuple[Any, ...]:
    """The parameters of FAIL: id, error text, lease token, retry_at."""
    checked_id, token = lease_params(job_id, lease_token)
    return checked_id, check.text(error, "error", InvalidArgument), token, retry_time(retry_at)


def heartbeat_params(
    job_id: int, lease_token: UUID | str, extend: timedelta | float | None
) -> tuple[Any, ...]:
    checked_id, token = lease_params(job_id, lease_token)
    return checked_id, token, check.seconds(extend, "extend", InvalidInterval)


def many_lease_params(pairs: Sequence[tuple[int, UUID]]) -> tuple[list[int | None], list[UUID | None]]:
    """The ids and lease tokens of several jobs (complete_many), checked."""
    ids = [check.job_id(p[0], f"ids[{i}]") for i, p in enumerate(pairs, start=1)]
    tokens = [check.lease_token(p[1], f"lease_tokens[{i}]") for i, p in enumerate(pairs, start=1)]
    return ids, tokens


def snooze_params(
    job_id: int, lease_token: UUID | str, delay: timedelta | float | None, run_at: datetime | None
) -> dict[str, Any]:
    if delay is None and run_at is None:
        raise check.refuse(InvalidTime, "snooze needs a delay or a run_at",
                           "For example job.snooze(60) or job.snooze(run_at=...).")
    checked_id, token = lease_params(job_id, lease_token)
    return {"id": checked_id, "lease_token": token, **schedule_params(delay, run_at)}


def batch_size(n: int, name: str = "n") -> int | None:
    """A batch size (claim, take, reap): an int of the SQL integer range."""
    return check.integer(n, name, InvalidBatchSize)


def queue_name(queue: str) -> str | None:
    return check.text(queue, "queue", InvalidQueueName)


def take_params(queue: str, n: int) -> tuple[str | None, int | None]:
    return queue_name(queue), batch_size(n)


def every_query(
    name: str,
    schedule: str,
    queue: str,
    payload: Mapping[str, Any] | None,
    *,
    priority: int,
    max_attempts: int | None,
    runner: str | None,
) -> tuple[str, dict[str, Any]]:
    """jobq.every(); runner (jobq 0.4) is passed by name, and only when given."""
    params = {
        "name": check.text(name, "name", InvalidPeriodicName),
        "schedule": check.text(schedule, "schedule", InvalidSetting),
        "queue": queue_name(queue),
        "payload": check.payload({} if payload is None else payload),
        **_job_options(priority, max_attempts),
    }
    if runner is None:
        return EVERY, params
    params["runner"] = check.text(runner, "runner", InvalidArgument)
    return _EVERY.format(runner=", runner => %(runner)s::text"), params


def cancel_jobs_params(
    queue: str, status: str | None, payload_contains: Mapping[str, Any] | None
) -> dict[str, Any]:
    return {
        "queue": queue_name(queue),
        "status": check.text(status, "status", InvalidArgument),
        "payload_contains": (None if payload_contains is None
                             else check.payload(payload_contains, "payload_contains", InvalidArgument)),
    }


def discard_dead_params(queue: str, older_than: timedelta | float | None) -> dict[str, Any]:
    return {"queue": queue_name(queue),
            "older_than": check.seconds(older_than, "older_than", InvalidInterval)}


def default_worker_name() -> str:
    """``host:pid``, what a worker records on the jobs it claims."""
    return f"{socket.gethostname()}:{os.getpid()}"


def claim_query(
    queue: str | Sequence[str], n: int, worker: str | None, lease: timedelta | float | None
) -> tuple[str, dict[str, Any]]:
    """The claim statement for one queue (text) or several (text[])."""
    queues = check.queues(queue, InvalidQueueName)
    params = {
        "queues": queues,
        "n": batch_size(n),
        "worker": (default_worker_name() if worker is None
                   else check.text(worker, "worker", InvalidWorkerName)),
        "lease": check.seconds(lease, "lease", InvalidInterval),
    }
    return (CLAIM_MANY if isinstance(queues, list) else CLAIM_ONE), params


@dataclass(frozen=True)
class ClaimedRow:
    """A claimed row split into the Job's fields and the granted lease length."""

    fields: dict[str, Any]
    lease_seconds: float


def split_claimed_row(row: Mapping[str, Any]) -> ClaimedRow:
    fields = {name: row[name] for name in JOB_COLUMNS}
    fields.update({name: row[name] for name in JOB_COLUMNS_SINCE_0_2 + JOB_COLUMNS_SINCE_0_4
                   if name in row})
    return ClaimedRow(fields, float(row["lease_seconds"]))


def configure_query(queue: str, settings: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """A jobq.configure_queue() call with the given settings in named notation.

    Interval settings take a timedelta or a number of seconds.
    """
    unknown = sorted(set(settings) - set(QUEUE_SETTINGS))
    if unknown:
        raise TypeError(f"unknown queue setting(s) {', '.join(unknown)}; known: {', '.join(QUEUE_SETTINGS)}")
    params: dict[str, Any] = {"queue": queue_name(queue)}
    args = ["queue => %(queue)s::text"]
    for name, sql_type in QUEUE_SETTINGS.items():
        if name not in settings:
            continue
        params[name] = _setting(name, sql_type, settings[name])
        args.append(f"{name} => %({name})s::{sql_type}")
    return f"SELECT * FROM jobq.configure_queue({', '.join(args)})", params


def _setting(name: str, sql_type: str, value: Any) -> Any:
    if sql_type == "interval":
        return check.seconds(value, name, InvalidSetting)
    if sql_type == "integer":
        return check.integer(value, name, InvalidSetting)
    return check.real(value, name, InvalidSetting)


def format_error(error: BaseException) -> str:
    """The full traceback text of an exception, cut to what jobq.fail() keeps.

    jobq keeps the first MAX_ERROR_CHARS characters; when a traceback is
    longer, its end (the exception itself) matters most, so the middle goes.
    Characters PostgreSQL text cannot hold (NUL, lone surrogates) are
    written as escapes, so that any exception can be recorded.
    """
    text = printable("".join(traceback.format_exception(error)))
    if len(text) <= MAX_ERROR_CHARS:
        return text
    marker = "\n[... traceback shortened ...]\n"
    head = 1000
    tail = MAX_ERROR_CHARS - head - len(marker)
    return text[:head] + marker + text[-tail:]


def printable(text: str) -> str:
    """text with NUL characters and lone surrogates escaped (\\x00, \\udc80)."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text
