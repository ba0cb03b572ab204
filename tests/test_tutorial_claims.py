"""What the tutorial's §5 and §6 say happens, checked against what does
(issue 29, item 9): a retried attempt is one WARNING line and only the job
that goes dead logs an ERROR with its traceback; under pg_cron (the server
``make db-start`` starts loads it) the schedule's runner is pg_cron, and the
tutorial says so."""

from __future__ import annotations

import logging
import re
import threading

import psycopg
import pytest
from pytest_postgresql.executors import PostgreSQLExecutor

import pyqueue
from pyqueue import schema
from tests.conftest import ROOT, fresh_cron_database

Conn = psycopg.Connection[tuple[object, ...]]
TUTORIAL = ROOT / "docs" / "tutorial.md"


def section(number: int) -> str:
    text = TUTORIAL.read_text(encoding="utf-8")
    found = re.search(rf"^## {number}\. .*?(?=^## )", text, re.M | re.S)
    assert found, f"no section {number}"
    return found.group(0)


def test_a_retried_attempt_is_one_warning_line_and_only_the_dead_job_an_error(
        conn: Conn, dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    pyqueue.configure_queue(conn, "webhooks", max_attempts=2, backoff_base=0.2, backoff_cap=0.2)
    job_id = pyqueue.enqueue(conn, "webhooks", {"url": "https://example.com/hook"})
    worker = pyqueue.Worker(dsn, poll_interval=0.2, run_schedules=False)
    caplog.set_level(logging.INFO, logger="pyqueue")

    @worker.handler("webhooks")
    def call_webhook(job: pyqueue.Job) -> None:
        if job.attempts == job.max_attempts:
            threading.Timer(0.5, worker.stop).start()
        raise ConnectionError("example.com refused the connection")

    timer = threading.Timer(20, worker.stop)  # a safety net: the handler stops it sooner
    timer.start()
    worker.run(handle_signals=False)
    timer.cancel()
    failed = [r for r in caplog.records if f"job {job_id} of queue webhooks" in r.getMessage()]
    assert [(r.levelname, r.exc_info is not None) for r in failed] == [("WARNING", False), ("ERROR", True)]
    assert failed[0].getMessage() == (f"job {job_id} of queue webhooks failed (attempt 1 of 2, will retry): "
                                      "ConnectionError: example.com refused the connection")
    assert failed[1].getMessage().startswith(f"job {job_id} of queue webhooks is dead after 2 of 2 attempts")
    # What §5 says about it.
    text = " ".join(section(5).split())
    assert "one ERROR line when the job goes dead" not in text
    assert "a WARNING line per attempt that will be retried" in text
    assert "then one ERROR, with the traceback, when the job goes dead" in text


def test_under_pg_cron_the_schedule_runner_is_pg_cron_as_the_tutorial_says(
        postgresql_proc: PostgreSQLExecutor) -> None:
    dsn = fresh_cron_database(postgresql_proc)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_cron")  # as make db-start's server has it
        schema.install(conn)
        try:
            conn.execute("SELECT jobq.every('nightly-digest', '0 3 * * *', 'digests', '{}')")
            row = conn.execute("SELECT runner, next_run_at FROM jobq.schedules").fetchone()
        finally:
            fresh_cron_database(postgresql_proc)  # emptied for the next test
    assert row == ("pg_cron", None)
    text = " ".join(section(6).split())
    assert "— as here — the workers do" not in text  # the old claim, false under make db-start
    assert ("as on the server `make db-start` starts, which loads it — pg_cron does: "
            "`runner` is `pg_cron`") in text
    assert "`next_run_at` stays empty" in text
