"""Pruning without pg_cron: the workers prune, as they reap.

Where pg_cron does not run ``jobq.prune()`` (see ``jobq.schedule_maintenance``),
nothing else deletes finished jobs past their retention, dead jobs past
``dead_retention``, the key completions ``unique_for`` keeps for a year and the
counters and take bookkeeping that reap does not fold. So every worker that
reaps also calls ``SELECT jobq.prune(n)`` every PRUNE_INTERVAL seconds (with
±10 % jitter; the first call one interval after it starts), PRUNE_BATCH rows
at most per call. Concurrent pruners skip each other's rows, so any number of
workers may do it. jobq lets ``jobq_worker`` prune since 0.4; on an older jobq
(permission denied) the worker stops calling it, quietly. ``reap_interval=None``
turns reaping, and with it pruning, off.
"""

from __future__ import annotations

import logging

import psycopg

from pyqueue.defaults import PRUNE_INTERVAL
from pyqueue.worker.auth import raise_if_fatal
from pyqueue.worker.bookkeeping import Every

logger = logging.getLogger("pyqueue.worker")

PRUNE = "SELECT jobq.prune(%s::integer)"


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
