"""Workers and workflows (jobq 0.6): a handler's return value is its job's
result (sync and async workers, listen, in-transaction batches); a value
that is not JSON fails the job with a clear error; a result too large for
its queue fails only its own job, the rest of the acknowledgement batch
completes; chains run in order and a group's callback sees the counts."""

from __future__ import annotations

import asyncio
import base64
import os
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

import pyqueue
from pyqueue import aio
from tests.worker_support import InThread, keep_history, scalar, wait_until

Conn = psycopg.Connection[tuple[object, ...]]
IDLE_POLL = 0.5


@pytest.fixture(autouse=True)
def history(conn: Conn) -> None:
    keep_history(conn, ["s1", "s2", "s3", "dt", "big", "g", "done", "tx"])


@pytest.fixture
def stop() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def noise(n: int) -> str:
    """Text that does not compress: a result far over a small max_payload_bytes."""
    return base64.b64encode(os.urandom(n)).decode()


def last_error(conn: Conn, job_id: int) -> str:
    return str(scalar(conn, "SELECT last_error FROM jobq.jobs WHERE id = %s", (job_id,)))


def test_a_chain_runs_in_order_each_step_reading_the_result_before(dsn: str, conn: Conn) -> None:
    worker = pyqueue.Worker(dsn, concurrency=3, poll_interval=IDLE_POLL)
    order: list[str] = []
    seen: dict[str, Any] = {}

    def step(job: pyqueue.Job) -> Any:
        with psycopg.connect(dsn, autocommit=True) as own:
            seen[job.queue] = pyqueue.parent_results(own, job.id)
        order.append(job.queue)
        return {"step": job.queue, "n": len(order)}

    for queue in ("s1", "s2", "s3"):
        worker.register(queue, step)
    ids = pyqueue.chain(conn, [("s3", {}), ("s1", {}), ("s2", {})])  # the queues' order is not the chain's
    runner = InThread(lambda: worker.run(handle_signals=False))
    try:
        assert pyqueue.wait(conn, ids[2], 60) == {"step": "s2", "n": 3}
    finally:
        worker.stop()
        runner.join()
    assert order == ["s3", "s1", "s2"]
    assert seen == {"s3": {}, "s1": {ids[0]: {"step": "s3", "n": 1}}, "s2": {ids[1]: {"step": "s1", "n": 2}}}


def test_a_handler_returning_what_json_cannot_hold_fails_its_job(dsn: str, conn: Conn,
                                                                   stop: threading.Event) -> None:
    ids = pyqueue.enqueue_many(conn, "dt", [{"bad": True}, {"bad": False}], max_attempts=1)

    def handler(job: pyqueue.Job) -> object:
        return datetime.now(UTC) if job.payload["bad"] else ["fine", 1]

    runner = InThread(lambda: pyqueue.listen(dsn, "dt", handler, stop=stop, batch_size=2,
                                             poll_interval=IDLE_POLL, handle_signals=False))
    with pytest.raises(pyqueue.JobDead):
        pyqueue.wait(conn, ids[0], 60)
    assert pyqueue.wait(conn, ids[1], 60) == ["fine", 1]
    stop.set()
    runner.join()
    error = last_error(conn, ids[0])
    assert "TypeError: handler returned a datetime, which is not JSON-serialisable: Object of type" in error


def test_a_result_too_large_fails_only_its_job_the_rest_of_the_batch_completes(
    dsn: str, conn: Conn, stop: threading.Event
) -> None:
    pyqueue.configure_queue(conn, "big", max_payload_bytes=500)
    ids = pyqueue.enqueue_many(conn, "big", [{"i": i} for i in range(6)], max_attempts=1)
    handled = threading.Event()

    def handler(job: pyqueue.Job) -> object:
        if job.payload["i"] == 5:
            handled.set()
        return noise(3000) if job.payload["i"] == 2 else {"i": job.payload["i"]}

    # One claim of 6 and one flush at the end of the batch: the six completions go together.
    runner = InThread(lambda: pyqueue.listen(dsn, "big", handler, stop=stop, batch_size=6,
                                             poll_interval=IDLE_POLL, handle_signals=False))
    with pytest.raises(pyqueue.JobDead):
        pyqueue.wait(conn, ids[2], 60)
    assert [pyqueue.wait(conn, ids[i], 60) for i in (0, 1, 3, 4, 5)] == [{"i": i} for i in (0, 1, 3, 4, 5)]
    assert handled.is_set()
    stop.set()
    runner.join()
    assert last_error(conn, ids[2]).startswith("result too large")
    assert scalar(conn, "SELECT attempts FROM jobq.jobs WHERE id = %s", (ids[2],)) == 1


def test_a_group_callback_runs_once_with_the_counts(dsn: str, conn: Conn) -> None:
    worker = pyqueue.Worker(dsn, concurrency=2, poll_interval=IDLE_POLL)
    callbacks: list[dict[str, Any]] = []

    @worker.handler("g")
    def member(job: pyqueue.Job) -> int:
        if job.payload["i"] == 0:
            raise RuntimeError("member 0 fails")
        return int(job.payload["i"]) * 10

    @worker.handler("done")
    def callback(job: pyqueue.Job) -> str:
        callbacks.append(job.payload)
        return "published"

    made = pyqueue.group(conn, [pyqueue.Step("g", {"i": i}, max_attempts=1) for i in range(4)],
                         then=("done", {"album": 7}))
    runner = InThread(lambda: worker.run(handle_signals=False))
    try:
        assert pyqueue.wait(conn, made.callback, 60) == "published"
    finally:
        worker.stop()
        runner.join()
    assert callbacks == [{"album": 7, "batch": {"completed": 3, "dead": 1, "cancelled": 0, "members": 4}}]
    assert [pyqueue.result(conn, i) for i in made.members] == [None, 10, 20, 30]


def test_the_async_worker_keeps_results_and_fails_what_json_cannot_hold(dsn: str, conn: Conn) -> None:
    ids = pyqueue.enqueue_many(conn, "s1", [{"n": 1}, {"n": 2}, {"n": 3}], max_attempts=1)
    pyqueue.configure_queue(conn, "s1", max_payload_bytes=500)

    async def main() -> None:
        worker = aio.AsyncWorker(dsn, concurrency=3, poll_interval=IDLE_POLL)

        @worker.handler("s1")
        async def handle(job: aio.AsyncJob) -> object:
            return {1: {"double": 2}, 2: {1, 2}, 3: noise(3000)}[job.payload["n"]]

        task = asyncio.ensure_future(worker.run(handle_signals=False))
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
            try:
                assert await aio.wait(aconn, ids[0], 60) == {"double": 2}
                for dead in ids[1:]:
                    with pytest.raises(pyqueue.JobDead):
                        await aio.wait(aconn, dead, 60)
            finally:
                worker.stop()
                await task

    asyncio.run(main())
    assert "handler returned a set, which is not JSON-serialisable" in last_error(conn, ids[1])
    assert last_error(conn, ids[2]).startswith("result too large")


def test_in_transaction_handlers_return_results_and_a_too_large_one_is_undone(
    dsn: str, conn: Conn, stop: threading.Event
) -> None:
    conn.execute("CREATE TABLE notes (job_id bigint PRIMARY KEY)")
    pyqueue.configure_queue(conn, "tx", max_payload_bytes=500)
    ids = pyqueue.enqueue_many(conn, "tx", [{"n": i} for i in range(4)], max_attempts=1)

    def handler(job: pyqueue.TxJob) -> object:
        job.conn.execute("INSERT INTO notes VALUES (%s)", (job.id,))
        return {0: "zero", 1: noise(3000), 2: datetime.now(UTC), 3: None}[job.payload["n"]]

    runner = InThread(lambda: pyqueue.listen(dsn, "tx", handler, stop=stop, batch_size=4, in_transaction=True,
                                             poll_interval=IDLE_POLL, handle_signals=False))
    wait_until(lambda: scalar(conn, "SELECT count(*) FROM jobq.jobs WHERE queue = 'tx' AND status IN "
                                    "('completed', 'dead')") == 4, "the batch settled")
    stop.set()
    runner.join()
    assert pyqueue.result(conn, ids[0]) == "zero" and pyqueue.status(conn, ids[3]) == "completed"
    assert [pyqueue.status(conn, i) for i in ids[1:3]] == ["dead", "dead"]
    assert last_error(conn, ids[1]).startswith("result too large")
    assert "handler returned a datetime" in last_error(conn, ids[2])
    assert [r[0] for r in conn.execute("SELECT job_id FROM notes ORDER BY 1")] == [ids[0], ids[3]]


def test_async_in_transaction_results(dsn: str, conn: Conn) -> None:
    pyqueue.configure_queue(conn, "tx", max_payload_bytes=500)
    ids = pyqueue.enqueue_many(conn, "tx", [{"n": i} for i in range(3)], max_attempts=1)
    stop = asyncio.Event()

    async def handler(job: pyqueue.AsyncTxJob) -> object:
        if job.payload["n"] == 2:
            stop.set()
        return {0: [0], 1: noise(3000), 2: None}[job.payload["n"]]

    async def main() -> None:
        await aio.listen(dsn, "tx", handler, stop=stop, batch_size=3, in_transaction=True,
                         poll_interval=IDLE_POLL, handle_signals=False)

    asyncio.run(main())
    assert [pyqueue.status(conn, i) for i in ids] == ["completed", "dead", "completed"]
    assert pyqueue.result(conn, ids[0]) == [0]
    assert last_error(conn, ids[1]).startswith("result too large")
