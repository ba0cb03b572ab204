"""What the workers do besides jobs: they run the due periodic schedules
(unless told not to) and prune the archive as they reap, where pg_cron does
not; against an older jobq without these functions or rights they work
quietly."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterator

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from pytest_postgresql.executors import PostgreSQLExecutor

import pyqueue
from pyqueue import aio, schema
from tests.conftest import proc_dsn
from tests.worker_support import InThread, scalar, wait_until

Conn = psycopg.Connection[tuple[object, ...]]

TIMEOUT = 60.0  # seconds: generous bound for anything to happen


def due_schedule(conn: Conn) -> None:
    assert pyqueue.every(conn, "tick", "* * * * *", "ticks", runner="workers") is None
    conn.execute("UPDATE jobq._periodic SET next_run_at = now() - interval '1 second' WHERE name = 'tick'")


def ticks(conn: Conn) -> int:
    return int(scalar(conn, "SELECT count(*) FROM jobq.jobs WHERE queue = 'ticks'"))


def test_listen_runs_the_due_schedules_unless_told_not_to(conn: Conn, dsn: str) -> None:
    due_schedule(conn)
    pyqueue.enqueue(conn, "nb", {})
    with pyqueue.listen(dsn, "nb", handle_signals=False, run_schedules=False) as jobs:
        next(jobs).complete()
    assert ticks(conn) == 0
    pyqueue.enqueue(conn, "nb", {})
    with pyqueue.listen(dsn, "nb", handle_signals=False) as jobs:
        next(jobs).complete()  # the schedules ran before the first claim
    assert ticks(conn) == 1


def test_async_listen_runs_the_due_schedules(conn: Conn, dsn: str) -> None:
    due_schedule(conn)
    pyqueue.enqueue(conn, "nb", {})

    async def main() -> None:
        async with aio.listen(dsn, "nb", handle_signals=False) as jobs:
            async for job in jobs:
                await job.complete()
                break

    asyncio.run(main())
    assert ticks(conn) == 1


@pytest.fixture
def old_jobq_dsn(postgresql_proc: PostgreSQLExecutor) -> Iterator[str]:
    """A database with jobq 0.3.0, which has no jobq.run_schedules()."""
    name = f"jobq_old_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(proc_dsn(postgresql_proc, "postgres"), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    dsn = proc_dsn(postgresql_proc, name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        schema.install(conn, "0.3.0")
    yield dsn
    with psycopg.connect(proc_dsn(postgresql_proc, "postgres"), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def test_an_older_jobq_without_run_schedules_is_worked_quietly(
    old_jobq_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="pyqueue")
    with psycopg.connect(old_jobq_dsn, autocommit=True) as conn:
        job_id = pyqueue.enqueue(conn, "nb", {})
    with pyqueue.listen(old_jobq_dsn, "nb", handle_signals=False) as jobs:
        job = next(jobs)
        assert job.id == job_id and job.timeout is None
        with job:
            pass
    assert caplog.records == []



# --- pruning -----------------------------------------------------------------------

@pytest.fixture
def prune_soon(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers prune every 0.3 s instead of every 5 minutes."""
    monkeypatch.setattr("pyqueue.worker.maintenance.PRUNE_INTERVAL", 0.3)


def dead_past_retention(conn: Conn, queue: str) -> int:
    """A dead job whose dead_retention has passed: only jobq.prune() removes it."""
    conn.execute("SELECT jobq.configure_queue(%s, dead_retention => '1 second')", (queue,))
    job_id = pyqueue.enqueue(conn, queue, {}, max_attempts=1)
    conn.execute("SELECT jobq.fail(c.id, 'boom', c.lease_token) FROM jobq.claim(%s) AS c", (queue,))
    conn.execute("UPDATE jobq._job_archive SET prune_after = now() - interval '2 days' WHERE id = %s",
                 (job_id,))
    return job_id


def archived(conn: Conn, job_id: int) -> bool:
    return bool(scalar(conn, "SELECT count(*) FROM jobq._job_archive WHERE id = %s", (job_id,)))


def test_a_worker_prunes_the_archive_as_it_reaps(conn: Conn, dsn: str, prune_soon: None) -> None:
    job_id = dead_past_retention(conn, "pr")
    worker = pyqueue.Worker(dsn, reap_interval=0.2)
    worker.register("pr", lambda job: None)
    running = InThread(lambda: worker.run(handle_signals=False))
    try:
        wait_until(lambda: not archived(conn, job_id), "the worker to prune the dead job")
    finally:
        worker.stop()
        running.join()


def test_an_async_worker_prunes_too_and_reap_interval_none_turns_it_off(
    conn: Conn, dsn: str, prune_soon: None
) -> None:
    kept = dead_past_retention(conn, "pk")

    async def run(reap_interval: float | None, until: Callable[[], bool]) -> None:
        worker = aio.AsyncWorker(dsn, reap_interval=reap_interval)

        async def handle(job: aio.AsyncJob) -> None:
            pass

        worker.register("pk", handle)
        task = asyncio.create_task(worker.run(handle_signals=False))
        deadline = time.monotonic() + TIMEOUT
        while not until() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        worker.stop()
        await task

    started = time.monotonic()
    asyncio.run(run(None, lambda: time.monotonic() - started > 1.5))
    assert archived(conn, kept), "no reaping, no pruning"
    asyncio.run(run(0.2, lambda: not archived(conn, kept)))
    assert not archived(conn, kept)


def test_an_older_jobq_where_workers_may_not_prune_is_worked_quietly(
    old_jobq_dsn: str, prune_soon: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="pyqueue")
    role = f"w_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(old_jobq_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN IN ROLE jobq_worker")
    try:
        worker_dsn = make_conninfo(old_jobq_dsn, user=role)
        worker = pyqueue.Worker(worker_dsn, reap_interval=0.2)
        worker.register("nb", lambda job: None)
        running = InThread(lambda: worker.run(handle_signals=False))
        time.sleep(1.5)  # several prune intervals: each would be refused (0.3.0 lets only jobq_admin prune)
        worker.stop()
        running.join()
        assert caplog.records == []
    finally:
        with psycopg.connect(old_jobq_dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))
            conn.execute(f"DROP ROLE {role}")
