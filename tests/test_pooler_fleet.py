"""Workers behind PgBouncer in transaction mode (issue 16), on a real
PgBouncer in front of the test's database:

- with ``listen_dsn`` a worker claims and acknowledges through the pooler
  and LISTENs on a direct connection, so a job enqueued while it idles on a
  60-second poll interval is picked up by NOTIFY;
- polling workers stretch their interval after empty polls (jittered, up to
  ``max_poll_interval``), and an idle fleet sends far fewer claims to the
  server than with a fixed interval;
- a fleet of a few hundred asyncio consumers in two processes drains jobs
  through a pool of ten server connections exactly once, without a
  connection error (``pyqueue.bench.pooler``'s drain, which checks every id);
- bad settings fail in the constructor (and in the CLI) naming the argument.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from pytest_postgresql.executors import PostgreSQLExecutor

import pyqueue
from pyqueue.bench import pooler
from pyqueue.bench.pgbouncer import PgBouncer
from pyqueue.defaults import LISTEN_APPLICATION_NAME, WORKER_APPLICATION_NAME
from tests.chaos_support import pgbouncer
from tests.worker_support import InThread, scalar, wait_until

Conn = psycopg.Connection[Any]

POOL_SIZE = 10
FLEET = 300  # async consumers, in two processes
FLEET_JOBS = 3000


@pytest.fixture
def bouncer(conn: Conn, postgresql_proc: PostgreSQLExecutor) -> Iterator[PgBouncer]:
    with pgbouncer(host=postgresql_proc.host, port=postgresql_proc.port, dbname=conn.info.dbname,
                   pool_size=POOL_SIZE, max_client_conn=FLEET + 100) as running:
        yield running


def test_a_pooled_worker_wakes_on_notify_from_its_direct_listen_connection(
        conn: Conn, dsn: str, bouncer: PgBouncer) -> None:
    handled: list[int] = []
    worker = pyqueue.Worker(bouncer.dsn, listen_dsn=dsn, poll_interval=60, max_poll_interval=60,
                            reap_interval=None, run_schedules=False)
    worker.register("woken", lambda job: handled.append(job.id))
    running = InThread(lambda: worker.run(handle_signals=False))
    try:
        def listening() -> bool:
            return bool(scalar(conn, "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                               (LISTEN_APPLICATION_NAME,)) == 1)

        wait_until(listening, "the worker's LISTEN connection", timeout=30)
        # Its first claim came back empty: its next poll is a minute away.
        time.sleep(0.5)
        job_id = pyqueue.enqueue(conn, "woken", {})
        wait_until(lambda: handled == [job_id], "the job picked up by NOTIFY, long before the next poll",
                   timeout=20)
        wait_until(lambda: scalar(conn, "SELECT count(*) FROM jobq._job WHERE id = %s", (job_id,)) == 0,
                   "the job acknowledged through PgBouncer", timeout=20)
        clients = {str(c["application_name"]) for c in bouncer.show("CLIENTS")}
        assert LISTEN_APPLICATION_NAME not in clients, "LISTEN went straight to the server"
        assert WORKER_APPLICATION_NAME in clients, "claims and acks went through PgBouncer"
        assert prepared_on_the_pool(bouncer) == 0, "the worker prepared statements on pooled connections"
    finally:
        worker.stop()
        running.join()


def prepared_on_the_pool(bouncer: PgBouncer) -> int:
    """Statements prepared on the server connections of PgBouncer's pool:
    POOL_SIZE transactions held open at once through it, so that each has
    a server connection of its own (pg_prepared_statements shows only its
    own session's), every one of the pool's. (The test's own connection is
    no witness: psycopg prepares what it runs five times, such as a wait's
    polling query.)"""
    clients = [psycopg.connect(bouncer.dsn, prepare_threshold=None) for _ in range(POOL_SIZE)]
    try:
        return sum(int(scalar(client, "SELECT count(*) FROM pg_prepared_statements")) for client in clients)
    finally:
        for client in clients:
            client.close()


def claims_while_idle(bouncer: PgBouncer, dbname: str, *, max_poll: float, window: float) -> int:
    """Transactions 20 idle polling workers (poll_interval 0.2 s) send through
    PgBouncer during ``window`` seconds, after 3 s to settle."""
    stop = threading.Event()
    workers = [InThread(lambda: pyqueue.listen(
        bouncer.dsn, "quiet", lambda job: None, stop=stop, use_listen=False, poll_interval=0.2,
        max_poll_interval=max_poll, reap_interval=None, run_schedules=False, handle_signals=False))
        for _ in range(20)]

    def transactions() -> int:
        return next(int(s["total_xact_count"]) for s in bouncer.show("STATS") if s["database"] == dbname)

    try:
        time.sleep(3.0)
        before = transactions()
        time.sleep(window)
        time.sleep(1.5)  # PgBouncer's totals lag by stats_period (1 s)
        return transactions() - before
    finally:
        stop.set()
        for worker in workers:
            worker.join()


def test_idle_polling_workers_stretch_their_interval(conn: Conn, bouncer: PgBouncer) -> None:
    fixed = claims_while_idle(bouncer, conn.info.dbname, max_poll=0.2, window=6.0)
    stretched = claims_while_idle(bouncer, conn.info.dbname, max_poll=3.2, window=6.0)
    # Fixed: 20 workers every 0.2 s, ~600 claims (each an empty claim, maybe
    # a next_run_at). Stretched to a 3.2 s cap (waits of 1.6..3.2 s): ~50.
    assert fixed > 200, fixed
    assert stretched * 3 < fixed, (stretched, fixed)


def test_a_fleet_of_async_consumers_drains_through_a_small_pool_exactly_once(
        conn: Conn, dsn: str, bouncer: PgBouncer) -> None:
    settings = pooler.Settings(consumers=FLEET, processes=2, jobs=FLEET_JOBS, pool_size=POOL_SIZE)
    role = pooler.consumer_role(bouncer.dsn, settings, FLEET, 2, {"use_listen": False})
    with psycopg.connect(dsn, autocommit=True) as own:
        result = pooler.drain(dsn, own, role, settings)
    assert result["consumers"] == FLEET and result["jobs"] == FLEET_JOBS
    assert result["lost"] == 0 and result["duplicated"] == 0 and result["strangers"] == 0, result
    assert result["connection_errors"] == 0, result["errors_seen"]
    pools = [p for p in bouncer.show("POOLS") if p["database"] == conn.info.dbname]
    servers = sum(int(pools[0][k]) for k in ("sv_active", "sv_idle", "sv_used", "sv_tested", "sv_login"))
    assert 0 < servers <= POOL_SIZE, pools
    assert scalar(conn, "SELECT count(*) FROM jobq._job WHERE queue = %s", (pooler.QUEUE,)) == 0


@pytest.mark.parametrize(("options", "error", "message"), [
    ({"listen_dsn": 5}, TypeError, "listen_dsn must be a connection string"),
    ({"listen_dsn": "  "}, ValueError, "listen_dsn must not be empty"),
    ({"listen_dsn": "dbname=x", "use_listen": False}, ValueError, "cannot go with use_listen=False"),
    ({"max_poll_interval": 1, "poll_interval": 5}, ValueError,
     "max_poll_interval must be at least poll_interval"),
    ({"max_poll_interval": -1}, ValueError, "max_poll_interval must be a finite, positive"),
    ({"max_poll_interval": True}, TypeError, "max_poll_interval must be a timedelta"),
])
def test_bad_pooler_settings_fail_in_the_constructor(options: dict[str, Any], error: type[Exception],
                                                     message: str) -> None:
    with pytest.raises(error, match=message):
        pyqueue.Worker("dbname=nowhere", **options)
    with pytest.raises(error, match=message):
        pyqueue.listen("dbname=nowhere", "q", **options)


def test_the_cli_refuses_a_max_poll_interval_under_the_poll_interval(dsn: str) -> None:
    argv = [sys.executable, "-m", "pyqueue", "worker", "tests.cli_handlers:handle", "--dsn", dsn,
            "-q", "q", "--poll-interval", "5", "--max-poll-interval", "1"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert "max_poll_interval must be at least poll_interval" in done.stderr
    assert "Traceback" not in done.stderr
