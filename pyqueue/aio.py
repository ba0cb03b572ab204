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
import contextlib
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, TypeVar, overload
from uuid import UUID

import psycopg

from pyqueue import _queries as q
from pyqueue._aioloop import Consumer, DedicatedConnection, poke_when_done, stop_on_signals
from pyqueue._db import aclaimed_rows, adicts, ascalar, atuples, undecodable
from pyqueue.client import QueueStats
from pyqueue.defaults import (
    BATCH_SIZE,
    CONCURRENCY,
    HEARTBEAT_APPLICATION_NAME,
    POLL_INTERVAL,
    REAP_BATCH,
    REAP_INTERVAL,
    WORKER_APPLICATION_NAME,
)
from pyqueue.errors import translate_errors
from pyqueue.job import AsyncJob, TakenJob
from pyqueue.worker import check_settings, queue_list

__all__ = [
    "AsyncHandler",
    "AsyncJob",
    "AsyncJobIterator",
    "AsyncWorker",
    "claim",
    "complete",
    "complete_many",
    "enqueue",
    "enqueue_many",
    "fail",
    "heartbeat",
    "listen",
    "reap",
    "release",
    "stats",
    "take",
]

AsyncConnection = psycopg.AsyncConnection[Any]
AsyncHandler = Callable[[AsyncJob], Awaitable[object]]
H = TypeVar("H", bound=AsyncHandler)


# --- client calls -------------------------------------------------------------

@contextlib.asynccontextmanager
async def take(conn: AsyncConnection, queue: str, n: int = 1) -> AsyncIterator[list[TakenJob]]:
    """The asyncio twin of :func:`pyqueue.take`: up to ``n`` jobs removed inside
    a transaction on ``conn``, done on commit (normal exit), back untouched on
    rollback (exception)."""
    async with conn.transaction():
        with translate_errors():
            rows = await atuples(conn, q.TAKE, (queue, n))
        yield [TakenJob(*row) for row in rows]


async def enqueue(
    conn: AsyncConnection,
    queue: str,
    payload: Mapping[str, Any],
    *,
    delay: timedelta | float | None = None,
    run_at: datetime | None = None,
    priority: int = 0,
    max_attempts: int | None = None,
    key: str | None = None,
    group_key: str | None = None,
) -> int:
    """Add a job in the caller's transaction; its id (see :func:`pyqueue.enqueue`)."""
    query, params = q.enqueue_query(queue, payload, delay=delay, run_at=run_at, priority=priority,
                                    max_attempts=max_attempts, key=key, group_key=group_key)
    with translate_errors():
        return int(await ascalar(conn, query, params))


async def enqueue_many(
    conn: AsyncConnection,
    queue: str,
    payloads: Sequence[Mapping[str, Any]],
    *,
    delay: timedelta | float | None = None,
    run_at: datetime | None = None,
    priority: int = 0,
    max_attempts: int | None = None,
    keys: Sequence[str | None] | None = None,
    group_key: str | None = None,
) -> list[int]:
    """Add one job per payload in one statement (see :func:`pyqueue.enqueue_many`)."""
    query, params = q.enqueue_many_query(queue, payloads, delay=delay, run_at=run_at, priority=priority,
                                         max_attempts=max_attempts, keys=keys, group_key=group_key)
    with translate_errors():
        return [int(row[0]) for row in await atuples(conn, query, params)]


async def claim(
    conn: AsyncConnection,
    queue: str | Sequence[str],
    n: int = 1,
    *,
    worker: str | None = None,
    lease: timedelta | None = None,
) -> list[AsyncJob]:
    """Lease up to ``n`` ready jobs (see :func:`pyqueue.claim`); their methods use ``conn``."""
    query, params = q.claim_query(queue, n, worker, lease)
    with translate_errors():
        rows = await aclaimed_rows(conn, query, params)

    @contextlib.asynccontextmanager
    async def same_connection() -> AsyncIterator[AsyncConnection]:
        yield conn

    jobs = [AsyncJob._claimed(q.split_claimed_row(row), same_connection) for row in rows]
    for job in jobs:
        if (error := undecodable(job.payload)) is not None:
            await job.fail(error)
    return [job for job in jobs if undecodable(job.payload) is None]


async def complete(conn: AsyncConnection, job_id: int, lease_token: UUID) -> bool:
    with translate_errors():
        return bool(await ascalar(conn, q.COMPLETE, (job_id, lease_token)))


async def complete_many(conn: AsyncConnection, jobs: Sequence[AsyncJob]) -> int:
    if not jobs:
        return 0
    ids, tokens = q.ids_and_tokens([(job.id, job.lease_token) for job in jobs])
    with translate_errors():
        done = int(await ascalar(conn, q.COMPLETE_MANY, (ids, tokens)))
    for job in jobs:
        job._mark_acknowledged()
    return done


async def fail(
    conn: AsyncConnection, job_id: int, lease_token: UUID, error: str, *, retry_at: datetime | None = None
) -> bool:
    retry = q.schedule_params(None, retry_at)["run_at"]
    with translate_errors():
        return bool(await ascalar(conn, q.FAIL, (job_id, error, lease_token, retry)))


async def heartbeat(
    conn: AsyncConnection, job_id: int, lease_token: UUID, extend: timedelta | None = None
) -> bool:
    with translate_errors():
        return bool(await ascalar(conn, q.HEARTBEAT, (job_id, lease_token, extend)))


async def release(conn: AsyncConnection, job_id: int, lease_token: UUID) -> bool:
    with translate_errors():
        return bool(await ascalar(conn, q.RELEASE, (job_id, lease_token)))


async def reap(conn: AsyncConnection, n: int = REAP_BATCH) -> int:
    with translate_errors():
        return int(await ascalar(conn, q.REAP, (n,)))


async def stats(conn: AsyncConnection) -> list[QueueStats]:
    with translate_errors():
        rows = await adicts(conn, q.STATS)
    return [QueueStats(**row) for row in rows]


# --- workers ---------------------------------------------------------------------

@dataclass(frozen=True)
class _Settings:
    dsn: str
    queues: list[str]
    lease: timedelta | None
    poll_interval: float
    use_listen: bool
    worker_name: str
    reap_interval: float | None

    def consumer(self, stop: asyncio.Event) -> Consumer:
        return Consumer(
            self.dsn,
            self.queues,
            lease=self.lease,
            poll_interval=self.poll_interval,
            use_listen=self.use_listen,
            worker_name=self.worker_name,
            reap_interval=self.reap_interval,
            stop=stop,
            work=DedicatedConnection(self.dsn, WORKER_APPLICATION_NAME, prepare=self.use_listen),
            heartbeat=DedicatedConnection(self.dsn, HEARTBEAT_APPLICATION_NAME, prepare=self.use_listen),
        )


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

    def __init__(self, settings: _Settings, *, batch_size: int, stop: asyncio.Event | None,
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
                        await consumer.wait()
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
    handler: AsyncHandler | None = None,
    *,
    batch_size: int = BATCH_SIZE,
    lease: timedelta | None = None,
    poll_interval: float = POLL_INTERVAL,
    use_listen: bool = True,
    worker_name: str | None = None,
    stop: asyncio.Event | None = None,
    handle_signals: bool = True,
    reap_interval: float | None = REAP_INTERVAL,
) -> Coroutine[Any, Any, None] | AsyncJobIterator:
    """The asyncio :func:`pyqueue.listen`: with an async ``handler``, a
    coroutine that works the queues until stopped (``await`` it); without
    one, an :class:`AsyncJobIterator`. Same options, with an
    ``asyncio.Event`` for ``stop``; heartbeats run as a task."""
    check_settings(batch_size=batch_size, poll_interval=poll_interval)
    settings = _Settings(dsn, queue_list(queues), lease, poll_interval, use_listen,
                         worker_name or q.default_worker_name(), reap_interval)
    jobs = AsyncJobIterator(settings, batch_size=batch_size, stop=stop, handle_signals=handle_signals)
    if handler is None:
        return jobs
    return _run_handler(jobs, handler)


class AsyncWorker:
    """Async handlers registered per queue, up to ``concurrency`` running at
    once as tasks of one event loop; the twin of :class:`pyqueue.Worker`.

    ::

        worker = pyqueue.aio.AsyncWorker(dsn, concurrency=20)

        @worker.handler("emails")
        async def send_email(job: pyqueue.aio.AsyncJob) -> None: ...

        await worker.run()
    """

    def __init__(
        self,
        dsn: str,
        *,
        concurrency: int = CONCURRENCY,
        batch_size: int = BATCH_SIZE,
        lease: timedelta | None = None,
        poll_interval: float = POLL_INTERVAL,
        use_listen: bool = True,
        name: str | None = None,
        reap_interval: float | None = REAP_INTERVAL,
    ) -> None:
        check_settings(batch_size=batch_size, poll_interval=poll_interval, concurrency=concurrency)
        self.dsn = dsn
        self.concurrency = concurrency
        self.batch_size = batch_size
        self.lease = lease
        self.poll_interval = poll_interval
        self.use_listen = use_listen
        self.name = name or q.default_worker_name()
        self.reap_interval = reap_interval
        self._handlers: dict[str, AsyncHandler] = {}
        self._stop = asyncio.Event()
        self._running = False

    @property
    def queues(self) -> list[str]:
        return list(self._handlers)

    def register(self, queue: str, fn: AsyncHandler) -> None:
        if queue in self._handlers:
            raise ValueError(f"queue {queue!r} already has a handler")
        self._handlers[queue] = fn

    def handler(self, queue: str) -> Callable[[H], H]:
        def decorate(fn: H) -> H:
            self.register(queue, fn)
            return fn
        return decorate

    def stop(self) -> None:
        """Stop claiming; ``run()`` returns once the started jobs are done (call
        from the event loop's thread, e.g. from a handler)."""
        self._stop.set()

    async def run(self, *, handle_signals: bool = True) -> None:
        """Work until :meth:`stop`, or SIGTERM/SIGINT when ``handle_signals``."""
        if not self._handlers:
            raise ValueError("register a handler first (worker.register or @worker.handler)")
        if self._running:
            raise RuntimeError("an AsyncWorker runs once: make a new one to run again")
        self._running = True
        settings = _Settings(self.dsn, self.queues, self.lease, self.poll_interval, self.use_listen,
                             self.name, self.reap_interval)
        slots = asyncio.Semaphore(self.concurrency)
        tasks: set[asyncio.Task[None]] = set()
        with stop_on_signals(handle_signals, self._stop):
            consumer = settings.consumer(self._stop)
            done = poke_when_done(consumer)
            try:
                limit = max(self.concurrency, self.batch_size)
                while not self._stop.is_set():
                    consumer.unpoke()
                    await consumer.flush()
                    await consumer.maybe_reap()
                    room = limit - len(tasks)
                    if room > 0:
                        n = min(self.batch_size, room)
                        jobs = await consumer.claim(n)
                        if jobs is None:
                            continue
                        for job in jobs:
                            task = asyncio.create_task(self._execute(consumer, slots, job))
                            tasks.add(task)
                            task.add_done_callback(tasks.discard)
                            task.add_done_callback(done)
                        if len(jobs) == n:
                            continue
                    await consumer.wait(for_work=room > 0)
            finally:
                self._stop.set()
                await asyncio.gather(*tasks, return_exceptions=True)
                await consumer.close()

    async def _execute(self, consumer: Consumer, slots: asyncio.Semaphore, job: AsyncJob) -> None:
        async with slots:
            if job.lease_lost:
                return
            if self._stop.is_set():
                consumer.release_later(job)
                return
            async with job:
                await self._handlers[job.queue](job)
