"""A task's :class:`TaskResult` read from jobq (``JobqBackend.get_result``).

jobq's status maps onto Django's: waiting, ready and scheduled jobs (a
retry waiting for its backoff too) are READY, running ones RUNNING,
completed ones SUCCESSFUL (the job's result is the return value), dead and
cancelled ones FAILED. Every failed attempt (``jobq.job_errors``) is one
``TaskError`` whose traceback is the one the worker recorded; its exception
class is read from the traceback's last line.
"""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any

from django.db import connections
from django.utils.module_loading import import_string

from pyqueue.django import _tasks as t

JOB = """SELECT queue, payload::text, status, priority, created_at, started_at, finished_at,
                worker, result::text
         FROM jobq.jobs WHERE id = %s"""
ERRORS = "SELECT error, worker FROM jobq.job_errors WHERE job_id = %s ORDER BY failed_at, attempt"
STATUS = {"waiting": "READY", "ready": "READY", "scheduled": "READY", "running": "RUNNING",
          "completed": "SUCCESSFUL", "dead": "FAILED", "cancelled": "FAILED"}
EXCEPTION = re.compile(r"^(?P<name>[A-Za-z_][\w.]*)(:|$)")
UNKNOWN_EXCEPTION = "builtins.RuntimeError"  # an error that is no traceback (an expired lease)
MAX_BIGINT = 2**63 - 1


def exception_path(error: str) -> str:
    """The exception class named by a traceback's last line (``builtins.`` when unqualified)."""
    lines = [line for line in error.strip().splitlines() if line.strip()]
    found = EXCEPTION.match(lines[-1]) if lines and lines[0].startswith("Traceback") else None
    if found is None:
        return UNKNOWN_EXCEPTION
    name = found.group("name")
    return name if "." in name else f"builtins.{name}"


def read_result(backend: Any, result_id: str) -> Any:
    """The TaskResult of job ``result_id``, read on the backend's Django connection."""
    job_id = int(result_id) if isinstance(result_id, str) and result_id.isdigit() else 0
    if not 0 < job_id <= MAX_BIGINT:
        raise t.TaskResultDoesNotExist(f"no task result with id {result_id!r}")
    with connections[backend.database].cursor() as cursor:
        cursor.execute(JOB, [job_id])
        row = cursor.fetchone()
        errors: list[tuple[str, str | None]] = []
        if row is not None:
            cursor.execute(ERRORS, [job_id])
            errors = cursor.fetchall()
    if row is None:
        raise t.TaskResultDoesNotExist(f"no task result with id {result_id!r}")
    queue, payload_text, status, priority, created_at, started_at, finished_at, worker, result_text = row
    payload = json.loads(payload_text)
    try:
        task = import_string(payload["task"])
    except (ImportError, KeyError, TypeError) as error:
        raise t.TaskResultDoesNotExist(f"job {job_id} holds no task of this project: {error}") from None
    if not isinstance(task, t.Task):
        raise t.TaskResultDoesNotExist(f"job {job_id} holds no task: {payload['task']!r} is not one")
    with contextlib.suppress(t.InvalidTask):  # as enqueued (Task.using), if still valid
        task = task.using(queue_name=queue, priority=-priority)
    worker_ids = [error_worker or "" for _, error_worker in errors]
    if status in {"running", "completed"}:
        worker_ids.append(worker or "")
    result = t.TaskResult(
        task=task, id=str(job_id), status=t.TaskResultStatus[STATUS[status]], enqueued_at=created_at,
        started_at=started_at, finished_at=finished_at, last_attempted_at=started_at,
        args=payload.get("args", []), kwargs=payload.get("kwargs", {}), backend=backend.alias,
        errors=[t.TaskError(exception_class_path=exception_path(text), traceback=text) for text, _ in errors],
        worker_ids=worker_ids)
    if status == "completed" and result_text is not None:
        object.__setattr__(result, "_return_value", json.loads(result_text))
    return result
