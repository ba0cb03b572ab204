"""What a worker does for the database now and then, each when its timer
says so, as scripts of its consumer (``pyqueue.worker.consumer``):

- :func:`running_schedules`: ``jobq.run_schedules()``, the periodic jobs
  without pg_cron. Every worker calls it when it starts and
  again when the time it returned (the next tick of a worker-run schedule)
  has come; otherwise at least every SCHEDULES_CHECK_MAX seconds, to pick
  up new schedules, and never more often than every SCHEDULES_CHECK_MIN
  seconds. jobq enqueues each due tick exactly once however many workers
  call it at the same moment (a missed tick runs once, late; older missed
  ticks are skipped). On a jobq older than 0.4 (no such function) the
  worker stops calling it, quietly. ``run_schedules=False`` turns it off.
- :func:`pruning`: ``jobq.prune(n)``, where pg_cron does not run it (see
  ``jobq.schedule_maintenance``): nothing else deletes finished jobs past
  their retention, dead jobs past ``dead_retention``, the key completions
  ``unique_for`` keeps for a year and the counters and take bookkeeping
  that reap does not fold. Every worker that reaps also prunes every
  PRUNE_INTERVAL seconds (±10 % jitter; the first call one interval after
  it starts), PRUNE_BATCH rows at most per call. Concurrent pruners skip
  each other's rows, so any number of workers may do it. jobq lets
  ``jobq_worker`` prune since 0.4; on an older jobq (permission denied)
  the worker stops calling it, quietly.
- :func:`reaping`: ``jobq.reap(n)`` every reap interval, so that the jobs
  of dead workers come back even without pg_cron; the first at a random
  point of the first interval (workers started together reap apart).
  ``reap_interval=None`` turns reaping, and with it pruning, off.

A failure is logged and tried again later; a lost connection is dropped
(the next claim reconnects); a refused login or grant raises.
"""

from __future__ import annotations

import logging
import math
import random
import time

import psycopg

from pyqueue import _queries as q
from pyqueue.defaults import PRUNE_BATCH, PRUNE_INTERVAL, REAP_BATCH, SCHEDULES_CHECK_MAX, SCHEDULES_CHECK_MIN
from pyqueue.errors import translate_errors
from pyqueue.worker.auth import raise_if_fatal
from pyqueue.worker.scripts import Reset, Script, Sql, lost_connection

logger = logging.getLogger("pyqueue.worker")

PRUNE = "SELECT jobq.prune(%s::integer)"
RETRY_AFTER_ERROR = 5.0  # seconds before calling jobq.run_schedules() again after a failed call


class Every:
    """A periodic deadline on the monotonic clock; ``interval=None`` never fires.

    Intervals carry ±10 % jitter so that many workers started together
    spread their calls out.
    """

    def __init__(self, interval: float | None, *, first_after: float = 0.0) -> None:
        self.interval = interval
        self._next = time.monotonic() + first_after

    @classmethod
    def spread(cls, interval: float | None) -> Every:
        """Due first at a random point of the first interval: workers started
        together (a deployment, a fleet's cold start) would otherwise all run
        it at once, each doing the same work (every reap scanning for the same
        expired leases); the jitter keeps the later deadlines apart."""
        return cls(interval, first_after=random.uniform(0, interval or 0.0))

    def seconds_left(self) -> float:
        if self.interval is None:
            return math.inf
        return max(0.0, self._next - time.monotonic())

    def due(self) -> bool:
        return self.interval is not None and time.monotonic() >= self._next

    def restart(self) -> None:
        if self.interval is not None:
            self._next = time.monotonic() + self.interval * random.uniform(0.9, 1.1)


class ScheduleTimer:
    """When a worker calls jobq.run_schedules() next (monotonic clock)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._next = time.monotonic()  # at once: a worker runs the due ticks when it starts

    def due(self) -> bool:
        return self.enabled and time.monotonic() >= self._next

    def seconds_left(self) -> float:
        if not self.enabled:
            return math.inf
        return max(0.0, self._next - time.monotonic())

    def ran(self, next_in: float | None) -> None:
        """A call returned the next tick in ``next_in`` seconds (None: no schedule)."""
        wait = SCHEDULES_CHECK_MAX if next_in is None else next_in
        self._next = time.monotonic() + min(SCHEDULES_CHECK_MAX, max(SCHEDULES_CHECK_MIN, wait))

    def error(self, error: psycopg.Error) -> bool:
        """Handle a failed call; True when the connection may be lost."""
        if isinstance(error, psycopg.errors.UndefinedFunction):
            self.enabled = False  # jobq before 0.4: never call it again
            logger.debug("jobq.run_schedules() is not installed (jobq older than 0.4): "
                         "this worker runs no periodic jobs")
            return False
        raise_if_fatal(error)
        logger.warning("jobq.run_schedules() failed, trying again in %.0f s: %s",
                       RETRY_AFTER_ERROR, str(error).strip())
        self._next = time.monotonic() + RETRY_AFTER_ERROR
        return isinstance(error, psycopg.OperationalError)


class PruneTimer:
    """When a worker calls jobq.prune() next; off for good once the database refuses."""

    def __init__(self, reap_interval: float | None) -> None:
        interval = None if reap_interval is None else PRUNE_INTERVAL
        self._every = Every(interval, first_after=PRUNE_INTERVAL)

    def due(self) -> bool:
        return self._every.due()

    def seconds_left(self) -> float:
        return self._every.seconds_left()

    def pruned(self, count: object) -> None:
        self._every.restart()
        if count:
            logger.info("pruned %s finished job(s) past their retention", count)

    def error(self, error: psycopg.Error) -> bool:
        """Handle a failed call; True when the connection may be lost."""
        if isinstance(error, psycopg.errors.InsufficientPrivilege | psycopg.errors.UndefinedFunction):
            self._every = Every(None)
            logger.debug("this role may not run jobq.prune() (jobq older than 0.4): "
                         "this worker leaves pruning to pg_cron or an operator")
            return False
        raise_if_fatal(error)
        logger.warning("jobq.prune() failed: %s", str(error).strip())
        self._every.restart()
        return isinstance(error, psycopg.OperationalError)


def running_schedules(schedules: ScheduleTimer) -> Script[None]:
    """Call jobq.run_schedules() if due; it returns when the next tick is."""
    if not schedules.due():
        return
    try:
        with translate_errors():
            value = yield Sql(q.RUN_SCHEDULES)
    except psycopg.Error as error:
        if schedules.error(error):
            yield from _reset_if_lost(error)
        return
    schedules.ran(None if value is None else float(value))


def pruning(prunes: PruneTimer) -> Script[None]:
    """Call jobq.prune() if due."""
    if not prunes.due():
        return
    try:
        with translate_errors():
            prunes.pruned((yield Sql(PRUNE, (PRUNE_BATCH,))))
    except psycopg.Error as error:
        if prunes.error(error):
            yield from _reset_if_lost(error)


def reaping(reaps: Every) -> Script[None]:
    """Call jobq.reap() if due: the jobs whose lease expired go back to their queue."""
    if not reaps.due():
        return
    reaps.restart()
    try:
        with translate_errors():
            reaped = int((yield Sql(q.REAP, (REAP_BATCH,))))
    except psycopg.Error as error:
        raise_if_fatal(error)
        logger.warning("jobq.reap() failed: %s", error)
        yield from _reset_if_lost(error)  # the next claim reconnects
        return
    if reaped:
        logger.info("reaped %d job(s) whose lease had expired", reaped)


def _reset_if_lost(error: psycopg.Error) -> Script[None]:
    if lost_connection(error):
        yield Reset("work")
