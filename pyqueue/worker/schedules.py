"""Periodic jobs without pg_cron (jobq 0.4): the workers run the schedules.

Every worker (sync and async ``Worker``, and the ``listen()`` loops) calls
``SELECT jobq.run_schedules()`` when it starts and again when the time it
returned (the next tick of a worker-run schedule) has come; otherwise at
least every SCHEDULES_CHECK_MAX seconds, to pick up new schedules, and
never more often than every SCHEDULES_CHECK_MIN seconds. jobq enqueues each
due tick exactly once however many workers call it at the same moment (a
missed tick runs once, late; older missed ticks are skipped), so any number
of workers may do this. On a jobq older than 0.4 (no such function) the
worker stops calling it, quietly. ``run_schedules=False`` turns it off.
"""

from __future__ import annotations

import logging
import math
import time

import psycopg

from pyqueue.defaults import SCHEDULES_CHECK_MAX, SCHEDULES_CHECK_MIN
from pyqueue.worker.auth import raise_if_fatal

logger = logging.getLogger("pyqueue.worker")

RETRY_AFTER_ERROR = 5.0  # seconds before calling again after a failed call


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

    def failed(self) -> None:
        self._next = time.monotonic() + RETRY_AFTER_ERROR

    def unavailable(self) -> None:
        """jobq.run_schedules() does not exist (jobq before 0.4): never call it again."""
        self.enabled = False
        logger.debug("jobq.run_schedules() is not installed (jobq older than 0.4): "
                     "this worker runs no periodic jobs")

    def result(self, value: object) -> None:
        self.ran(None if value is None else float(value))  # type: ignore[arg-type]

    def error(self, error: psycopg.Error) -> bool:
        """Handle a failed call; True when the connection may be lost."""
        if isinstance(error, psycopg.errors.UndefinedFunction):
            self.unavailable()
            return False
        raise_if_fatal(error)
        logger.warning("jobq.run_schedules() failed, trying again in %.0f s: %s",
                       RETRY_AFTER_ERROR, str(error).strip())
        self.failed()
        return isinstance(error, psycopg.OperationalError)
