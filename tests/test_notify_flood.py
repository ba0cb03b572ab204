"""A flood of NOTIFYs against real worker processes (issue 25).

PostgreSQL has no privilege for NOTIFY: a role with nothing but CONNECT can
send ``pg_notify('jobq', 'work')`` as fast as it likes, and every idle
worker of queue ``work`` wakes to each one. A worker bounds what that costs:
after a claim on a notification that found nothing, it claims again on
notifications at most once per NOTIFY_WINDOW (the ones in between are
coalesced into that claim, never dropped), so a job enqueued during the flood
is still picked up by its notification.

The claims are counted by the server: ``track_functions = 'pl'`` on the
test's database, read from ``pg_stat_user_functions`` once the worker exited
(a backend's counts reach the statistics by its exit at the latest).
"""

from __future__ import annotations

import secrets
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import pyqueue
from pyqueue.defaults import LISTEN_APPLICATION_NAME, NOTIFY_WINDOW
from tests.worker_support import (
    EXECUTIONS_DDL,
    LEDGER_DDL,
    WorkerProcess,
    backend_pids,
    keep_history,
    scalar,
    wait_until,
)

Conn = psycopg.Connection[tuple[object, ...]]

FLOOD_SECONDS = 3.0  # at least; the flood goes on until the worker has exited
SLACK = 10  # claims besides one per window: the first, FREE_CLAIMS after the job, the one after the flood
POLL_INTERVAL = "30"  # seconds: no poll during the test, so only a NOTIFY can wake the worker for the job
MEANINGFUL = 4  # the flood must send this many times the bound, or the bound proves nothing


@pytest.fixture
def flood_db(conn: Conn, dsn: str) -> Iterator[tuple[Conn, str]]:
    """The test's database counting PL/pgSQL calls, with an executions table,
    and a login that holds nothing but CONNECT (the DSN of it)."""
    dbname = conn.info.dbname
    conn.execute(f'ALTER DATABASE "{dbname}" SET track_functions = \'pl\'')  # sessions opened from now on
    conn.execute(EXECUTIONS_DDL)
    conn.execute(LEDGER_DDL)  # the in-transaction modes' handler writes there too
    keep_history(conn, ["work"])
    role = f"flooder_{secrets.token_hex(4)}"
    conn.execute(f"CREATE ROLE {role} LOGIN")
    try:
        yield conn, make_conninfo(dsn, user=role)
    finally:
        conn.execute(f"DROP ROLE {role}")


class Flood:
    """``pg_notify('jobq', queue)`` in a loop, each in its own transaction, from
    its own connection, until stopped; ``sent`` counts them."""

    def __init__(self, dsn: str, queue: str) -> None:
        self.sent = 0
        self._dsn, self._queue = dsn, queue
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with psycopg.connect(self._dsn, autocommit=True) as flooder:
            while not self._stop.is_set():
                flooder.execute("SELECT pg_notify('jobq', %s)", (self._queue,))
                self.sent += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), "the flood did not end"


def claims(conn: Conn) -> int:
    """Calls of jobq.claim (both overloads) and jobq.hold (the in-transaction
    modes' claim) the statistics have seen."""
    return int(scalar(conn, "SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions "
                            "WHERE schemaname = 'jobq' AND funcname IN ('claim', 'hold')"))


@pytest.mark.parametrize("mode", ["listen", "aio-listen", "worker", "aio-worker", "tx-listen", "tx-worker"])
def test_a_notify_flood_costs_one_claim_per_window_and_a_job_is_still_picked_up(
    flood_db: tuple[Conn, str], dsn: str, tmp_path: Path, mode: str
) -> None:
    conn, flooder_dsn = flood_db
    worker = WorkerProcess(dsn, tmp_path, "--mode", mode, "--poll-interval", POLL_INTERVAL)
    try:
        wait_until(lambda: len(backend_pids(conn, LISTEN_APPLICATION_NAME)) == 1, "the worker listening")
        started = time.monotonic()
        # The flood lasts until the worker has exited: the bound below grows with
        # that time (longer on a busy machine), and so does the flood.
        flood = Flood(flooder_dsn, "work")
        try:
            time.sleep(FLOOD_SECONDS / 2)
            job_id = pyqueue.enqueue(conn, "work", {"during": "the flood"})
            time.sleep(FLOOD_SECONDS / 2)
            wait_until(lambda: scalar(conn, "SELECT count(*) FROM executions") == 1, "the job to run")
            worker.signal(signal.SIGTERM)
            assert worker.wait() == 0, worker.output()
            elapsed = time.monotonic() - started
        finally:
            flood.stop()
    finally:
        worker.kill()
    # Picked up by its NOTIFY: well before the worker's first poll (30 s) would have found it.
    waited = scalar(conn, "SELECT extract(epoch FROM e.started - j.created_at) FROM executions AS e, "
                          "jobq.jobs AS j WHERE e.job_id = j.id AND j.id = %s", (job_id,))
    assert waited < 5.0, f"the job enqueued during the flood waited {waited:.1f} s"
    # The server saw at most one claim per window from the flood's start to the worker's exit.
    bound = elapsed / NOTIFY_WINDOW + SLACK
    assert flood.sent >= MEANINGFUL * bound, f"the flood sent only {flood.sent} notifications"
    seen = claims(conn)
    print(f"{mode}: {flood.sent} notifications and {seen} claims in {elapsed:.1f} s "
          f"(bound {bound:.0f}); the job waited {waited * 1000:.0f} ms")
    assert seen <= bound, f"{seen} claims for {flood.sent} notifications in {elapsed:.1f} s, over {bound:.0f}"
