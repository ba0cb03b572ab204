"""Execution timeouts in the workers: a job that runs past its timeout is
failed (sync worker, listen with a handler, the iterator), its handler is
cancelled (async worker and listen), and a hung handler does not keep the
worker from other jobs."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import pyqueue
from pyqueue import aio
from tests.worker_support import InThread, keep_history, wait_until

Conn = psycopg.Connection[tuple[object, ...]]

TIMEOUT = 60.0  # seconds: generous bound for anything to happen


@pytest.fixture(autouse=True)
def history(conn: Conn) -> None:
    keep_history(conn, ["to"])
    # A failed attempt of queue "to" waits an hour: no retry muddles the tests.
    conn.execute("SELECT jobq.configure_queue('to', backoff_base => '1 hour', backoff_cap => '2 hours')")


def states(conn: Conn, ids: list[int]) -> dict[int, tuple[Any, ...]]:
    rows = conn.execute("SELECT id, status, attempts FROM jobq.jobs WHERE id = ANY(%s)", (ids,)).fetchall()
    return {int(str(r[0])): (r[1], r[2]) for r in rows}



TIMED_OUT = "JobTimeout: job ran longer than 0:00:01"
JOB_ROW = "SELECT status, attempts, last_error FROM jobq.jobs WHERE id = %s"


def timed_out(conn: Conn, job_id: int) -> bool:
    row = conn.execute(JOB_ROW, (job_id,)).fetchone()
    return row is not None and row[0] in ("scheduled", "ready", "dead") and TIMED_OUT in str(row[2])


def assert_failed_by_timeout(conn: Conn, job_id: int, status: str = "scheduled") -> None:
    row = conn.execute(JOB_ROW, (job_id,)).fetchone()
    assert row is not None and row[:2] == (status, 1), row
    assert TIMED_OUT in str(row[2])


def test_the_worker_fails_a_job_that_runs_past_its_timeout(conn: Conn, dsn: str) -> None:
    slow = pyqueue.enqueue(conn, "to", {"n": 1}, timeout=1)
    dead = pyqueue.enqueue(conn, "to", {"n": 2}, timeout=timedelta(seconds=1), max_attempts=1)
    quick = pyqueue.enqueue(conn, "to", {"n": 3}, timeout=1)
    release = threading.Event()
    returned: list[int] = []
    worker = pyqueue.Worker(dsn, concurrency=3, poll_interval=0.5, lease=timedelta(seconds=3))

    @worker.handler("to")
    def handle(job: pyqueue.Job) -> None:
        assert job.timeout == timedelta(seconds=1)
        if job.id != quick:
            release.wait(TIMEOUT)  # hangs past its timeout
        returned.append(job.id)

    runner = InThread(lambda: worker.run(handle_signals=False))
    try:
        wait_until(lambda: timed_out(conn, slow) and timed_out(conn, dead), "the timeouts")
        assert_failed_by_timeout(conn, slow)
        assert_failed_by_timeout(conn, dead, "dead")
        assert states(conn, [quick])[quick] == ("completed", 1)
        # Not heart-beaten past the timeout: the lease (3 s) lapses while the handler still runs.
        time.sleep(4)
        assert states(conn, [slow, dead]) == {slow: ("scheduled", 1), dead: ("dead", 1)}
    finally:
        release.set()
        worker.stop()  # returns once the handlers did
        runner.join()
    assert sorted(returned) == sorted([slow, dead, quick])
    assert states(conn, [slow]) == {slow: ("scheduled", 1)}  # the late return was discarded


def test_a_handler_that_timed_out_does_not_keep_the_worker_from_other_jobs(conn: Conn, dsn: str) -> None:
    hung = pyqueue.enqueue(conn, "to", {"hang": True}, timeout=1, priority=-1)
    later = pyqueue.enqueue_many(conn, "to", [{"n": n} for n in range(3)], timeout=1)
    release = threading.Event()
    worker = pyqueue.Worker(dsn, concurrency=1, batch_size=1, poll_interval=0.5)

    @worker.handler("to")
    def handle(job: pyqueue.Job) -> None:
        if job.payload.get("hang"):
            release.wait(TIMEOUT)

    runner = InThread(lambda: worker.run(handle_signals=False))
    try:
        # The one thread is stuck in the hung handler; another takes its place.
        wait_until(lambda: set(states(conn, later).values()) == {("completed", 1)}, "the other jobs")
        assert_failed_by_timeout(conn, hung)
    finally:
        release.set()
        worker.stop()
        runner.join()


def test_listen_with_a_handler_fails_a_job_that_runs_past_its_timeout(conn: Conn, dsn: str) -> None:
    slow = pyqueue.enqueue(conn, "to", {}, timeout=1)
    stop = threading.Event()
    told: list[bool] = []

    def handle(job: pyqueue.Job) -> None:
        try:
            assert not job.timed_out
            wait_until(lambda: timed_out(conn, slow), "the timeout, while the handler runs")
            told.append(job.timed_out)  # what the metrics' outcome reads
        finally:
            stop.set()

    pyqueue.listen(dsn, "to", handle, stop=stop, handle_signals=False, poll_interval=0.5)
    assert_failed_by_timeout(conn, slow)
    assert told == [True]


def test_the_iterator_fails_a_job_kept_past_its_timeout(conn: Conn, dsn: str) -> None:
    slow = pyqueue.enqueue(conn, "to", {}, timeout=1)
    with pyqueue.listen(dsn, "to", handle_signals=False) as jobs:
        for job in jobs:
            with job:
                wait_until(lambda: timed_out(conn, slow), "the timeout, inside the with block")
                assert job.timed_out
            break
    assert_failed_by_timeout(conn, slow)


def test_the_async_worker_cancels_a_handler_that_runs_past_its_timeout(conn: Conn, dsn: str) -> None:
    slow = pyqueue.enqueue(conn, "to", {}, timeout=1)
    dead = pyqueue.enqueue(conn, "to", {}, timeout=1, max_attempts=1)
    quick = pyqueue.enqueue(conn, "to", {}, timeout=1)
    cancelled: list[int] = []

    async def main() -> None:
        worker = aio.AsyncWorker(dsn, concurrency=3, poll_interval=0.5)

        @worker.handler("to")
        async def handle(job: aio.AsyncJob) -> None:
            assert not job.timed_out
            if job.id == quick:
                return
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if job.timed_out:  # told before the cancel arrives: the metrics' outcome reads it
                    cancelled.append(job.id)
                raise

        async def stop_when_done() -> None:
            while not (timed_out(conn, slow) and timed_out(conn, dead)):
                await asyncio.sleep(0.05)
            worker.stop()

        await asyncio.wait_for(asyncio.gather(worker.run(handle_signals=False), stop_when_done()), TIMEOUT)

    asyncio.run(main())
    assert sorted(cancelled) == sorted([slow, dead])
    assert_failed_by_timeout(conn, slow)
    assert_failed_by_timeout(conn, dead, "dead")
    assert states(conn, [quick])[quick] == ("completed", 1)


def test_async_listen_cancels_a_handler_and_the_iterator_fails_a_job_past_its_timeout(
    conn: Conn, dsn: str
) -> None:
    by_handler = pyqueue.enqueue(conn, "to", {}, timeout=1, priority=1)
    in_loop = pyqueue.enqueue(conn, "to", {}, timeout=1, priority=2)

    async def main() -> None:
        stop = asyncio.Event()

        async def handle(job: aio.AsyncJob) -> None:
            stop.set()  # this job only
            await asyncio.sleep(3600)

        await asyncio.wait_for(aio.listen(dsn, "to", handle, stop=stop, batch_size=1, handle_signals=False),
                               TIMEOUT)
        assert_failed_by_timeout(conn, by_handler)
        async with aio.listen(dsn, "to", handle_signals=False) as jobs:
            async for job in jobs:
                assert job.id == in_loop
                async with job:
                    while not timed_out(conn, in_loop):
                        await asyncio.sleep(0.05)
                    assert job.timed_out
                break

    asyncio.run(main())
    assert_failed_by_timeout(conn, in_loop)
