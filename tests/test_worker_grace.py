"""Worker processes and real signals (issue 12): the shutdown grace of a
worker whose handler hangs, and periodic jobs run by the workers
themselves (jobq 0.4, no pg_cron), each tick enqueued once."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import pyqueue
from pyqueue.defaults import LISTEN_APPLICATION_NAME
from tests.worker_support import (
    EXECUTIONS_DDL,
    WorkerProcess,
    backend_pids,
    keep_history,
    scalar,
    wait_until,
)

Conn = psycopg.Connection[tuple[object, ...]]
HANG = 10**6  # seconds: a handler that never returns


@pytest.fixture
def executions(conn: Conn) -> Conn:
    conn.execute(EXECUTIONS_DDL)
    keep_history(conn, ["work"])
    return conn


@pytest.fixture
def spawn() -> Iterator[list[WorkerProcess]]:
    started: list[WorkerProcess] = []
    yield started
    for worker in started:
        worker.kill()


def start(spawn: list[WorkerProcess], dsn: str, tmp_path: Path, *args: str) -> WorkerProcess:
    worker = WorkerProcess(dsn, tmp_path, *args)
    spawn.append(worker)
    return worker


def rows(conn: Conn, ids: list[int]) -> dict[int, tuple[object, ...]]:
    found = conn.execute("SELECT id, status, attempts, last_error FROM jobq.jobs WHERE id = ANY(%s)",
                         (ids,)).fetchall()
    return {int(str(r[0])): r[1:] for r in found}


def hung_and_waiting(conn: Conn) -> tuple[int, list[int]]:
    hung = pyqueue.enqueue(conn, "work", {"sleep": HANG}, priority=-1)
    waiting = pyqueue.enqueue_many(conn, "work", [{"n": n} for n in range(3)])
    return hung, waiting


def given_up(conn: Conn, hung: int, waiting: list[int]) -> bool:
    got = rows(conn, [hung, *waiting])
    return ("shutdown timeout" in str(got[hung][2]) and got[hung][1] == 1
            and all(got[i][:2] == ("ready", 0) for i in waiting))


@pytest.mark.parametrize("mode", ["worker", "aio-worker", "aio-listen"])
def test_the_first_sigterm_gives_up_a_hung_handler_after_the_shutdown_timeout(
    executions: Conn, dsn: str, tmp_path: Path, spawn: list[WorkerProcess], mode: str
) -> None:
    hung, waiting = hung_and_waiting(executions)
    worker = start(spawn, dsn, tmp_path, "--mode", mode, "--concurrency", "1", "--batch-size", "5",
                   "--lease", "3", "--shutdown-timeout", "2")
    wait_until(lambda: scalar(executions, "SELECT count(*) FROM executions WHERE job_id = %s", (hung,)) == 1,
               "the hung job to start")
    worker.signal(signal.SIGTERM)
    code = worker.wait()  # before the fix: never, the hung job was heart-beaten for ever
    assert code == 0, worker.output()
    assert given_up(executions, hung, waiting), rows(executions, [hung, *waiting])
    assert rows(executions, [hung])[hung][0] in ("ready", "scheduled")
    logged = f"job {hung} of queue work failed (attempt 1 of 25, will retry): shutdown timeout"
    assert logged in worker.output()


def test_listen_in_the_calling_thread_gives_up_the_jobs_of_a_hung_handler(
    executions: Conn, dsn: str, tmp_path: Path, spawn: list[WorkerProcess]
) -> None:
    """The sync listen() runs its handler in the calling thread, which Python
    cannot interrupt: after the grace the jobs are failed or released in the
    database and no longer heart-beaten; the process ends at the next signal."""
    hung, waiting = hung_and_waiting(executions)
    worker = start(spawn, dsn, tmp_path, "--mode", "listen", "--batch-size", "5", "--lease", "3",
                   "--shutdown-timeout", "2")
    wait_until(lambda: scalar(executions, "SELECT count(*) FROM executions WHERE job_id = %s", (hung,)) == 1,
               "the hung job to start")
    worker.signal(signal.SIGTERM)
    wait_until(lambda: given_up(executions, hung, waiting), "the jobs given up after the grace")
    worker.signal(signal.SIGTERM)
    assert worker.wait() == -signal.SIGTERM


# --- periodic jobs run by the workers -------------------------------------------

def test_worker_run_schedules_enqueue_each_tick_once(
    executions: Conn, dsn: str, tmp_path: Path, spawn: list[WorkerProcess]
) -> None:
    conn = executions
    assert pyqueue.every(conn, "tick", "* * * * *", "ticks", {"from": "schedule"}, runner="workers") is None
    # Due now rather than at the next minute: the workers start and all find it due.
    conn.execute("UPDATE jobq._periodic SET next_run_at = now() - interval '1 second' WHERE name = 'tick'")
    workers = [start(spawn, dsn, tmp_path, "--mode", mode, "--poll-interval", "0.5")
               for mode in ("worker", "aio-worker", "listen")]
    # Each worker calls jobq.run_schedules() before it first claims (and LISTENs).
    wait_until(lambda: len(backend_pids(conn, LISTEN_APPLICATION_NAME)) == len(workers),
               "every worker to have started")
    assert scalar(conn, "SELECT count(*) FROM jobq.jobs WHERE queue = 'ticks'") == 1
    assert scalar(conn, "SELECT payload FROM jobq.jobs WHERE queue = 'ticks'") == {"from": "schedule"}
    assert scalar(conn, "SELECT next_run_at > now() FROM jobq._periodic WHERE name = 'tick'") is True
    for worker in workers:
        worker.signal(signal.SIGTERM)
    for worker in workers:
        assert worker.wait() == 0, worker.output()
