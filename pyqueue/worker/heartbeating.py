"""How a consumer extends the leases of the jobs it holds, as a script
(``pyqueue.worker.consumer``): one statement for all the jobs due, run by
the driver's heartbeat thread or task on a connection of its own."""

from __future__ import annotations

import logging
import time
from datetime import timedelta

import psycopg

from pyqueue import _queries as q
from pyqueue.errors import translate_errors
from pyqueue.job import JobRecord
from pyqueue.worker.bookkeeping import HeartbeatBook
from pyqueue.worker.scripts import Reset, Script, Sql, lost_connection

logger = logging.getLogger("pyqueue.worker")


def beating(book: HeartbeatBook, due: list[tuple[JobRecord, timedelta]]) -> Script[None]:
    """Extend the leases of the ``due`` jobs in one statement. A job whose
    lease turns out lost is marked (``job.lease_lost``) so the worker skips
    it if not yet started."""
    sent_at = time.monotonic()
    params = ([j.id for j, _ in due], [j.lease_token for j, _ in due], [e for _, e in due])
    try:
        with translate_errors():
            rows = yield Sql(q.HEARTBEAT_MANY, params, rows="tuples", on="heartbeat")
    except psycopg.Error as error:
        logger.warning("heartbeat of %d job(s) failed, retrying: %s", len(due), error)
        if isinstance(error, psycopg.OperationalError) and lost_connection(error):
            yield Reset("heartbeat")
        book.retry_later(j for j, _ in due)
        return
    alive = {row[0] for row in rows if row[1]}
    for job, _ in due:
        if job.id in alive:
            book.renewed(job, sent_at)
        elif not job.acknowledged:
            job._mark_lease_lost()
            logger.warning("job %d of queue %r lost its lease (reaped or cancelled)", job.id, job.queue)
