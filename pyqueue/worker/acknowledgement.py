"""Acknowledgement: how a worker's job gets from its handler's end to the
database, all in this module. One word for it: an *ack* (a completion, a
failure or a release).

The path, for the jobs of every worker (``Worker``, ``AsyncWorker``, both
``listen()`` loops):

1. The handler returns or raises inside ``with job:`` (``run_job``, the
   async supervisors, or your loop body). ``Job.__exit__`` (``pyqueue.job``)
   calls :meth:`Acks.complete_later`, or :meth:`Acks.fail_later` with the
   traceback. The worker's other acks come the same way: a job past its
   timeout (:meth:`Acks.expire_later`), a job released unstarted at a stop
   (:meth:`Acks.release_later`).
2. Each moves the job's state (``pyqueue.job.JobState``, changed only by
   ``pyqueue.job.move``) to ACK_QUEUED (TIMED_OUT for a timeout's failure)
   and appends the ack to the pending :class:`AckBatch`, in one step under
   the state lock (which guards the pending batch too). A move the job's state
   refuses adds nothing: of a handler finishing and its timeout firing at
   the same moment, exactly one ack is queued; a job whose lease was lost
   gets none (the database would refuse it).
3. ``job`` then calls :attr:`Acks.after_ack`: the plain iterator sends the
   ack at once; a worker's loop sends a batch's worth, when idle, or once
   the oldest ack waited ACK_FLUSH_INTERVAL (``worker_core.Rounds``).
4. Sending is the script :meth:`Acks.sending` (``pyqueue.worker.scripts``:
   the driver performs the statements it yields): ``COMPLETE_MANY`` (with
   results ``COMPLETE_MANY_RESULTS``, see :func:`_completing`),
   ``FAIL_MANY`` and ``RELEASE_MANY``, ACK_CHUNK jobs a statement. The
   jobs sent are ACKED and no longer heart-beaten; when the database is
   unreachable what was not sent is put back in front of the pending
   acks, in order, and sent at the next try (``closing``: one more).

A job claimed with ``pyqueue.claim()`` has no worker: leaving ``with job:``
sends its ``complete``/``fail`` at once (``Job.__exit__``), and so do its
``job.complete()``, ``fail()``, ``release()`` and ``snooze()`` everywhere.

Results: the server measures a result after compressing it, so
the client cannot tell beforehand whether it fits the queue's
``max_payload_bytes``: when a chunk is refused for a result over it (JQ003,
nothing completed), its jobs are completed one by one and only the job(s)
whose result is too large fail, with an error that says so.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import psycopg

from pyqueue import _arrays as arrays
from pyqueue import _queries as q
from pyqueue.defaults import ACK_FLUSH_INTERVAL
from pyqueue.errors import PayloadTooLarge, translate_errors
from pyqueue.job import STATE_LOCK, Event, JobRecord, log_failed, move, sent
from pyqueue.worker.heartbeats import HeartbeatBook
from pyqueue.worker.scripts import Reset, Script, Sql, lost_connection

logger = logging.getLogger("pyqueue.worker")

R = TypeVar("R")  # what the after_ack hook returns: None (sync), an awaitable (asyncio)
ACK_CHUNK = 1000  # acks sent per statement (jobq caps complete_many at 10000)
TOO_LARGE = PayloadTooLarge.SQLSTATE


@dataclass
class AckBatch:
    """Acks waiting to be sent together, by kind, each in the order queued."""

    completes: list[JobRecord] = field(default_factory=list)
    fails: list[tuple[JobRecord, str]] = field(default_factory=list)
    releases: list[JobRecord] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.completes or self.fails or self.releases)

    def __len__(self) -> int:
        return len(self.completes) + len(self.fails) + len(self.releases)

    def jobs(self) -> list[JobRecord]:
        return [*self.completes, *self.releases, *(j for j, _ in self.fails)]

    def after(self, sent: AckBatch) -> AckBatch:
        """What of this batch was not sent: each kind past its ``sent`` part."""
        return AckBatch(self.completes[len(sent.completes):], self.fails[len(sent.fails):],
                        self.releases[len(sent.releases):])


def _chunks(items: list[Any]) -> list[list[Any]]:
    return [items[start:start + ACK_CHUNK] for start in range(0, len(items), ACK_CHUNK)]


class Acks(Generic[R]):
    """A worker's acks not yet sent (thread-safe), and how they are sent.

    ``held`` is the worker's heartbeat book: a job leaves it once its ack
    reached the database. ``after_ack`` is called by ``with job:`` after it
    queued the job's ack: the plain iterator's sends the acks at once
    (``async``: an awaitable), a worker's does nothing.
    """

    def __init__(self, held: HeartbeatBook, after_ack: Callable[[], R], *,
                 interval: float = ACK_FLUSH_INTERVAL) -> None:
        self.held = held
        self.after_ack = after_ack
        self.interval = interval  # seconds the oldest ack may wait
        self._lock = STATE_LOCK  # the jobs' state lock guards the pending batch too
        self._batch = AckBatch()
        self._oldest: float | None = None  # monotonic: when the oldest pending ack was queued

    # --- queueing (any thread). Each returns False, adding nothing, when the
    # job's state refuses the ack (acked already, or its lease lost); the move
    # and the append are one step under the state lock.
    def complete_later(self, job: JobRecord) -> bool:
        with STATE_LOCK:  # the batch is looked up under the lock: take() swaps it
            if not move(job, Event.QUEUE_ACK):
                return False
            self._batch.completes.append(job)
            if self._oldest is None:
                self._oldest = time.monotonic()
        return True

    def fail_later(self, job: JobRecord, error: str) -> bool:
        with STATE_LOCK:
            if not move(job, Event.QUEUE_FAILURE):
                return False
            self._batch.fails.append((job, error))
            if self._oldest is None:
                self._oldest = time.monotonic()
        return True

    def progress_later(self, job: JobRecord, value: Any) -> bool:
        """Keep a held job's latest progress for its heartbeats to send (see
        ``pyqueue.worker.heartbeats``); False when the job is not held."""
        return self.held.report(job, value)

    def release_later(self, job: JobRecord) -> bool:
        with STATE_LOCK:
            if not move(job, Event.QUEUE_ACK):
                return False
            self._batch.releases.append(job)
            if self._oldest is None:
                self._oldest = time.monotonic()
        return True

    def expire_later(self, job: JobRecord, error: str) -> bool:
        """``fail_later`` for a job past its timeout: TIMED_OUT in the same
        move, before anyone can see it acked otherwise."""
        with STATE_LOCK:
            if not move(job, Event.EXPIRE):
                return False
            self._batch.fails.append((job, error))
            if self._oldest is None:
                self._oldest = time.monotonic()
        return True

    # --- the pending batch
    def take(self) -> AckBatch:
        with self._lock:
            batch, self._batch, self._oldest = self._batch, AckBatch(), None
        return batch

    def put_back(self, batch: AckBatch) -> None:
        """Acks that could not be sent go back in front of those queued since, in order."""
        with self._lock:
            self._batch.completes[:0] = batch.completes
            self._batch.fails[:0] = batch.fails
            self._batch.releases[:0] = batch.releases
            if batch and self._oldest is None:
                self._oldest = time.monotonic()

    def seconds_until_due(self) -> float:
        """inf when nothing waits; else seconds until the oldest waited long enough."""
        with self._lock:
            if self._oldest is None:
                return math.inf
            return max(0.0, self._oldest + self.interval - time.monotonic())

    def due(self) -> bool:
        return self.seconds_until_due() <= 0

    def pending(self) -> int:
        with self._lock:
            return len(self._batch)

    # --- sending (scripts: the driver performs the Sql they yield)
    def sending(self) -> Script[bool]:
        """Send the pending acks; False if the database was unreachable (what
        was not sent is put back, in order, and stays pending)."""
        batch = self.take()
        if not batch:
            return True
        done = AckBatch()  # what went through, so far
        try:
            with translate_errors():
                for jobs in _chunks(batch.completes):
                    completed = yield from _completing(jobs)
                    done.completes.extend(jobs)
                    _log_lost_completions(completed, len(jobs))
                for fails in _chunks(batch.fails):
                    rows = yield _fail_many(fails)
                    done.fails.extend(fails)
                    _log_lost("failed", rows)
                for jobs in _chunks(batch.releases):
                    rows = yield _release_many(jobs)
                    done.releases.extend(jobs)
                    _log_lost("released", rows)
        except psycopg.OperationalError as error:
            self.put_back(batch.after(done))
            # Counted once put back: take() emptied the pending list, so before
            # this it held only what finished meanwhile (0, as often as not).
            logger.warning("could not acknowledge %d job(s) yet: %s", self.pending(), error)
            self._sent(done)
            if lost_connection(error):
                yield Reset("work")
            return False
        self._sent(done)
        return True

    def _sent(self, batch: AckBatch) -> None:
        """Their acks reached the database: ACKED, and no more heartbeats."""
        jobs = batch.jobs()
        sent(jobs)
        self.held.discard(jobs)

    # --- with the next claim, in its round trip (``ConsumerCore.claiming``)
    def take_for_claim(self, minimum: int) -> AckBatch | None:
        """The pending acks, to go out ahead of a claim in its round trip, when
        there are at least ``minimum`` (>= 1) and each kind fits one statement;
        else None, and they stay pending."""
        with self._lock:
            batch = self._batch
            if len(batch) < max(1, minimum) or max(
                    len(batch.completes), len(batch.fails), len(batch.releases)) > ACK_CHUNK:
                return None
            self._batch, self._oldest = AckBatch(), None
        return batch

    def lost_with_claim(self, batch: AckBatch, error: psycopg.Error) -> None:
        """The claim that carried ``batch`` could not reach the database: its
        acks go back in front of the pending ones, in order (as
        :meth:`sending` puts back what it could not send)."""
        self.put_back(batch)
        logger.warning("could not acknowledge %d job(s) yet: %s", self.pending(), error)

    def sent_with_claim(self, batch: AckBatch, results: Sequence[Any]) -> None:
        """The acks of ``batch`` reached the database with a claim; ``results``
        are those of its :func:`statements`, in order."""
        answers = iter(results)
        if batch.completes:
            _log_lost_completions(int(next(answers)), len(batch.completes))
        if batch.fails:
            _log_lost("failed", next(answers))
        if batch.releases:
            _log_lost("released", next(answers))
        self._sent(batch)

    def closing(self) -> Script[None]:
        """Send what is pending (one more try after a failure)."""
        if not (yield from self.sending()) and not (yield from self.sending()):
            logger.warning("%d acknowledgement(s) could not be sent: those jobs will run "
                           "again once their lease expires", self.pending())


def statements(batch: AckBatch) -> list[Sql]:
    """The statements that send ``batch`` (each kind in one: see
    :meth:`Acks.take_for_claim`), completions first, as :meth:`Acks.sending`
    orders them."""
    steps = []
    if batch.completes:
        steps.append(_complete_many(batch.completes))
    if batch.fails:
        steps.append(_fail_many(batch.fails))
    if batch.releases:
        steps.append(_release_many(batch.releases))
    return steps


def _complete_many(jobs: Sequence[JobRecord]) -> Sql:
    """The statement that completes ``jobs``: with their results only when
    some job has one, so that a worker on an older jobq completes as before."""
    results = [j._result for j in jobs]
    if results.count(None) == len(results):
        return Sql(q.COMPLETE_MANY, _ids_and_tokens(jobs))
    return Sql(q.COMPLETE_MANY_RESULTS, (*_ids_and_tokens(jobs), results))


def _fail_many(fails: Sequence[tuple[JobRecord, str]]) -> Sql:
    """The statement that fails the attempts of ``fails`` (job, error)."""
    return Sql(q.FAIL_MANY, (arrays.bigints([j.id for j, _ in fails]), [e for _, e in fails],
                             arrays.uuids([j.lease_token for j, _ in fails])), rows="tuples")


def _release_many(jobs: Sequence[JobRecord]) -> Sql:
    """The statement that releases ``jobs`` unrun."""
    return Sql(q.RELEASE_MANY, _ids_and_tokens(jobs), rows="tuples")


def _ids_and_tokens(jobs: Sequence[JobRecord]) -> tuple[str, str]:
    """The ids and lease tokens of ``jobs``, as array literals."""
    return arrays.bigints([j.id for j in jobs]), arrays.uuids([j.lease_token for j in jobs])


def _completing(jobs: Sequence[JobRecord]) -> Script[int]:
    """Complete ``jobs`` (:func:`_complete_many`); how many still held their
    lease. A refused result: one job at a time (:func:`_completing_one`)."""
    statement = _complete_many(jobs)
    try:
        return int((yield statement))
    except psycopg.Error as error:
        if error.sqlstate != TOO_LARGE or statement.query == q.COMPLETE_MANY:
            raise
    completed = 0
    for job in jobs:
        completed += int((yield from _completing_one(job)))
    return completed


def _completing_one(job: JobRecord) -> Script[bool]:
    """Complete one job; when its result is too large, fail the attempt instead."""
    if job._result is None:
        return bool((yield Sql(q.COMPLETE, (job.id, job.lease_token))))
    try:
        return bool((yield Sql(q.COMPLETE_RESULT, (job.id, job.lease_token, job._result))))
    except psycopg.Error as error:
        if error.sqlstate != TOO_LARGE:
            raise
        message = error.diag.message_primary or str(error)
    text = f"result too large: the handler's result was refused ({message})"
    failed: Any = yield Sql(q.FAIL, (job.id, text, job.lease_token, None))
    if failed:
        log_failed(job, text)
    return False


def _log_lost_completions(completed: int, count: int) -> None:
    if completed < count:
        logger.warning("%d of %d finished job(s) had lost their lease: not completed",
                       count - completed, count)


def _log_lost(what: str, rows: list[tuple[Any, ...]]) -> None:
    if ids := [r[0] for r in rows if not r[1]]:
        logger.warning("job(s) %s had lost their lease: not %s", ids, what)
