"""Running jobs under control (issue 26, items 1 and 2), with real worker
processes (tests/running_programs.py) on a real server:

- ``jobq.cancel()`` / ``cancel_jobs(queue, 'running')`` committed on another
  connection reaches the handler of each worker kind within a second (the
  NOTIFY on jobq_cancel): an async handler's task is cancelled, a sync one
  sees ``job.cancel_requested`` and its ``job.sleep()`` returns early; the
  job stays cancelled, with no completion or failure, and the slot is free
  for the next job;
- with the NOTIFY lost (the LISTEN connection killed and kept from coming
  back) the next heartbeat tells the handler instead;
- ``job.report_progress()`` from a handler reporting every 20 ms writes the
  job's row about once a second, not 50 times, and the last value lands.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import pyqueue
from pyqueue.errors import InvalidArgument, PayloadTooLarge
from tests.running_programs import RUNS_DDL
from tests.worker_support import ROOT, Conn, WorkerProcess, keep_history, scalar, wait_until

MODES = ["worker", "listen", "aio-worker", "aio-listen"]
BOUND = 1.0  # seconds from the cancel's commit to the handler's exit: the promise
CANCELLED_LINE = "was cancelled while held"


@pytest.fixture
def runs(conn: Conn) -> Conn:
    conn.execute(RUNS_DDL)
    keep_history(conn, ["work"])
    return conn


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[list[WorkerProcess]]:
    workers: list[WorkerProcess] = []
    yield workers
    for worker in workers:
        worker.kill()


def started(conn: Conn, job_id: int) -> None:
    wait_until(lambda: scalar(conn, "SELECT count(*) FROM runs WHERE job_id = %s", (job_id,)) == 1,
               f"job {job_id}'s handler to start")


def exited(conn: Conn, job_id: int) -> bool:
    return bool(scalar(conn, "SELECT count(*) FROM runs WHERE job_id = %s AND exited IS NOT NULL", (job_id,)))


def seconds_until_exit(conn: Conn, job_id: int, limit: float) -> float:
    """From now until the handler of ``job_id`` records its exit, on this
    test's clock (an upper bound: it includes the polling)."""
    began = time.monotonic()
    wait_until(lambda: exited(conn, job_id), f"job {job_id}'s handler to exit", timeout=limit)
    return time.monotonic() - began


def worker_process(dsn: str, tmp_path: Path, spawn: list[WorkerProcess], *args: str) -> WorkerProcess:
    worker = ProgramProcess(dsn, tmp_path, *args)
    spawn.append(worker)
    return worker


class ProgramProcess(WorkerProcess):
    """``python -m tests.running_programs`` as a child process."""

    def __init__(self, dsn: str, log_dir: Path, *args: str) -> None:
        self.log = log_dir / f"running-{time.monotonic_ns()}.log"
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1")
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "tests.running_programs", dsn, *args],
                                         cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def assert_cancelled_once(conn: Conn, worker: WorkerProcess, job_id: int) -> None:
    """Cancelled, run once, neither completed nor failed; one log line says so."""
    assert scalar(conn, "SELECT status FROM jobq.jobs WHERE id = %s", (job_id,)) == "cancelled"
    assert scalar(conn, "SELECT count(*) FROM runs WHERE job_id = %s", (job_id,)) == 1
    assert scalar(conn, "SELECT cancelled FROM runs WHERE job_id = %s", (job_id,)) is True
    assert scalar(conn, "SELECT coalesce(sum(completed_total + failed_total), 0) FROM jobq.stats") == 0
    log = worker.output()
    assert log.count(f"job {job_id} of queue 'work'") == 1, log
    assert not any(word in log for word in ("will retry", "is dead", "Traceback", "raised")), log


def next_job_runs(conn: Conn) -> None:
    """The worker (one handler at a time) freed its slot: a new job completes."""
    job_id = pyqueue.enqueue(conn, "work", {"quick": True})
    wait_until(lambda: scalar(conn, "SELECT status FROM jobq.jobs WHERE id = %s", (job_id,)) == "completed",
               "the next job to complete")


@pytest.mark.alone  # a bound in time (1 s, measured ~0.1 s): not beside the parallel tests
@pytest.mark.parametrize("mode", MODES)
def test_cancel_reaches_the_running_handler_within_a_second(
    runs: Conn, dsn: str, tmp_path: Path, spawn: list[WorkerProcess], mode: str
) -> None:
    worker = worker_process(dsn, tmp_path, spawn, "--mode", mode)
    job_id = pyqueue.enqueue(runs, "work", {"wait": True})
    started(runs, job_id)
    with psycopg.connect(dsn, autocommit=True) as other:
        began = time.monotonic()
        assert pyqueue.cancel(other, job_id)  # autocommit: committed when it returns
        elapsed = time.monotonic() - began + seconds_until_exit(runs, job_id, limit=30)
    print(f"{mode}: cancel committed -> handler exited in {elapsed * 1000:.0f} ms (test clock)")
    assert elapsed < BOUND, f"{mode}: the handler exited {elapsed:.2f} s after the cancel"
    assert CANCELLED_LINE in worker.output()
    assert_cancelled_once(runs, worker, job_id)
    next_job_runs(runs)
    assert scalar(runs, "SELECT status FROM jobq.jobs WHERE id = %s", (job_id,)) == "cancelled"


@pytest.mark.alone  # a bound in time, as above
def test_cancel_jobs_of_running_ones_notifies_too(
    runs: Conn, dsn: str, tmp_path: Path, spawn: list[WorkerProcess]
) -> None:
    worker = worker_process(dsn, tmp_path, spawn, "--mode", "aio-worker")
    job_id = pyqueue.enqueue(runs, "work", {"wait": True})
    started(runs, job_id)
    with psycopg.connect(dsn, autocommit=True) as other:
        began = time.monotonic()
        assert pyqueue.cancel_jobs(other, "work", status="running") == 1
        elapsed = time.monotonic() - began + seconds_until_exit(runs, job_id, limit=30)
    assert elapsed < BOUND, f"the handler exited {elapsed:.2f} s after cancel_jobs"
    assert_cancelled_once(runs, worker, job_id)


@pytest.fixture
def listener(conn: Conn, dsn: str) -> Iterator[str]:
    """A DSN of a role that only LISTENs (the workers' listen_dsn)."""
    role = f"listener_{conn.info.backend_pid}_{time.monotonic_ns() % 1000000}"
    conn.execute(f"CREATE ROLE {role} LOGIN")
    yield make_conninfo(dsn, user=role)
    conn.execute(f"ALTER ROLE {role} NOLOGIN")
    conn.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))
    wait_until(lambda: not scalar(conn, "SELECT count(*) FROM pg_stat_activity WHERE usename = %s",
                                  (role,)), "the listener's sessions to end")
    conn.execute(f"DROP ROLE {role}")


@pytest.mark.parametrize("mode", ["worker", "aio-worker"])
def test_with_the_notify_lost_the_heartbeat_tells_the_handler(  # noqa: PLR0917 - pytest fixtures
    runs: Conn, dsn: str, listener: str, tmp_path: Path, spawn: list[WorkerProcess], mode: str
) -> None:
    lease = 3.0  # seconds: heartbeats every second
    worker = worker_process(dsn, tmp_path, spawn, "--mode", mode, "--lease", str(lease),
                            "--listen-dsn", listener)
    job_id = pyqueue.enqueue(runs, "work", {"wait": True})
    started(runs, job_id)
    role = conninfo_to_dict(listener)["user"]
    # The LISTEN connection goes, and cannot come back: the NOTIFY of the cancel is lost.
    runs.execute(f"ALTER ROLE {role} NOLOGIN")
    assert scalar(runs, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = %s",
                  (role,)) == 1
    wait_until(lambda: not scalar(runs, "SELECT count(*) FROM pg_stat_activity WHERE usename = %s", (role,)),
               "the LISTEN connection to end")
    assert pyqueue.cancel(runs, job_id)
    elapsed = seconds_until_exit(runs, job_id, limit=lease * 4)
    print(f"{mode}: NOTIFY lost, cancel -> handler exited in {elapsed * 1000:.0f} ms (lease {lease:g} s)")
    log = worker.output()
    assert "lost its lease" in log and CANCELLED_LINE not in log, log
    assert scalar(runs, "SELECT cancelled FROM runs WHERE job_id = %s", (job_id,)) is True
    assert scalar(runs, "SELECT status FROM jobq.jobs WHERE id = %s", (job_id,)) == "cancelled"
    assert scalar(runs, "SELECT coalesce(sum(completed_total + failed_total), 0) FROM jobq.stats") == 0


PROGRESS_WRITES_DDL = """
CREATE TABLE progress_writes (job_id bigint, progress jsonb, at timestamptz DEFAULT clock_timestamp());
CREATE FUNCTION record_progress() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.progress_writes (job_id, progress) VALUES (NEW.id, NEW.progress);
    RETURN NEW;
END $$;
CREATE TRIGGER record_progress AFTER UPDATE OF progress ON jobq._job
    FOR EACH ROW WHEN (OLD.progress IS DISTINCT FROM NEW.progress) EXECUTE FUNCTION record_progress();
"""


@pytest.mark.parametrize("mode", ["worker", "aio-worker"])
def test_progress_reported_every_20_ms_is_written_about_once_a_second(
    runs: Conn, dsn: str, tmp_path: Path, spawn: list[WorkerProcess], mode: str
) -> None:
    runs.execute(PROGRESS_WRITES_DDL)
    reports = 100  # 100 reports, 20 ms apart: 2 seconds of work
    worker_process(dsn, tmp_path, spawn, "--mode", mode, "--lease", "30")
    job_id = pyqueue.enqueue(runs, "work", {"report": reports})
    started(runs, job_id)
    wait_until(lambda: scalar(runs, "SELECT progress FROM jobq.jobs WHERE id = %s", (job_id,)) is not None,
               "the first progress to show in jobq.jobs")
    wait_until(lambda: scalar(runs, "SELECT status FROM jobq.jobs WHERE id = %s", (job_id,)) == "completed",
               "the job to complete")
    writes = [row[0] for row in runs.execute(
        "SELECT progress FROM progress_writes WHERE job_id = %s ORDER BY at", (job_id,)).fetchall()]
    seconds = scalar(runs, "SELECT extract(epoch FROM exited - started) FROM runs WHERE job_id = %s",
                     (job_id,))
    print(f"{mode}: {reports} reports in {float(seconds):.1f} s -> {len(writes)} writes")
    assert 1 <= len(writes) <= float(seconds) + 2, writes  # coalesced: about one per second
    assert writes[-1] == {"done": reports}, writes  # the latest value is the one that lands


def test_progress_of_a_job_claimed_without_a_worker(conn: Conn) -> None:
    job_id = pyqueue.enqueue(conn, "solo", {"n": 1}, max_attempts=2)
    [job] = pyqueue.claim(conn, "solo")
    assert job.progress is None
    assert job.report_progress({"step": "fetch", "done": 1}) is True  # sent at once
    shown = scalar(conn, "SELECT progress FROM jobq.jobs WHERE id = %s", (job_id,))
    assert shown == {"step": "fetch", "done": 1}
    assert pyqueue.progress(conn, job_id, job.lease_token, 0.25) is True
    assert pyqueue.progress(conn, job_id, "00000000-0000-0000-0000-000000000000", 0.5) is False  # fenced
    with pytest.raises(InvalidArgument, match="progress"):
        job.report_progress({"not json": object()})
    conn.execute("SELECT jobq.configure_queue('solo', max_payload_bytes => 64)")
    with pytest.raises(PayloadTooLarge, match=r"progress is \d+ bytes, over the queue's cap of 64 bytes"):
        job.report_progress({"log": "x" * 500})
    assert scalar(conn, "SELECT progress FROM jobq.jobs WHERE id = %s", (job_id,)) == 0.25  # nothing changed
    assert job.fail("again")
    conn.execute("UPDATE jobq._job SET run_at = now() WHERE id = %s", (job_id,))
    [again] = pyqueue.claim(conn, "solo")
    assert again.progress == 0.25  # the next attempt starts where the last one got
    assert pyqueue.cancel(conn, job_id)
    assert again.report_progress(1) is False and again.cancel_requested and again.cancelled_event.is_set()
    assert again.sleep(5) is True  # returns at once: cancelled
