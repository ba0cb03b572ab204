"""The statements of the per-queue privileges, written once like those of
``pyqueue._statements`` (``tools/client_calls.py`` writes the sync and async
calls that send them): grant and revoke a role's privilege on the queues a
pattern matches, and list the grants."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pyqueue import _checks as check
from pyqueue import _queries as q
from pyqueue._db import Statement
from pyqueue.errors import InvalidArgument, InvalidQueueName, InvalidRole


@dataclass(frozen=True)
class QueueGrant:
    """One row of ``jobq.queue_grants``: ``role`` may
    ``privilege`` ('produce', 'consume' or 'read') on the queues
    ``queue_pattern`` matches; ``role_exists`` is False for a role dropped
    since (its grant still restricts those queues)."""

    role: str
    queue_pattern: str
    privilege: str
    granted_at: datetime
    granted_by: str
    role_exists: bool


def _grant_params(role: str, queue_pattern: str, privilege: str) -> tuple[str | None, ...]:
    return (check.text(role, "role", InvalidRole),
            check.text(queue_pattern, "queue_pattern", InvalidQueueName),
            check.text(privilege, "privilege", InvalidArgument))


def grant_queue(role: str, queue_pattern: str, privilege: str) -> Statement[bool]:
    """Let ``role`` ``privilege`` on the queues ``queue_pattern`` matches
    (as jobq_admin); True when the grant is new.

    ``privilege`` is 'produce' (enqueue, enqueue_many, enqueue_callback),
    'consume' (claim, take, hold) or 'read' (result, status, parent_results,
    watch, the rows of jobq.jobs); ``queue_pattern`` a queue name, or a
    prefix followed by ``*`` ('billing.*'; '*' alone: every queue). Opt-in:
    a queue that grants of a privilege match allows it only to their roles
    (and the roles inheriting from them, and sessions that SET ROLE to
    them) and jobq_admin; others get :class:`~pyqueue.QueuePrivilegeDenied`, or, reading, the
    :class:`~pyqueue.UnknownJob` of an unknown id. Queues no grant matches
    keep the role-level rules.
    """
    return Statement(q.GRANT_QUEUE, _grant_params(role, queue_pattern, privilege), "scalar", bool)


def revoke_queue(role: str, queue_pattern: str, privilege: str) -> Statement[bool]:
    """Remove a :func:`grant_queue` grant, named by the same arguments
    (as jobq_admin); True when there was one."""
    return Statement(q.REVOKE_QUEUE, _grant_params(role, queue_pattern, privilege), "scalar", bool)


def queue_grants() -> Statement[list[QueueGrant]]:
    """The per-queue privileges, ``jobq.queue_grants``, by pattern."""
    return Statement(q.QUEUE_GRANTS, None, "dicts", lambda rows: [QueueGrant(**row) for row in rows])
