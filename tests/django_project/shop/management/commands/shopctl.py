"""``manage.py shopctl place ITEM [--fail]``, ``shopctl charge ORDER``, ``shopctl result ID...``
(``shopctl missing ID...``: the ids get_result does not find): what
tests/django_scenario.py drives, each printing one JSON line."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from django.core.management.base import BaseCommand
from django.test import Client

from pyqueue.django._tasks import TaskResultDoesNotExist, default_task_backend
from shop.tasks import charge, send_receipt


class Command(BaseCommand):  # type: ignore[misc]  # Django is untyped here
    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("action", choices=["place", "charge", "result", "missing"])
        parser.add_argument("values", nargs="+")
        parser.add_argument("--fail", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        out: dict[str, Any]
        values = options["values"]
        if options["action"] == "place":
            form = {"item": values[0], **({"fail": "1"} if options["fail"] else {})}
            response = Client().post("/orders/", form)
            out = {"http": response.status_code, **response.json()}
        elif options["action"] == "charge":
            result = charge.using(priority=20).enqueue(int(values[0]))
            out = {"result_id": result.id, "status": str(result.status)}
        elif options["action"] == "result":
            out = {value: describe(value) for value in values}
        else:
            out = {value: missing(value) for value in values}
        self.stdout.write(json.dumps(out))


def missing(result_id: str) -> str:
    """What get_result raises for an id it does not find."""
    try:
        default_task_backend.get_result(result_id)
    except TaskResultDoesNotExist as error:
        return str(error)
    return "found"


def describe(result_id: str) -> dict[str, Any]:
    """A result read back three ways: the backend, TaskResult.refresh() and aget_result."""
    result = default_task_backend.get_result(result_id)
    stale = default_task_backend.get_result(result_id)
    object.__setattr__(stale, "status", "READY")
    stale.refresh()
    fetched = asyncio.run(default_task_backend.aget_result(result_id))
    task = send_receipt if result.task.func is send_receipt.func else charge
    return {
        "status": str(result.status), "refreshed": str(stale.status), "async": str(fetched.status),
        "task": result.task.module_path, "queue": result.task.queue_name, "priority": result.task.priority,
        "same_task": task.get_result(result_id).id == result_id,
        "return_value": result.return_value if result.status == "SUCCESSFUL" else None,
        "attempts": result.attempts, "args": result.args,
        "errors": [{"exception": e.exception_class_path, "traceback": e.traceback} for e in result.errors],
        "enqueued_at": result.enqueued_at.isoformat() if result.enqueued_at else None,
        "finished_at": result.finished_at.isoformat() if result.finished_at else None,
    }
