"""Workflows made of dependent jobs: :func:`chain` (each step
waits for the previous one) and :func:`group` (steps that run side by side,
then one callback that sees how they ended).

Each is written once as a script of statements (``pyqueue._statements``)
that the sync call sends on a ``Connection`` and its asyncio twin on an
``AsyncConnection``. Both join the caller's transaction, like
:func:`pyqueue.enqueue`: the jobs exist iff it commits.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import psycopg

from pyqueue import _statements as s
from pyqueue import _workflow_statements as w
from pyqueue._checks import refuse
from pyqueue._db import Statement, arun, run
from pyqueue.errors import InvalidArgument

T = TypeVar("T")
Script = Generator[Statement[Any], Any, T]


@dataclass(frozen=True)
class Step:
    """One job of a :func:`chain` or :func:`group`: its queue, payload and
    options, as :func:`pyqueue.enqueue` takes them. A plain ``(queue,
    payload)`` tuple stands for ``Step(queue, payload)``.

    ``on_parent_failure`` matters in a chain only: what this step does when
    the step before it is dead or cancelled ('cancel', the default, or 'run').
    """

    queue: str
    payload: Mapping[str, Any]
    priority: int = 0
    max_attempts: int | None = None
    key: str | None = None
    group_key: str | None = None
    timeout: timedelta | float | None = None
    on_parent_failure: str = "cancel"


StepLike = Step | tuple[str, Mapping[str, Any]]


@dataclass(frozen=True)
class Group:
    """What :func:`group` enqueued: the members' ids (in the order of the
    steps) and the callback's id."""

    members: list[int]
    callback: int


def as_step(step: object, name: str) -> Step:
    """A :class:`Step` from a Step or a ``(queue, payload)`` pair."""
    if isinstance(step, Step):
        return step
    if isinstance(step, tuple) and len(step) == 2:
        return Step(step[0], step[1])
    raise refuse(InvalidArgument,
                 f"{name} must be a Step or a (queue, payload) pair, got {type(step).__name__}",
                 "For example (\"resize\", {\"image\": 7}) or Step(\"resize\", {\"image\": 7}, priority=-1).")


def _enqueue(step: Step, depends_on: list[int] | None) -> Statement[int]:
    return s.enqueue(step.queue, step.payload, priority=step.priority, max_attempts=step.max_attempts,
                     key=step.key, group_key=step.group_key, timeout=step.timeout, depends_on=depends_on,
                     on_parent_failure=step.on_parent_failure)


def chain_script(steps: Sequence[StepLike]) -> Script[list[int]]:
    """Enqueue the steps in order, each depending on the one before."""
    checked = [as_step(step, f"steps[{i}]") for i, step in enumerate(steps, start=1)]
    for step in checked:  # every step's arguments are checked before anything is sent
        _enqueue(step, [0])
    ids: list[int] = []
    for step in checked:
        ids.append((yield _enqueue(step, ids[-1:] or None)))
    return ids


def group_script(steps: Sequence[StepLike], then: StepLike) -> Script[Group]:
    """Enqueue the steps, one enqueue_many per queue and options, then the callback."""
    checked = [as_step(step, f"steps[{i}]") for i, step in enumerate(steps, start=1)]
    callback = as_step(then, "then")
    batches: dict[tuple[Any, ...], list[int]] = {}
    for i, step in enumerate(checked):
        options = (step.queue, step.priority, step.max_attempts, step.group_key, step.timeout)
        batches.setdefault(options, []).append(i)
    statements = [
        (indexes, s.enqueue_many(queue, [checked[i].payload for i in indexes], priority=priority,
                                 max_attempts=max_attempts, keys=[checked[i].key for i in indexes],
                                 group_key=group_key, timeout=timeout))
        for (queue, priority, max_attempts, group_key, timeout), indexes in batches.items()
    ]

    def then_statement(members: list[int]) -> Statement[int]:
        return w.enqueue_callback(callback.queue, callback.payload, members, priority=callback.priority,
                                  max_attempts=callback.max_attempts)

    then_statement([])  # checked before anything is sent
    ids: list[int] = [0] * len(checked)
    for indexes, statement in statements:
        for i, job_id in zip(indexes, (yield statement), strict=True):
            ids[i] = job_id
    return Group(ids, (yield then_statement(ids)))


def _drive(conn: psycopg.Connection[Any], script: Script[T]) -> T:
    try:
        statement = next(script)
        while True:
            statement = script.send(run(conn, statement))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def _adrive(conn: psycopg.AsyncConnection[Any], script: Script[T]) -> T:
    try:
        statement = next(script)
        while True:
            statement = script.send(await arun(conn, statement))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def _documented(fn: Callable[..., Any], source: Callable[..., Any]) -> None:
    fn.__doc__ = source.__doc__


def chain(conn: psycopg.Connection[Any], steps: Sequence[StepLike]) -> list[int]:
    """Enqueue ``steps`` so that each runs after the one before completed;
    their ids, in order.

    A step is a :class:`Step` or a ``(queue, payload)`` pair. Each step's
    job depends on the previous one (``depends_on``): a step reads the
    result of the one before with :func:`pyqueue.parent_results`. When a
    step ends dead or cancelled, the later steps are cancelled (unless a
    step says ``on_parent_failure='run'``). Joins the caller's transaction."""
    return _drive(conn, chain_script(steps))


def group(conn: psycopg.Connection[Any], steps: Sequence[StepLike], *, then: StepLike) -> Group:
    """Enqueue ``steps`` to run side by side, and the callback ``then`` that
    runs once all of them finished; a :class:`Group` of the ids.

    Steps of the same queue and options go in one ``enqueue_many``. The
    callback (a ``jobq.enqueue_callback``) becomes ready once every member
    completed, died or was cancelled, with ``"batch": {"completed": c,
    "dead": d, "cancelled": x, "members": n}`` added to its payload. Joins
    the caller's transaction."""
    return _drive(conn, group_script(steps, then))


async def async_chain(conn: psycopg.AsyncConnection[Any], steps: Sequence[StepLike]) -> list[int]:
    return await _adrive(conn, chain_script(steps))


async def async_group(
    conn: psycopg.AsyncConnection[Any], steps: Sequence[StepLike], *, then: StepLike
) -> Group:
    return await _adrive(conn, group_script(steps, then))


_documented(async_chain, chain)
_documented(async_group, group)
async_chain.__name__ = async_chain.__qualname__ = "chain"
async_group.__name__ = async_group.__qualname__ = "group"
