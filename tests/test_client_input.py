"""Python-side input that Python or psycopg would mangle on its way to the
database (issue 12, defect 6), through every public client call, sync and
async, and the claimed job's methods.

NaN and infinity in a payload, NUL characters and lone surrogates in any
text, bools and floats where an integer is meant, integers beyond their SQL
type, non-finite, negative or absurd delays, lease tokens that are not UUIDs:
each raises the typed jobq error whose SQLSTATE the database would use, with
a message naming the argument and a hint, before anything is sent (a
connection that is not in autocommit mode is still idle, not inside a
transaction), and no jobq table changes. Values that are valid keep working.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from enum import IntEnum
from types import MappingProxyType
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest
from psycopg.pq import TransactionStatus

import pyqueue
from pyqueue import aio, errors
from tests.chaos_support import snapshot
from tests.test_bad_input import Seed, bad_db, seed

__all__ = ["bad_db", "seed"]  # module-scoped fixtures shared with test_bad_input

Conn = psycopg.Connection[Any]
NAN, INF = float("nan"), float("inf")
NUL = "a\x00b"
SURROGATE = "a\udc80b"


def cyclic() -> dict[str, Any]:
    payload: dict[str, Any] = {}
    payload["self"] = payload
    return payload


@dataclass(frozen=True)
class Case:
    """A call of the public client function ``function`` (pyqueue.X and
    pyqueue.aio.X alike), its arguments after ``conn`` (built from the seed),
    and the typed error it must raise with ``names`` in its message."""

    function: str
    args: Callable[[Seed], tuple[Any, ...]]
    error: type[errors.JobqError]
    names: str
    kwargs: dict[str, Any] = field(default_factory=dict)


def c(function: str, args: Callable[[Seed], tuple[Any, ...]], error: type[errors.JobqError], names: str,
      **kwargs: Any) -> Case:
    return Case(function, args, error, names, kwargs)


def q(*args: Any) -> Callable[[Seed], tuple[Any, ...]]:
    """Fixed arguments."""
    return lambda s: args


HELD: Callable[[Seed], tuple[Any, ...]] = lambda s: (s.held, s.token)  # noqa: E731


def fake_job(job_id: Any, token: Any) -> pyqueue.Job:
    """A Job object as a caller might build or alter one (complete_many reads its id and token)."""
    now = datetime.now(timezone.utc)
    return pyqueue.Job(id=job_id, queue="q", payload={}, priority=0, attempts=1, max_attempts=3, run_at=now,
                       created_at=now, lease_token=token, lease_expires_at=now, worker=None, job_key=None,
                       last_error=None)

CASES: dict[str, Case] = {
    # --- enqueue: payload
    "enqueue payload NaN": c("enqueue", q("q", {"x": NAN}), errors.InvalidPayload, "payload"),
    "enqueue payload inf": c("enqueue", q("q", {"x": INF}), errors.InvalidPayload, "payload"),
    "enqueue payload -inf in a list": c("enqueue", q("q", {"x": [1, -INF]}), errors.InvalidPayload,
                                        "payload"),
    "enqueue payload NUL in a value": c("enqueue", q("q", {"x": NUL}), errors.InvalidPayload, "payload"),
    "enqueue payload NUL in a key": c("enqueue", q("q", {NUL: 1}), errors.InvalidPayload, "payload"),
    "enqueue payload lone surrogate": c("enqueue", q("q", {"x": SURROGATE}), errors.InvalidPayload,
                                        "payload"),
    "enqueue payload lone surrogate in a key": c("enqueue", q("q", {SURROGATE: 1}), errors.InvalidPayload,
                                                 "payload"),
    "enqueue payload int key": c("enqueue", q("q", {1: "one"}), errors.InvalidPayload, "payload"),
    "enqueue payload bool key, nested": c("enqueue", q("q", {"a": [{True: 1}]}), errors.InvalidPayload,
                                          "payload"),
    "enqueue payload datetime": c("enqueue", q("q", {"at": datetime.now(timezone.utc)}),
                                  errors.InvalidPayload, "payload"),
    "enqueue payload set": c("enqueue", q("q", {"s": {1, 2}}), errors.InvalidPayload, "payload"),
    "enqueue payload cycle": c("enqueue", q("q", cyclic()), errors.InvalidPayload, "payload"),
    # --- enqueue: text arguments
    "enqueue queue NUL": c("enqueue", q(NUL, {}), errors.InvalidQueueName, "queue"),
    "enqueue queue lone surrogate": c("enqueue", q(SURROGATE, {}), errors.InvalidQueueName, "queue"),
    "enqueue queue an int": c("enqueue", q(5, {}), errors.InvalidQueueName, "queue"),
    "enqueue key NUL": c("enqueue", q("q", {}), errors.InvalidJobKey, "job_key", key=NUL),
    "enqueue key an int": c("enqueue", q("q", {}), errors.InvalidJobKey, "job_key", key=7),
    "enqueue group_key NUL": c("enqueue", q("q", {}), errors.InvalidJobKey, "group_key", group_key=NUL),
    # --- enqueue: numbers and times
    "enqueue priority 2**40": c("enqueue", q("q", {}), errors.InvalidPriority, "priority", priority=2**40),
    "enqueue priority 1.5": c("enqueue", q("q", {}), errors.InvalidPriority, "priority", priority=1.5),
    "enqueue priority 2.0": c("enqueue", q("q", {}), errors.InvalidPriority, "priority", priority=2.0),
    "enqueue priority True": c("enqueue", q("q", {}), errors.InvalidPriority, "priority", priority=True),
    "enqueue priority '1'": c("enqueue", q("q", {}), errors.InvalidPriority, "priority", priority="1"),
    "enqueue max_attempts 2**31": c("enqueue", q("q", {}), errors.InvalidMaxAttempts, "max_attempts",
                                    max_attempts=2**31),
    "enqueue max_attempts 3.0": c("enqueue", q("q", {}), errors.InvalidMaxAttempts, "max_attempts",
                                  max_attempts=3.0),
    "enqueue max_attempts True": c("enqueue", q("q", {}), errors.InvalidMaxAttempts, "max_attempts",
                                   max_attempts=True),
    "enqueue delay 1e300": c("enqueue", q("q", {}), errors.InvalidTime, "delay", delay=1e300),
    "enqueue delay -1": c("enqueue", q("q", {}), errors.InvalidTime, "delay", delay=-1),
    "enqueue delay -1 ms timedelta": c("enqueue", q("q", {}), errors.InvalidTime, "delay",
                                       delay=timedelta(milliseconds=-1)),
    "enqueue delay timedelta.max": c("enqueue", q("q", {}), errors.InvalidTime, "delay", delay=timedelta.max),
    "enqueue delay True": c("enqueue", q("q", {}), errors.InvalidTime, "delay", delay=True),
    "enqueue delay '5'": c("enqueue", q("q", {}), errors.InvalidTime, "delay", delay="5"),
    "enqueue run_at a date": c("enqueue", q("q", {}), errors.InvalidTime, "run_at", run_at=date(2030, 1, 1)),
    "enqueue run_at a string": c("enqueue", q("q", {}), errors.InvalidTime, "run_at", run_at="2030-01-01"),
    "enqueue timeout NaN": c("enqueue", q("q", {}), errors.InvalidInterval, "timeout", timeout=NAN),
    "enqueue timeout True": c("enqueue", q("q", {}), errors.InvalidInterval, "timeout", timeout=True),
    "enqueue unique_for 1e300": c("enqueue", q("q", {}), errors.InvalidInterval, "unique_for", key="k",
                                  unique_for=1e300),
    "enqueue on_duplicate None": c("enqueue", q("q", {}), errors.InvalidArgument, "on_duplicate", key="k",
                                   on_duplicate=None),
    "enqueue on_duplicate NUL": c("enqueue", q("q", {}), errors.InvalidArgument, "on_duplicate", key="k",
                                  on_duplicate="re\x00place"),
    "enqueue_many on_duplicate None": c("enqueue_many", q("q", [{}]), errors.InvalidArgument, "on_duplicate",
                                        keys=["k"], on_duplicate=None),
    # --- enqueue_many
    "enqueue_many payload NaN": c("enqueue_many", q("q", [{}, {"x": NAN}]), errors.InvalidPayload,
                                  "payloads[2]"),
    "enqueue_many payload NUL": c("enqueue_many", q("q", [{"x": NUL}]), errors.InvalidPayload, "payloads[1]"),
    "enqueue_many payloads a dict": c("enqueue_many", q("q", {"x": 1}), errors.InvalidPayload, "payloads"),
    "enqueue_many payloads a str": c("enqueue_many", q("q", "{}"), errors.InvalidPayload, "payloads"),
    "enqueue_many key NUL": c("enqueue_many", q("q", [{}, {}]), errors.InvalidJobKey, "job_keys[2]",
                              keys=["a", NUL]),
    "enqueue_many keys a str": c("enqueue_many", q("q", [{}]), errors.InvalidJobKey, "job_keys", keys="a"),
    "enqueue_many queue NUL": c("enqueue_many", q(NUL, [{}]), errors.InvalidQueueName, "queue"),
    "enqueue_many priority 1.5": c("enqueue_many", q("q", [{}]), errors.InvalidPriority, "priority",
                                   priority=1.5),
    "enqueue_many delay -1": c("enqueue_many", q("q", [{}]), errors.InvalidTime, "delay", delay=-1),
    "enqueue_many timeout inf": c("enqueue_many", q("q", [{}]), errors.InvalidInterval, "timeout",
                                  timeout=INF),
    # --- claim
    "claim n 10**10": c("claim", q("q", 10**10), errors.InvalidBatchSize, "n"),
    "claim n True": c("claim", q("q", True), errors.InvalidBatchSize, "n"),
    "claim n 2.0": c("claim", q("q", 2.0), errors.InvalidBatchSize, "n"),
    "claim queue NUL": c("claim", q(NUL), errors.InvalidQueueName, "queue"),
    "claim queues with a NUL": c("claim", q(["q", NUL]), errors.InvalidQueueName, "queues[2]"),
    "claim queues with an int": c("claim", q(["q", 3]), errors.InvalidQueueName, "queues[2]"),
    "claim queue a set": c("claim", q({"q"}), errors.InvalidQueueName, "queue"),
    "claim worker NUL": c("claim", q("q"), errors.InvalidWorkerName, "worker", worker=NUL),
    "claim lease inf": c("claim", q("q"), errors.InvalidInterval, "lease", lease=INF),
    "claim lease True": c("claim", q("q"), errors.InvalidInterval, "lease", lease=True),
    # --- complete, fail, heartbeat, release, snooze
    "complete id 2**70": c("complete", lambda s: (2**70, s.token), errors.MissingLease, "id"),
    "complete id True": c("complete", lambda s: (True, s.token), errors.MissingLease, "id"),
    "complete id 1.0": c("complete", lambda s: (1.0, s.token), errors.MissingLease, "id"),
    "complete token not a UUID": c("complete", q(1, "not-a-uuid"), errors.MissingLease, "lease_token"),
    "complete token an int": c("complete", lambda s: (s.held, 5), errors.MissingLease, "lease_token"),
    "complete_many an id 2**70": c("complete_many", lambda s: ([fake_job(2**70, s.token)],),
                                   errors.MissingLease, "ids[1]"),
    "complete_many a token not a UUID": c("complete_many", lambda s: ([fake_job(s.held, s.token),
                                                                       fake_job(1, "nope")],),
                                          errors.MissingLease, "lease_tokens[2]"),
    "fail error NUL": c("fail", lambda s: (*HELD(s), NUL), errors.InvalidArgument, "error"),
    "fail error lone surrogate": c("fail", lambda s: (*HELD(s), SURROGATE), errors.InvalidArgument, "error"),
    "fail error an exception": c("fail", lambda s: (*HELD(s), ValueError("x")), errors.InvalidArgument,
                                 "error"),
    "fail id 2**63": c("fail", lambda s: (2**63, s.token, "e"), errors.MissingLease, "id"),
    "fail token not a UUID": c("fail", lambda s: (s.held, "nope", "e"), errors.MissingLease, "lease_token"),
    "fail retry_at a string": c("fail", lambda s: (*HELD(s), "e"), errors.InvalidTime, "retry_at",
                                retry_at="2030-01-01T00:00:00Z"),
    "heartbeat extend True": c("heartbeat", lambda s: (*HELD(s), True), errors.InvalidInterval, "extend"),
    "heartbeat extend NaN": c("heartbeat", lambda s: (*HELD(s), NAN), errors.InvalidInterval, "extend"),
    "heartbeat extend '60'": c("heartbeat", lambda s: (*HELD(s), "60"), errors.InvalidInterval, "extend"),
    "heartbeat id -2**64": c("heartbeat", lambda s: (-(2**64), s.token), errors.MissingLease, "id"),
    "progress not JSON": c("progress", lambda s: (*HELD(s), {"x": object()}), errors.InvalidArgument,
                           "progress"),
    "progress NaN": c("progress", lambda s: (*HELD(s), NAN), errors.InvalidArgument, "progress"),
    "progress token not a UUID": c("progress", lambda s: (s.held, "nope", 1), errors.MissingLease,
                                   "lease_token"),
    "release token not a UUID": c("release", lambda s: (s.held, "nope"), errors.MissingLease, "lease_token"),
    "release id 1.5": c("release", lambda s: (1.5, s.token), errors.MissingLease, "id"),
    "snooze delay -1": c("snooze", lambda s: (*HELD(s), -1), errors.InvalidTime, "delay"),
    "snooze delay 1e300": c("snooze", lambda s: (*HELD(s), 1e300), errors.InvalidTime, "delay"),
    "snooze run_at naive": c("snooze", HELD, errors.InvalidTime, "run_at", run_at=datetime(2030, 1, 1)),
    "snooze token not a UUID": c("snooze", lambda s: (s.held, "nope", 60), errors.MissingLease,
                                 "lease_token"),
    # --- take, reap
    "take n 2**31": c("take", q("q", 2**31), errors.InvalidBatchSize, "n"),
    "take n 1.0": c("take", q("q", 1.0), errors.InvalidBatchSize, "n"),
    "take queue NUL": c("take", q(NUL), errors.InvalidQueueName, "queue"),
    "reap True": c("reap", q(True), errors.InvalidBatchSize, "n"),
    "reap 2**31": c("reap", q(2**31), errors.InvalidBatchSize, "n"),
    "reap 1.5": c("reap", q(1.5), errors.InvalidBatchSize, "n"),
    # --- periodic jobs
    "every name NUL": c("every", q(NUL, "* * * * *", "q"), errors.InvalidPeriodicName, "name"),
    "every schedule NUL": c("every", q("p", NUL, "q"), errors.InvalidSetting, "schedule"),
    "every queue NUL": c("every", q("p", "* * * * *", NUL), errors.InvalidQueueName, "queue"),
    "every payload NaN": c("every", q("p", "* * * * *", "q", {"x": NAN}), errors.InvalidPayload, "payload"),
    "every priority 1.5": c("every", q("p", "* * * * *", "q"), errors.InvalidPriority, "priority",
                            priority=1.5),
    "every max_attempts True": c("every", q("p", "* * * * *", "q"), errors.InvalidMaxAttempts, "max_attempts",
                                 max_attempts=True),
    "every runner NUL": c("every", q("p", "* * * * *", "q"), errors.InvalidArgument, "runner", runner=NUL),
    "unschedule name an int": c("unschedule", q(5), errors.InvalidPeriodicName, "name"),
    # --- operator calls
    "retry id 2**70": c("retry", q(2**70), errors.MissingLease, "id"),
    "retry id True": c("retry", q(True), errors.MissingLease, "id"),
    "retry_dead queue NUL": c("retry_dead", q(NUL), errors.InvalidQueueName, "queue"),
    "cancel id 1.5": c("cancel", q(1.5), errors.MissingLease, "id"),
    "cancel id '1'": c("cancel", q("1"), errors.MissingLease, "id"),
    "cancel_jobs queue NUL": c("cancel_jobs", q(NUL), errors.InvalidQueueName, "queue"),
    "cancel_jobs status an int": c("cancel_jobs", q("seed"), errors.InvalidArgument, "status", status=1),
    "cancel_jobs status NUL": c("cancel_jobs", q("seed"), errors.InvalidArgument, "status", status=NUL),
    "cancel_jobs payload_contains NaN": c("cancel_jobs", q("seed"), errors.InvalidArgument,
                                          "payload_contains", payload_contains={"x": NAN}),
    "discard_dead queue surrogate": c("discard_dead", q(SURROGATE), errors.InvalidQueueName, "queue"),
    "discard_dead older_than NaN": c("discard_dead", q("dead"), errors.InvalidInterval, "older_than",
                                     older_than=NAN),
    "discard_dead older_than True": c("discard_dead", q("dead"), errors.InvalidInterval, "older_than",
                                      older_than=True),
    "pause queue NUL": c("pause", q(NUL), errors.InvalidQueueName, "queue"),
    "grant_queue role NUL": c("grant_queue", q(NUL, "q", "read"), errors.InvalidRole, "role"),
    "grant_queue queue_pattern surrogate": c("grant_queue", q("jobq_worker", SURROGATE, "read"),
                                             errors.InvalidQueueName, "queue_pattern"),
    "grant_queue privilege an int": c("grant_queue", q("jobq_worker", "q", 1), errors.InvalidArgument,
                                      "privilege"),
    "revoke_queue role an int": c("revoke_queue", q(7, "q", "read"), errors.InvalidRole, "role"),
    "revoke_queue privilege NUL": c("revoke_queue", q("jobq_worker", "q", NUL), errors.InvalidArgument,
                                    "privilege"),
    "resume queue lone surrogate": c("resume", q(SURROGATE), errors.InvalidQueueName, "queue"),
    # --- configure_queue
    "configure_queue queue NUL": c("configure_queue", q(NUL), errors.InvalidQueueName, "queue", lease=60),
    "configure_queue max_attempts 1.5": c("configure_queue", q("tiny"), errors.InvalidSetting, "max_attempts",
                                          max_attempts=1.5),
    "configure_queue concurrency True": c("configure_queue", q("tiny"), errors.InvalidSetting, "concurrency",
                                          concurrency=True),
    "configure_queue max_payload_bytes 2**31": c("configure_queue", q("tiny"), errors.InvalidSetting,
                                                 "max_payload_bytes", max_payload_bytes=2**31),
    "configure_queue backoff_jitter '0.5'": c("configure_queue", q("tiny"), errors.InvalidSetting,
                                              "backoff_jitter", backoff_jitter="0.5"),
    "configure_queue backoff_jitter inf": c("configure_queue", q("tiny"), errors.InvalidSetting,
                                            "backoff_jitter", backoff_jitter=INF),
    "configure_queue lease True": c("configure_queue", q("tiny"), errors.InvalidSetting, "lease", lease=True),
    "configure_queue retention 1e300": c("configure_queue", q("tiny"), errors.InvalidSetting, "retention",
                                         retention=1e300),
    "configure_queue timeout NaN": c("configure_queue", q("tiny"), errors.InvalidSetting, "timeout",
                                     timeout=NAN),
    "configure_queue result_retention inf": c("configure_queue", q("tiny"), errors.InvalidSetting,
                                              "result_retention", result_retention=INF),
    # --- jobq 0.6: workflows
    "enqueue depends_on a str": c("enqueue", q("q", {}), errors.InvalidDependency, "depends_on",
                                  depends_on="12"),
    "enqueue depends_on 1.5": c("enqueue", q("q", {}), errors.InvalidDependency, "depends_on[2]",
                                depends_on=[1, 1.5]),
    "enqueue on_parent_failure NUL": c("enqueue", q("q", {}), errors.InvalidArgument, "on_parent_failure",
                                       depends_on=[1], on_parent_failure=NUL),
    "enqueue_many depends_on 2**70": c("enqueue_many", q("q", [{}]), errors.InvalidDependency,
                                       "depends_on[1]", depends_on=[2**70]),
    "enqueue_callback members None": c("enqueue_callback", q("q", {}, None), errors.InvalidDependency,
                                       "members"),
    "enqueue_callback members '2'": c("enqueue_callback", q("q", {}, [1, "2"]), errors.InvalidDependency,
                                      "members[2]"),
    "enqueue_callback payload NaN": c("enqueue_callback", q("q", {"x": NAN}, [1]), errors.InvalidPayload,
                                      "payload"),
    "complete result NaN": c("complete", lambda s: (s.held, s.token, {"x": NAN}), errors.InvalidArgument,
                             "result"),
    "complete_many results too few": c("complete_many", lambda s: ([fake_job(s.held, s.token)], [1, 2]),
                                       errors.MissingLease, "results"),
    "result id 1.0": c("result", q(1.0), errors.MissingLease, "id"),
    "status id True": c("status", q(True), errors.MissingLease, "id"),
    "parent_results id 2**70": c("parent_results", q(2**70), errors.MissingLease, "id"),
    "chain step not a pair": c("chain", q([("q",)]), errors.InvalidArgument, "steps[1]"),
    "chain second payload NaN": c("chain", q([("q", {}), ("q", {"x": NAN})]), errors.InvalidPayload,
                                  "payload"),
    "group then a str": c("group", q([("q", {})]), errors.InvalidArgument, "then", then="cb"),
    "group payload NUL": c("group", q([("q", {"x": NUL})]), errors.InvalidPayload, "payloads[1]",
                           then=("cb", {})),
    "wait id None": c("wait", q(None), errors.MissingLease, "job_id"),
    "wait timeout NaN": c("wait", q(1, NAN), errors.InvalidInterval, "timeout"),
}


def check_refusal(error: BaseException, case: Case) -> None:
    assert type(error) is case.error, f"{type(error).__name__}: {error}"
    assert isinstance(error, errors.InvalidArgument) and isinstance(error, ValueError)
    assert error.sqlstate == case.error.SQLSTATE
    assert case.names in error.message, error.message
    assert error.message.startswith("jobq: ")
    assert error.hint


@pytest.fixture
def idle_conn(bad_db: Conn) -> Iterator[Conn]:
    """A connection that is not in autocommit mode: any statement would open a transaction."""
    with psycopg.connect(bad_db.info.dsn) as conn:
        yield conn


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_mangled_argument_is_refused_before_anything_is_sent(
    bad_db: Conn, seed: Seed, idle_conn: Conn, name: str
) -> None:
    case = CASES[name]
    before = snapshot(bad_db)
    function = getattr(pyqueue, case.function)
    with pytest.raises(errors.JobqError) as caught:
        result = function(idle_conn, *case.args(seed), **case.kwargs)
        if case.function == "take":
            with result:
                pass
    check_refusal(caught.value, case)
    assert idle_conn.info.transaction_status == TransactionStatus.IDLE, "a statement was sent"
    assert snapshot(bad_db) == before


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_async_twin_refuses_it_too(bad_db: Conn, seed: Seed, name: str) -> None:
    case = CASES[name]
    before = snapshot(bad_db)

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(bad_db.info.dsn) as aconn:
            function = getattr(aio, case.function)
            with pytest.raises(errors.JobqError) as caught:
                if case.function == "take":
                    async with function(aconn, *case.args(seed), **case.kwargs):
                        pass
                else:
                    await function(aconn, *case.args(seed), **case.kwargs)
            check_refusal(caught.value, case)
            assert aconn.info.transaction_status == TransactionStatus.IDLE, "a statement was sent"

    asyncio.run(main())
    assert snapshot(bad_db) == before


def test_every_public_client_call_has_cases_and_an_async_twin() -> None:
    covered = {case.function for case in CASES.values()}
    calls = {name for name in pyqueue.client.__all__ if name[0].islower()}
    assert calls - covered == {"queue_grants", "schedules", "stats"}  # no arguments to check
    for name in calls:
        assert asyncio.iscoroutinefunction(getattr(aio, name)) or name == "take", name


# --- the claimed job's methods -------------------------------------------------

JOB_CASES: dict[str, tuple[Callable[[Any], Any], type[errors.JobqError], str]] = {
    "snooze delay -1": (lambda job: job.snooze(-1), errors.InvalidTime, "delay"),
    "snooze delay NaN": (lambda job: job.snooze(NAN), errors.InvalidTime, "delay"),
    "snooze run_at a date": (lambda job: job.snooze(run_at=date(2030, 1, 1)), errors.InvalidTime, "run_at"),
    "fail retry_at naive": (lambda job: job.fail("e", retry_at=datetime(2030, 1, 1)), errors.InvalidTime,
                            "retry_at"),
    "fail error NUL": (lambda job: job.fail(NUL), errors.InvalidArgument, "error"),
    "fail error lone surrogate": (lambda job: job.fail(SURROGATE), errors.InvalidArgument, "error"),
    "heartbeat extend True": (lambda job: job.heartbeat(True), errors.InvalidInterval, "extend"),
    "heartbeat extend NaN": (lambda job: job.heartbeat(NAN), errors.InvalidInterval, "extend"),
}


@pytest.mark.parametrize("name", sorted(JOB_CASES))
def test_a_claimed_jobs_methods_refuse_mangled_arguments(conn: Conn, dsn: str, name: str) -> None:
    call, error, names = JOB_CASES[name]
    pyqueue.enqueue(conn, "methods", {})
    with psycopg.connect(dsn) as worker:
        [job] = pyqueue.claim(worker, "methods", lease=timedelta(minutes=5))
        worker.commit()
        before = snapshot(conn)
        with pytest.raises(errors.JobqError) as caught:
            call(job)
        assert type(caught.value) is error and names in caught.value.message
        assert worker.info.transaction_status == TransactionStatus.IDLE
    assert snapshot(conn) == before

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(dsn) as aconn:
            pyqueue.enqueue(conn, "methods", {})
            [ajob] = await aio.claim(aconn, "methods", lease=timedelta(minutes=5))
            await aconn.commit()
            with pytest.raises(errors.JobqError) as caught:
                await call(ajob)
            assert type(caught.value) is error and names in caught.value.message
            assert aconn.info.transaction_status == TransactionStatus.IDLE

    asyncio.run(main())


# --- what stays valid ------------------------------------------------------------

class Level(IntEnum):
    HIGH = -5


def test_valid_values_that_look_close_to_bad_ones_still_work(conn: Conn) -> None:
    """Integer-like objects (IntEnum), Mappings that are not dicts, tuples,
    text that merely looks like an escape, non-BMP characters, a lease token
    given as text, zero delay: all accepted and stored faithfully."""
    payload = {"escaped": "\\u0000 and \\\\u0000 are text here", "emoji": "🚀 \U0001f600", "tuple": (1, 2),
               "big": 2**70, "small": -0.0, "nested": {"ok": [None, True, 1.5]}}
    job_id = pyqueue.enqueue(conn, "valid", MappingProxyType(payload), priority=Level.HIGH, delay=0,
                             max_attempts=3)
    [job] = pyqueue.claim(conn, "valid", 1, lease=30)
    assert job.id == job_id and job.priority == -5 and job.max_attempts == 3
    assert job.payload == {**payload, "tuple": [1, 2]}
    assert job.lease_seconds is not None and math.isclose(job.lease_seconds, 30, abs_tol=1)
    assert pyqueue.heartbeat(conn, job.id, job.lease_token, 60) is True
    assert pyqueue.complete(conn, job.id, str(job.lease_token)) is True
    assert pyqueue.complete(conn, job.id, str(uuid4())) is False


def test_priority_and_ids_are_never_coerced(conn: Conn) -> None:
    """priority=1.5 used to be stored as 2, priority=True as 1, reap(conn, True)
    reaped one job: now each is refused and nothing is stored."""
    for bad in (1.5, True, 2.0):
        with pytest.raises(errors.InvalidPriority):
            pyqueue.enqueue(conn, "coerce", {}, priority=bad)  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidBatchSize):
        pyqueue.reap(conn, True)
    with pytest.raises(errors.InvalidTime):
        pyqueue.enqueue(conn, "coerce", {}, delay=-1)
    assert conn.execute("SELECT count(*) FROM jobq._job").fetchone() == (0,)


def test_an_exception_with_a_nul_or_a_lone_surrogate_is_still_recorded(conn: Conn) -> None:
    """``with job:`` records the traceback of any exception: NUL characters and
    lone surrogates in its message are written as escapes, not lost (the
    failure used to be refused by the database, leaving the job running)."""
    job_id = pyqueue.enqueue(conn, "odd", {})
    [job] = pyqueue.claim(conn, "odd")
    with job:
        raise ValueError(f"bad bytes {NUL} {SURROGATE}")
    row = conn.execute("SELECT status, last_error FROM jobq.jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None and row[0] in {"ready", "scheduled"}
    assert "ValueError: bad bytes a\\x00b a\\udc80b" in str(row[1])


def test_a_lease_token_may_be_given_as_text(conn: Conn) -> None:
    pyqueue.enqueue(conn, "text-token", {})
    [job] = pyqueue.claim(conn, "text-token")
    assert pyqueue.release(conn, job.id, str(job.lease_token).upper()) is True
    assert isinstance(job.lease_token, UUID)
