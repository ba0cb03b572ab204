"""The asyncio twins: client calls on an AsyncConnection, the async listen()
(handler and iterator) and AsyncWorker. Each test runs its own event loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import pyqueue
from pyqueue import aio
from pyqueue.defaults import LISTEN_APPLICATION_NAME
from tests.worker_support import backend_pids, job_status, keep_history, scalar, wait_until

Conn = psycopg.Connection[tuple[object, ...]]


@pytest.fixture(autouse=True)
def history(conn: Conn) -> None:
    keep_history(conn, ["a", "it", "long", "n", "t", "tx", "v", "w"])

IDLE_POLL = 60.0  # seconds: only NOTIFY can explain a quicker pickup
PICKUP_LIMIT = 10.0  # seconds
TIMEOUT = 60.0  # seconds: generous bound for anything else


async def until(predicate: Callable[[], Awaitable[bool]], what: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(0.05)


async def connect(dsn: str, **kwargs: Any) -> psycopg.AsyncConnection[tuple[Any, ...]]:
    return await psycopg.AsyncConnection.connect(dsn, **kwargs)


def test_async_client_round_trip(conn: Conn, dsn: str) -> None:
    async def main() -> None:
        async with await connect(dsn, autocommit=True) as aconn:
            first = await aio.enqueue(aconn, "a", {"n": 1}, priority=1)
            more = await aio.enqueue_many(aconn, "a", [{"n": 2}, {"n": 3}], delay=0)
            jobs = await aio.claim(aconn, "a", 10, lease=timedelta(seconds=30))
            assert [j.id for j in jobs] == [*more, first]  # priority 0 before 1
            assert all(isinstance(j, aio.AsyncJob) for j in jobs)
            assert jobs[0].payload == {"n": 2} and jobs[0].lease_seconds == pytest.approx(30.0, abs=1.0)
            assert await jobs[0].heartbeat(timedelta(minutes=1)) is True
            assert await jobs[0].complete() is True
            assert await jobs[0].complete() is False
            async with jobs[1]:
                raise ValueError("async failure")  # failed with the traceback, swallowed
            assert await jobs[2].release() is True
            assert await aio.complete_many(aconn, []) == 0
            [st] = [s for s in await aio.stats(aconn) if s.queue == "a"]
            assert (st.queue, st.ready, st.scheduled) == ("a", 1, 1)
            with pytest.raises(pyqueue.InvalidQueueName) as caught:
                await aio.enqueue(aconn, "bad queue", {})
            assert caught.value.hint

    asyncio.run(main())
    assert job_status(conn, 2) == "completed"
    error = scalar(conn, "SELECT last_error FROM jobq._job WHERE id = 3")
    assert "ValueError: async failure" in error and error.startswith("Traceback")
    assert conn.execute("SELECT status, attempts FROM jobq._job WHERE id = 1").fetchone() == ("ready", 0)


def test_async_complete_many_counts_held_leases_and_marks_the_jobs(conn: Conn, dsn: str) -> None:
    """As pyqueue.complete_many: lost leases are not counted, and every job
    passed is marked acknowledged."""
    async def main() -> None:
        async with await connect(dsn, autocommit=True) as aconn:
            await aio.enqueue_many(aconn, "a", [{"i": i} for i in range(3)])
            jobs = await aio.claim(aconn, "a", 3)
            assert await jobs[0].complete() is True
            assert await aio.complete_many(aconn, jobs) == 2
            assert all(job.acknowledged for job in jobs)
            assert await aio.complete(aconn, jobs[1].id, jobs[1].lease_token) is False

    asyncio.run(main())
    assert scalar(conn, "SELECT count(*) FROM jobq.jobs WHERE queue = 'a' AND status = 'completed'") == 3


def test_async_enqueue_joins_the_callers_transaction(conn: Conn, dsn: str) -> None:
    conn.execute("CREATE TABLE orders (id int PRIMARY KEY)")

    async def main() -> None:
        async with await connect(dsn) as aconn:
            await aconn.execute("INSERT INTO orders VALUES (1)")
            await aio.enqueue(aconn, "tx", {"order": 1})
            await aconn.rollback()
            await aconn.execute("INSERT INTO orders VALUES (2)")
            await aio.enqueue(aconn, "tx", {"order": 2})
            await aconn.commit()

    asyncio.run(main())
    assert scalar(conn, "SELECT array_agg(id) FROM orders") == [2]
    assert [j.payload for j in pyqueue.claim(conn, "tx", 10)] == [{"order": 2}]


def test_async_listen_handler_wakes_on_notify(conn: Conn, dsn: str) -> None:
    handled: dict[int, float] = {}

    async def main() -> float:
        stop = asyncio.Event()

        async def handler(job: aio.AsyncJob) -> None:
            handled[job.id] = time.monotonic()
            if job.payload.get("fail"):
                raise RuntimeError("handler failed")

        worker = asyncio.create_task(aio.listen(dsn, "n", handler, stop=stop, poll_interval=IDLE_POLL,
                                                reap_interval=None, handle_signals=False))

        async def listening() -> bool:
            return bool(await asyncio.to_thread(backend_pids, conn, LISTEN_APPLICATION_NAME))

        await until(listening, "the worker listening")
        await asyncio.sleep(0.5)  # idle now, for up to IDLE_POLL seconds
        async with await connect(dsn, autocommit=True) as aconn:
            enqueued = time.monotonic()
            await aio.enqueue_many(aconn, "n", [{"fail": False}, {"fail": True}])

        async def both() -> bool:
            return len(handled) == 2

        await until(both, "the notified jobs", timeout=PICKUP_LIMIT)
        stop.set()
        await asyncio.wait_for(worker, TIMEOUT)
        return enqueued

    enqueued = asyncio.run(main())
    assert all(at - enqueued < PICKUP_LIMIT for at in handled.values())
    assert job_status(conn, 1) == "completed"
    assert "RuntimeError: handler failed" in scalar(conn, "SELECT last_error FROM jobq._job WHERE id = 2")
    # The LISTEN connection is closed (its backend leaves pg_stat_activity shortly after).
    wait_until(lambda: backend_pids(conn, LISTEN_APPLICATION_NAME) == [], "the LISTEN connection closed")


def test_async_iterator_acknowledgements(conn: Conn, dsn: str) -> None:
    implicit, explicit, broke, prefetched = (pyqueue.enqueue(conn, "it", {}, priority=n) for n in range(4))

    async def main() -> None:
        async with aio.listen(dsn, "it", batch_size=10, handle_signals=False) as jobs:
            async for job in jobs:
                if job.id == explicit:
                    assert await job.complete() is True
                elif job.id == broke:
                    break  # unacknowledged at close: released

    asyncio.run(main())
    done = [r[0] for r in conn.execute("SELECT id FROM jobq._job_archive ORDER BY id").fetchall()]
    assert done == [implicit, explicit]
    assert conn.execute("SELECT id, status, attempts FROM jobq._job ORDER BY id").fetchall() == \
        [(broke, "ready", 0), (prefetched, "ready", 0)]


def test_async_heartbeat_keeps_a_long_job_s_lease(conn: Conn, dsn: str) -> None:
    job_id = pyqueue.enqueue(conn, "long", {})

    async def main() -> int:
        stop = asyncio.Event()

        async def handler(job: aio.AsyncJob) -> None:
            await asyncio.sleep(3.5)  # 3.5 leases
            stop.set()

        worker = asyncio.create_task(aio.listen(dsn, "long", handler, stop=stop, lease=timedelta(seconds=1),
                                                reap_interval=0.3, handle_signals=False))
        reaped = 0
        async with await connect(dsn, autocommit=True) as aconn:
            while not worker.done():
                reaped += await aio.reap(aconn)
                await asyncio.sleep(0.1)
        await worker
        return reaped

    assert asyncio.run(main()) == 0
    assert conn.execute("SELECT status, attempts FROM jobq.jobs WHERE id = %s", (job_id,)).fetchone() == \
        ("completed", 1)


def test_async_worker_runs_handlers_concurrently_and_stops(conn: Conn, dsn: str) -> None:
    ids = pyqueue.enqueue_many(conn, "w", [{"n": i} for i in range(40)])
    other = pyqueue.enqueue_many(conn, "v", [{"n": i} for i in range(5)])

    async def main() -> tuple[list[int], list[int], int]:
        worker = aio.AsyncWorker(dsn, concurrency=4, batch_size=8, poll_interval=IDLE_POLL)
        seen: list[int] = []
        seen_v: list[int] = []
        running = 0
        peak = 0
        four = asyncio.Event()

        @worker.handler("w")
        async def handle(job: aio.AsyncJob) -> None:
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            if peak >= 4:
                four.set()
            await asyncio.wait_for(four.wait(), TIMEOUT)  # only passes with 4 running together
            running -= 1
            seen.append(job.id)
            if len(seen) + len(seen_v) == 45:
                worker.stop()

        @worker.handler("v")
        async def handle_v(job: aio.AsyncJob) -> None:
            seen_v.append(job.id)
            if len(seen) + len(seen_v) == 45:
                worker.stop()

        await asyncio.wait_for(worker.run(handle_signals=False), TIMEOUT)
        return seen, seen_v, peak

    seen, seen_v, peak = asyncio.run(main())
    assert sorted(seen) == ids and sorted(seen_v) == other
    assert peak == 4
    assert scalar(conn, "SELECT count(*) FROM jobq.jobs WHERE status = 'completed'") == 45


def test_async_worker_stop_releases_jobs_not_started(conn: Conn, dsn: str) -> None:
    pyqueue.enqueue_many(conn, "w", [{"n": i} for i in range(6)])

    async def main() -> list[int]:
        worker = aio.AsyncWorker(dsn, concurrency=2, batch_size=6, poll_interval=IDLE_POLL)
        started: list[int] = []
        gate = asyncio.Event()

        @worker.handler("w")
        async def handle(job: aio.AsyncJob) -> None:
            started.append(job.id)
            if len(started) == 2:
                worker.stop()
                gate.set()
            await gate.wait()

        await asyncio.wait_for(worker.run(handle_signals=False), TIMEOUT)
        return started

    started = asyncio.run(main())
    assert len(started) == 2
    assert scalar(conn, "SELECT count(*) FROM jobq.jobs WHERE status = 'completed' AND id = ANY(%s)",
                  (started,)) == 2
    assert conn.execute("SELECT status, attempts FROM jobq._job").fetchall() == [("ready", 0)] * 4


def test_async_listen_recovers_when_its_listen_connection_is_terminated(conn: Conn, dsn: str) -> None:
    handled: list[int] = []

    async def main() -> tuple[list[int], list[int]]:
        stop = asyncio.Event()

        async def handler(job: aio.AsyncJob) -> None:
            handled.append(job.id)

        worker = asyncio.create_task(aio.listen(dsn, "t", handler, stop=stop, poll_interval=IDLE_POLL,
                                                reap_interval=None, handle_signals=False))

        async def listeners() -> list[int]:
            return await asyncio.to_thread(backend_pids, conn, LISTEN_APPLICATION_NAME)

        async def one_listener() -> bool:
            return len(await listeners()) == 1

        await until(one_listener, "the worker listening")
        old = await listeners()
        await asyncio.to_thread(scalar, conn, "SELECT pg_terminate_backend(%s)", (old[0],))
        job_id = await asyncio.to_thread(pyqueue.enqueue, conn, "t", {})

        async def done() -> bool:
            return job_id in handled

        # Claimed as soon as the worker sees the connection broken, long before its next poll.
        await until(done, "the job enqueued while the LISTEN connection was gone", timeout=IDLE_POLL / 2)

        async def listening_again() -> bool:
            return (await listeners()) not in ([], old)

        # The job may come by a poll before the new LISTEN connection is up: wait for it.
        await until(listening_again, "a new LISTEN connection")
        new = await listeners()
        stop.set()
        await asyncio.wait_for(worker, TIMEOUT)
        return old, new

    old, new = asyncio.run(main())
    assert len(new) == 1 and new != old
    assert scalar(conn, "SELECT count(*) FROM jobq.jobs WHERE status = 'completed'") == 1
