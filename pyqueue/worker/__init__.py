"""The workers: the loops that claim jobs, run them and acknowledge them.

Public: :func:`listen` (one loop in the calling thread) and :class:`Worker`
(handlers per queue, run by a set of threads); their asyncio twins are in
``pyqueue.aio``. Both claim in batches (one round trip per batch), LISTEN
on channel ``jobq`` on a dedicated connection and otherwise poll, heartbeat
held jobs, reap expired leases every so often (so a database without pg_cron
recovers), reconnect with backoff after the database goes away, and stop
gracefully on SIGTERM/SIGINT.

The modules, by role. What a worker decides is written once, free of I/O;
the ``sync_*`` and ``aio_*`` drivers only do the I/O (psycopg connections
and threads, or asyncio connections and tasks):

- ``consumer``: the session with jobq every worker drives (claim, wait for
  work, back off), as scripts that yield the I/O they need (``scripts``);
  driven by ``sync_consumer`` and ``aio_consumer``. Its parts:
  ``acknowledgement`` (the whole way of a job's ack, from ``with job:`` to
  ``jobq.complete_many``), ``heartbeats`` (which leases to extend, and the
  statement that does), ``maintenance`` (periodic jobs, prune and reap
  without pg_cron), ``polling`` (how long to wait: poll and reconnection
  backoff, the NOTIFY throttle);
- ``listen_core``: the options of ``listen()`` and a job iterator's
  bookkeeping; ``sync_listen`` / ``aio_listen`` hold :func:`listen`;
- ``worker_core``: the settings, handlers and loop decisions of a worker;
  ``sync_worker`` / ``aio_worker`` hold :class:`Worker` and ``AsyncWorker``;
- ``settings`` (the checks of every setting), ``connections``, ``wakeup``
  (how a sync loop waits and stops);
- ``in_transaction``: batches worked inside the transaction that takes them;
- ``handler_threads``, ``handler_tasks``, ``timeouts``: a Worker's threads
  (an AsyncWorker's tasks), execution timeouts and the shutdown grace;
- ``observer``: the hook metrics plug into;
- ``auth``: which database errors are not worth a retry.

A leased job's life is one state, ``pyqueue.job.JobState``, moved only by
``pyqueue.job.move`` under one lock: the handler's thread, the heartbeat and
the timeout timer race through it, never around it.
"""

from __future__ import annotations

from pyqueue.defaults import BATCH_SIZE, CONCURRENCY, POLL_INTERVAL, REAP_INTERVAL
from pyqueue.job import TxJob
from pyqueue.worker.in_transaction import TxHandler
from pyqueue.worker.settings import queue_list
from pyqueue.worker.sync_listen import Handler, JobIterator, check_settings, listen
from pyqueue.worker.sync_worker import Worker

__all__ = [
    "BATCH_SIZE",
    "CONCURRENCY",
    "POLL_INTERVAL",
    "REAP_INTERVAL",
    "Handler",
    "JobIterator",
    "TxHandler",
    "TxJob",
    "Worker",
    "check_settings",
    "listen",
    "queue_list",
]
