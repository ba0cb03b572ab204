"""The handler ``manage.py jobq_worker`` registers for each queue: it runs the
task a job holds, the way Django runs code in a long-lived process.

Before and after each task, ``close_old_connections()`` closes the handler
thread's database connections that are broken or older than
``CONN_MAX_AGE`` (what Django does around each request). The task's
return value (made JSON, as Django's Tasks framework does) is the job's
result; an exception fails the attempt with its traceback, and jobq retries
the job or dead-letters it. The framework's ``task_started`` and
``task_finished`` signals are sent around each run.
"""

from __future__ import annotations

from typing import Any

from django.db import close_old_connections
from django.utils import timezone
from django.utils.module_loading import import_string
from psycopg.types.json import Jsonb

import pyqueue
from pyqueue.django import _tasks as t


def run_task(job: pyqueue.Job) -> Any:
    """Run the task of ``job``; its return value, the job's result (JSON null for None)."""
    close_old_connections()
    try:
        return _run(job)
    finally:
        close_old_connections()


def _run(job: pyqueue.Job) -> Any:
    payload = job.payload
    task = import_string(payload["task"])
    if not isinstance(task, t.Task):
        raise t.InvalidTask(f"{payload['task']!r} is not a task (a function decorated with @task)")
    backend = t.task_backends[task.backend]
    now = timezone.now()
    worker = job.worker or ""
    result = t.TaskResult(
        task=task, id=str(job.id), status=t.TaskResultStatus.RUNNING, enqueued_at=job.created_at,
        started_at=now, finished_at=None, last_attempted_at=now, args=payload.get("args", []),
        kwargs=payload.get("kwargs", {}), backend=task.backend, errors=[],
        worker_ids=[worker] * job.attempts)
    t.task_started.send(type(backend), task_result=result)
    try:
        if task.takes_context:
            value = task.call(t.TaskContext(task_result=result), *result.args, **result.kwargs)
        else:
            value = task.call(*result.args, **result.kwargs)
        value = t.normalize_json(value)
    except Exception:
        object.__setattr__(result, "status", t.TaskResultStatus.FAILED)
        object.__setattr__(result, "finished_at", timezone.now())
        t.task_finished.send(type(backend), task_result=result)
        raise
    object.__setattr__(result, "status", t.TaskResultStatus.SUCCESSFUL)
    object.__setattr__(result, "finished_at", timezone.now())
    object.__setattr__(result, "_return_value", value)
    t.task_finished.send(type(backend), task_result=result)
    # JSON null, not "no result": a completed job with a result is kept for the
    # queue's result_retention (1 day by default) even where retention is 0,
    # so get_result() finds the tasks that returned None too.
    return Jsonb(None) if value is None else value
