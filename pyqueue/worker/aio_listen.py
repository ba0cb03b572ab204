"""asyncio twins of pyqueue's client calls and workers (psycopg AsyncConnection).

The SQL, the argument checks and the worker bookkeeping are the sync API's
own (``pyqueue._queries``, ``pyqueue.worker.bookkeeping``); only the I/O differs.

::

    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        await pyqueue.aio.enqueue(conn, "emails", {"to": "ada@example.com"})
        await conn.commit()

    async def send(job: pyqueue.aio.AsyncJob) -> None: ...

    await pyqueue.aio.listen(dsn, "emails", send)     # until SIGTERM / SIGINT / stop
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncGenerator, Coroutine, Sequence
from datetime import timedelta
from types import TracebackType
from typing import Any, Literal, overload

import psycopg

from pyqueue import _queries as q
from pyqueue.defaults import (
    BATCH_SIZE,
    POLL_INTERVAL,
    REAP_INTERVAL,
    SHUTDOWN_TIMEOUT,
)
from pyqueue.job import AsyncJob
from pyqueue.worker import settings as _settings
from pyqueue.worker.aio_consumer import Consumer, stop_on_signals
from pyqueue.worker.aio_worker import AsyncHandler, listen_in_transaction, make_consumer
from pyqueue.worker.consumer import WorkerSettings
from pyqueue.worker.in_transaction import AsyncTxHandler
from pyqueue.worker.settings import queue_list
from pyqueue.worker.timeouts import run_supervised

AsyncConnection = psycopg.AsyncConnection[Any]


# --- workers ---------------------------------------------------------------------

class AsyncJobIterator:
    """The jobs the async :func:`listen` claims; the twin of
    :class:`pyqueue.JobIterator`, with the same acknowledgement rules:
    leaving ``async with job:`` sends the job's completion (or failure) at
    once; a job left unacknowledged is completed before the next one is
    handed out; unacknowledged at close: released. Close it with
    ``async with``::

        async with pyqueue.aio.listen(dsn, "emails") as jobs:
            async for job in jobs:
                async with job:
                    await send(job.payload)

    An ``async for`` left by ``break``, ``return`` or an exception drops the
    iterator; nothing in it refers back to it, so its async generator is
    finalised at once and asyncio closes it on the loop's next turn
    (releasing the jobs claimed but not handed out, no attempt spent).
    ``async with`` (or ``await jobs.aclose()``) does it before going on.

    A job still in your hands when its execution timeout (jobq 0.4) passes
    is failed at once with ``JobTimeout`` (the attempt counts) and what you
    do with it afterwards is discarded. The loop body is yours: a stop
    (``stop()``, SIGTERM/SIGINT) ends the iteration after the current job,
    without a shutdown timeout of its own.
    """

    def __init__(self, settings: WorkerSettings, *, batch_size: int, stop: asyncio.Event | None,
                 handle_signals: bool, ack_at_once: bool = True) -> None:
        self._settings = settings
        self.batch_size = batch_size
        self.handle_signals = handle_signals
        self._stop = stop if stop is not None else asyncio.Event()
        self._consumer = make_consumer(settings, self._stop, ack_at_once=ack_at_once)
        # No reference back to the iterator: dropping it finalises the generator at once.
        self._jobs = _generate(self._consumer, self._stop, batch_size, handle_signals)

    def __aiter__(self) -> AsyncJobIterator:
        return self

    async def __anext__(self) -> AsyncJob:
        return await self._jobs.__anext__()

    def stop(self) -> None:
        """End the iteration after the current job (call from the event loop's thread)."""
        self._stop.set()

    async def aclose(self) -> None:
        await self._jobs.aclose()

    async def __aenter__(self) -> AsyncJobIterator:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


async def _generate(consumer: Consumer, stop: asyncio.Event, batch_size: int,
                    handle_signals: bool) -> AsyncGenerator[AsyncJob, None]:
    with stop_on_signals(handle_signals, stop):
        held: deque[AsyncJob] = deque()
        current: AsyncJob | None = None
        try:
            while not stop.is_set():
                await consumer.maybe_reap()
                jobs = await consumer.claim(batch_size)
                if jobs is None:
                    continue
                held.extend(jobs)
                while held and not stop.is_set():
                    job = held.popleft()
                    if job.lease_lost:
                        continue
                    current = job
                    consumer.watch(job)
                    yield job
                    consumer.unwatch(job)
                    current = None
                    if not job.acknowledged:
                        consumer.complete_later(job)
                        await consumer.after_ack()
                    await consumer.flush_if_due()
                await consumer.flush()
                if len(jobs) < batch_size and not stop.is_set():
                    await consumer.wait(refresh=not jobs)
        finally:
            if current is not None:
                consumer.unwatch(current)
                consumer.release_later(current)
            for job in held:
                if not job.lease_lost:
                    consumer.release_later(job)
            await consumer.close()


async def _run_handler(jobs: AsyncJobIterator, handler: AsyncHandler) -> None:
    async with jobs:
        async for job in jobs:
            await run_supervised(job, handler, stop=jobs._stop, grace=jobs._settings.shutdown_timeout,
                                 acker=jobs._consumer)


@overload
def listen(
    dsn: str,
    queues: str | Sequence[str],
    handler: AsyncHandler,
    *,
    batch_size: int = BATCH_SIZE,
    lease: timedelta | float | None = None,
    poll_interval: float | timedelta = POLL_INTERVAL,
    use_listen: bool = True,
    worker_name: str | None = None,
    stop: asyncio.Event | None = None,
    handle_signals: bool = True,
    reap_interval: float | timedelta | None = REAP_INTERVAL,
    shutdown_timeout: float | timedelta | None = SHUTDOWN_TIMEOUT,
    run_schedules: bool = True,
    in_transaction: Literal[False] = False,
) -> Coroutine[Any, Any, None]: ...


@overload
def listen(
    dsn: str,
    queues: str | Sequence[str],
    handler: AsyncTxHandler,
    *,
    batch_size: int = BATCH_SIZE,
    lease: timedelta | float | None = None,
    poll_interval: float | timedelta = POLL_INTERVAL,
    use_listen: bool = True,
    worker_name: str | None = None,
    stop: asyncio.Event | None = None,
    handle_signals: bool = True,
    reap_interval: float | timedelta | None = REAP_INTERVAL,
    shutdown_timeout: float | timedelta | None = SHUTDOWN_TIMEOUT,
    run_schedules: bool = True,
    in_transaction: Literal[True],
) -> Coroutine[Any, Any, None]: ...


@overload
def listen(
    dsn: str,
    queues: str | Sequence[str],
    handler: None = None,
    *,
    batch_size: int = BATCH_SIZE,
    lease: timedelta | float | None = None,
    poll_interval: float | timedelta = POLL_INTERVAL,
    use_listen: bool = True,
    worker_name: str | None = None,
    stop: asyncio.Event | None = None,
    handle_signals: bool = True,
    reap_interval: float | timedelta | None = REAP_INTERVAL,
    shutdown_timeout: float | timedelta | None = SHUTDOWN_TIMEOUT,
    run_schedules: bool = True,
) -> AsyncJobIterator: ...


def listen(
    dsn: str,
    queues: str | Sequence[str],
    handler: AsyncHandler | AsyncTxHandler | None = None,
    *,
    batch_size: int = BATCH_SIZE,
    lease: timedelta | float | None = None,
    poll_interval: float | timedelta = POLL_INTERVAL,
    use_listen: bool = True,
    worker_name: str | None = None,
    stop: asyncio.Event | None = None,
    handle_signals: bool = True,
    reap_interval: float | timedelta | None = REAP_INTERVAL,
    shutdown_timeout: float | timedelta | None = SHUTDOWN_TIMEOUT,
    run_schedules: bool = True,
    in_transaction: bool = False,
) -> Coroutine[Any, Any, None] | AsyncJobIterator:
    """The asyncio :func:`pyqueue.listen`: with an async ``handler``, a
    coroutine that works the queues until stopped (``await`` it); without
    one, an :class:`AsyncJobIterator`. Same options, with an
    ``asyncio.Event`` for ``stop``; heartbeats run as a task.
    ``in_transaction=True`` (with a handler) runs each batch inside the
    transaction that holds it, the handler getting an :class:`AsyncTxJob`.

    Settings are checked at once (TypeError / ValueError naming the
    argument), as :func:`pyqueue.listen` checks them. With a handler, each
    job's handler runs in a task: cancelled when the job's execution timeout
    passes (jobq 0.4; the job fails with ``JobTimeout``), or
    ``shutdown_timeout`` seconds after a stop (the job fails with "shutdown
    timeout", the attempt counts). ``run_schedules``: as for the sync
    listen(). Authentication errors raise at once."""
    checked = _settings.check(batch_size=batch_size, poll_interval=poll_interval, lease=lease,
                              reap_interval=reap_interval, shutdown_timeout=shutdown_timeout,
                              use_listen=use_listen, name=worker_name, name_argument="worker_name",
                              run_schedules=run_schedules)
    _settings.flag("handle_signals", handle_signals)
    _settings.flag("in_transaction", in_transaction)
    _settings.instance("stop", stop, asyncio.Event, "an asyncio.Event")
    if handler is not None and not callable(handler):
        raise TypeError(f"handler must be callable, got {handler!r}")
    settings = WorkerSettings(dsn, queue_list(queues), checked.lease, checked.poll_interval,
                              checked.use_listen, checked.name or q.default_worker_name(),
                              checked.reap_interval, checked.shutdown_timeout, checked.run_schedules)
    if in_transaction:
        if handler is None:
            raise ValueError("in_transaction=True needs a handler")
        return listen_in_transaction(settings, handler, batch_size=batch_size,  # type: ignore[arg-type]
                                     stop=stop, handle_signals=handle_signals)
    jobs = AsyncJobIterator(settings, batch_size=checked.batch_size, stop=stop, handle_signals=handle_signals,
                            ack_at_once=handler is None)
    if handler is None:
        return jobs
    return _run_handler(jobs, handler)  # type: ignore[arg-type]
