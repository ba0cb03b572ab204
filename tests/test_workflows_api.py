"""pyqueue's workflow calls (jobq 0.6) against a real server: depends_on,
results, parent_results, batch callbacks, chain and group, wait (sync and
async), result_retention, and the typed errors of the new SQLSTATEs."""

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
from tests.worker_support import keep_history

Conn = psycopg.Connection[tuple[object, ...]]


@pytest.fixture(autouse=True)
def history(conn: Conn) -> None:
    keep_history(conn, ["a", "b", "cb", "w"])


def run_one(conn: Conn, queue: str, result: Any = None) -> int:
    """Claim the one ready job of ``queue`` and complete it with ``result``; its id."""
    [job] = pyqueue.claim(conn, queue)
    assert job.complete(result=result) is True
    return job.id


def test_a_child_waits_for_its_parents_and_is_released_when_the_last_completes(conn: Conn) -> None:
    first = pyqueue.enqueue(conn, "a", {"n": 1})
    second = pyqueue.enqueue(conn, "a", {"n": 2})
    child = pyqueue.enqueue(conn, "b", {"child": True}, depends_on=[first, second])
    assert pyqueue.status(conn, child) == "waiting"
    assert pyqueue.claim(conn, "b") == []  # never claimed while waiting
    [job] = pyqueue.claim(conn, "a")
    job.complete({"from": job.id})
    assert pyqueue.status(conn, child) == "waiting"
    last = run_one(conn, "a", [1, "two", 3.5])
    assert pyqueue.status(conn, child) == "ready"
    [claimed] = pyqueue.claim(conn, "b")
    assert claimed.id == child
    assert pyqueue.parent_results(conn, child) == {first: {"from": first}, last: [1, "two", 3.5]}
    assert list(pyqueue.parent_results(conn, child)) == sorted([first, second])
    assert pyqueue.parent_results(conn, first) == {}


def test_enqueue_many_with_parents_and_an_already_completed_parent(conn: Conn) -> None:
    parent = pyqueue.enqueue(conn, "a", {})
    run_one(conn, "a")
    done_parent_child = pyqueue.enqueue(conn, "b", {}, depends_on=[parent])
    assert pyqueue.status(conn, done_parent_child) == "ready"  # a completed parent counts as done
    live = pyqueue.enqueue(conn, "a", {})
    kids = pyqueue.enqueue_many(conn, "b", [{"i": 1}, {"i": 2}], depends_on=[live])
    assert [pyqueue.status(conn, k) for k in kids] == ["waiting", "waiting"]
    assert {s.queue: s.waiting for s in pyqueue.stats(conn)}["b"] == 2


def test_results_round_trip_every_json_value(conn: Conn) -> None:
    values: list[Any] = [{"a": [1, None]}, [1, 2], "text", 42, 2.5, True, False]
    ids = pyqueue.enqueue_many(conn, "a", [{} for _ in values])
    jobs = pyqueue.claim(conn, "a", len(values))
    assert pyqueue.result(conn, jobs[0].id) is None  # running: no result yet
    assert pyqueue.complete_many(conn, jobs, values) == len(values)
    assert [pyqueue.result(conn, i) for i in ids] == values
    assert [pyqueue.status(conn, i) for i in ids] == ["completed"] * len(values)
    plain = pyqueue.enqueue(conn, "a", {})
    [job] = pyqueue.claim(conn, "a")
    assert pyqueue.complete(conn, job.id, job.lease_token) is True  # no result: as before
    assert pyqueue.result(conn, plain) is None


def test_a_dead_parent_cancels_the_child_unless_it_runs_anyway(conn: Conn) -> None:
    parent = pyqueue.enqueue(conn, "a", {}, max_attempts=1)
    cancelled = pyqueue.enqueue(conn, "b", {}, depends_on=[parent])
    runs = pyqueue.enqueue(conn, "b", {}, depends_on=[parent], on_parent_failure="run")
    [job] = pyqueue.claim(conn, "a")
    job.fail("boom")
    assert pyqueue.status(conn, parent) == "dead"
    assert pyqueue.status(conn, cancelled) == "cancelled"
    assert pyqueue.status(conn, runs) == "ready"
    assert pyqueue.parent_results(conn, runs) == {parent: None}


def test_batch_callback_gets_the_counts(conn: Conn) -> None:
    members = pyqueue.enqueue_many(conn, "a", [{"i": i} for i in range(3)], max_attempts=1)
    callback = pyqueue.enqueue_callback(conn, "cb", {"album": 7}, members)
    assert pyqueue.status(conn, callback) == "waiting"
    jobs = pyqueue.claim(conn, "a", 3)
    jobs[0].complete()
    jobs[1].fail("no")
    assert pyqueue.status(conn, callback) == "waiting"
    assert pyqueue.cancel(conn, jobs[2].id) is True
    [cb] = pyqueue.claim(conn, "cb")
    assert cb.id == callback
    assert cb.payload == {"album": 7, "batch": {"completed": 1, "dead": 1, "cancelled": 1, "members": 3}}


def test_chain_and_group_join_the_callers_transaction(dsn: str, conn: Conn) -> None:
    with psycopg.connect(dsn) as tx:
        ids = pyqueue.chain(tx, [("a", {"step": 1}), pyqueue.Step("b", {"step": 2}, priority=-5), ("a", {})])
        tx.rollback()
    with pytest.raises(pyqueue.UnknownJob):
        pyqueue.status(conn, ids[0])  # rolled back: jobq never had it
    ids = pyqueue.chain(conn, [("a", {"step": 1}), pyqueue.Step("b", {"step": 2}, priority=-5), ("a", {})])
    assert [pyqueue.status(conn, i) for i in ids] == ["ready", "waiting", "waiting"]
    assert pyqueue.parent_results(conn, ids[2]) == {ids[1]: None}
    made = pyqueue.group(conn, [("a", {"g": 1}), ("b", {"g": 2}), ("a", {"g": 3})], then=("cb", {"x": 1}))
    assert isinstance(made, pyqueue.Group) and len(made.members) == 3
    assert [pyqueue.status(conn, i) for i in made.members] == ["ready"] * 3
    assert pyqueue.status(conn, made.callback) == "waiting"
    payloads = {job.id: job.payload for job in pyqueue.claim(conn, ["a", "b"], 10)}
    assert [payloads[i] for i in made.members] == [{"g": 1}, {"g": 2}, {"g": 3}]


def test_wait_returns_the_result_or_raises_how_the_job_ended(dsn: str, conn: Conn) -> None:
    job_id = pyqueue.enqueue(conn, "w", {})

    def finish_later() -> None:
        time.sleep(0.3)
        with psycopg.connect(dsn, autocommit=True) as other:
            [job] = pyqueue.claim(other, "w")
            job.complete({"answer": 42})

    thread = threading.Thread(target=finish_later)
    thread.start()
    started = time.monotonic()
    assert pyqueue.wait(conn, job_id, timeout=30) == {"answer": 42}
    assert time.monotonic() - started < 5  # woken by jobq_finished, not a long poll
    thread.join()
    with psycopg.connect(dsn) as in_tx:  # not autocommit: polls status with fresh snapshots
        assert pyqueue.wait(in_tx, job_id, 5) == {"answer": 42}
    dead = pyqueue.enqueue(conn, "w", {}, max_attempts=1)
    [job] = pyqueue.claim(conn, "w")
    job.fail("gone")
    with pytest.raises(pyqueue.JobDead) as died:
        pyqueue.wait(conn, dead, 5)
    assert died.value.job_id == dead
    cancelled = pyqueue.enqueue(conn, "w", {})
    pyqueue.cancel(conn, cancelled)
    with pytest.raises(pyqueue.JobCancelled):
        pyqueue.wait(conn, cancelled, 5)
    pending = pyqueue.enqueue(conn, "w", {})
    started = time.monotonic()
    with pytest.raises(pyqueue.WaitTimeout) as late:
        pyqueue.wait(conn, pending, timedelta(milliseconds=300))
    assert isinstance(late.value, TimeoutError) and late.value.status == "ready"
    assert 0.3 <= time.monotonic() - started < 5
    assert conn.execute("SELECT count(*) FROM pg_listening_channels()").fetchone() == (0,)  # UNLISTENed


def test_async_twins(dsn: str, conn: Conn) -> None:
    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
            ids = await aio.chain(aconn, [("a", {}), ("a", {})])
            assert await aio.status(aconn, ids[1]) == "waiting"
            [job] = await aio.claim(aconn, "a")
            assert await job.complete(result="first") is True
            assert await aio.parent_results(aconn, ids[1]) == {ids[0]: "first"}
            assert await aio.result(aconn, ids[0]) == "first"
            made = await aio.group(aconn, [("b", {})], then=("cb", {}))
            assert await aio.status(aconn, made.callback) == "waiting"
            waiter = asyncio.ensure_future(aio.wait(aconn, ids[1], 30))
            await asyncio.sleep(0.2)
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as other:
                [second] = await aio.claim(other, "a")
                assert await aio.complete(other, second.id, second.lease_token, [2]) is True
            assert await waiter == [2]
            with pytest.raises(pyqueue.WaitTimeout):
                await aio.wait(aconn, made.members[0], 0.2)
            dead = await aio.enqueue(aconn, "w", {}, max_attempts=1)
            [job] = await aio.claim(aconn, "w")
            await job.fail("x")
            with pytest.raises(pyqueue.JobDead):
                await aio.wait(aconn, dead, 5)
            await aio.cancel(aconn, made.members[0])
            with pytest.raises(pyqueue.JobCancelled):
                await aio.wait(aconn, made.members[0], 5)
            cb = await aio.enqueue_callback(aconn, "cb", {}, made.members)
            assert await aio.status(aconn, cb) == "ready"

    asyncio.run(main())


def test_the_new_errors_are_typed(conn: Conn) -> None:
    parent = pyqueue.enqueue(conn, "a", {})
    with pytest.raises(pyqueue.UnknownJob) as unknown:
        pyqueue.enqueue(conn, "b", {}, depends_on=[parent + 1000])
    assert unknown.value.sqlstate == "JQ019" and not isinstance(unknown.value, pyqueue.InvalidArgument)
    with pytest.raises(pyqueue.InvalidDependency) as duplicate:
        pyqueue.enqueue(conn, "b", {}, depends_on=[parent, parent])
    assert duplicate.value.sqlstate == "JQ018" and isinstance(duplicate.value, pyqueue.InvalidArgument)
    with pytest.raises(pyqueue.InvalidDependency) as null:
        pyqueue.enqueue_callback(conn, "cb", {}, [parent, None])  # type: ignore[list-item]
    assert null.value.diag is not None  # the server's error
    with pytest.raises(pyqueue.InvalidDependency, match=r"depends_on\[2\] must be an integer"):
        pyqueue.enqueue(conn, "b", {}, depends_on=[parent, "7"])  # type: ignore[list-item]
    with pytest.raises(pyqueue.InvalidArgument) as bad_mode:
        pyqueue.enqueue(conn, "b", {}, depends_on=[parent], on_parent_failure="ignore")
    assert bad_mode.value.sqlstate == "JQ017"
    for call in (pyqueue.result, pyqueue.status, pyqueue.parent_results):
        with pytest.raises(pyqueue.UnknownJob):
            call(conn, parent + 1000)
    [job] = pyqueue.claim(conn, "a")
    with pytest.raises(pyqueue.InvalidArgument, match="result cannot be sent as JSON"):
        job.complete(result={"when": time})
    pyqueue.configure_queue(conn, "a", max_payload_bytes=100)
    with pytest.raises(pyqueue.PayloadTooLarge):
        job.complete(result="x" * 5000 + "".join(str(i) for i in range(2000)))
    assert pyqueue.status(conn, job.id) == "running"  # refused: nothing changed


def test_result_retention_is_a_queue_setting(conn: Conn) -> None:
    settings = pyqueue.configure_queue(conn, "a", result_retention=timedelta(hours=2))
    assert settings["result_retention"] == timedelta(hours=2)
    assert pyqueue.configure_queue(conn, "a", result_retention=60)["result_retention"] == timedelta(minutes=1)
    with pytest.raises(pyqueue.InvalidSetting):
        pyqueue.configure_queue(conn, "a", result_retention=timedelta(days=4000))
