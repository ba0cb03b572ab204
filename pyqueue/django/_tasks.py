"""The Tasks framework this process has: Django 6's ``django.tasks`` when
Django has it, else the ``django-tasks`` backport (``django_tasks``), which
Django 5.2 needs. The names both define, under one spelling."""

from __future__ import annotations

from importlib import import_module
from importlib.util import find_spec
from types import ModuleType
from typing import Any


def _framework() -> str:
    try:
        found = find_spec("django.tasks") is not None
    except ModuleNotFoundError:  # no Django at all: the backport's import says so below
        found = False
    return "django.tasks" if found else "django_tasks"


FRAMEWORK = _framework()
_base: ModuleType = import_module(f"{FRAMEWORK}.base")
_exceptions: ModuleType = import_module(f"{FRAMEWORK}.exceptions")
_signals: ModuleType = import_module(f"{FRAMEWORK}.signals")
_root: ModuleType = import_module(FRAMEWORK)

BaseTaskBackend: Any = import_module(f"{FRAMEWORK}.backends.base").BaseTaskBackend
Task: Any = _base.Task
TaskContext: Any = _base.TaskContext
TaskError: Any = _base.TaskError
TaskResult: Any = _base.TaskResult
TaskResultStatus: Any = _base.TaskResultStatus
InvalidTask: Any = getattr(_exceptions, "InvalidTask", None) or _exceptions.InvalidTaskError
TaskResultDoesNotExist: Any = _exceptions.TaskResultDoesNotExist
TaskResultMismatch: Any = _exceptions.TaskResultMismatch
task_backends: Any = _root.task_backends
task_enqueued: Any = _signals.task_enqueued
task_started: Any = _signals.task_started
task_finished: Any = _signals.task_finished
normalize_json: Any = (import_module("django.utils.json") if FRAMEWORK == "django.tasks"
                       else import_module("django_tasks.utils")).normalize_json
task_decorator: Any = _root.task  # @task
default_task_backend: Any = _root.default_task_backend
