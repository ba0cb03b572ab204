"""The sync :func:`listen`: one loop in the calling thread that claims jobs in
batches and runs them (or yields them, as a :class:`JobIterator`), or, with
``in_transaction=True``, runs them inside the transactions that take them.
Public through ``pyqueue.worker`` and ``pyqueue``."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING, Literal, overload

import psycopg

from pyqueue import _hooks
from pyqueue.defaults import HEARTBEAT_APPLICATION_NAME, WORKER_APPLICATION_NAME
from pyqueue.job import Job
from pyqueue.worker import settings as _settings
from pyqueue.worker import startup
from pyqueue.worker.connections import DedicatedConnection
from pyqueue.worker.in_transaction import TxHandler, run_batch
from pyqueue.worker.listen_core import HandOut, ListenOptions, ListenSetup, check_listen
from pyqueue.worker.settings import WorkerSettings
from pyqueue.worker.sync_consumer import Consumer, run_job
from pyqueue.worker.wakeup import Wakeup, stop_on_signals

if TYPE_CHECKING:
    from typing_extensions import Unpack

logger = logging.getLogger("pyqueue.worker")

Handler = Callable[[Job], object]


def check_settings(*, batch_size: int, poll_interval: float, concurrency: int = 1) -> None:
    """The older check of three settings (kept for callers); see pyqueue.worker.settings."""
    _settings.check(batch_size=batch_size, poll_interval=poll_interval, concurrency=concurrency)


class JobIterator:
    """The jobs :func:`listen` claims, one at a time, for as long as it runs.

    Acknowledging a yielded job:

    * ``with job:`` around the work completes it when the block ends
      normally, and fails it with the full traceback when the block raises
      (the exception is logged and swallowed, so the loop goes on); either
      way the acknowledgement is sent at once, as the block ends;
    * or call ``job.complete()``, ``job.fail(error)`` or ``job.release()``;
    * a job left unacknowledged when the loop asks for the next one is
      completed (the loop body finished without raising), before the next
      job is handed out;
    * a job still unacknowledged when the iterator is closed is released:
      it runs again, without spending an attempt.

    The iterator is closed, releasing the jobs it claimed but never handed
    out (no attempt spent) and closing its connections, by ``close()``, by
    the end of a ``with`` block around it, and when the loop abandons it:
    ``for job in pyqueue.listen(...)`` followed by ``break``, a ``return``
    or an exception escaping the loop frees the iterator at once (nothing
    in it refers back to it, so CPython does not wait for the garbage
    collector). An iterator kept in a variable lives as long as the
    variable: close it, or better, use it as a context manager::

        with pyqueue.listen(dsn, "emails") as jobs:
            for job in jobs:
                with job:
                    send(job.payload)

    ``stop()`` (or SIGTERM/SIGINT, or the ``stop`` event) ends the iteration
    after the current job.

    Timeouts: a job with an execution timeout that is still in
    your hands when it runs out is failed at once, ``JobTimeout`` recorded
    (an attempt spent), and no longer heart-beaten; what the loop body does
    with it afterwards is discarded. After a stop, a job still in your hands
    ``shutdown_timeout`` seconds later is failed the same way ("shutdown
    timeout") and the jobs held but not handed out are released.
    """

    def __init__(self, setup: ListenSetup, *, stop: threading.Event | None, ack_at_once: bool = True) -> None:
        self.settings = settings = setup.settings
        self.batch_size = setup.batch_size
        self.handle_signals = setup.handle_signals
        # What the iterator was made with, as attributes (as ever).
        self.dsn, self.queues, self.worker_name = settings.dsn, settings.queues, settings.worker_name
        self.lease, self.poll_interval = settings.lease, settings.poll_interval
        self.use_listen, self.reap_interval = settings.use_listen, settings.reap_interval
        self.shutdown_timeout = settings.shutdown_timeout
        self._wakeup = Wakeup(stop)
        dsn, prepare = settings.dsn, settings.prepare
        self._consumer = Consumer(
            settings,
            wakeup=self._wakeup,
            work=DedicatedConnection(dsn, WORKER_APPLICATION_NAME, prepare=prepare),
            heartbeat=DedicatedConnection(dsn, HEARTBEAT_APPLICATION_NAME, prepare=prepare),
            ack_at_once=ack_at_once,
            watch_cancels=True,
        )
        # The generator gets what it needs, not the iterator: no reference
        # cycle, so dropping the iterator closes the generator at once.
        self._jobs = _generate(self._consumer, self._wakeup, self.batch_size, self.handle_signals)

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

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _generate(consumer: Consumer, wakeup: Wakeup, batch_size: int,
              handle_signals: bool) -> Generator[Job, None, None]:
    """The claiming loop of a JobIterator; its ``finally`` runs when the
    generator is closed (explicitly, or when the iterator is dropped)."""
    try:
        with stop_on_signals(handle_signals, wakeup):
            out: HandOut[Job] = HandOut(consumer.running.started, consumer.running.finished)
            try:
                while not wakeup.stopped:
                    consumer.maintain_when_due()
                    jobs = consumer.claim(batch_size)
                    if jobs is None:
                        continue  # the database was unreachable; backed off, try again
                    out.held.extend(jobs)
                    while not wakeup.stopped and (job := out.next()) is not None:
                        yield job
                        if out.returned(job) and consumer.acks.complete_later(job):
                            consumer.acks.after_ack()
                        consumer.send_acks_if_due()
                    consumer.send_acks()
                    if len(jobs) < batch_size and not wakeup.stopped:
                        consumer.wait(refresh=not jobs)
            finally:
                for job in out.left():
                    consumer.acks.release_later(job)
                consumer.close()
    finally:
        wakeup.close()


@overload
def listen(dsn: str, queues: str | Sequence[str], handler: Handler, *, stop: threading.Event | None = None,
           in_transaction: Literal[False] = False, **options: Unpack[ListenOptions]) -> None: ...


@overload
def listen(dsn: str, queues: str | Sequence[str], handler: TxHandler, *, stop: threading.Event | None = None,
           in_transaction: Literal[True], **options: Unpack[ListenOptions]) -> None: ...


@overload
def listen(dsn: str, queues: str | Sequence[str], handler: None = None, *,
           stop: threading.Event | None = None, **options: Unpack[ListenOptions]) -> JobIterator: ...


def listen(dsn: str, queues: str | Sequence[str], handler: Handler | TxHandler | None = None, *,
           stop: threading.Event | None = None, in_transaction: bool = False,
           **options: Unpack[ListenOptions]) -> JobIterator | None:
    """Work the jobs of ``queues``, in the calling thread.

    Options (``pyqueue.worker.listen_core.ListenOptions``, all keyword):
    ``batch_size=10``, ``lease=None``, ``poll_interval=5.0``,
    ``use_listen=True``, ``worker_name=None``, ``stop=None``,
    ``handle_signals=True``, ``reap_interval=30.0``,
    ``shutdown_timeout=30.0``, ``run_schedules=True``,
    ``in_transaction=False`` (the defaults are in ``pyqueue.defaults``).

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

    Before anything else it connects once (``pyqueue.worker.startup``): a
    bad DSN or an unreachable server raises its ``psycopg.OperationalError``
    here, a database without jobq :class:`pyqueue.JobqNotInstalled`; then
    it logs an INFO line saying what starts (and a WARNING for a queue jobq
    has never seen). Connections lost later are retried with backoff.

    Settings are checked here (TypeError / ValueError naming the argument):
    durations (``lease``, ``poll_interval``, ``reap_interval``,
    ``shutdown_timeout``) take a timedelta or a number of seconds (not a
    bool); ``lease`` is 1 second .. 1 day; ``batch_size`` an int 1..1000.

    ``shutdown_timeout`` (seconds, default 30; None: wait without end): once
    stopped, a handler still running that long after the stop has its job
    failed ("shutdown timeout", the attempt counts), the jobs claimed but
    not started are released and nothing is heart-beaten any more. The
    handler runs in the calling thread, which Python cannot interrupt:
    listen() returns when the handler does (a second signal ends the
    process sooner). Use :class:`Worker` when handlers may hang.

    Execution timeouts (``timeout`` on enqueue, or the queue's):
    a handler still running when its job's timeout passes has the job
    failed at once with ``JobTimeout: job ran longer than 0:00:02``
    recorded (retried like any failure), no longer heart-beaten, and its
    eventual result discarded.

    ``run_schedules`` (default True): call jobq.run_schedules() when the
    next worker-run periodic job is due (see ``pyqueue.every``),
    so that periodic jobs run without pg_cron; False leaves it to others.

    ``in_transaction=True`` (with a handler) runs each batch
    inside the transaction that takes it: the handler gets a
    :class:`pyqueue.TxJob` whose ``conn`` is that transaction, its writes
    commit together with the job's removal, an exception rolls back that
    job's writes (a savepoint per job) and records a failed attempt, and a
    crash leaves every job of the batch ready again. No lease, no
    heartbeat. A stop ends the loop after the current batch.
    """
    if in_transaction is True:  # no lease, no shutdown grace: those options are not used
        options = {k: v for k, v in options.items()  # type: ignore[assignment]
                   if k not in ("lease", "shutdown_timeout")}
    setup = check_listen(dsn, queues, handler, options, in_transaction=in_transaction, stop=stop,
                         event=threading.Event, event_name="a threading.Event")
    setup.started(startup.check(dsn))  # raises when it cannot connect, or jobq is not there
    if in_transaction:
        _TxLoop(setup.settings, handler, batch_size=setup.batch_size,  # type: ignore[arg-type]
                stop=stop).run(setup.handle_signals)
        return None
    jobs = JobIterator(setup, stop=stop, ack_at_once=handler is None)
    if handler is None:
        return jobs
    if (tracing := _hooks.consumer) is not None:  # pyqueue.tracing.instrument(): a span per job
        handler = tracing.wrap(",".join(jobs.queues), handler, asynchronous=False)
    with jobs:
        for job in jobs:
            run_job(job, handler)  # type: ignore[arg-type]
    return None


class _TxLoop:
    """listen(..., in_transaction=True): batches taken and run in one
    transaction each, queue after queue, on one connection."""

    def __init__(self, settings: WorkerSettings, handler: TxHandler, *, batch_size: int,
                 stop: threading.Event | None) -> None:
        self.queues = settings.queues
        self.handler = handler
        self.batch_size = batch_size
        self.wakeup = Wakeup(stop)
        work = DedicatedConnection(settings.dsn, WORKER_APPLICATION_NAME, prepare=settings.prepare)
        self.consumer = Consumer(settings, wakeup=self.wakeup, work=work, heartbeat=work)

    def run(self, handle_signals: bool) -> None:
        consumer, wakeup = self.consumer, self.wakeup
        try:
            with stop_on_signals(handle_signals, wakeup):
                try:
                    while not wakeup.stopped:
                        consumer.maintain_when_due()
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
                consumer.reconnect_later(error)
                return None
            consumer.connected()
        return taken or [0]
