"""Each client call of :mod:`pyqueue.client` next to its asyncio twin of
:mod:`pyqueue.aio`, both made from one statement builder of
``pyqueue._statements`` (arguments, checks, SQL, result, documentation).

The sync call sends the statement with :func:`~pyqueue._db.run`, its twin
with :func:`~pyqueue._db.arun`; both take the caller's connection first and
never commit for the caller. ``claim`` adds a step of its own: it makes
jobs bound to that connection. (``complete_many`` and ``take``, whose I/O
differs more, are written in each module.)
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

import psycopg

from pyqueue import _grant_statements as g
from pyqueue import _statements as s
from pyqueue import _workflow_statements as w
from pyqueue._db import Claimed, Statement, arun, run, undecodable
from pyqueue._statements import present_as
from pyqueue.job import AsyncJob, Job

Connection = psycopg.Connection[Any]
AsyncConnection = psycopg.AsyncConnection[Any]
P = ParamSpec("P")
T = TypeVar("T")
Async = Coroutine[Any, Any, T]
SYNC_MODULE = "pyqueue.client"
ASYNC_MODULE = "pyqueue._aioclient"


def twins(
    build: Callable[P, Statement[T]],
) -> tuple[Callable[Concatenate[Connection, P], T], Callable[Concatenate[AsyncConnection, P], Async[T]]]:
    """The sync call and the coroutine function that send the statement
    ``build`` makes (``conn`` may be passed by name too, as their signature says)."""
    def call(conn: Connection, *args: Any, **kwargs: Any) -> T:
        return run(conn, build(*args, **kwargs))

    async def acall(conn: AsyncConnection, *args: Any, **kwargs: Any) -> T:
        return await arun(conn, build(*args, **kwargs))

    present_as(call, build, SYNC_MODULE, "Connection")
    present_as(acall, build, ASYNC_MODULE, "AsyncConnection")
    return (cast(Callable[Concatenate[Connection, P], T], call),
            cast(Callable[Concatenate[AsyncConnection, P], Async[T]], acall))


enqueue, async_enqueue = twins(s.enqueue)
enqueue_many, async_enqueue_many = twins(s.enqueue_many)
enqueue_callback, async_enqueue_callback = twins(w.enqueue_callback)
result, async_result = twins(w.result)
status, async_status = twins(w.status)
parent_results, async_parent_results = twins(w.parent_results)
complete, async_complete = twins(s.complete)
fail, async_fail = twins(s.fail)
heartbeat, async_heartbeat = twins(s.heartbeat)
release, async_release = twins(s.release)
snooze, async_snooze = twins(s.snooze)
every, async_every = twins(s.every)
unschedule, async_unschedule = twins(s.unschedule)
schedules, async_schedules = twins(s.schedules)
retry, async_retry = twins(s.retry)
retry_dead, async_retry_dead = twins(s.retry_dead)
cancel, async_cancel = twins(s.cancel)
cancel_jobs, async_cancel_jobs = twins(s.cancel_jobs)
discard_dead, async_discard_dead = twins(s.discard_dead)
pause, async_pause = twins(s.pause)
resume, async_resume = twins(s.resume)
reap, async_reap = twins(s.reap)
stats, async_stats = twins(s.stats)
configure_queue, async_configure_queue = twins(s.configure_queue)
grant_queue, async_grant_queue = twins(g.grant_queue)
revoke_queue, async_revoke_queue = twins(g.revoke_queue)
queue_grants, async_queue_grants = twins(g.queue_grants)


def claiming(
    build: Callable[P, Statement[Claimed]],
) -> tuple[Callable[Concatenate[Connection, P], list[Job]],
           Callable[Concatenate[AsyncConnection, P], Async[list[AsyncJob]]]]:
    """The claim calls: the claimed rows become jobs whose methods use
    ``conn``; a job whose payload cannot be decoded is failed with that
    error and left out."""
    def call(conn: Connection, *args: Any, **kwargs: Any) -> list[Job]:
        jobs = Job._from_claim(run(conn, build(*args, **kwargs)), lambda: contextlib.nullcontext(conn))
        for job in jobs:
            if (error := undecodable(job.payload)) is not None:
                job.fail(error)
        return [job for job in jobs if undecodable(job.payload) is None]

    async def acall(conn: AsyncConnection, *args: Any, **kwargs: Any) -> list[AsyncJob]:
        @contextlib.asynccontextmanager
        async def same_connection() -> AsyncIterator[AsyncConnection]:
            yield conn

        jobs = AsyncJob._from_claim(await arun(conn, build(*args, **kwargs)), same_connection)
        for job in jobs:
            if (error := undecodable(job.payload)) is not None:
                await job.fail(error)
        return [job for job in jobs if undecodable(job.payload) is None]

    present_as(call, build, SYNC_MODULE, "Connection", "list[Job]")
    present_as(acall, build, ASYNC_MODULE, "AsyncConnection", "list[AsyncJob]")
    return (cast(Callable[Concatenate[Connection, P], list[Job]], call),
            cast(Callable[Concatenate[AsyncConnection, P], Async[list[AsyncJob]]], acall))


claim, async_claim = claiming(s.claim)
