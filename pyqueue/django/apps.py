"""The Django app of pyqueue.django: it brings the ``jobq_worker`` command."""

from __future__ import annotations

from django.apps import AppConfig


class JobqConfig(AppConfig):  # type: ignore[misc]  # Django is untyped here
    name = "pyqueue.django"
    label = "pyqueue_django"
    verbose_name = "jobq"
