"""Prometheus metrics of a worker and of the database, checked against the
database after a scripted workload.

A real Worker (and AsyncWorker) started with ``metrics_port`` runs jobs that
complete, fail into retry and dead, time out, or are acknowledged by the
handler; its ``/metrics`` is scraped over real HTTP and read with
prometheus-client's parser. The jobq_* series must equal what jobq.stats
holds, the duration histogram must have counted every handler run under
the right outcome, the pickup delay must be read on the database's clock,
and nothing may stay in flight. The collector alone reports ``jobq_up 0``
(never an error) when the database is missing, lacks jobq or is too slow.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any, cast

import psycopg
import pytest
from pytest_postgresql.executors import PostgreSQLExecutor

import pyqueue
import pyqueue.aio
from pyqueue.metrics import DatabaseCollector, exposition
from pyqueue.metrics.worker import WorkerMetrics
from tests.conftest import proc_dsn
from tests.metrics_support import (
    Conn,
    Samples,
    bucket,
    from_stats,
    jobq_series,
    key,
    outcomes,
    parse,
    scrape,
)
from tests.ports import free_port
from tests.worker_support import InThread, scalar, wait_until

QUICK_RETRY = ("SELECT jobq.configure_queue(%s, backoff_base => interval '0.1 s', "
               "backoff_cap => interval '0.2 s')")
LATE = 120  # seconds in the past the late job's run_at is, on the database's clock


def enqueue_sql(conn: Conn, queue: str, payload: dict[str, Any], **options: str) -> int:
    """jobq.enqueue with options given as SQL expressions (database clock)."""
    named = "".join(f", {name} => {expression}" for name, expression in options.items())
    return int(scalar(conn, f"SELECT jobq.enqueue(%s, %s::jsonb{named})", (queue, json.dumps(payload))))


def workload(conn: Conn, queue: str) -> None:
    """Ten jobs of two attempts (every third fails both: dead; job 1 is completed
    by its handler itself; the rest complete); one that times out (dead); one
    due LATE seconds ago; one scheduled an hour ahead (never run); and a ready
    job 30 s old on a queue nobody works."""
    conn.execute(QUICK_RETRY, (queue,))
    for i in range(10):
        enqueue_sql(conn, queue, {"i": i}, max_attempts="2")
    enqueue_sql(conn, queue, {"sleep": 1.5}, max_attempts="1", timeout="interval '1 s'")
    enqueue_sql(conn, queue, {"late": True}, run_at=f"now() - interval '{LATE} s'")
    enqueue_sql(conn, queue, {"later": True}, run_at="now() + interval '1 hour'")
    enqueue_sql(conn, f"{queue}-idle", {}, run_at="now() - interval '30 s'")


def settled(conn: Conn, queue: str, completed: int, dead: int) -> bool:
    row = conn.execute("SELECT ready, running, completed_total, dead_total FROM jobq.stats WHERE queue = %s",
                       (queue,)).fetchone()
    return row == (0, 0, completed, dead)


def assert_jobq_series_match_the_database(conn: Conn, samples: Samples) -> None:
    """Every jobq_* series equals jobq.stats (no more, no fewer); ages agree
    within the seconds between the two reads."""
    expected, ages = from_stats(conn)
    assert jobq_series(samples) == expected
    for queue, age in ages.items():
        assert abs(samples[key("jobq_oldest_ready_age_seconds", queue=queue)] - age) < 10, queue
    assert samples[key("jobq_up")] == 1.0


def handled(samples: Samples, queue: str, runs: int) -> bool:
    """The histograms counted ``runs`` handler runs and none is in flight."""
    return (sum(outcomes(samples, queue).values()) == runs
            and samples.get(key("pyqueue_jobs_in_flight", queue=queue)) == 0.0)


def test_a_worker_serves_its_handlers_and_the_database_as_they_are(conn: Conn, dsn: str) -> None:
    queue, port = "mx", free_port()
    workload(conn, queue)

    def handle(job: pyqueue.Job) -> None:
        if "sleep" in job.payload:
            time.sleep(job.payload["sleep"])
        elif job.payload.get("i", 1) % 3 == 0:
            raise RuntimeError("every third job fails")
        elif job.payload.get("i") == 1:
            job.complete()

    worker = pyqueue.Worker(dsn, metrics_port=port, poll_interval=0.2, concurrency=4)
    worker.register(queue, handle)
    thread = InThread(lambda: worker.run(handle_signals=False))
    try:
        wait_until(lambda: settled(conn, queue, completed=7, dead=5), "the workload to settle")
        wait_until(lambda: handled(scrape(port), queue, runs=16), "the histograms to count 16 handler runs")
        samples = scrape(port)
        assert_jobq_series_match_the_database(conn, samples)
    finally:
        worker.stop()
        thread.join()
    assert outcomes(samples, queue) == {"completed": 6, "failed": 8, "timeout": 1, "acknowledged": 1}
    assert samples[key("pyqueue_job_duration_seconds_sum", outcome="timeout", queue=queue)] >= 1.0
    # The pickup delay is read on the database's clock: every job but the late
    # one started within a minute of its run_at, the late one LATE s after it.
    assert samples[key("pyqueue_pickup_delay_seconds_count", queue=queue)] == 16
    assert bucket(samples, "pyqueue_pickup_delay_seconds", "60.0", queue=queue) == 15
    assert bucket(samples, "pyqueue_pickup_delay_seconds", "300.0", queue=queue) == 16
    assert scalar(conn, "SELECT failed_total FROM jobq.stats WHERE queue = %s", (queue,)) == 9
    assert samples[key("jobq_jobs", queue=queue, state="scheduled")] == 1.0
    assert samples[key("jobq_oldest_ready_age_seconds", queue=f"{queue}-idle")] >= 30
    with pytest.raises(OSError):  # run() returned: the port is closed
        scrape(port)


def test_an_async_worker_serves_the_same_metrics(conn: Conn, dsn: str) -> None:
    queue, port = "ax", free_port()
    conn.execute(QUICK_RETRY, (queue,))
    for i in range(6):
        enqueue_sql(conn, queue, {"i": i}, max_attempts="1")
    enqueue_sql(conn, queue, {"sleep": 30}, max_attempts="1", timeout="interval '1 s'")

    async def handle(job: pyqueue.aio.AsyncJob) -> None:
        if "sleep" in job.payload:
            await asyncio.sleep(job.payload["sleep"])
        if job.payload.get("i", 1) % 2 == 0:
            raise RuntimeError("every other job fails")

    async def scenario() -> Samples:
        worker = pyqueue.aio.AsyncWorker(dsn, metrics_port=port, poll_interval=0.2)
        worker.register(queue, handle)
        task = asyncio.create_task(worker.run(handle_signals=False))
        try:
            await asyncio.to_thread(wait_until, lambda: settled(conn, queue, completed=3, dead=4), "the runs")
            await asyncio.to_thread(wait_until, lambda: handled(scrape(port), queue, runs=7), "7 counted")
            return await asyncio.to_thread(scrape, port)
        finally:
            worker.stop()
            await asyncio.wait_for(task, 60)

    samples = asyncio.run(scenario())
    assert_jobq_series_match_the_database(conn, samples)
    assert outcomes(samples, queue) == {"completed": 3, "failed": 3, "timeout": 1}
    assert samples[key("pyqueue_pickup_delay_seconds_count", queue=queue)] == 7
    assert bucket(samples, "pyqueue_pickup_delay_seconds", "60.0", queue=queue) == 7


def test_an_async_handler_cancelled_by_the_stop_counts_as_shutdown(conn: Conn, dsn: str) -> None:
    queue = "ay"
    stuck = enqueue_sql(conn, queue, {"sleep": 3600}, timeout="interval '1 hour'")
    started = threading.Event()

    async def handle(job: pyqueue.aio.AsyncJob) -> None:
        started.set()
        await asyncio.sleep(job.payload["sleep"])

    worker = pyqueue.aio.AsyncWorker(dsn, metrics_port=free_port(), poll_interval=0.2, shutdown_timeout=0.2)
    worker.register(queue, handle)

    async def scenario() -> None:
        task = asyncio.create_task(worker.run(handle_signals=False))
        try:
            assert await asyncio.to_thread(started.wait, 30)
        finally:
            worker.stop()
            await asyncio.wait_for(task, 60)

    asyncio.run(scenario())
    # The server closed with run(): read the worker's own series (not the
    # database collector's, which would open a connection again).
    metrics = cast(WorkerMetrics, worker._observer)
    samples = {key(sample.name, **sample.labels): sample.value
               for series in (metrics.duration, metrics.in_flight) for family in series.collect()
               for sample in family.samples}
    assert outcomes(samples, queue) == {"shutdown": 1}
    assert samples[key("pyqueue_jobs_in_flight", queue=queue)] == 0.0
    assert scalar(conn, "SELECT attempts FROM jobq.jobs WHERE id = %s", (stuck,)) == 1
    assert "shutdown timeout" in str(scalar(conn, "SELECT last_error FROM jobq.jobs WHERE id = %s", (stuck,)))


def collected(collector: DatabaseCollector) -> tuple[Samples, dict[str, str]]:
    """A scrape of the collector alone, as prometheus-client writes and reads it."""
    return parse(exposition(collector.collect()).decode())


def test_the_collector_exposes_jobq_metrics_with_their_types(conn: Conn, dsn: str) -> None:
    # The failed job waits an hour for its retry: scheduled in the scrape and
    # in the rows read after it (a retry due in 0.1 s could become ready
    # between the two on a loaded machine).
    conn.execute("SELECT jobq.configure_queue(%s, backoff_base => interval '1 hour')", ("c1",))
    for queue in ("c1", "c2"):
        enqueue_sql(conn, queue, {})
    job = pyqueue.claim(conn, "c1")[0]
    assert job.fail("once") is True
    collector = DatabaseCollector(dsn)
    try:
        samples, types = collected(collector)
        rows = conn.execute("SELECT name, labels, value FROM jobq.metrics()").fetchall()
        from_rows = {key(name, **labels): value for name, labels, value in rows}
        assert set(samples) == {*from_rows, key("jobq_up")}  # one series per row, and jobq_up
        assert jobq_series(samples) == jobq_series(from_rows)  # the ages move: compared in the worker tests
        assert samples[key("jobq_failed_total", queue="c1")] == 1.0
        assert samples[key("jobq_jobs", queue="c2", state="ready")] == 1.0
        # The _total names are counters: the parser names their family without the suffix.
        assert types == {"jobq_jobs": "gauge", "jobq_oldest_ready_age_seconds": "gauge", "jobq_up": "gauge",
                         "jobq_completed": "counter", "jobq_failed": "counter", "jobq_dead": "counter"}
        text = exposition(collector.collect()).decode()
        assert "# TYPE jobq_completed_total counter" in text and 'jobq_failed_total{queue="c1"} 1.0' in text
    finally:
        collector.close()


def test_the_collector_says_jobq_up_0_when_the_database_cannot_be_read(
        conn: Conn, postgresql_proc: PostgreSQLExecutor, dsn: str) -> None:
    enqueue_sql(conn, "slow", {})
    nobody = f"host=127.0.0.1 port={free_port()} user=postgres dbname=jobq"  # nothing listens there
    no_jobq = proc_dsn(postgresql_proc, "postgres")  # a database without jobq
    for where in (nobody, no_jobq):
        collector = DatabaseCollector(where, timeout=2)
        samples, _ = collected(collector)
        collector.close()
        assert samples == {key("jobq_up"): 0.0}, where

    # Too slow: jobq.metrics() waits for a lock longer than the scrape's timeout.
    collector = DatabaseCollector(dsn, timeout=1)
    assert collected(collector)[0][key("jobq_up")] == 1.0  # its connection is open
    locker = psycopg.connect(dsn)
    locker.execute("LOCK TABLE jobq._job IN ACCESS EXCLUSIVE MODE")
    pid = locker.info.backend_pid
    # Should the timeout not work, end the lock after a minute: the scrape then reads (jobq_up 1: fails).
    guard = threading.Timer(60, lambda: conn.execute("SELECT pg_terminate_backend(%s)", (pid,)))
    guard.start()
    try:
        slow, _ = collected(collector)
    finally:
        guard.cancel()
        locker.rollback()
        locker.close()
    assert slow == {key("jobq_up"): 0.0}
    again, _ = collected(collector)  # the same collector reads again once the lock is gone
    collector.close()
    assert again[key("jobq_up")] == 1.0
    assert jobq_series(again) == from_stats(conn)[0]


@pytest.mark.parametrize(("options", "error", "says"), [
    ({"metrics_port": "9100"}, TypeError, "metrics_port must be an int"),
    ({"metrics_port": True}, TypeError, "metrics_port must be an int"),
    ({"metrics_port": 70000}, ValueError, "between 0 and 65535"),
    ({"metrics_port": 9100, "metrics_host": ""}, TypeError, "metrics_host must be"),
    ({"metrics_host": "0.0.0.0"}, ValueError, "metrics_host is set but metrics_port is not"),
])
def test_bad_metrics_settings_are_refused_by_the_constructors(
        dsn: str, options: dict[str, Any], error: type[Exception], says: str) -> None:
    with pytest.raises(error, match=says):
        pyqueue.Worker(dsn, **options)
    with pytest.raises(error, match=says):
        pyqueue.aio.AsyncWorker(dsn, **options)


def test_waiting_jobs_are_a_state_of_jobq_jobs(conn: Conn, dsn: str) -> None:
    """A job held by its parents shows as state="waiting" (jobq 0.6), with its
    help text, and moves to ready when its parent completes."""
    parent = enqueue_sql(conn, "w1", {"step": 1})
    enqueue_sql(conn, "w2", {"step": 2}, depends_on=f"ARRAY[{parent}]::bigint[]")
    enqueue_sql(conn, "w2", {"step": 3}, depends_on=f"ARRAY[{parent}]::bigint[]")
    collector = DatabaseCollector(dsn)
    try:
        samples, _ = collected(collector)
        assert samples[key("jobq_jobs", queue="w2", state="waiting")] == 2.0
        assert samples[key("jobq_jobs", queue="w2", state="ready")] == 0.0
        assert samples[key("jobq_jobs", queue="w1", state="waiting")] == 0.0
        assert jobq_series(samples) == from_stats(conn)[0]
        text = exposition(collector.collect()).decode()
        help_line = next(line for line in text.splitlines() if line.startswith("# HELP jobq_jobs "))
        assert "waiting: held until their parent jobs finish" in help_line
        job = pyqueue.claim(conn, "w1")[0]
        assert job.complete() is True
        after, _ = collected(collector)
        assert after[key("jobq_jobs", queue="w2", state="waiting")] == 0.0
        assert after[key("jobq_jobs", queue="w2", state="ready")] == 2.0
        assert jobq_series(after) == from_stats(conn)[0]
    finally:
        collector.close()
