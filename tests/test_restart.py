"""The database restarts under load: ``pg_ctl restart -m immediate`` (a crash:
no shutdown checkpoint, WAL replay on start; fsync on so that it really
tests durability) and ``-m fast``, while producers commit jobs one
transaction at a time and worker processes of all four kinds run them.

Afterwards every job whose commit the producer saw has completed, nothing
committed disappeared, nothing appeared that nobody enqueued, the workers
reconnected by themselves and LISTEN again (a worker that only NOTIFY can
wake picks up a job at once).

A throwaway LocalServer per test: the session server of the other tests
must never restart under them.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pyqueue
from pyqueue import _queries as q
from pyqueue.defaults import LISTEN_APPLICATION_NAME
from pyqueue.localserver import LocalServer, temporary_directory
from tests.chaos_fleet import SHAPES, Fleet
from tests.chaos_support import (
    elapsed,
    install_script,
    keep_history,
    report,
    rng,
    scale,
    server_user_kwargs,
)
from tests.ports import free_port
from tests.worker_support import EXECUTIONS_DDL, InThread, backend_pids, scalar, wait_until

Conn = psycopg.Connection[Any]

QUEUE = "work"
WAKE_QUEUE = "wake"  # watched by a worker that only NOTIFY can wake
PRODUCERS = 2
RESTARTS = ("immediate", "fast", "immediate")  # quick tier; the chaos scale repeats the cycle
LOAD_SECONDS = 2.5  # of load before each restart and after the last one
WORKER_OPTIONS = (
    "--queue", QUEUE,
    "--lease", "3",  # seconds: a job claimed just before a crash comes back soon
    "--reap-interval", "1",
    "--poll-interval", "2",
)
IDLE_POLL = 300.0  # seconds: the NOTIFY-only worker's poll interval
DRAIN_TIMEOUT = 180.0  # seconds
# seconds for every worker to listen again: after three restarts a worker's
# reconnection backoff may have grown to its cap (RECONNECT_DELAY_MAX, 30 s)
LISTEN_TIMEOUT = 120.0
WAKE_TIMEOUT = 30.0  # seconds: well under IDLE_POLL, so only NOTIFY explains a pickup


@pytest.fixture
def server() -> Iterator[LocalServer]:
    """A throwaway server with fsync on (LocalServer turns it off by default)."""
    directory = temporary_directory("jobq-restart-")
    local = LocalServer(directory, port=free_port(), database="jobq", settings={"fsync": "on"})
    try:
        local.start()
        with psycopg.connect(local.dsn, autocommit=True) as conn:
            conn.execute(install_script().encode())  # it sets search_path for its session
        with psycopg.connect(local.dsn, autocommit=True) as conn:
            conn.execute(EXECUTIONS_DDL)
            # Handlers fail while the database is away: let those retries come back soon.
            pyqueue.configure_queue(conn, QUEUE, backoff_base=0.2, backoff_cap=1.0)
        yield local
    finally:
        try:
            local.stop()
        finally:
            shutil.rmtree(directory, ignore_errors=True)


def pg_ctl_restart(server: LocalServer, mode: str) -> None:
    """``pg_ctl restart -m <mode>``: the server keeps the options it was started with."""
    done = subprocess.run(
        [str(server.bindir / "pg_ctl"), "-D", str(server.datadir), "-m", mode, "-w", "-t", "120",
         "-l", str(server.logfile), "restart"],
        capture_output=True, text=True, check=False, **server_user_kwargs(),
    )
    log = server.logfile.read_text(errors="replace")[-3000:] if server.logfile.exists() else ""
    assert done.returncode == 0, f"pg_ctl restart -m {mode} failed:\n{done.stdout}{done.stderr}\n{log}"


class CommittingProducer:
    """Enqueues one job per transaction until stopped; remembers the ids whose
    COMMIT was acknowledged, and those in doubt (the connection broke during
    COMMIT: the job may or may not exist). Reconnects after errors."""

    def __init__(self, dsn: str, stop: threading.Event, tag: int) -> None:
        self.dsn = dsn
        self.stop = stop
        self.tag = tag
        self.acked: list[int] = []
        self.in_doubt: list[int] = []
        self.failed = 0  # enqueues that never committed (the database was away): retried
        self.thread = InThread(self._run)

    def _run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        n = 0
        while not self.stop.is_set():
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self.dsn, connect_timeout=5)
                job_id = pyqueue.enqueue(conn, QUEUE, {"producer": self.tag, "n": n, "sleep": 0.002})
            except psycopg.OperationalError:
                self.failed += 1
                self._drop(conn)
                conn = None
                continue
            try:
                conn.commit()
            except psycopg.OperationalError:
                self.in_doubt.append(job_id)
                self._drop(conn)
                conn = None
                continue
            self.acked.append(job_id)
            n += 1
            time.sleep(0.003)
        if conn is not None:
            conn.close()

    def _drop(self, conn: psycopg.Connection[Any] | None) -> None:
        """Close a broken connection and pause a little before reconnecting."""
        if conn is not None:
            conn.close()
        self.stop.wait(0.1)


def test_restarts_mid_load_lose_no_committed_job(server: LocalServer, tmp_path: Path) -> None:
    rand, seed = rng("restarts")
    dsn = server.dsn
    logs = tmp_path / "workers"
    logs.mkdir()
    cycles = max(1, round(scale()))
    plan = list(RESTARTS) * cycles
    started = time.monotonic()
    fleet = Fleet(dsn, logs, rand, *WORKER_OPTIONS)
    stop_idle = threading.Event()
    stop_producing = threading.Event()
    woken: list[int] = []
    idle = InThread(lambda: pyqueue.listen(dsn, WAKE_QUEUE, lambda job: woken.append(job.id), stop=stop_idle,
                                           handle_signals=False, poll_interval=IDLE_POLL, reap_interval=None))
    producers: list[CommittingProducer] = []
    last_restart: datetime | None = None
    # A listener's last statement: the LISTEN, or the first-responder lock it takes on that connection.
    listen_statements = {q.LISTEN, *(s.replace("%s", "$1") for s in (q.RESPONDER_LOCK, q.RESPONDER_UNLOCK))}
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            keep_history(conn, QUEUE)
            fleet.start(len(SHAPES))
            wait_until(lambda: len(backend_pids(conn, LISTEN_APPLICATION_NAME)) == len(SHAPES) + 1,
                       "every worker listening")
        producers = [CommittingProducer(dsn, stop_producing, i) for i in range(PRODUCERS)]
        for mode in plan:
            time.sleep(LOAD_SECONDS)
            pg_ctl_restart(server, mode)
            with psycopg.connect(dsn, autocommit=True) as conn:
                last_restart = scalar(conn, "SELECT pg_postmaster_start_time()")
        time.sleep(LOAD_SECONDS)
        stopped_producing = time.monotonic()
        stop_producing.set()
        for producer in producers:
            producer.thread.join()
        acked = [j for p in producers for j in p.acked]
        in_doubt = [j for p in producers for j in p.in_doubt]

        with psycopg.connect(dsn, autocommit=True) as conn:
            def drained() -> bool:
                if fleet.crashed():
                    raise AssertionError(f"a worker died:\n{fleet.crashed()[0].output()}")
                return int(scalar(conn, "SELECT count(*) FROM jobq._job WHERE queue = %s", (QUEUE,))) == 0

            wait_until(drained, "every committed job completed after the restarts", timeout=DRAIN_TIMEOUT)
            drain_seconds = elapsed(stopped_producing)
            # Every worker reconnected by itself and listens again, on a
            # connection opened after the last restart. Waited for, not read
            # once: on a busy machine a listener is seen between connecting
            # and its LISTEN for a while.
            def listeners() -> list[tuple[bool, str]]:
                return [(bool(fresh), str(query)) for fresh, query in conn.execute(
                    "SELECT backend_start > %s, query FROM pg_stat_activity "
                    "WHERE datname = current_database() AND application_name = %s",
                    (last_restart, LISTEN_APPLICATION_NAME)).fetchall()]

            wait_until(lambda: (len(found := listeners()) == len(SHAPES) + 1
                                and all(fresh and query in listen_statements for fresh, query in found)),
                       "every worker listening again", timeout=LISTEN_TIMEOUT)
            listening = listeners()
            # The NOTIFY-only worker wakes for a new job (its poll is minutes away).
            wake = pyqueue.enqueue(conn, WAKE_QUEUE, {})
            wait_until(lambda: woken == [wake], "the idle worker woken by NOTIFY", timeout=WAKE_TIMEOUT)

            completed = {int(r[0]) for r in conn.execute(
                "SELECT id FROM jobq._job_archive WHERE queue = %s AND status = 'completed'", (QUEUE,))}
            other = scalar(conn, "SELECT count(*) FROM jobq._job_archive WHERE queue = %s "
                                 "AND status <> 'completed'", (QUEUE,))
            finished_runs = {int(r[0]): int(r[1]) for r in conn.execute(
                "SELECT job_id, count(*) FILTER (WHERE finished IS NOT NULL) FROM executions "
                "GROUP BY job_id")}
        unclean = fleet.stop()
    finally:
        stop_idle.set()
        stop_producing.set()
        fleet.kill_all()
    idle.join()

    lost = sorted(j for j in acked if j not in completed or finished_runs.get(j, 0) == 0)
    unexpected = sorted(completed - set(acked) - set(in_doubt))
    duplicates = sum(1 for n in finished_runs.values() if n > 1)
    report("database restarts", {
        "restarts": len(plan),
        "immediate": plan.count("immediate"),
        "fast": plan.count("fast"),
        "jobs_committed": len(acked),
        "commits_in_doubt": len(in_doubt),
        "in_doubt_that_exist": len(set(in_doubt) & completed),
        "enqueues_failed_and_retried": sum(p.failed for p in producers),
        "duplicates": duplicates,
        "lost": len(lost),
        "unexpected": len(unexpected),
        "drain_seconds": drain_seconds,
        "seconds": elapsed(started),
        "seed": seed,
    }, tmp_path)
    assert len(acked) > 0
    assert lost == []
    assert unexpected == []
    assert other == 0  # nothing died or was cancelled on the way
    # Opened after the last restart; its last statement is the LISTEN or the
    # first-responder lock the worker takes on that connection.
    assert [fresh for fresh, _ in listening] == [True] * (len(SHAPES) + 1)
    assert {statement for _, statement in listening} <= listen_statements, listening
    assert unclean == [], f"workers that did not exit 0 on SIGTERM: {unclean}"
