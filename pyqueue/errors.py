"""Typed exceptions for jobq's own SQLSTATEs (class ``JQ``).

Every pyqueue function that talks to the database runs inside
:func:`translate_errors`, so a jobq error surfaces as the subclass of
:class:`JobqError` named for its SQLSTATE, raised from the original
``psycopg.Error``. Other database errors pass through unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import ClassVar

import psycopg
from psycopg.errors import Diagnostic

__all__ = [
    "ERRORS_BY_SQLSTATE",
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
    "JobCancelled",
    "JobDead",
    "JobKeyConflict",
    "JobTimeout",
    "JobqError",
    "JobqNotInstalled",
    "JobqOutdated",
    "MetricsError",
    "MissingLease",
    "NotReadCommitted",
    "PayloadTooLarge",
    "PgCronMissing",
    "QueuePrivilegeDenied",
    "UnknownJob",
    "WaitTimeout",
    "error_from_psycopg",
    "translate_errors",
]


class JobqError(Exception):
    """An error raised by jobq in the database.

    ``sqlstate`` is the ``JQ…`` code, ``message`` the server's primary
    message (it names the offending argument), ``hint`` how to fix it,
    ``diag`` the full psycopg diagnostic when the error came from the server
    (None when pyqueue refused the argument before sending anything: it
    raises the class whose SQLSTATE the server would have used).
    """

    SQLSTATE: ClassVar[str] = "JQ000"  # subclasses name their own

    def __init__(
        self,
        message: str,
        *,
        sqlstate: str | None = None,
        hint: str | None = None,
        detail: str | None = None,
        diag: Diagnostic | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.sqlstate: str = sqlstate if sqlstate is not None else self.SQLSTATE
        self.hint: str | None = hint
        self.detail: str | None = detail
        self.diag: Diagnostic | None = diag

    def __str__(self) -> str:
        text = self.message
        if self.detail:
            text += f"\nDETAIL: {self.detail}"
        if self.hint:
            text += f"\nHINT: {self.hint}"
        return text


class InvalidArgument(JobqError, ValueError):
    """JQ017: an argument is NULL or not one of its allowed values: ``fail`` or
    ``fail_held`` with a NULL error, a ``cancel_jobs`` status, an ``every``
    runner, a ``payload_contains`` or ``meta_contains`` that is not a JSON object, an
    ``on_parent_failure`` other than 'cancel' or 'run', an ``on_duplicate``
    other than 'keep', 'replace' or 'replace_payload', a ``grant_queue``
    privilege other than 'produce', 'consume' or 'read'.

    Also the base of every error about a bad argument (JQ001-JQ012, JQ016, JQ018, JQ021),
    so all of them are ValueErrors too: ``except pyqueue.InvalidArgument``
    catches any refused input, whether the database or pyqueue's own checks
    (values Python cannot send faithfully: NaN, NUL characters, integers out
    of the SQL type's range, ...) refused it.
    """

    SQLSTATE = "JQ017"


class InvalidQueueName(InvalidArgument):
    """JQ001: a queue name is NULL, empty, over 128 characters or outside
    ``[A-Za-z0-9_.:-]``; or a ``queues`` array is NULL, empty, over 100 names,
    or of more than one dimension; or a ``queue_pattern`` (``grant_queue``,
    ``revoke_queue``) is neither a queue name nor the start of one followed
    by ``*``."""

    SQLSTATE = "JQ001"


class InvalidPayload(InvalidArgument):
    """JQ002: a payload is NULL or not a JSON object (``'null'``, an array, a
    string...); or ``payloads`` is NULL or of more than one dimension; or a
    job's ``meta`` is not a JSON object, or ``metas`` holds a NULL or
    non-object, has more than one dimension, or not one element per payload."""

    SQLSTATE = "JQ002"


class PayloadTooLarge(InvalidArgument):
    """JQ003: a payload, a job's meta, a job's result, or a running job's progress
    (``jobq.progress``), is over its queue's ``max_payload_bytes``."""

    SQLSTATE = "JQ003"


class InvalidPriority(InvalidArgument):
    """JQ004: a priority is NULL or outside -32768..32767."""

    SQLSTATE = "JQ004"


class InvalidMaxAttempts(InvalidArgument):
    """JQ005: max_attempts is outside 1..1000."""

    SQLSTATE = "JQ005"


class InvalidTime(InvalidArgument):
    """JQ006: a time (``run_at``, ``retry_at``) is NULL, infinite, or more than 10
    years away."""

    SQLSTATE = "JQ006"


class InvalidBatchSize(InvalidArgument):
    """JQ007: a batch size ``n`` is NULL, negative or over its cap (claim 1000,
    reap 1,000,000); or an array is over its cap."""

    SQLSTATE = "JQ007"


class InvalidInterval(InvalidArgument):
    """JQ008: a duration (``lease``, ``extend``, ``timeout``, ``unique_for``,
    ``older_than``) is out of its range, or has a month or year part or parts
    of mixed signs."""

    SQLSTATE = "JQ008"


class InvalidJobKey(InvalidArgument):
    """JQ009: a job_key, group_key or fair_key is empty or over 512 characters;
    ``job_keys`` (or ``fair_keys``) and ``payloads`` differ in length, or
    ``job_keys`` (``fair_keys``) has more than one dimension; ``unique_for``
    or an ``on_duplicate`` other than 'keep' comes without a key; or a
    group_key goes to a fair queue."""

    SQLSTATE = "JQ009"


class MissingLease(InvalidArgument):
    """JQ010: a job id or lease token is NULL; or ``ids`` and ``lease_tokens``
    (or ``results``) differ in length, hold NULLs, or have more than one
    dimension. (A lease token that is not a UUID: pyqueue raises this before
    sending it; in SQL, PostgreSQL refuses it with 22P02 since jobq 0.11.)"""

    SQLSTATE = "JQ010"


class InvalidWorkerName(InvalidArgument):
    """JQ011: a worker name is over 200 characters."""

    SQLSTATE = "JQ011"


class InvalidSetting(InvalidArgument):
    """JQ012: a ``configure_queue`` value is out of range (durations: as JQ008),
    ``fair_weights`` are not whole numbers 1..1000 for possible fair keys,
    ``fair_weights`` or ``per_key_concurrency`` are set on a queue that is
    not fair, ``fair`` is turned on while the queue has serial-group jobs;
    or pg_cron rejects a schedule."""

    SQLSTATE = "JQ012"


class JobKeyConflict(JobqError):
    """JQ013: a ``retry`` of a dead job whose job_key an active job now holds."""

    SQLSTATE = "JQ013"


class PgCronMissing(JobqError):
    """JQ014: pg_cron is not installed in this database, or the calling role
    may not use it: no USAGE on schema cron (``schedule_maintenance``,
    ``every(..., runner => 'pg_cron')``)."""

    SQLSTATE = "JQ014"


class NotReadCommitted(JobqError):
    """JQ015: a ``claim``, ``take`` or ``hold`` in a REPEATABLE READ or
    SERIALIZABLE transaction."""

    SQLSTATE = "JQ015"


class InvalidPeriodicName(InvalidArgument):
    """JQ016: a periodic job name is NULL or outside ``[A-Za-z0-9_.:-]{1,64}``, or
    ``enqueue_periodic`` names an unknown one."""

    SQLSTATE = "JQ016"


class InvalidDependency(InvalidArgument):
    """JQ018: a ``depends_on`` list or a callback's ``members`` has a NULL
    element or a duplicate, or holds over 100,000 ids, or has more than one
    dimension."""

    SQLSTATE = "JQ018"


class UnknownJob(JobqError):
    """JQ019: a job id jobq does not know where a known job is required: one it
    never issued (a ``depends_on`` parent, a callback member), or, for
    ``result``, ``status``, ``parent_results`` and ``watch``, also one it has
    forgotten (finished without history, or pruned); and, alike, a job of a
    queue with read grants the caller holds none of, so that ids cannot be
    probed."""

    SQLSTATE = "JQ019"


class QueuePrivilegeDenied(JobqError, PermissionError):
    """JQ020: the caller lacks a per-queue privilege: the queue has grants of
    ``produce`` (enqueue, enqueue_many, enqueue_callback) or ``consume``
    (claim, take, hold, next_run_at), and none of them is held by the calling role (the
    role set with SET ROLE, else the login), directly or through a group
    role; nor is it a jobq_admin. Also a ``PermissionError``."""

    SQLSTATE = "JQ020"


class InvalidRole(InvalidArgument):
    """JQ021: the ``role`` of ``grant_queue`` or ``revoke_queue`` is NULL,
    empty or not an existing role (``revoke_queue`` also takes a dropped role
    that still has grants)."""

    SQLSTATE = "JQ021"


NOT_INSTALLED = "jobq is not installed in this database"
NOT_INSTALLED_HINT = "Run `pyqueue install` first (or CREATE EXTENSION jobq)."


class JobqNotInstalled(JobqError):
    """jobq is not in the database the connection reaches: a call found no
    schema ``jobq``. Not one of jobq's own codes: ``sqlstate`` is
    PostgreSQL's (3F000, or 42P01 for one of its views). ``pyqueue install``
    (or ``CREATE EXTENSION jobq``) puts it there."""

    SQLSTATE = "3F000"

    def __init__(self, *, sqlstate: str | None = None, diag: Diagnostic | None = None) -> None:
        super().__init__(NOT_INSTALLED, sqlstate=sqlstate, hint=NOT_INSTALLED_HINT, diag=diag)


class JobqOutdated(JobqError):
    """The database's jobq is older than this pyqueue: a function or view
    pyqueue calls is missing (PostgreSQL's 42883 or 42P01 in ``sqlstate``).
    ``missing`` names it, ``needed`` is the jobq version this pyqueue ships
    and calls, ``installed`` the database's (None when it could not be
    asked: the failed call's transaction is aborted). ``pyqueue upgrade``
    brings the database's jobq up."""

    SQLSTATE = "42883"

    def __init__(self, missing: str, needed: str, installed: str | None = None, *,
                 sqlstate: str | None = None, diag: Diagnostic | None = None) -> None:
        if installed is None and sqlstate == "42P01":  # the schema may be missing too
            message = (f"{missing} does not exist: this database's jobq is older than this pyqueue "
                       f"needs (jobq {needed}), or jobq is not installed")
            hint = ("`pyqueue version --installed` shows which; `pyqueue upgrade` brings jobq to "
                    f"{needed}, `pyqueue install` installs it.")
        elif installed is None:  # a function: the schema is there
            message = (f"{missing} does not exist: this database's jobq is older than this pyqueue "
                       f"needs (jobq {needed})")
            hint = (f"Run `pyqueue upgrade` to bring it to {needed} (`pyqueue version --installed` shows the "
                    "installed version).")
        else:
            message = f"{missing} does not exist in jobq {installed}: this pyqueue needs jobq {needed}"
            hint = f"Run `pyqueue upgrade` to bring this database's jobq from {installed} to {needed}."
        super().__init__(message, sqlstate=sqlstate, hint=hint, diag=diag)
        self.missing = missing
        self.needed = needed
        self.installed = installed


_NO_SCHEMA = re.compile(r'schema "jobq" does not exist')
_NO_FUNCTION = re.compile(r"(function jobq\.\w+\(.*\)) does not exist")
_NO_RELATION = re.compile(r'relation "(jobq\.\w+)" does not exist')


def missing_jobq(error: psycopg.Error) -> JobqError | None:
    """:class:`JobqNotInstalled` or :class:`JobqOutdated` when ``error`` says a
    ``jobq.`` object does not exist, else None. A missing view (42P01) is
    outdated-or-missing until someone asks the database (see ``pyqueue._db``)."""
    primary = error.diag.message_primary or ""
    if error.sqlstate == "3F000" and _NO_SCHEMA.match(primary):
        return JobqNotInstalled(sqlstate=error.sqlstate, diag=error.diag)
    found = None
    if error.sqlstate == "42883":
        found = _NO_FUNCTION.match(primary)
    elif error.sqlstate == "42P01":
        found = _NO_RELATION.match(primary)
    if found is None:
        return None
    from pyqueue._sqlfiles import SqlScripts  # noqa: PLC0415  (only on this rare path)

    what = found.group(1) if error.sqlstate == "42883" else f"relation {found.group(1)}"
    return JobqOutdated(what, SqlScripts.load().latest, sqlstate=error.sqlstate, diag=error.diag)


ERRORS_BY_SQLSTATE: dict[str, type[JobqError]] = {
    cls.SQLSTATE: cls
    for cls in (
        InvalidQueueName,
        InvalidPayload,
        PayloadTooLarge,
        InvalidPriority,
        InvalidMaxAttempts,
        InvalidTime,
        InvalidBatchSize,
        InvalidInterval,
        InvalidJobKey,
        MissingLease,
        InvalidWorkerName,
        InvalidSetting,
        JobKeyConflict,
        PgCronMissing,
        NotReadCommitted,
        InvalidPeriodicName,
        InvalidDependency,
        UnknownJob,
        QueuePrivilegeDenied,
        InvalidRole,
        InvalidArgument,
    )
}


def error_from_psycopg(error: psycopg.Error) -> JobqError | None:
    """The typed jobq exception for a psycopg error, or None when it is not jobq's.

    A ``JQ`` code without a class of its own (JQ000, an upgrade script applied
    to the wrong version, or a code from a newer jobq) becomes a plain
    :class:`JobqError` that still carries its sqlstate. (A missing ``jobq``
    schema, function or view is not translated here: the client calls, the
    CLI and the dashboard do it with :func:`missing_jobq`, while the workers'
    own loops keep telling an older jobq's missing functions apart.)
    """
    sqlstate = error.sqlstate
    if sqlstate is None or not sqlstate.startswith("JQ"):
        return None
    cls = ERRORS_BY_SQLSTATE.get(sqlstate, JobqError)
    diag = error.diag
    return cls(
        diag.message_primary or str(error),
        sqlstate=sqlstate,
        hint=diag.message_hint,
        detail=diag.message_detail,
        diag=diag,
    )


@contextmanager
def translate_errors() -> Iterator[None]:
    """Turn a jobq ``psycopg.Error`` raised in the block into its typed exception.

    Usable around awaits too: it only inspects the exception that leaves the block.
    """
    try:
        yield
    except psycopg.Error as error:
        translated = error_from_psycopg(error)
        if translated is None:
            raise
        raise translated from error


class JobTimeout(TimeoutError):
    """A job ran longer than its execution timeout (the job's own
    ``timeout``, else its queue's). Not a database error: the worker records
    it as the job's error (``JobTimeout: job ran longer than 0:00:02``) and
    fails the attempt; an async handler is cancelled, a sync one's result is
    discarded (see ``pyqueue.Worker``)."""


class JobDead(Exception):
    """:func:`pyqueue.wait` found the job dead (out of attempts) instead of
    completed. Not a database error: ``job_id`` is the job; its
    error history is in ``jobq.job_errors`` (and the dashboard)."""

    def __init__(self, job_id: int) -> None:
        super().__init__(f"job {job_id} is dead: it failed its last attempt")
        self.job_id = job_id


class JobCancelled(Exception):
    """:func:`pyqueue.wait` found the job cancelled, by an operator or because
    a job it depends on is dead or was cancelled. Not a database error:
    ``job_id`` is the job."""

    def __init__(self, job_id: int) -> None:
        super().__init__(f"job {job_id} was cancelled")
        self.job_id = job_id


class WaitTimeout(TimeoutError):
    """:func:`pyqueue.wait` gave up: the job had not finished within the
    timeout. ``job_id`` is the job, ``status`` the last state seen
    (waiting, ready, scheduled or running); the job itself is untouched."""

    def __init__(self, job_id: int, timeout: float, status: str) -> None:
        super().__init__(f"job {job_id} did not finish within {timeout:g} s (still {status})")
        self.job_id = job_id
        self.status = status


class MetricsError(RuntimeError):
    """A worker's metrics cannot be served (e.g. the port is taken): raised by
    ``Worker.run()`` / ``AsyncWorker.run()`` made with ``metrics_port``. Not a
    database error."""
