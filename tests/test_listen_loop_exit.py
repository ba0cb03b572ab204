"""Leaving a listen() loop early, sync and async: the job in hand is
acknowledged as its ``with`` block ends, and a break, an exception or a
return out of the loop releases the jobs the iterator still held, without
spending an attempt."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import pyqueue
from pyqueue import aio
from tests.worker_support import keep_history

Conn = psycopg.Connection[tuple[object, ...]]

LONG_LEASE = timedelta(minutes=10)  # only a release or an acknowledgement explains a job not running
TIMEOUT = 60.0  # seconds: generous bound for anything to happen


@pytest.fixture(autouse=True)
def history(conn: Conn) -> None:
    keep_history(conn, ["nb"])


@pytest.fixture
def no_gc() -> Iterator[None]:
    """The cycle collector off: what happens must not depend on it."""
    gc.collect()
    gc.disable()
    yield
    gc.enable()


def states(conn: Conn, ids: list[int]) -> dict[int, tuple[Any, ...]]:
    rows = conn.execute("SELECT id, status, attempts FROM jobq.jobs WHERE id = ANY(%s)", (ids,)).fetchall()
    return {int(str(r[0])): (r[1], r[2]) for r in rows}



def test_leaving_with_job_acknowledges_it_at_once_and_break_releases_the_rest(
    conn: Conn, dsn: str, no_gc: None
) -> None:
    ids = pyqueue.enqueue_many(conn, "nb", [{"n": n} for n in range(4)])
    for job in pyqueue.listen(dsn, "nb", batch_size=10, lease=LONG_LEASE, handle_signals=False):
        with job:
            pass
        # Acknowledged as the block ended, before the loop asks for more.
        assert states(conn, [job.id])[job.id] == ("completed", 1)
        break
    # The loop dropped the iterator: the jobs it held are back, no attempt spent.
    assert states(conn, ids) == {ids[0]: ("completed", 1), **{i: ("ready", 0) for i in ids[1:]}}


def test_an_exception_or_a_return_out_of_the_loop_releases_the_held_jobs(
    conn: Conn, dsn: str, no_gc: None
) -> None:
    ids = pyqueue.enqueue_many(conn, "nb", [{"n": n} for n in range(6)])

    def first_then_raise() -> None:
        for job in pyqueue.listen(dsn, "nb", batch_size=3, lease=LONG_LEASE, handle_signals=False):
            with job:
                pass
            raise RuntimeError("the caller's own error")

    def first_then_return() -> int:
        for job in pyqueue.listen(dsn, "nb", batch_size=3, lease=LONG_LEASE, handle_signals=False):
            job.fail("explicit")
            return job.id
        raise AssertionError("no job")

    with pytest.raises(RuntimeError, match="the caller's own error"):
        first_then_raise()
    failed = first_then_return()
    got = states(conn, ids)
    assert got.pop(ids[0]) == ("completed", 1)
    assert got.pop(failed) == ("scheduled", 1)  # a failure backs off
    assert set(got.values()) == {("ready", 0)}


def test_a_job_finished_without_with_is_completed_before_the_next_is_handed_out(
    conn: Conn, dsn: str
) -> None:
    ids = pyqueue.enqueue_many(conn, "nb", [{"n": n} for n in range(3)])
    with pyqueue.listen(dsn, "nb", batch_size=10, lease=LONG_LEASE, handle_signals=False) as jobs:
        seen = []
        for job in jobs:
            seen.append(job.id)
            if len(seen) == 2:
                assert states(conn, [ids[0]])[ids[0]] == ("completed", 1)
                break
    assert states(conn, ids) == {ids[0]: ("completed", 1), ids[1]: ("ready", 0), ids[2]: ("ready", 0)}


def test_async_leaving_async_with_job_acknowledges_it_at_once_and_break_releases_the_rest(
    conn: Conn, dsn: str, no_gc: None
) -> None:
    ids = pyqueue.enqueue_many(conn, "nb", [{"n": n} for n in range(4)])

    async def main() -> None:
        async for job in aio.listen(dsn, "nb", batch_size=10, lease=LONG_LEASE, handle_signals=False):
            async with job:
                pass
            assert states(conn, [job.id])[job.id] == ("completed", 1)
            break
        # The async generator is closed on the loop's next turns (asyncio's
        # finaliser hook), not by the garbage collector: it is switched off.
        deadline = time.monotonic() + TIMEOUT
        while states(conn, ids[1:]) != {i: ("ready", 0) for i in ids[1:]}:
            assert time.monotonic() < deadline, "the held jobs were not released"
            await asyncio.sleep(0.05)

    asyncio.run(main())
    assert states(conn, ids)[ids[0]] == ("completed", 1)


def test_async_an_exception_out_of_the_loop_releases_the_held_jobs(conn: Conn, dsn: str) -> None:
    ids = pyqueue.enqueue_many(conn, "nb", [{"n": n} for n in range(3)])

    async def main() -> None:
        with pytest.raises(RuntimeError):
            async with aio.listen(dsn, "nb", batch_size=10, lease=LONG_LEASE, handle_signals=False) as jobs:
                async for job in jobs:
                    async with job:
                        pass
                    assert states(conn, [job.id])[job.id] == ("completed", 1)  # at once
                    raise RuntimeError("the caller's own error")
        assert states(conn, ids) == {ids[0]: ("completed", 1), ids[1]: ("ready", 0), ids[2]: ("ready", 0)}

    asyncio.run(main())
