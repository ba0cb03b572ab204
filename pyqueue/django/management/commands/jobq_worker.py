"""``python manage.py jobq_worker``: a pyqueue worker for the queues of a
``pyqueue.django.JobqBackend``, with Django set up.

It connects with the settings of the backend's database
(``OPTIONS["DATABASE"]``), works the backend's ``QUEUES`` (or the
``--queue`` ones), runs each job's task (pyqueue.django.runner) in one of
``--concurrency`` threads, and stops gracefully on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError

import pyqueue
from pyqueue.defaults import POLL_INTERVAL
from pyqueue.django import _tasks as t
from pyqueue.django.backend import JobqBackend
from pyqueue.django.runner import run_task


class Command(BaseCommand):  # type: ignore[misc]  # Django is untyped here
    help = "Run a jobq worker for the queues of a TASKS backend (pyqueue.django.JobqBackend)."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--backend", default="default", help="the TASKS alias (default: default)")
        parser.add_argument("--queue", action="append", dest="queues", metavar="QUEUE",
                            help="a queue to work (repeatable; default: every queue of the backend)")
        parser.add_argument("--concurrency", type=int, default=4, help="handler threads (default: 4)")
        parser.add_argument("--name", default=None, help="the worker's name (default: host:pid)")
        parser.add_argument("--poll-interval", type=float, default=POLL_INTERVAL,
                            help=f"seconds between polls when no NOTIFY comes (default: {POLL_INTERVAL:g})")

    def handle(self, *args: Any, **options: Any) -> None:
        alias = options["backend"]
        try:
            backend = t.task_backends[alias]
        except Exception as error:
            raise CommandError(f"--backend {alias!r}: {error}") from None
        if not isinstance(backend, JobqBackend):
            raise CommandError(
                f"--backend {alias!r} is a {type(backend).__name__}, not pyqueue.django.JobqBackend")
        queues = options["queues"] or sorted(backend.queues)
        unknown = sorted(set(queues) - backend.queues) if backend.queues else []
        if not queues or unknown:
            raise CommandError(f"--queue: {', '.join(unknown) or 'none'} not in TASKS[{alias!r}]['QUEUES'] "
                               f"({', '.join(sorted(backend.queues))})")
        try:
            worker = pyqueue.Worker(backend.dsn(), concurrency=options["concurrency"], name=options["name"],
                                    poll_interval=options["poll_interval"])
        except (TypeError, ValueError) as error:
            raise CommandError(str(error)) from None
        for queue in queues:
            worker.handler(queue)(run_task)
        self.stdout.write(f"jobq worker: queues {', '.join(queues)}, concurrency {options['concurrency']}")
        self.stdout.flush()
        worker.run()
