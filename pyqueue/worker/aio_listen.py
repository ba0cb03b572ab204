"""The asyncio :func:`listen`: an :class:`AsyncJobIterator` over the claimed
jobs, a coroutine that runs an async handler for each, or (with
``in_transaction=True``) one that runs them inside the transactions that
take them. Public through ``pyqueue.aio``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Literal, overload

import psycopg

from pyqueue import _hooks
from pyqueue.job import AsyncJob
from pyqueue.worker import startup
from pyqueue.worker.aio_consumer import Consumer, make_consumer, stop_on_signals
from pyqueue.worker.aio_worker import AsyncHandler
from pyqueue.worker.in_transaction import AsyncTxHandler, arun_batch
from pyqueue.worker.listen_core import HandOut, ListenOptions, ListenSetup, check_listen
from pyqueue.worker.timeouts import run_supervised

if TYPE_CHECKING:
    from typing_extensions import Unpack


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

    A job still in your hands when its execution timeout passes
    is failed at once with ``JobTimeout`` (the attempt counts) and what you
    do with it afterwards is discarded. The loop body is yours: a stop
    (``stop()``, SIGTERM/SIGINT) ends the iteration after the current job,
    without a shutdown timeout of its own.
    """

    def __init__(self, setup: ListenSetup, *, stop: asyncio.Event | None, ack_at_once: bool = True) -> None:
        self.settings = setup.settings
        self.batch_size = setup.batch_size
        self.handle_signals = setup.handle_signals
        self._stop = stop if stop is not None else asyncio.Event()
        self._consumer = make_consumer(self.settings, self._stop, ack_at_once=ack_at_once, watch_cancels=True)
        # No reference back to the iterator: dropping it finalises the generator at once.
        self._jobs = _generate(setup, self._consumer, self._stop)

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

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


async def _generate(setup: ListenSetup, consumer: Consumer,
                    stop: asyncio.Event) -> AsyncGenerator[AsyncJob, None]:
    batch_size = setup.batch_size
    setup.started(await startup.acheck(setup.settings.dsn))  # raises when it cannot connect
    with stop_on_signals(setup.handle_signals, stop):
        out: HandOut[AsyncJob] = HandOut(consumer.watch, consumer.unwatch)
        try:
            while not stop.is_set():
                await consumer.maintain_when_due()
                jobs = await consumer.claim(batch_size)
                if jobs is None:
                    continue
                out.held.extend(jobs)
                while not stop.is_set() and (job := out.next()) is not None:
                    yield job
                    if out.returned(job) and consumer.acks.complete_later(job):
                        await consumer.acks.after_ack()
                    await consumer.send_acks_if_due()
                await consumer.send_acks()
                if len(jobs) < batch_size and not stop.is_set():
                    await consumer.wait(refresh=not jobs)
        finally:
            for job in out.left():
                consumer.acks.release_later(job)
            await consumer.close()


async def _run_handler(jobs: AsyncJobIterator, handler: AsyncHandler) -> None:
    if (tracing := _hooks.consumer) is not None:  # pyqueue.tracing.instrument(): a span per job
        handler = tracing.wrap(",".join(jobs.settings.queues), handler, asynchronous=True)
    async with jobs:
        async for job in jobs:
            await run_supervised(job, handler, stop=jobs._stop, grace=jobs.settings.shutdown_timeout,
                                 acks=jobs._consumer.acks)


async def _run_in_transaction(setup: ListenSetup, handler: AsyncTxHandler, *,
                              stop: asyncio.Event | None) -> None:
    """``listen(..., in_transaction=True)``: one batch per queue in turn, each
    in its own transaction on one connection (see ``sync_listen._TxLoop``)."""
    settings, batch_size, handle_signals = setup.settings, setup.batch_size, setup.handle_signals
    stop = stop if stop is not None else asyncio.Event()
    setup.started(await startup.acheck(settings.dsn))  # raises when it cannot connect
    with stop_on_signals(handle_signals, stop):
        consumer = make_consumer(settings, stop)
        try:
            while not stop.is_set():
                await consumer.maintain_when_due()
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


@overload
def listen(dsn: str, queues: str | Sequence[str], handler: AsyncHandler, *, stop: asyncio.Event | None = None,
           in_transaction: Literal[False] = False,
           **options: Unpack[ListenOptions]) -> Coroutine[Any, Any, None]: ...


@overload
def listen(dsn: str, queues: str | Sequence[str], handler: AsyncTxHandler, *,
           stop: asyncio.Event | None = None, in_transaction: Literal[True],
           **options: Unpack[ListenOptions]) -> Coroutine[Any, Any, None]: ...


@overload
def listen(dsn: str, queues: str | Sequence[str], handler: None = None, *,
           stop: asyncio.Event | None = None, **options: Unpack[ListenOptions]) -> AsyncJobIterator: ...


def listen(dsn: str, queues: str | Sequence[str], handler: AsyncHandler | AsyncTxHandler | None = None, *,
           stop: asyncio.Event | None = None, in_transaction: bool = False,
           **options: Unpack[ListenOptions]) -> Coroutine[Any, Any, None] | AsyncJobIterator:
    """The asyncio :func:`pyqueue.listen`: with an async ``handler``, a
    coroutine that works the queues until stopped (``await`` it); without
    one, an :class:`AsyncJobIterator`. Same options, with an
    ``asyncio.Event`` for ``stop``; heartbeats run as a task.
    ``in_transaction=True`` (with a handler) runs each batch inside the
    transaction that holds it, the handler getting an :class:`AsyncTxJob`.

    Settings are checked at once (TypeError / ValueError naming the
    argument), as :func:`pyqueue.listen` checks them. With a handler, each
    job's handler runs in a task: cancelled when the job's execution timeout
    passes (the job fails with ``JobTimeout``), or
    ``shutdown_timeout`` seconds after a stop (the job fails with "shutdown
    timeout", the attempt counts). ``run_schedules``: as for the sync
    listen(). The first connection and its checks, when the iteration (or
    the coroutine) starts, and authentication errors: as for the sync
    listen()."""
    setup = check_listen(dsn, queues, handler, options, in_transaction=in_transaction, stop=stop,
                         event=asyncio.Event, event_name="an asyncio.Event")
    if in_transaction:
        return _run_in_transaction(setup, handler, stop=stop)  # type: ignore[arg-type]
    jobs = AsyncJobIterator(setup, stop=stop, ack_at_once=handler is None)
    if handler is None:
        return jobs
    return _run_handler(jobs, handler)  # type: ignore[arg-type]
