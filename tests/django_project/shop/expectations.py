"""Tasks for the expectations of Django's own Tasks tests (tests/tasks in
Django's repository) that apply to a real backend: what
``manage.py expectations`` enqueues on queue ``expect`` and checks."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import connection

from pyqueue.django._tasks import task_decorator as task


@task(queue_name="expect")  # type: ignore[untyped-decorator]  # Django is untyped here
def noop(*args: Any, **kwargs: Any) -> None:
    return None


@task(queue_name="expect")  # type: ignore[untyped-decorator]
async def noop_async(*args: Any, **kwargs: Any) -> None:
    return None


@task(queue_name="expect")  # type: ignore[untyped-decorator]
def meaning() -> int:
    return 42


@task(queue_name="expect")  # type: ignore[untyped-decorator]
def fails_value_error() -> None:
    raise ValueError("failed on purpose")


@task(queue_name="expect")  # type: ignore[untyped-decorator]
def fails_system_exit() -> None:
    raise SystemExit("exits on purpose")


@task(queue_name="expect")  # type: ignore[untyped-decorator]
def fails_nested() -> None:
    raise ValueError(ValueError("nested"))


@task(queue_name="expect")  # type: ignore[untyped-decorator]
def returns_a_datetime() -> datetime:
    return datetime(2026, 11, 27)


@task(queue_name="expect", takes_context=True)  # type: ignore[untyped-decorator]
def own_id(context: Any) -> str:
    return str(context.task_result.id)


@task(queue_name="expect", takes_context=True)  # type: ignore[untyped-decorator]
def attempt(context: Any, *args: Any) -> int:
    return int(context.attempt)


@task(queue_name="expect")  # type: ignore[untyped-decorator]
def connection_pid() -> int:
    """The server pid of this task's Django connection (the worker must close it afterwards)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])
