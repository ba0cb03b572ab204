"""The consumer, written once: a worker's session with jobq for a set of queues.

Everything a worker decides lives here, free of I/O: when to claim and what
to do with the rows, how finished jobs are acknowledged in batches, which
leases to extend, when to reap, prune and run the periodic jobs, how long to
wait for work, how to back off when the database goes away. Each of those
is a *script*: a generator that yields the I/O it needs as small values
(:class:`Sql`, :class:`Reset`, :class:`Listen`, :class:`Sleep`) and gets
the result (or the exception) back; the scripts of acks, heartbeats and
maintenance live beside it (``acknowledgement``, ``heartbeats``,
``maintenance``). ``sync_consumer`` runs the scripts on psycopg connections
and threads, ``aio_consumer`` on asyncio connections and tasks; those
drivers hold nothing but the I/O. ``tests/test_consumer_core.py`` runs them
against a table of answers, without a database.

A claim opens (or reopens) the LISTEN connection first and then claims, so
after any reconnection the worker catches up at once instead of trusting
that a notification will come. When the database is unreachable it backs
off (exponentially, interruptibly) and the claim returns None. Finished jobs
are acknowledged in batches: see ``acknowledgement``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, Generic, TypeVar

import psycopg

from pyqueue import _queries as q
from pyqueue._db import Claimed, undecodable
from pyqueue.defaults import CANCEL_CHANNEL, FOLLOWER_DELAY
from pyqueue.errors import translate_errors
from pyqueue.job import Event, JobRecord
from pyqueue.worker.acknowledgement import Acks, statements
from pyqueue.worker.auth import raise_if_fatal
from pyqueue.worker.heartbeats import HeartbeatBook, beating
from pyqueue.worker.maintenance import Every, PruneTimer, ScheduleTimer, pruning, reaping, running_schedules
from pyqueue.worker.polling import Backoff, NotifyThrottle, PollBackoff
from pyqueue.worker.scripts import Listen, Pipelined, Reset, Script, Sleep, Sql, lost_connection, reason
from pyqueue.worker.settings import WorkerSettings

logger = logging.getLogger("pyqueue.worker")

J = TypeVar("J", bound=JobRecord)
S = TypeVar("S")  # where the driver gets its connections


# --- the consumer ------------------------------------------------------------------

class ConsumerCore(Generic[J, S]):
    """The state and the scripts of a consumer; a driver subclass runs them.

    ``make_jobs`` turns a claim's rows into the driver's jobs (``Job`` objects
    bound to sync connections, ``AsyncJob`` objects to async ones). ``work`` carries
    the claims and acks, ``heartbeat`` the heartbeats. ``after_ack`` is
    what ``with job:`` calls once it queued the job's ack (``Acks.after_ack``).
    """

    def __init__(self, settings: WorkerSettings, make_jobs: Callable[[Claimed], list[J]], *, work: S,
                 heartbeat: S, after_ack: Callable[[], Any],
                 claim_queues: Sequence[str] | None = None) -> None:
        self.settings = settings
        self.work = work
        self._heartbeat_source = heartbeat
        self.dsn = settings.dsn
        self.queues = list(settings.queues)
        self.claim_queues = self.queues if claim_queues is None else list(claim_queues)
        self._queue_set = set(self.queues)
        self.poll_interval = settings.poll_interval
        self.use_listen = settings.use_listen
        self._make_jobs = make_jobs
        self.book = HeartbeatBook()  # every claimed job not yet acknowledged in the database
        self.acks: Acks[Any] = Acks(self.book, after_ack)
        self._backoff = Backoff()
        self._reaps = Every.spread(settings.reap_interval)  # workers started together reap apart
        self.schedules = ScheduleTimer(settings.run_schedules)
        self.prunes = PruneTimer(settings.reap_interval)
        self.listening = False  # the LISTEN connection is open
        self._listen_warned = False  # "cannot LISTEN" was logged; quiet until LISTEN works again
        self._responder = False  # holds its queues' first-responder lock (see waited)
        self._catch_up = False  # the LISTEN connection was lost: a NOTIFY may have been missed
        self._responder_key = ",".join(sorted(self._queue_set))
        self._poll_at = 0.0  # monotonic: look for work by then even without a NOTIFY
        self._polls = PollBackoff(settings.poll_interval, settings.max_poll_interval)
        self._notifies = NotifyThrottle()  # a NOTIFY flood costs one claim per window (see polling)
        self._next_due = math.inf  # monotonic: the next scheduled job's run_at, as last asked

    def wanted(self, channel_payload: str) -> bool:
        """Whether a NOTIFY payload names one of our queues."""
        return channel_payload in self._queue_set

    def noted(self, channel: str, payload: str) -> bool:
        """A notification the LISTEN connection received: True when it says
        one of our queues has work; a cancellation (CANCEL_CHANNEL) is acted
        on here (see :meth:`cancelled`)."""
        if channel == CANCEL_CHANNEL:
            self.cancelled(payload)
            return False
        return payload in self._queue_set

    def cancelled(self, payload: str) -> None:
        """``jobq.cancel()`` committed for running jobs (``id:lease_token``
        pairs): those this worker holds under that very lease are no longer
        its own. Each moves to LEASE_LOST, which tells its handler
        (``job.cancel_requested``, ``job.cancelled_event``; an async handler's
        task is cancelled); the worker neither completes nor fails it."""
        for pair in payload.split():
            job_id, _, token = pair.partition(":")
            try:
                job = self.book.holding(int(job_id))
            except ValueError:
                continue  # not ours to read: jobq sends only id:token pairs
            if job is not None and str(job.lease_token) == token and job._on(Event.LOSE_LEASE):
                logger.info("job %d of queue %r was cancelled while held: its handler is told to stop, "
                            "no acknowledgement follows", job.id, job.queue)

    # --- connections
    def _closing_listen(self) -> Script[None]:
        self._responder = False  # a session lock: gone with its connection
        self.listening = False
        yield Reset("listen")

    def _trying_to_listen(self) -> Script[None]:
        """LISTEN if a connection can be had for it. LISTEN only wakes the
        worker sooner: when none can be had (a role's CONNECTION LIMIT,
        max_connections), the worker polls and tries again at its next claim.
        A database that is really gone shows up in the claim itself."""
        if not self.use_listen:
            return
        try:
            opened = yield Listen()
        except psycopg.OperationalError as error:
            raise_if_fatal(error)
            self.listening = self._responder = False  # the driver closed what was left of it
            if not self._listen_warned:
                logger.warning("cannot LISTEN (%s); polling every %.1f s meanwhile",
                               reason(error), self.poll_interval)
            self._listen_warned = True
        else:
            if opened:
                self._responder = False  # a session lock: not held on a new connection
            self.listening = True
            self._listen_warned = False

    def listen_lost(self, error: BaseException) -> Script[None]:
        """The LISTEN connection broke: a NOTIFY sent meanwhile is gone, so the
        worker claims as soon as it has room (reopening LISTEN first) instead
        of sleeping until its next poll (``preparing_wait``)."""
        logger.warning("LISTEN connection lost: %s", str(error).strip())
        self._catch_up = True
        yield from self._closing_listen()

    def _answering_for_duty(self, respond: bool) -> Script[None]:
        """Take the first-responder lock of our queues when this worker would
        claim at once (``respond``), give it up when it would not (it is at
        capacity), so that the worker holding it is one that has room."""
        if not self.listening or respond == self._responder:
            return
        try:
            if respond:
                self._responder = bool((yield Sql(q.RESPONDER_LOCK, (self._responder_key,), on="listen")))
            else:
                yield Sql(q.RESPONDER_UNLOCK, (self._responder_key,), on="listen")
                self._responder = False
        except psycopg.OperationalError as error:
            yield from self.listen_lost(error)

    def _reset_if_lost(self, error: psycopg.Error) -> Script[None]:
        if lost_connection(error):
            yield Reset("work")

    def connection_lost(self, error: psycopg.Error) -> Script[None]:
        """Drop the connections if they are gone and sleep a backoff delay
        (interruptibly) before the next attempt."""
        raise_if_fatal(error)  # a wrong password or a missing grant: reconnecting will not help
        delay = self._backoff.next_delay()
        if lost_connection(error):
            logger.warning("database connection lost (%s); reconnecting in %.1f s", reason(error), delay)
            yield Reset("work")
            yield from self._closing_listen()
        else:
            logger.warning("claim failed (%s); trying again in %.1f s", str(error).strip(), delay)
        yield Sleep(delay)

    # --- work
    def looking(self) -> Script[None]:
        """A claim (or take) is about to look for work: the next poll is due a
        poll interval from now; (re)open the LISTEN connection first, so that
        nothing notified from now on is missed."""
        self._poll_at = time.monotonic() + self._polls.delay()
        self._catch_up = False  # this claim finds what a lost NOTIFY announced
        yield from self._trying_to_listen()

    def polled(self, found: bool) -> None:
        """A claim came back, with jobs or empty: when to look next (see
        ``pyqueue.worker.polling``)."""
        self._polls.claimed(found)
        self._poll_at = time.monotonic() + self._polls.delay()
        if found:
            self._notifies.found()

    def connected(self) -> None:
        """A statement went through: reset the reconnection backoff."""
        if self._backoff.failures:
            logger.info("reconnected to the database")
            self._backoff.reset()

    def claiming(self, n: int, *, acks_at_least: int | None = None) -> Script[list[J] | None]:
        """Up to ``n`` jobs; None when the database was unreachable (after a backoff).

        ``acks_at_least``: when that many acks (at least one) are pending, they
        go out ahead of the claim in its round trip (:class:`Pipelined`, one
        implicit transaction: the claim does not step over those jobs' leases,
        and no round trip of their own). When that fails nothing of it is
        done: the acks are put back in front of the pending ones, in order
        (``Acks.put_back``), and either wait for the reconnection (a lost
        connection) or go the usual way at once (``Acks.sending``, which
        completes a refused result one job at a time) before the claim alone.
        """
        if n <= 0:
            return []
        query, params = q.claim_query(self.claim_queues, n, self.settings.worker_name, self.settings.lease)
        yield from self.looking()
        acks = None if acks_at_least is None else self.acks.take_for_claim(acks_at_least)
        claim = Sql(query, params, rows="claimed")
        try:
            sent_at = time.monotonic()
            with translate_errors():
                if acks is None:
                    rows = yield claim
                else:
                    *acked, rows = yield Pipelined((*statements(acks), claim))
        except psycopg.OperationalError as error:
            if acks is not None:
                self.acks.lost_with_claim(acks, error)
            yield from self.connection_lost(error)
            return None
        except Exception:
            if acks is None:
                raise
            self.acks.put_back(acks)
            yield from self.acks.sending()
            return (yield from self.claiming(n))
        if acks is not None:
            self.acks.sent_with_claim(acks, acked)
        self.connected()
        self.polled(bool(rows))
        jobs = self._make_jobs(rows)
        if rows.undecodable:
            jobs = [job for job in jobs if not self._undecodable(job)]
        self.held(jobs, sent_at)
        return jobs

    def _undecodable(self, job: J) -> bool:
        """A job whose payload Python cannot decode is failed at once, not handed out."""
        if (problem := undecodable(job.payload)) is None:
            return False
        logger.error("job %d of queue %r: %s", job.id, job.queue, problem)
        self.acks.fail_later(job, problem)
        return True

    def held(self, jobs: Sequence[J], claimed_at: float) -> float:
        """Jobs to heartbeat from now on; when the first is due (the drivers
        also wake their heartbeater)."""
        return self.book.add(jobs, claimed_at)

    def maintaining(self) -> Script[None]:
        """Run the periodic jobs, prune and reap, each when due (see ``pyqueue.worker.maintenance``)."""
        yield from running_schedules(self.schedules)
        yield from pruning(self.prunes)
        yield from reaping(self._reaps)

    # --- heartbeats
    def beating(self, due: list[tuple[JobRecord, timedelta]]) -> Script[None]:
        """Send the progress due and extend the leases of the ``due`` jobs
        (see ``pyqueue.worker.heartbeats``)."""
        return beating(self.book, due, self.book.take_progress(due))

    # --- waiting
    def _next_run_in(self) -> Script[float | None]:
        try:
            with translate_errors():
                value = yield Sql(q.NEXT_RUN_IN, (self.queues,))
        except psycopg.OperationalError as error:
            yield from self._reset_if_lost(error)
            return 0.0  # look again at once: the claim will reconnect or back off
        return None if value is None else max(0.0, float(value))

    def preparing_wait(self, *, refresh: bool, respond: bool) -> Script[tuple[float, float]]:
        """Before a wait: (monotonic) when there may be work, and how long to
        sleep at most (seconds).

        There may be work at the poll interval since the last claim, or at the
        next scheduled job's run_at; other things due (a reap, a
        batch of acks due, the periodic jobs, a prune) end the wait
        sooner. ``refresh`` (the last claim came back empty) asks the
        database for the next scheduled run_at first; otherwise the one last
        asked for stands (a job that becomes ready now NOTIFYs, and an empty
        claim follows it; a retry in backoff does not since jobq 0.11, so an
        idle worker finds it by the poll, the failing worker by its own next
        claim). ``respond``: this worker would claim at once (it has
        room); only such a worker takes the first-responder lock, and only
        such a worker claims at once after its LISTEN connection was lost
        (``listen_lost``: a NOTIFY may have been missed).
        """
        yield from self._answering_for_duty(respond)
        if refresh:
            next_in = yield from self._next_run_in()
            self._next_due = math.inf if next_in is None else time.monotonic() + next_in
        work_at = min(self._poll_at, self._next_due)
        if self._catch_up and respond:
            work_at = time.monotonic()
        timeout = min(work_at - time.monotonic(), self._reaps.seconds_left(), self.acks.seconds_until_due(),
                      self.schedules.seconds_left(), self.prunes.seconds_left())
        return work_at, timeout

    def waited(self, *, notified: bool, work_at: float) -> Script[bool]:
        """After a wait: True when there may be work (a NOTIFY for one of our
        queues, the poll interval, the next scheduled job's run_at); False
        when something else ended it (poked, stopped, a reap or acks due).

        Every idle worker of a queue is woken by its NOTIFY. The one holding
        the queues' first-responder lock returns at once; the others
        FOLLOWER_DELAY later, so that one job does not have every idle worker
        claim at the same moment (on a small machine the winner would wait
        behind the others' empty claims). Either waits for the end of the
        NOTIFY window when its last claims on NOTIFYs found nothing (a flood
        of empty NOTIFYs, ``polling.NotifyThrottle``).
        """
        if notified:
            self._polls.notified()
            delay = self._notifies.delay()  # after unanswered claims: the end of the last one's window
            if not self._responder:
                delay = max(delay, FOLLOWER_DELAY)
            if delay > 0:
                yield Sleep(delay)
            self._notifies.claiming()
            return True
        if time.monotonic() >= work_at:
            if work_at == self._next_due:
                self._next_due = math.inf  # due now: the claim that follows finds it (or asks again)
            return True
        return False
