"""The statements of the workflow calls, written once like those of
``pyqueue._statements`` (``tools/client_calls.py`` writes the sync and
async calls that send them): batch callbacks, a job's result, state and its
parents' results, and the watch that :func:`pyqueue.wait` sets."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from pyqueue import _arguments as a
from pyqueue import _checks as check
from pyqueue import _hooks
from pyqueue import _queries as q
from pyqueue._db import Statement


def enqueue_callback(
    queue: str,
    payload: Mapping[str, Any],
    members: Iterable[int],
    *,
    delay: timedelta | float | None = None,
    run_at: datetime | None = None,
    priority: int = 0,
    max_attempts: int | None = None,
    meta: Mapping[str, Any] | None = None,
) -> Statement[int]:
    """Add a batch callback and return its id.

    The job waits until every job of ``members`` (any queues) has finished
    (completed, dead or cancelled), then becomes ready once, its payload
    extended with ``"batch": {"completed": c, "dead": d, "cancelled": x,
    "members": n}``. ``delay``/``run_at``, ``priority`` and ``max_attempts``
    and ``meta`` are as for :func:`enqueue`. Member ids as for ``depends_on``:
    :class:`~pyqueue.UnknownJob`, :class:`~pyqueue.InvalidDependency`.
    """
    params = a.callback_params(queue, payload, members, delay=delay, run_at=run_at, priority=priority,
                               max_attempts=max_attempts, meta=meta)
    span = None
    if (producer := _hooks.producer) is not None:
        span, traced = producer.send(queue, "enqueue_callback", meta)
        if traced is not None:
            meta, params = traced, {**params, "meta": check.payload(traced, "meta")}
    sql = q.ENQUEUE_CALLBACK if meta is None else q.ENQUEUE_CALLBACK_META
    return Statement(sql, params, "scalar", int, span)


def result(job_id: int) -> Statement[Any]:
    """The result of a completed job (any JSON value, decoded).

    None while the job is unfinished, when it completed without a result (or
    with JSON null), and when it is dead or cancelled (:func:`status` tells
    these apart). :class:`~pyqueue.UnknownJob` for an id jobq never issued
    or has forgotten (kept for the queue's ``result_retention``)."""
    return Statement(q.RESULT, (check.job_id(job_id),), "scalar", lambda value: value)


def status(job_id: int) -> Statement[str]:
    """The state of a job: 'waiting', 'ready', 'scheduled',
    'running', 'completed', 'dead' or 'cancelled'; :class:`~pyqueue.UnknownJob`
    for an unknown (or forgotten) id."""
    return Statement(q.STATUS, (check.job_id(job_id),), "scalar", str)


def parent_results(job_id: int) -> Statement[dict[int, Any]]:
    """The results of a job's parents (its ``depends_on``): a dict
    from parent id to result, in parent id order; None for a parent without
    a result (yet, or forgotten). Empty for a job without parents;
    :class:`~pyqueue.UnknownJob` for an unknown id."""
    return Statement(q.PARENT_RESULTS, (check.job_id(job_id),), "tuples",
                     lambda rows: {int(row[0]): row[1] for row in rows})


def watch(job_id: int) -> Statement[str]:
    """Mark a live job watched and return its state, as :func:`status`:
    when it finishes, jobq sends NOTIFY ``jobq_finished`` with
    its id. :func:`wait` uses it."""
    return Statement(q.WATCH, (check.job_id(job_id),), "scalar", str)
