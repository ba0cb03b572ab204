"""The sync driver of the consumer (``pyqueue.worker.consumer``): runs its
scripts on psycopg connections, waits on a :class:`Wakeup` (the LISTEN
connection's socket and a self-pipe), and extends leases from a heartbeat
thread. ``listen()`` and ``Worker`` are built on it."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from pyqueue import _queries as q
from pyqueue._db import Claimed, claimed_rows, pipelined, scalar, tuples
from pyqueue.defaults import LISTEN_APPLICATION_NAME
from pyqueue.job import Job
from pyqueue.worker.cancel_watch import CancelWatch
from pyqueue.worker.connections import Connection, ConnectionSource, connect, is_broken
from pyqueue.worker.consumer import ConsumerCore
from pyqueue.worker.scripts import Listen, Op, Pipelined, Reset, Script, Sql, Step, T
from pyqueue.worker.settings import WorkerSettings
from pyqueue.worker.timeouts import RunningJobs
from pyqueue.worker.wakeup import Wakeup

logger = logging.getLogger("pyqueue.worker")

READERS: dict[str, Callable[[Connection, str, Any], Any]] = {
    "scalar": scalar, "tuples": tuples, "claimed": claimed_rows}


class Heartbeater:
    """A background thread that extends the leases of held jobs (running or
    waiting their turn) once a fraction of their lease has passed, in one
    statement for all the jobs due (``ConsumerCore.beating``)."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.book = consumer.book
        self._cond = threading.Condition()
        self._closing = False
        self._thread: threading.Thread | None = None
        self._wakes_at = math.inf  # monotonic time the thread wakes up by itself

    def due_at(self, due: float) -> None:
        """Jobs were added to the book; the first is due at ``due`` (monotonic)."""
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
            due = self.book.take_due()  # and the progress due, taken by beating()
            self.consumer.run(self.consumer.beating(due))

    def close(self) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join()


class Consumer(ConsumerCore[Job, ConnectionSource]):
    """A worker's sync session with jobq (see ``pyqueue.worker.consumer``).

    ``work`` carries the claims and acks, ``heartbeat`` the heartbeats (its
    own thread), ``jobs`` the claimed jobs' own calls (``job.complete()``…;
    default: ``work``). ``wait()`` sleeps until there may be work or
    ``wakeup`` is poked or stopped. ``ack_at_once`` (the plain iterator):
    leaving ``with job:`` sends the job's ack at once.
    """

    def __init__(self, settings: WorkerSettings, *, wakeup: Wakeup, work: ConnectionSource,
                 heartbeat: ConnectionSource, jobs: ConnectionSource | None = None,
                 claim_queues: Sequence[str] | None = None, ack_at_once: bool = False,
                 watch_cancels: bool = False) -> None:
        self.jobs = work if jobs is None else jobs
        super().__init__(settings, self._jobs, work=work, heartbeat=heartbeat,
                         after_ack=self.send_acks if ack_at_once else _nothing, claim_queues=claim_queues)
        self.wakeup = wakeup
        self._listen: Connection | None = None
        # Every use of the LISTEN connection holds it: the CancelWatch thread reads it too.
        self.listen_lock = threading.RLock()
        self._work_noted = False  # the CancelWatch read a NOTIFY of our queues: the next wait ends at once
        self.heartbeats = Heartbeater(self)
        self.book.wake = self.heartbeats.due_at
        # listen(): the handler runs in the loop's own thread, so a thread of
        # its own reads the cancellations meanwhile (a Worker's loop reads
        # them as it waits for its handler threads).
        self.cancel_watch = CancelWatch(self) if watch_cancels and settings.use_listen else None
        # The jobs the handlers run: their execution timeouts and the shutdown grace.
        self.running = RunningJobs(self.acks, self.send_acks,
                                   stopped=lambda: wakeup.stopped, grace=settings.shutdown_timeout)

    def _jobs(self, claimed: Claimed) -> list[Job]:
        return Job._from_claim(claimed, self.jobs.connection, self.acks)

    # --- the I/O of the scripts
    def run(self, script: Script[T]) -> T:
        step = Step(script)
        while step.next():
            try:
                step.result = self._perform(step.op)
            except Exception as error:
                step.error = error
        return step.value

    def _perform(self, op: Op) -> Any:
        if isinstance(op, Sql):
            if op.on == "listen":
                with self.listen_lock:
                    assert self._listen is not None
                    return READERS[op.rows](self._listen, op.query, op.params)
            source = self.work if op.on == "work" else self._heartbeat_source
            with source.connection() as conn:
                return READERS[op.rows](conn, op.query, op.params)
        if isinstance(op, Pipelined):
            with self.work.connection() as conn:
                return pipelined(conn, [(step.query, step.params, step.rows) for step in op.steps])
        if isinstance(op, Reset):
            self._reset(op)
        elif isinstance(op, Listen):
            return self._open_listen()
        else:
            self.wakeup.sleep(op.seconds)
        return None

    def _reset(self, op: Reset) -> None:
        if op.on == "work":
            self.work.reset()
        elif op.on == "heartbeat":
            self._heartbeat_source.reset()
        else:
            with self.listen_lock:
                if self._listen is not None:
                    self._listen.close()
                    self._listen = None

    def _open_listen(self) -> bool:
        with self.listen_lock:
            if not is_broken(self._listen):
                return False
            if self._listen is not None:
                self._listen.close()
                self._listen = None
            conn = connect(self.settings.listen_dsn or self.dsn, LISTEN_APPLICATION_NAME, prepare=True)
            try:
                conn.execute(q.LISTEN)
            except BaseException:
                conn.close()
                raise
            self._listen = conn
        if self.cancel_watch is not None:
            self.cancel_watch.start()
        return True

    # --- what the workers call
    def held(self, jobs: Sequence[Job], claimed_at: float) -> float:
        due = super().held(jobs, claimed_at)
        if jobs:
            self.heartbeats.due_at(due)
        return due

    def looked(self) -> None:
        self.run(self.looking())

    def reconnect_later(self, error: psycopg.Error) -> None:
        """After a lost connection: back off (see ``ConsumerCore.connection_lost``)."""
        self.run(self.connection_lost(error))

    def claim(self, n: int, *, acks_at_least: int | None = None) -> list[Job] | None:
        """Up to ``n`` jobs (``ConsumerCore.claiming``); with the pending acks
        in the same round trip when there are ``acks_at_least``."""
        return self.run(self.claiming(n, acks_at_least=acks_at_least))

    def maintain_when_due(self) -> None:
        """Run the periodic jobs, prune and reap, each when due (``ConsumerCore.maintaining``)."""
        self.run(self.maintaining())

    def send_acks(self) -> bool:
        """Send the pending acks (``Acks.sending``); False when the database was unreachable."""
        return self.run(self.acks.sending())

    def send_acks_if_due(self) -> None:
        if self.acks.due():
            self.send_acks()

    def _notified(self) -> bool:
        """Read what the LISTEN connection received; True if one of our queues got jobs
        (or the connection broke: then the next claim reconnects and catches up).
        Cancellations are acted on as they are read (``ConsumerCore.noted``)."""
        try:
            work = self.read_notes()
        except psycopg.OperationalError as error:
            self.run(self.listen_lost(error))
            return True
        if self._work_noted:
            self._work_noted = False
            return True
        return work

    def read_notes(self) -> bool:
        """Read the notifications received, without waiting (any thread);
        True when one says our queues have work."""
        with self.listen_lock:
            if self._listen is None:
                return False
            notes = list(self._listen.notifies(timeout=0))
        return any([self.noted(note.channel, note.payload) for note in notes])

    def noted_by_watch(self) -> None:
        """The CancelWatch read a NOTIFY of our queues: pass it on to the loop."""
        self._work_noted = True
        self.wakeup.poke()

    def wait(self, *, refresh: bool, respond: bool = True, at_most: float | None = None) -> bool:
        """Sleep until there may be work (True), or until poked, stopped or
        something else is due (False); see ``ConsumerCore.preparing_wait``.
        ``at_most``: seconds to wait at most (a Worker's handler threads to look after)."""
        work_at, timeout = self.run(self.preparing_wait(refresh=refresh, respond=respond))
        if at_most is not None:
            timeout = min(timeout, at_most)
        deadline = time.monotonic() + timeout
        notified = False
        while not self.wakeup.stopped:
            notified = self._notified()
            remaining = deadline - time.monotonic()
            if notified or remaining <= 0:
                break
            fds = [] if self._listen is None else [self._listen.fileno()]
            if not self.wakeup.wait(remaining, fds):
                break
        return self.run(self.waited(notified=notified, work_at=work_at))

    def close(self) -> None:
        """Acknowledge what is pending, stop the heartbeats and close the connections."""
        self.running.close()
        if self.cancel_watch is not None:
            self.cancel_watch.close()
        try:
            self.run(self.acks.closing())
        finally:
            self.heartbeats.close()
            self._reset(Reset("listen"))
            self.work.close()
            if self._heartbeat_source is not self.work:
                self._heartbeat_source.close()


def _nothing() -> None:
    """A worker's ``after_ack``: its loop sends the acks in batches."""


def run_job(job: Job, handler: Callable[[Job], object]) -> None:
    """Run a handler as a unit of work (``with job``): complete on return (its
    return value, unless None, is the job's result), fail with the traceback
    on an exception (or when that value is not JSON)."""
    with job:
        job._returned(handler(job))
