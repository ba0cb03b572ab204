"""A database without jobq, or with an older jobq, answered plainly everywhere
(issue 29, items 2, 4 and 5): the CLI's commands, the client calls, the
workers' first connection and every dashboard page say "jobq is not
installed" with ``pyqueue install``, or which version is there, which one is
needed and ``pyqueue upgrade``; a worker that cannot make its first
connection raises at once instead of retrying for ever; and a worker says
what it starts, as ``pyqueue worker`` does."""

from __future__ import annotations

import asyncio
import importlib.metadata
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pytest_postgresql.executors import PostgreSQLExecutor

import pyqueue
import pyqueue.aio
from pyqueue import schema
from pyqueue.cli import main
from tests.conftest import default_version, proc_dsn
from tests.dashboard_http_support import dashboard
from tests.test_cli import cli, empty_dsn  # noqa: F401  (a fixture)

Conn = psycopg.Connection[tuple[Any, ...]]
OLD = "0.4.0"  # a release without depends_on, jobq.workers or jobq.throughput
NOT_INSTALLED = "jobq is not installed in this database"
FAIL_FAST = 15.0  # seconds: a worker that would retry for ever is stopped and the test fails


@pytest.fixture
def old_dsn(postgresql_proc: PostgreSQLExecutor) -> Iterator[str]:
    """A fresh database with jobq 0.4.0, dropped afterwards."""
    name = f"jobq_old_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(proc_dsn(postgresql_proc, "postgres"), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    dsn = proc_dsn(postgresql_proc, name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        schema.install(conn, OLD)
    yield dsn
    with psycopg.connect(proc_dsn(postgresql_proc, "postgres"), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def test_every_cli_command_says_jobq_is_not_installed(empty_dsn: str,  # noqa: F811
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    for command in (["enqueue", "q", "{}"], ["stats"], ["retry", "--dead", "q"], ["cancel", "q"],
                    ["discard-dead", "q"]):
        code = main([*command, "--dsn", empty_dsn])  # in this process: a subprocess each costs seconds
        stderr = capsys.readouterr().err
        assert code == 2, (command, stderr)
        assert f"error: {NOT_INSTALLED}" in stderr, (command, stderr)
        assert "hint: Run `pyqueue install` first" in stderr, command
        assert "does not exist" not in stderr, command
    done = cli("stats", "--dsn", empty_dsn)  # and once as the real command, no traceback
    assert done.returncode == 2 and f"error: {NOT_INSTALLED}" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_call_an_older_jobq_lacks_says_which_versions_and_pyqueue_upgrade(old_dsn: str) -> None:
    with psycopg.connect(old_dsn, autocommit=True) as conn:
        with pytest.raises(pyqueue.JobqOutdated) as raised:
            pyqueue.enqueue(conn, "q", {}, depends_on=[1])
        assert raised.value.installed == OLD and raised.value.needed == default_version()
        assert raised.value.missing.startswith("function jobq.enqueue(")
        needs = f"does not exist in jobq {OLD}: this pyqueue needs jobq {default_version()}"
        assert needs in str(raised.value)
        assert "`pyqueue upgrade`" in (raised.value.hint or "")
        assert isinstance(raised.value.__cause__, psycopg.errors.UndefinedFunction)
    with psycopg.connect(old_dsn) as conn:  # inside a failed transaction the database cannot be asked
        with pytest.raises(pyqueue.JobqOutdated) as raised:
            pyqueue.enqueue(conn, "q", {}, depends_on=[1])
        assert raised.value.installed is None
        assert f"older than this pyqueue needs (jobq {default_version()})" in raised.value.message
        assert "not installed" not in raised.value.message  # a function is missing: the schema is there

    async def asynchronously() -> None:
        async with await psycopg.AsyncConnection.connect(old_dsn, autocommit=True) as conn:
            with pytest.raises(pyqueue.JobqOutdated) as raised:
                await pyqueue.aio.enqueue(conn, "q", {}, depends_on=[1])
            assert raised.value.installed == OLD

    asyncio.run(asynchronously())


def test_client_calls_without_jobq_raise_jobq_not_installed(empty_dsn: str) -> None:  # noqa: F811
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        with pytest.raises(pyqueue.JobqNotInstalled, match=NOT_INSTALLED):
            pyqueue.enqueue(conn, "q", {})
        with pytest.raises(pyqueue.JobqNotInstalled, match=NOT_INSTALLED):
            pyqueue.stats(conn)  # a view: told apart from an older jobq by asking


def run_briefly(worker: pyqueue.Worker) -> BaseException | None:
    """Run the worker in a thread; what run() raised within FAIL_FAST seconds
    (None: it was still running, and has been stopped)."""
    raised: list[BaseException] = []

    def target() -> None:
        try:
            worker.run(handle_signals=False)
        except BaseException as error:  # reported to the test
            raised.append(error)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(FAIL_FAST)
    if thread.is_alive():
        worker.stop()
        thread.join(FAIL_FAST)
    return raised[0] if raised else None


def a_worker(dsn: str, *queues: str) -> pyqueue.Worker:
    worker = pyqueue.Worker(dsn, poll_interval=0.2, run_schedules=False)
    for queue in queues or ("emails",):
        worker.register(queue, lambda job: None)
    return worker


def an_async_worker(dsn: str) -> pyqueue.aio.AsyncWorker:
    async def handle(job: pyqueue.aio.AsyncJob) -> None:
        pass

    worker = pyqueue.aio.AsyncWorker(dsn, poll_interval=0.2, run_schedules=False)
    worker.register("emails", handle)
    return worker


async def first_of(dsn: str, what: str) -> None:
    """Start the asyncio worker or listen() on dsn; it must raise within FAIL_FAST seconds."""
    async def iterate() -> None:
        async with pyqueue.aio.listen(dsn, "emails", handle_signals=False) as jobs:
            async for _ in jobs:
                pass

    running = an_async_worker(dsn).run(handle_signals=False) if what == "worker" else iterate()
    await asyncio.wait_for(running, FAIL_FAST)


def test_workers_and_listen_say_jobq_is_not_installed(empty_dsn: str) -> None:  # noqa: F811
    assert isinstance(run_briefly(a_worker(empty_dsn)), pyqueue.JobqNotInstalled)
    with pytest.raises(pyqueue.JobqNotInstalled, match=NOT_INSTALLED):
        pyqueue.listen(empty_dsn, "emails", handle_signals=False)
    with pytest.raises(pyqueue.JobqNotInstalled, match=NOT_INSTALLED):
        pyqueue.listen(empty_dsn, "emails", lambda job: None, handle_signals=False)
    for what in ("worker", "listen"):
        with pytest.raises(pyqueue.JobqNotInstalled, match=NOT_INSTALLED):
            asyncio.run(first_of(empty_dsn, what))


def test_a_worker_that_cannot_make_its_first_connection_raises_at_once(tmp_path: Path) -> None:
    nowhere = f"host={tmp_path} port=1 dbname=nothing connect_timeout=2"  # no server on that socket
    started = time.monotonic()
    assert isinstance(run_briefly(a_worker(nowhere)), psycopg.OperationalError)
    with pytest.raises(psycopg.OperationalError):
        pyqueue.listen(nowhere, "emails", handle_signals=False)
    for what in ("worker", "listen"):
        with pytest.raises(psycopg.OperationalError):
            asyncio.run(first_of(nowhere, what))
    assert time.monotonic() - started < FAIL_FAST


def test_a_worker_logs_its_start_and_warns_of_an_unknown_queue(
        conn: Conn, dsn: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    # The version is the code's own (pyqueue.__version__), not read from the
    # installed distribution (its metadata scan costs CPU at each start): a checkout
    # that pip never installed still says which pyqueue runs.
    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    pyqueue.enqueue(conn, "emails", {})
    caplog.set_level(logging.INFO, logger="pyqueue.worker")
    worker = a_worker(dsn, "emails", "emials")
    threading.Timer(1.0, worker.stop).start()
    assert run_briefly(worker) is None
    [start] = [r for r in caplog.records if "pyqueue worker starting" in r.getMessage()]
    assert start.levelno == logging.INFO
    assert f"queues emails, emials; concurrency {worker.concurrency}" in start.getMessage()
    assert f"jobq {default_version()} installed; pyqueue {pyqueue.__version__}" in start.getMessage()
    [unknown] = [r for r in caplog.records if "never seen" in r.getMessage()]
    assert unknown.levelno == logging.WARNING
    assert "queue emials " in unknown.getMessage() and unknown.getMessage().endswith("Known queues: emails")

    caplog.clear()
    with pyqueue.listen(dsn, "emails", handle_signals=False) as jobs:
        jobs.stop()
    [start] = [r for r in caplog.records if "pyqueue listen starting" in r.getMessage()]
    assert "queues emails; batch size 10" in start.getMessage()
    assert not [r for r in caplog.records if "never seen" in r.getMessage()]


def test_a_worker_on_an_older_jobq_says_which_and_works_quietly(old_dsn: str,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    # An older jobq is worked as far as it goes (tests/test_worker_maintenance.py): the startup
    # line says which jobq is there, and nothing warns until a call it lacks raises JobqOutdated.
    caplog.set_level(logging.INFO, logger="pyqueue.worker")
    with psycopg.connect(old_dsn, autocommit=True) as conn:
        pyqueue.enqueue(conn, "emails", {})
    with pyqueue.listen(old_dsn, "emails", handle_signals=False) as jobs:
        jobs.stop()
    [start] = [r for r in caplog.records if "pyqueue listen starting" in r.getMessage()]
    assert f"jobq {OLD} installed; pyqueue " in start.getMessage()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_every_dashboard_page_says_jobq_is_not_installed_or_too_old(empty_dsn: str, old_dsn: str,  # noqa: F811
                                                                     tmp_path: Path) -> None:
    pages = ("/", "/queues/emails", "/jobs/1", "/schedules", "/workers")
    with dashboard(empty_dsn, tmp_path) as served:
        client = served.client()
        for page in pages:
            answer = client.get(page)
            assert answer.status == 503, (page, answer.status)
            assert "jobq is not installed" in answer.body and "pyqueue install" in answer.body, page
    with psycopg.connect(old_dsn, autocommit=True) as conn:
        job = conn.execute("SELECT jobq.enqueue('emails', '{}')").fetchone()
    assert job is not None
    with dashboard(old_dsn, tmp_path) as served:
        client = served.client()
        for page in ("/", "/queues/emails", f"/jobs/{job[0]}", "/workers"):  # /schedules reads what 0.4.0 has
            answer = client.get(page)
            assert answer.status == 503, (page, answer.status)
            assert f"jobq {OLD}" in answer.body and "pyqueue upgrade" in answer.body, page
