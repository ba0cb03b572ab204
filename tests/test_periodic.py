"""Periodic jobs (jobq.every), run by pg_cron or by the workers (jobq.run_schedules).

The function pg_cron calls at every tick, jobq.enqueue_periodic(name), is
tested directly: it deduplicates while a run is active (ready, scheduled or
running; also when many ticks race) and enqueues again once the run is
over. One slow test proves that pg_cron itself enqueues: pg_cron only runs in
the database named by cron.database_name (on a server of the test's own) and its
finest schedule is one minute, so it waits up to 75 seconds.
"""

from __future__ import annotations

import secrets
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb
from pytest_postgresql.executors import PostgreSQLExecutor

from pyqueue.localserver import LocalServer
from tests.conftest import CRON_DATABASE, fresh_cron_database, install_jobq
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


def test_without_pg_cron_every_hands_the_schedule_to_the_workers(conn: Conn) -> None:
    # The per-test databases are not cron.database_name: pg_cron cannot be created there.
    with pytest.raises(psycopg.Error) as raised:
        conn.execute("SELECT jobq.every('nightly', '0 3 * * *', 'reports', runner => 'pg_cron')")
    assert raised.value.sqlstate == "JQ014"
    assert "pg_cron" in str(raised.value.diag.message_hint)
    assert scalar(conn, "SELECT count(*) FROM jobq.schedules") == 0, "nothing was registered"
    assert scalar(conn, "SELECT jobq.every('nightly', '0 3 * * *', 'reports')") is None, "no pg_cron job id"
    row = conn.execute("SELECT runner, next_run_at = date_trunc('day', now() AT TIME ZONE 'UTC' "
                       "+ interval '21 hours') AT TIME ZONE 'UTC' + interval '3 hours', last_run_at "
                       "FROM jobq.schedules WHERE name = 'nightly'").fetchone()
    assert row == ("workers", True, None), "the workers run it, next at 03:00 UTC"


# Worker-run schedules: jobq.run_schedules() -------------------------------------------------------

def workers_schedule(conn: Conn, name: str, queue: str, *, due: str = "now() - interval '1 second'",
                     schedule: str = "* * * * *") -> None:
    """A worker-run schedule whose next tick is already due (the tests move it instead of waiting)."""
    conn.execute("SELECT jobq.every(%s, %s, %s, %s, runner => 'workers')",
                 (name, schedule, queue, Jsonb({"name": name})))
    conn.execute(f"UPDATE jobq._periodic SET next_run_at = {due} WHERE name = %s", (name,))


def test_cron_schedules_give_the_next_utc_tick(conn: Conn) -> None:
    after = "2026-11-23 15:37:10+00"  # a Monday
    cases = {
        "* * * * *": "2026-11-23 15:38:00+00",
        "*/15 * * * *": "2026-11-23 15:45:00+00",
        "0 3 * * mon-fri": "2026-11-24 03:00:00+00",
        "0 0 13 * 5": "2026-11-27 00:00:00+00",  # both day fields restricted: either matches (Friday 27th)
        "30 2 1 jan,jul *": "2027-01-01 02:30:00+00",
        "0 0 29 2 *": "2028-02-29 00:00:00+00",
        "@monthly": "2026-12-01 00:00:00+00",
        "@weekly": "2026-11-29 00:00:00+00",
        "5-10/5 15 23 11 1": "2026-11-30 15:05:00+00",  # 15:05 and 15:10 of the 23rd are past: next Monday's
        "0 12 * * 7": "2026-11-29 12:00:00+00",  # 7 is Sunday too
    }
    got = {schedule: str(scalar(conn, "SELECT jobq._cron_next(%s, %s)::text", (schedule, after)))
           for schedule in cases}
    assert got == cases
    for bad in ("* * * *", "60 * * * *", "* 24 * * *", "* * 0 * *", "* * * 13 *", "* * * * 8", "*/0 * * * *",
                "5-1 * * * *", "a * * * *", "1,,2 * * * *", "0 0 30 2 *", "@often", "", "10 seconds"):
        assert scalar(conn, "SELECT jobq._cron_next(%s, now())", (bad,)) is None, bad


def test_a_due_tick_is_enqueued_once_and_the_next_is_the_first_after_now(conn: Conn) -> None:
    workers_schedule(conn, "late", "lq", due="now() - interval '3 hours'")
    next_at = scalar(conn, "SELECT jobq.run_schedules()")
    assert scalar(conn, "SELECT count(*) FROM jobq._job WHERE queue = 'lq' AND job_key = 'every:late'") == 1
    row = conn.execute("SELECT next_run_at > now(), next_run_at <= now() + interval '1 minute', "
                       "last_run_at < now() - interval '2 hours', next_run_at = %s "
                       "FROM jobq.schedules WHERE name = 'late'", (next_at,)).fetchone()
    assert row == (True, True, True, True), "three hours of missed ticks ran once, late; the rest are skipped"
    assert scalar(conn, "SELECT jobq.run_schedules() = %s", (next_at,)) is True
    assert count_live(conn, "lq") == 1, "nothing was due any more"


def test_run_schedules_leaves_pg_cron_schedules_alone(conn: Conn) -> None:
    register(conn, "cron-run", "cq", {"n": 1})
    assert scalar(conn, "SELECT jobq.run_schedules()") is None, "no worker-run schedule"
    assert count_live(conn, "cq") == 0


def test_a_tick_is_enqueued_exactly_once_however_many_sessions_race(conn: Conn, dsn: str) -> None:
    sessions, rounds = 8, 5
    for r in range(rounds):
        workers_schedule(conn, f"race-{r}", f"race-{r}")
    start = threading.Barrier(sessions)

    def racer(stop: threading.Event) -> None:
        with psycopg.connect(dsn, autocommit=True) as session:
            start.wait()
            for _ in range(3):
                session.execute("SELECT jobq.run_schedules()")

    threads = Threads()
    for i in range(sessions):
        threads.start(f"racer-{i}", racer)
    threads.join()
    for r in range(rounds):
        # The first run is still ready: it holds the key, so no second copy either way; count ticks
        # by the schedule instead, which moved on exactly once.
        assert count_live(conn, f"race-{r}") == 1
    moved = scalar(conn, "SELECT count(*) FROM jobq.schedules WHERE name LIKE 'race-%%' "
                         "AND last_run_at < now() AND next_run_at > now()")
    assert moved == rounds


def test_each_tick_enqueues_a_new_run_once_the_last_is_done(conn: Conn) -> None:
    workers_schedule(conn, "again", "aq")
    conn.execute("SELECT jobq.run_schedules()")
    job, token = claim_one(conn, "aq")
    assert scalar(conn, "SELECT jobq.complete(%s, %s)", (job, token)) is True
    conn.execute("UPDATE jobq._periodic SET next_run_at = now() - interval '1 second' WHERE name = 'again'")
    conn.execute("SELECT jobq.run_schedules()")
    second = scalar(conn, "SELECT id FROM jobq._job WHERE queue = 'aq'")
    assert second is not None and second != job


def test_a_tick_that_cannot_be_enqueued_is_skipped_with_a_warning(conn: Conn) -> None:
    workers_schedule(conn, "too-big", "tb")
    # A definition the live table refuses (an empty queue name), written past jobq's own checks.
    conn.execute("UPDATE jobq._periodic SET queue = '' WHERE name = 'too-big'")
    warnings: list[str] = []
    conn.add_notice_handler(lambda d: warnings.append(str(d.message_primary)))
    conn.execute("SELECT jobq.run_schedules()")
    assert any("too-big" in w and "skipped" in w for w in warnings), warnings
    assert scalar(conn, "SELECT next_run_at > now() FROM jobq._periodic WHERE name = 'too-big'") is True


# pg_cron itself ------------------------------------------------------------------------------------

@pytest.fixture
def cron_db(tmp_path: Path) -> Iterator[Conn]:
    """jobq and pg_cron on a server of this test's own (pyqueue.localserver, which
    loads pg_cron for its database), stopped afterwards. Not the shared test
    server: other tests use its cron database too, and once anything ends
    pg_cron's launcher there (DROP DATABASE ... WITH (FORCE) does) the
    postmaster never starts it again."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = LocalServer(tmp_path / "cron", port=port, database="jobq_cron_own")
    if not server.pg_cron:
        pytest.fail("pg_cron is not installed on this machine (make deps installs postgresql-15-cron)")
    with server:
        install_jobq(server.host, server.port, "postgres", server.database, None)
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            yield conn


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


# A jobq_admin login that holds nothing on pg_cron ------------------------------------------------

@pytest.fixture
def cron_admin(postgresql_proc: PostgreSQLExecutor) -> Iterator[tuple[Conn, Conn, str]]:
    """pg_cron's database of the session server (conftest.fresh_cron_database)
    with jobq installed the way ``pyqueue install`` does, and a LOGIN role
    that is a member of jobq_admin and nothing else (pg_cron grants USAGE on
    its schema to nobody): (a superuser connection, the role's, its name)."""
    dsn = fresh_cron_database(postgresql_proc)
    role = f"cron_admin_{secrets.token_hex(4)}"
    with psycopg.connect(dsn, autocommit=True) as superuser:
        # fresh_cron_database's DROP SCHEMA public CASCADE also drops pg_cron (created in public)
        superuser.execute("CREATE EXTENSION IF NOT EXISTS pg_cron")
        install_jobq(postgresql_proc.host, postgresql_proc.port, postgresql_proc.user, CRON_DATABASE, None)
        superuser.execute(f"CREATE ROLE {role} LOGIN IN ROLE jobq_admin")
        try:
            with psycopg.connect(make_conninfo(dsn, user=role), autocommit=True) as admin:
                yield superuser, admin, role
        finally:
            superuser.execute("SELECT cron.unschedule(jobid) FROM cron.job")
            superuser.execute(f"DROP OWNED BY {role}")
            superuser.execute(f"DROP ROLE {role}")


def raised_by(conn: Conn, sql: str) -> psycopg.Error:
    with pytest.raises(psycopg.Error) as raised:
        conn.execute(sql)
    return raised.value


def test_jobq_admin_without_pg_cron_privileges_has_the_workers_run_its_schedules(
    cron_admin: tuple[Conn, Conn, str],
) -> None:
    superuser, admin, role = cron_admin
    # Under the workers: scheduled, moved and removed (0.8.0: 42501 permission denied for schema cron).
    assert scalar(admin, "SELECT jobq.every('nightly', '0 3 * * *', 'reports', runner => 'workers')") is None
    assert scalar(admin, "SELECT jobq.every('nightly', '0 4 * * *', 'reports', runner => 'workers')") is None
    schedules = admin.execute("SELECT schedule, runner FROM jobq.schedules").fetchall()
    assert schedules == [("0 4 * * *", "workers")]
    assert scalar(admin, "SELECT jobq.unschedule('nightly')") is True
    assert scalar(admin, "SELECT jobq.unschedule('nightly')") is False
    # pg_cron itself it may not use: JQ014 naming what is missing, with a HINT, and nothing changed.
    for call in ("SELECT jobq.every('nightly', '0 3 * * *', 'reports', runner => 'pg_cron')",
                 "SELECT jobq.every('nightly', '0 3 * * *', 'reports')",  # NULL: pg_cron, installed here
                 "SELECT jobq.schedule_maintenance()",
                 "SELECT jobq.unschedule_maintenance()"):
        error = raised_by(admin, call)
        assert error.sqlstate == "JQ014", (call, error.sqlstate, str(error))
        assert error.diag.message_primary == f"jobq: role {role} may not use pg_cron: it has no USAGE on " \
                                             "schema cron", call
        hint = str(error.diag.message_hint)
        assert f"GRANT USAGE ON SCHEMA cron TO {role}" in hint and "runner => 'workers'" in hint, call
    assert scalar(superuser, "SELECT count(*) FROM jobq._periodic") == 0
    assert scalar(superuser, "SELECT count(*) FROM cron.job") == 0
    # Granted USAGE, it schedules with pg_cron; moved to the workers, its pg_cron job goes.
    superuser.execute(f"GRANT USAGE ON SCHEMA cron TO {role}")
    jobid = scalar(admin, "SELECT jobq.every('nightly', '0 3 * * *', 'reports')")
    cron_jobs = superuser.execute("SELECT jobname, username FROM cron.job WHERE jobid = %s",
                                  (jobid,)).fetchall()
    assert cron_jobs == [("jobq-every:nightly", role)]
    assert scalar(admin, "SELECT jobq.every('nightly', '0 3 * * *', 'reports', runner => 'workers')") is None
    assert scalar(superuser, "SELECT count(*) FROM cron.job") == 0
    # Another role's pg_cron job of that name is not the caller's to remove (nor an error).
    superuser.execute("SELECT cron.schedule('jobq-every:nightly', '0 3 * * *', 'SELECT 1')")
    assert scalar(admin, "SELECT jobq.unschedule('nightly')") is True
    assert superuser.execute("SELECT jobname, username = current_user FROM cron.job").fetchall() == [
        ("jobq-every:nightly", True)]
