"""The claimed job: its row from ``jobq.claim()``, how to acknowledge it, and
its life in this process (:class:`JobState`, moved only by :func:`move`,
under STATE_LOCK, along :data:`TRANSITIONS`). A worker's jobs hand their acks to the worker:
``pyqueue.worker.acknowledgement`` holds the rest of that way."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from types import TracebackType
from typing import Any, Generic, Protocol, TypeVar
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

from pyqueue import _arguments as a
from pyqueue import _queries as q
from pyqueue import _statements as s
from pyqueue._claimed import jobs_from
from pyqueue._db import Claimed, Statement, arun, run
from pyqueue.errors import InvalidArgument

logger = logging.getLogger(__name__)

CANCEL_CHECK_INTERVAL = 0.05  # seconds between an AsyncJob.sleep()'s looks at its cancellation
ConnectionSource = Callable[[], AbstractContextManager[psycopg.Connection[Any]]]
AsyncConnectionSource = Callable[[], AbstractAsyncContextManager[psycopg.AsyncConnection[Any]]]
CM = TypeVar("CM")  # how a job gets its connection: a sync or an async context manager
A = TypeVar("A", bound="WorkerAcks")  # the worker's acks, if any (pyqueue.worker.acknowledgement)
J = TypeVar("J", bound="LeasedJob[Any, Any]")


@dataclass
class JobRecord:
    """The columns of a claimed job (the ``jobq.job`` type).

    ``lease_token`` fences the lease: acknowledgements made with a token the
    database no longer holds (the lease expired and the job was reaped or
    claimed again) change nothing and report False.
    """

    id: int
    queue: str
    payload: dict[str, Any]
    priority: int
    attempts: int
    max_attempts: int
    run_at: datetime
    created_at: datetime
    lease_token: UUID
    lease_expires_at: datetime
    worker: str | None
    job_key: str | None
    last_error: str | None
    group_key: str | None = None  # the serial group the job belongs to
    # the job's execution timeout (its own, else its queue's); None: none.
    timeout: timedelta | None = None
    # the last progress reported for the job (jobq 0.11.0), by this attempt
    # or, after a retry, an earlier one: where a handler may resume from.
    progress: Any = None
    # what the producer attached beside the payload (enqueue's ``meta``,
    # jobq 0.12.0): tags, the W3C trace context; None when none.
    meta: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        # Private state, not dataclass fields: left out of asdict(), ==, repr().
        self._state = JobState.CLAIMED  # changed by move() only
        self._lease_seconds: float | None = None
        self._result: Jsonb | None = None  # the handler's result, encoded (None: none)
        self._cancel_event: threading.Event | None = None  # made when first asked for
        # Called once the job is no longer ours (the async supervisors cancel its handler).
        self._on_lost: Callable[[], object] | None = None

    def _on(self, event: Event) -> bool:
        """Move the job's state as ``event`` says (see :func:`_move`); False,
        changing nothing, when the event is refused in its state."""
        with STATE_LOCK:
            moved = move(self, event)
        if moved and event is Event.LOSE_LEASE:
            self._lost()
        return moved

    def _lost(self) -> None:
        """The lease is gone (cancelled, reaped): tell the handler."""
        if (flag := self._cancel_event) is not None:
            flag.set()
        if (on_lost := self._on_lost) is not None:
            on_lost()

    @property
    def cancel_requested(self) -> bool:
        """True once this job is no longer this worker's: ``jobq.cancel()``
        cancelled it (a worker hears of it at once, by NOTIFY) or a heartbeat
        found its lease lost (reaped). Stop working on it: nothing the
        handler does counts any more, and the worker neither completes nor
        fails it. The same as :attr:`lease_lost`."""
        return self._state is JobState.LEASE_LOST

    @property
    def cancelled_event(self) -> threading.Event:
        """A ``threading.Event`` set when :attr:`cancel_requested` turns True:
        wait on it (``job.cancelled_event.wait(5)``) instead of sleeping."""
        with STATE_LOCK:
            if (flag := self._cancel_event) is None:
                flag = self._cancel_event = threading.Event()
                if self._state is JobState.LEASE_LOST:
                    flag.set()
            return flag

    def _returned(self, value: object) -> None:
        """Keep a handler's return value as the job's result (None: no result).
        A value that is not JSON raises TypeError naming its type: inside
        ``with job:`` that fails the job with that error."""
        if value is not None and not self.acknowledged:
            self._result = handler_result(value)

    def _mark_acknowledged(self) -> None:
        """Its ack reached the database (sent at once, e.g. ``complete_many``)."""
        self._on(Event.SENT)

    @property
    def acknowledged(self) -> bool:
        """True once this object completed, failed or released the job (a
        worker's job: once its ack is queued). A job whose lease a heartbeat
        found lost gets no ack: the database would refuse it."""
        return self._state in ACKNOWLEDGED

    @property
    def lease_lost(self) -> bool:
        """True when a worker's heartbeat found the lease gone (reaped or cancelled)."""
        return self._state is JobState.LEASE_LOST

    @property
    def timed_out(self) -> bool:
        """True once a worker failed the job because it ran past its timeout."""
        return self._state in PAST_TIMEOUT

    @property
    def lease_seconds(self) -> float | None:
        """Seconds the lease had left right after the claim (on the database
        clock): what the worker's heartbeats extend it by."""
        return self._lease_seconds


class JobState(Enum):
    """Where a leased job is in its life, as this process sees it. Three
    threads move it (the handler's, the heartbeat's and the timeout's), only
    through :func:`move` under STATE_LOCK (``JobRecord._on``, or a worker's
    ``Acks`` queueing an ack in the same step), so that of two of them
    racing (a handler finishing as its timeout fires) exactly one wins."""

    CLAIMED = "claimed"  # leased to this process; no handler has it yet
    RUNNING = "running"  # a handler (or a loop body) has it
    TIMING_OUT = "timing out"  # past its timeout: its async handler is being cancelled; its failure follows
    TIMED_OUT = "timed out"  # failed for its timeout (queued or sent): what its handler does later is moot
    LEASE_LOST = "lease lost"  # the database took the lease back (reaped, cancelled): no ack of ours counts
    ACK_QUEUED = "ack queued"  # completed, failed or released: waiting in its worker's batch
    ACKED = "acked"  # its ack reached the database

    __hash__ = object.__hash__  # by identity, in C (Enum's own is Python code): looked up per job


class Event(Enum):
    """What happens to a job (see :data:`TRANSITIONS`)."""

    START = "a handler starts"
    QUEUE_ACK = "a completion or release is queued"
    QUEUE_FAILURE = "a failure is queued"
    TIME_OUT = "past its timeout, its async handler is cancelled"
    EXPIRE = "past its timeout, it is failed at once"
    LOSE_LEASE = "a heartbeat found the lease gone"
    SENT = "an ack reached the database"

    __hash__ = object.__hash__  # by identity, in C


S, E = JobState, Event
# Every move a job's state may make; any other is refused. A state without
# a way out is the end of the job for this process (TIMED_OUT and its
# failure reaching the database change nothing: the batch stops its heartbeats).
TRANSITIONS: dict[tuple[JobState, Event], JobState] = {
    (S.CLAIMED, E.START): S.RUNNING,
    (S.CLAIMED, E.QUEUE_ACK): S.ACK_QUEUED,  # released unstarted (a stop)
    (S.CLAIMED, E.QUEUE_FAILURE): S.ACK_QUEUED,  # a payload Python cannot decode
    (S.CLAIMED, E.LOSE_LEASE): S.LEASE_LOST,
    (S.CLAIMED, E.SENT): S.ACKED,  # job.complete() of a job from pyqueue.claim()
    (S.RUNNING, E.QUEUE_ACK): S.ACK_QUEUED,
    (S.RUNNING, E.QUEUE_FAILURE): S.ACK_QUEUED,
    (S.RUNNING, E.TIME_OUT): S.TIMING_OUT,
    (S.RUNNING, E.EXPIRE): S.TIMED_OUT,
    (S.RUNNING, E.LOSE_LEASE): S.LEASE_LOST,
    (S.RUNNING, E.SENT): S.ACKED,
    (S.TIMING_OUT, E.QUEUE_FAILURE): S.TIMED_OUT,  # the cancelled handler's JobTimeout
    (S.ACK_QUEUED, E.SENT): S.ACKED,
}
del S, E
_NEXT: dict[JobState, dict[Event, JobState]] = {  # TRANSITIONS by state, for _move
    state: {event: new for (old, event), new in TRANSITIONS.items() if old is state} for state in JobState}
ACKNOWLEDGED = frozenset({JobState.ACK_QUEUED, JobState.ACKED, JobState.TIMED_OUT})
PAST_TIMEOUT = frozenset({JobState.TIMING_OUT, JobState.TIMED_OUT})
NO_HEARTBEAT = frozenset({JobState.ACKED, JobState.LEASE_LOST})  # nothing left to hold the lease for
# One lock for every job's state (a move is a few instructions long); a
# worker's pending acks share it, so that queueing an ack is one lock.
STATE_LOCK = threading.Lock()


def move(job: JobRecord, event: Event) -> bool:
    """The one place a job's state changes (the caller holds STATE_LOCK):
    to where TRANSITIONS takes it on ``event``; False, changing nothing,
    when the move is not allowed from the state the job is in."""
    new = _NEXT[job._state].get(event)
    if new is None:
        return False
    job._state = new
    return True


def sent(jobs: Iterable[JobRecord]) -> None:
    """Their acks reached the database (a worker's batch): SENT for each, under the lock once."""
    with STATE_LOCK:
        for job in jobs:
            move(job, Event.SENT)


def handler_progress(value: object) -> Jsonb | None:
    """A reported progress as the jsonb to send; InvalidArgument (a
    ValueError) naming ``progress`` when it is not JSON."""
    return a.result_value(value, "progress")


def handler_result(value: object) -> Jsonb | None:
    """A handler's return value as a job's result (None: no result); TypeError,
    naming the value's type, when it is not JSON."""
    try:
        return a.result_value(value)
    except InvalidArgument as error:
        raise TypeError(f"handler returned a {type(value).__name__}, which is not JSON-serialisable: "
                        f"{error.message.removeprefix('jobq: result cannot be sent as JSON: ')}") from None


@dataclass(frozen=True)
class TakenJob:
    """A job removed by ``jobq.take()`` inside the caller's transaction
    (:func:`pyqueue.take`): it holds no lease and needs no acknowledgement;
    the transaction's commit is what marks it done."""

    id: int
    queue: str
    payload: dict[str, Any]
    priority: int
    attempts: int
    max_attempts: int
    run_at: datetime
    created_at: datetime
    job_key: str | None
    last_error: str | None
    group_key: str | None


@dataclass(frozen=True)
class TxJob(TakenJob):
    """A job of an in-transaction queue (``in_transaction=True``):
    the handler runs inside the transaction that holds the job, and ``conn``
    is that transaction's connection. Write through ``conn`` and the writes
    commit together with the job's removal, or roll back with it when the
    handler raises (the job is then recorded as a failed attempt). Do not
    commit or roll back ``conn`` yourself; a nested ``conn.transaction()``
    is fine. The job holds no lease and needs no acknowledgement. The job's
    savepoint is opened the first time the handler asks for ``conn``: a
    handler that never touches the database costs no round trip."""

    _conn: psycopg.Connection[Any] = field(compare=False, repr=False, kw_only=True)
    _use: Callable[[TxJob], None] = field(compare=False, repr=False, kw_only=True)

    @property
    def conn(self) -> psycopg.Connection[Any]:
        """The batch's transaction, inside this job's savepoint."""
        self._use(self)
        return self._conn


@dataclass(frozen=True)
class AsyncTxJob(TakenJob):
    """The asyncio twin of :class:`TxJob`: ``conn`` is the transaction's
    ``AsyncConnection``."""

    conn: psycopg.AsyncConnection[Any] = field(compare=False, repr=False, kw_only=True)


class WorkerAcks(Protocol):
    """A worker's acks as its jobs see them (``pyqueue.worker.acknowledgement.Acks``):
    ``with job:`` queues the job's ack there, then calls ``after_ack`` (the
    plain iterator sends it at once). Each ``*_later`` returns False, adding
    nothing, when the job was acked already (by its timeout)."""

    def complete_later(self, job: JobRecord) -> bool: ...

    def fail_later(self, job: JobRecord, error: str) -> bool: ...

    def progress_later(self, job: JobRecord, value: Jsonb | None) -> bool: ...

    @property
    def after_ack(self) -> Callable[[], object]: ...


class AsyncWorkerAcks(WorkerAcks, Protocol):
    """An asyncio worker's acks: ``after_ack`` is awaited."""

    @property
    def after_ack(self) -> Callable[[], Awaitable[object]]: ...


@dataclass
class LeasedJob(JobRecord, Generic[CM, A]):
    """What a claimed job holds, sync or async (private): where its
    connection comes from (``CM``: a context manager giving it) and the
    worker's acks (``A``), if any: none for jobs of :func:`pyqueue.claim`,
    which send their ack at once."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self._connect: Callable[[], CM] | None = None
        self._acks: A | None = None

    @classmethod
    def _from_claim(cls: type[J], claimed: Claimed, connect: Callable[[], Any], acks: Any = None) -> list[J]:
        """The jobs of a claim's rows (``pyqueue._db.claimed_rows``), bound to
        where their connection comes from and their worker's acks (see
        ``pyqueue._claimed``)."""
        return jobs_from(cls, claimed, connect=connect, acks=acks)

    def _connection(self) -> CM:
        if self._connect is None:
            raise RuntimeError(f"job {self.id} has no connection: it was not claimed through pyqueue")
        return self._connect()

    def _acknowledged_by(self, done: bool) -> bool:
        """A direct ack (``job.complete()``…) came back: ``done`` as the database said."""
        self._on(Event.SENT)
        return done

    def _still_held(self, alive: bool) -> bool:
        if not alive:
            self._on(Event.LOSE_LEASE)
        return alive

    def _queued(self, acks: WorkerAcks, exc: BaseException | None) -> bool:
        """Leaving ``with job:`` of a worker's job: queue its completion, or its
        failure with the traceback, in the worker's acks; False when it was
        acked already (nothing queued)."""
        if exc is None:
            return acks.complete_later(self)
        return not self.acknowledged and acks.fail_later(self, q.format_error(exc))

    def _progress_statement(self, value: Any) -> Statement[bool] | None:
        """report_progress: a worker's job hands the value to its worker's
        heartbeats (None returned); a job without a worker gets the statement."""
        if (acks := self._acks) is None:
            return s.progress(self.id, self.lease_token, value)
        acks.progress_later(self, handler_progress(value))
        return None

    def _ack_statement(self, exc: BaseException | None) -> Statement[bool] | None:
        """Leaving ``with job:`` of a job without a worker: the statement that
        completes it (or fails it with the traceback); None when it was acked."""
        if self.acknowledged:
            return None
        if exc is None:
            return s.complete(self.id, self.lease_token, self._result)
        return s.fail(self.id, self.lease_token, q.format_error(exc))


@dataclass
class Job(LeasedJob[AbstractContextManager[psycopg.Connection[Any]], WorkerAcks]):
    """A job claimed on a sync connection.

    ``complete()``, ``fail()``, ``heartbeat()``, ``release()`` and ``snooze()`` run at once
    on the connection the job was claimed through (inside that connection's
    transaction, if one is open) and return False when the lease was lost.

    ``with job:`` is the unit-of-work form: leaving the block normally
    completes the job; an ``Exception`` fails it with the full traceback and
    is logged and swallowed, so a loop over jobs goes on with the next one;
    other exceptions (KeyboardInterrupt, SystemExit) fail it and propagate.
    Jobs from a worker (``pyqueue.listen``) complete in batches.
    """

    def _send(self, statement: Statement[bool]) -> bool:
        with self._connection() as conn:
            return run(conn, statement)

    def complete(self, result: Any = None) -> bool:
        """Acknowledge success; False when the lease was lost (nothing changes).

        ``result``: any JSON value kept as the job's result (see
        :func:`pyqueue.complete`); None: no result."""
        return self._acknowledged_by(self._send(s.complete(self.id, self.lease_token, result)))

    def fail(self, error: str, *, retry_at: datetime | None = None) -> bool:
        """Record a failed attempt: retry after backoff (or at ``retry_at``), or
        dead-letter when out of attempts. False when the lease was lost."""
        statement = s.fail(self.id, self.lease_token, error, retry_at=retry_at)
        return self._acknowledged_by(self._send(statement))

    def heartbeat(self, extend: timedelta | None = None) -> bool:
        """Extend the lease to now + ``extend`` (default: the queue's lease);
        False when the lease was lost."""
        return self._still_held(self._send(s.heartbeat(self.id, self.lease_token, extend)))

    def release(self) -> bool:
        """Give the job back unstarted: ready again, no attempt spent."""
        return self._acknowledged_by(self._send(s.release(self.id, self.lease_token)))

    def snooze(self, delay: timedelta | float | None = None, *, run_at: datetime | None = None) -> bool:
        """Put the job back until now + ``delay`` (or ``run_at``) without spending
        an attempt: not a failure, "not yet". False when the lease was lost."""
        statement = s.snooze(self.id, self.lease_token, delay, run_at=run_at)
        return self._acknowledged_by(self._send(statement))

    def report_progress(self, value: Any) -> bool:
        """Report the job's progress: any JSON value (None clears it), shown
        by ``jobq.jobs`` and the dashboard, and claimed with the job by a
        later attempt. A worker's job keeps only the latest value and sends
        it with its next heartbeat, or PROGRESS_INTERVAL after the last one
        sent if sooner: call it as often as you like. A job of
        ``pyqueue.claim()`` sends it at once. TypeError (InvalidArgument) for
        a value that is not JSON; False when the lease was lost."""
        if (statement := self._progress_statement(value)) is None:
            return not self.lease_lost
        return self._still_held(self._send(statement))

    def sleep(self, seconds: float) -> bool:
        """Sleep ``seconds``, or less when the job is cancelled meanwhile;
        True when it was (:attr:`cancel_requested`): stop working on it."""
        return self.cancelled_event.wait(seconds)

    def __enter__(self) -> Job:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if (acks := self._acks) is not None:
            if self._queued(acks, exc):
                acks.after_ack()
        elif (statement := self._ack_statement(exc)) is not None:
            self._acknowledged_by(self._send(statement))
        return exc is not None and _swallowed(self, exc)


def _swallowed(job: JobRecord, exc: BaseException | None) -> bool:
    """Whether leaving ``with job:`` swallows the exception: an ``Exception``
    is logged and swallowed (a cancelled job's is not logged as a failure:
    it fails nothing, and its cancellation was logged); KeyboardInterrupt
    and SystemExit propagate."""
    if isinstance(exc, Exception):
        if job.lease_lost:
            logger.debug("job %d of queue %s: its handler raised after the job was cancelled: %s",
                         job.id, job.queue, summary(exc))
        else:
            _log_failure(job, exc)
        return True
    return False


def _log_failure(job: JobRecord, exc: BaseException) -> None:
    log_failed(job, summary(exc), exc)


def summary(exc: BaseException) -> str:
    """``Type: first line of the message``, for a log line."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def log_failed(job: JobRecord | Any, error: str, exc: BaseException | None = None) -> None:
    """Log a failed attempt, with the first line of its error so that the line
    stands on its own: a job out of attempts at ERROR, saying it is dead,
    with the traceback; an attempt that will be retried at WARNING, one line
    (retries are the queue doing its work; every attempt's traceback is in
    jobq.job_errors and the dashboard)."""
    first = error.strip().splitlines()[0] if error.strip() else "(no error text)"
    if job.attempts >= job.max_attempts:
        logger.error("job %d of queue %s is dead after %d of %d attempts: %s", job.id, job.queue,
                     job.attempts, job.max_attempts, first, exc_info=exc)
    else:
        logger.warning("job %d of queue %s failed (attempt %d of %d, will retry): %s", job.id, job.queue,
                       job.attempts, job.max_attempts, first)


@dataclass
class AsyncJob(LeasedJob[AbstractAsyncContextManager[psycopg.AsyncConnection[Any]], AsyncWorkerAcks]):
    """A job claimed on an asyncio connection: the twin of :class:`Job`, with
    awaitable ``complete()``, ``fail()``, ``heartbeat()`` and ``release()``,
    and ``async with job:`` as the unit of work (same rules as ``with job:``).
    """

    async def _send(self, statement: Statement[bool]) -> bool:
        async with self._connection() as conn:
            return await arun(conn, statement)

    async def complete(self, result: Any = None) -> bool:
        """Acknowledge success, with an optional ``result`` (see :meth:`Job.complete`);
        False when the lease was lost (nothing changes)."""
        return self._acknowledged_by(await self._send(s.complete(self.id, self.lease_token, result)))

    async def fail(self, error: str, *, retry_at: datetime | None = None) -> bool:
        """Record a failed attempt (see :meth:`Job.fail`)."""
        statement = s.fail(self.id, self.lease_token, error, retry_at=retry_at)
        return self._acknowledged_by(await self._send(statement))

    async def heartbeat(self, extend: timedelta | None = None) -> bool:
        """Extend the lease (see :meth:`Job.heartbeat`)."""
        return self._still_held(await self._send(s.heartbeat(self.id, self.lease_token, extend)))

    async def release(self) -> bool:
        """Give the job back unstarted: ready again, no attempt spent."""
        return self._acknowledged_by(await self._send(s.release(self.id, self.lease_token)))

    async def snooze(self, delay: timedelta | float | None = None, *, run_at: datetime | None = None) -> bool:
        """Put the job back for later without spending an attempt (see :meth:`Job.snooze`)."""
        statement = s.snooze(self.id, self.lease_token, delay, run_at=run_at)
        return self._acknowledged_by(await self._send(statement))

    async def report_progress(self, value: Any) -> bool:
        """Report the job's progress (see :meth:`Job.report_progress`)."""
        if (statement := self._progress_statement(value)) is None:
            return not self.lease_lost
        return self._still_held(await self._send(statement))

    async def sleep(self, seconds: float) -> bool:
        """Sleep ``seconds``, or less when the job is cancelled meanwhile (a
        loop body of ``pyqueue.aio.listen()``: a worker's handler task is
        cancelled instead); True when it was."""
        deadline = time.monotonic() + seconds
        while not self.cancel_requested and (left := deadline - time.monotonic()) > 0:
            await asyncio.sleep(min(left, CANCEL_CHECK_INTERVAL))
        return self.cancel_requested

    async def __aenter__(self) -> AsyncJob:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if (acks := self._acks) is not None:
            if self._queued(acks, exc):
                await acks.after_ack()
        elif (statement := self._ack_statement(exc)) is not None:
            self._acknowledged_by(await self._send(statement))
        return exc is not None and _swallowed(self, exc)
