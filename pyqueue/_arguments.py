"""The arguments of pyqueue's calls, checked (``pyqueue._checks``) and turned
into the parameters of their statement (``pyqueue._queries``): what the sync
and async APIs, and a claimed job's methods, send for each call."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb

from pyqueue import _checks as check
from pyqueue import _queries as q
from pyqueue._checks import batch_size, queue_name
from pyqueue.errors import (
    InvalidArgument,
    InvalidDependency,
    InvalidInterval,
    InvalidJobKey,
    InvalidMaxAttempts,
    InvalidPeriodicName,
    InvalidPriority,
    InvalidQueueName,
    InvalidSetting,
    InvalidTime,
    MissingLease,
)

QUEUE_SETTINGS: dict[str, str] = {
    "max_attempts": "integer",
    "backoff_base": "interval",
    "backoff_cap": "interval",
    "backoff_jitter": "double precision",
    "lease": "interval",
    "retention": "interval",
    "dead_retention": "interval",
    "max_payload_bytes": "integer",
    "concurrency": "integer",  # 0 removes the limit
    "rate_limit": "integer",  # 0 removes the limit
    "rate_interval": "interval",
    "timeout": "interval",  # the queue's default job timeout; 0 removes it
    "result_retention": "interval",  # how long a completed job's result is kept
    "fair": "boolean",  # claims serve the queue's fair keys round-robin (jobq 0.12)
    "fair_weights": "jsonb",  # {"key": turns per round}; {} removes them
    "per_key_concurrency": "integer",  # running jobs per fair key; 0 removes the limit
}


def schedule_params(delay: timedelta | float | None, run_at: datetime | None) -> dict[str, Any]:
    """The run_at/delay query parameters; delay and run_at exclude each other."""
    if delay is not None and run_at is not None:
        raise check.refuse(InvalidTime, "pass either delay or run_at, not both",
                           "delay counts from the database's now(); run_at is an absolute time.")
    return {"run_at": check.moment(run_at, "run_at"), "delay": check.delay(delay)}


def retry_time(retry_at: datetime | None) -> datetime | None:
    return check.moment(retry_at, "retry_at")


def _enqueue_options(
    group_key: str | None, timeout: timedelta | float | None, unique_for: timedelta | float | None,
    depends_on: Iterable[int] | None, on_parent_failure: str, *, meta: Mapping[str, Any] | None = None,
    metas: Sequence[Mapping[str, Any]] | None = None, fair_key: str | None = None,
    fair_keys: Sequence[str | None] | None = None, on_duplicate: str = "keep",
) -> tuple[str, dict[str, Any]]:
    """The named arguments of later jobq versions that were given, and their
    values (on_parent_failure: when not the default, or with depends_on;
    on_duplicate: when not the default 'keep')."""
    given = {
        "group_key": check.text(group_key, "group_key", InvalidJobKey),
        "timeout": check.seconds(timeout, "timeout", InvalidInterval),
        "unique_for": check.seconds(unique_for, "unique_for", InvalidInterval),
        "depends_on": check.job_ids(depends_on, "depends_on", InvalidDependency),
        "on_parent_failure": (check.text(on_parent_failure, "on_parent_failure", InvalidArgument)
                              if depends_on is not None or on_parent_failure != "cancel" else None),
        "meta": None if meta is None else check.payload(meta, "meta"),
        "metas": None if metas is None else check.payloads_array(metas, "metas"),
        "fair_key": check.text(fair_key, "fair_key", InvalidJobKey),
        "fair_keys": check.texts(fair_keys, "fair_keys", InvalidJobKey),
        "on_duplicate": _on_duplicate(on_duplicate),
    }
    given = {name: value for name, value in given.items() if value is not None}
    sql = "".join(f", {name} => %({name})s::{q.ENQUEUE_OPTION_TYPES[name]}" for name in given)
    return sql, given


def _on_duplicate(value: str) -> str | None:
    """on_duplicate to send: None for the default 'keep' (so that keyed jobs
    enqueue on a jobq older than 0.12); the database checks the others."""
    if value == "keep":
        return None
    if value is None:
        raise check.refuse(InvalidArgument,
                           "on_duplicate must be 'keep', 'replace' or 'replace_payload', got None",
                           "'keep' (the default) returns the job holding the key; 'replace' gives it the new "
                           "payload, run time and priority (debounce); 'replace_payload' only the payload.")
    return check.text(value, "on_duplicate", InvalidArgument)


def _job_options(priority: int, max_attempts: int | None) -> dict[str, Any]:
    return {
        "priority": check.integer(priority, "priority", InvalidPriority,
                                  hint="Use a priority in -32768..32767 (lower runs first)."),
        "max_attempts": check.integer(max_attempts, "max_attempts", InvalidMaxAttempts,
                                      hint="Use max_attempts in 1..1000, or None for the queue's setting."),
    }


def enqueue_query(
    queue: str, payload: Mapping[str, Any], *, key: str | None, **options: Any
) -> tuple[str, dict[str, Any]]:
    """jobq.enqueue() of one job; ``options`` are :func:`enqueue_params`'s."""
    sql, params = enqueue_params(q.ENQUEUE_TEMPLATE, queue, **options)
    return sql, {**params, "payload": check.payload(payload),
                 "key": check.text(key, "job_key", InvalidJobKey)}


def enqueue_many_query(
    queue: str, payloads: Sequence[Mapping[str, Any]], *, keys: Sequence[str | None] | None, **options: Any
) -> tuple[str, dict[str, Any]]:
    """jobq.enqueue_many(); ``options`` are :func:`enqueue_params`'s."""
    sql, params = enqueue_params(q.ENQUEUE_MANY_TEMPLATE, queue, **options)
    return sql, {**params, "payloads": check.payloads_array(payloads),
                 "keys": check.texts(keys, "job_keys", InvalidJobKey)}


def enqueue_params(
    template: str,
    queue: str,
    *,
    delay: timedelta | float | None,
    run_at: datetime | None,
    priority: int,
    max_attempts: int | None,
    group_key: str | None,
    timeout: timedelta | float | None = None,
    unique_for: timedelta | float | None = None,
    depends_on: Iterable[int] | None = None,
    on_parent_failure: str = "cancel",
    meta: Mapping[str, Any] | None = None,
    metas: Sequence[Mapping[str, Any]] | None = None,
    fair_key: str | None = None,
    fair_keys: Sequence[str | None] | None = None,
    on_duplicate: str = "keep",
) -> tuple[str, dict[str, Any]]:
    """What enqueue and enqueue_many share: the statement (``template`` with
    the options of later jobq versions that were given) and the parameters
    but the payloads and keys."""
    options, values = _enqueue_options(group_key, timeout, unique_for, depends_on, on_parent_failure,
                                       meta=meta, metas=metas, fair_key=fair_key, fair_keys=fair_keys,
                                       on_duplicate=on_duplicate)
    params = {
        "queue": check.text(queue, "queue", InvalidQueueName),
        **schedule_params(delay, run_at),
        **_job_options(priority, max_attempts),
        **values,
    }
    return template.format(options=options), params


def callback_params(
    queue: str, payload: Mapping[str, Any], members: Iterable[int], *, delay: timedelta | float | None,
    run_at: datetime | None, priority: int, max_attempts: int | None, meta: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """jobq.enqueue_callback()'s parameters (``meta`` only when given)."""
    if members is None:
        raise check.refuse(InvalidDependency, "members must not be None",
                           "Pass the ids of the jobs the callback waits for.")
    return {
        "queue": check.text(queue, "queue", InvalidQueueName),
        "payload": check.payload(payload),
        "members": check.job_ids(members, "members", InvalidDependency),
        **schedule_params(delay, run_at),
        **_job_options(priority, max_attempts),
        **({} if meta is None else {"meta": check.payload(meta, "meta")}),
    }


def result_value(value: object, name: str = "result") -> Jsonb | None:
    """A job's result as the jsonb to send: any JSON value (or one encoded
    already); None: no result."""
    if value is None or isinstance(value, Jsonb):
        return value
    return check.payload(value, name, InvalidArgument)


def complete_params(job_id: int, lease_token: UUID | str, result: object) -> tuple[str, tuple[Any, ...]]:
    """complete()'s statement and parameters; the result only when there is one
    (so that a job without one completes on an older jobq too)."""
    checked_id, token = lease_params(job_id, lease_token)
    if result is None:
        return q.COMPLETE, (checked_id, token)
    return q.COMPLETE_RESULT, (checked_id, token, result_value(result))


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


def progress_params(job_id: int, lease_token: UUID | str, progress: object) -> tuple[Any, ...]:
    """The parameters of PROGRESS: id, lease token, the value (any JSON value; None: none)."""
    checked_id, token = lease_params(job_id, lease_token)
    return checked_id, token, result_value(progress, "progress")


def many_lease_params(pairs: Sequence[tuple[int, UUID]]) -> tuple[list[int | None], list[UUID | None]]:
    """The ids and lease tokens of several jobs (complete_many), checked."""
    ids = [check.job_id(p[0], f"ids[{i}]") for i, p in enumerate(pairs, start=1)]
    tokens = [check.lease_token(p[1], f"lease_tokens[{i}]") for i, p in enumerate(pairs, start=1)]
    return ids, tokens


def many_complete_params(
    pairs: Sequence[tuple[int, UUID]], results: Sequence[Any] | None
) -> tuple[str, tuple[Any, ...]]:
    """complete_many()'s statement and parameters; results (one per job, None
    for none) only when some job has one."""
    ids, tokens = many_lease_params(pairs)
    if results is None or all(r is None for r in results):
        return q.COMPLETE_MANY, (ids, tokens)
    if isinstance(results, str | bytes | Mapping) or len(results) != len(pairs):
        raise check.refuse(MissingLease, "results must be a list with one result (or None) per job",
                           "Pass results in the order of the jobs.")
    return q.COMPLETE_MANY_RESULTS, (ids, tokens, [result_value(r, f"results[{i}]")
                                                   for i, r in enumerate(results, start=1)])


def snooze_params(
    job_id: int, lease_token: UUID | str, delay: timedelta | float | None, run_at: datetime | None
) -> dict[str, Any]:
    if delay is None and run_at is None:
        raise check.refuse(InvalidTime, "snooze needs a delay or a run_at",
                           "For example job.snooze(60) or job.snooze(run_at=...).")
    checked_id, token = lease_params(job_id, lease_token)
    return {"id": checked_id, "lease_token": token, **schedule_params(delay, run_at)}


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
    """jobq.every(); runner is passed by name, and only when given (a jobq
    older than runners lacks the parameter)."""
    params = {
        "name": check.text(name, "name", InvalidPeriodicName),
        "schedule": check.text(schedule, "schedule", InvalidSetting),
        "queue": queue_name(queue),
        "payload": check.payload({} if payload is None else payload),
        **_job_options(priority, max_attempts),
    }
    if runner is None:
        return q.EVERY, params
    params["runner"] = check.text(runner, "runner", InvalidArgument)
    return q.EVERY_TEMPLATE.format(runner=", runner => %(runner)s::text"), params


def cancel_jobs_params(
    queue: str, status: str | None, payload_contains: Mapping[str, Any] | None,
    meta_contains: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """jobq.cancel_jobs()'s parameters (``meta_contains`` only when given)."""
    return {
        "queue": queue_name(queue),
        "status": check.text(status, "status", InvalidArgument),
        "payload_contains": (None if payload_contains is None
                             else check.payload(payload_contains, "payload_contains", InvalidArgument)),
        **({} if meta_contains is None
           else {"meta_contains": check.payload(meta_contains, "meta_contains", InvalidArgument)}),
    }


def discard_dead_params(queue: str, older_than: timedelta | float | None) -> dict[str, Any]:
    return {"queue": queue_name(queue),
            "older_than": check.seconds(older_than, "older_than", InvalidInterval)}


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
    if sql_type == "boolean":
        if not isinstance(value, bool):
            raise check.refuse(InvalidSetting,
                               f"setting {name} must be True or False, got {type(value).__name__}",
                               f"Pass {name}=True or {name}=False.")
        return value
    if sql_type == "jsonb":
        if not isinstance(value, Mapping):
            raise check.refuse(InvalidSetting, f"setting {name} must be a dict, got {type(value).__name__}",
                               'Map fair keys to weights, e.g. {"gold": 3}; {} removes them.')
        return check.payload(value, name, InvalidSetting)
    if sql_type == "interval":
        return check.seconds(value, name, InvalidSetting)
    if sql_type == "integer":
        return check.integer(value, name, InvalidSetting)
    return check.real(value, name, InvalidSetting)
