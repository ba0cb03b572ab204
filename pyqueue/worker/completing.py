"""How a worker completes a chunk of finished jobs, with their results
(jobq 0.6), as a script of the consumer (``pyqueue.worker.consumer``).

One ``jobq.complete_many`` per chunk; the results go along only when some
job has one, so that a worker on an older jobq completes as before. The
server measures a result after compressing it, so the client cannot tell
beforehand whether it fits the queue's ``max_payload_bytes``: when the
chunk is refused for a result over it (JQ003, nothing completed), the jobs
are completed one by one and only the job(s) whose result is too large
fail, with an error that says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from pyqueue import _arrays as arrays
from pyqueue import _queries as q
from pyqueue.errors import PayloadTooLarge
from pyqueue.job import JobRecord, log_failed
from pyqueue.worker.scripts import Script, Sql

TOO_LARGE = PayloadTooLarge.SQLSTATE


def completion(jobs: Sequence[JobRecord]) -> Sql:
    """The complete_many of ``jobs``, without results (what a claim can carry along)."""
    ids, tokens = arrays.bigints([j.id for j in jobs]), arrays.uuids([j.lease_token for j in jobs])
    return Sql(q.COMPLETE_MANY, (ids, tokens))


def completing(jobs: Sequence[JobRecord]) -> Script[int]:
    """Complete ``jobs`` (their results included); how many still held their lease."""
    results = [j._result for j in jobs]
    if results.count(None) == len(results):
        return int((yield completion(jobs)))
    ids, tokens = arrays.bigints([j.id for j in jobs]), arrays.uuids([j.lease_token for j in jobs])
    try:
        return int((yield Sql(q.COMPLETE_MANY_RESULTS, (ids, tokens, results))))
    except psycopg.Error as error:
        if error.sqlstate != TOO_LARGE:
            raise
    done = 0
    for job in jobs:
        done += int((yield from _completing_one(job)))
    return done


def _completing_one(job: JobRecord) -> Script[bool]:
    """Complete one job; when its result is too large, fail the attempt instead."""
    if job._result is None:
        return bool((yield Sql(q.COMPLETE, (job.id, job.lease_token))))
    try:
        return bool((yield Sql(q.COMPLETE_RESULT, (job.id, job.lease_token, job._result))))
    except psycopg.Error as error:
        if error.sqlstate != TOO_LARGE:
            raise
        message = error.diag.message_primary or str(error)
    text = f"result too large: the handler's result was refused ({message})"
    failed: Any = yield Sql(q.FAIL, (job.id, text, job.lease_token, None))
    if failed:
        log_failed(job, text)
    return False
