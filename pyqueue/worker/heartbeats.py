"""Heartbeats: which held jobs need their lease extended, and when
(:class:`HeartbeatBook`), and the script that extends them (:func:`beating`,
``pyqueue.worker.scripts``): one statement for all the jobs due, run by the
driver's heartbeat thread or task on a connection of its own."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

import psycopg

from pyqueue import _queries as q
from pyqueue.defaults import HEARTBEAT_FRACTION
from pyqueue.errors import translate_errors
from pyqueue.job import NO_HEARTBEAT, Event, JobRecord
from pyqueue.worker.scripts import Reset, Script, Sql, lost_connection

logger = logging.getLogger("pyqueue.worker")

HEARTBEAT_RETRY_DELAY = 1.0  # seconds before a failed heartbeat is tried again
MIN_LEASE = 1.0  # seconds: jobq's smallest lease and heartbeat extension


# A held job's entry in the book: [job, lease (seconds), next due (monotonic)]
# — a list, not an object: one is made for every job claimed.
_JOB, _LEASE, _DUE = 0, 1, 2
_Held = list[Any]


class HeartbeatBook:
    """Which held jobs need a heartbeat, and when (thread-safe).

    A job is due when a fraction (HEARTBEAT_FRACTION) of its lease has passed
    since it was claimed or last renewed. A job drops out once its ack has
    reached the database (an ack waiting in a batch keeps its lease alive:
    ``discard``, or the job's state: ``pyqueue.job.NO_HEARTBEAT``) or when
    its lease was lost.
    """

    def __init__(self, fraction: float = HEARTBEAT_FRACTION) -> None:
        self.fraction = fraction
        self._lock = threading.Lock()
        self._held: dict[int, _Held] = {}

    def add(self, jobs: Iterable[JobRecord], claimed_at: float) -> float:
        """Hold jobs claimed by a request sent at monotonic time ``claimed_at``;
        when the first of them is due (inf when there were none)."""
        first = math.inf
        fraction = self.fraction
        with self._lock:
            held = self._held
            for job in jobs:
                lease = max(job._lease_seconds or MIN_LEASE, MIN_LEASE)
                due = claimed_at + lease * fraction
                held[job.id] = [job, lease, due]
                first = min(first, due)
        return first

    def discard(self, jobs: Iterable[JobRecord]) -> None:
        """Forget jobs whose ack reached the database."""
        with self._lock:
            pop = self._held.pop
            for job in jobs:
                pop(job.id, None)

    def _prune(self) -> None:
        for job_id in [i for i, h in self._held.items() if h[_JOB]._state in NO_HEARTBEAT]:
            del self._held[job_id]

    def seconds_until_due(self) -> float | None:
        """None when nothing is held."""
        with self._lock:
            self._prune()
            if not self._held:
                return None
            return max(0.0, float(min(h[_DUE] for h in self._held.values())) - time.monotonic())

    def take_due(self) -> list[tuple[JobRecord, timedelta]]:
        """The due jobs, each with the extension to ask for (its own lease)."""
        now = time.monotonic()
        with self._lock:
            self._prune()
            return [(h[_JOB], timedelta(seconds=h[_LEASE])) for h in self._held.values() if h[_DUE] <= now]

    def jobs(self) -> list[JobRecord]:
        """The held jobs whose ack has not reached the database."""
        with self._lock:
            self._prune()
            return [h[_JOB] for h in self._held.values()]

    def renewed(self, job: JobRecord, at: float) -> None:
        with self._lock:
            if (held := self._held.get(job.id)) is not None:
                held[_DUE] = at + held[_LEASE] * self.fraction

    def retry_later(self, jobs: Iterable[JobRecord]) -> None:
        later = time.monotonic() + HEARTBEAT_RETRY_DELAY
        with self._lock:
            for job in jobs:
                if (held := self._held.get(job.id)) is not None:
                    held[_DUE] = min(later, held[_DUE] + held[_LEASE] * self.fraction)

    def __len__(self) -> int:
        with self._lock:
            self._prune()
            return len(self._held)


def beating(book: HeartbeatBook, due: list[tuple[JobRecord, timedelta]]) -> Script[None]:
    """Extend the leases of the ``due`` jobs in one statement. A job whose
    lease turns out lost (and that was not acked meanwhile) moves to
    LEASE_LOST (``job.lease_lost``), so the worker skips it if not yet
    started; a failed statement is tried again HEARTBEAT_RETRY_DELAY later."""
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
        elif job._on(Event.LOSE_LEASE):
            logger.warning("job %d of queue %r lost its lease (reaped or cancelled)", job.id, job.queue)
