"""pyqueue.take(): exactly-once processing inside the caller's transaction,
with real business-table writes, both outcomes; and the periodic-job calls'
typed error where pg_cron is missing."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

import pyqueue
import pyqueue.aio
from tests.worker_support import keep_history

Conn = psycopg.Connection[tuple[object, ...]]


@pytest.fixture(autouse=True)
def history(conn: Conn) -> None:
    keep_history(conn, ["payments"])


class PaymentFailedError(Exception):
    pass


@pytest.fixture
def ledger(conn: Conn) -> Conn:
    conn.execute("CREATE TABLE ledger (job_id bigint PRIMARY KEY, cents integer NOT NULL)")
    pyqueue.enqueue_many(conn, "payments", [{"cents": 100}, {"cents": 250}, {"cents": 40}])
    return conn


def ledger_rows(conn: Conn) -> list[tuple[object, ...]]:
    return conn.execute("SELECT job_id, cents FROM ledger ORDER BY job_id").fetchall()


def job_states(conn: Conn) -> list[tuple[object, ...]]:
    return conn.execute(
        "SELECT id, status, attempts FROM jobq.jobs WHERE queue = 'payments' ORDER BY id"
    ).fetchall()


def test_commit_makes_the_jobs_done_together_with_the_business_writes(ledger: Conn, dsn: str) -> None:
    with psycopg.connect(dsn) as work, pyqueue.take(work, "payments", 2) as jobs:
        assert [job.payload["cents"] for job in jobs] == [100, 250]
        assert all(job.attempts == 1 for job in jobs)
        for job in jobs:
            work.execute("INSERT INTO ledger VALUES (%s, %s)", (job.id, job.payload["cents"]))
        # Inside the transaction nobody else sees either effect.
        assert ledger_rows(ledger) == []
        assert [s for _, s, _ in job_states(ledger)] == ["ready", "ready", "ready"]
    taken = [job.id for job in jobs]
    assert [row[0] for row in ledger_rows(ledger)] == taken
    states = {job_id: status for job_id, status, _ in job_states(ledger)}
    assert [states[i] for i in taken] == ["completed", "completed"]
    assert sorted(map(str, states.values())) == ["completed", "completed", "ready"]


def test_an_exception_rolls_back_both_and_the_jobs_come_back_untouched(ledger: Conn, dsn: str) -> None:
    before = job_states(ledger)
    with (
        psycopg.connect(dsn) as work,
        pytest.raises(PaymentFailedError),
        pyqueue.take(work, "payments", 3) as jobs,
    ):
        assert len(jobs) == 3
        work.execute("INSERT INTO ledger VALUES (%s, %s)", (jobs[0].id, 1))
        raise PaymentFailedError("card declined")
    assert ledger_rows(ledger) == []
    assert job_states(ledger) == before  # same ids, still ready, attempts unchanged


def test_concurrent_takers_never_take_the_same_job(ledger: Conn, dsn: str) -> None:
    with (
        psycopg.connect(dsn) as first,
        psycopg.connect(dsn) as second,
        pyqueue.take(first, "payments", 2) as mine,
        pyqueue.take(second, "payments", 5) as theirs,
    ):
        assert {j.id for j in mine}.isdisjoint(j.id for j in theirs)
        assert len(mine) + len(theirs) == 3


def test_async_take_commits_and_rolls_back(ledger: Conn, dsn: str) -> None:
    async def scenario() -> list[int]:
        async with await psycopg.AsyncConnection.connect(dsn) as work:
            with pytest.raises(PaymentFailedError):
                async with pyqueue.aio.take(work, "payments", 1) as jobs:
                    await work.execute("INSERT INTO ledger VALUES (%s, 1)", (jobs[0].id,))
                    raise PaymentFailedError
            async with pyqueue.aio.take(work, "payments", 1) as jobs:
                await work.execute("INSERT INTO ledger VALUES (%s, 2)", (jobs[0].id,))
                return [job.id for job in jobs]

    taken = asyncio.run(scenario())
    assert ledger_rows(ledger) == [(taken[0], 2)]
    states = {job_id: status for job_id, status, _ in job_states(ledger)}
    assert states[taken[0]] == "completed"
    assert sorted(map(str, states.values())) == ["completed", "ready", "ready"]


def test_take_reports_bad_input_with_typed_errors(conn: Conn) -> None:
    with pytest.raises(pyqueue.InvalidBatchSize) as raised, pyqueue.take(conn, "payments", -1):
        pass
    assert raised.value.hint
    with pytest.raises(pyqueue.InvalidQueueName), pyqueue.take(conn, "bad name", 1):
        pass


def test_periodic_jobs_run_by_pg_cron_need_pg_cron(conn: Conn) -> None:
    with pytest.raises(pyqueue.PgCronMissing) as raised:
        pyqueue.every(conn, "nightly", "0 3 * * *", "reports", {"kind": "daily"}, runner="pg_cron")
    assert raised.value.hint is not None and "pg_cron" in raised.value.hint
    assert pyqueue.schedules(conn) == []
    # Without a runner, jobq 0.4 hands the schedule to the workers where pg_cron is missing.
    assert pyqueue.every(conn, "nightly", "0 3 * * *", "reports", {"kind": "daily"}) is None
    assert [(s.name, s.runner) for s in pyqueue.schedules(conn)] == [("nightly", "workers")]
