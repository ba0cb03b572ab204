"""Sync workers: :func:`listen` (one loop in the calling thread) and
:class:`Worker` (handlers per queue, run by a thread pool).

Both claim in batches (one round trip per batch), LISTEN on channel
``jobq`` on a dedicated connection and otherwise poll, heartbeat held jobs
from a background thread, reap expired leases every so often (so a
database without pg_cron recovers), reconnect with backoff after the
database goes away, and stop gracefully on SIGTERM/SIGINT: they claim
nothing more, finish the jobs that have started, release the jobs claimed
but not started, and return normally (so the process exits 0).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from types import TracebackType
from typing import TypeVar, overload

from pyqueue._loop import (
    Consumer,
    DedicatedConnection,
    PooledConnections,
    Wakeup,
    run_job,
    stop_on_signals,
)
from pyqueue._queries import default_worker_name
from pyqueue.defaults import (
    BATCH_SIZE,
    CONCURRENCY,
    HEARTBEAT_APPLICATION_NAME,
    POLL_INTERVAL,
    REAP_INTERVAL,
    WORKER_APPLICATION_NAME,
)
from pyqueue.job import Job

__all__ = [
    "BATCH_SIZE",
    "CONCURRENCY",
    "POLL_INTERVAL",
    "REAP_INTERVAL",
    "Handler",
    "JobIterator",
    "Worker",
    "listen",
]

logger = logging.getLogger("pyqueue.worker")

Handler = Callable[[Job], object]
H = TypeVar("H", bound=Handler)


def queue_list(queues: str | Sequence[str]) -> list[str]:
    names = [queues] if isinstance(queues, str) else list(queues)
    if not names:
        raise ValueError("give at least one queue")
    return names


def check_settings(*, batch_size: int, poll_interval: float, concurrency: int = 1) -> None:
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    if not poll_interval > 0:
        raise ValueError(f"poll_interval must be a positive number of seconds, got {poll_interval}")


class JobIterator:
    """The jobs :func:`listen` claims, one at a time, for as long as it runs.

    Acknowledging a yielded job:

    * ``with job:`` around the work completes it when the block ends
      normally, and fails it with the full traceback when the block raises
      (the exception is logged and swallowed, so the loop goes on);
    * or call ``job.complete()``, ``job.fail(error)`` or ``job.release()``;
    * a job left unacknowledged when the loop asks for the next one is
      completed (the loop body finished without raising);
    * a job still unacknowledged when the iterator is closed (``break``, an
      exception escaping the loop, ``close()``, the ``with`` block ending)
      is released: it runs again, without spending an attempt.

    Use it as a context manager so it closes deterministically::

        with pyqueue.listen(dsn, "emails") as jobs:
            for job in jobs:
                with job:
                    send(job.payload)

    Completions are sent in batches; jobs claimed but not yet yielded are
    released when the iterator stops. ``stop()`` (or SIGTERM/SIGINT, or the
    ``stop`` event) ends the iteration after the current job.
    """

    def __init__(
        self,
        dsn: str,
        queues: Sequence[str],
        *,
        batch_size: int,
        lease: timedelta | None,
        poll_interval: float,
        use_listen: bool,
        worker_name: str | None,
        stop: threading.Event | None,
        handle_signals: bool,
        reap_interval: float | None,
    ) -> None:
        check_settings(batch_size=batch_size, poll_interval=poll_interval)
        self.dsn = dsn
        self.queues = list(queues)
        self.batch_size = batch_size
        self.lease = lease
        self.poll_interval = poll_interval
        self.use_listen = use_listen
        self.worker_name = worker_name or default_worker_name()
        self.handle_signals = handle_signals
        self.reap_interval = reap_interval
        self._wakeup = Wakeup(stop)
        self._jobs = self._generate()

    def __iter__(self) -> JobIterator:
        return self

    def __next__(self) -> Job:
        return next(self._jobs)

    def stop(self) -> None:
        """End the iteration after the current job (thread-safe)."""
        self._wakeup.stop()

    def close(self) -> None:
        """Stop now: release unacknowledged jobs, send pending acknowledgements,
        close the connections."""
        try:
            self._jobs.close()
        finally:
            self._wakeup.close()

    def __enter__(self) -> JobIterator:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _consumer(self) -> Consumer:
        prepare = self.use_listen
        return Consumer(
            self.dsn,
            self.queues,
            lease=self.lease,
            poll_interval=self.poll_interval,
            use_listen=self.use_listen,
            worker_name=self.worker_name,
            reap_interval=self.reap_interval,
            wakeup=self._wakeup,
            work=DedicatedConnection(self.dsn, WORKER_APPLICATION_NAME, prepare=prepare),
            heartbeat=DedicatedConnection(self.dsn, HEARTBEAT_APPLICATION_NAME, prepare=prepare),
        )

    def _generate(self) -> Generator[Job, None, None]:
        wakeup = self._wakeup
        with stop_on_signals(self.handle_signals, wakeup):
            consumer = self._consumer()
            held: deque[Job] = deque()
            current: Job | None = None
            try:
                while not wakeup.stopped:
                    consumer.maybe_reap()
                    jobs = consumer.claim(self.batch_size)
                    if jobs is None:
                        continue  # the database was unreachable; backed off, try again
                    held.extend(jobs)
                    while held and not wakeup.stopped:
                        job = held.popleft()
                        if job.lease_lost:
                            continue
                        current = job
                        yield job
                        current = None
                        if not job.acknowledged:
                            consumer.complete_later(job)
                        consumer.flush_if_due()
                    consumer.flush()
                    if len(jobs) < self.batch_size and not wakeup.stopped:
                        consumer.wait()
            finally:
                if current is not None and not current.acknowledged:
                    consumer.release_later(current)
                for job in held:
                    if not job.acknowledged and not job.lease_lost:
                        consumer.release_later(job)
                consumer.close()


@overload
def listen(
    dsn: str,
    queues: str | Sequence[str],
    handler: Handler,
    *,
    batch_size: int = BATCH_SIZE,
    lease: timedelta | None = None,
    poll_interval: float = POLL_INTERVAL,
    use_listen: bool = True,
    worker_name: str | None = None,
    stop: threading.Event | None = None,
    handle_signals: bool = True,
    reap_interval: float | None = REAP_INTERVAL,
) -> None: ...


@overload
def listen(
    dsn: str,
    queues: str | Sequence[str],
    handler: None = None,
    *,
    batch_size: int = BATCH_SIZE,
    lease: timedelta | None = None,
    poll_interval: float = POLL_INTERVAL,
    use_listen: bool = True,
    worker_name: str | None = None,
    stop: threading.Event | None = None,
    handle_signals: bool = True,
    reap_interval: float | None = REAP_INTERVAL,
) -> JobIterator: ...


def listen(
    dsn: str,
    queues: str | Sequence[str],
    handler: Handler | None = None,
    *,
    batch_size: int = BATCH_SIZE,
    lease: timedelta | None = None,
    poll_interval: float = POLL_INTERVAL,
    use_listen: bool = True,
    worker_name: str | None = None,
    stop: threading.Event | None = None,
    handle_signals: bool = True,
    reap_interval: float | None = REAP_INTERVAL,
) -> JobIterator | None:
    """Work the jobs of ``queues``, in the calling thread.

    With a ``handler``, call it for each claimed job until stopped, then
    return None: a return completes the job, an exception fails it with
    the full traceback (and the loop goes on). Without one, return a
    :class:`JobIterator` that yields the claimed jobs (see there for how
    they are acknowledged).

    The loop claims up to ``batch_size`` jobs per round trip. When a claim
    comes back short it sleeps until a NOTIFY for one of its queues, the
    next scheduled job's run_at, or ``poll_interval`` seconds, whichever is
    first. ``use_listen=False`` polls only and turns off prepared
    statements, for PgBouncer in transaction mode. ``lease`` overrides the
    queues' lease; jobs held longer than a third of it are heart-beaten.
    ``reap_interval`` (seconds, None for never) paces the opportunistic
    jobq.reap() calls. Setting ``stop``, or SIGTERM/SIGINT when
    ``handle_signals`` and in the main thread, ends the loop after the
    current job; jobs claimed but not started are released. A second
    signal acts as it would have without the worker.
    """
    jobs = JobIterator(
        dsn,
        queue_list(queues),
        batch_size=batch_size,
        lease=lease,
        poll_interval=poll_interval,
        use_listen=use_listen,
        worker_name=worker_name,
        stop=stop,
        handle_signals=handle_signals,
        reap_interval=reap_interval,
    )
    if handler is None:
        return jobs
    with jobs:
        for job in jobs:
            run_job(job, handler)
    return None


class Worker:
    """Handlers registered per queue, run concurrently by a thread pool.

    ``concurrency`` handler threads share a psycopg_pool ConnectionPool (the
    jobs' own ``complete()``/``heartbeat()``… calls use it too). Threads
    suit I/O-bound handlers; for CPU-bound work run several worker
    processes. The worker holds at most ``max(concurrency, batch_size)``
    jobs: the running ones plus those claimed in the same batch and waiting
    for a thread; every held job is heart-beaten.

    ::

        worker = pyqueue.Worker(dsn, concurrency=8)

        @worker.handler("emails")
        def send_email(job: pyqueue.Job) -> None:
            ...

        worker.run()  # until worker.stop(), SIGTERM or SIGINT

    A stopped worker stays stopped; make a new one to run again.
    """

    def __init__(
        self,
        dsn: str,
        *,
        concurrency: int = CONCURRENCY,
        batch_size: int = BATCH_SIZE,
        lease: timedelta | None = None,
        poll_interval: float = POLL_INTERVAL,
        use_listen: bool = True,
        name: str | None = None,
        reap_interval: float | None = REAP_INTERVAL,
    ) -> None:
        check_settings(batch_size=batch_size, poll_interval=poll_interval, concurrency=concurrency)
        self.dsn = dsn
        self.concurrency = concurrency
        self.batch_size = batch_size
        self.lease = lease
        self.poll_interval = poll_interval
        self.use_listen = use_listen
        self.name = name or default_worker_name()
        self.reap_interval = reap_interval
        self._handlers: dict[str, Handler] = {}
        self._wakeup = Wakeup()
        self._lock = threading.Lock()
        self._held = 0
        self._running = False

    @property
    def queues(self) -> list[str]:
        return list(self._handlers)

    def register(self, queue: str, fn: Handler) -> None:
        """Run ``fn(job)`` for the jobs of ``queue``."""
        if queue in self._handlers:
            raise ValueError(f"queue {queue!r} already has a handler")
        self._handlers[queue] = fn

    def handler(self, queue: str) -> Callable[[H], H]:
        """Decorator form of :meth:`register`."""

        def decorate(fn: H) -> H:
            self.register(queue, fn)
            return fn

        return decorate

    def stop(self) -> None:
        """Stop claiming; ``run()`` returns once the started jobs are done
        (thread-safe, also from a handler)."""
        self._wakeup.stop()

    def run(self, *, handle_signals: bool = True) -> None:
        """Work until :meth:`stop`, or SIGTERM/SIGINT when ``handle_signals``
        (main thread only)."""
        if not self._handlers:
            raise ValueError("register a handler first (worker.register or @worker.handler)")
        with self._lock:
            if self._running:
                raise RuntimeError("a Worker runs once: make a new one to run again")
            self._running = True
        with stop_on_signals(handle_signals, self._wakeup):
            pool = PooledConnections(self.dsn, WORKER_APPLICATION_NAME, size=self.concurrency + 2,
                                     prepare=self.use_listen)
            consumer = Consumer(
                self.dsn,
                self.queues,
                lease=self.lease,
                poll_interval=self.poll_interval,
                use_listen=self.use_listen,
                worker_name=self.name,
                reap_interval=self.reap_interval,
                wakeup=self._wakeup,
                work=pool,
                heartbeat=pool,
            )
            executor = ThreadPoolExecutor(self.concurrency, thread_name_prefix="pyqueue-handler")
            try:
                self._loop(consumer, executor)
            finally:
                self._wakeup.stop()  # queued jobs that have not started are released
                executor.shutdown(wait=True)
                consumer.close()
                self._wakeup.close()

    def _loop(self, consumer: Consumer, executor: ThreadPoolExecutor) -> None:
        limit = max(self.concurrency, self.batch_size)
        while not self._wakeup.stopped:
            consumer.flush()
            consumer.maybe_reap()
            with self._lock:
                room = limit - self._held
            if room > 0:
                n = min(self.batch_size, room)
                jobs = consumer.claim(n)
                if jobs is None:
                    continue  # the database was unreachable; backed off, try again
                for job in jobs:
                    with self._lock:
                        self._held += 1
                    executor.submit(self._execute, consumer, job)
                if len(jobs) == n:
                    continue  # there may be more ready: claim again while there is room
            consumer.wait(for_work=room > 0)

    def _execute(self, consumer: Consumer, job: Job) -> None:
        try:
            if job.lease_lost:
                return
            if self._wakeup.stopped:
                consumer.release_later(job)
                return
            run_job(job, self._handlers[job.queue])
        except BaseException:
            logger.exception("handler of queue %r raised out of job %d", job.queue, job.id)
        finally:
            with self._lock:
                self._held -= 1
            self._wakeup.poke()
