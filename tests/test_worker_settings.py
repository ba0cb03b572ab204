"""The settings of Worker, AsyncWorker and listen() are checked when they
are given (in the constructor, or at the listen() call), not at the first
claim; a lease given in seconds is a lease."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import pyqueue
from pyqueue import aio

Conn = psycopg.Connection[tuple[object, ...]]

BAD_SETTINGS: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"lease": timedelta(0)}, ValueError, "lease"),
    ({"lease": timedelta(seconds=-5)}, ValueError, "lease"),
    ({"lease": -1}, ValueError, "lease"),
    ({"lease": timedelta(days=2)}, ValueError, "lease"),
    ({"lease": True}, TypeError, "lease"),
    ({"lease": "30"}, TypeError, "lease"),
    ({"reap_interval": -1}, ValueError, "reap_interval"),
    ({"reap_interval": 0}, ValueError, "reap_interval"),
    ({"reap_interval": float("nan")}, ValueError, "reap_interval"),
    ({"poll_interval": 0}, ValueError, "poll_interval"),
    ({"poll_interval": float("inf")}, ValueError, "poll_interval"),
    ({"poll_interval": False}, TypeError, "poll_interval"),
    ({"batch_size": 0}, ValueError, "batch_size"),
    ({"batch_size": 1001}, ValueError, "batch_size"),
    ({"batch_size": 2.0}, TypeError, "batch_size"),
    ({"batch_size": True}, TypeError, "batch_size"),
    ({"shutdown_timeout": -1}, ValueError, "shutdown_timeout"),
    ({"shutdown_timeout": "30"}, TypeError, "shutdown_timeout"),
    ({"use_listen": "no"}, TypeError, "use_listen"),
    ({"run_schedules": 1}, TypeError, "run_schedules"),
]
WORKER_ONLY: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"concurrency": 0}, ValueError, "concurrency"),
    ({"concurrency": "4"}, TypeError, "concurrency"),
    ({"concurrency": True}, TypeError, "concurrency"),
    ({"name": 42}, TypeError, "name"),
    ({"name": "x" * 201}, ValueError, "name"),
]
LISTEN_ONLY: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"worker_name": 42}, TypeError, "worker_name"),
    ({"handle_signals": None}, TypeError, "handle_signals"),
]


@pytest.mark.parametrize(("options", "error", "name"), BAD_SETTINGS + WORKER_ONLY)
def test_worker_settings_are_checked_in_the_constructor(
    dsn: str, options: dict[str, Any], error: type[Exception], name: str
) -> None:
    with pytest.raises(error, match=name):
        pyqueue.Worker(dsn, **options)
    with pytest.raises(error, match=name):
        aio.AsyncWorker(dsn, **options)


@pytest.mark.parametrize(("options", "error", "name"), BAD_SETTINGS + LISTEN_ONLY)
def test_listen_settings_are_checked_at_once(
    dsn: str, options: dict[str, Any], error: type[Exception], name: str
) -> None:
    with pytest.raises(error, match=name):
        pyqueue.listen(dsn, "q", **options)
    with pytest.raises(error, match=name):
        pyqueue.listen(dsn, "q", lambda job: None, **options)
    with pytest.raises(error, match=name):
        aio.listen(dsn, "q", **options)


def test_listen_checks_its_other_arguments(dsn: str) -> None:
    with pytest.raises(TypeError, match="queues"):
        pyqueue.listen(dsn, 42)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="stop"):
        pyqueue.listen(dsn, "q", stop=asyncio.Event())  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="stop"):
        aio.listen(dsn, "q", stop=threading.Event())  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="handler"):
        pyqueue.listen(dsn, "q", "not callable")  # type: ignore[call-overload]


def test_a_lease_in_seconds_is_a_lease(conn: Conn, dsn: str) -> None:
    """Worker(lease=3) used to die at the first claim ("cannot cast type smallint
    to interval"): a number is a number of seconds, as for every duration."""
    pyqueue.enqueue(conn, "nb", {})
    with pyqueue.listen(dsn, "nb", lease=3, handle_signals=False) as jobs:
        job = next(jobs)
        assert job.lease_seconds == pytest.approx(3.0, abs=1.0)
        job.complete()
    worker = pyqueue.Worker(dsn, lease=3, poll_interval=0.2)
    assert worker.lease == timedelta(seconds=3)
    seen: list[float | None] = []

    @worker.handler("nb")
    def handle(job: pyqueue.Job) -> None:
        seen.append(job.lease_seconds)
        worker.stop()

    pyqueue.enqueue(conn, "nb", {})
    worker.run(handle_signals=False)
    assert seen and seen[0] == pytest.approx(3.0, abs=1.0)
