"""The Django scenario of issue 27, run on a real Django project
(tests/django_project) against a real database, by any Python that has
Django and pyqueue: tests/test_django.py runs it with the suite's Python
(Django 5.2 and the django-tasks backport on 3.11), tools/django6.sh with a
Python >= 3.12 and Django 6 (``python -m tests.django_scenario --python
PY`` starts its own server, as root too).

Steps: ``migrate``; a view that writes an order and enqueues its receipt task
in one atomic block, rolled back (no order, no job) and committed (one of
each); a task that always fails, enqueued with a priority; ``manage.py
jobq_worker`` runs both, closes each task's Django connection after it,
and stops on SIGTERM with status 0; the receipt's
result (its return value, and the write the task made), and the failed
task's (FAILED after its two attempts, each with its traceback and
exception class), read back with get_result, TaskResult.refresh() and
aget_result; and the expectations of Django's own Tasks tests that apply
to a real backend (``manage.py expectations``), before and after the
worker ran their tasks.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

import pyqueue

PROJECT = Path(__file__).resolve().parent / "django_project"
STEP_TIMEOUT = 60.0  # seconds for one manage.py command
WORK_TIMEOUT = 60.0  # seconds the worker gets to finish the tasks
# Expectations of Django's tests/tasks that fail, by Tasks framework: the
# backport's Task cannot be pickled (Django 6 gave Task a __reduce__).
KNOWN_FAILING = {"django.tasks": set(), "django_tasks": {"test_tasks.test_pickle_task_result"}}


def manage(python: str, dsn: str, *args: str) -> dict[str, Any]:
    """Run ``manage.py ARGS`` of the project; its JSON output line (or {})."""
    done = subprocess.run([python, "manage.py", *args], cwd=PROJECT, env={**os.environ, "DATABASE_URL": dsn},
                          capture_output=True, text=True, timeout=STEP_TIMEOUT, check=False)
    assert done.returncode == 0, f"manage.py {' '.join(args)} exited {done.returncode}:\n{done.stderr}"
    lines = done.stdout.strip().splitlines()
    return json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}


def counts(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    row = conn.execute("SELECT (SELECT count(*) FROM shop_order), (SELECT count(*) FROM jobq.jobs)"
                       ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def wait_finished(conn: psycopg.Connection[Any], ids: list[int]) -> None:
    deadline = time.monotonic() + WORK_TIMEOUT
    while time.monotonic() < deadline:
        if all(pyqueue.status(conn, job_id) in {"completed", "dead"} for job_id in ids):
            return
        time.sleep(0.1)
    raise AssertionError(f"jobs {ids} not finished after {WORK_TIMEOUT} s: "
                         f"{[pyqueue.status(conn, job_id) for job_id in ids]}")


def wait_gone(conn: psycopg.Connection[Any], pid: int) -> None:
    """Wait until the server has no backend ``pid`` (the client's close takes a moment to show)."""
    deadline = time.monotonic() + 10.0
    while conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone() != (0,):
        assert time.monotonic() < deadline, f"the task's connection (backend {pid}) is still open"
        time.sleep(0.1)


def run(python: str, dsn: str) -> list[str]:
    """Every step, asserted; the names of the checks that passed."""
    passed: list[str] = []
    manage(python, dsn, "migrate", "-v0")
    with psycopg.connect(dsn, autocommit=True) as conn:
        for queue in ["payments", "expect"]:
            pyqueue.configure_queue(conn, queue, backoff_base=0.1, backoff_jitter=0)

        rolled_back = manage(python, dsn, "shopctl", "place", "book", "--fail")
        assert rolled_back == {"http": 402, "placed": False}, rolled_back
        assert counts(conn) == (0, 0), f"rolled back: (orders, jobs) = {counts(conn)}"
        passed.append("atomic view rolled back: no order, no job")

        placed = manage(python, dsn, "shopctl", "place", "book")
        assert placed["http"] == 200 and placed["status"] == "READY", placed
        assert counts(conn) == (1, 1), f"committed: (orders, jobs) = {counts(conn)}"
        job = conn.execute("SELECT queue, payload, priority FROM jobq.jobs WHERE id = %s",
                           [int(placed["result_id"])]).fetchone()
        assert job == ("emails", {"task": "shop.tasks.send_receipt", "args": [placed["order"]], "kwargs": {}},
                       0), job
        passed.append("atomic view committed: one order, one job")

        charged = manage(python, dsn, "shopctl", "charge", str(placed["order"]))
        row = conn.execute("SELECT queue, priority FROM jobq.jobs WHERE id = %s",
                           [int(charged["result_id"])]).fetchone()
        assert row == ("payments", -20), f"Django priority 20 is jobq priority -20: {row}"
        passed.append("queue_name and priority map onto the job")

        expectations = manage(python, dsn, "expectations", "enqueue")
        expectation_ids = [int(job_id) for job_id in expectations["ids"].values()]

        worker = subprocess.Popen([python, "manage.py", "jobq_worker", "--concurrency", "2",
                                   "--poll-interval", "0.2"], cwd=PROJECT,
                                  env={**os.environ, "DATABASE_URL": dsn},
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_finished(conn, [int(placed["result_id"]), int(charged["result_id"]), *expectation_ids])
            # the worker still runs: Django's connection of the task's thread is closed all the same
            pid = pyqueue.result(conn, int(expectations["ids"]["connection_pid"]))
            assert isinstance(pid, int) and worker.poll() is None, (pid, worker.poll())
            wait_gone(conn, pid)
            passed.append("the worker closes a task's Django connection after it (CONN_MAX_AGE 0)")
        finally:
            worker.send_signal(signal.SIGTERM)
            out, err = worker.communicate(timeout=STEP_TIMEOUT)
        assert worker.returncode == 0, f"jobq_worker exited {worker.returncode}:\n{err}"
        assert "queues emails, expect, payments" in out, out
        passed.append("manage.py jobq_worker ran the tasks and stopped on SIGTERM with status 0")

        sent = conn.execute("SELECT receipt_sent FROM shop_order").fetchone()
        assert sent == (True,), f"the task's own write: {sent}"
        results = manage(python, dsn, "shopctl", "result", placed["result_id"], charged["result_id"])
        receipt = results[placed["result_id"]]
        assert receipt["status"] == receipt["refreshed"] == receipt["async"] == "SUCCESSFUL", receipt
        assert receipt["return_value"] == {"order": placed["order"], "item": "book"}, receipt
        assert receipt["same_task"] and receipt["attempts"] == 1 and receipt["errors"] == [], receipt
        assert receipt["finished_at"] is not None and receipt["task"] == "shop.tasks.send_receipt", receipt
        passed.append("result read back: SUCCESSFUL with the return value (get_result, refresh, aget_result)")

        failed = results[charged["result_id"]]
        assert failed["status"] == failed["refreshed"] == failed["async"] == "FAILED", failed
        assert failed["attempts"] == 2 and len(failed["errors"]) == 2, failed
        for error in failed["errors"]:
            assert error["exception"] == "shop.tasks.PaymentDeclined", error
            assert error["traceback"].startswith("Traceback (most recent call last):"), error
            assert f"card of order {placed['order']} declined" in error["traceback"], error
        assert failed["queue"] == "payments" and failed["priority"] == 20, failed
        passed.append("failing task retried, then FAILED with both tracebacks")

        unknown = ["abc", "0", "-1", "99999999999999999999", "424242"]
        missing = manage(python, dsn, "shopctl", "missing", *unknown)
        assert missing == {value: f"no task result with id {value!r}" for value in unknown}, missing
        passed.append("get_result of an unknown id raises TaskResultDoesNotExist")

        checked = manage(python, dsn, "expectations", "check", json.dumps(expectations["ids"]))
        outcome = {**expectations["outcome"], **checked["outcome"]}
        framework = expectations["framework"]
        failing = {name for name, verdict in outcome.items() if verdict != "pass"}
        assert failing == KNOWN_FAILING[framework], {name: outcome[name] for name in failing}
        for name in sorted(outcome):
            print(f"{outcome[name][:4].lower()}: Django's tests/tasks expectation {name}")
        passed.append(f"Django's own tests/tasks expectations: {len(outcome) - len(failing)} of "
                      f"{len(outcome)} pass, as known ({', '.join(sorted(failing)) or 'none fails'})")
    return passed


def main(argv: list[str] | None = None) -> int:
    """Run the scenario with ``--python`` on a throwaway server of its own."""
    from pyqueue.localserver import LocalServer, temporary_directory  # noqa: PLC0415 - the command line only

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--python", required=True)
    parser.add_argument("--port", type=int, default=55437)
    args = parser.parse_args(argv)
    directory = temporary_directory("jobq-django-")
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(shutil.rmtree, directory, ignore_errors=True)
        server = cleanup.enter_context(LocalServer(directory, port=args.port, database="shop"))
        install = Path(__file__).resolve().parent.parent / "sql" / f"jobq--{pyqueue.__version__}.sql"
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            conn.execute(install.read_text().encode())
        version = subprocess.run([args.python, "-c", "import django; print(django.get_version())"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        passed = run(args.python, server.dsn)
    for name in passed:
        print(f"ok: Django {version}: {name}")
    print(f"django scenario on Django {version}: all {len(passed)} checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
