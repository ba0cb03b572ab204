"""Job metadata from Python (jobq 0.12.0, issue 27): ``enqueue(…, meta=)``,
``enqueue_many(…, metas=)`` and ``enqueue_callback(…, meta=)`` keep a JSON
object beside the payload; ``Job.meta`` hands it to the handler (sync and
asyncio), ``cancel_jobs(…, meta_contains=)`` and the dashboard's queue page
filter by it; bad meta is a typed error and adds nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pyqueue
from pyqueue import aio
from tests.dashboard_http_support import dashboard

Conn = psycopg.Connection[tuple[Any, ...]]


def count(conn: Conn, queue: str) -> int:
    row = conn.execute("SELECT count(*) FROM jobq.jobs WHERE queue = %s", (queue,)).fetchone()
    assert row is not None
    return int(row[0])


def test_meta_goes_beside_the_payload_and_comes_back_with_the_claim(conn: Conn) -> None:
    tagged = pyqueue.enqueue(conn, "meta", {"n": 1}, meta={"tenant": "acme", "tags": ["a", "b"]})
    keyed = pyqueue.enqueue(conn, "meta", {"n": 2}, key="k", meta={"tenant": "beta"})
    bare = pyqueue.enqueue(conn, "meta", {"n": 3})
    many = pyqueue.enqueue_many(conn, "meta", [{"n": 4}, {"n": 5}], metas=[{"i": 4}, {}])
    callback = pyqueue.enqueue_callback(conn, "meta-cb", {}, [bare], meta={"cb": True})
    jobs = {job.id: job for job in pyqueue.claim(conn, "meta", 10)}
    assert jobs[tagged].meta == {"tenant": "acme", "tags": ["a", "b"]}
    assert jobs[tagged].payload == {"n": 1}, "the payload is as given, without the meta"
    assert jobs[keyed].meta == {"tenant": "beta"}
    assert jobs[bare].meta is None
    assert [jobs[i].meta for i in many] == [{"i": 4}, {}]
    row = conn.execute("SELECT meta FROM jobq.jobs WHERE id = %s", (callback,)).fetchone()
    assert row == ({"cb": True},)


def test_cancel_jobs_by_meta(conn: Conn) -> None:
    x = pyqueue.enqueue(conn, "meta-c", {}, meta={"tenant": "x", "more": 1})
    y = pyqueue.enqueue(conn, "meta-c", {}, meta={"tenant": "y"})
    z = pyqueue.enqueue(conn, "meta-c", {})
    assert pyqueue.cancel_jobs(conn, "meta-c", meta_contains={"tenant": "x"}) == 1
    live = [r[0] for r in conn.execute("SELECT id FROM jobq._job WHERE queue = 'meta-c' ORDER BY id")]
    assert live == [y, z] and x not in live
    with pytest.raises(pyqueue.InvalidArgument, match="meta_contains"):
        pyqueue.cancel_jobs(conn, "meta-c", meta_contains=[1])  # type: ignore[arg-type]


def test_bad_meta_is_a_typed_error_naming_it_and_adds_nothing(conn: Conn) -> None:
    conn.execute("SELECT jobq.configure_queue('meta-b', max_payload_bytes => 100)")
    with pytest.raises(pyqueue.InvalidPayload, match="meta must be a JSON object, got array"):
        pyqueue.enqueue(conn, "meta-b", {}, meta=[1, 2])  # type: ignore[arg-type]
    with pytest.raises(pyqueue.PayloadTooLarge, match=r"meta is .* bytes"):
        pyqueue.enqueue(conn, "meta-b", {}, meta={"x": "y" * 200})
    with pytest.raises(pyqueue.InvalidPayload, match=r"metas\[2\]"):
        pyqueue.enqueue_many(conn, "meta-b", [{}, {}], metas=[{}, None])  # type: ignore[list-item]
    with pytest.raises(pyqueue.InvalidPayload, match="metas has 1 elements but payloads has 2"):
        pyqueue.enqueue_many(conn, "meta-b", [{}, {}], metas=[{}])
    with pytest.raises(pyqueue.InvalidPayload, match="meta cannot be sent as JSON"):
        pyqueue.enqueue(conn, "meta-b", {}, meta={"x": float("nan")})
    assert count(conn, "meta-b") == 0


def test_a_handler_reads_job_meta_in_both_workers(conn: Conn, dsn: str) -> None:
    pyqueue.enqueue(conn, "meta-w", {"n": 1}, meta={"tenant": "sync"})
    pyqueue.enqueue(conn, "meta-aw", {"n": 1}, meta={"tenant": "async"})
    seen: list[Any] = []
    worker = pyqueue.Worker(dsn, poll_interval=0.1)

    @worker.handler("meta-w")
    def handle(job: pyqueue.Job) -> None:
        seen.append(job.meta)
        worker.stop()

    worker.run()

    async def main() -> None:
        async_worker = aio.AsyncWorker(dsn, poll_interval=0.1)

        @async_worker.handler("meta-aw")
        async def handle_async(job: aio.AsyncJob) -> None:
            seen.append(job.meta)
            async_worker.stop()

        await async_worker.run()

    asyncio.run(main())
    assert seen == [{"tenant": "sync"}, {"tenant": "async"}]


def test_the_dashboard_shows_meta_and_filters_by_it(conn: Conn, dsn: str, tmp_path: Path) -> None:
    acme = pyqueue.enqueue(conn, "meta-d", {"n": 1}, meta={"tenant": "acme"})
    beta = pyqueue.enqueue(conn, "meta-d", {"n": 2}, meta={"tenant": "beta"})
    with dashboard(dsn, tmp_path) as served:
        client = served.client()
        assert client.get("/queues/meta-d").job_ids() == [beta, acme]
        assert client.get("/queues/meta-d?meta=%7B%22tenant%22%3A%22acme%22%7D").job_ids() == [acme]
        assert client.get("/queues/meta-d?meta=%5B1%5D").status == 400
        assert client.get("/queues/meta-d?meta=nope").status == 400
        page = client.get(f"/jobs/{acme}")
        assert page.status == 200 and 'id="meta"' in page.body and "acme" in page.body
