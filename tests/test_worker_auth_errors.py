"""Authentication and authorisation errors (a role that does not exist, may
not log in, may not connect, or has no jobq grant) raise from every sync
and async worker at once instead of being retried as a lost connection."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterator
from functools import partial

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import pyqueue
from pyqueue import aio
from tests.worker_support import InThread

Conn = psycopg.Connection[tuple[object, ...]]

TIMEOUT = 60.0  # seconds: generous bound for anything to happen


def other_role(dsn: str, user: str) -> str:
    params = conninfo_to_dict(dsn)
    params["user"] = user
    return make_conninfo(**{k: str(v) for k, v in params.items() if v is not None})


@pytest.fixture
def refused_dsns(conn: Conn, dsn: str) -> Iterator[dict[str, str]]:
    """DSNs the server really refuses, and a role without jobq's grants:
    a role that does not exist (28000), one that may not log in (28000),
    one without CONNECT on this database (42501), one without jobq grants
    (42501 at the first claim). The test servers trust local connections,
    so a wrong password alone would be let in."""
    tag = uuid.uuid4().hex[:8]
    nologin, noconnect, nogrant = f"nologin_{tag}", f"noconnect_{tag}", f"nogrant_{tag}"
    dbname = str(conninfo_to_dict(dsn)["dbname"])
    conn.execute(f"CREATE ROLE {nologin} NOLOGIN")
    conn.execute(f"CREATE ROLE {noconnect} LOGIN")
    conn.execute(f"CREATE ROLE {nogrant} LOGIN")
    conn.execute(f'REVOKE CONNECT ON DATABASE "{dbname}" FROM PUBLIC')
    conn.execute(f'GRANT CONNECT ON DATABASE "{dbname}" TO {nogrant}')
    yield {
        "unknown role": other_role(dsn, f"nobody_{tag}"),
        "no login": other_role(dsn, nologin),
        "no connect": other_role(dsn, noconnect),
        "no jobq grant": other_role(dsn, nogrant),
    }
    conn.execute(f'GRANT CONNECT ON DATABASE "{dbname}" TO PUBLIC')
    for role in (nologin, noconnect, nogrant):
        conn.execute(f'REVOKE ALL ON DATABASE "{dbname}" FROM {role}')
        conn.execute(f"DROP ROLE {role}")


def raised_by(run: Callable[[], object]) -> BaseException:
    """What ``run`` raised, in a thread that must end by itself (no stop is ever given)."""
    worker = InThread(run)
    worker.thread.join(TIMEOUT)
    assert not worker.thread.is_alive(), "still retrying: an authentication error taken for a lost connection"
    assert worker.error is not None, "returned instead of raising"
    return worker.error


WHY = {"unknown role": "does not exist", "no login": "not permitted to log in",
       "no connect": "permission denied for database", "no jobq grant": "permission denied"}


def test_authentication_errors_raise_from_the_sync_workers(
    refused_dsns: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="pyqueue.worker")
    def worker_run(refused: str) -> None:
        worker = pyqueue.Worker(refused, poll_interval=0.5)
        worker.register("q", lambda job: None)
        worker.run(handle_signals=False)

    def handler_listen(refused: str) -> None:
        pyqueue.listen(refused, "q", lambda job: None, handle_signals=False)

    def iterator_listen(refused: str) -> None:
        next(iter(pyqueue.listen(refused, "q", handle_signals=False)))

    for case, refused in refused_dsns.items():
        for what, run in {"Worker.run": worker_run, "listen(handler)": handler_listen,
                          "listen()": iterator_listen}.items():
            error = raised_by(partial(run, refused))
            assert isinstance(error, psycopg.Error), f"{case}, {what}: {error!r}"
            assert WHY[case] in str(error), f"{case}, {what}: {error}"
    assert "database connection lost" not in caplog.text


def test_authentication_errors_raise_from_the_async_workers(
    refused_dsns: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="pyqueue.worker")

    async def worker_run(refused: str) -> None:
        worker = aio.AsyncWorker(refused, poll_interval=0.5)

        async def handle(job: aio.AsyncJob) -> None: ...

        worker.register("q", handle)
        await worker.run(handle_signals=False)

    async def handler_listen(refused: str) -> None:
        async def handle(job: aio.AsyncJob) -> None: ...

        await aio.listen(refused, "q", handle, handle_signals=False)

    async def iterator_listen(refused: str) -> None:
        async with aio.listen(refused, "q", handle_signals=False) as jobs:
            async for _ in jobs:
                pass

    for case, refused in refused_dsns.items():
        for run in (worker_run, handler_listen, iterator_listen):
            error = raised_by(partial(asyncio.run, run(refused)))
            assert isinstance(error, psycopg.Error), f"{case}, {run.__name__}: {error!r}"
            assert WHY[case] in str(error), f"{case}, {run.__name__}: {error}"
    assert "database connection lost" not in caplog.text
