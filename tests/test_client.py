"""pyqueue's client calls against a real database: round trips, fencing,
typed errors for bad input, and enqueueing inside the caller's transaction."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any
from uuid import UUID

import psycopg
import pytest
from psycopg.rows import dict_row

import pyqueue
from pyqueue import errors

Conn = psycopg.Connection[tuple[object, ...]]
UTC = timezone.utc


def one(conn: Conn, query: str, params: Any = None) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def status(conn: Conn, job_id: int) -> str:
    return str(one(conn, "SELECT status FROM jobq.jobs WHERE id = %s", (job_id,)))


def test_enqueue_claim_complete_round_trip(conn: Conn) -> None:
    # History is opt-in since jobq 0.3.0: keep a day of it to see the job completed.
    conn.execute("SELECT jobq.configure_queue('emails', retention => interval '1 day')")
    job_id = pyqueue.enqueue(conn, "emails", {"to": "ada@example.com"}, priority=3, max_attempts=5, key="ada")
    jobs = pyqueue.claim(conn, "emails", 10, worker="w-1", lease=timedelta(seconds=30))
    assert [j.id for j in jobs] == [job_id]
    job = jobs[0]
    assert job.payload == {"to": "ada@example.com"}
    assert (job.queue, job.priority, job.attempts, job.max_attempts) == ("emails", 3, 1, 5)
    assert (job.job_key, job.worker, job.last_error) == ("ada", "w-1", None)
    assert isinstance(job.lease_token, UUID)
    assert job.lease_seconds == pytest.approx(30.0, abs=1.0)
    assert isinstance(job.run_at, datetime) and job.run_at.tzinfo is not None
    assert status(conn, job_id) == "running"
    assert job.complete() is True
    assert job.acknowledged
    assert status(conn, job_id) == "completed"
    # A second acknowledgement is fenced: reported, not applied.
    assert job.complete() is False
    assert pyqueue.claim(conn, "emails") == []
    assert one(conn, "SELECT completed_total FROM jobq.stats WHERE queue = 'emails'") == 1, "counted once"


def test_a_completed_job_leaves_no_history_by_default(conn: Conn) -> None:
    job_id = pyqueue.enqueue(conn, "plain", {})
    [job] = pyqueue.claim(conn, "plain")
    assert job.complete() is True
    assert one(conn, "SELECT count(*) FROM jobq.jobs WHERE id = %s", (job_id,)) == 0
    assert one(conn, "SELECT completed_total FROM jobq.stats WHERE queue = 'plain'") == 1


def test_claim_default_worker_name_and_queue_default_lease(conn: Conn) -> None:
    pyqueue.enqueue(conn, "q", {})
    [job] = pyqueue.claim(conn, "q")
    assert job.worker is not None and job.worker.endswith(f":{__import__('os').getpid()}")
    assert job.lease_seconds == pytest.approx(300.0, abs=1.0)  # jobq's default lease: 5 minutes


def test_claim_several_queues_most_urgent_first(conn: Conn) -> None:
    low = pyqueue.enqueue(conn, "a", {"n": 1}, priority=5)
    high = pyqueue.enqueue(conn, "b", {"n": 2}, priority=-1)
    mid = pyqueue.enqueue(conn, "a", {"n": 3}, priority=0)
    pyqueue.enqueue(conn, "c", {"n": 4}, priority=-100)  # not asked for
    jobs = pyqueue.claim(conn, ["a", "b"], 10)
    assert [j.id for j in jobs] == [high, mid, low]


def test_enqueue_many_returns_ids_in_payload_order_and_dedupes_keys(conn: Conn) -> None:
    ids = pyqueue.enqueue_many(conn, "bulk", [{"i": i} for i in range(5)])
    assert len(ids) == 5
    rows = conn.execute("SELECT id, payload->>'i' FROM jobq._job WHERE id = ANY(%s)", (ids,)).fetchall()
    assert {r[0]: int(str(r[1])) for r in rows} == {job_id: i for i, job_id in enumerate(ids)}
    keyed = pyqueue.enqueue_many(conn, "bulk", [{"k": 1}, {"k": 2}, {"k": 3}], keys=["x", None, "x"])
    assert keyed[0] == keyed[2] != keyed[1]
    # An active job already holding the key is returned, not duplicated.
    assert pyqueue.enqueue(conn, "bulk", {"k": 9}, key="x") == keyed[0]
    assert one(conn, "SELECT count(*) FROM jobq._job WHERE queue = 'bulk'") == 7
    assert pyqueue.enqueue_many(conn, "bulk", []) == []


def test_delay_is_added_to_the_database_clock(conn: Conn) -> None:
    later = pyqueue.enqueue(conn, "sched", {}, delay=timedelta(hours=1))
    seconds = pyqueue.enqueue(conn, "sched", {}, delay=90.5)
    # created_at and run_at come from the same now(): the difference is exact.
    gaps = {r[0]: r[1] for r in conn.execute("SELECT id, run_at - created_at FROM jobq._job").fetchall()}
    assert gaps == {later: timedelta(hours=1), seconds: timedelta(seconds=90.5)}
    assert pyqueue.claim(conn, "sched", 10) == []
    [st] = [s for s in pyqueue.stats(conn) if s.queue == "sched"]
    assert (st.ready, st.scheduled) == (0, 2)


def test_run_at_is_used_as_given(conn: Conn) -> None:
    db_now = one(conn, "SELECT now()")
    when = db_now + timedelta(days=2)
    job_id = pyqueue.enqueue(conn, "sched", {}, run_at=when)
    assert one(conn, "SELECT run_at FROM jobq._job WHERE id = %s", (job_id,)) == when


def test_delay_and_run_at_are_mutually_exclusive_and_checked(conn: Conn) -> None:
    aware = datetime.now(timezone.utc)
    with pytest.raises(ValueError, match="either delay or run_at"):
        pyqueue.enqueue(conn, "q", {}, delay=5, run_at=aware)
    with pytest.raises(ValueError, match="timezone-aware"):
        pyqueue.enqueue(conn, "q", {}, run_at=datetime(2030, 1, 1))
    with pytest.raises(ValueError, match="finite number of seconds"):
        pyqueue.enqueue(conn, "q", {}, delay=float("nan"))
    with pytest.raises(ValueError, match="either delay or run_at"):
        pyqueue.enqueue_many(conn, "q", [{}], delay=1, run_at=aware)
    assert one(conn, "SELECT count(*) FROM jobq._job") == 0


def test_fail_backs_off_then_dead_letters_and_retry_brings_back(conn: Conn) -> None:
    pyqueue.configure_queue(conn, "flaky", backoff_base=0, backoff_jitter=0)
    job_id = pyqueue.enqueue(conn, "flaky", {"n": 1}, max_attempts=2)
    [first] = pyqueue.claim(conn, "flaky")
    assert first.fail("boom 1") is True
    assert status(conn, job_id) == "ready"
    [second] = pyqueue.claim(conn, "flaky")
    assert (second.attempts, second.last_error) == (2, "boom 1")
    assert pyqueue.fail(conn, second.id, second.lease_token, "boom 2") is True
    assert status(conn, job_id) == "dead"
    [st] = [s for s in pyqueue.stats(conn) if s.queue == "flaky"]
    assert st.dead == 1
    assert pyqueue.retry(conn, job_id) is True
    [again] = pyqueue.claim(conn, "flaky")
    assert (again.id, again.attempts, again.last_error) == (job_id, 1, "boom 2")
    assert again.fail("boom 3") is True
    [dead_again] = pyqueue.claim(conn, "flaky")
    assert dead_again.fail("boom 4") is True
    assert pyqueue.retry_dead(conn, "flaky") == 1
    assert status(conn, job_id) == "ready"


def test_fail_with_retry_at(conn: Conn) -> None:
    job_id = pyqueue.enqueue(conn, "q", {})
    [job] = pyqueue.claim(conn, "q")
    when = one(conn, "SELECT now() + interval '1 hour'")
    assert job.fail("later, please", retry_at=when) is True
    assert one(conn, "SELECT run_at FROM jobq._job WHERE id = %s", (job_id,)) == when
    assert pyqueue.claim(conn, "q") == []


def test_heartbeat_extends_and_a_reaped_lease_is_fenced(conn: Conn) -> None:
    job_id = pyqueue.enqueue(conn, "q", {})
    [job] = pyqueue.claim(conn, "q", lease=timedelta(seconds=5))
    assert job.heartbeat(timedelta(minutes=10)) is True
    expires = one(conn, "SELECT lease_expires_at - clock_timestamp() FROM jobq._job WHERE id = %s", (job_id,))
    assert timedelta(minutes=9) < expires <= timedelta(minutes=10)
    assert pyqueue.heartbeat(conn, job.id, job.lease_token) is True  # the queue's lease
    # Expire the lease by hand and reap: the job goes back, the holder is fenced.
    conn.execute("UPDATE jobq._job SET lease_expires_at = now() - interval '1 second' WHERE id = %s",
                 (job_id,))
    assert pyqueue.reap(conn) == 1
    assert job.heartbeat() is False
    assert job.lease_lost
    assert job.complete() is False
    assert pyqueue.fail(conn, job.id, job.lease_token, "too late") is False
    [again] = pyqueue.claim(conn, "q")
    assert again.id == job_id and again.attempts == 2 and again.lease_token != job.lease_token
    assert again.last_error is not None and "lease expired" in again.last_error


def test_release_gives_the_attempt_back(conn: Conn) -> None:
    job_id = pyqueue.enqueue(conn, "q", {})
    [job] = pyqueue.claim(conn, "q")
    assert job.release() is True
    assert conn.execute("SELECT status, attempts FROM jobq._job WHERE id = %s", (job_id,)).fetchone() \
        == ("ready", 0)
    assert pyqueue.release(conn, job.id, job.lease_token) is False


def test_complete_many_counts_only_held_leases(conn: Conn) -> None:
    pyqueue.enqueue_many(conn, "q", [{"i": i} for i in range(4)])
    jobs = pyqueue.claim(conn, "q", 4)
    assert jobs[0].complete() is True
    assert pyqueue.complete_many(conn, jobs) == 3
    assert all(j.acknowledged for j in jobs)
    assert pyqueue.complete_many(conn, []) == 0
    assert pyqueue.complete(conn, jobs[1].id, jobs[1].lease_token) is False


def test_cancel(conn: Conn) -> None:
    job_id = pyqueue.enqueue(conn, "q", {})
    assert pyqueue.cancel(conn, job_id) is True
    assert status(conn, job_id) == "cancelled"
    assert pyqueue.cancel(conn, job_id) is False
    assert pyqueue.cancel(conn, 10**12) is False


def test_stats_and_configure_queue(conn: Conn) -> None:
    settings = pyqueue.configure_queue(conn, "cfg", max_attempts=3, lease=timedelta(seconds=42),
                                       backoff_base=1.5)
    assert settings["queue"] == "cfg"
    assert (settings["max_attempts"], settings["lease"], settings["backoff_base"]) == \
        (3, timedelta(seconds=42), timedelta(seconds=1.5))
    # Omitted settings stay as they are.
    assert pyqueue.configure_queue(conn, "cfg", max_attempts=4)["lease"] == timedelta(seconds=42)
    with pytest.raises(TypeError, match="unknown queue setting"):
        pyqueue.configure_queue(conn, "cfg", leese=1)
    pyqueue.enqueue_many(conn, "cfg", [{}, {}, {}])
    pyqueue.enqueue(conn, "cfg", {}, delay=60)
    pyqueue.claim(conn, "cfg")
    [st] = pyqueue.stats(conn)
    assert st == pyqueue.QueueStats("cfg", ready=2, scheduled=1, running=1, dead=0,
                                    oldest_ready_age=st.oldest_ready_age)
    assert isinstance(st.oldest_ready_age, timedelta)


def test_works_whatever_the_callers_row_factory(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as dconn:
        job_id = pyqueue.enqueue(dconn, "q", {"a": 1})
        [job] = pyqueue.claim(dconn, "q")
        assert job.id == job_id and job.complete()
        pyqueue.enqueue(dconn, "q", {"a": 2})
        assert [(s.queue, s.ready) for s in pyqueue.stats(dconn)] == [("q", 1)]


def test_with_job_completes_or_fails_with_the_traceback(conn: Conn) -> None:
    conn.execute("SELECT jobq.configure_queue('q', retention => interval '1 day')")  # history is opt-in
    ok_id, bad_id = pyqueue.enqueue_many(conn, "q", [{"ok": True}, {"ok": False}])
    for job in pyqueue.claim(conn, "q", 2):
        with job:
            if not job.payload["ok"]:
                raise ValueError("bad payload")  # swallowed: the loop goes on
    assert status(conn, ok_id) == "completed"
    assert status(conn, bad_id) == "scheduled"  # backing off before its next attempt
    error = one(conn, "SELECT last_error FROM jobq._job WHERE id = %s", (bad_id,))
    assert error.startswith("Traceback (most recent call last):")
    assert "test_with_job_completes_or_fails_with_the_traceback" in error
    assert error.rstrip().endswith("ValueError: bad payload")


def test_a_long_traceback_keeps_its_end(conn: Conn) -> None:
    job_id = pyqueue.enqueue(conn, "q", {})
    [job] = pyqueue.claim(conn, "q")
    with job:
        raise RuntimeError("x" * 20000 + " the end")
    error = one(conn, "SELECT last_error FROM jobq._job WHERE id = %s", (job_id,))
    assert len(error) <= 10000
    assert error.startswith("Traceback") and error.rstrip().endswith(" the end")


def test_with_job_lets_keyboard_interrupt_through_after_failing_it(conn: Conn) -> None:
    job_id = pyqueue.enqueue(conn, "q", {})
    [job] = pyqueue.claim(conn, "q")
    with pytest.raises(KeyboardInterrupt), job:
        raise KeyboardInterrupt
    assert "KeyboardInterrupt" in one(conn, "SELECT last_error FROM jobq._job WHERE id = %s", (job_id,))


def test_serial_group_runs_one_job_at_a_time_in_order(conn: Conn) -> None:
    first, second = pyqueue.enqueue_many(conn, "g", [{"n": 1}, {"n": 2}], group_key="customer:7")
    third = pyqueue.enqueue(conn, "g", {"n": 3}, group_key="customer:7")
    loose = pyqueue.enqueue(conn, "g", {"n": 4})
    claimed = pyqueue.claim(conn, "g", 10)
    assert sorted(j.id for j in claimed) == [first, loose]
    assert {j.id: j.group_key for j in claimed} == {first: "customer:7", loose: None}
    for job in claimed:
        job.complete()
    [nxt] = pyqueue.claim(conn, "g", 10)
    assert nxt.id == second
    nxt.complete()
    assert [j.id for j in pyqueue.claim(conn, "g", 10)] == [third]


def test_snooze_puts_a_job_back_without_spending_an_attempt(conn: Conn) -> None:
    job_id = pyqueue.enqueue(conn, "z", {})
    [job] = pyqueue.claim(conn, "z")
    assert job.snooze(60) is True
    row = conn.execute("SELECT status, attempts, run_at - now() > interval '59 seconds' FROM jobq.jobs "
                       "WHERE id = %s", (job_id,)).fetchone()
    assert row == ("scheduled", 0, True)
    with pytest.raises(ValueError, match="delay or a run_at"):
        pyqueue.snooze(conn, job.id, job.lease_token)
    assert pyqueue.snooze(conn, job.id, job.lease_token, 5) is False  # no longer held


def test_pause_and_resume(conn: Conn) -> None:
    job_id = pyqueue.enqueue(conn, "pz", {})
    assert pyqueue.pause(conn, "pz") is True
    assert pyqueue.pause(conn, "pz") is False
    assert pyqueue.claim(conn, "pz") == []
    assert pyqueue.resume(conn, "pz") is True
    assert [j.id for j in pyqueue.claim(conn, "pz")] == [job_id]


def test_configure_concurrency_limits_claims(conn: Conn) -> None:
    assert pyqueue.configure_queue(conn, "lim", concurrency=2)["concurrency"] == 2
    pyqueue.enqueue_many(conn, "lim", [{}] * 5)
    assert len(pyqueue.claim(conn, "lim", 5)) == 2
    assert pyqueue.claim(conn, "lim", 5) == []


# --- transactions -----------------------------------------------------------

def test_enqueue_commits_and_rolls_back_with_the_business_write(conn: Conn, dsn: str) -> None:
    conn.execute("CREATE TABLE orders (id int PRIMARY KEY, total numeric NOT NULL)")
    with psycopg.connect(dsn) as app:  # not autocommit: one transaction per block
        app.execute("INSERT INTO orders VALUES (1, 9.99)")
        rolled_back = pyqueue.enqueue(app, "invoices", {"order": 1})
        # Uncommitted: nobody else sees the job, so no worker can run it early.
        assert pyqueue.claim(conn, "invoices") == []
        app.rollback()
        app.execute("INSERT INTO orders VALUES (2, 5.00)")
        committed = pyqueue.enqueue(app, "invoices", {"order": 2})
        ids = pyqueue.enqueue_many(app, "invoices", [{"order": 2, "copy": True}])
        app.commit()
    assert one(conn, "SELECT array_agg(id ORDER BY id) FROM orders") == [2]
    assert one(conn, "SELECT count(*) FROM jobq.jobs WHERE id = %s", (rolled_back,)) == 0
    claimed = pyqueue.claim(conn, "invoices", 10)
    assert sorted(j.id for j in claimed) == sorted([committed, *ids])
    assert {j.payload["order"] for j in claimed} == {2}


def test_client_calls_never_commit_for_the_caller(dsn: str, conn: Conn) -> None:
    job_id = pyqueue.enqueue(conn, "q", {})
    with psycopg.connect(dsn) as app:
        [job] = pyqueue.claim(app, "q")
        assert job.complete() is True
        app.rollback()  # the claim and the completion go away together
    assert conn.execute("SELECT status, attempts FROM jobq._job WHERE id = %s", (job_id,)).fetchone() \
        == ("ready", 0)


# --- typed errors -----------------------------------------------------------

def _raw(conn: Conn, sql: str) -> Callable[[], object]:
    def call() -> object:
        with errors.translate_errors():
            return conn.execute(sql).fetchall()
    return call


def _dead_job_whose_key_is_taken(conn: Conn) -> Callable[[], object]:
    job_id = pyqueue.enqueue(conn, "k", {}, key="unique", max_attempts=1)
    [job] = pyqueue.claim(conn, "k")
    job.fail("dead")
    pyqueue.enqueue(conn, "k", {}, key="unique")  # a dead job does not block its key
    return lambda: pyqueue.retry(conn, job_id)


def _claim_in_repeatable_read(conn: Conn) -> Callable[[], object]:
    def call() -> object:
        with psycopg.connect(conn.info.dsn) as other:
            other.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            return pyqueue.claim(other, "q")
    return call


def _duplicate_parent(conn: Conn) -> Callable[[], object]:
    parent = pyqueue.enqueue(conn, "q", {})
    return lambda: pyqueue.enqueue(conn, "q", {}, depends_on=[parent, parent])


def _produce_without_the_queues_grant(conn: Conn) -> Callable[[], object]:
    assert pyqueue.grant_queue(conn, "jobq_worker", "locked", "produce")

    def call() -> object:
        with psycopg.connect(conn.info.dsn) as other:
            other.execute("SET ROLE jobq_producer")  # a producer, but not of this queue
            return pyqueue.enqueue(other, "locked", {})
    return call


BAD_CALLS: dict[str, tuple[type[errors.JobqError], Callable[[Conn], Callable[[], object]]]] = {
    "JQ001": (errors.InvalidQueueName, lambda c: lambda: pyqueue.enqueue(c, "no spaces", {})),
    "JQ002": (errors.InvalidPayload, lambda c: lambda: pyqueue.enqueue(c, "q", [1, 2])),  # type: ignore[arg-type]
    "JQ003": (errors.PayloadTooLarge, lambda c: (pyqueue.configure_queue(c, "tiny", max_payload_bytes=16),
                                                 lambda: pyqueue.enqueue(c, "tiny", {"x": "y" * 100}))[1]),
    "JQ004": (errors.InvalidPriority, lambda c: lambda: pyqueue.enqueue(c, "q", {}, priority=40000)),
    "JQ005": (errors.InvalidMaxAttempts, lambda c: lambda: pyqueue.enqueue(c, "q", {}, max_attempts=0)),
    "JQ006": (errors.InvalidTime,
              lambda c: lambda: pyqueue.enqueue(c, "q", {}, run_at=datetime(2999, 1, 1, tzinfo=UTC))),
    "JQ007": (errors.InvalidBatchSize, lambda c: lambda: pyqueue.claim(c, "q", -1)),
    "JQ008": (errors.InvalidInterval, lambda c: lambda: pyqueue.claim(c, "q", lease=timedelta(0))),
    "JQ009": (errors.InvalidJobKey, lambda c: lambda: pyqueue.enqueue(c, "q", {}, key="")),
    "JQ010": (errors.MissingLease, lambda c: _raw(c, "SELECT jobq.complete(1, NULL)")),
    "JQ011": (errors.InvalidWorkerName, lambda c: lambda: pyqueue.claim(c, "q", worker="w" * 201)),
    "JQ012": (errors.InvalidSetting, lambda c: lambda: pyqueue.configure_queue(c, "q", lease=0)),
    "JQ013": (errors.JobKeyConflict, _dead_job_whose_key_is_taken),
    "JQ014": (errors.PgCronMissing, lambda c: _raw(c, "SELECT * FROM jobq.schedule_maintenance()")),
    "JQ015": (errors.NotReadCommitted, _claim_in_repeatable_read),
    "JQ016": (errors.InvalidPeriodicName, lambda c: _raw(c, "SELECT jobq.enqueue_periodic('no spaces')")),
    "JQ017": (errors.InvalidArgument, lambda c: _raw(c, "SELECT jobq.cancel_jobs('q', 'nonsense')")),
    "JQ018": (errors.InvalidDependency, _duplicate_parent),
    "JQ019": (errors.UnknownJob, lambda c: lambda: pyqueue.enqueue(c, "q", {}, depends_on=[10**12])),
    "JQ020": (errors.QueuePrivilegeDenied, _produce_without_the_queues_grant),
    "JQ021": (errors.InvalidRole,
              lambda c: lambda: pyqueue.grant_queue(c, "no_such_role_jq021", "q", "read")),
}


@pytest.mark.parametrize("sqlstate", sorted(BAD_CALLS))
def test_bad_input_raises_its_typed_error_and_changes_nothing(conn: Conn, sqlstate: str) -> None:
    cls, setup = BAD_CALLS[sqlstate]
    call = setup(conn)
    before = one(conn, "SELECT count(*) FROM jobq.jobs")
    with pytest.raises(cls) as caught:
        call()
    err = caught.value
    assert type(err) is cls and isinstance(err, pyqueue.JobqError)
    assert err.sqlstate == sqlstate == cls.SQLSTATE
    assert err.hint  # every jobq error says how to fix it
    assert err.message.startswith("jobq: ")
    assert err.diag is not None and err.diag.message_primary == err.message
    assert f"HINT: {err.hint}" in str(err)
    assert isinstance(err.__cause__, psycopg.Error) and err.__cause__.sqlstate == sqlstate
    assert one(conn, "SELECT count(*) FROM jobq.jobs") == before


def test_every_sqlstate_has_its_class() -> None:
    assert sorted(errors.ERRORS_BY_SQLSTATE) == [f"JQ{i:03d}" for i in range(1, 22)]
    assert sorted(BAD_CALLS) == sorted(errors.ERRORS_BY_SQLSTATE)
    for sqlstate, cls in errors.ERRORS_BY_SQLSTATE.items():
        assert issubclass(cls, pyqueue.JobqError) and sqlstate == cls.SQLSTATE
        assert getattr(pyqueue, cls.__name__) is cls


def test_unknown_jq_code_is_a_plain_jobq_error_and_others_pass_through(conn: Conn) -> None:
    with pytest.raises(pyqueue.JobqError) as caught, errors.translate_errors():
        conn.execute("DO $$ BEGIN RAISE EXCEPTION 'jobq: newer' USING ERRCODE = 'JQ999', HINT = 'h'; END $$")
    assert type(caught.value) is pyqueue.JobqError
    assert (caught.value.sqlstate, caught.value.hint) == ("JQ999", "h")
    with pytest.raises(psycopg.errors.UndefinedFunction), errors.translate_errors():
        conn.execute("SELECT jobq.no_such_function()")
