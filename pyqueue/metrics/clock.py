"""The database's clock as a worker sees it, for the pickup delay.

A job's ``run_at`` is a time on the database's clock; the moment a handler
starts is known on the worker's. The two clocks are never compared
directly (a worker host's clock may be off by seconds). Instead every claim
reads the database's clock: the claim query returns ``lease_seconds``,
``lease_expires_at - clock_timestamp()`` computed by the server as it
returned the rows, so ``lease_expires_at - lease_seconds`` is the database's
time at the claim. :class:`DatabaseClock` keeps that time with the worker's
monotonic time when the claim came back (refreshed at every claim that
returned jobs, so the two clocks never drift apart for long), and later
reads the database's time as ``that time + monotonic seconds since``.

The error is the time the claim's reply took to travel back to the worker
(the database's time is read a little early): the pickup delay may be short
by that one-way latency, never wrong by a clock offset.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime, timedelta

from pyqueue.job import JobRecord


class DatabaseClock:
    """The database's time at a monotonic moment, from the worker's claims."""

    def __init__(self) -> None:
        self._anchor: tuple[float, datetime] | None = None  # (monotonic, database time) of the last claim

    def claimed(self, jobs: Sequence[JobRecord]) -> None:
        """A claim just returned ``jobs``: read the database's time from them."""
        for job in jobs:
            if job.lease_seconds is not None:
                self._anchor = (time.monotonic(), job.lease_expires_at - timedelta(seconds=job.lease_seconds))
                return

    def seconds_since(self, moment: datetime, at: float) -> float | None:
        """Seconds from ``moment`` (a database time) to monotonic ``at`` (0 at
        the least); None before the first claim with jobs."""
        anchor = self._anchor
        if anchor is None:
            return None
        monotonic, database = anchor
        return max(0.0, (database - moment).total_seconds() + (at - monotonic))
