"""The SQL pyqueue sends: one text per operation, whatever the I/O (sync,
async, a claimed job's method or a worker's batch); the claim statement;
and the error text a failed attempt records. The
arguments that go with each text are checked in ``pyqueue._arguments``."""

from __future__ import annotations

import os
import socket
import traceback
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from pyqueue import _checks as check
from pyqueue.defaults import CANCEL_CHANNEL, CHANNEL, MAX_ERROR_CHARS
from pyqueue.errors import (
    InvalidInterval,
    InvalidQueueName,
    InvalidWorkerName,
)

# run_at: an explicit time, else now() + delay, else now(); computed in the
# database so that the client's clock never matters.
_RUN_AT = "coalesce(%(run_at)s::timestamptz, now() + %(delay)s::interval, now())"

# Options of later jobq versions are passed by name, and only when given, so
# that the same calls work on a database still at an older version:
# group_key (jobq 0.2), timeout and unique_for (jobq 0.4), depends_on and
# on_parent_failure (jobq 0.6), on_duplicate (jobq 0.12).
ENQUEUE_OPTION_TYPES = {
    "group_key": "text", "timeout": "interval", "unique_for": "interval",
    "depends_on": "bigint[]", "on_parent_failure": "text",
    "meta": "jsonb", "metas": "jsonb[]",  # jobq 0.12.0
    "fair_key": "text", "fair_keys": "text[]",  # jobq 0.12.0
    "on_duplicate": "text",  # jobq 0.12.0
}
ENQUEUE_TEMPLATE = (
    "SELECT jobq.enqueue(%(queue)s::text, %(payload)s::jsonb, " + _RUN_AT + ", "
    "%(priority)s::integer, %(max_attempts)s::integer, %(key)s::text{options})"
)
ENQUEUE_MANY_TEMPLATE = (
    "SELECT e.id FROM jobq.enqueue_many(%(queue)s::text, %(payloads)s::jsonb[], " + _RUN_AT + ", "
    "%(priority)s::integer, %(max_attempts)s::integer, %(keys)s::text[]{options}) "
    "WITH ORDINALITY AS e(id, ord) ORDER BY e.ord"
)

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
# With results (sent only when some job has one, so that a jobq older than
# results keeps working for jobs without).
COMPLETE_RESULT = "SELECT jobq.complete(%s::bigint, %s::uuid, %s::jsonb)"
COMPLETE_MANY_RESULTS = "SELECT jobq.complete_many(%s::bigint[], %s::uuid[], %s::jsonb[])"
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
# A running job's progress (jobq 0.11.0); PROGRESS_MANY sends the latest
# value of several jobs in one round trip (a worker's heartbeat thread).
PROGRESS = "SELECT jobq.progress(%s::bigint, %s::uuid, %s::jsonb)"
PROGRESS_MANY = (
    "SELECT p.id, jobq.progress(p.id, p.lease_token, p.progress) "
    "FROM unnest(%s::bigint[], %s::uuid[], %s::jsonb[]) AS p(id, lease_token, progress)"
)
RELEASE = "SELECT jobq.release(%s::bigint, %s::uuid)"
SNOOZE = "SELECT jobq.snooze(%(id)s::bigint, %(lease_token)s::uuid, " + _RUN_AT + ")"
# Enqueue every due tick of the worker-run periodic jobs; seconds
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
# Both channels in one round trip (no parameters: the simple protocol runs
# both). jobq.cancel() of a running job notifies its holder on CANCEL_CHANNEL
# (the payload: 'id:lease_token' pairs separated by spaces); jobq before
# 0.11.0 never sends it, and a worker then learns at its next heartbeat.
LISTEN = f"LISTEN {CHANNEL}; LISTEN {CANCEL_CHANNEL}"
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
# Per-queue privileges.
GRANT_QUEUE = "SELECT jobq.grant_queue(%s::name, %s::text, %s::text)"
REVOKE_QUEUE = "SELECT jobq.revoke_queue(%s::name, %s::text, %s::text)"
QUEUE_GRANTS = "SELECT * FROM jobq.queue_grants ORDER BY queue_pattern, privilege, role"
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
# Row-lock ready jobs for this transaction (no lease, nothing written),
# then settle each before the commit: done, or a failed attempt (backoff or dead letter).
HOLD = "SELECT " + ", ".join(TAKEN_COLUMNS) + " FROM jobq.hold(%s::text, %s::integer)"
COMPLETE_HELD = "SELECT jobq.complete_held(%s::bigint[])"
COMPLETE_HELD_RESULTS = "SELECT jobq.complete_held(%s::bigint[], %s::jsonb[])"
FAIL_HELD = "SELECT jobq.fail_held(%s::bigint, %s::text)"
EVERY_TEMPLATE = (
    "SELECT jobq.every(%(name)s::text, %(schedule)s::text, %(queue)s::text, %(payload)s::jsonb, "
    "%(priority)s::integer, %(max_attempts)s::integer{runner})"
)
EVERY = EVERY_TEMPLATE.format(runner="")
UNSCHEDULE = "SELECT jobq.unschedule(%s::text)"
# Every column, whatever the version: jobq 0.4 adds runner, next_run_at and last_run_at.
SCHEDULES = "SELECT * FROM jobq.schedules ORDER BY name"
# Operator verbs over many jobs.
CANCEL_JOBS = (
    "SELECT jobq.cancel_jobs(%(queue)s::text, status => %(status)s::text, "
    "payload_contains => %(payload_contains)s::jsonb)"
)
# With meta_contains (jobq 0.12.0): sent only when given.
CANCEL_JOBS_META = CANCEL_JOBS[:-1] + ", meta_contains => %(meta_contains)s::jsonb)"

DISCARD_DEAD = "SELECT jobq.discard_dead(%(queue)s::text, older_than => %(older_than)s::interval)"
# Every column, whatever the version: jobq 0.6 adds waiting.
STATS = "SELECT * FROM jobq.stats ORDER BY queue"

# Workflows (dependencies, results, batch callbacks).
ENQUEUE_CALLBACK = (
    "SELECT jobq.enqueue_callback(%(queue)s::text, %(payload)s::jsonb, %(members)s::bigint[], "
    + _RUN_AT + ", %(priority)s::integer, %(max_attempts)s::integer)"
)
# With meta (jobq 0.12.0): sent only when given, so that older versions keep working without.
ENQUEUE_CALLBACK_META = ENQUEUE_CALLBACK[:-1] + ", meta => %(meta)s::jsonb)"

RESULT = "SELECT jobq.result(%s::bigint)"
STATUS = "SELECT jobq.status(%s::bigint)"
PARENT_RESULTS = "SELECT parent_id, result FROM jobq.parent_results(%s::bigint) ORDER BY parent_id"
# Marks a live job watched (its end sends NOTIFY FINISHED_CHANNEL with its id); its state.
WATCH = "SELECT jobq.watch(%s::bigint)"
FINISHED_CHANNEL = "jobq_finished"
LISTEN_FINISHED = f"LISTEN {FINISHED_CHANNEL}"
UNLISTEN_FINISHED = f"UNLISTEN {FINISHED_CHANNEL}"

# configure_queue's settings and the SQL type of each.

JOB_COLUMNS = (
    "id", "queue", "payload", "priority", "attempts", "max_attempts", "run_at", "created_at",
    "lease_token", "lease_expires_at", "worker", "job_key", "last_error",
)
JOB_COLUMNS_SINCE_0_2 = ("group_key",)  # absent when the database still runs jobq 0.1
JOB_COLUMNS_SINCE_0_4 = ("timeout",)  # the job's execution timeout; absent before jobq 0.4
JOB_COLUMNS_SINCE_0_11 = ("progress",)  # the last progress reported (maybe by an earlier attempt)
JOB_COLUMNS_SINCE_0_12 = ("meta",)  # what the producer attached beside the payload (tags, trace context)


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
        "n": check.batch_size(n),
        "worker": (default_worker_name() if worker is None
                   else check.text(worker, "worker", InvalidWorkerName)),
        "lease": check.seconds(lease, "lease", InvalidInterval),
    }
    return (CLAIM_MANY if isinstance(queues, list) else CLAIM_ONE), params


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
