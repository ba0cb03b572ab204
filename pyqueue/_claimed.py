"""The jobs of a claim, built a batch at a time from its rows.

A worker's consumer thread builds every job it claims, so this is on its
busiest path: each job is a copy of the state its dataclass constructor
and ``__post_init__`` would make (found once per class), with the row's
columns set over it, instead of a constructor call per job and field.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime, timedelta
from enum import Enum
from typing import Any, ClassVar, Protocol, TypeVar
from uuid import UUID

from pyqueue import _queries as q
from pyqueue._db import Claimed


class JobClass(Protocol):
    """What this module needs of a job class (``pyqueue.job.JobRecord`` and
    its subclasses): a dataclass whose ``__post_init__`` makes its private state."""

    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]

    def __post_init__(self) -> None: ...


J = TypeVar("J", bound=JobClass)
# The columns of a claimed row that are a job's fields (the rest, e.g. the
# lease_seconds the claim statement adds, are read apart).
CLAIMED_FIELDS = frozenset(q.JOB_COLUMNS + q.JOB_COLUMNS_SINCE_0_2 + q.JOB_COLUMNS_SINCE_0_4
                           + q.JOB_COLUMNS_SINCE_0_11 + q.JOB_COLUMNS_SINCE_0_12)
_FRESH: dict[type[Any], dict[str, Any]] = {}
_IMMUTABLE = (type(None), bool, int, float, str, bytes, tuple, frozenset, timedelta, datetime, UUID, Enum)


def fresh_state(cls: type[JobClass]) -> dict[str, Any]:
    """The attributes a new ``cls`` has before its columns are set: the
    fields' defaults and the private state ``__post_init__`` makes. Every
    job claimed gets a copy of the same values, so they must be immutable
    (an Event or a list there would be one object shared by every job)."""
    if (state := _FRESH.get(cls)) is None:
        probe = object.__new__(cls)
        probe.__post_init__()
        defaults = {f.name: f.default for f in dataclasses.fields(cls)
                    if f.default is not dataclasses.MISSING}
        state = {**defaults, **vars(probe)}
        for name, value in state.items():
            if not isinstance(value, _IMMUTABLE):
                raise TypeError(f"{cls.__name__}.{name} starts as a {type(value).__name__}: a claimed job's "
                                "initial state is shared, give it an immutable value (or set it per job)")
        _FRESH[cls] = state
    return state


def jobs_from(cls: type[J], claimed: Claimed, **private: Any) -> list[J]:
    """The ``cls`` jobs of a claim's rows: the columns this version knows (a
    database at an older jobq lacks some, a newer one may add others), the
    lease each was granted (``lease_seconds``), and the ``private``
    attributes given (where their connection comes from, their worker's
    acks), by name without their underscore."""
    names = [name for name in claimed.names if name in CLAIMED_FIELDS]
    columns = [claimed.column(name) for name in names]
    fresh = dict(fresh_state(cls), **{f"_{name}": value for name, value in private.items()})
    new: Callable[[type[J]], J] = object.__new__
    jobs = []
    leases = claimed.column("lease_seconds")
    for values, lease_seconds in zip(zip(*columns, strict=True), leases, strict=True):
        state = fresh.copy()
        state.update(zip(names, values, strict=True))
        state["_lease_seconds"] = float(lease_seconds)
        job = new(cls)
        job.__dict__ = state
        jobs.append(job)
    return jobs
