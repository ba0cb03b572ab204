"""The history of finished jobs in day partitions (jobq 0.7.0), where one
session cannot show it: the upgrade converting a populated 0.6.0 archive
(100,000 rows; 1,000,000 under ``make chaos``), pg_dump/pg_restore of an extension install with rows in day
partitions and in the default one, and prune under concurrency (a partition
in use is left for the next prune; two prunes never wait on each other; a
vacuum of a partition does not make prune skip, and prune waits past
deadlock_timeout, when a blocking autovacuum yields).
pgtap/archive_partitions.sql tests the rest within one transaction.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from pytest_postgresql.executors import PostgreSQLExecutor

from pyqueue.localserver import find_bindir
from tests.chaos_support import report, scaled
from tests.conftest import SQL_DIR, default_version, proc_dsn
from tests.coord_support import Conn, scalar

ROWS = scaled(100_000)  # 1,000,000 under make chaos (JOBQ_CHAOS_SCALE=10)
# Every kind of row the 0.6.0 archive holds, by id modulo 20: expired completed
# ones (with and without a result), completed ones expiring today and in 5
# days, ones expiring in 60 days (beyond the horizon), dead ones kept until
# retried (with an error history), cancelled descendants of a dead root.
FILL_0_6_0 = """
INSERT INTO jobq._job_archive
    (id, queue, payload, status, priority, run_at, attempts, max_attempts, job_key, worker, last_error,
     created_at, started_at, finished_at, prune_after, group_key, timeout, result, cancelled_by)
SELECT g, 'q' || (g % 7), jsonb_build_object('n', g, 'pad', repeat('x', 120)),
       CASE WHEN g % 20 IN (0, 1) THEN 'dead' WHEN g % 20 = 2 THEN 'cancelled' ELSE 'completed' END,
       (g % 3)::smallint, now() - interval '3 days', 1 + g % 2, 5, CASE WHEN g % 50 = 0 THEN 'k' || g END,
       'w' || (g % 4), CASE WHEN g % 20 IN (0, 1) THEN 'boom ' || g END,
       now() - interval '3 days', now() - interval '2 days', now() - interval '2 days',
       CASE WHEN g % 20 IN (0, 1, 2) THEN NULL
            WHEN g % 20 < 8 THEN now() - interval '1 day' - (g % 5) * interval '1 hour'
            WHEN g % 20 < 12 THEN date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
                                  + interval '23 hours 59 minutes'
            WHEN g % 20 < 18 THEN now() + interval '5 days'
            ELSE now() + interval '60 days' END,
       NULL, NULL, CASE WHEN g % 20 = 3 THEN jsonb_build_object('r', g) END,
       CASE WHEN g % 20 = 2 THEN g - 2 END
FROM generate_series(1, ROWS) AS g;
INSERT INTO jobq._job_error (job_id, attempt, error, failed_at, worker)
SELECT g, 1, 'boom ' || g, now() - interval '2 days', 'w'
FROM generate_series(1, ROWS) AS g WHERE g % 20 IN (0, 1);
SELECT setval('jobq._job_id_seq', ROWS);
"""
CHECKSUM = """
SELECT count(*), sum(hashtext(a::text)::bigint),
       count(*) FILTER (WHERE status = 'dead'), count(*) FILTER (WHERE status = 'cancelled'),
       count(*) FILTER (WHERE prune_after IS NULL), count(*) FILTER (WHERE prune_after < now())
FROM (SELECT id, queue, payload, status, priority, run_at, attempts, max_attempts, job_key, worker,
             last_error, created_at, started_at, finished_at, prune_after, group_key, timeout, result,
             cancelled_by
      FROM jobq._job_archive) AS a
"""


# How long the upgrade test may take, from its fill to its last prune: its
# rows are placed by UTC day ("expiring today" is today 23:59), so it must not
# cross midnight (it failed once, started at 23:59 UTC).
DAY_MARGIN_SECONDS = 15 * 60


def clear_of_midnight(conn: Conn, margin: float = DAY_MARGIN_SECONDS) -> None:
    """Return once the server's UTC day has at least ``margin`` seconds left,
    sleeping past midnight when it has not (at most ``margin`` seconds)."""
    left = float(scalar(conn, """
        SELECT extract(epoch FROM date_trunc('day', now() AT TIME ZONE 'UTC') + interval '1 day'
                                  - now() AT TIME ZONE 'UTC')"""))
    if left < margin:
        time.sleep(left + 5)


def fill(conn: Conn, rows: int) -> None:
    """A 0.6.0 archive of ``rows`` jobs (FILL_0_6_0)."""
    conn.execute(FILL_0_6_0.replace("ROWS", str(rows)))


@pytest.fixture
def database(postgresql_proc: PostgreSQLExecutor) -> Iterator[Conn]:
    """An empty database of its own (autocommit), dropped afterwards."""
    name = f"jobq_archive_{int(time.time() * 1000) % 10**9}"
    admin_dsn = proc_dsn(postgresql_proc, "postgres")
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        with psycopg.connect(proc_dsn(postgresql_proc, name), autocommit=True) as conn:
            yield conn
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def partitions(conn: Conn) -> dict[str, tuple[object, object]]:
    rows = conn.execute("SELECT partition, from_time, to_time FROM jobq.archive_partitions").fetchall()
    return {str(r[0]): (r[1], r[2]) for r in rows}


def homes(conn: Conn) -> dict[str, int]:
    rows = conn.execute(
        "SELECT tableoid::regclass::text, count(*) FROM jobq._job_archive GROUP BY 1").fetchall()
    return {str(r[0]): int(str(r[1])) for r in rows}


def test_the_upgrade_converts_the_archived_rows(database: Conn, tmp_path: Path) -> None:
    database.execute("CREATE EXTENSION jobq VERSION '0.6.0'")
    # The longest retention (the horizon of the day partitions) is 10 days.
    database.execute("SELECT jobq.configure_queue('q0', retention => '10 days')")
    clear_of_midnight(database)
    fill(database, ROWS)
    database.execute("VACUUM ANALYZE jobq._job_archive")
    before = database.execute(CHECKSUM).fetchone()
    assert before is not None and before[0] == ROWS
    started = time.monotonic()
    database.execute(f"ALTER EXTENSION jobq UPDATE TO '{default_version()}'")
    seconds = time.monotonic() - started
    assert scalar(database, "SELECT jobq.version()") == default_version()
    assert database.execute(CHECKSUM).fetchone() == before, "every row and column came through"
    places = homes(database)
    today = scalar(database, "SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD')")
    in_5 = scalar(database, "SELECT to_char((now() + interval '5 days') AT TIME ZONE 'UTC', 'YYYYMMDD')")
    per_kind = ROWS // 20
    assert places[f"jobq._job_archive_until{today}"] == 5 * per_kind, "expired: one partition before today"
    assert places[f"jobq._job_archive_p{today}"] == 4 * per_kind
    assert places[f"jobq._job_archive_p{in_5}"] == 6 * per_kind
    assert places["jobq._job_archive_kept"] == 5 * per_kind, "kept until retried, and beyond the 10 days"
    members = scalar(database, """
        SELECT count(*) FROM pg_depend AS d JOIN pg_class AS c ON c.oid = d.objid
        WHERE d.deptype = 'e' AND d.classid = 'pg_class'::regclass
          AND c.relname LIKE '\\_job\\_archive\\_%'""")
    assert members == 1, "only the default partition belongs to the extension"
    assert "_job_archive_060" not in str(database.execute(
        "SELECT array_agg(c::regclass::text) FROM pg_extension, unnest(extconfig) AS c WHERE extname = 'jobq'"
    ).fetchone()), "the old table left pg_dump's list"
    # Old rows work as new ones: read, retried, listed.
    assert scalar(database, "SELECT jobq.status(20)") == "dead"
    assert scalar(database, "SELECT jobq.result(3)") == {"r": 3}
    assert scalar(database, "SELECT jobq.retry(20)") is True
    assert scalar(database, "SELECT status FROM jobq.jobs WHERE id = 20") == "ready"
    last_thousand = range(ROWS - 999, ROWS + 1)  # queue 'q' || (id % 7)
    assert scalar(database, "SELECT count(*) FROM jobq.jobs WHERE queue = 'q6' AND id > %s",
                  (ROWS - 1000,)) == sum(1 for g in last_thousand if g % 7 == 6)
    # The first prune drops the expired partition whole, and creates the days
    # ahead: today through 10 days plus one.
    started = time.monotonic()
    pruned = scalar(database, "SELECT jobq.prune()")
    prune_seconds = time.monotonic() - started
    assert pruned == 5 * per_kind
    assert f"_job_archive_until{today}" not in partitions(database)
    # ... and the retried job 20 left, with the descendant its death had cancelled (22).
    assert scalar(database, "SELECT count(*) FROM jobq._job_archive") == ROWS - 5 * per_kind - 2
    days = {name for name in partitions(database) if name.startswith("_job_archive_p")}
    assert f"_job_archive_p{today}" in days and f"_job_archive_p{in_5}" in days and len(days) == 12, days
    report("archive upgrade", {"rows": ROWS, "upgrade_seconds": round(seconds, 1),
                               "first_prune_seconds": round(prune_seconds, 2), "pruned": pruned}, tmp_path)


def test_day_partitions_and_kept_rows_survive_pg_dump(database: Conn, postgresql_proc: PostgreSQLExecutor,
                                                      tmp_path: Path) -> None:
    database.execute("CREATE EXTENSION jobq")
    database.execute("SELECT jobq.configure_queue('hist', retention => '3 days')")
    database.execute("SELECT jobq.configure_queue('gone', max_attempts => 1)")
    assert scalar(database, "SELECT jobq.prune()") == 0  # creates today .. +4
    database.execute("SELECT count(*) FROM jobq.enqueue_many('hist', ARRAY['{}', '{}', '{}']::jsonb[])")
    database.execute("SELECT jobq.complete(c.id, c.lease_token) FROM jobq.claim('hist', 3) AS c")
    dead = scalar(database, "SELECT jobq.enqueue('gone', '{}')")
    database.execute("SELECT jobq.fail(c.id, 'boom', c.lease_token) FROM jobq.claim('gone') AS c")
    before = homes(database)
    assert len(before) == 2 and before["jobq._job_archive_kept"] == 1, before
    dump = tmp_path / "jobq.dump"
    source = database.info.dbname
    subprocess.run([str(find_bindir() / "pg_dump"), "-Fc", "-f", str(dump), "-d",
                    proc_dsn(postgresql_proc, source)], check=True)
    target = f"{source}_restored"
    admin_dsn = proc_dsn(postgresql_proc, "postgres")
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{target}"')
    try:
        restore = [str(find_bindir() / "pg_restore"), "-d", proc_dsn(postgresql_proc, target), str(dump)]
        subprocess.run(restore, check=True)
        with psycopg.connect(proc_dsn(postgresql_proc, target), autocommit=True) as restored:
            assert homes(restored) == before, "every row is back in its partition"
            assert partitions(restored) == partitions(database)
            assert scalar(restored, "SELECT jobq.status(%s)", (dead,)) == "dead"
            assert scalar(restored, "SELECT jobq.prune()") == 0, "and prune works on the restored database"
            assert scalar(restored, "SELECT jobq.retry(%s)", (dead,)) is True
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{target}" WITH (FORCE)')


def expired_day(conn: Conn, rows: int) -> str:
    """A partition of the day three days ago holding ``rows`` completed jobs; its name."""
    conn.execute("SELECT jobq._archive_add(d, d + 1) "
                 "FROM (SELECT (now() AT TIME ZONE 'UTC')::date - 3 AS d) AS x")
    conn.execute("""
        INSERT INTO jobq._job_archive (id, queue, payload, status, priority, run_at, attempts, max_attempts,
                                       created_at, finished_at, prune_after)
        SELECT nextval('jobq._job_id_seq'), 'old', '{}', 'completed', 0, now(), 1, 1, now(), now(),
               date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
               - interval '3 days' + interval '1 hour'
        FROM generate_series(1, %s)""", (rows,))
    return str(scalar(conn, "SELECT partition FROM jobq.archive_partitions WHERE expired"))


def test_a_partition_in_use_is_left_for_the_next_prune(conn: Conn, dsn: str) -> None:
    name = expired_day(conn, 10)
    with psycopg.connect(dsn) as reader:  # a transaction reading the old day, left open
        assert scalar(reader, f"SELECT count(*) FROM jobq.{name}") == 10
        started = time.monotonic()
        notices: list[str] = []
        conn.add_notice_handler(lambda diag: notices.append(str(diag.message_primary)))
        assert scalar(conn, "SELECT jobq.prune()") == 0, "the day stays while it is read"
        waited = time.monotonic() - started
        assert any(name in n and "busy" in n for n in notices), notices
        assert name in partitions(conn)
        assert scalar(conn, "SELECT count(*) FROM jobq._job_archive WHERE queue = 'old'") == 10
        reader.rollback()
    assert scalar(conn, "SELECT jobq.prune()") == 10, "the next prune drops it"
    assert name not in partitions(conn)
    assert waited < 30, "prune gave up on the lock (deadlock_timeout + 1 s) instead of waiting for the reader"


def test_a_prune_does_not_wait_for_another_one_making_partitions(conn: Conn, dsn: str) -> None:
    """The partition work of prune is one session's at a time: the others
    skip it (NOWAIT) and do the rest, never queueing behind it."""
    name = expired_day(conn, 5)
    with psycopg.connect(dsn) as first:
        # What a prune holds while it creates days ahead.
        first.execute("LOCK TABLE ONLY jobq._job_archive IN SHARE UPDATE EXCLUSIVE MODE")
        result: list[object] = []
        second = threading.Thread(target=lambda: result.append(scalar(conn, "SELECT jobq.prune()")))
        second.start()
        second.join(timeout=20)
        assert not second.is_alive(), "a second prune waited for the first"
        assert result == [0], "it skipped the partition work"
        assert name in partitions(conn)
        first.rollback()
    assert scalar(conn, "SELECT jobq.prune()") == 5
    assert name not in partitions(conn)


def test_a_vacuum_of_a_partition_does_not_make_prune_skip(conn: Conn, dsn: str) -> None:
    """(Auto)vacuum holds a SHARE UPDATE EXCLUSIVE lock of each partition it
    works on. Prune's one-at-a-time lock is of the archive alone, so a vacuum
    of today's day does not make it skip its partition work (CI of
    2026-11-27: right after the upgrade filled the days, autovacuum did)."""
    clear_of_midnight(conn, 60)  # "today" and the days ahead stay what they are while it runs
    name = expired_day(conn, 5)
    conn.execute("SELECT jobq._archive_add(d, d + 1) "
                 "FROM (SELECT (now() AT TIME ZONE 'UTC')::date AS d) AS x")
    today = str(scalar(conn, "SELECT partition FROM jobq.archive_partitions WHERE from_time <= now() "
                             "AND to_time > now()"))
    ahead = "SELECT count(*) FROM jobq.archive_partitions WHERE from_time > now()"
    days_ahead = scalar(conn, """
        SELECT ((now() + jobq._archive_horizon()) AT TIME ZONE 'UTC')::date + 1
               - (now() AT TIME ZONE 'UTC')::date""")
    assert scalar(conn, ahead) == 0
    with psycopg.connect(dsn) as vacuum:
        vacuum.execute(f"LOCK TABLE jobq.{today} IN SHARE UPDATE EXCLUSIVE MODE")  # what VACUUM holds
        assert scalar(conn, "SELECT jobq.prune()") == 5
        assert name not in partitions(conn)
        assert scalar(conn, ahead) == days_ahead >= 1, "the days ahead were created"
        vacuum.rollback()


def test_prune_waits_past_deadlock_timeout_for_the_partition(conn: Conn, dsn: str) -> None:
    """A lock request that has waited deadlock_timeout cancels an autovacuum
    holding the lock; prune waits a second longer than that before it leaves
    a partition for the next run, so the autovacuum yields first. Here an
    ordinary session holds the expired day for 2 s, with deadlock_timeout at
    5 s: prune waits it out (before, it gave up after 1 s)."""
    name = expired_day(conn, 7)
    conn.execute("SET deadlock_timeout = '5s'")
    with psycopg.connect(dsn) as holder:
        holder.execute(f"LOCK TABLE jobq.{name} IN SHARE UPDATE EXCLUSIVE MODE")
        releasing = threading.Timer(2.0, holder.rollback)
        releasing.start()
        try:
            assert scalar(conn, "SELECT jobq.prune()") == 7, "prune waited for the partition"
        finally:
            releasing.join()
    assert name not in partitions(conn)
    assert scalar(conn, "SHOW lock_timeout") == "0", "the wait was prune's, not the session's"


def test_a_script_install_upgrades_its_archive_too(database: Conn) -> None:
    database.execute((SQL_DIR / "jobq--0.6.0.sql").read_text())
    database.execute("SELECT jobq.configure_queue('q0', retention => '10 days')")
    clear_of_midnight(database, 120)
    fill(database, 2000)
    before = database.execute(CHECKSUM).fetchone()
    version = "0.6.0"
    while version != default_version():  # each step script in turn, as psql -f would apply them
        [step] = SQL_DIR.glob(f"jobq--{version}--*.sql")
        database.execute(step.read_text())
        version = step.name.removesuffix(".sql").split("--")[2]
    database.execute("RESET search_path")
    assert database.execute(CHECKSUM).fetchone() == before
    assert scalar(database, "SELECT jobq.prune()") == 500, "the expired fourth of the rows"
    assert scalar(database, "SELECT count(*) FROM jobq._job_archive") == 1500
