"""jobq as the backend of Django's Tasks framework.

``django.tasks`` (Django 6) or, on Django 5.2, the ``django-tasks`` backport
(module ``django_tasks``): ``TASKS = {"default": {"BACKEND":
"pyqueue.django.JobqBackend", "QUEUES": [...], "OPTIONS": {...}}}`` and
``"pyqueue.django"`` in ``INSTALLED_APPS`` (for ``manage.py jobq_worker``).
``Task.enqueue()`` inserts the job on Django's own database connection, so it
joins ``transaction.atomic()``; the worker command runs the tasks. See
docs/django.md.

The backend is imported on first use (``import_string`` asks this module for
``JobqBackend``), so listing the app in ``INSTALLED_APPS`` imports no part of
the Tasks framework before Django's apps are ready.
"""

from __future__ import annotations

from typing import Any

__all__ = ["JobqBackend"]


def __getattr__(name: str) -> Any:
    if name == "JobqBackend":
        from pyqueue.django.backend import JobqBackend  # noqa: PLC0415 - on first use, see above

        return JobqBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
