"""Periodic jobs (jobq.every, backed by pg_cron).

The function pg_cron calls at every tick, jobq.enqueue_periodic(name), is
tested directly: it deduplicates while a run is active (ready, scheduled or
running; also when many ticks race) and enqueues again once the run is
over. One slow test proves that pg_cron itself enqueues: pg_cron only runs in
the database named by cron.database_name (conftest.CRON_DATABASE) and its
finest schedule is one minute, so it waits up to 75 seconds.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import psycopg
import pytest
from psycopg.types.json import Jsonb
from pytest_postgresql.executors import PostgreSQLExecutor

from tests.conftest import CRON_DATABASE, install_jobq, proc_dsn
from tests.coord_support import Conn, Threads, count_live, scalar, wait_until

CRON_WAIT = 75.0  # seconds: pg_cron 1.4 runs jobs at minute boundaries


def register(conn: Conn, name: str, queue: str, payload: dict[str, object], *,
             priority: int = 0, max_attempts: int | None = None) -> None:
    """Register a periodic job the way jobq.every() does, minus pg_cron: the
    test databases other than CRON_DATABASE cannot have pg_cron, and these
    tests call the tick function themselves."""
    conn.execute(
        "INSERT INTO jobq._periodic (name, schedule, queue, payload, priority, max_attempts) "
        "VALUES (%s, '* * * * *', %s, %s, %s, %s)",
        (name, queue, Jsonb(payload), priority, max_attempts),
    )


def tick(conn: Conn, name: str) -> int:
    """What pg_cron runs at every tick."""
    return int(scalar(conn, "SELECT jobq.enqueue_periodic(%s)", (name,)))


def claim_one(conn: Conn, queue: str) -> tuple[int, object]:
    row = conn.execute("SELECT id, lease_token FROM jobq.claim(%s, 1, 'w')", (queue,)).fetchone()
    assert row is not None, f"nothing to claim in {queue}"
    return int(row[0]), row[1]


def test_a_tick_enqueues_the_registered_job(conn: Conn) -> None:
    register(conn, "nightly-report", "reports", {"kind": "nightly"}, priority=-3, max_attempts=4)
    job = tick(conn, "nightly-report")
    row = conn.execute(
        "SELECT queue, payload, priority, max_attempts, job_key, status, run_at <= now() "
        "FROM jobq._job WHERE id = %s", (job,)
    ).fetchone()
    assert row == ("reports", {"kind": "nightly"}, -3, 4, "every:nightly-report", "ready", True)


def test_ticks_dedupe_while_a_run_is_ready_or_running(conn: Conn) -> None:
    register(conn, "sync", "periodic", {})
    first = tick(conn, "sync")
    assert tick(conn, "sync") == first, "a second tick while the run is ready returns the same job"
    job_id, lease = claim_one(conn, "periodic")
    assert job_id == first
    assert tick(conn, "sync") == first, "a tick while the run is running returns the same job"
    assert count_live(conn, "periodic") == 1, "a slow worker never piles up copies"

    assert scalar(conn, "SELECT jobq.complete(%s, %s)", (job_id, lease)) is True
    second = tick(conn, "sync")
    assert second != first, "after the run completed, the next tick enqueues a new run"
    assert count_live(conn, "periodic") == 1


def test_ticks_dedupe_while_a_run_waits_for_its_retry_and_resume_after_it_dies(conn: Conn) -> None:
    register(conn, "flaky", "periodic", {}, max_attempts=2)
    first = tick(conn, "flaky")
    job_id, lease = claim_one(conn, "periodic")
    assert job_id == first
    retried = scalar(conn, "SELECT jobq.fail(%s, 'boom', %s, now() + interval '1 hour')", (job_id, lease))
    assert retried is True
    assert tick(conn, "flaky") == first, "a run waiting for its retry still dedupes the next tick"
    assert scalar(conn, "SELECT jobq.retry(%s)", (first,)) is True, "make the retry due now"
    job_id, lease = claim_one(conn, "periodic")
    assert job_id == first
    assert scalar(conn, "SELECT jobq.fail(%s, 'boom again', %s)", (job_id, lease)) is True
    assert scalar(conn, "SELECT status FROM jobq._job_archive WHERE id = %s", (first,)) == "dead"
    assert tick(conn, "flaky") != first, "a dead run does not block the next tick"


def test_a_cancelled_run_does_not_block_the_next_tick(conn: Conn) -> None:
    register(conn, "cleanup", "periodic", {})
    first = tick(conn, "cleanup")
    assert scalar(conn, "SELECT jobq.cancel(%s)", (first,)) is True
    assert tick(conn, "cleanup") != first


def test_racing_ticks_enqueue_exactly_one_run(conn: Conn, dsn: str) -> None:
    # Ticks can overlap (a slow tick, a manual call): every caller gets the one run.
    register(conn, "race", "periodic", {})
    barrier = threading.Barrier(8)
    got: list[int] = []
    lock = threading.Lock()

    def racer(stop: threading.Event) -> None:
        with psycopg.connect(dsn, autocommit=True) as rconn:
            barrier.wait(timeout=30)
            job = tick(rconn, "race")
            with lock:
                got.append(job)

    threads = Threads()
    for i in range(8):
        threads.start(f"tick-{i}", racer)
    threads.join()
    assert len(got) == 8 and len(set(got)) == 1, f"the racing ticks returned {sorted(set(got))}"
    assert count_live(conn, "periodic") == 1


def test_unknown_or_bad_names_raise_jq016(conn: Conn) -> None:
    for name in ("no-such-job", "a b", "", "x" * 65):
        with pytest.raises(psycopg.Error) as raised:
            tick(conn, name)
        assert raised.value.sqlstate == "JQ016", name
        assert raised.value.diag.message_hint, "every JQ016 has a HINT"
    assert count_live(conn, "periodic") == 0


def test_every_without_pg_cron_raises_jq014_with_a_hint(conn: Conn) -> None:
    # The per-test databases are not cron.database_name: pg_cron cannot be created there.
    with pytest.raises(psycopg.Error) as raised:
        conn.execute("SELECT jobq.every('nightly', '0 3 * * *', 'reports')")
    assert raised.value.sqlstate == "JQ014"
    assert "pg_cron" in str(raised.value.diag.message_hint)
    assert scalar(conn, "SELECT count(*) FROM jobq.schedules") == 0, "nothing was registered"


# pg_cron itself ------------------------------------------------------------------------------------

@pytest.fixture
def cron_db(postgresql_proc: PostgreSQLExecutor) -> Iterator[Conn]:
    """CRON_DATABASE with jobq and pg_cron installed; dropped afterwards."""
    admin_dsn = proc_dsn(postgresql_proc, "postgres")

    def drop() -> None:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            # FORCE: pg_cron's scheduler stays connected to its database.
            admin.execute(f'DROP DATABASE IF EXISTS "{CRON_DATABASE}" WITH (FORCE)')

    drop()
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{CRON_DATABASE}"')
    try:
        install_jobq(postgresql_proc.host, postgresql_proc.port, postgresql_proc.user, CRON_DATABASE,
                     postgresql_proc.password)
        with psycopg.connect(proc_dsn(postgresql_proc, CRON_DATABASE), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pg_cron")
            yield conn
    finally:
        drop()


@pytest.mark.slow
def test_pg_cron_runs_the_periodic_job(cron_db: Conn) -> None:
    jobid = scalar(cron_db, "SELECT jobq.every('tick', '* * * * *', 'periodic', '{\"from\": \"pg_cron\"}')")
    assert cron_db.execute("SELECT command FROM cron.job WHERE jobid = %s", (jobid,)).fetchone() == (
        "SELECT jobq.enqueue_periodic('tick')",)
    try:
        def enqueued() -> bool:
            failed = cron_db.execute(
                "SELECT status, return_message FROM cron.job_run_details "
                "WHERE jobid = %s AND status = 'failed'",
                (jobid,),
            ).fetchall()
            assert not failed, f"pg_cron ran the job and it failed: {failed}"
            return count_live(cron_db, "periodic") > 0

        wait_until(enqueued, "pg_cron to enqueue the periodic job", timeout=CRON_WAIT, pause=0.5)
        row = cron_db.execute("SELECT payload, job_key FROM jobq._job WHERE queue = 'periodic'").fetchone()
        assert row == ({"from": "pg_cron"}, "every:tick")
        assert count_live(cron_db, "periodic") == 1, "one run per tick, deduplicated"
    finally:
        unscheduled = scalar(cron_db, "SELECT jobq.unschedule('tick')")
    assert unscheduled is True
    assert scalar(cron_db, "SELECT count(*) FROM cron.job WHERE jobname = 'jobq-every:tick'") == 0
