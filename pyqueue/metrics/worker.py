"""A worker's own metrics, served with jobq's over HTTP.

:class:`WorkerMetrics` is the observer (``pyqueue.worker.observer.Observer``) of a
``Worker`` or ``AsyncWorker`` made with ``metrics_port``. Around each
handler of a leased job it records:

- ``pyqueue_pickup_delay_seconds{queue}`` (histogram): the job's ``run_at``
  to its handler's start, on the database's clock (``pyqueue.metrics.clock``):
  how long a due job waited for this worker;
- ``pyqueue_job_duration_seconds{queue,outcome}`` (histogram): the handler's
  run time, by how it ended (:data:`OUTCOMES`, see :func:`outcome`);
- ``pyqueue_jobs_in_flight{queue}`` (gauge): handlers running now. A sync
  handler past its timeout counts until it returns (Python cannot stop a
  thread; it still holds one).

While the worker runs, ``prometheus_client``'s HTTP server serves these and
the database's metrics (:class:`DatabaseCollector`, read at each scrape) on
``http://HOST:PORT/metrics``, from a registry of this worker's own (several
workers in one process do not clash). In-transaction queues are not
observed: their batches commit or roll back as a whole, per transaction.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import Any, TypeVar, cast

from prometheus_client import CollectorRegistry, Gauge, Histogram, start_http_server

from pyqueue.errors import MetricsError
from pyqueue.job import JobRecord
from pyqueue.metrics.clock import DatabaseClock
from pyqueue.metrics.database import DatabaseCollector

logger = logging.getLogger("pyqueue.metrics")

H = TypeVar("H", bound=Callable[..., Any])
# Seconds: from a quick handler to an hour-long one; and from an idle worker's
# milliseconds to a backlog of minutes.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
PICKUP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
OUTCOMES = ("completed", "failed", "timeout", "shutdown", "lease_lost", "acknowledged")


def outcome(job: JobRecord, error: BaseException | None) -> str:
    """How a handler run ended, once it returned (or raised ``error``).

    - ``timeout``: it ran past the job's timeout and the worker failed the job
      (sync: at the timeout, whatever the handler did later; async: cancelled);
    - ``shutdown``: an async handler cancelled by the worker's stop;
    - ``lease_lost``: the lease was gone (reaped or cancelled): nothing it did counts;
    - ``failed``: it raised (the job is retried, or dead when out of attempts);
    - ``acknowledged``: it returned having acknowledged the job itself
      (``job.complete()``, ``fail()``, ``release()`` or ``snooze()``);
    - ``completed``: it returned, and the worker completes the job.
    """
    if job.timed_out:  # told by the worker, not guessed from the run time (its clock starts first)
        return "timeout"
    if isinstance(error, asyncio.CancelledError):
        return "shutdown"
    if job.lease_lost:
        return "lease_lost"
    if error is not None:
        return "failed"
    return "acknowledged" if job.acknowledged else "completed"


class _Queue:
    """The series of one queue, looked up once (``labels()`` takes a lock)."""

    def __init__(self, metrics: WorkerMetrics, queue: str) -> None:
        self.queue, self.clock, self.duration = queue, metrics.clock, metrics.duration
        self.in_flight = metrics.in_flight.labels(queue)
        self.pickup = metrics.pickup.labels(queue)
        self.durations: dict[str, Histogram] = {}  # by outcome, made when first seen

    def ended(self, how: str, seconds: float) -> None:
        self.in_flight.dec()
        if (child := self.durations.get(how)) is None:
            child = self.durations[how] = self.duration.labels(self.queue, how)
        child.observe(seconds)


class _Run:
    """One handler run, watched: ``with _Run(series, job):``."""

    __slots__ = ("job", "series", "started")

    def __init__(self, series: _Queue, job: JobRecord) -> None:
        self.series, self.job = series, job
        self.started = 0.0

    def __enter__(self) -> None:
        self.started = started = time.monotonic()
        self.series.in_flight.inc()
        if (delay := self.series.clock.seconds_since(self.job.run_at, started)) is not None:
            self.series.pickup.observe(delay)

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        seconds = time.monotonic() - self.started
        self.series.ended(outcome(self.job, error), seconds)


class WorkerMetrics:
    """The metrics of one worker, served on ``host:port`` while it runs
    (port 0: a free one, logged and kept in ``bound_port``)."""

    def __init__(self, dsn: str, *, port: int, host: str) -> None:
        self.port, self.host = port, host
        self.bound_port: int | None = None
        self.registry = CollectorRegistry()
        self.duration = Histogram("pyqueue_job_duration_seconds",
                                  "Run time of this worker's handlers, per queue and outcome (completed, "
                                  "failed, timeout, shutdown, lease_lost; acknowledged: by the handler)",
                                  ["queue", "outcome"], buckets=DURATION_BUCKETS, registry=self.registry)
        self.pickup = Histogram("pyqueue_pickup_delay_seconds",
                                "Seconds from a job's run_at to its handler's start in this worker "
                                "(on the database's clock)", ["queue"], buckets=PICKUP_BUCKETS,
                                registry=self.registry)
        self.in_flight = Gauge("pyqueue_jobs_in_flight", "Handlers of this worker running now, per queue",
                               ["queue"], registry=self.registry)
        self.database = DatabaseCollector(dsn)
        self.registry.register(self.database)
        self.clock = DatabaseClock()

    # --- the observer's hooks
    def wrap(self, queue: str, handler: H, *, asynchronous: bool) -> H:
        """``handler``, its runs watched; the queue's series start at 0."""
        series = _Queue(self, queue)
        if asynchronous:
            ahandler = cast(Callable[[JobRecord], Awaitable[object]], handler)

            @functools.wraps(handler)
            async def observed_async(job: JobRecord) -> object:
                with _Run(series, job):
                    return await ahandler(job)

            return cast(H, observed_async)

        @functools.wraps(handler)
        def observed(job: JobRecord) -> object:
            with _Run(series, job):
                return handler(job)

        return cast(H, observed)

    def claimed(self, jobs: Sequence[JobRecord]) -> None:
        self.clock.claimed(jobs)

    @contextmanager
    def serving(self) -> Iterator[None]:
        """Serve ``/metrics`` until the worker stops; MetricsError when the
        address cannot be bound."""
        try:
            server, thread = start_http_server(self.port, self.host, self.registry)
        except OSError as error:
            raise MetricsError(f"cannot serve metrics on {self.host}:{self.port}: {error}") from error
        self.bound_port = server.server_port
        logger.info("serving metrics on http://%s:%d/metrics", self.host, self.bound_port)
        try:
            yield
        finally:
            server.shutdown()
            server.server_close()
            thread.join()
            self.database.close()
