"""The asyncio :class:`AsyncWorker`: async handlers per queue, run as tasks of
one event loop; the twin of ``pyqueue.worker.Worker``, sharing its core
(``pyqueue.worker.worker_core``). Public through ``pyqueue.aio``."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from functools import partial

from pyqueue.job import AsyncJob
from pyqueue.worker import startup
from pyqueue.worker.aio_consumer import Consumer, make_consumer, new_connection, stop_on_signals
from pyqueue.worker.connections import AsyncDedicatedConnection
from pyqueue.worker.handler_tasks import HandlerTasks, InTaskSupervisor
from pyqueue.worker.in_transaction import AsyncTxHandler, arun_batch
from pyqueue.worker.settings import WorkerSettings
from pyqueue.worker.worker_core import Rounds, WorkerCore

logger = logging.getLogger("pyqueue.worker")

AsyncHandler = Callable[[AsyncJob], Awaitable[object]]


class AsyncWorker(WorkerCore[AsyncHandler, AsyncTxHandler]):
    """Async handlers registered per queue, up to ``concurrency`` running at
    once as tasks of one event loop; the twin of :class:`pyqueue.Worker`
    (the same claiming, acknowledging and in-transaction rules).

    ::

        worker = pyqueue.aio.AsyncWorker(dsn, concurrency=20)

        @worker.handler("emails")
        async def send_email(job: pyqueue.aio.AsyncJob) -> None: ...

        @worker.handler("ledger", in_transaction=True)
        async def post(job: pyqueue.AsyncTxJob) -> None:
            await job.conn.execute("INSERT INTO entries ...")

        await worker.run()

    An in-transaction batch holds one of the ``concurrency`` slots for its
    whole length, on a connection of its own.

    Settings are checked as :class:`pyqueue.Worker` checks them. The leased
    jobs' handlers run in ``concurrency`` handler tasks, each job's inside
    the task that took it: when the job's execution timeout passes (jobq
    0.4) that task is cancelled (and goes on with the next job) and the job
    failed with ``JobTimeout`` (retried like any failure); after a stop,
    handlers still running ``shutdown_timeout`` seconds later (default 30;
    None: no limit) are cancelled and their jobs failed with "shutdown
    timeout" (the attempt counts). Periodic jobs run by workers
    (``run_schedules``), the first connection and its checks, authentication
    errors and metrics (``metrics_port``): as for ``Worker``; the metrics
    server runs in a thread of its own.
    """

    _ASYNC = True

    def _prepare(self) -> None:
        self._stop = asyncio.Event()
        self._tx_connections: list[AsyncDedicatedConnection] = []  # idle batch connections
        self._held = 0  # leased jobs handed to the handler tasks and not finished

    def stop(self) -> None:
        """Stop claiming; ``run()`` returns once the started jobs (and batches)
        are done (call from the event loop's thread, e.g. from a handler)."""
        self._stop.set()

    async def run(self, *, handle_signals: bool = True) -> None:
        """Work until :meth:`stop`, or SIGTERM/SIGINT when ``handle_signals``."""
        self._startable("an AsyncWorker")
        database = await startup.acheck(self.dsn)  # raises when it cannot connect
        settings = self._start("an AsyncWorker", database)
        slots = asyncio.Semaphore(self.concurrency)
        tasks: set[asyncio.Task[None]] = set()
        with self._observer.serving(), stop_on_signals(handle_signals, self._stop):
            consumer = make_consumer(settings, self._stop, claim_queues=list(self._handlers))
            supervisor = InTaskSupervisor(consumer.acks, self.shutdown_timeout)
            runners = HandlerTasks(self.concurrency if self._handlers else 0,
                                   partial(self._execute, consumer, slots, supervisor), "pyqueue-handler")
            try:
                await self._loop(settings, consumer, slots, runners, tasks)
            finally:
                self._stop.set()
                supervisor.stopping()
                await runners.close()  # the jobs not started are released
                await asyncio.gather(*tasks, return_exceptions=True)
                supervisor.close()
                await consumer.close()
                for conn in self._tx_connections:
                    await conn.close()
        if self._fatal is not None:
            raise self._fatal

    async def _loop(self, settings: WorkerSettings, consumer: Consumer, slots: asyncio.Semaphore,
                    runners: HandlerTasks[AsyncJob], tasks: set[asyncio.Task[None]]) -> None:
        rounds = Rounds(self.batch_size, self.concurrency, bool(self._handlers))

        def spawn(work: Awaitable[None]) -> None:
            task = asyncio.ensure_future(work)
            tasks.add(task)
            task.add_done_callback(tasks.discard)

        while not self._stop.is_set():
            consumer.unpoke()
            await consumer.maintain_when_due()
            if rounds.claim_now(self._held):
                jobs = await consumer.claim(rounds.batch, acks_at_least=rounds.acks_with_claim())
                if jobs is None:
                    continue
                self._observer.claimed(jobs)
                self._held += len(jobs)
                runners.put_many(jobs)
                rounds.claimed(len(jobs))
            if start := self._batches_to_start():
                await consumer.looked()
                for queue in start:
                    spawn(self._run_batches(settings, consumer, slots, queue))
            if rounds.send_acks_now(consumer.acks, self._held):
                await consumer.send_acks()
            if rounds.claim_now(self._held) or self._batch_startable():
                continue
            if await consumer.wait(refresh=self._refresh(rounds), respond=rounds.respond(self._held)):
                self._woke(rounds)

    async def _execute(self, consumer: Consumer, slots: asyncio.Semaphore, supervisor: InTaskSupervisor,
                       job: AsyncJob) -> None:
        """A leased job, in a handler task: its handler, supervised."""
        try:
            if self._stop.is_set():
                consumer.acks.release_later(job)
                return
            if not self._tx_handlers:  # the tasks are the only users of the slots: not counted
                await supervisor.run(job, self._handlers[job.queue])  # not if its lease was lost
                return
            async with slots:
                if self._stop.is_set():
                    consumer.acks.release_later(job)
                    return
                await supervisor.run(job, self._handlers[job.queue])
        finally:
            self._held -= 1
            if self._held in (self.concurrency, 0):
                consumer.poke()  # room for the next batch, or idle: time to acknowledge

    async def _run_batches(self, settings: WorkerSettings, consumer: Consumer, slots: asyncio.Semaphore,
                           queue: str) -> None:
        """Batches of ``queue`` one after the other while they come back full."""
        handler = self._tx_handlers[queue]
        conn = self._tx_connections.pop() if self._tx_connections else new_connection(settings)
        try:
            async with slots:
                while not self._stop.is_set():
                    started = time.monotonic()
                    async with conn.connection() as aconn:
                        taken = await arun_batch(aconn, queue, self.batch_size, handler)
                    more = self._batch_ran(queue, taken, started)
                    if more is None:
                        return
                    if more:
                        consumer.poke()
        except Exception as error:
            delay = self._batch_failed(queue, error)
            if delay is None:
                self._stop.set()
            else:
                await conn.reset()
                await consumer.sleep(delay)
                self._batch_retry(queue)
        finally:
            self._tx_connections.append(conn)
            self._batch_ended()
            consumer.poke()
