"""The handler tasks of an AsyncWorker: a fixed set of tasks taking work from
one queue, the asyncio twin of ``handler_threads``. Cheaper per job than a
task per job (no task, no semaphore wait, no done-callbacks made per job):
a worker hands over a whole claimed batch at once, and each job's handler
runs inside the task that took it.

:class:`InTaskSupervisor` is what makes that possible: it cancels the task
running a handler (not a task made for it) when the job's execution timeout
passes, or ``grace`` seconds after the worker stopped, and tells its own
cancellations from anyone else's.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from functools import partial
from typing import Any, Generic, TypeVar

from pyqueue.errors import JobTimeout
from pyqueue.job import STATE_LOCK, AsyncJob, Event, log_failed, move
from pyqueue.worker.timeouts import AsyncAcks, shutdown_error

logger = logging.getLogger("pyqueue.worker")

T = TypeVar("T")
TIMED_OUT = "timed out"  # why the supervisor cancelled a task
SHUT_DOWN = "shut down"
CANCELLED = "cancelled"  # jobq.cancel() of the job (or its lease found lost): no ack at all


class HandlerTasks(Generic[T]):
    """``size`` tasks, each running ``run(item)`` for the items handed to
    :meth:`put_many`, one item after the other, in order.

    The items wait in a deque that a task takes from without awaiting
    anything while it holds items (no asyncio.Queue future per item); a
    handoff wakes at most one idle task per item."""

    def __init__(self, size: int, run: Callable[[T], Awaitable[None]], name: str) -> None:
        self._items: deque[T] = deque()
        self._idle: deque[asyncio.Future[None]] = deque()  # the tasks waiting for items
        self._closing = False
        self._run = run
        self._tasks = [asyncio.create_task(self._work(), name=f"{name}-{k}") for k in range(size)]

    def put_many(self, items: Iterable[T]) -> None:
        before = len(self._items)
        self._items.extend(items)
        self._wake(len(self._items) - before)

    def _wake(self, count: int) -> None:
        idle = self._idle
        while count > 0 and idle:
            waiter = idle.popleft()
            if not waiter.done():
                waiter.set_result(None)
                count -= 1

    async def _work(self) -> None:
        items = self._items
        run = self._run
        loop = asyncio.get_running_loop()
        while True:
            if items:
                try:
                    await run(items.popleft())
                except Exception:
                    logger.exception("a handler task's work raised")
                continue
            if self._closing:
                return
            waiter: asyncio.Future[None] = loop.create_future()
            self._idle.append(waiter)
            await waiter

    async def close(self) -> None:
        """Run what was handed over, then end the tasks."""
        self._closing = True
        self._wake(len(self._idle))
        await asyncio.gather(*self._tasks, return_exceptions=True)


class InTaskSupervisor:
    """Runs async handlers as their job's unit of work in the calling task,
    and cancels that task when the job's timeout passes (the job fails with
    ``JobTimeout``: retried like any failure) or, after :meth:`stopping`,
    ``grace`` seconds later (the job fails with "shutdown timeout", the
    attempt counts; None: never), or when the job is no longer the worker's
    (``jobq.cancel()``, a lost lease: ``job.cancel_requested``; nothing is
    acknowledged). The job is marked ``timed_out`` before the
    cancellation reaches the handler. A cancellation it did not make
    propagates as ever.
    """

    def __init__(self, acks: AsyncAcks, grace: float | None) -> None:
        self.acks = acks
        self.grace = grace
        self._running: dict[asyncio.Task[Any], AsyncJob] = {}
        self._why: dict[asyncio.Task[Any], str] = {}  # the tasks it cancelled, and why
        self._give_up: asyncio.TimerHandle | None = None

    async def run(self, job: AsyncJob, handler: Callable[[AsyncJob], Awaitable[object]]) -> None:
        """Run ``handler`` for ``job`` (RUNNING from now on), unless its lease
        was lost: the job's unit of work (``async with job``, written out:
        this is the busiest path of an AsyncWorker)."""
        with STATE_LOCK:
            if not move(job, Event.START):
                return
        loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        assert task is not None
        try:
            timer = None
            if job.timeout is not None:
                timer = loop.call_later(job.timeout.total_seconds(), self._cancel, task, job, TIMED_OUT)
            self._running[task] = job
            job._on_lost = partial(loop.call_soon_threadsafe, self._cancel, task, job, CANCELLED)
            try:
                value = await handler(job)
            except BaseException:
                if task not in self._why:
                    raise  # the handler's own exception fails the job; someone else's cancel propagates
                value = None
            finally:
                if timer is not None:
                    timer.cancel()
                del self._running[task]
                job._on_lost = None
            why = self._why.pop(task, None) if self._why else None
            if why is None:
                job._returned(value)
            else:
                uncancel = getattr(task, "uncancel", None)  # Python 3.11+: the task goes on with the next job
                if uncancel is not None:
                    uncancel()
                if why == TIMED_OUT:
                    raise JobTimeout(f"job ran longer than {job.timeout}") from None
                if why == SHUT_DOWN:
                    error = shutdown_error(self.grace or 0.0)
                    if self.acks.fail_later(job, error):
                        log_failed(job, error)
                # CANCELLED: not ours any more: leaving the unit of work queues nothing
        except BaseException as error:  # what leaving ``async with job:`` does (AsyncJob.__aexit__)
            if not await job.__aexit__(type(error), error, error.__traceback__):
                raise
            return
        if (acks := job._acks) is None:
            await job.__aexit__(None, None, None)
        elif acks.complete_later(job):
            await acks.after_ack()

    def _cancel(self, task: asyncio.Task[Any], job: AsyncJob, why: str) -> None:
        if self._running.get(task) is not job or task in self._why:
            return  # finished meanwhile, or cancelled already
        if why == TIMED_OUT:
            job._on(Event.TIME_OUT)  # before the cancel reaches the handler (and its observers)
        self._why[task] = why
        task.cancel()

    def stopping(self) -> None:
        """The worker stopped: the handlers still running ``grace`` seconds from now are cancelled."""
        if self.grace is not None and self._give_up is None:
            self._give_up = asyncio.get_running_loop().call_later(self.grace, self._cancel_all)

    def _cancel_all(self) -> None:
        for task, job in list(self._running.items()):
            self._cancel(task, job, SHUT_DOWN)

    def close(self) -> None:
        if self._give_up is not None:
            self._give_up.cancel()
