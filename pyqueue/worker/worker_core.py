"""What ``Worker`` and ``AsyncWorker`` share, written once: their settings,
the handlers registered per queue, the decisions of their main loop (when to
claim, to acknowledge, to wait) and the bookkeeping of in-transaction
batches (which queues may have ready jobs, how many batches run, what a
failed batch means). ``sync_worker`` runs the handlers in threads,
``aio_worker`` in tasks; both do their I/O through a consumer."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Generic, Literal, TypeVar, overload

import psycopg

from pyqueue import _hooks
from pyqueue._queries import default_worker_name
from pyqueue.defaults import (
    BATCH_SIZE,
    CONCURRENCY,
    POLL_INTERVAL,
    REAP_INTERVAL,
    SHUTDOWN_TIMEOUT,
    TX_PARALLEL_AFTER,
)
from pyqueue.worker import settings as _settings
from pyqueue.worker import startup
from pyqueue.worker.acknowledgement import Acks
from pyqueue.worker.auth import fatal_error
from pyqueue.worker.observer import METRICS_HOST, make_observer
from pyqueue.worker.polling import Backoff
from pyqueue.worker.scripts import reason
from pyqueue.worker.settings import WorkerSettings

logger = logging.getLogger("pyqueue.worker")

HandlerT = TypeVar("HandlerT", bound=Callable[..., Any])
TxHandlerT = TypeVar("TxHandlerT", bound=Callable[..., Any])


class Rounds:
    """The decisions of a worker's main loop, given how many leased jobs it
    holds (running, or claimed and waiting for a thread or a slot).

    It claims a batch while it holds no more than ``threshold`` (its
    concurrency), so that the handlers do not run dry while it claims; a
    claim that comes back short means the queues are drained for now (and,
    when empty, that the next scheduled run_at is worth asking for before
    waiting). Acknowledgements go out with the next claim, in its round
    trip, when there are enough (:meth:`acks_with_claim`); otherwise a
    batch's worth at a time, when the worker is idle, or once the oldest
    waited long enough.
    """

    def __init__(self, batch: int, threshold: int, leased: bool) -> None:
        self.batch = batch
        self.threshold = threshold
        self.leased = leased  # some queue is worked with leases
        self.want = leased  # a leased claim may find jobs
        self.refresh = False  # a claim came back empty: ask for the next run_at before waiting

    def claim_now(self, held: int) -> bool:
        return self.want and held <= self.threshold

    def claimed(self, count: int) -> None:
        if count < self.batch:
            self.want, self.refresh = False, self.refresh or not count

    def acks_with_claim(self) -> int:
        """How many pending acks go out with a claim, ahead of it in its round
        trip (``ConsumerCore.claiming``): in a steady drain, the jobs of the
        last batch that finished while the worker held more than its
        concurrency. Fewer are left for :meth:`send_acks_now`: a statement
        of their own in the claim's transaction would cost the server more
        than they save it."""
        return min(self.batch, self.threshold)

    def send_acks_now(self, acks: Acks[Any], held: int) -> bool:
        pending = acks.pending()
        return bool(pending) and (pending >= self.batch or held == 0 or acks.seconds_until_due() <= 0)

    def respond(self, held: int) -> bool:
        """Whether this worker would claim at once (it has room)."""
        return held <= self.threshold


class WorkerCore(Generic[HandlerT, TxHandlerT]):
    """The settings, handlers and in-transaction bookkeeping of a worker.

    Settings are checked here (TypeError / ValueError naming the argument).
    ``metrics_port`` (None: no metrics, nothing imported) serves Prometheus
    metrics on ``metrics_host:metrics_port`` while ``run()`` runs: see
    ``pyqueue.metrics.worker`` (ImportError here without prometheus-client).
    The in-transaction state is kept under a lock: the sync worker's threads
    update it while its loop reads it.
    """

    _ASYNC = False  # its handlers are coroutine functions

    def __init__(
        self,
        dsn: str,
        *,
        concurrency: int = CONCURRENCY,
        batch_size: int = BATCH_SIZE,
        lease: timedelta | float | None = None,
        poll_interval: float | timedelta = POLL_INTERVAL,
        use_listen: bool = True,
        name: str | None = None,
        reap_interval: float | timedelta | None = REAP_INTERVAL,
        shutdown_timeout: float | timedelta | None = SHUTDOWN_TIMEOUT,
        run_schedules: bool = True,
        metrics_port: int | None = None,
        metrics_host: str = METRICS_HOST,
        listen_dsn: str | None = None,
        max_poll_interval: float | timedelta | None = None,
    ) -> None:
        checked = _settings.check(batch_size=batch_size, poll_interval=poll_interval, concurrency=concurrency,
                                  lease=lease, reap_interval=reap_interval, shutdown_timeout=shutdown_timeout,
                                  use_listen=use_listen, name=name, run_schedules=run_schedules,
                                  listen_dsn=listen_dsn, max_poll_interval=max_poll_interval)
        if not isinstance(dsn, str):
            raise TypeError(f"dsn must be a connection string (str), got {type(dsn).__name__}")
        self.dsn = dsn
        self._observer = make_observer(dsn, metrics_port, metrics_host)
        self.concurrency = checked.concurrency
        self.batch_size = checked.batch_size
        self.lease = checked.lease
        self.poll_interval = checked.poll_interval
        self.max_poll_interval = checked.max_poll_interval
        self.use_listen = checked.use_listen
        self.listen_dsn = checked.listen_dsn
        self.name = checked.name or default_worker_name()
        self.reap_interval = checked.reap_interval
        self.shutdown_timeout = checked.shutdown_timeout
        self.run_schedules = checked.run_schedules
        self._handlers: dict[str, HandlerT] = {}
        self._tx_handlers: dict[str, TxHandlerT] = {}
        self._order: list[str] = []
        self._lock = threading.Lock()
        self._running = False
        # In-transaction queues: which may have ready jobs, how many batches run.
        self._tx_wanted: dict[str, bool] = {}
        self._tx_busy = 0
        self._tx_empty = False  # a batch came back empty since the loop last waited
        self._tx_backoff = Backoff()
        self._fatal: BaseException | None = None
        self._prepare()

    def _prepare(self) -> None:
        """The driver's own state, made at the end of the constructor."""

    @property
    def queues(self) -> list[str]:
        return list(self._order)

    @overload
    def register(self, queue: str, fn: HandlerT, *, in_transaction: Literal[False] = False) -> None: ...

    @overload
    def register(self, queue: str, fn: TxHandlerT, *, in_transaction: Literal[True]) -> None: ...

    def register(self, queue: str, fn: HandlerT | TxHandlerT, *, in_transaction: bool = False) -> None:
        """Run ``fn(job)`` for the jobs of ``queue``: a leased job, or with
        ``in_transaction=True`` a job inside the transaction that took it
        (see the class docstring)."""
        if queue in self._order:
            raise ValueError(f"queue {queue!r} already has a handler")
        if in_transaction:
            self._tx_handlers[queue] = fn  # type: ignore[assignment]
        else:
            observed = self._observer.wrap(queue, fn, asynchronous=self._ASYNC)
            self._handlers[queue] = observed  # type: ignore[assignment]
        self._order.append(queue)

    @overload
    def handler(
        self, queue: str, *, in_transaction: Literal[False] = False
    ) -> Callable[[HandlerT], HandlerT]: ...

    @overload
    def handler(self, queue: str, *, in_transaction: Literal[True]) -> Callable[[TxHandlerT], TxHandlerT]: ...

    def handler(self, queue: str, *, in_transaction: bool = False) -> Callable[[Any], Any]:
        """Decorator form of :meth:`register`."""

        def decorate(fn: Any) -> Any:
            self.register(queue, fn, in_transaction=in_transaction)  # type: ignore[call-overload]
            return fn

        return decorate

    def _startable(self, what: str) -> None:
        """Before ``run()`` connects: there are handlers, and it has not run."""
        if not self._order:
            raise ValueError("register a handler first (worker.register or @worker.handler)")
        if self._running:
            raise RuntimeError(f"{what} runs once: make a new one to run again")

    def _start(self, what: str, database: startup.Database) -> WorkerSettings:
        """``run()`` begins, its first connection made (``database``): there are
        handlers, it runs once, and it says so."""
        self._startable(what)
        with self._lock:
            if self._running:
                raise RuntimeError(f"{what} runs once: make a new one to run again")
            self._running = True
        startup.report(database, "pyqueue worker", self.queues,
                       f"concurrency {self.concurrency}; batch size {self.batch_size}")
        if (tracing := _hooks.consumer) is not None:  # pyqueue.tracing.instrument(): a span per job
            self._handlers = {queue: tracing.wrap(queue, fn, asynchronous=self._ASYNC)
                              for queue, fn in self._handlers.items()}
        self._tx_wanted = dict.fromkeys(self._tx_handlers, True)
        return WorkerSettings(self.dsn, self.queues, self.lease, self.poll_interval, self.use_listen,
                              self.name, self.reap_interval, self.shutdown_timeout, self.run_schedules,
                              listen_dsn=self.listen_dsn, max_poll_interval=self.max_poll_interval)

    def _refresh(self, rounds: Rounds) -> bool:
        """Before a wait: whether to ask for the next run_at (a leased claim or a
        batch came back empty); both start over."""
        with self._lock:
            refresh = rounds.refresh or self._tx_empty
            rounds.refresh = self._tx_empty = False
        return refresh

    def _woke(self, rounds: Rounds) -> None:
        """The wait found there may be work: every queue may have jobs again."""
        rounds.want = rounds.leased
        with self._lock:
            self._tx_wanted = dict.fromkeys(self._tx_wanted, True)

    # --- in-transaction queues
    def _batch_startable(self) -> bool:
        with self._lock:
            return self._tx_busy < self.concurrency and any(self._tx_wanted.values())

    def _batches_to_start(self) -> list[str]:
        """The queues to start a batch of now (each counted as running)."""
        start = []
        with self._lock:
            for queue, wanted in self._tx_wanted.items():
                if wanted and self._tx_busy < self.concurrency:
                    self._tx_wanted[queue] = False
                    self._tx_busy += 1
                    start.append(queue)
        return start

    def _batch_ran(self, queue: str, taken: int, started: float) -> bool | None:
        """A batch of ``queue`` that began at monotonic ``started`` took ``taken``
        jobs. None: the queue is drained for now (stop); False: run the next
        batch; True: that too, and one more in parallel (poke the loop): a full,
        slow batch."""
        if self._tx_backoff.failures:
            logger.info("reconnected to the database")
            self._tx_backoff.reset()
        if taken < self.batch_size:
            if taken == 0:
                with self._lock:
                    self._tx_empty = True
            return None
        if time.monotonic() - started < TX_PARALLEL_AFTER:
            return False
        with self._lock:
            self._tx_wanted[queue] = True
        return True

    def _batch_failed(self, queue: str, error: BaseException) -> float | None:
        """A batch of ``queue`` raised. The seconds to wait before its queue is
        tried again (a lost connection: the jobs are back); None when the worker
        must stop (anything else, or a refused login: raised from ``run()``)."""
        if isinstance(error, psycopg.OperationalError) and not fatal_error(error):
            delay = self._tx_backoff.next_delay()
            logger.warning("batch of queue %r failed (%s); the jobs are back; trying again in %.1f s",
                           queue, reason(error), delay)
            return delay
        logger.error("batch of queue %r failed, stopping the worker: %s", queue, error)
        self._fatal = error
        return None

    def _batch_retry(self, queue: str) -> None:
        with self._lock:
            self._tx_wanted[queue] = True

    def _batch_ended(self) -> None:
        with self._lock:
            self._tx_busy -= 1
