"""``JobqBackend``: Django's Tasks backend that keeps its tasks in jobq.

``enqueue`` inserts one job with ``jobq.enqueue`` on the Django connection
of ``OPTIONS["DATABASE"]`` (default ``"default"``), so inside
``transaction.atomic()`` the job exists iff the block commits, and outside
one it commits at once (Django's autocommit). The job's queue is the task's
``queue_name``, its payload ``{"task": <module path>, "args": [...],
"kwargs": {...}}``, its ``run_at`` the task's ``run_after``, and its
priority the task's negated (Django runs higher first, jobq lower first).
The result id is the job id, as a string.

``manage.py jobq_worker`` (pyqueue.django.runner) runs the tasks;
``get_result`` (pyqueue.django.results) reads them back.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, connections
from django.utils import timezone
from psycopg.conninfo import make_conninfo

import pyqueue
from pyqueue.django import _tasks as t
from pyqueue.django.results import read_result

CREATED_AT = "SELECT created_at FROM jobq.jobs WHERE id = %s"
OPTIONS = frozenset({"DATABASE", "MAX_ATTEMPTS"})
# Keys of Django's connection parameters that are psycopg settings, not libpq ones.
NOT_CONNINFO = frozenset({"cursor_factory", "context", "prepare_threshold", "autocommit", "row_factory"})


class JobqBackend(t.BaseTaskBackend):  # type: ignore[misc]  # Django is untyped here
    """Tasks enqueued in jobq on Django's connection, run by ``manage.py jobq_worker``."""

    supports_defer = True
    supports_async_task = True  # the worker runs coroutine tasks to completion (Task.call)
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        unknown = sorted(set(self.options) - OPTIONS)
        if unknown:
            raise ImproperlyConfigured(
                f"TASKS[{alias!r}]['OPTIONS']: unknown option(s) {', '.join(unknown)}; "
                f"jobq's are {', '.join(sorted(OPTIONS))}")
        self.database: str = self.options.get("DATABASE", DEFAULT_DB_ALIAS)
        self.max_attempts: int | None = self.options.get("MAX_ATTEMPTS")

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        """Insert the task as a job in the current transaction; its TaskResult (READY)."""
        self.validate_task(task)
        run_after = task.run_after
        if run_after is not None and timezone.is_naive(run_after):  # USE_TZ = False
            run_after = timezone.make_aware(run_after)
        result = t.TaskResult(
            task=task, id="", status=t.TaskResultStatus.READY, enqueued_at=None, started_at=None,
            finished_at=None, last_attempted_at=None, args=list(args), kwargs=dict(kwargs),
            backend=self.alias, errors=[], worker_ids=[])
        connection = connections[self.database]
        connection.validate_no_broken_transaction()
        connection.ensure_connection()
        job_id = pyqueue.enqueue(
            connection.connection, task.queue_name,
            {"task": task.module_path, "args": result.args, "kwargs": result.kwargs},
            run_at=run_after, priority=-task.priority, max_attempts=self.max_attempts)
        with connection.cursor() as cursor:  # what get_result will read back: now() of the job's transaction
            cursor.execute(CREATED_AT, [job_id])
            (created_at,) = cursor.fetchone()
        object.__setattr__(result, "id", str(job_id))
        object.__setattr__(result, "enqueued_at", created_at)
        t.task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> Any:
        """The task's state read from jobq: TaskResultDoesNotExist for an id
        jobq does not know (or has forgotten), or a job no task enqueued."""
        return read_result(self, result_id)

    def dsn(self) -> str:
        """A libpq connection string for the worker: the settings of the backend's database."""
        params = connections[self.database].get_connection_params()
        settings: dict[str, Any] = {key: value for key, value in params.items()
                                    if key not in NOT_CONNINFO and isinstance(value, (str, int))}
        return make_conninfo("", **settings)
