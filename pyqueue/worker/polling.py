"""How long an idle worker waits before it looks for work again.

``poll_interval`` after a claim that found work; after k empty claims in a
row ``poll_interval * 2**k`` up to ``max_poll_interval``, of which a random
half to all ("equal jitter"): a thousand idle workers started together
spread their polls out instead of hitting the server (or a pooler) in step,
and no wait exceeds ``max_poll_interval``. A NOTIFY ends any wait and brings
the interval back, so a listening worker loses nothing by it; one that only
polls (PgBouncer without ``listen_dsn``) picks up a job that arrives after a
quiet spell within ``max_poll_interval``.
"""

from __future__ import annotations

import random

MAX_DOUBLINGS = 30  # 2**30 times any interval is past any cap


class PollBackoff:
    """The wait between an idle worker's polls, stretched by empty claims."""

    def __init__(self, poll_interval: float, max_poll_interval: float | None) -> None:
        self.poll_interval = poll_interval
        self.max_poll_interval = max(poll_interval, max_poll_interval or poll_interval)
        self.empty = 0  # claims in a row that found nothing

    def delay(self) -> float:
        if self.empty == 0:
            return self.poll_interval
        stretched = min(self.max_poll_interval, self.poll_interval * 2.0 ** min(self.empty, MAX_DOUBLINGS))
        return stretched * random.uniform(0.5, 1.0)  # spreading polls out, not a secret

    def claimed(self, found: bool) -> None:
        """A claim came back: with jobs, back to poll_interval; empty, the next wait stretches."""
        self.empty = 0 if found else self.empty + 1

    def notified(self) -> None:
        """Work arrived (a NOTIFY): poll at the base interval again."""
        self.empty = 0
