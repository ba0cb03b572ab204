"""Worker processes against one database: many draining a queue together,
one killed mid-job, graceful SIGTERM."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

import pyqueue
from pyqueue.defaults import LISTEN_APPLICATION_NAME, WORKER_APPLICATION_NAME
from tests.worker_support import (
    EXECUTIONS_DDL,
    WorkerProcess,
    backend_pids,
    keep_history,
    mapping,
    scalar,
    wait_until,
)

Conn = psycopg.Connection[tuple[object, ...]]


@pytest.fixture(autouse=True)
def history(conn: Conn) -> None:
    keep_history(conn, ["work"])

MANY_JOBS = 3000
MANY_WORKERS = 8


@pytest.fixture
def executions(conn: Conn) -> Conn:
    conn.execute(EXECUTIONS_DDL)
    return conn


@pytest.fixture
def spawn(dsn: str, tmp_path: Path) -> Iterator[list[WorkerProcess]]:
    """A list to start worker processes into; any left running are killed at the end."""
    started: list[WorkerProcess] = []
    yield started
    for worker in started:
        worker.kill()


def start(spawn: list[WorkerProcess], dsn: str, tmp_path: Path, *args: str) -> WorkerProcess:
    worker = WorkerProcess(dsn, tmp_path, *args)
    spawn.append(worker)
    return worker


def completed(conn: Conn, queue: str = "work") -> int:
    return int(scalar(conn, "SELECT count(*) FROM jobq.jobs WHERE queue = %s AND status = 'completed'",
                      (queue,)))


def stop_all(workers: list[WorkerProcess]) -> None:
    for worker in workers:
        worker.signal(signal.SIGTERM)
    for worker in workers:
        code = worker.wait()
        assert code == 0, f"worker {worker.pid} exited {code}; log:\n{worker.output()}"


def test_many_worker_processes_run_every_job_exactly_once(
    executions: Conn, dsn: str, tmp_path: Path, spawn: list[WorkerProcess]
) -> None:
    shapes = [
        ("--mode", "listen", "--batch-size", "25"),
        ("--mode", "worker", "--concurrency", "3", "--batch-size", "10"),
        ("--mode", "aio-listen", "--batch-size", "25"),
        ("--mode", "aio-worker", "--concurrency", "3", "--batch-size", "10"),
    ]
    workers = [start(spawn, dsn, tmp_path, *shapes[i % len(shapes)]) for i in range(MANY_WORKERS)]
    # Every worker idles on LISTEN before the jobs arrive, so they all race for them.
    wait_until(lambda: len(backend_pids(executions, LISTEN_APPLICATION_NAME)) == MANY_WORKERS,
               f"{MANY_WORKERS} workers listening")
    ids = pyqueue.enqueue_many(executions, "work", [{"n": i} for i in range(MANY_JOBS)])
    wait_until(lambda: completed(executions) == MANY_JOBS, f"{MANY_JOBS} jobs completed", timeout=120)
    stop_all(workers)

    # Every job ran exactly once and is completed.
    per_job = mapping(executions, "SELECT job_id, count(*) FROM executions GROUP BY job_id")
    assert per_job == {job_id: 1 for job_id in ids}
    assert scalar(executions, "SELECT count(*) FROM executions WHERE finished IS NULL") == 0
    assert scalar(executions, "SELECT count(*) FROM jobq.jobs WHERE id = ANY(%s) AND status = 'completed' "
                              "AND attempts = 1", (ids,)) == MANY_JOBS
    # No two executions of a job overlap in time (database clock).
    overlaps = scalar(executions, """
        SELECT count(*) FROM executions AS a JOIN executions AS b
          ON a.job_id = b.job_id AND a.id < b.id
         AND tstzrange(a.started, a.finished) && tstzrange(b.started, b.finished)""")
    assert overlaps == 0
    # The work was shared: more than one process ran jobs.
    pids = scalar(executions, "SELECT count(DISTINCT pid) FROM executions")
    assert pids > 1


def test_a_killed_worker_s_job_comes_back_after_its_lease(
    executions: Conn, dsn: str, tmp_path: Path, spawn: list[WorkerProcess]
) -> None:
    blocked = pyqueue.enqueue(executions, "work", {"block_first": True})
    victim = start(spawn, dsn, tmp_path, "--lease", "2", "--batch-size", "1")
    wait_until(lambda: scalar(executions, "SELECT count(*) FROM executions") == 1, "the job to start")
    # A second worker, idle for now; it reaps every second (no pg_cron here).
    survivor = start(spawn, dsn, tmp_path, "--lease", "2", "--reap-interval", "1", "--poll-interval", "30")
    wait_until(lambda: len(backend_pids(executions, LISTEN_APPLICATION_NAME)) == 2, "the survivor listening")
    victim.signal(signal.SIGKILL)
    assert victim.wait() == -signal.SIGKILL
    others = pyqueue.enqueue_many(executions, "work", [{"n": i} for i in range(20)])

    wait_until(lambda: completed(executions) == 21, "every job completed, the killed one included")
    stop_all([survivor])

    runs = executions.execute(
        "SELECT pid, attempt, finished IS NOT NULL FROM executions WHERE job_id = %s ORDER BY id",
        (blocked,)).fetchall()
    assert runs == [(victim.pid, 1, False), (survivor.pid, 2, True)]
    row = executions.execute("SELECT attempts, last_error FROM jobq.jobs WHERE id = %s",
                             (blocked,)).fetchone()
    assert row is not None and row[0] == 2 and "lease expired" in str(row[1])
    assert scalar(executions, "SELECT count(*) FROM executions "
                              "WHERE job_id = ANY(%s) AND finished IS NOT NULL", (others,)) == 20


@dataclass(frozen=True)
class Shape:
    """How a worker process is started, and how many jobs it runs and holds at once."""

    args: tuple[str, ...]
    running: int
    held: int


@pytest.mark.parametrize("shape", [
    # listen(): one job runs, the rest of the batch waits its turn.
    Shape(("--mode", "listen", "--batch-size", "3"), running=1, held=3),
    # Worker: two threads busy, two claimed jobs queued for them.
    Shape(("--mode", "worker", "--concurrency", "2", "--batch-size", "4"), running=2, held=4),
    # The asyncio twins, likewise.
    Shape(("--mode", "aio-listen", "--batch-size", "3"), running=1, held=3),
    Shape(("--mode", "aio-worker", "--concurrency", "2", "--batch-size", "4"), running=2, held=4),
], ids=["listen", "worker", "aio-listen", "aio-worker"])
def test_sigterm_finishes_jobs_in_flight_and_releases_the_rest(
    executions: Conn, dsn: str, tmp_path: Path, spawn: list[WorkerProcess], shape: Shape
) -> None:
    running, held = shape.running, shape.held
    ids = pyqueue.enqueue_many(executions, "work", [{"sleep": 3} for _ in range(8)])
    worker = start(spawn, dsn, tmp_path, *shape.args)
    wait_until(lambda: scalar(executions, "SELECT count(*) FROM executions") == running, "jobs in flight")
    assert scalar(executions, "SELECT count(*) FROM jobq._job WHERE status = 'running'") == held
    worker.signal(signal.SIGTERM)
    # Jobs arriving now (with their NOTIFY) must not be taken.
    late = pyqueue.enqueue_many(executions, "work", [{"n": i} for i in range(3)])
    assert worker.wait() == 0, worker.output()

    started = [r[0] for r in executions.execute("SELECT job_id FROM executions ORDER BY job_id").fetchall()]
    assert len(started) == running
    # The jobs in flight finished and were completed.
    assert scalar(executions, "SELECT count(*) FROM executions WHERE finished IS NULL") == 0
    assert scalar(executions, "SELECT count(*) FROM jobq.jobs WHERE id = ANY(%s) AND status = 'completed'",
                  (started,)) == running
    # Everything else is ready again with no attempt spent: the prefetched jobs
    # were released, the rest never claimed.
    rest = [i for i in [*ids, *late] if i not in started]
    rows = executions.execute("SELECT status, attempts FROM jobq._job WHERE id = ANY(%s)", (rest,)).fetchall()
    assert rows == [("ready", 0)] * len(rest)
    assert "worker exits normally" in worker.output()


@pytest.mark.parametrize("mode", ["listen", "aio-listen"])
def test_a_failed_acknowledgement_is_logged_with_the_jobs_it_left_pending(
    executions: Conn, dsn: str, tmp_path: Path, spawn: list[WorkerProcess], mode: str
) -> None:
    # The worker's claim-and-acknowledge connection dies while its handler
    # runs: the completion that follows cannot be sent, is kept, and is sent
    # on the next connection. The warning counts the job it kept (0.8.0 said 0).
    job_id = pyqueue.enqueue(executions, "work", {"sleep": 2})
    worker = start(spawn, dsn, tmp_path, "--mode", mode, "--batch-size", "1")
    wait_until(lambda: scalar(executions, "SELECT count(*) FROM executions") == 1, "the job to start")
    killed = scalar(executions, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                "WHERE datname = current_database() AND application_name = %s",
                    (WORKER_APPLICATION_NAME,))
    assert killed == 1
    wait_until(lambda: completed(executions) == 1, "the job completed on a new connection")
    stop_all([worker])
    assert "could not acknowledge 1 job(s) yet" in worker.output(), worker.output()
    assert scalar(executions, "SELECT attempts FROM jobq.jobs WHERE id = %s", (job_id,)) == 1
