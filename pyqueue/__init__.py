"""pyqueue: the Python client and workers of jobq, the job queue that lives
inside PostgreSQL.

Producers call :func:`enqueue` / :func:`enqueue_many` on their own
connection (the job joins their transaction); workers use :func:`listen`
or :class:`Worker`; :mod:`pyqueue.aio` has the asyncio twins. Errors that
jobq raises surface as the typed exceptions of :mod:`pyqueue.errors`.
"""

from __future__ import annotations

from pyqueue import aio, client
from pyqueue._version import __version__
from pyqueue.client import *  # noqa: F403  (the client calls: client.__all__)
from pyqueue.errors import (
    ERRORS_BY_SQLSTATE,
    InvalidArgument,
    InvalidBatchSize,
    InvalidDependency,
    InvalidInterval,
    InvalidJobKey,
    InvalidMaxAttempts,
    InvalidPayload,
    InvalidPeriodicName,
    InvalidPriority,
    InvalidQueueName,
    InvalidRole,
    InvalidSetting,
    InvalidTime,
    InvalidWorkerName,
    JobCancelled,
    JobDead,
    JobKeyConflict,
    JobqError,
    JobqNotInstalled,
    JobqOutdated,
    JobTimeout,
    MissingLease,
    NotReadCommitted,
    PayloadTooLarge,
    PgCronMissing,
    QueuePrivilegeDenied,
    UnknownJob,
    WaitTimeout,
    translate_errors,
)
from pyqueue.job import AsyncTxJob, Job, JobRecord, TakenJob, TxJob
from pyqueue.worker import JobIterator, Worker, listen

__all__ = [
    "ERRORS_BY_SQLSTATE",
    "AsyncTxJob",
    "InvalidArgument",
    "InvalidBatchSize",
    "InvalidDependency",
    "InvalidInterval",
    "InvalidJobKey",
    "InvalidMaxAttempts",
    "InvalidPayload",
    "InvalidPeriodicName",
    "InvalidPriority",
    "InvalidQueueName",
    "InvalidRole",
    "InvalidSetting",
    "InvalidTime",
    "InvalidWorkerName",
    "Job",
    "JobCancelled",
    "JobDead",
    "JobIterator",
    "JobKeyConflict",
    "JobRecord",
    "JobTimeout",
    "JobqError",
    "JobqNotInstalled",
    "JobqOutdated",
    "MissingLease",
    "NotReadCommitted",
    "PayloadTooLarge",
    "PgCronMissing",
    "QueuePrivilegeDenied",
    "TakenJob",
    "TxJob",
    "UnknownJob",
    "WaitTimeout",
    "Worker",
    "__version__",
    "aio",
    "listen",
    "translate_errors",
]
__all__ += client.__all__
