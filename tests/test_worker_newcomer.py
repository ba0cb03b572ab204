"""What a newcomer hits first with the workers (issue 12): leaving a listen()
loop early, settings checked late, authentication errors retried for ever,
and execution timeouts (jobq 0.4). Each sync test has its asyncio twin."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from functools import partial
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from pytest_postgresql.executors import PostgreSQLExecutor

import pyqueue
from pyqueue import aio, schema
from tests.conftest import proc_dsn
from tests.worker_support import InThread, keep_history, scalar, wait_until

Conn = psycopg.Connection[tuple[object, ...]]

LONG_LEASE = timedelta(minutes=10)  # only a release or an acknowledgement explains a job not running
TIMEOUT = 60.0  # seconds: generous bound for anything to happen


@pytest.fixture(autouse=True)
def history(conn: Conn) -> None:
    keep_history(conn, ["nb", "to"])
    # A failed attempt of queue "to" waits an hour: no retry muddles the tests.
    conn.execute("SELECT jobq.configure_queue('to', backoff_base => '1 hour', backoff_cap => '2 hours')")


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


# --- 1. leaving a listen() loop -------------------------------------------------

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


# --- 5. settings checked in the constructor ------------------------------------

BAD_SETTINGS: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"lease": timedelta(0)}, ValueError, "lease"),
    ({"lease": timedelta(seconds=-5)}, ValueError, "lease"),
    ({"lease": -1}, ValueError, "lease"),
    ({"lease": timedelta(days=2)}, ValueError, "lease"),
    ({"lease": True}, TypeError, "lease"),
    ({"lease": "30"}, TypeError, "lease"),
    ({"reap_interval": -1}, ValueError, "reap_interval"),
    ({"reap_interval": 0}, ValueError, "reap_interval"),
    ({"reap_interval": float("nan")}, ValueError, "reap_interval"),
    ({"poll_interval": 0}, ValueError, "poll_interval"),
    ({"poll_interval": float("inf")}, ValueError, "poll_interval"),
    ({"poll_interval": False}, TypeError, "poll_interval"),
    ({"batch_size": 0}, ValueError, "batch_size"),
    ({"batch_size": 1001}, ValueError, "batch_size"),
    ({"batch_size": 2.0}, TypeError, "batch_size"),
    ({"batch_size": True}, TypeError, "batch_size"),
    ({"shutdown_timeout": -1}, ValueError, "shutdown_timeout"),
    ({"shutdown_timeout": "30"}, TypeError, "shutdown_timeout"),
    ({"use_listen": "no"}, TypeError, "use_listen"),
    ({"run_schedules": 1}, TypeError, "run_schedules"),
]
WORKER_ONLY: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"concurrency": 0}, ValueError, "concurrency"),
    ({"concurrency": "4"}, TypeError, "concurrency"),
    ({"concurrency": True}, TypeError, "concurrency"),
    ({"name": 42}, TypeError, "name"),
    ({"name": "x" * 201}, ValueError, "name"),
]
LISTEN_ONLY: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"worker_name": 42}, TypeError, "worker_name"),
    ({"handle_signals": None}, TypeError, "handle_signals"),
]


@pytest.mark.parametrize(("options", "error", "name"), BAD_SETTINGS + WORKER_ONLY)
def test_worker_settings_are_checked_in_the_constructor(
    dsn: str, options: dict[str, Any], error: type[Exception], name: str
) -> None:
    with pytest.raises(error, match=name):
        pyqueue.Worker(dsn, **options)
    with pytest.raises(error, match=name):
        aio.AsyncWorker(dsn, **options)


@pytest.mark.parametrize(("options", "error", "name"), BAD_SETTINGS + LISTEN_ONLY)
def test_listen_settings_are_checked_at_once(
    dsn: str, options: dict[str, Any], error: type[Exception], name: str
) -> None:
    with pytest.raises(error, match=name):
        pyqueue.listen(dsn, "q", **options)
    with pytest.raises(error, match=name):
        pyqueue.listen(dsn, "q", lambda job: None, **options)
    with pytest.raises(error, match=name):
        aio.listen(dsn, "q", **options)


def test_listen_checks_its_other_arguments(dsn: str) -> None:
    with pytest.raises(TypeError, match="queues"):
        pyqueue.listen(dsn, 42)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="stop"):
        pyqueue.listen(dsn, "q", stop=asyncio.Event())  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="stop"):
        aio.listen(dsn, "q", stop=threading.Event())  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="handler"):
        pyqueue.listen(dsn, "q", "not callable")  # type: ignore[call-overload]


def test_a_lease_in_seconds_is_a_lease(conn: Conn, dsn: str) -> None:
    """Worker(lease=3) used to die at the first claim ("cannot cast type smallint
    to interval"): a number is a number of seconds, as for every duration."""
    pyqueue.enqueue(conn, "nb", {})
    with pyqueue.listen(dsn, "nb", lease=3, handle_signals=False) as jobs:
        job = next(jobs)
        assert job.lease_seconds == pytest.approx(3.0, abs=1.0)
        job.complete()
    worker = pyqueue.Worker(dsn, lease=3, poll_interval=0.2)
    assert worker.lease == timedelta(seconds=3)
    seen: list[float | None] = []

    @worker.handler("nb")
    def handle(job: pyqueue.Job) -> None:
        seen.append(job.lease_seconds)
        worker.stop()

    pyqueue.enqueue(conn, "nb", {})
    worker.run(handle_signals=False)
    assert seen and seen[0] == pytest.approx(3.0, abs=1.0)


# --- 4. authentication and authorisation errors ----------------------------------

def other_role(dsn: str, user: str) -> str:
    params = conninfo_to_dict(dsn)
    params["user"] = user
    return make_conninfo(**{k: str(v) for k, v in params.items() if v is not None})


@pytest.fixture
def refused_dsns(conn: Conn, dsn: str) -> Iterator[dict[str, str]]:
    """DSNs the server really refuses, and a role without jobq's grants:
    a role that does not exist (28000), one that may not log in (28000),
    one without CONNECT on this database (42501), one without jobq grants
    (42501 at the first claim). The test servers trust local connections,
    so a wrong password alone would be let in."""
    tag = uuid.uuid4().hex[:8]
    nologin, noconnect, nogrant = f"nologin_{tag}", f"noconnect_{tag}", f"nogrant_{tag}"
    dbname = str(conninfo_to_dict(dsn)["dbname"])
    conn.execute(f"CREATE ROLE {nologin} NOLOGIN")
    conn.execute(f"CREATE ROLE {noconnect} LOGIN")
    conn.execute(f"CREATE ROLE {nogrant} LOGIN")
    conn.execute(f'REVOKE CONNECT ON DATABASE "{dbname}" FROM PUBLIC')
    conn.execute(f'GRANT CONNECT ON DATABASE "{dbname}" TO {nogrant}')
    yield {
        "unknown role": other_role(dsn, f"nobody_{tag}"),
        "no login": other_role(dsn, nologin),
        "no connect": other_role(dsn, noconnect),
        "no jobq grant": other_role(dsn, nogrant),
    }
    conn.execute(f'GRANT CONNECT ON DATABASE "{dbname}" TO PUBLIC')
    for role in (nologin, noconnect, nogrant):
        conn.execute(f'REVOKE ALL ON DATABASE "{dbname}" FROM {role}')
        conn.execute(f"DROP ROLE {role}")


def raised_by(run: Callable[[], object]) -> BaseException:
    """What ``run`` raised, in a thread that must end by itself (no stop is ever given)."""
    worker = InThread(run)
    worker.thread.join(TIMEOUT)
    assert not worker.thread.is_alive(), "still retrying: an authentication error taken for a lost connection"
    assert worker.error is not None, "returned instead of raising"
    return worker.error


WHY = {"unknown role": "does not exist", "no login": "not permitted to log in",
       "no connect": "permission denied for database", "no jobq grant": "permission denied"}


def test_authentication_errors_raise_from_the_sync_workers(
    refused_dsns: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="pyqueue.worker")
    def worker_run(refused: str) -> None:
        worker = pyqueue.Worker(refused, poll_interval=0.5)
        worker.register("q", lambda job: None)
        worker.run(handle_signals=False)

    def handler_listen(refused: str) -> None:
        pyqueue.listen(refused, "q", lambda job: None, handle_signals=False)

    def iterator_listen(refused: str) -> None:
        next(iter(pyqueue.listen(refused, "q", handle_signals=False)))

    for case, refused in refused_dsns.items():
        for what, run in {"Worker.run": worker_run, "listen(handler)": handler_listen,
                          "listen()": iterator_listen}.items():
            error = raised_by(partial(run, refused))
            assert isinstance(error, psycopg.Error), f"{case}, {what}: {error!r}"
            assert WHY[case] in str(error), f"{case}, {what}: {error}"
    assert "database connection lost" not in caplog.text


def test_authentication_errors_raise_from_the_async_workers(
    refused_dsns: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="pyqueue.worker")

    async def worker_run(refused: str) -> None:
        worker = aio.AsyncWorker(refused, poll_interval=0.5)

        async def handle(job: aio.AsyncJob) -> None: ...

        worker.register("q", handle)
        await worker.run(handle_signals=False)

    async def handler_listen(refused: str) -> None:
        async def handle(job: aio.AsyncJob) -> None: ...

        await aio.listen(refused, "q", handle, handle_signals=False)

    async def iterator_listen(refused: str) -> None:
        async with aio.listen(refused, "q", handle_signals=False) as jobs:
            async for _ in jobs:
                pass

    for case, refused in refused_dsns.items():
        for run in (worker_run, handler_listen, iterator_listen):
            error = raised_by(partial(asyncio.run, run(refused)))
            assert isinstance(error, psycopg.Error), f"{case}, {run.__name__}: {error!r}"
            assert WHY[case] in str(error), f"{case}, {run.__name__}: {error}"
    assert "database connection lost" not in caplog.text


# --- 6. execution timeouts (jobq 0.4) -------------------------------------------

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


# --- 7. periodic jobs run by the workers (jobq 0.4) -------------------------------

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


# --- 8. workers prune where pg_cron does not (jobq 0.4) ----------------------------

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
