"""pyqueue: the Python client and workers of jobq, the job queue that lives
inside PostgreSQL.

Producers call :func:`enqueue` / :func:`enqueue_many` on their own
connection (the job joins their transaction); workers use :func:`listen`
or :class:`Worker`; :mod:`pyqueue.aio` has the asyncio twins. Errors that
jobq raises surface as the typed exceptions of :mod:`pyqueue.errors`.
"""

from __future__ import annotations

from pyqueue import aio
from pyqueue.client import (
    QueueStats,
    Schedule,
    cancel,
    claim,
    complete,
    complete_many,
    configure_queue,
    enqueue,
    enqueue_many,
    every,
    fail,
    heartbeat,
    pause,
    reap,
    release,
    resume,
    retry,
    retry_dead,
    schedules,
    snooze,
    stats,
    take,
    unschedule,
)
from pyqueue.errors import (
    ERRORS_BY_SQLSTATE,
    InvalidBatchSize,
    InvalidInterval,
    InvalidJobKey,
    InvalidMaxAttempts,
    InvalidPayload,
    InvalidPeriodicName,
    InvalidPriority,
    InvalidQueueName,
    InvalidSetting,
    InvalidTime,
    InvalidWorkerName,
    JobKeyConflict,
    JobqError,
    MissingLease,
    NotReadCommitted,
    PayloadTooLarge,
    PgCronMissing,
    translate_errors,
)
from pyqueue.job import AsyncTxJob, Job, JobRecord, TakenJob, TxJob
from pyqueue.worker import JobIterator, Worker, listen

__version__ = "0.2.0"

__all__ = [
    "ERRORS_BY_SQLSTATE",
    "AsyncTxJob",
    "InvalidBatchSize",
    "InvalidInterval",
    "InvalidJobKey",
    "InvalidMaxAttempts",
    "InvalidPayload",
    "InvalidPeriodicName",
    "InvalidPriority",
    "InvalidQueueName",
    "InvalidSetting",
    "InvalidTime",
    "InvalidWorkerName",
    "Job",
    "JobIterator",
    "JobKeyConflict",
    "JobRecord",
    "JobqError",
    "MissingLease",
    "NotReadCommitted",
    "PayloadTooLarge",
    "PgCronMissing",
    "QueueStats",
    "Schedule",
    "TakenJob",
    "TxJob",
    "Worker",
    "__version__",
    "aio",
    "cancel",
    "claim",
    "complete",
    "complete_many",
    "configure_queue",
    "enqueue",
    "enqueue_many",
    "every",
    "fail",
    "heartbeat",
    "listen",
    "pause",
    "reap",
    "release",
    "resume",
    "retry",
    "retry_dead",
    "schedules",
    "snooze",
    "stats",
    "take",
    "translate_errors",
    "unschedule",
]
