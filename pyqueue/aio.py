"""asyncio twins of pyqueue's client calls and workers (psycopg AsyncConnection).

The SQL, the argument checks and the worker bookkeeping are the sync API's
own (``pyqueue._queries``, ``pyqueue._state``); only the I/O differs.

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
from pyqueue._aioclient import (
    cancel,
    cancel_jobs,
    claim,
    complete,
    complete_many,
    configure_queue,
    discard_dead,
    enqueue,
    enqueue_many,
    every,
    fail,
    heartbeat,
    pause,
    reap,
    release,
    resume,
    retry,
    retry_dead,
    schedules,
    snooze,
    stats,
    take,
    unschedule,
)
from pyqueue._aioloop import stop_on_signals
from pyqueue._aioworker import AsyncHandler, AsyncWorker, Settings, listen_in_transaction
from pyqueue._intx import AsyncTxHandler
from pyqueue.defaults import (
    BATCH_SIZE,
    POLL_INTERVAL,
    REAP_INTERVAL,
)
from pyqueue.job import AsyncJob, AsyncTxJob
from pyqueue.worker import check_settings, queue_list

__all__ = [
    "AsyncHandler",
    "AsyncJob",
    "AsyncJobIterator",
    "AsyncTxHandler",
    "AsyncTxJob",
    "AsyncWorker",
    "cancel",
    "cancel_jobs",
    "claim",
    "complete",
    "complete_many",
    "configure_queue",
    "discard_dead",
    "enqueue",
    "enqueue_many",
    "every",
    "fail",
    "heartbeat",
    "listen",
    "pause",
    "reap",
    "release",
    "resume",
    "retry",
    "retry_dead",
    "schedules",
    "snooze",
    "stats",
    "take",
    "unschedule",
]

AsyncConnection = psycopg.AsyncConnection[Any]


# --- workers ---------------------------------------------------------------------

class AsyncJobIterator:
    """The jobs the async :func:`listen` claims; the twin of
    :class:`pyqueue.JobIterator`, with the same acknowledgement rules
    (``async with job:``; unacknowledged at the next job: completed;
    unacknowledged at close: released). Close it with ``async with``::

        async with pyqueue.aio.listen(dsn, "emails") as jobs:
            async for job in jobs:
                async with job:
                    await send(job.payload)
    """

    def __init__(self, settings: Settings, *, batch_size: int, stop: asyncio.Event | None,
                 handle_signals: bool) -> None:
        self._settings = settings
        self.batch_size = batch_size
        self.handle_signals = handle_signals
        self._stop = stop if stop is not None else asyncio.Event()
        self._jobs = self._generate()

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

    async def _generate(self) -> AsyncGenerator[AsyncJob, None]:
        stop = self._stop
        with stop_on_signals(self.handle_signals, stop):
            consumer = self._settings.consumer(stop)
            held: deque[AsyncJob] = deque()
            current: AsyncJob | None = None
            try:
                while not stop.is_set():
                    await consumer.maybe_reap()
                    jobs = await consumer.claim(self.batch_size)
                    if jobs is None:
                        continue
                    held.extend(jobs)
                    while held and not stop.is_set():
                        job = held.popleft()
                        if job.lease_lost:
                            continue
                        current = job
                        yield job
                        current = None
                        if not job.acknowledged:
                            consumer.complete_later(job)
                        await consumer.flush_if_due()
                    await consumer.flush()
                    if len(jobs) < self.batch_size and not stop.is_set():
                        await consumer.wait(refresh=not jobs)
            finally:
                if current is not None and not current.acknowledged:
                    consumer.release_later(current)
                for job in held:
                    if not job.acknowledged and not job.lease_lost:
                        consumer.release_later(job)
                await consumer.close()


async def _run_handler(jobs: AsyncJobIterator, handler: AsyncHandler) -> None:
    async with jobs:
        async for job in jobs:
            async with job:
                await handler(job)


@overload
def listen(
    dsn: str,
    queues: str | Sequence[str],
    handler: AsyncHandler,
    *,
    batch_size: int = BATCH_SIZE,
    lease: timedelta | None = None,
    poll_interval: float = POLL_INTERVAL,
    use_listen: bool = True,
    worker_name: str | None = None,
    stop: asyncio.Event | None = None,
    handle_signals: bool = True,
    reap_interval: float | None = REAP_INTERVAL,
    in_transaction: Literal[False] = False,
) -> Coroutine[Any, Any, None]: ...


@overload
def listen(
    dsn: str,
    queues: str | Sequence[str],
    handler: AsyncTxHandler,
    *,
    batch_size: int = BATCH_SIZE,
    lease: timedelta | None = None,
    poll_interval: float = POLL_INTERVAL,
    use_listen: bool = True,
    worker_name: str | None = None,
    stop: asyncio.Event | None = None,
    handle_signals: bool = True,
    reap_interval: float | None = REAP_INTERVAL,
    in_transaction: Literal[True],
) -> Coroutine[Any, Any, None]: ...


@overload
def listen(
    dsn: str,
    queues: str | Sequence[str],
    handler: None = None,
    *,
    batch_size: int = BATCH_SIZE,
    lease: timedelta | None = None,
    poll_interval: float = POLL_INTERVAL,
    use_listen: bool = True,
    worker_name: str | None = None,
    stop: asyncio.Event | None = None,
    handle_signals: bool = True,
    reap_interval: float | None = REAP_INTERVAL,
) -> AsyncJobIterator: ...


def listen(
    dsn: str,
    queues: str | Sequence[str],
    handler: AsyncHandler | AsyncTxHandler | None = None,
    *,
    batch_size: int = BATCH_SIZE,
    lease: timedelta | None = None,
    poll_interval: float = POLL_INTERVAL,
    use_listen: bool = True,
    worker_name: str | None = None,
    stop: asyncio.Event | None = None,
    handle_signals: bool = True,
    reap_interval: float | None = REAP_INTERVAL,
    in_transaction: bool = False,
) -> Coroutine[Any, Any, None] | AsyncJobIterator:
    """The asyncio :func:`pyqueue.listen`: with an async ``handler``, a
    coroutine that works the queues until stopped (``await`` it); without
    one, an :class:`AsyncJobIterator`. Same options, with an
    ``asyncio.Event`` for ``stop``; heartbeats run as a task.
    ``in_transaction=True`` (with a handler) runs each batch inside the
    transaction that holds it, the handler getting an :class:`AsyncTxJob`."""
    check_settings(batch_size=batch_size, poll_interval=poll_interval)
    settings = Settings(dsn, queue_list(queues), lease, poll_interval, use_listen,
                        worker_name or q.default_worker_name(), reap_interval)
    if in_transaction:
        if handler is None:
            raise ValueError("in_transaction=True needs a handler")
        return listen_in_transaction(settings, handler, batch_size=batch_size,  # type: ignore[arg-type]
                                     stop=stop, handle_signals=handle_signals)
    jobs = AsyncJobIterator(settings, batch_size=batch_size, stop=stop, handle_signals=handle_signals)
    if handler is None:
        return jobs
    return _run_handler(jobs, handler)  # type: ignore[arg-type]
