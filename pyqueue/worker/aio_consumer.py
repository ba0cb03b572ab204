"""The asyncio driver of the consumer (``pyqueue.worker.consumer``): runs its
scripts on psycopg AsyncConnections, waits with asyncio (the LISTEN
connection's notifications, a stop event, a poke), and extends leases from a
heartbeat task. The async ``listen()`` and ``AsyncWorker`` are built on it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import psycopg

from pyqueue import _queries as q
from pyqueue._db import Claimed, aclaimed_rows, apipelined, ascalar, atuples
from pyqueue.defaults import HEARTBEAT_APPLICATION_NAME, LISTEN_APPLICATION_NAME, WORKER_APPLICATION_NAME
from pyqueue.job import AsyncJob, JobRecord, log_failed
from pyqueue.worker.connections import AsyncConnection, AsyncDedicatedConnection, aconnect, is_broken
from pyqueue.worker.consumer import ConsumerCore
from pyqueue.worker.scripts import Listen, Op, Pipelined, Reset, Script, Sql, Step, T
from pyqueue.worker.settings import WorkerSettings
from pyqueue.worker.timeouts import timeout_error

logger = logging.getLogger("pyqueue.worker")

READERS: dict[str, Callable[[AsyncConnection, str, Any], Any]] = {
    "scalar": ascalar, "tuples": atuples, "claimed": aclaimed_rows}


@contextlib.contextmanager
def stop_on_signals(enabled: bool, stop: asyncio.Event) -> Iterator[None]:
    """While in the block, SIGTERM and SIGINT set ``stop`` (main thread, a loop
    that supports signal handlers). The first signal puts back the previous
    handlers, so a second one acts as it would have."""
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield
        return
    loop = asyncio.get_running_loop()
    signals = (signal.SIGTERM, signal.SIGINT)
    previous = {sig: signal.getsignal(sig) for sig in signals}
    installed: set[signal.Signals] = set()

    def restore() -> None:
        for sig in list(installed):
            loop.remove_signal_handler(sig)
            handler = previous[sig]
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
            installed.discard(sig)

    def on_signal(sig: signal.Signals) -> None:
        logger.info("%s received: finishing the jobs in hand, claiming no more", sig.name)
        stop.set()
        restore()

    try:
        for sig in signals:
            loop.add_signal_handler(sig, on_signal, sig)
            installed.add(sig)
    except (NotImplementedError, RuntimeError):
        restore()  # this loop cannot handle signals: leave them alone
    try:
        yield
    finally:
        restore()


class Heartbeater:
    """A task extending the leases of held jobs (``ConsumerCore.beating``)."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.book = consumer.book
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def kick(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="pyqueue-heartbeat")
        self._changed.set()

    async def _run(self) -> None:
        while True:
            wait = self.book.seconds_until_due()
            if wait is None or wait > 0:
                self._changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), wait)
                continue
            due = self.book.take_due()  # and the progress due, taken by beating()
            await self.consumer.run(self.consumer.beating(due))

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


class Consumer(ConsumerCore[AsyncJob, AsyncDedicatedConnection]):
    """A worker's asyncio session with jobq (see ``pyqueue.worker.consumer``).

    ``poke()`` wakes a ``wait()`` (a handler task finished); ``stop`` ends it.
    ``ack_at_once`` (the plain iterator): leaving ``async with job:`` sends
    the job's ack at once. ``watch_cancels`` (``listen()``, whose loop does
    not wait while a job is in hand): between waits a task reads the LISTEN
    connection, so that a cancellation reaches the job at once.
    """

    def __init__(self, settings: WorkerSettings, *, stop: asyncio.Event, work: AsyncDedicatedConnection,
                 heartbeat: AsyncDedicatedConnection, claim_queues: Sequence[str] | None = None,
                 ack_at_once: bool = False, watch_cancels: bool = False) -> None:
        super().__init__(settings, self._jobs, work=work, heartbeat=heartbeat,
                         after_ack=self.send_acks if ack_at_once else _nothing, claim_queues=claim_queues)
        self.stop = stop
        self._listen: AsyncConnection | None = None
        self.heartbeats = Heartbeater(self)
        self.book.wake = lambda due: self.heartbeats.kick()  # jobs report progress on the loop's thread
        self._watch_cancels = watch_cancels and settings.use_listen
        self._watch: asyncio.Task[None] | None = None
        self._work_noted = False  # the watch read a NOTIFY of our queues: the next wait ends at once
        self._poked = asyncio.Event()
        self._timers: dict[int, asyncio.TimerHandle] = {}  # execution timeouts of the iterator's jobs
        self._expiring: set[asyncio.Task[bool]] = set()

    def _jobs(self, claimed: Claimed) -> list[AsyncJob]:
        return AsyncJob._from_claim(claimed, self.work.connection, self.acks)

    # --- the I/O of the scripts
    async def run(self, script: Script[T]) -> T:
        step = Step(script)
        while step.next():
            try:
                step.result = await self._perform(step.op)
            except Exception as error:
                step.error = error
        return step.value

    async def _perform(self, op: Op) -> Any:
        if isinstance(op, Sql):
            if op.on == "listen":
                assert self._listen is not None
                return await READERS[op.rows](self._listen, op.query, op.params)
            source = self.work if op.on == "work" else self._heartbeat_source
            async with source.connection() as conn:
                return await READERS[op.rows](conn, op.query, op.params)
        if isinstance(op, Pipelined):
            async with self.work.connection() as conn:
                return await apipelined(conn, [(step.query, step.params, step.rows) for step in op.steps])
        if isinstance(op, Reset):
            await self._reset(op)
        elif isinstance(op, Listen):
            return await self._open_listen()
        else:
            await self.sleep(op.seconds)
        return None

    async def _reset(self, op: Reset) -> None:
        if op.on == "work":
            await self.work.reset()
        elif op.on == "heartbeat":
            await self._heartbeat_source.reset()
        elif self._listen is not None:
            await self._stop_watch()
            conn, self._listen = self._listen, None
            await conn.close()

    async def _open_listen(self) -> bool:
        if not is_broken(self._listen):
            return False
        await self._reset(Reset("listen"))
        conn = await aconnect(self.settings.listen_dsn or self.dsn, LISTEN_APPLICATION_NAME, prepare=True)
        try:
            await conn.execute(q.LISTEN)
        except BaseException:
            await conn.close()
            raise
        self._listen = conn
        return True

    # --- the cancel watch (watch_cancels)
    def _start_watch(self) -> None:
        if (self._watch_cancels and self._watch is None and self._listen is not None
                and not self.stop.is_set()):
            self._watch = asyncio.create_task(self._watching(self._listen), name="pyqueue-cancel-watch")

    async def _stop_watch(self) -> None:
        if (task := self._watch) is not None:
            self._watch = None
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _watching(self, listen: AsyncConnection) -> None:
        """Read the LISTEN connection until cancelled: cancellations are acted
        on (``ConsumerCore.noted``), a NOTIFY of our queues is kept for the next wait."""
        try:
            async with contextlib.aclosing(listen.notifies()) as notes:
                async for note in notes:
                    if self.noted(note.channel, note.payload):
                        self._work_noted = True
        except psycopg.Error as error:
            logger.debug("cancel watch: %s", error)  # the loop sees it too, and reopens the connection

    async def sleep(self, seconds: float) -> None:
        """Sleep, but not past a stop."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), seconds)

    # --- what the workers call
    def held(self, jobs: Sequence[AsyncJob], claimed_at: float) -> float:
        due = super().held(jobs, claimed_at)
        if jobs:
            self.heartbeats.kick()
        return due

    def watch(self, job: JobRecord) -> None:
        """The plain iterator handed ``job`` out: fail it when its timeout
        passes while it is still in the caller's hands."""
        if job.timeout is not None:
            self._timers[job.id] = asyncio.get_running_loop().call_later(
                job.timeout.total_seconds(), self._expire, job, timeout_error(job.timeout))

    def unwatch(self, job: JobRecord) -> None:
        if (timer := self._timers.pop(job.id, None)) is not None:
            timer.cancel()

    def _expire(self, job: JobRecord, error: str) -> None:
        self._timers.pop(job.id, None)
        if self.acks.expire_later(job, error):
            log_failed(job, error)
            task = asyncio.create_task(self.send_acks())
            self._expiring.add(task)
            task.add_done_callback(self._expiring.discard)

    def poke(self) -> None:
        """Wake ``wait()``; the wake-up stays pending until ``unpoke()``."""
        self._poked.set()

    def unpoke(self) -> None:
        self._poked.clear()

    async def looked(self) -> None:
        await self.run(self.looking())

    async def reconnect_later(self, error: psycopg.Error) -> None:
        """After a lost connection: back off (see ``ConsumerCore.connection_lost``)."""
        await self.run(self.connection_lost(error))

    async def claim(self, n: int, *, acks_at_least: int | None = None) -> list[AsyncJob] | None:
        """Up to ``n`` jobs (``ConsumerCore.claiming``); with the pending acks
        in the same round trip when there are ``acks_at_least``."""
        jobs = await self.run(self.claiming(n, acks_at_least=acks_at_least))
        self._start_watch()
        return jobs

    async def maintain_when_due(self) -> None:
        """Run the periodic jobs, prune and reap, each when due (``ConsumerCore.maintaining``)."""
        await self.run(self.maintaining())

    async def send_acks(self) -> bool:
        """Send the pending acks (``Acks.sending``); False when the database was unreachable."""
        return await self.run(self.acks.sending())

    async def send_acks_if_due(self) -> None:
        if self.acks.due():
            await self.send_acks()

    async def _notified(self, listen: AsyncConnection) -> None:
        """Return when one of our queues is notified, or the connection broke."""
        try:
            async with contextlib.aclosing(listen.notifies()) as notes:
                async for note in notes:
                    if self.noted(note.channel, note.payload):
                        return
        except psycopg.OperationalError as error:
            await self.run(self.listen_lost(error))

    async def wait(self, *, refresh: bool, respond: bool = True) -> bool:
        """Sleep until there may be work (True), or until poked, stopped or
        something else is due (False); see ``ConsumerCore.preparing_wait``."""
        await self._stop_watch()
        work_at, timeout = await self.run(self.preparing_wait(refresh=refresh, respond=respond))
        notified, self._work_noted = self._work_noted, False
        if not (notified or self.stop.is_set() or self._poked.is_set() or timeout <= 0):
            waiters: list[asyncio.Task[Any]] = [
                asyncio.create_task(self.stop.wait()),
                asyncio.create_task(self._poked.wait()),
            ]
            listen = None
            if self._listen is not None:
                listen = asyncio.create_task(self._notified(self._listen))
                waiters.append(listen)
            try:
                await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                notified = listen is not None and listen.done()
            finally:
                for task in waiters:
                    task.cancel()
                await asyncio.gather(*waiters, return_exceptions=True)
        self._start_watch()
        return await self.run(self.waited(notified=notified, work_at=work_at))

    async def close(self) -> None:
        """Acknowledge what is pending, stop the heartbeats and close the connections."""
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        if self._expiring:
            await asyncio.gather(*self._expiring, return_exceptions=True)
        await self._stop_watch()
        try:
            await self.run(self.acks.closing())
        finally:
            await self.heartbeats.close()
            await self._reset(Reset("listen"))
            await self.work.close()
            if self._heartbeat_source is not self.work:
                await self._heartbeat_source.close()


async def _nothing() -> None:
    """A worker's ``after_ack``: its loop sends the acks in batches."""


def new_connection(settings: WorkerSettings, application_name: str = WORKER_APPLICATION_NAME
                   ) -> AsyncDedicatedConnection:
    """A worker's own async connection (opened at first use)."""
    return AsyncDedicatedConnection(settings.dsn, application_name, prepare=settings.prepare)


def make_consumer(settings: WorkerSettings, stop: asyncio.Event, claim_queues: list[str] | None = None, *,
                  ack_at_once: bool = False, watch_cancels: bool = False) -> Consumer:
    """A consumer with a connection of its own for its work and one for its heartbeats."""
    return Consumer(settings, stop=stop, work=new_connection(settings),
                    heartbeat=new_connection(settings, HEARTBEAT_APPLICATION_NAME),
                    claim_queues=claim_queues, ack_at_once=ack_at_once, watch_cancels=watch_cancels)
