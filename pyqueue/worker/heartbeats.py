"""Heartbeats: which held jobs need their lease extended, and when
(:class:`HeartbeatBook`), and the script that extends them (:func:`beating`,
``pyqueue.worker.scripts``): one statement for all the jobs due, run by the
driver's heartbeat thread or task on a connection of its own.

The same thread sends the progress jobs report (``job.report_progress``):
the book keeps each held job's latest value, and sends it with the job's
next heartbeat or PROGRESS_INTERVAL after the last one sent, whichever is
first, so that a handler reporting every few milliseconds costs one write
a second at most."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta

import psycopg
from psycopg.types.json import Jsonb

from pyqueue import _queries as q
from pyqueue.defaults import HEARTBEAT_FRACTION, PROGRESS_INTERVAL
from pyqueue.errors import JobqError, PayloadTooLarge, translate_errors
from pyqueue.job import NO_HEARTBEAT, Event, JobRecord
from pyqueue.worker.scripts import Reset, Script, Sql, lost_connection

logger = logging.getLogger("pyqueue.worker")

HEARTBEAT_RETRY_DELAY = 1.0  # seconds before a failed heartbeat is tried again
MIN_LEASE = 1.0  # seconds: jobq's smallest lease and heartbeat extension


NOTHING = object()  # no progress waiting to be sent


@dataclass(slots=True)
class _Held:
    job: JobRecord
    lease: float  # seconds
    next_due: float  # monotonic
    progress: object = NOTHING  # the latest progress reported and not sent (a Jsonb or None)
    progress_due: float = math.inf  # monotonic: when it is sent at the latest
    progress_sent: float = -math.inf  # monotonic: when the last one was sent


class HeartbeatBook:
    """Which held jobs need a heartbeat, and when (thread-safe).

    A job is due when a fraction (HEARTBEAT_FRACTION) of its lease has passed
    since it was claimed or last renewed. A job drops out once its ack has
    reached the database (an ack waiting in a batch keeps its lease alive:
    ``discard``, or the job's state: ``pyqueue.job.NO_HEARTBEAT``) or when
    its lease was lost.
    """

    def __init__(self, fraction: float = HEARTBEAT_FRACTION,
                 progress_interval: float = PROGRESS_INTERVAL) -> None:
        self.fraction = fraction
        self.progress_interval = progress_interval
        self._lock = threading.Lock()
        self._held: dict[int, _Held] = {}
        # What the driver wakes its heartbeater with: something is due at this monotonic time.
        self.wake: Callable[[float], object] = _nobody

    def holding(self, job_id: int) -> JobRecord | None:
        """The held job of that id, if any."""
        with self._lock:
            held = self._held.get(job_id)
            return None if held is None else held.job

    def report(self, job: JobRecord, value: Jsonb | None) -> bool:
        """Keep ``value`` as the latest progress of a held job, to be sent
        when due (the heartbeater is woken); False when the job is not held."""
        with self._lock:
            held = self._held.get(job.id)
            if held is None or held.job is not job:
                return False
            waiting = held.progress is not NOTHING
            held.progress = value
            if not waiting:
                held.progress_due = max(time.monotonic(), held.progress_sent + self.progress_interval)
            due = held.progress_due
        if not waiting:
            self.wake(due)
        return True

    def take_progress(self, beats: Iterable[tuple[JobRecord, timedelta]]
                      ) -> list[tuple[JobRecord, Jsonb | None]]:
        """The progress to send now: what is due, and what the jobs of
        ``beats`` (heart-beaten now) have waiting."""
        now = time.monotonic()
        beating = {job.id for job, _ in beats}
        taken = []
        with self._lock:
            for held in self._held.values():
                if held.progress is not NOTHING and (held.progress_due <= now or held.job.id in beating):
                    taken.append((held.job, held.progress))
                    held.progress, held.progress_due, held.progress_sent = NOTHING, math.inf, now
        return taken  # type: ignore[return-value]

    def progress_again(self, sent: Iterable[tuple[JobRecord, Jsonb | None]]) -> None:
        """Progress that could not be sent: due again HEARTBEAT_RETRY_DELAY
        from now, unless a newer value was reported meanwhile."""
        later = time.monotonic() + HEARTBEAT_RETRY_DELAY
        with self._lock:
            for job, value in sent:
                if (held := self._held.get(job.id)) is not None and held.progress is NOTHING:
                    held.progress, held.progress_due = value, later

    def add(self, jobs: Iterable[JobRecord], claimed_at: float) -> float:
        """Hold jobs claimed by a request sent at monotonic time ``claimed_at``;
        when the first of them is due (inf when there were none)."""
        first = math.inf
        fraction = self.fraction
        with self._lock:
            held = self._held
            for job in jobs:  # one _Held a job, and nothing else: a claim's every job passes here
                lease = max(job._lease_seconds or MIN_LEASE, MIN_LEASE)
                due = claimed_at + lease * fraction
                held[job.id] = _Held(job, lease, due)
                first = min(first, due)
        return first

    def discard(self, jobs: Iterable[JobRecord]) -> None:
        """Forget jobs whose ack reached the database."""
        with self._lock:
            pop = self._held.pop
            for job in jobs:
                pop(job.id, None)

    def _prune(self) -> None:
        for job_id in [i for i, h in self._held.items() if h.job._state in NO_HEARTBEAT]:
            del self._held[job_id]

    def seconds_until_due(self) -> float | None:
        """None when nothing is held."""
        with self._lock:
            self._prune()
            if not self._held:
                return None
            first = min(min(h.next_due, h.progress_due) for h in self._held.values())
            return max(0.0, first - time.monotonic())

    def take_due(self) -> list[tuple[JobRecord, timedelta]]:
        """The due jobs, each with the extension to ask for (its own lease)."""
        now = time.monotonic()
        with self._lock:
            self._prune()
            return [(h.job, timedelta(seconds=h.lease)) for h in self._held.values() if h.next_due <= now]

    def jobs(self) -> list[JobRecord]:
        """The held jobs whose ack has not reached the database."""
        with self._lock:
            self._prune()
            return [h.job for h in self._held.values()]

    def renewed(self, job: JobRecord, at: float) -> None:
        with self._lock:
            if (held := self._held.get(job.id)) is not None:
                held.next_due = at + held.lease * self.fraction

    def retry_later(self, jobs: Iterable[JobRecord]) -> None:
        later = time.monotonic() + HEARTBEAT_RETRY_DELAY
        with self._lock:
            for job in jobs:
                if (held := self._held.get(job.id)) is not None:
                    held.next_due = min(later, held.next_due + held.lease * self.fraction)

    def __len__(self) -> int:
        with self._lock:
            self._prune()
            return len(self._held)


def _nobody(due: float) -> None:
    """A book's ``wake`` until its driver sets one."""


def lost(job: JobRecord) -> None:
    """A heartbeat or a progress report found the job's lease lost."""
    if job._on(Event.LOSE_LEASE):
        logger.warning("job %d of queue %r lost its lease (reaped or cancelled)", job.id, job.queue)


def sending_progress(book: HeartbeatBook, progress: list[tuple[JobRecord, Jsonb | None]]) -> Script[None]:
    """Send the latest progress of several jobs in one statement. A value
    over its queue's cap (PayloadTooLarge: nothing of the statement stored)
    is dropped with a warning and the others are sent one by one; a failed
    statement leaves them due again a little later (any other error drops
    them, with a warning)."""
    params = ([j.id for j, _ in progress], [j.lease_token for j, _ in progress], [v for _, v in progress])
    try:
        with translate_errors():
            rows = yield Sql(q.PROGRESS_MANY, params, rows="tuples", on="heartbeat")
    except PayloadTooLarge as error:
        if len(progress) == 1:
            job = progress[0][0]
            logger.warning("progress of job %d of queue %r not stored: %s", job.id, job.queue, error.message)
            return
        for one in progress:
            yield from sending_progress(book, [one])
        return
    except psycopg.OperationalError as error:  # the connection, a lock timeout: try again soon
        logger.warning("progress of %d job(s) not sent, retrying: %s", len(progress), error)
        if lost_connection(error):
            yield Reset("heartbeat")
        book.progress_again(progress)
        return
    except (JobqError, psycopg.Error) as error:  # e.g. a jobq before 0.11.0 has no jobq.progress
        logger.warning("progress of %d job(s) not stored: %s", len(progress), error)
        return
    stored = {row[0] for row in rows if row[1]}
    for job, _ in progress:
        if job.id not in stored:
            lost(job)


def beating(book: HeartbeatBook, due: list[tuple[JobRecord, timedelta]],
            progress: list[tuple[JobRecord, Jsonb | None]] | None = None) -> Script[None]:
    """Send the ``progress`` due (:func:`sending_progress`), then extend the
    leases of the ``due`` jobs in one statement. A job whose lease turns out
    lost (and that was not acked meanwhile) moves to LEASE_LOST
    (``job.lease_lost``: its handler is told), so the worker skips it if
    not yet started; a failed statement is tried again
    HEARTBEAT_RETRY_DELAY later."""
    if progress:
        yield from sending_progress(book, progress)
    if not due:
        return
    sent_at = time.monotonic()
    params = ([j.id for j, _ in due], [j.lease_token for j, _ in due], [e for _, e in due])
    try:
        with translate_errors():
            rows = yield Sql(q.HEARTBEAT_MANY, params, rows="tuples", on="heartbeat")
    except psycopg.Error as error:
        logger.warning("heartbeat of %d job(s) failed, retrying: %s", len(due), error)
        if isinstance(error, psycopg.OperationalError) and lost_connection(error):
            yield Reset("heartbeat")
        book.retry_later(j for j, _ in due)
        return
    alive = {row[0] for row in rows if row[1]}
    for job, _ in due:
        if job.id in alive:
            book.renewed(job, sent_at)
        else:
            lost(job)
