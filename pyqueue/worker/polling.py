"""How long a worker waits before it tries again: after empty claims
(:class:`PollBackoff`), after the database went away (:class:`Backoff`),
after a NOTIFY (:class:`NotifyThrottle`). Both backoffs are one formula,
:meth:`Backoff.delay`: after k failures a random half to all of
``min(maximum, minimum * 2**(k-1))`` ("equal jitter").

``poll_interval`` after a claim that found work; after k empty claims in a
row ``poll_interval * 2**k`` up to ``max_poll_interval``, of which a random
half to all ("equal jitter"): a thousand idle workers started together
spread their polls out instead of hitting the server (or a pooler) in step,
and no wait exceeds ``max_poll_interval``. A NOTIFY ends any wait and brings
the interval back, so a listening worker loses nothing by it; one that only
polls (PgBouncer without ``listen_dsn``) picks up a job that arrives after a
quiet spell within ``max_poll_interval``.

A NOTIFY is not proof of work: any role that can connect may send
``pg_notify('jobq', queue)`` as often as it likes (PostgreSQL has no
privilege for it). :class:`NotifyThrottle` bounds what that costs. A worker
claims at once on a NOTIFY while fewer than FREE_CLAIMS claims on NOTIFYs
went out since a claim last found jobs (one empty claim is a race another
worker won, not a flood); after that, a claim on a NOTIFY waits until
NOTIFY_WINDOW after the previous one, and every NOTIFY that arrived
meanwhile is answered by that one claim (they are read together, none is
dropped). So the first NOTIFY after a quiet spell, and every NOTIFY while
claims keep finding jobs, is claimed on at once, as before; a flood of empty
NOTIFYs costs at most one claim per window (0.05 s: 20 a second, where an
unthrottled worker made hundreds), and a job enqueued during it waits at
most one window for its claim. The in-transaction modes do not report what
their batches found to the consumer: their claims on NOTIFYs go out at most
one per window, the rest coalesced, once FREE_CLAIMS of them went out.
"""

from __future__ import annotations

import math
import random
import time

from pyqueue.defaults import NOTIFY_WINDOW, RECONNECT_DELAY_MAX, RECONNECT_DELAY_MIN

FREE_CLAIMS = 2  # claims on NOTIFYs made at once since one last found jobs; later ones wait for the window

MAX_DOUBLINGS = 32  # 2**32 times any delay is past any cap


class Backoff:
    """Exponential delays with jitter: after 1, 2, 3 … failures in a row, a
    random half to all of min, 2 min, 4 min … up to max. The reconnection
    backoff as it is; the poll backoff starting from twice the poll interval."""

    def __init__(self, minimum: float = RECONNECT_DELAY_MIN, maximum: float = RECONNECT_DELAY_MAX) -> None:
        self.minimum = minimum
        self.maximum = maximum
        self.failures = 0

    def delay(self) -> float:
        """Seconds to wait after ``failures`` failures (at least one)."""
        ceiling = min(self.maximum, self.minimum * 2.0 ** min(self.failures - 1, MAX_DOUBLINGS))
        return ceiling * random.uniform(0.5, 1.0)  # spreading retries out, not a secret

    def next_delay(self) -> float:
        """Count one more failure; seconds to wait before the next attempt."""
        self.failures += 1
        return self.delay()

    def reset(self) -> None:
        self.failures = 0


class PollBackoff:
    """The wait between an idle worker's polls, stretched by empty claims:
    ``poll_interval`` after a claim that found work, then the :class:`Backoff`
    of ``2 * poll_interval`` up to ``max_poll_interval`` per empty claim."""

    def __init__(self, poll_interval: float, max_poll_interval: float | None) -> None:
        self.poll_interval = poll_interval
        self.max_poll_interval = max(poll_interval, max_poll_interval or poll_interval)
        self._stretch = Backoff(2 * poll_interval, self.max_poll_interval)  # failures: empty claims in a row

    def delay(self) -> float:
        if self._stretch.failures == 0:
            return self.poll_interval
        return self._stretch.delay()

    def claimed(self, found: bool) -> None:
        """A claim came back: with jobs, back to poll_interval; empty, the next wait stretches."""
        if found:
            self._stretch.reset()
        else:
            self._stretch.failures += 1

    def notified(self) -> None:
        """Work arrived (a NOTIFY): poll at the base interval again."""
        self._stretch.reset()


class NotifyThrottle:
    """How long a worker woken by a NOTIFY waits before it claims (see above)."""

    def __init__(self, window: float = NOTIFY_WINDOW) -> None:
        self.window = window
        self._claimed_at = -math.inf  # monotonic: the last claim on a NOTIFY
        self._unproven = 0  # claims on NOTIFYs since a claim last found jobs

    def delay(self) -> float:
        """Seconds to wait before claiming on a NOTIFY received now."""
        if self._unproven < FREE_CLAIMS:
            return 0.0
        return max(0.0, self._claimed_at + self.window - time.monotonic())

    def claiming(self) -> None:
        """A claim on a NOTIFY goes out now."""
        self._claimed_at = time.monotonic()
        self._unproven += 1

    def found(self) -> None:
        """A claim found jobs: the NOTIFYs before it were worth answering."""
        self._unproven = 0
