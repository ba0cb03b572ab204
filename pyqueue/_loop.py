"""The machinery of the sync workers: waking up, connections that come back
after they drop, the heartbeat thread, and the consumer that claims, waits
for work and acknowledges in batches. ``pyqueue.worker`` builds the public
``listen()`` and ``Worker`` from these."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import selectors
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import timedelta
from types import FrameType
from typing import Any, Protocol

import psycopg
from psycopg_pool import ConnectionPool

from pyqueue import _queries as q
from pyqueue._auth import raise_if_fatal
from pyqueue._db import claimed_rows, scalar, tuples, undecodable
from pyqueue._prune import PruneTimer, prune_due
from pyqueue._schedules import ScheduleTimer, run_due
from pyqueue._state import AckBatch, Acks, Backoff, Every, HeartbeatBook, chunks
from pyqueue._timeouts import RunningJobs
from pyqueue.defaults import (
    CONNECT_TIMEOUT,
    FOLLOWER_DELAY,
    LISTEN_APPLICATION_NAME,
    REAP_BATCH,
    STOP_CHECK_INTERVAL,
)
from pyqueue.errors import translate_errors
from pyqueue.job import Job, JobRecord

logger = logging.getLogger("pyqueue.worker")

Connection = psycopg.Connection[Any]


# --- waking up -------------------------------------------------------------

class Wakeup:
    """A stop flag plus a self-pipe, so that a waiting loop wakes at once when
    stopped (by a signal or another thread) or poked (a handler finished).

    A caller-supplied ``threading.Event`` cannot poke the pipe, so when one is
    given it is also checked every STOP_CHECK_INTERVAL seconds.
    """

    def __init__(self, event: threading.Event | None = None) -> None:
        self._external = event is not None
        self.event = event if event is not None else threading.Event()
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        os.set_blocking(self._write_fd, False)
        self._selector = selectors.DefaultSelector()  # kept: no epoll set-up per wait
        self._selector.register(self._read_fd, selectors.EVENT_READ)
        self._closed = False

    @property
    def stopped(self) -> bool:
        return self.event.is_set()

    def stop(self) -> None:
        """Ask the loop to stop (safe from signal handlers and other threads)."""
        self.event.set()
        self.poke()

    def poke(self) -> None:
        """Wake the loop if it waits."""
        if self._closed:
            return
        # A full pipe already holds a wake-up; a closed one has nobody waiting.
        with contextlib.suppress(OSError):
            os.write(self._write_fd, b"\0")

    def _drain(self) -> None:
        try:
            while os.read(self._read_fd, 4096):
                pass
        except BlockingIOError:
            pass

    def wait(self, timeout: float, fds: Sequence[int] = ()) -> list[int]:
        """Sleep up to ``timeout`` seconds. Returns the readable ``fds``, or []
        when the time is up, the loop was poked, or it was stopped."""
        deadline = time.monotonic() + timeout
        selector = self._selector
        for fd in fds:
            selector.register(fd, selectors.EVENT_READ)
        try:
            while not self.stopped:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return []
                if self._external:
                    remaining = min(remaining, STOP_CHECK_INTERVAL)
                events = selector.select(remaining)
                ready = [key.fd for key, _ in events]
                if self._read_fd in ready:
                    self._drain()
                    return []
                if ready:
                    return ready
            return []
        finally:
            for fd in fds:
                selector.unregister(fd)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._selector.close()
            os.close(self._read_fd)
            os.close(self._write_fd)

    def __del__(self) -> None:
        self.close()


@contextmanager
def stop_on_signals(enabled: bool, wakeup: Wakeup) -> Iterator[None]:
    """While in the block, SIGTERM and SIGINT stop ``wakeup`` instead of
    killing the process (main thread only). The first signal puts back the
    previous handlers, so a second one acts as it would have (SIGINT raises
    KeyboardInterrupt, SIGTERM terminates)."""
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[signal.Signals, Any] = {}

    def on_signal(signum: int, frame: FrameType | None) -> None:
        logger.info("%s received: finishing the jobs in hand, claiming no more",
                    signal.Signals(signum).name)
        wakeup.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    for sig in (signal.SIGTERM, signal.SIGINT):
        old = signal.signal(sig, on_signal)
        previous[sig] = signal.SIG_DFL if old is None else old
    try:
        yield
    finally:
        for sig, handler in previous.items():
            if signal.getsignal(sig) is on_signal:
                signal.signal(sig, handler)


# --- connections -------------------------------------------------------------

def connect(dsn: str, application_name: str, *, prepare: bool) -> Connection:
    """An autocommit connection for a worker. ``prepare=False`` turns psycopg's
    prepared statements off (PgBouncer in transaction mode)."""
    return psycopg.connect(dsn, **connection_kwargs(dsn, application_name, prepare=prepare))


def connection_kwargs(dsn: str, application_name: str, *, prepare: bool) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"autocommit": True, "application_name": application_name}
    if not prepare:
        kwargs["prepare_threshold"] = None
    if "connect_timeout" not in psycopg.conninfo.conninfo_to_dict(dsn):
        kwargs["connect_timeout"] = CONNECT_TIMEOUT
    return kwargs


def is_broken(conn: Connection | None) -> bool:
    return conn is None or conn.closed or conn.broken


def lost_connection(error: psycopg.Error) -> bool:
    """Whether an OperationalError means the connection is gone (not, say, a
    lock_timeout or a deadlock, after which the connection is still fine)."""
    return error.sqlstate is None or error.sqlstate.startswith(("08", "57P"))


class ConnectionSource(Protocol):
    """Where a worker gets connections: one dedicated, or a pool."""

    def connection(self) -> AbstractContextManager[Connection]: ...

    def reset(self) -> None:
        """Forget connections that may be broken (after an OperationalError)."""

    def close(self) -> None: ...


class DedicatedConnection:
    """One connection, opened on first use and reopened after it broke."""

    def __init__(self, dsn: str, application_name: str, *, prepare: bool) -> None:
        self.dsn = dsn
        self.application_name = application_name
        self.prepare = prepare
        self._conn: Connection | None = None
        self._lock = threading.Lock()

    @contextmanager
    def connection(self) -> Iterator[Connection]:
        with self._lock:
            if is_broken(self._conn):
                self._close()
                self._conn = connect(self.dsn, self.application_name, prepare=self.prepare)
            conn = self._conn
        assert conn is not None
        yield conn

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def reset(self) -> None:
        with self._lock:
            self._close()

    def close(self) -> None:
        self.reset()


class PooledConnections:
    """A psycopg_pool ConnectionPool shared by a Worker's threads."""

    def __init__(self, dsn: str, application_name: str, *, size: int, prepare: bool) -> None:
        self.pool: ConnectionPool[Connection] = ConnectionPool(
            dsn,
            min_size=1,
            max_size=size,
            kwargs=connection_kwargs(dsn, application_name, prepare=prepare),
            timeout=CONNECT_TIMEOUT,
            name=application_name,
            open=True,
        )

    def connection(self) -> AbstractContextManager[Connection]:
        return self.pool.connection()

    def reset(self) -> None:
        self.pool.check()

    def close(self) -> None:
        self.pool.close()


# --- heartbeats ----------------------------------------------------------------

class Heartbeater:
    """A background thread that extends the leases of held jobs (running or
    waiting their turn) once a fraction of their lease has passed, in one
    statement for all the jobs due. A job whose lease turns out lost is
    marked (``job.lease_lost``) so the worker skips it if not yet started."""

    def __init__(self, source: ConnectionSource) -> None:
        self.source = source
        self.book = HeartbeatBook()
        self._cond = threading.Condition()
        self._closing = False
        self._thread: threading.Thread | None = None
        self._wakes_at = math.inf  # monotonic time the thread wakes up by itself

    def add(self, jobs: Sequence[JobRecord], claimed_at: float) -> None:
        if not jobs:
            return
        due = self.book.add(jobs, claimed_at)
        with self._cond:
            if self._thread is None:
                if self._closing:
                    return
                self._thread = threading.Thread(target=self._run, name="pyqueue-heartbeat", daemon=True)
                self._thread.start()
            elif due >= self._wakes_at:
                return  # the thread looks at the book before these are due: leave it be
            self._wakes_at = due
            self._cond.notify()

    def settled(self, jobs: Sequence[JobRecord]) -> None:
        """Forget jobs whose acknowledgement reached the database."""
        self.book.discard(jobs)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closing:
                    wait = self.book.seconds_until_due()
                    if wait is not None and wait <= 0:
                        break
                    self._wakes_at = math.inf if wait is None else time.monotonic() + wait
                    self._cond.wait(wait)
                self._wakes_at = -math.inf  # busy beating: every add looks again once done
                if self._closing:
                    return
            due = self.book.take_due()
            if due:
                self._beat(due)

    def _beat(self, due: list[tuple[JobRecord, timedelta]]) -> None:
        sent_at = time.monotonic()
        params = ([j.id for j, _ in due], [j.lease_token for j, _ in due], [e for _, e in due])
        try:
            with self.source.connection() as conn, translate_errors():
                rows = tuples(conn, q.HEARTBEAT_MANY, params)
        except psycopg.Error as error:
            logger.warning("heartbeat of %d job(s) failed, retrying: %s", len(due), error)
            if isinstance(error, psycopg.OperationalError) and lost_connection(error):
                self.source.reset()
            self.book.retry_later(j for j, _ in due)
            return
        alive = {row[0] for row in rows if row[1]}
        for job, _ in due:
            if job.id in alive:
                self.book.renewed(job, sent_at)
            elif not job.acknowledged:
                job._mark_lease_lost()
                logger.warning("job %d of queue %r lost its lease (reaped or cancelled)", job.id, job.queue)

    def close(self) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join()


# --- the consumer ----------------------------------------------------------

class Consumer:
    """A worker's session with jobq for a set of queues.

    ``claim()`` opens (or reopens) the LISTEN connection first and then claims,
    so after any reconnection the worker catches up at once instead of
    trusting that a notification will come. When the database is
    unreachable it backs off (exponentially, interruptibly) and returns None.
    ``wait()`` sleeps until a NOTIFY for one of its queues, the next
    scheduled job, the poll interval, the next opportunistic reap, or a
    wake-up, whichever comes first. Finished jobs are acknowledged in
    batches (complete_many, and one statement each for failures and
    releases) by ``flush()``.
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
        wakeup: Wakeup,
        work: ConnectionSource,
        heartbeat: ConnectionSource,
        claim_queues: Sequence[str] | None = None,
        jobs: ConnectionSource | None = None,
        shutdown_timeout: float | None = None,
        run_schedules: bool = False,
        ack_at_once: bool = False,
    ) -> None:
        self.dsn = dsn
        self.queues = list(queues)  # listened to, and asked next_run_at for
        self.claim_queues = self.queues if claim_queues is None else list(claim_queues)
        self._queue_set = set(self.queues)
        self.jobs = work if jobs is None else jobs  # what the claimed jobs' own calls use
        self.lease = lease
        self.poll_interval = poll_interval
        self.use_listen = use_listen
        self.worker_name = worker_name
        self.wakeup = wakeup
        self.work = work
        self._heartbeat_source = heartbeat
        self.heartbeats = Heartbeater(heartbeat)
        self.acks = Acks()
        self._backoff = Backoff()
        self._reaps = Every(reap_interval)
        self._listen: Connection | None = None
        self._listen_warned = False  # "cannot LISTEN" was logged; quiet until LISTEN works again
        self._responder = False  # holds its queues' first-responder lock (see wait)
        self._responder_key = ",".join(sorted(self._queue_set))
        self._poll_at = 0.0  # monotonic: look for work by then even without a NOTIFY
        self._next_due = math.inf  # monotonic: the next scheduled job's run_at, as last asked
        self.schedules = ScheduleTimer(run_schedules)
        self.prunes = PruneTimer(reap_interval)
        self.ack_at_once = ack_at_once  # send each completion or failure at once (the plain iterator)
        # The jobs the handlers run: their execution timeouts and the shutdown grace.
        self.running = RunningJobs(self.acks, self.heartbeats.book, self.flush,
                                   stopped=lambda: wakeup.stopped, grace=shutdown_timeout)

    # Acknowledger: what `with job:` calls for jobs of this consumer. Each
    # adds nothing when the job was acknowledged already (by a timeout).
    def complete_later(self, job: JobRecord) -> None:
        if self.acks.complete_later(job) and self.ack_at_once:
            self.flush()

    def fail_later(self, job: JobRecord, error: str) -> None:
        if self.acks.fail_later(job, error) and self.ack_at_once:
            self.flush()

    def release_later(self, job: JobRecord) -> None:
        self.acks.release_later(job)

    # --- connections
    def _ensure_listening(self) -> None:
        if not self.use_listen or not is_broken(self._listen):
            return
        self._close_listen()
        conn = connect(self.dsn, LISTEN_APPLICATION_NAME, prepare=True)
        try:
            conn.execute(q.LISTEN)
        except BaseException:
            conn.close()
            raise
        self._listen = conn

    def _try_listening(self) -> None:
        """LISTEN if a connection can be had for it. LISTEN only wakes the
        worker sooner: when none can be had (a role's CONNECTION LIMIT,
        max_connections), the worker polls and tries again at its next claim.
        A database that is really gone shows up in the claim itself."""
        try:
            self._ensure_listening()
        except psycopg.OperationalError as error:
            raise_if_fatal(error)
            if not self._listen_warned:
                logger.warning("cannot LISTEN (%s); polling every %.1f s meanwhile",
                               str(error).strip() or type(error).__name__, self.poll_interval)
            self._listen_warned = True
        else:
            self._listen_warned = False

    def _close_listen(self) -> None:
        self._responder = False  # a session lock: gone with its connection
        if self._listen is not None:
            self._listen.close()
            self._listen = None

    def _answer_for_duty(self, respond: bool) -> None:
        """Take the first-responder lock of our queues when this worker would
        claim at once (``respond``), give it up when it would not (it is at
        capacity), so that the worker holding it is one that has room."""
        if self._listen is None or respond == self._responder:
            return
        try:
            if respond:
                self._responder = bool(scalar(self._listen, q.RESPONDER_LOCK, (self._responder_key,)))
            else:
                scalar(self._listen, q.RESPONDER_UNLOCK, (self._responder_key,))
                self._responder = False
        except psycopg.OperationalError as error:
            logger.warning("LISTEN connection lost: %s", str(error).strip())
            self._close_listen()

    def _reset_if_lost(self, error: psycopg.Error) -> None:
        if lost_connection(error):
            self.work.reset()

    def connection_lost(self, error: psycopg.Error) -> None:
        """Drop the connections if they are gone and sleep a backoff delay
        (interruptibly) before the next attempt."""
        raise_if_fatal(error)
        delay = self._backoff.next_delay()
        if lost_connection(error):
            logger.warning("database connection lost (%s); reconnecting in %.1f s",
                           str(error).strip() or type(error).__name__, delay)
            self.work.reset()
            self._close_listen()
        else:
            logger.warning("claim failed (%s); trying again in %.1f s", str(error).strip(), delay)
        self.wakeup.wait(delay)

    # --- work
    def looked(self) -> None:
        """A claim (or take) is about to look for work: the next poll is due a
        poll interval from now; (re)open the LISTEN connection first, so that
        nothing notified from now on is missed."""
        self._poll_at = time.monotonic() + self.poll_interval
        self._try_listening()

    def connected(self) -> None:
        """A statement went through: reset the reconnection backoff."""
        if self._backoff.failures:
            logger.info("reconnected to the database")
            self._backoff.reset()

    def claim(self, n: int) -> list[Job] | None:
        """Up to ``n`` jobs; None when the database was unreachable (after a backoff)."""
        if n <= 0:
            return []
        query, params = q.claim_query(self.claim_queues, n, self.worker_name, self.lease)
        self.looked()
        try:
            sent_at = time.monotonic()
            with self.work.connection() as conn, translate_errors():
                rows = claimed_rows(conn, query, params)
        except psycopg.OperationalError as error:
            self.connection_lost(error)
            return None
        self.connected()
        jobs = []
        for row in rows:
            job = Job._claimed(q.split_claimed_row(row), self.jobs.connection, self)
            if (problem := undecodable(job.payload)) is not None:
                logger.error("job %d of queue %r: %s", job.id, job.queue, problem)
                self.fail_later(job, problem)
                continue
            jobs.append(job)
        self.heartbeats.add(jobs, sent_at)
        return jobs

    def maybe_reap(self) -> None:
        """Call jobq.reap() when the reap interval has passed, so that jobs of
        dead workers come back even without pg_cron. Also runs the worker-run
        periodic jobs when they are due (see pyqueue._schedules), and prunes
        now and then (see pyqueue._prune)."""
        if self.schedules.due():
            try:
                with self.work.connection() as conn:
                    run_due(self.schedules, conn)
            except psycopg.Error as error:
                if self.schedules.error(error):
                    self._reset_if_lost(error)
        if self.prunes.due():
            try:
                with self.work.connection() as conn:
                    prune_due(self.prunes, conn)
            except psycopg.Error as error:
                if self.prunes.error(error):
                    self._reset_if_lost(error)
        if not self._reaps.due():
            return
        self._reaps.restart()
        try:
            with self.work.connection() as conn, translate_errors():
                reaped = int(scalar(conn, q.REAP, (REAP_BATCH,)))
        except psycopg.Error as error:
            raise_if_fatal(error)
            logger.warning("jobq.reap() failed: %s", error)
            self._reset_if_lost(error)  # the next claim reconnects
            return
        if reaped:
            logger.info("reaped %d job(s) whose lease had expired", reaped)

    def flush(self) -> bool:
        """Send the pending acknowledgements; False if the database was unreachable
        (they stay pending)."""
        batch = self.acks.take()
        if not batch:
            return True
        sent = AckBatch()
        try:
            with self.work.connection() as conn, translate_errors():
                for part in chunks(batch.completes):
                    jobs = [batch.completes[i] for i in part]
                    done = int(scalar(conn, q.COMPLETE_MANY, batch.complete_args(jobs)))
                    sent.completes.extend(jobs)
                    if done < len(jobs):
                        logger.warning("%d of %d finished job(s) had lost their lease: not completed",
                                       len(jobs) - done, len(jobs))
                for part in chunks(batch.fails):
                    fails = [batch.fails[i] for i in part]
                    rows = tuples(conn, q.FAIL_MANY, batch.fail_args(fails))
                    sent.fails.extend(fails)
                    self._log_lost("failed", [r[0] for r in rows if not r[1]])
                for part in chunks(batch.releases):
                    jobs = [batch.releases[i] for i in part]
                    rows = tuples(conn, q.RELEASE_MANY, batch.complete_args(jobs))
                    sent.releases.extend(jobs)
                    self._log_lost("released", [r[0] for r in rows if not r[1]])
        except psycopg.OperationalError as error:
            logger.warning("could not acknowledge %d job(s) yet: %s", self.acks.pending(), error)
            self.acks.put_back(AckBatch(  # what was not sent yet, in order
                batch.completes[len(sent.completes):],
                batch.fails[len(sent.fails):],
                batch.releases[len(sent.releases):],
            ))
            self._settled(sent)
            self._reset_if_lost(error)
            return False
        self._settled(sent)
        return True

    def _settled(self, sent: AckBatch) -> None:
        jobs = sent.jobs()
        for job in jobs:
            job._mark_settled()
        self.heartbeats.settled(jobs)

    @staticmethod
    def _log_lost(what: str, ids: list[int]) -> None:
        if ids:
            logger.warning("job(s) %s had lost their lease: not %s", ids, what)

    def flush_if_due(self) -> None:
        if self.acks.seconds_until_due() <= 0:
            self.flush()

    # --- waiting
    def _next_run_in(self) -> float | None:
        try:
            with self.work.connection() as conn, translate_errors():
                value = scalar(conn, q.NEXT_RUN_IN, (self.queues,))
        except psycopg.OperationalError as error:
            self._reset_if_lost(error)
            return 0.0  # look again at once: the claim will reconnect or back off
        return None if value is None else max(0.0, float(value))

    def _drain_notifications(self) -> bool:
        """Read what the LISTEN connection received; True if one of our queues got jobs
        (or the connection broke: then the next claim reconnects and catches up)."""
        if self._listen is None:
            return False
        try:
            notes = list(self._listen.notifies(timeout=0))
        except psycopg.OperationalError as error:
            logger.warning("LISTEN connection lost: %s", str(error).strip())
            self._close_listen()
            return True
        return any(note.payload in self._queue_set for note in notes)

    def wait(self, *, refresh: bool, respond: bool = True) -> bool:
        """Sleep until there may be work, or until something else is due.

        True when there may be work: a NOTIFY for one of our queues, the poll
        interval since the last claim, or the next scheduled job's run_at.
        False when poked (a handler finished), stopped, or when a reap or an
        acknowledgement flush is due. ``refresh`` (the last claim came back
        empty) asks the database for the next scheduled run_at first; otherwise
        the one last asked for stands (any change to the queue NOTIFYs, and an
        empty claim follows it).

        Every idle worker of a queue is woken by its NOTIFY. The one holding
        the queues' first-responder lock returns at once; the others
        FOLLOWER_DELAY later, so that one job does not have every idle worker
        claim at the same moment (on a small machine the winner would wait
        behind the others' empty claims). ``respond``: this worker would
        claim at once (it has room); only such a worker takes the lock.
        """
        self._answer_for_duty(respond)
        if refresh:
            next_in = self._next_run_in()
            self._next_due = math.inf if next_in is None else time.monotonic() + next_in
        work_at = min(self._poll_at, self._next_due)
        other = min(self._reaps.seconds_left(), self.acks.seconds_until_due(), self.schedules.seconds_left(),
                    self.prunes.seconds_left())
        deadline = min(work_at, time.monotonic() + other)
        while not self.wakeup.stopped:
            if self._drain_notifications():
                if not self._responder:
                    self.wakeup.wait(FOLLOWER_DELAY)
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self.wakeup.wait(remaining, self._listen_fds()):
                break
        if time.monotonic() >= work_at:
            if work_at == self._next_due:
                self._next_due = math.inf  # due now: the claim that follows finds it (or asks again)
            return True
        return False

    def _listen_fds(self) -> list[int]:
        return [] if self._listen is None else [self._listen.fileno()]

    def close(self) -> None:
        """Acknowledge what is pending (one more try after a failure), stop the
        heartbeats and close the connections."""
        self.running.close()
        try:
            if not self.flush() and not self.flush():
                logger.warning("%d acknowledgement(s) could not be sent: those jobs will run "
                               "again once their lease expires", self.acks.pending())
        finally:
            self.heartbeats.close()
            self._close_listen()
            self.work.close()
            if self._heartbeat_source is not self.work:
                self._heartbeat_source.close()


def run_job(job: Job, handler: Callable[[Job], object]) -> None:
    """Run a handler as a unit of work (``with job``): complete on return, fail
    with the traceback on an exception."""
    with job:
        handler(job)
