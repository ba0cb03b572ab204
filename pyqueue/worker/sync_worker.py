"""The sync :class:`Worker`: handlers per queue, run by a set of threads.

It claims in batches (one round trip per batch), LISTENs on channel
``jobq`` on a dedicated connection and otherwise polls, heartbeats held jobs
from a background thread, reaps expired leases every so often (so a
database without pg_cron recovers), reconnects with backoff after the
database goes away, and stops gracefully on SIGTERM/SIGINT: it claims
nothing more, finishes the jobs that have started, releases the jobs claimed
but not started, and returns normally (so the process exits 0).

Queues registered ``in_transaction=True`` are worked in
transactions instead of leases: see ``pyqueue.worker.in_transaction``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from functools import partial

from pyqueue.defaults import WORKER_APPLICATION_NAME
from pyqueue.job import STATE_LOCK, Event, Job, JobRecord, move
from pyqueue.worker import startup
from pyqueue.worker.connections import DedicatedConnection, PooledConnections
from pyqueue.worker.handler_threads import HandlerThreads
from pyqueue.worker.in_transaction import TxHandler, run_batch
from pyqueue.worker.sync_consumer import Consumer
from pyqueue.worker.sync_listen import Handler
from pyqueue.worker.wakeup import Wakeup, stop_on_signals
from pyqueue.worker.worker_core import Rounds, WorkerCore

logger = logging.getLogger("pyqueue.worker")


class Worker(WorkerCore[Handler, TxHandler]):
    """Handlers registered per queue, run concurrently by ``concurrency`` threads.

    The handler threads share a psycopg_pool ConnectionPool (the jobs' own
    ``complete()``/``heartbeat()``… calls use it too); claims and batched
    acknowledgements go through one more connection of the worker's own.
    Threads suit I/O-bound handlers; for CPU-bound work run several worker
    processes. The worker holds at most ``batch_size + concurrency`` leased
    jobs (the running ones plus the claimed ones waiting for a thread; every
    held job is heart-beaten) and claims the next batch once no more than
    ``concurrency`` are left, so the threads do not run dry while it claims.

    ::

        worker = pyqueue.Worker(dsn, concurrency=8)

        @worker.handler("emails")
        def send_email(job: pyqueue.Job) -> None:
            ...

        @worker.handler("ledger", in_transaction=True)
        def post(job: pyqueue.TxJob) -> None:
            job.conn.execute("INSERT INTO entries ...")  # commits with the job's removal

        worker.run()  # until worker.stop(), SIGTERM or SIGINT

    In-transaction queues are worked a batch per transaction:
    the batch's handlers run one after the other on its connection, and up
    to ``concurrency`` batches (each on its own pool connection, in a
    handler thread) run at once; a queue that keeps returning full batches
    gets more of them in parallel, one more per full batch, up to that limit.

    A stopped worker stays stopped; make a new one to run again.

    Settings are checked by the constructor (TypeError / ValueError naming
    the argument): ``concurrency`` and ``batch_size`` are ints (1..10000,
    1..1000); durations take a timedelta or a number of seconds, never a
    bool: ``lease`` (None: the queue's; else 1 second .. 1 day),
    ``poll_interval`` and ``reap_interval`` (> 0; reap None: never),
    ``max_poll_interval`` (>= poll_interval; None: 30 s, or poll_interval
    if longer: empty claims stretch the wait between polls up to it, see
    ``pyqueue.worker.polling``), ``shutdown_timeout`` (>= 0; None: wait for
    running handlers without end). ``listen_dsn`` (a str, or None: LISTEN
    on ``dsn``): behind PgBouncer in transaction mode, ``dsn`` names the
    pooler and ``listen_dsn`` a direct connection that only LISTENs; the
    work connections then use no prepared statements (as with
    ``use_listen=False``, which polls only).

    Stopping (``stop()``, SIGTERM, SIGINT): no more claims; running handlers
    get ``shutdown_timeout`` seconds (default 30) to finish; then their jobs
    are failed ("shutdown timeout" recorded, the attempt counts), the jobs
    not started are released (no attempt spent), nothing is heart-beaten
    any more, and ``run()`` returns, leaving the hung handler threads behind
    (daemon threads: they do not keep the process alive).

    Execution timeouts (``timeout`` on enqueue, else the queue's
    ``timeout`` setting): when a handler runs past its job's timeout the job
    is failed at once with ``JobTimeout: job ran longer than 0:00:02``
    recorded and retried like any failure (or dead when out of attempts);
    its lease is no longer heart-beaten and the handler's eventual result is
    discarded. Python cannot stop a thread: the handler keeps its thread
    until it returns, and a new thread takes its place meanwhile, so that
    hung handlers do not starve the queue.

    Periodic jobs without pg_cron: unless ``run_schedules=False``
    the worker calls jobq.run_schedules() at start and whenever the next
    worker-run tick is due (at least every minute, at most every second),
    so that schedules made with ``pyqueue.every(..., runner="workers")`` run;
    each tick is enqueued once however many workers run.

    Metrics (``metrics_port=N``, ``metrics_host`` default 127.0.0.1; needs
    prometheus-client, ``pip install 'jobq[metrics]'``): while ``run()``
    runs, ``http://HOST:N/metrics`` serves the worker's handler histograms
    and in-flight gauge with jobq's own metrics read from the database at
    each scrape (see ``pyqueue.metrics``). Without it nothing is imported.

    Starting (see ``pyqueue.worker.startup``): ``run()`` connects once
    first; a bad DSN or an unreachable server raises its
    ``psycopg.OperationalError`` at once, and a database without jobq
    :class:`pyqueue.JobqNotInstalled`. It logs one INFO line (queues,
    settings, database, versions), and a WARNING when a queue is one jobq
    has never seen.

    Authentication and authorisation failures (SQLSTATE 28P01, 28000,
    42501: a wrong password, an unknown role, no CONNECT or jobq privilege)
    raise from ``run()`` at once; other connection failures, once running,
    are retried with backoff.
    """

    def _prepare(self) -> None:
        self._wakeup = Wakeup()
        self._held = 0  # leased jobs handed to the threads and not finished
        self._executing: dict[int, int] = {}  # job id -> ident of the thread running its handler
        self._given_up: set[int] = set()  # jobs whose handler timed out and has not returned yet
        self._consumer: Consumer  # set by run(), before any job is handed to a thread

    def stop(self) -> None:
        """Stop claiming; ``run()`` returns once the started jobs (and batches) are
        done (thread-safe, also from a handler)."""
        self._wakeup.stop()

    def run(self, *, handle_signals: bool = True) -> None:
        """Work until :meth:`stop`, or SIGTERM/SIGINT when ``handle_signals``
        (main thread only)."""
        self._startable("a Worker")
        settings = self._start("a Worker", startup.check(self.dsn))  # raises when it cannot connect
        with self._observer.serving(), stop_on_signals(handle_signals, self._wakeup):
            pool = PooledConnections(self.dsn, WORKER_APPLICATION_NAME, size=self.concurrency + 1,
                                     prepare=settings.prepare)
            consumer = Consumer(
                settings,
                claim_queues=list(self._handlers),
                wakeup=self._wakeup,
                work=DedicatedConnection(self.dsn, WORKER_APPLICATION_NAME, prepare=settings.prepare),
                heartbeat=pool,
                jobs=pool,
            )
            self._consumer = consumer
            threads = HandlerThreads(self.concurrency, "pyqueue-handler", run=self._run_item, lazy=True)
            consumer.running.on_expire = partial(self._timed_out, threads)
            try:
                self._loop(consumer, threads, pool)
            finally:
                self._wakeup.stop()  # queued jobs that have not started are released
                if not threads.shutdown(self.shutdown_timeout):
                    logger.warning("handlers still running %g s after the stop: their jobs are failed, "
                                   "the jobs not started are released", self.shutdown_timeout or 0.0)
                    consumer.running.abandon()
                consumer.close()  # and the pool: it is the heartbeat's connection source
                self._wakeup.close()
        if self._fatal is not None:
            raise self._fatal

    def _loop(self, consumer: Consumer, threads: HandlerThreads, pool: PooledConnections) -> None:
        rounds = Rounds(self.batch_size, self.concurrency, bool(self._handlers))
        while not self._wakeup.stopped:
            consumer.maintain_when_due()
            if rounds.claim_now(self._held):
                jobs = consumer.claim(rounds.batch, acks_at_least=rounds.acks_with_claim())
                if jobs is None:
                    continue  # the database was unreachable; backed off, try again
                self._observer.claimed(jobs)
                if jobs:
                    with self._lock:
                        self._held += len(jobs)
                    threads.put_many(jobs)  # each run by _run_item: no callable made per job
                rounds.claimed(len(jobs))
            if start := self._batches_to_start():
                consumer.looked()
                threads.put_many([partial(self._run_batches, queue, pool) for queue in start])
            if rounds.send_acks_now(consumer.acks, self._held):
                consumer.send_acks()  # a batch's worth, or idle, or waited long enough
            if rounds.claim_now(self._held) or self._batch_startable():
                continue
            # Jobs handed over wake one thread; more once they wait with none taken (threads.spread).
            spread_in = threads.spread()
            if consumer.wait(refresh=self._refresh(rounds), respond=rounds.respond(self._held),
                             at_most=spread_in):
                self._woke(rounds)

    def _run_item(self, item: Job | Callable[[], object]) -> None:
        """What a handler thread runs: a leased job, or a callable (in-transaction batches)."""
        if isinstance(item, JobRecord):
            self._execute(item)
        else:
            item()

    def _execute(self, job: Job) -> None:
        """A leased job, in a handler thread: its handler as the job's unit of
        work (``run_job``, written out here: this is the busiest path of a
        Worker), unless the worker stopped (the job is released) or its lease
        was lost."""
        consumer = self._consumer
        timeout = job.timeout
        try:
            if self._wakeup.event.is_set():
                consumer.acks.release_later(job)
                return
            with STATE_LOCK:
                if not move(job, Event.START):
                    return  # its lease was lost, or the shutdown grace released it
            if timeout is not None:  # it may be given up on: remember its thread
                with self._lock:
                    self._executing[job.id] = threading.get_ident()
            running = consumer.running
            running.started(job)
            try:
                try:
                    value = self._handlers[job.queue](job)
                    if value is not None:
                        job._returned(value)
                except BaseException as error:  # what leaving ``with job:`` does (Job.__exit__)
                    if not job.__exit__(type(error), error, error.__traceback__):
                        raise
                else:
                    acks = job._acks
                    if acks is not None and acks.complete_later(job):
                        acks.after_ack()
            finally:
                running.finished(job)
        except BaseException:
            logger.exception("handler of queue %r raised out of job %d", job.queue, job.id)
        finally:
            with self._lock:
                if timeout is None:
                    self._held -= 1
                elif job.id not in self._given_up:
                    self._executing.pop(job.id, None)
                    self._held -= 1
                else:
                    self._given_up.discard(job.id)  # counted out when it timed out
                held = self._held
            if held in (self.concurrency, 0):
                self._wakeup.poke()  # room for the next batch, or idle: time to acknowledge

    def _timed_out(self, threads: HandlerThreads, job: JobRecord) -> None:
        """A handler ran past its job's timeout (the job is failed already): its
        thread is left to it, another takes its place, and the job no longer
        counts as held."""
        with self._lock:
            thread = self._executing.pop(job.id, None)
            if thread is None:
                return  # the handler returned meanwhile
            self._given_up.add(job.id)
            self._held -= 1
        threads.replace(thread)
        self._wakeup.poke()

    def _run_batches(self, queue: str, pool: PooledConnections) -> None:
        """Batches of ``queue`` (in a handler thread) one after the other while
        they come back full."""
        handler = self._tx_handlers[queue]
        try:
            while not self._wakeup.stopped:
                started = time.monotonic()
                with pool.connection() as conn:
                    taken = run_batch(conn, queue, self.batch_size, handler)
                more = self._batch_ran(queue, taken, started)
                if more is None:
                    return
                if more:
                    self._wakeup.poke()
        except BaseException as error:
            delay = self._batch_failed(queue, error)
            if delay is None:
                self._wakeup.stop()
            else:
                self._wakeup.event.wait(delay)
                self._batch_retry(queue)
        finally:
            self._batch_ended()
            self._wakeup.poke()
