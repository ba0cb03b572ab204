"""Execution timeouts and the shutdown grace of the sync workers.

A sync handler cannot be interrupted: Python has no way to stop a thread.
So the :class:`Watchdog` (a background thread, started when the first job
runs) acts on the database instead. When a running job passes its timeout
(the job's own ``timeout``, else its queue's), the job is failed
at once with ``JobTimeout: job ran longer than 0:00:02`` recorded (an
attempt spent: it is retried like any failure, or goes dead), its lease is
no longer heart-beaten, and whatever the handler does later is discarded
(its completion or failure finds the job acknowledged already).

The shutdown grace: once the worker is asked to stop, jobs still running
``shutdown_timeout`` seconds later are failed the same way (``shutdown
timeout`` recorded, the attempt counts) and the jobs held but never
started are released (no attempt spent); nothing is heart-beaten after that.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from functools import partial
from typing import Any, Protocol

from pyqueue.defaults import STOP_CHECK_INTERVAL
from pyqueue.errors import JobTimeout
from pyqueue.job import AsyncJob, Event, JobRecord, log_failed
from pyqueue.worker.acknowledgement import Acks

logger = logging.getLogger("pyqueue.worker")


def timeout_error(timeout: timedelta) -> str:
    """The error text recorded for a job that ran past its timeout."""
    return f"{JobTimeout.__name__}: job ran longer than {timeout}"


def shutdown_error(grace: float) -> str:
    return (f"shutdown timeout: the job was still running {grace:g} s after the worker was asked "
            "to stop; the worker gave up on it")


class Watchdog:
    """A thread that fails running jobs at their deadline (``expire``) and,
    ``grace`` seconds after ``stopped()`` turns true, calls ``abandon``."""

    def __init__(
        self,
        *,
        expire: Callable[[JobRecord, str], None],
        abandon: Callable[[], None],
        stopped: Callable[[], bool],
        grace: float | None,
    ) -> None:
        self._expire = expire
        self._abandon = abandon
        self._stopped = stopped
        self.grace = grace
        self._cond = threading.Condition()
        self._deadlines: dict[int, tuple[float, JobRecord, str]] = {}  # job id -> when, job, error
        self._abandon_at: float | None = None
        self._closing = False
        self._thread: threading.Thread | None = None

    def started(self, job: JobRecord) -> None:
        """A handler started ``job``: watch it (its timeout, and the shutdown grace)."""
        if job.timeout is None and self._thread is not None:
            return  # the common case: nothing to do, no lock taken
        with self._cond:
            if job.timeout is not None:
                self._deadlines[job.id] = (time.monotonic() + job.timeout.total_seconds(), job,
                                           timeout_error(job.timeout))
                self._cond.notify()
            if self._thread is None and not self._closing:
                self._thread = threading.Thread(target=self._run, name="pyqueue-watchdog", daemon=True)
                self._thread.start()

    def finished(self, job: JobRecord) -> None:
        if job.timeout is None:
            return
        with self._cond:
            self._deadlines.pop(job.id, None)

    def _next(self) -> tuple[list[tuple[JobRecord, str]], bool] | None:
        """Wait until something is due: the expired jobs, and whether to abandon
        the rest; None when closing."""
        with self._cond:
            while not self._closing:
                now = time.monotonic()
                if self._abandon_at is None and self.grace is not None and self._stopped():
                    self._abandon_at = now + self.grace
                due = [(job, error) for at, job, error in self._deadlines.values() if at <= now]
                for job, _ in due:
                    del self._deadlines[job.id]
                abandon = self._abandon_at is not None and self._abandon_at <= now
                if abandon:
                    self._abandon_at = float("inf")  # once
                if due or abandon:
                    return due, abandon
                until = min([at for at, _, _ in self._deadlines.values()]
                            + [self._abandon_at or now + STOP_CHECK_INTERVAL])
                self._cond.wait(min(STOP_CHECK_INTERVAL, max(0.0, until - now)))
            return None

    def _run(self) -> None:
        while (work := self._next()) is not None:
            due, abandon = work
            for job, error in due:
                try:
                    self._expire(job, error)
                except Exception:
                    logger.exception("could not fail job %d after its timeout", job.id)
            if abandon:
                try:
                    self._abandon()
                except Exception:
                    logger.exception("could not give up the jobs held at the shutdown timeout")

    def close(self) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()


class RunningJobs:
    """The jobs a sync worker's handlers are running, watched by a Watchdog:
    ``expire`` fails one whose timeout passed, ``abandon`` gives up every
    held job once the shutdown grace is over (see the module docstring)."""

    def __init__(self, acks: Acks[Any], send_acks: Callable[[], object], *,
                 stopped: Callable[[], bool], grace: float | None) -> None:
        self.acks = acks
        self.send_acks = send_acks
        self.grace = grace
        self._running: dict[int, JobRecord] = {}  # dict operations are atomic: no lock needed
        # Called with a job failed for its timeout (the Worker replaces the thread running it).
        self.on_expire: Callable[[JobRecord], None] | None = None
        self.watchdog = Watchdog(expire=self.expire, abandon=self.abandon, stopped=stopped, grace=grace)

    def started(self, job: JobRecord) -> None:
        self._running[job.id] = job
        self.watchdog.started(job)  # returns at once for a job without a timeout

    def finished(self, job: JobRecord) -> None:
        self._running.pop(job.id, None)
        self.watchdog.finished(job)

    def expire(self, job: JobRecord, error: str) -> None:
        """Fail a running job at once (its timeout passed). One whose lease was
        lost gets no failure (the database would refuse it), but its handler
        is given up on all the same."""
        if self.acks.expire_later(job, error):
            log_failed(job, error)
            self.send_acks()
        elif not job.lease_lost:
            return  # its handler acked it first
        if self.on_expire is not None:
            self.on_expire(job)

    def abandon(self) -> None:
        """The shutdown grace is over: fail the jobs still running, release the
        held ones never started; nothing held is heart-beaten after this."""
        error = shutdown_error(self.grace or 0.0)
        for job in self.acks.held.jobs():  # every claimed job whose ack did not reach the database
            if job.id in self._running:
                if self.acks.fail_later(job, error):
                    log_failed(job, error)
            else:
                self.acks.release_later(job)
        self.send_acks()

    def close(self) -> None:
        self.watchdog.close()


class AsyncAcks(Protocol):
    """What the async supervisors need of a worker's acks (``Acks``)."""

    def fail_later(self, job: JobRecord, error: str) -> bool: ...


async def run_supervised(
    job: AsyncJob,
    handler: Callable[[AsyncJob], Awaitable[object]],
    *,
    stop: asyncio.Event,
    grace: float | None,
    acks: AsyncAcks,
) -> None:
    """Run an async handler as the unit of work of ``job`` (``async with job``),
    in a task of its own, and cancel it when the job's timeout passes (the
    job fails with JobTimeout), ``grace`` seconds after ``stop`` is set
    (the job fails with "shutdown timeout"), or when the job is no longer
    ours (``jobq.cancel()``, a lost lease: nothing is acknowledged)."""
    async with job:
        task = asyncio.ensure_future(handler(job))
        job._on_lost = partial(asyncio.get_running_loop().call_soon_threadsafe, task.cancel)
        try:
            job._returned(await _supervise(task, job, stop, grace, acks))
        finally:
            job._on_lost = None
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)


async def _supervise(task: asyncio.Future[object], job: AsyncJob, stop: asyncio.Event, grace: float | None,
                     acks: AsyncAcks) -> object:
    """The handler's return value (None when the job was failed instead)."""
    loop = asyncio.get_running_loop()
    deadline = math.inf if job.timeout is None else loop.time() + job.timeout.total_seconds()
    shutdown_at = math.inf
    stopper = None if grace is None else asyncio.ensure_future(stop.wait())
    try:
        while True:
            waiters: set[asyncio.Future[Any]] = {task}
            if stopper is not None and shutdown_at == math.inf:
                waiters.add(stopper)
            until = min(deadline, shutdown_at)
            wait = None if until == math.inf else max(0.0, until - loop.time())
            done, _ = await asyncio.wait(waiters, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
            if task in done:
                if task.cancelled() and job.cancel_requested:
                    return None  # cancelled because the job is not ours any more: no ack
                return task.result()  # the handler's exception fails the job
            if stopper is not None and stopper in done and shutdown_at == math.inf:
                shutdown_at = loop.time() + (grace or 0.0)
                continue
            if loop.time() < until:
                continue
            if shutdown_at > deadline:
                job._on(Event.TIME_OUT)  # before the cancel reaches the handler (and its observers)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            if shutdown_at <= deadline:
                error = shutdown_error(grace or 0.0)
                if acks.fail_later(job, error):
                    log_failed(job, error)
                return None
            assert job.timeout is not None
            raise JobTimeout(f"job ran longer than {job.timeout}") from None
    finally:
        if stopper is not None:
            stopper.cancel()
