"""``manage.py expectations enqueue`` / ``expectations check ID...``: the
expectations of Django's own Tasks tests (tests/tasks: test_tasks.py and
test_immediate_backend.py, whose test names these carry) that apply to a
backend that stores tasks, checked on this one. ``enqueue`` checks what
holds before a worker runs anything and enqueues the tasks ``check``
looks at once a worker ran them. Prints one JSON line: each expectation,
"pass" or what failed."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import pickle
import traceback
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.core.management.base import BaseCommand
from django.utils import timezone

from pyqueue.django import _tasks as t
from shop import expectations as e

Check = Callable[[], object]


def run_checks(checks: dict[str, Check]) -> dict[str, str]:
    outcome: dict[str, str] = {}
    for name, check in checks.items():
        try:
            check()
        except BaseException as error:  # SystemExit too: an outcome to report
            outcome[name] = f"FAIL: {type(error).__name__}: {error} " + traceback.format_exc(limit=-1).strip()
        else:
            outcome[name] = "pass"
    return outcome


def raises(kind: type[BaseException], text: str, call: Callable[[], object]) -> None:
    try:
        call()
    except kind as error:
        assert text in str(error), f"{kind.__name__} without {text!r}: {error}"
        return
    raise AssertionError(f"no {kind.__name__} raised")


def before_running() -> tuple[dict[str, str], dict[str, str]]:
    """The checks on enqueue; the ids of the tasks to run, by name."""
    backend = t.default_task_backend
    ids: dict[str, str] = {}

    def enqueue_task() -> None:
        result = e.noop.enqueue()
        assert result.status == t.TaskResultStatus.READY and result.task == e.noop, result
        assert result.args == [] and result.kwargs == {}, result

    def enqueue_task_async() -> None:
        result = asyncio.run(e.noop.aenqueue())
        assert result.status == t.TaskResultStatus.READY and result.task == e.noop, result

    def refresh_result() -> None:
        result = e.noop.enqueue()
        before = dataclasses.asdict(result)
        result.refresh()
        assert dataclasses.asdict(result) == before, (dataclasses.asdict(result), before)
        asyncio.run(result.arefresh())
        assert dataclasses.asdict(result) == before

    def get_result() -> None:
        result = backend.enqueue(e.noop, (), {})
        assert e.noop.get_result(result.id) == result, (e.noop.get_result(result.id), result)
        assert asyncio.run(e.noop.aget_result(result.id)) == result

    def get_missing_result() -> None:
        raises(t.TaskResultDoesNotExist, "", lambda: e.noop.get_result("987654321"))

    def get_incorrect_result() -> None:
        result = backend.enqueue(e.noop_async, (), {})
        raises(t.TaskResultMismatch, "Task does not match", lambda: e.noop.get_result(result.id))

    def pickle_task_result() -> None:
        result = e.noop.enqueue()
        assert pickle.loads(pickle.dumps(result)) == result

    def enqueue_logs() -> None:
        logger = logging.getLogger(t.FRAMEWORK)
        records: list[logging.LogRecord] = []

        class Keep(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                records.append(record)

        handler = Keep(logging.DEBUG)
        logger.addHandler(handler)
        level = logger.level
        logger.setLevel(logging.DEBUG)
        try:
            result = e.noop.enqueue()
        finally:
            logger.removeHandler(handler)
            logger.setLevel(level)
        assert any("enqueued" in r.getMessage() and result.id in r.getMessage() for r in records), records

    def run_after_and_priority() -> None:
        later = timezone.now() + timedelta(hours=1)
        result = e.noop.using(run_after=later, priority=7).enqueue()
        got = backend.get_result(result.id)
        assert got.status == t.TaskResultStatus.READY and got.task.priority == 7, got

    checks: dict[str, Check] = {
        "test_tasks.test_enqueue_task": enqueue_task,
        "test_tasks.test_enqueue_task_async": enqueue_task_async,
        "test_tasks.test_enqueue_with_invalid_argument":
            lambda: raises(TypeError, "Unsupported type", lambda: e.noop.enqueue(datetime.now())),
        "test_tasks.test_refresh_result": refresh_result,
        "test_tasks.test_get_result (and _async)": get_result,
        "test_tasks.test_get_missing_result": get_missing_result,
        "test_tasks.test_get_incorrect_result": get_incorrect_result,
        "test_tasks.test_pickle_task_result": pickle_task_result,
        "test_tasks.test_naive_datetime":
            lambda: raises(t.InvalidTask, "run_after must be an aware datetime",
                           lambda: e.noop.using(run_after=datetime.now())),
        "test_tasks.test_invalid_priority":
            lambda: raises(t.InvalidTask, "priority must be a whole number",
                           lambda: e.noop.using(priority=101)),
        "test_tasks.test_unknown_queue_name / test_validate_on_enqueue":
            lambda: raises(t.InvalidTask, "Queue 'queue-2' is not valid for backend",
                           lambda: e.noop.using(queue_name="queue-2")),
        "test_immediate_backend.test_enqueue_logs (the enqueue side)": enqueue_logs,
        "supports_defer and supports_priority: run_after and priority enqueued": run_after_and_priority,
    }
    outcome = run_checks(checks)
    ids["noop"] = e.noop.enqueue(1, two=3).id
    ids["noop_async"] = e.noop_async.enqueue(1, two=3).id
    for name in ["meaning", "fails_value_error", "fails_system_exit", "fails_nested", "returns_a_datetime",
                 "own_id", "attempt", "connection_pid"]:
        ids[name] = getattr(e, name).enqueue().id
    return outcome, ids


def after_running(ids: dict[str, str]) -> dict[str, str]:
    backend = t.default_task_backend
    results = {name: backend.get_result(result_id) for name, result_id in ids.items()}

    def finished_in_order(result: Any) -> None:
        assert result.is_finished and result.started_at and result.last_attempted_at and result.finished_at
        assert result.started_at >= result.enqueued_at and result.finished_at >= result.started_at, result

    def successful(name: str, value: object) -> Check:
        def check() -> None:
            result = results[name]
            assert result.status == t.TaskResultStatus.SUCCESSFUL, (result.status, result.errors)
            finished_in_order(result)
            assert result.return_value == value and result.attempts == 1, result
        return check

    def enqueue_task() -> None:
        for name in ["noop", "noop_async"]:
            successful(name, None)()
            assert results[name].args == [1] and results[name].kwargs == {"two": 3}, results[name]
            assert results[name].task == getattr(e, name), results[name].task

    def failed(name: str, kind: type[BaseException], text: str) -> Check:
        def check() -> None:
            result = results[name]
            assert result.status == t.TaskResultStatus.FAILED, result.status
            finished_in_order(result)
            raises(ValueError, "Task failed", lambda: result.return_value)
            assert result.errors[0].exception_class is kind, result.errors[0]
            assert text in result.errors[0].traceback, result.errors[0].traceback
        return check

    checks: dict[str, Check] = {
        "test_immediate_backend.test_enqueue_task (after the worker)": enqueue_task,
        "test_immediate_backend.test_result": successful("meaning", 42),
        "test_immediate_backend.test_catches_exception (ValueError)":
            failed("fails_value_error", ValueError, "ValueError: failed on purpose\n"),
        "test_immediate_backend.test_catches_exception (SystemExit)":
            failed("fails_system_exit", SystemExit, "SystemExit: exits on purpose\n"),
        "test_immediate_backend.test_complex_exception":
            failed("fails_nested", ValueError, 'raise ValueError(ValueError("nested"))'),
        "test_immediate_backend.test_complex_return_value":
            failed("returns_a_datetime", TypeError, "Unsupported type"),
        "test_immediate_backend.test_takes_context": successful("own_id", ids["own_id"]),
        "test_immediate_backend.test_context (attempt)": successful("attempt", 1),
    }
    return run_checks(checks)


class Command(BaseCommand):  # type: ignore[misc]  # Django is untyped here
    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("phase", choices=["enqueue", "check"])
        parser.add_argument("ids", nargs="?", default="{}", help="check: the JSON ids enqueue printed")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["phase"] == "enqueue":
            outcome, ids = before_running()
            self.stdout.write(json.dumps({"outcome": outcome, "ids": ids, "framework": t.FRAMEWORK}))
        else:
            self.stdout.write(json.dumps({"outcome": after_running(json.loads(options["ids"]))}))
