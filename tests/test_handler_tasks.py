"""The AsyncWorker's handler tasks (issue 24): a fixed set of tasks runs the
jobs handed over, each handler inside the task that took it, and the
supervisor cancels that task at the job's timeout (JobTimeout) or after
the shutdown grace ("shutdown timeout"), tells its own cancellations from
anyone else's, and leaves the task able to run the next job. The worker
itself is tested end to end in tests/test_job_timeouts.py
and tests/test_worker_grace.py (the grace, with real signals)."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from pyqueue.job import AsyncJob, JobRecord
from pyqueue.worker.acknowledgement import Acks
from pyqueue.worker.handler_tasks import HandlerTasks, InTaskSupervisor
from pyqueue.worker.heartbeats import HeartbeatBook

NOW = datetime.now(timezone.utc)
Handler = Callable[[AsyncJob], Awaitable[object]]


async def nothing() -> None:
    pass


class Batch(Acks[Awaitable[None]]):
    """A worker's acks (the real ones, never sent), and what they were told:
    the completions and failures queued."""

    def __init__(self) -> None:
        super().__init__(HeartbeatBook(), nothing)
        self.completed: list[int] = []
        self.failed: dict[int, str] = {}

    def complete_later(self, job: JobRecord) -> bool:
        queued = super().complete_later(job)
        if queued:
            self.completed.append(job.id)
        return queued

    def fail_later(self, job: JobRecord, error: str) -> bool:
        queued = super().fail_later(job, error)
        if queued:
            self.failed[job.id] = error
        return queued


def job(job_id: int, batch: Batch, timeout: float | None = None) -> AsyncJob:
    made = AsyncJob(id=job_id, queue="q", payload={}, priority=0, attempts=1, max_attempts=3, run_at=NOW,
                    created_at=NOW, lease_token=uuid.uuid4(), lease_expires_at=NOW, worker="w", job_key=None,
                    last_error=None, timeout=None if timeout is None else timedelta(seconds=timeout))
    made._acks = batch
    return made


def run(jobs: list[AsyncJob], handler: Handler, batch: Batch, *, tasks: int = 1, grace: float | None = None,
        stop_after: float | None = None) -> InTaskSupervisor:
    """Hand ``jobs`` to ``tasks`` handler tasks; stop after ``stop_after`` seconds (if given)."""
    supervisor = InTaskSupervisor(batch, grace)

    async def main() -> None:
        runners: HandlerTasks[AsyncJob] = HandlerTasks(tasks, lambda j: supervisor.run(j, handler), "test")
        runners.put_many(jobs)
        if stop_after is not None:
            await asyncio.sleep(stop_after)
            supervisor.stopping()
        await asyncio.wait_for(runners.close(), 10)
        supervisor.close()

    asyncio.run(main())
    return supervisor


def test_the_jobs_run_in_order_and_complete_with_their_results() -> None:
    batch = Batch()
    seen: list[int] = []

    async def handler(j: AsyncJob) -> object:
        seen.append(j.id)
        await asyncio.sleep(0)
        return {"id": j.id}

    jobs = [job(n, batch) for n in range(1, 6)]
    run(jobs, handler, batch)
    assert seen == batch.completed == [1, 2, 3, 4, 5]
    assert [j._result.obj if j._result is not None else None for j in jobs] == [
        f'{{"id":{n}}}' for n in range(1, 6)]


def test_a_handler_past_its_timeout_is_cancelled_and_its_task_runs_the_next_job() -> None:
    batch = Batch()
    told: list[bool] = []

    async def handler(j: AsyncJob) -> None:
        if j.id == 1:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                told.append(j.timed_out)  # marked before the cancel arrives
                raise

    jobs = [job(1, batch, timeout=0.1), job(2, batch, timeout=0.1)]
    run(jobs, handler, batch)
    assert told == [True]
    assert "JobTimeout: job ran longer than 0:00:00.100000" in batch.failed[1]
    assert batch.completed == [2]
    assert not jobs[1].timed_out


def test_a_handler_that_swallows_the_cancel_still_fails_its_job() -> None:
    batch = Batch()

    async def handler(j: AsyncJob) -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            return "finished anyway"
        return "never"

    jobs = [job(1, batch, timeout=0.1)]
    run(jobs, handler, batch)
    assert "JobTimeout" in batch.failed[1] and batch.completed == []
    assert jobs[0]._result is None  # its late value is discarded


def test_the_shutdown_grace_fails_the_running_handlers_and_the_rest_still_run() -> None:
    batch = Batch()

    async def handler(j: AsyncJob) -> None:
        if j.id == 1:
            await asyncio.sleep(30)

    run([job(1, batch), job(2, batch)], handler, batch, grace=0.2, stop_after=0.05)
    assert batch.failed[1].startswith("shutdown timeout: the job was still running 0.2 s")
    assert batch.completed == [2]  # the worker releases unstarted jobs itself; here the task goes on


def test_without_a_grace_a_stop_cancels_nothing() -> None:
    batch = Batch()

    async def handler(j: AsyncJob) -> None:
        await asyncio.sleep(0.3)

    run([job(1, batch)], handler, batch, grace=None, stop_after=0.05)
    assert batch.completed == [1] and batch.failed == {}


def test_a_cancellation_the_supervisor_did_not_make_propagates() -> None:
    batch = Batch()
    started = asyncio.Event()
    outcome: dict[str, Any] = {}

    async def handler(j: AsyncJob) -> None:
        started.set()
        await asyncio.sleep(30)

    async def main() -> None:
        supervisor = InTaskSupervisor(batch, None)
        task = asyncio.create_task(supervisor.run(job(1, batch, timeout=30), handler))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        outcome["cancelled"] = task.cancelled()

    asyncio.run(main())
    assert outcome == {"cancelled": True}
    assert "CancelledError" in batch.failed[1]  # `async with job` fails it on the way out, as ever


def test_awaiting_handlers_spread_over_every_task_at_once() -> None:
    # Each item waits until all `size` items run: only every task taking
    # one (the woken one waking the next) lets them all finish.
    size = 6
    started: list[int] = []

    async def main() -> None:
        everyone = asyncio.Event()

        async def item(k: int) -> None:
            started.append(k)
            if len(started) == size:
                everyone.set()
            await asyncio.wait_for(everyone.wait(), 10)

        runners: HandlerTasks[int] = HandlerTasks(size, item, "test")
        await asyncio.sleep(0.01)  # every task idle
        runners.put_many(range(size))  # one handoff: every task must be woken for it
        try:
            await asyncio.wait_for(everyone.wait(), 10)  # before close(), which wakes every task
        finally:
            await asyncio.wait_for(runners.close(), 10)

    asyncio.run(main())
    assert sorted(started) == list(range(size))


def test_handlers_that_never_await_are_run_by_one_task_and_handoffs_of_any_size_all_run() -> None:
    rng = random.Random(24)
    ran: list[tuple[int, str]] = []

    async def main() -> None:
        async def item(k: int) -> None:
            task = asyncio.current_task()
            ran.append((k, task.get_name() if task is not None else ""))
            if k % 7 == 0:
                await asyncio.sleep(0.001)  # some do await: the next task takes over meanwhile

        runners: HandlerTasks[int] = HandlerTasks(4, item, "test")
        quick: HandlerTasks[int] = HandlerTasks(4, lambda k: _append(ran_quick, k), "quick")
        await asyncio.sleep(0.01)
        quick.put_many(range(100))
        await asyncio.sleep(0.01)
        handed = 0
        for _ in range(200):
            n = rng.randint(1, 30)
            runners.put_many(range(handed, handed + n))
            handed += n
            if rng.random() < 0.3:
                for _ in range(1000):
                    if len(ran) == handed:
                        break
                    await asyncio.sleep(0.001)
                assert len(ran) == handed, "a handoff was left waiting while the tasks were idle"
        await asyncio.wait_for(runners.close(), 10)
        await asyncio.wait_for(quick.close(), 10)
        assert sorted(k for k, _ in ran) == list(range(handed))

    ran_quick: list[tuple[int, str]] = []
    asyncio.run(main())
    assert sorted(k for k, _ in ran_quick) == list(range(100))
    assert len({name for _, name in ran_quick}) == 1, "items that never await were spread over several tasks"


async def _append(ran: list[tuple[int, str]], k: int) -> None:
    task = asyncio.current_task()
    ran.append((k, task.get_name() if task is not None else ""))
