"""In-transaction batches, for short jobs whose work is in the same database.

A batch is one transaction: ``jobq.hold(queue, n)`` row-locks up
to n ready jobs for it (no lease, nothing written; attempts shows this
attempt); each job's handler runs inside a savepoint and writes through
``job.conn``; a handler that raises has its writes rolled back to the
savepoint and its job recorded as a failed attempt (``jobq.fail_held``:
backoff, or dead letter when out of attempts); ``jobq.complete_held`` marks
the others done (a handler's return value, unless None, is its
job's result; such a job is completed inside its savepoint, so that a
result too large for the queue undoes it and fails it), and COMMIT
acknowledges the whole batch at once. A crash
rolls everything back: the jobs are ready again, untouched, and nothing any
handler wrote stays. There is no lease, so no heartbeat and no reaping. The
handlers of a batch run one after the other on its connection.

Round trips per batch: BEGIN, hold, complete_held, COMMIT, plus one per job
whose handler uses ``job.conn`` (its savepoint is opened then; releasing the
previous one goes with it) and one per failed job. (The asyncio twin opens
every job's savepoint before its handler: an attribute cannot await.)
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from pyqueue import _queries as q
from pyqueue._db import aclaimed_rows, ascalar, claimed_rows, scalar, undecodable
from pyqueue.errors import PayloadTooLarge, translate_errors
from pyqueue.job import AsyncTxJob, TxJob, handler_result, log_failed, summary
from pyqueue.worker.scripts import as_reconnect, read_only_server

logger = logging.getLogger("pyqueue.worker")

Connection = psycopg.Connection[Any]
AsyncConnection = psycopg.AsyncConnection[Any]
TxHandler = Callable[[TxJob], object]
AsyncTxHandler = Callable[[AsyncTxJob], Awaitable[object]]

ABORTED = "the handler returned normally but left its transaction aborted (a database error it caught)"


def _log_failure(job: TxJob | AsyncTxJob, exc: BaseException | None, error: str) -> None:
    log_failed(job, summary(exc) if exc is not None else error, exc)


def too_large(error: PayloadTooLarge) -> str:
    return f"result too large: the handler's result was refused ({error.message})"


def _failed_statement(error: psycopg.Error) -> bool:
    """An error of a statement (the transaction aborted), not of the connection."""
    return not isinstance(error, psycopg.OperationalError)


class _Batch:
    """The savepoint bookkeeping of one batch on a sync connection. A job's
    savepoint is opened the first time its handler asks for ``job.conn``,
    so a handler that never touches the database costs no round trip; the
    next job's first use releases it (one round trip for both), and COMMIT
    releases the last one."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.savepoint_of: TxJob | None = None  # the job whose savepoint is open
        self.done: list[int] = []  # jobs whose handler succeeded

    def use(self, job: TxJob) -> None:
        """Open ``job``'s savepoint, releasing the previous job's."""
        if self.savepoint_of is job:
            return
        self.conn.execute(q.SAVEPOINT if self.savepoint_of is None else q.NEXT_SAVEPOINT)
        self.savepoint_of = job

    def fail(self, job: TxJob, error: str) -> None:
        with translate_errors():
            if not scalar(self.conn, q.FAIL_HELD, (job.id, error)):
                logger.warning("job %d of queue %r: jobq.fail_held found no job this "
                               "transaction holds", job.id, job.queue)

    def undo(self, job: TxJob, error: str) -> None:
        """Roll back ``job``'s writes to its savepoint and record its failure."""
        if self.savepoint_of is job:
            self.conn.execute(q.UNDO_SAVEPOINT)
            self.savepoint_of = None
        elif self.conn.info.transaction_status == TransactionStatus.INERROR:
            # Aborted by a write that did not go through job.conn: nothing
            # smaller than the whole batch can be rolled back.
            raise RuntimeError(f"job {job.id}: the batch's transaction was aborted outside the job's "
                               "savepoint (write through job.conn); the whole batch rolls back")
        self.fail(job, error)

    def run(self, job: TxJob, handler: TxHandler) -> None:
        if (problem := undecodable(job.payload)) is not None:
            logger.error("job %d of queue %r: %s", job.id, job.queue, problem)
            self.fail(job, problem)
            return
        try:
            result = handler_result(handler(job))
        except Exception as exc:
            if read_only_server(exc):
                raise  # the server takes no writes: the whole batch is undone, no attempt counts
            _log_failure(job, exc, "")
            self.undo(job, q.format_error(exc))
            return
        if self.conn.info.transaction_status == TransactionStatus.INERROR:
            _log_failure(job, None, ABORTED)
            self.undo(job, ABORTED)
            return
        if result is None:
            self.done.append(job.id)
            return
        self.use(job)  # a job with a result completes inside its savepoint: too large undoes it
        try:
            with translate_errors():
                scalar(self.conn, q.COMPLETE_HELD_RESULTS, ([job.id], [result]))
        except PayloadTooLarge as error:
            _log_failure(job, None, too_large(error))
            self.undo(job, too_large(error))


def _check_completed(queue: str, done: list[int], completed: Any) -> None:
    if int(completed) < len(done):
        logger.warning("%d of %d job(s) of queue %r held by this transaction were no longer ready",
                       len(done) - int(completed), len(done), queue)


def run_batch(conn: Connection, queue: str, n: int, handler: TxHandler) -> int:
    """Hold up to ``n`` jobs of ``queue`` and run them in one transaction on
    ``conn``; how many were held. A KeyboardInterrupt or SystemExit from a
    handler rolls the whole batch back (the jobs come back untouched).

    A server that takes no writes now (a standby, a fenced primary: SQLSTATE
    25006) rolled the batch back, nothing of it committed, no attempt
    counts: ``conn`` is closed (of no use; a pool drops it) and the batch
    raises ``scripts.ServerReadOnly``, a lost connection to its caller."""
    try:
        return _run_batch(conn, queue, n, handler)
    except psycopg.Error as error:
        if not read_only_server(error):
            raise
        conn.close()
        raise as_reconnect(error) from error


def _run_batch(conn: Connection, queue: str, n: int, handler: TxHandler) -> int:
    with conn.transaction():
        with translate_errors():
            rows = claimed_rows(conn, q.HOLD, (queue, n))
        batch = _Batch(conn)
        for row in rows.dicts():
            job = TxJob(**row, _conn=conn, _use=batch.use)
            batch.run(job, handler)
        if batch.done:
            with translate_errors():
                _check_completed(queue, batch.done, scalar(conn, q.COMPLETE_HELD, (batch.done,)))
    return len(rows)


class _AsyncBatch:
    """The asyncio twin of :class:`_Batch`."""

    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn
        self.open: AsyncTxJob | None = None
        self.done: list[int] = []
        self.completed: set[int] = set()  # jobs with a result, completed at once

    async def fail(self, job: AsyncTxJob, error: str) -> None:
        with translate_errors():
            if not await ascalar(self.conn, q.FAIL_HELD, (job.id, error)):
                logger.warning("job %d of queue %r: jobq.fail_held found no job this "
                               "transaction holds", job.id, job.queue)

    async def undo(self, job: AsyncTxJob, error: str) -> None:
        await self.conn.execute(q.UNDO_SAVEPOINT)
        await self.fail(job, error)

    async def settle(self, *, next_job: bool) -> None:
        done, self.open = self.open, None
        if done is None:
            if next_job:
                await self.conn.execute(q.SAVEPOINT)
            return
        try:
            await self.conn.execute(q.NEXT_SAVEPOINT if next_job else q.RELEASE_SAVEPOINT)
            if done.id not in self.completed:
                self.done.append(done.id)
        except psycopg.Error as error:
            if not _failed_statement(error):
                raise
            _log_failure(done, None, f"{ABORTED}: {error}")
            await self.undo(done, f"{ABORTED}: {error}")
            if next_job:
                await self.conn.execute(q.SAVEPOINT)

    async def run(self, job: AsyncTxJob, handler: AsyncTxHandler) -> None:
        if (problem := undecodable(job.payload)) is not None:
            logger.error("job %d of queue %r: %s", job.id, job.queue, problem)
            await self.fail(job, problem)
            return
        await self.settle(next_job=True)
        try:
            result = handler_result(await handler(job))
            if result is not None:  # completed inside its savepoint: too large undoes it
                with translate_errors():
                    await ascalar(self.conn, q.COMPLETE_HELD_RESULTS, ([job.id], [result]))
                self.completed.add(job.id)
        except PayloadTooLarge as error:
            _log_failure(job, None, too_large(error))
            await self.undo(job, too_large(error))
            return
        except Exception as exc:
            if read_only_server(exc):
                raise  # as in _Batch.run
            _log_failure(job, exc, "")
            await self.undo(job, q.format_error(exc))
            return
        self.open = job


async def arun_batch(conn: AsyncConnection, queue: str, n: int, handler: AsyncTxHandler) -> int:
    """The asyncio twin of :func:`run_batch` (the caller closes ``conn`` after
    a ``ServerReadOnly``: it resets its connection after any lost one)."""
    try:
        return await _arun_batch(conn, queue, n, handler)
    except psycopg.Error as error:
        if not read_only_server(error):
            raise
        raise as_reconnect(error) from error


async def _arun_batch(conn: AsyncConnection, queue: str, n: int, handler: AsyncTxHandler) -> int:
    async with conn.transaction():
        with translate_errors():
            rows = await aclaimed_rows(conn, q.HOLD, (queue, n))
        batch = _AsyncBatch(conn)
        for row in rows.dicts():
            await batch.run(AsyncTxJob(**row, conn=conn), handler)
        await batch.settle(next_job=False)
        if batch.done:
            with translate_errors():
                _check_completed(queue, batch.done, await ascalar(conn, q.COMPLETE_HELD, (batch.done,)))
    return len(rows)
