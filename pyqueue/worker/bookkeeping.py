"""The I/O-free bookkeeping of a worker, shared by the sync and async loops:
reconnection backoff, periodic timers, pending acknowledgements and the
heartbeat schedule of held jobs."""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from pyqueue import _arrays as arrays
from pyqueue.defaults import (
    ACK_FLUSH_INTERVAL,
    HEARTBEAT_FRACTION,
    RECONNECT_DELAY_MAX,
    RECONNECT_DELAY_MIN,
)
from pyqueue.job import JobRecord

HEARTBEAT_RETRY_DELAY = 1.0  # seconds before a failed heartbeat is tried again
MIN_LEASE = 1.0  # seconds: jobq's smallest lease and heartbeat extension
ACK_CHUNK = 1000  # acknowledgements sent per statement (jobq caps complete_many at 10000)


class Backoff:
    """Exponential reconnection delays with jitter: min, 2 min, 4 min ... up to max."""

    def __init__(self, minimum: float = RECONNECT_DELAY_MIN, maximum: float = RECONNECT_DELAY_MAX) -> None:
        self.minimum = minimum
        self.maximum = maximum
        self.failures = 0

    def next_delay(self) -> float:
        """Count one more failure; seconds to wait before the next attempt."""
        self.failures += 1
        ceiling = min(self.maximum, self.minimum * 2.0 ** min(self.failures - 1, 32))
        return ceiling * random.uniform(0.5, 1.0)

    def reset(self) -> None:
        self.failures = 0


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


@dataclass
class AckBatch:
    """Acknowledgements taken from :class:`Acks` to be sent together."""

    completes: list[JobRecord] = field(default_factory=list)
    fails: list[tuple[JobRecord, str]] = field(default_factory=list)
    releases: list[JobRecord] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.completes or self.fails or self.releases)

    def jobs(self) -> list[JobRecord]:
        return [*self.completes, *self.releases, *(j for j, _ in self.fails)]

    def complete_args(self, jobs: Sequence[JobRecord]) -> tuple[str, str]:
        """The ids and lease tokens of ``jobs`` (RELEASE_MANY), as array literals."""
        return arrays.bigints([j.id for j in jobs]), arrays.uuids([j.lease_token for j in jobs])

    def fail_args(self, fails: Sequence[tuple[JobRecord, str]]) -> tuple[str, list[str], str]:
        """The ids, errors and lease tokens of ``fails`` (FAIL_MANY)."""
        return (arrays.bigints([j.id for j, _ in fails]), [e for _, e in fails],
                arrays.uuids([j.lease_token for j, _ in fails]))


def chunks(items: Sequence[object], size: int = ACK_CHUNK) -> Iterable[range]:
    """Index ranges of at most ``size`` items."""
    for start in range(0, len(items), size):
        yield range(start, min(start + size, len(items)))


class Acks:
    """Finished jobs waiting to be acknowledged in one batch (thread-safe).

    A job handed over here counts as acknowledged for its holder; if sending
    fails (database unreachable) the batch is put back and sent again later.
    """

    def __init__(self, flush_interval: float = ACK_FLUSH_INTERVAL) -> None:
        self.flush_interval = flush_interval
        self._lock = threading.Lock()
        self._batch = AckBatch()
        self._oldest: float | None = None

    # Each returns False, and adds nothing, when the job was acknowledged
    # already: of a handler finishing and a timeout firing at the same
    # moment, exactly one acknowledgement is sent. Each is one lock and one
    # append (a worker calls complete_later once per job).
    def complete_later(self, job: JobRecord) -> bool:
        with self._lock:  # the batch is looked up under the lock: take() swaps it
            if not self._accepted(job):
                return False
            self._batch.completes.append(job)
        return True

    def fail_later(self, job: JobRecord, error: str) -> bool:
        with self._lock:
            if not self._accepted(job):
                return False
            self._batch.fails.append((job, error))
        return True

    def release_later(self, job: JobRecord) -> bool:
        with self._lock:
            if not self._accepted(job):
                return False
            self._batch.releases.append(job)
        return True

    def expire_later(self, job: JobRecord, error: str) -> bool:
        """``fail_later`` for a job past its timeout: it is marked timed out
        in the same step, before anyone can see it acknowledged."""
        with self._lock:
            if job.acknowledged:
                return False
            job._mark_timed_out()
            self._accepted(job)
            self._batch.fails.append((job, error))
        return True

    def _accepted(self, job: JobRecord) -> bool:
        """Under the lock: mark ``job`` acknowledged (not yet sent), unless it was already."""
        if job.acknowledged:
            return False
        job._mark_acknowledged(sent=False)
        if self._oldest is None:
            self._oldest = time.monotonic()
        return True

    def take(self) -> AckBatch:
        with self._lock:
            batch, self._batch, self._oldest = self._batch, AckBatch(), None
        return batch

    def put_back(self, batch: AckBatch) -> None:
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
            return max(0.0, self._oldest + self.flush_interval - time.monotonic())

    def pending(self) -> int:
        with self._lock:
            b = self._batch
            return len(b.completes) + len(b.fails) + len(b.releases)


@dataclass
class _Held:
    job: JobRecord
    lease: float  # seconds
    next_due: float  # monotonic


class HeartbeatBook:
    """Which held jobs need a heartbeat, and when (thread-safe).

    A job is due when a fraction (HEARTBEAT_FRACTION) of its lease has passed
    since it was claimed or last renewed. A job drops out once its
    acknowledgement has reached the database (a completion waiting in a
    batch keeps its lease alive) or when its lease was lost.
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
                lease = max(job.lease_seconds or MIN_LEASE, MIN_LEASE)
                due = claimed_at + lease * fraction
                held[job.id] = _Held(job, lease, due)
                first = min(first, due)
        return first

    def discard(self, jobs: Iterable[JobRecord]) -> None:
        """Forget jobs whose acknowledgement reached the database."""
        with self._lock:
            pop = self._held.pop
            for job in jobs:
                pop(job.id, None)

    def _prune(self) -> None:
        for job_id in [i for i, h in self._held.items() if h.job._settled or h.job.lease_lost]:
            del self._held[job_id]

    def seconds_until_due(self) -> float | None:
        """None when nothing is held."""
        with self._lock:
            self._prune()
            if not self._held:
                return None
            return max(0.0, min(h.next_due for h in self._held.values()) - time.monotonic())

    def take_due(self) -> list[tuple[JobRecord, timedelta]]:
        """The due jobs, each with the extension to ask for (its own lease)."""
        now = time.monotonic()
        with self._lock:
            self._prune()
            return [(h.job, timedelta(seconds=h.lease)) for h in self._held.values() if h.next_due <= now]

    def jobs(self) -> list[JobRecord]:
        """The held jobs whose acknowledgement has not reached the database."""
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
