"""pyqueue.django, jobq as Django's Tasks backend, on a real Django project
(tests/django_project) and this test's real database: the scenario of
tests/django_scenario.py with this Python's Django (5.2 and the
django-tasks backport on Python 3.11; tools/django6.sh runs it on Django 6).
"""

from __future__ import annotations

import subprocess
import sys

from tests import django_scenario


def test_django_project_enqueues_in_its_transaction_and_the_worker_runs_the_tasks(dsn: str) -> None:
    passed = django_scenario.run(sys.executable, dsn)
    assert len(passed) == 9, passed


def test_worker_command_refuses_an_unknown_queue(dsn: str) -> None:
    done = subprocess.run([sys.executable, "manage.py", "jobq_worker", "--queue", "nope"],
                          cwd=django_scenario.PROJECT, env={"DATABASE_URL": dsn, "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert "--queue: nope not in TASKS['default']['QUEUES'] (emails, expect, payments)" in done.stderr
