"""The workers: the loops that claim jobs, run them and acknowledge them.

Public: :func:`listen` (one loop in the calling thread) and :class:`Worker`
(handlers per queue, run by a set of threads); their asyncio twins are in
``pyqueue.aio``. Both claim in batches (one round trip per batch), LISTEN
on channel ``jobq`` on a dedicated connection and otherwise poll, heartbeat
held jobs, reap expired leases every so often (so a database without pg_cron
recovers), reconnect with backoff after the database goes away, and stop
gracefully on SIGTERM/SIGINT.

The modules, by role:

- ``settings``: the checks of every worker setting;
- ``bookkeeping``: the I/O-free state (acknowledgements waiting, heartbeat
  schedule, reconnection backoff, periodic timers);
- ``consumer``: the session with jobq that every worker drives (claim, wait
  for work, acknowledge, heartbeat, reap), written once;
  ``sync_consumer`` and ``aio_consumer`` only do its I/O;
- ``sync_listen`` / ``aio_listen``: :func:`listen` and its job iterator;
- ``sync_worker`` / ``aio_worker``: :class:`Worker` and ``AsyncWorker``;
- ``in_transaction``: batches worked inside the transaction that takes them;
- ``handler_threads``, ``timeouts``: the threads of a sync Worker, execution
  timeouts and the shutdown grace;
- ``schedules``, ``prune``: periodic jobs and pruning without pg_cron;
- ``auth``: which database errors are not worth a retry.
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
