"""The sync :func:`listen`: one loop in the calling thread that claims jobs in
batches and runs them (or yields them, as a :class:`JobIterator`), or, with
``in_transaction=True``, runs them inside the transactions that take them.
Public through ``pyqueue.worker`` and ``pyqueue``."""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Generator, Sequence
from datetime import timedelta
from types import TracebackType
from typing import Literal, overload

import psycopg

from pyqueue._intx import TxHandler, run_batch
from pyqueue._loop import (
    Consumer,
    DedicatedConnection,
    Wakeup,
    run_job,
    stop_on_signals,
)
from pyqueue._queries import default_worker_name
from pyqueue.defaults import (
    BATCH_SIZE,
    HEARTBEAT_APPLICATION_NAME,
    POLL_INTERVAL,
    REAP_INTERVAL,
    WORKER_APPLICATION_NAME,
)
from pyqueue.job import Job

logger = logging.getLogger("pyqueue.worker")

Handler = Callable[[Job], object]


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
                        consumer.wait(refresh=not jobs)
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
    in_transaction: Literal[False] = False,
) -> None: ...


@overload
def listen(
    dsn: str,
    queues: str | Sequence[str],
    handler: TxHandler,
    *,
    batch_size: int = BATCH_SIZE,
    lease: timedelta | None = None,
    poll_interval: float = POLL_INTERVAL,
    use_listen: bool = True,
    worker_name: str | None = None,
    stop: threading.Event | None = None,
    handle_signals: bool = True,
    reap_interval: float | None = REAP_INTERVAL,
    in_transaction: Literal[True],
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
    handler: Handler | TxHandler | None = None,
    *,
    batch_size: int = BATCH_SIZE,
    lease: timedelta | None = None,
    poll_interval: float = POLL_INTERVAL,
    use_listen: bool = True,
    worker_name: str | None = None,
    stop: threading.Event | None = None,
    handle_signals: bool = True,
    reap_interval: float | None = REAP_INTERVAL,
    in_transaction: bool = False,
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

    ``in_transaction=True`` (with a handler; jobq 0.3) runs each batch
    inside the transaction that takes it: the handler gets a
    :class:`pyqueue.TxJob` whose ``conn`` is that transaction, its writes
    commit together with the job's removal, an exception rolls back that
    job's writes (a savepoint per job) and records a failed attempt, and a
    crash leaves every job of the batch ready again. No lease, no
    heartbeat. A stop ends the loop after the current batch.
    """
    names = queue_list(queues)
    if in_transaction:
        if handler is None:
            raise ValueError("in_transaction=True needs a handler")
        check_settings(batch_size=batch_size, poll_interval=poll_interval)
        _TxLoop(dsn, names, handler, batch_size=batch_size,  # type: ignore[arg-type]
                poll_interval=poll_interval, use_listen=use_listen,
                worker_name=worker_name or default_worker_name(), stop=stop,
                reap_interval=reap_interval).run(handle_signals)
        return None
    jobs = JobIterator(
        dsn,
        names,
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
            run_job(job, handler)  # type: ignore[arg-type]
    return None


class _TxLoop:
    """listen(..., in_transaction=True): batches taken and run in one
    transaction each, queue after queue, on one connection."""

    def __init__(self, dsn: str, queues: list[str], handler: TxHandler, *, batch_size: int,
                 poll_interval: float, use_listen: bool, worker_name: str,
                 stop: threading.Event | None, reap_interval: float | None) -> None:
        self.queues = queues
        self.handler = handler
        self.batch_size = batch_size
        self.wakeup = Wakeup(stop)
        work = DedicatedConnection(dsn, WORKER_APPLICATION_NAME, prepare=use_listen)
        self.consumer = Consumer(dsn, queues, lease=None, poll_interval=poll_interval,
                                 use_listen=use_listen, worker_name=worker_name,
                                 reap_interval=reap_interval, wakeup=self.wakeup, work=work,
                                 heartbeat=work)

    def run(self, handle_signals: bool) -> None:
        consumer, wakeup = self.consumer, self.wakeup
        try:
            with stop_on_signals(handle_signals, wakeup):
                try:
                    while not wakeup.stopped:
                        consumer.maybe_reap()
                        taken = self._round()
                        if taken is None or max(taken) == self.batch_size:
                            continue  # backed off after a lost connection, or more may be ready
                        if not wakeup.stopped:
                            consumer.wait(refresh=max(taken) == 0)
                finally:
                    consumer.close()
        finally:
            wakeup.close()

    def _round(self) -> list[int] | None:
        """One batch per queue; how many jobs each took (None: the connection was lost)."""
        consumer = self.consumer
        consumer.looked()
        taken = []
        for queue in self.queues:
            if self.wakeup.stopped:
                break
            try:
                with consumer.work.connection() as conn:
                    taken.append(run_batch(conn, queue, self.batch_size, self.handler))
            except psycopg.OperationalError as error:
                consumer.connection_lost(error)
                return None
            consumer.connected()
        return taken or [0]
