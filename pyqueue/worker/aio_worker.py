"""The asyncio :class:`AsyncWorker` and the in-transaction loop of the async
``listen()``: twins of ``pyqueue.worker.Worker`` and ``pyqueue.worker.sync_listen``.
Public through ``pyqueue.aio``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Literal, TypeVar, overload

import psycopg

from pyqueue import _queries as q
from pyqueue.defaults import (
    BATCH_SIZE,
    CONCURRENCY,
    HEARTBEAT_APPLICATION_NAME,
    POLL_INTERVAL,
    REAP_INTERVAL,
    SHUTDOWN_TIMEOUT,
    TX_PARALLEL_AFTER,
    WORKER_APPLICATION_NAME,
)
from pyqueue.job import AsyncJob
from pyqueue.worker import settings as _settings
from pyqueue.worker.aio_consumer import Consumer, stop_on_signals
from pyqueue.worker.auth import fatal_error
from pyqueue.worker.bookkeeping import Backoff
from pyqueue.worker.connections import AsyncDedicatedConnection
from pyqueue.worker.consumer import WorkerSettings
from pyqueue.worker.in_transaction import AsyncTxHandler, arun_batch
from pyqueue.worker.timeouts import run_supervised

logger = logging.getLogger("pyqueue.worker")

AsyncHandler = Callable[[AsyncJob], Awaitable[object]]
H = TypeVar("H", bound=AsyncHandler)
TH = TypeVar("TH", bound=AsyncTxHandler)


def connection(settings: WorkerSettings, application_name: str = WORKER_APPLICATION_NAME
               ) -> AsyncDedicatedConnection:
    return AsyncDedicatedConnection(settings.dsn, application_name, prepare=settings.use_listen)


def make_consumer(settings: WorkerSettings, stop: asyncio.Event, claim_queues: list[str] | None = None, *,
             ack_at_once: bool = False) -> Consumer:
    return Consumer(settings, stop=stop, work=connection(settings),
                    heartbeat=connection(settings, HEARTBEAT_APPLICATION_NAME),
                    claim_queues=claim_queues, ack_at_once=ack_at_once)


async def listen_in_transaction(settings: WorkerSettings, handler: AsyncTxHandler, *, batch_size: int,
                                stop: asyncio.Event | None, handle_signals: bool) -> None:
    """``aio.listen(..., in_transaction=True)``: one batch per queue in turn, each
    in its own transaction on one connection (see ``pyqueue.worker.sync_listen._TxLoop``)."""
    stop = stop if stop is not None else asyncio.Event()
    with stop_on_signals(handle_signals, stop):
        consumer = make_consumer(settings, stop)
        try:
            while not stop.is_set():
                await consumer.maybe_reap()
                await consumer.looked()
                taken = [0]
                try:
                    for queue in settings.queues:
                        if stop.is_set():
                            break
                        async with consumer.work.connection() as conn:
                            taken.append(await arun_batch(conn, queue, batch_size, handler))
                except psycopg.OperationalError as error:
                    await consumer.reconnect_later(error)
                    continue
                consumer.connected()
                if max(taken) < batch_size and not stop.is_set():
                    await consumer.wait(refresh=max(taken) == 0)
        finally:
            await consumer.close()


class AsyncWorker:
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

    Settings are checked as :class:`pyqueue.Worker` checks them. Each
    leased job's handler runs in a task of its own: when the job's
    execution timeout passes (jobq 0.4) the task is cancelled and the job
    failed with ``JobTimeout`` (retried like any failure); after a stop,
    handlers still running ``shutdown_timeout`` seconds later (default 30;
    None: no limit) are cancelled and their jobs failed with "shutdown
    timeout" (the attempt counts). Periodic jobs run by workers
    (``run_schedules``) and authentication errors: as for ``Worker``.
    """

    def __init__(
        self,
        dsn: str,
        *,
        concurrency: int = CONCURRENCY,
        batch_size: int = BATCH_SIZE,
        lease: timedelta | float | None = None,
        poll_interval: float | timedelta = POLL_INTERVAL,
        use_listen: bool = True,
        name: str | None = None,
        reap_interval: float | timedelta | None = REAP_INTERVAL,
        shutdown_timeout: float | timedelta | None = SHUTDOWN_TIMEOUT,
        run_schedules: bool = True,
    ) -> None:
        checked = _settings.check(batch_size=batch_size, poll_interval=poll_interval, concurrency=concurrency,
                                  lease=lease, reap_interval=reap_interval, shutdown_timeout=shutdown_timeout,
                                  use_listen=use_listen, name=name, run_schedules=run_schedules)
        if not isinstance(dsn, str):
            raise TypeError(f"dsn must be a connection string (str), got {type(dsn).__name__}")
        self.dsn = dsn
        self.concurrency = checked.concurrency
        self.batch_size = checked.batch_size
        self.lease = checked.lease
        self.poll_interval = checked.poll_interval
        self.use_listen = checked.use_listen
        self.name = checked.name or q.default_worker_name()
        self.reap_interval = checked.reap_interval
        self.shutdown_timeout = checked.shutdown_timeout
        self.run_schedules = checked.run_schedules
        self._handlers: dict[str, AsyncHandler] = {}
        self._tx_handlers: dict[str, AsyncTxHandler] = {}
        self._order: list[str] = []
        self._stop = asyncio.Event()
        self._running = False
        self._tx_wanted: dict[str, bool] = {}
        self._tx_busy = 0
        self._tx_empty = False
        self._tx_backoff = Backoff()
        self._tx_connections: list[AsyncDedicatedConnection] = []  # idle batch connections
        self._fatal: BaseException | None = None

    @property
    def queues(self) -> list[str]:
        return list(self._order)

    @overload
    def register(self, queue: str, fn: AsyncHandler, *, in_transaction: Literal[False] = False) -> None: ...

    @overload
    def register(self, queue: str, fn: AsyncTxHandler, *, in_transaction: Literal[True]) -> None: ...

    def register(
        self, queue: str, fn: AsyncHandler | AsyncTxHandler, *, in_transaction: bool = False
    ) -> None:
        if queue in self._order:
            raise ValueError(f"queue {queue!r} already has a handler")
        if in_transaction:
            self._tx_handlers[queue] = fn  # type: ignore[assignment]
        else:
            self._handlers[queue] = fn  # type: ignore[assignment]
        self._order.append(queue)

    @overload
    def handler(self, queue: str, *, in_transaction: Literal[False] = False) -> Callable[[H], H]: ...

    @overload
    def handler(self, queue: str, *, in_transaction: Literal[True]) -> Callable[[TH], TH]: ...

    def handler(self, queue: str, *, in_transaction: bool = False) -> Callable[[H], H] | Callable[[TH], TH]:
        def decorate(fn: H) -> H:
            self.register(queue, fn, in_transaction=in_transaction)  # type: ignore[call-overload]
            return fn
        return decorate

    def stop(self) -> None:
        """Stop claiming; ``run()`` returns once the started jobs (and batches)
        are done (call from the event loop's thread, e.g. from a handler)."""
        self._stop.set()

    async def run(self, *, handle_signals: bool = True) -> None:
        """Work until :meth:`stop`, or SIGTERM/SIGINT when ``handle_signals``."""
        if not self._order:
            raise ValueError("register a handler first (worker.register or @worker.handler)")
        if self._running:
            raise RuntimeError("an AsyncWorker runs once: make a new one to run again")
        self._running = True
        settings = WorkerSettings(self.dsn, self.queues, self.lease, self.poll_interval, self.use_listen,
                            self.name, self.reap_interval, self.shutdown_timeout, self.run_schedules)
        slots = asyncio.Semaphore(self.concurrency)
        tasks: set[asyncio.Task[None]] = set()
        with stop_on_signals(handle_signals, self._stop):
            consumer = make_consumer(settings, self._stop, claim_queues=list(self._handlers))
            try:
                await self._loop(settings, consumer, slots, tasks)
            finally:
                self._stop.set()
                await asyncio.gather(*tasks, return_exceptions=True)
                await consumer.close()
                for conn in self._tx_connections:
                    await conn.close()
        if self._fatal is not None:
            raise self._fatal

    async def _loop(self, settings: WorkerSettings, consumer: Consumer, slots: asyncio.Semaphore,
                    tasks: set[asyncio.Task[None]]) -> None:
        batch, threshold = self.batch_size, self.concurrency
        leased: set[asyncio.Task[None]] = set()
        leasing = bool(self._handlers)
        self._tx_wanted = dict.fromkeys(self._tx_handlers, True)
        want, refresh = leasing, False

        def finished(task: asyncio.Task[None]) -> None:
            leased.discard(task)
            if len(leased) in {threshold, 0}:
                consumer.poke()  # room for the next batch, or idle: time to acknowledge

        while not self._stop.is_set():
            consumer.unpoke()
            await consumer.maybe_reap()
            if want and len(leased) <= threshold:
                jobs = await consumer.claim(batch)
                if jobs is None:
                    continue
                for job in jobs:
                    task = asyncio.create_task(self._execute(consumer, slots, job))
                    tasks.add(task)
                    leased.add(task)
                    task.add_done_callback(tasks.discard)
                    task.add_done_callback(finished)
                if len(jobs) < batch:
                    want, refresh = False, refresh or not jobs
            await self._start_batches(settings, consumer, slots, tasks)
            pending = consumer.acks.pending()
            if pending and (pending >= batch or not leased or consumer.acks.seconds_until_due() <= 0):
                await consumer.flush()
            if (want and len(leased) <= threshold) or self._batch_startable():
                continue
            refresh, self._tx_empty = refresh or self._tx_empty, False
            if await consumer.wait(refresh=refresh, respond=len(leased) <= threshold):
                want = leasing
                self._tx_wanted = dict.fromkeys(self._tx_wanted, True)
            refresh = False

    async def _execute(self, consumer: Consumer, slots: asyncio.Semaphore, job: AsyncJob) -> None:
        async with slots:
            if job.lease_lost:
                return
            if self._stop.is_set():
                consumer.release_later(job)
                return
            await run_supervised(job, self._handlers[job.queue], stop=self._stop,
                                 grace=self.shutdown_timeout, acker=consumer)

    # --- in-transaction queues
    def _batch_startable(self) -> bool:
        return self._tx_busy < self.concurrency and any(self._tx_wanted.values())

    async def _start_batches(self, settings: WorkerSettings, consumer: Consumer, slots: asyncio.Semaphore,
                             tasks: set[asyncio.Task[None]]) -> None:
        started = False
        for queue, wanted in self._tx_wanted.items():
            if wanted and self._tx_busy < self.concurrency:
                if not started:
                    await consumer.looked()
                    started = True
                self._tx_wanted[queue] = False
                self._tx_busy += 1
                task = asyncio.create_task(self._run_batches(settings, consumer, slots, queue))
                tasks.add(task)
                task.add_done_callback(tasks.discard)

    async def _run_batches(self, settings: WorkerSettings, consumer: Consumer, slots: asyncio.Semaphore,
                           queue: str) -> None:
        """Batches of ``queue`` one after the other while they come back full."""
        handler = self._tx_handlers[queue]
        conn = self._tx_connections.pop() if self._tx_connections else connection(settings)
        try:
            async with slots:
                while not self._stop.is_set():
                    started = time.monotonic()
                    async with conn.connection() as aconn:
                        taken = await arun_batch(aconn, queue, self.batch_size, handler)
                    if self._tx_backoff.failures:
                        logger.info("reconnected to the database")
                        self._tx_backoff.reset()
                    if taken < self.batch_size:
                        self._tx_empty = self._tx_empty or taken == 0
                        return
                    if time.monotonic() - started >= TX_PARALLEL_AFTER:
                        self._tx_wanted[queue] = True  # a full, slow batch: one more in parallel helps
                        consumer.poke()
        except psycopg.OperationalError as error:
            if fatal_error(error):
                logger.error("batch of queue %r failed, stopping the worker: %s", queue, error)
                self._fatal = error
                self._stop.set()
                return
            delay = self._tx_backoff.next_delay()
            logger.warning("batch of queue %r failed (%s); the jobs are back; trying again in %.1f s",
                           queue, str(error).strip() or type(error).__name__, delay)
            await conn.reset()
            await _sleep_unless(self._stop, delay)
            self._tx_wanted[queue] = True
        except Exception as error:
            logger.error("batch of queue %r failed, stopping the worker: %s", queue, error)
            self._fatal = error
            self._stop.set()
        finally:
            self._tx_connections.append(conn)
            self._tx_busy -= 1
            consumer.poke()


async def _sleep_unless(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)

