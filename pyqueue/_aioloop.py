"""The machinery of the asyncio workers, twin of ``pyqueue._loop``: the same
bookkeeping (``pyqueue._state``) and SQL (``pyqueue._queries``), with
awaitable I/O. ``pyqueue.aio`` builds the public ``listen()`` and
``AsyncWorker`` from these."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import signal
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import psycopg

from pyqueue import _queries as q
from pyqueue._auth import raise_if_fatal
from pyqueue._db import aclaimed_rows, ascalar, atuples, undecodable
from pyqueue._loop import connection_kwargs, lost_connection
from pyqueue._prune import PruneTimer, aprune_due
from pyqueue._schedules import ScheduleTimer, arun_due
from pyqueue._state import AckBatch, Acks, Backoff, Every, HeartbeatBook, chunks
from pyqueue._timeouts import timeout_error
from pyqueue.defaults import FOLLOWER_DELAY, LISTEN_APPLICATION_NAME, REAP_BATCH
from pyqueue.errors import translate_errors
from pyqueue.job import AsyncJob, JobRecord, log_failed

logger = logging.getLogger("pyqueue.worker")

AsyncConnection = psycopg.AsyncConnection[Any]


async def connect(dsn: str, application_name: str, *, prepare: bool) -> AsyncConnection:
    return await psycopg.AsyncConnection.connect(
        dsn, **connection_kwargs(dsn, application_name, prepare=prepare))


def is_broken(conn: AsyncConnection | None) -> bool:
    return conn is None or conn.closed or conn.broken


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


class DedicatedConnection:
    """One async connection, opened on first use and reopened after it broke."""

    def __init__(self, dsn: str, application_name: str, *, prepare: bool) -> None:
        self.dsn = dsn
        self.application_name = application_name
        self.prepare = prepare
        self._conn: AsyncConnection | None = None
        self._lock = asyncio.Lock()

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[AsyncConnection]:
        async with self._lock:
            if is_broken(self._conn):
                await self.reset()
                self._conn = await connect(self.dsn, self.application_name, prepare=self.prepare)
            conn = self._conn
        assert conn is not None
        yield conn

    async def reset(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.close()

    async def close(self) -> None:
        await self.reset()


class Heartbeater:
    """A task extending the leases of held jobs (see ``pyqueue._loop.Heartbeater``)."""

    def __init__(self, source: DedicatedConnection) -> None:
        self.source = source
        self.book = HeartbeatBook()
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def add(self, jobs: Sequence[JobRecord], claimed_at: float) -> None:
        if not jobs:
            return
        self.book.add(jobs, claimed_at)
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
            due = self.book.take_due()
            if due:
                await self._beat(due)

    async def _beat(self, due: list[tuple[JobRecord, timedelta]]) -> None:
        sent_at = time.monotonic()
        params = ([j.id for j, _ in due], [j.lease_token for j, _ in due], [e for _, e in due])
        try:
            async with self.source.connection() as conn:
                with translate_errors():
                    rows = await atuples(conn, q.HEARTBEAT_MANY, params)
        except psycopg.Error as error:
            logger.warning("heartbeat of %d job(s) failed, retrying: %s", len(due), error)
            if isinstance(error, psycopg.OperationalError) and lost_connection(error):
                await self.source.reset()
            self.book.retry_later(j for j, _ in due)
            return
        alive = {row[0] for row in rows if row[1]}
        for job, _ in due:
            if job.id in alive:
                self.book.renewed(job, sent_at)
            elif not job.acknowledged:
                job._mark_lease_lost()
                logger.warning("job %d of queue %r lost its lease (reaped or cancelled)", job.id, job.queue)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


class Consumer:
    """A worker's asyncio session with jobq (see ``pyqueue._loop.Consumer``).

    ``poke()`` wakes a ``wait()`` (a handler task finished); ``stop`` ends it.
    """

    def __init__(
        self,
        dsn: str,
        queues: Sequence[str],
        *,
        lease: timedelta | None,
        poll_interval: float,
        use_listen: bool,
        worker_name: str,
        reap_interval: float | None,
        stop: asyncio.Event,
        work: DedicatedConnection,
        heartbeat: DedicatedConnection,
        claim_queues: Sequence[str] | None = None,
        run_schedules: bool = False,
        ack_at_once: bool = False,
    ) -> None:
        self.dsn = dsn
        self.queues = list(queues)  # listened to, and asked next_run_at for
        self.claim_queues = self.queues if claim_queues is None else list(claim_queues)
        self._queue_set = set(self.queues)
        self.lease = lease
        self.poll_interval = poll_interval
        self.use_listen = use_listen
        self.worker_name = worker_name
        self.stop = stop
        self.work = work
        self._heartbeat_source = heartbeat
        self.heartbeats = Heartbeater(heartbeat)
        self.acks = Acks()
        self._backoff = Backoff()
        self._reaps = Every(reap_interval)
        self._listen: AsyncConnection | None = None
        self._listen_warned = False  # "cannot LISTEN" was logged; quiet until LISTEN works again
        self._responder = False  # holds its queues' first-responder lock (see wait)
        self._responder_key = ",".join(sorted(self._queue_set))
        self._poked = asyncio.Event()
        self._poll_at = 0.0  # monotonic: look for work by then even without a NOTIFY
        self._next_due = math.inf  # monotonic: the next scheduled job's run_at, as last asked
        self.schedules = ScheduleTimer(run_schedules)
        self.prunes = PruneTimer(reap_interval)
        self.ack_at_once = ack_at_once  # flush each completion or failure at once (the plain iterator)
        self._timers: dict[int, asyncio.TimerHandle] = {}  # execution timeouts of the iterator's jobs
        self._expiring: set[asyncio.Task[bool]] = set()

    def complete_later(self, job: JobRecord) -> None:
        self.acks.complete_later(job)

    def fail_later(self, job: JobRecord, error: str) -> None:
        self.acks.fail_later(job, error)

    def release_later(self, job: JobRecord) -> None:
        self.acks.release_later(job)

    async def after_ack(self) -> None:
        """Called by ``async with job:`` after it acknowledged the job: the plain
        iterator sends the acknowledgement at once."""
        if self.ack_at_once:
            await self.flush()

    def watch(self, job: JobRecord) -> None:
        """The plain iterator handed ``job`` out: fail it when its timeout
        passes while it is still in the caller's hands (jobq 0.4)."""
        if job.timeout is not None:
            self._timers[job.id] = asyncio.get_running_loop().call_later(
                job.timeout.total_seconds(), self._expire, job, timeout_error(job.timeout))

    def unwatch(self, job: JobRecord) -> None:
        if (timer := self._timers.pop(job.id, None)) is not None:
            timer.cancel()

    def _expire(self, job: JobRecord, error: str) -> None:
        self._timers.pop(job.id, None)
        if self.acks.fail_later(job, error):
            log_failed(job, error)
            task = asyncio.create_task(self.flush())
            self._expiring.add(task)
            task.add_done_callback(self._expiring.discard)

    def poke(self) -> None:
        """Wake ``wait()``; the wake-up stays pending until ``unpoke()``."""
        self._poked.set()

    def unpoke(self) -> None:
        self._poked.clear()

    async def _sleep(self, seconds: float) -> None:
        """Sleep, but not past a stop."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), seconds)

    async def _ensure_listening(self) -> None:
        if not self.use_listen or not is_broken(self._listen):
            return
        await self._close_listen()
        conn = await connect(self.dsn, LISTEN_APPLICATION_NAME, prepare=True)
        try:
            await conn.execute(q.LISTEN)
        except BaseException:
            await conn.close()
            raise
        self._listen = conn

    async def _try_listening(self) -> None:
        """LISTEN if a connection can be had for it; otherwise poll (see the
        sync twin, ``pyqueue._loop.Consumer._try_listening``)."""
        try:
            await self._ensure_listening()
        except psycopg.OperationalError as error:
            raise_if_fatal(error)
            if not self._listen_warned:
                logger.warning("cannot LISTEN (%s); polling every %.1f s meanwhile",
                               str(error).strip() or type(error).__name__, self.poll_interval)
            self._listen_warned = True
        else:
            self._listen_warned = False

    async def _close_listen(self) -> None:
        self._responder = False  # a session lock: gone with its connection
        if self._listen is not None:
            conn, self._listen = self._listen, None
            await conn.close()

    async def _answer_for_duty(self, respond: bool) -> None:
        """Take or give up the first-responder lock (see the sync twin)."""
        if self._listen is None or respond == self._responder:
            return
        try:
            if respond:
                self._responder = bool(await ascalar(self._listen, q.RESPONDER_LOCK, (self._responder_key,)))
            else:
                await ascalar(self._listen, q.RESPONDER_UNLOCK, (self._responder_key,))
                self._responder = False
        except psycopg.OperationalError as error:
            logger.warning("LISTEN connection lost: %s", str(error).strip())
            await self._close_listen()

    async def _reset_if_lost(self, error: psycopg.Error) -> None:
        if lost_connection(error):
            await self.work.reset()

    async def connection_lost(self, error: psycopg.Error) -> None:
        raise_if_fatal(error)  # a wrong password or a missing grant: reconnecting will not help
        delay = self._backoff.next_delay()
        if lost_connection(error):
            logger.warning("database connection lost (%s); reconnecting in %.1f s",
                           str(error).strip() or type(error).__name__, delay)
            await self.work.reset()
            await self._close_listen()
        else:
            logger.warning("claim failed (%s); trying again in %.1f s", str(error).strip(), delay)
        await self._sleep(delay)

    async def claim(self, n: int) -> list[AsyncJob] | None:
        """Up to ``n`` jobs; None when the database was unreachable (after a backoff)."""
        if n <= 0:
            return []
        query, params = q.claim_query(self.claim_queues, n, self.worker_name, self.lease)
        await self.looked()
        try:
            sent_at = time.monotonic()
            async with self.work.connection() as conn:
                with translate_errors():
                    rows = await aclaimed_rows(conn, query, params)
        except psycopg.OperationalError as error:
            await self.connection_lost(error)
            return None
        self.connected()
        jobs = []
        for row in rows:
            job = AsyncJob._claimed(q.split_claimed_row(row), self.work.connection, self)
            if (problem := undecodable(job.payload)) is not None:
                logger.error("job %d of queue %r: %s", job.id, job.queue, problem)
                self.fail_later(job, problem)
                continue
            jobs.append(job)
        self.heartbeats.add(jobs, sent_at)
        return jobs

    async def looked(self) -> None:
        """A claim (or hold) is about to look for work (see the sync twin)."""
        self._poll_at = time.monotonic() + self.poll_interval
        await self._try_listening()

    def connected(self) -> None:
        if self._backoff.failures:
            logger.info("reconnected to the database")
            self._backoff.reset()

    async def maybe_reap(self) -> None:
        """jobq.reap() when due; also jobq.run_schedules() (see pyqueue._schedules)
        and jobq.prune() (see pyqueue._prune)."""
        if self.schedules.due():
            try:
                async with self.work.connection() as conn:
                    await arun_due(self.schedules, conn)
            except psycopg.Error as error:
                if self.schedules.error(error):
                    await self._reset_if_lost(error)
        if self.prunes.due():
            try:
                async with self.work.connection() as conn:
                    await aprune_due(self.prunes, conn)
            except psycopg.Error as error:
                if self.prunes.error(error):
                    await self._reset_if_lost(error)
        if not self._reaps.due():
            return
        self._reaps.restart()
        try:
            async with self.work.connection() as conn:
                with translate_errors():
                    reaped = int(await ascalar(conn, q.REAP, (REAP_BATCH,)))
        except psycopg.Error as error:
            raise_if_fatal(error)
            logger.warning("jobq.reap() failed: %s", error)
            await self._reset_if_lost(error)
            return
        if reaped:
            logger.info("reaped %d job(s) whose lease had expired", reaped)

    async def flush(self) -> bool:
        batch = self.acks.take()
        if not batch:
            return True
        sent = AckBatch()
        try:
            async with self.work.connection() as conn:
                with translate_errors():
                    for part in chunks(batch.completes):
                        jobs = [batch.completes[i] for i in part]
                        done = int(await ascalar(conn, q.COMPLETE_MANY, batch.complete_args(jobs)))
                        sent.completes.extend(jobs)
                        if done < len(jobs):
                            logger.warning("%d of %d finished job(s) had lost their lease: not completed",
                                           len(jobs) - done, len(jobs))
                    for part in chunks(batch.fails):
                        fails = [batch.fails[i] for i in part]
                        await atuples(conn, q.FAIL_MANY, batch.fail_args(fails))
                        sent.fails.extend(fails)
                    for part in chunks(batch.releases):
                        jobs = [batch.releases[i] for i in part]
                        await atuples(conn, q.RELEASE_MANY, batch.complete_args(jobs))
                        sent.releases.extend(jobs)
        except psycopg.OperationalError as error:
            logger.warning("could not acknowledge %d job(s) yet: %s", len(batch.completes), error)
            self.acks.put_back(AckBatch(
                batch.completes[len(sent.completes):],
                batch.fails[len(sent.fails):],
                batch.releases[len(sent.releases):],
            ))
            self._settled(sent)
            await self._reset_if_lost(error)
            return False
        self._settled(sent)
        return True

    def _settled(self, sent: AckBatch) -> None:
        jobs = sent.jobs()
        for job in jobs:
            job._mark_settled()
        self.heartbeats.book.discard(jobs)

    async def flush_if_due(self) -> None:
        if self.acks.seconds_until_due() <= 0:
            await self.flush()

    async def _next_run_in(self) -> float | None:
        try:
            async with self.work.connection() as conn:
                with translate_errors():
                    value = await ascalar(conn, q.NEXT_RUN_IN, (self.queues,))
        except psycopg.OperationalError as error:
            await self._reset_if_lost(error)
            return 0.0
        return None if value is None else max(0.0, float(value))

    async def _notified(self, listen: AsyncConnection) -> None:
        """Return when one of our queues is notified, or the connection broke."""
        try:
            async with contextlib.aclosing(listen.notifies()) as notes:
                async for note in notes:
                    if note.payload in self._queue_set:
                        return
        except psycopg.OperationalError as error:
            logger.warning("LISTEN connection lost: %s", str(error).strip())
            await self._close_listen()

    async def wait(self, *, refresh: bool, respond: bool = True) -> bool:
        """Sleep until there may be work (True: a NOTIFY, the poll interval, the
        next scheduled run_at) or something else happens (False: poked,
        stopped, a reap or a flush due); a worker woken by a NOTIFY that is
        not its queues' first responder waits FOLLOWER_DELAY more; see the
        sync twin."""
        await self._answer_for_duty(respond)
        if refresh:
            next_in = await self._next_run_in()
            self._next_due = math.inf if next_in is None else time.monotonic() + next_in
        work_at = min(self._poll_at, self._next_due)
        now = time.monotonic()
        timeout = min(work_at - now, self._reaps.seconds_left(), self.acks.seconds_until_due(),
                      self.schedules.seconds_left(), self.prunes.seconds_left())
        notified = False
        if not (self.stop.is_set() or self._poked.is_set() or timeout <= 0):
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
        if notified:
            if not self._responder:
                await self._sleep(FOLLOWER_DELAY)
            return True
        if time.monotonic() >= work_at:
            if work_at == self._next_due:
                self._next_due = math.inf
            return True
        return False

    async def close(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        if self._expiring:
            await asyncio.gather(*self._expiring, return_exceptions=True)
        try:
            if not await self.flush() and not await self.flush():
                logger.warning("%d acknowledgement(s) could not be sent: those jobs will run "
                               "again once their lease expires", self.acks.pending())
        finally:
            await self.heartbeats.close()
            await self._close_listen()
            await self.work.close()
            if self._heartbeat_source is not self.work:
                await self._heartbeat_source.close()
