"""The checks of the workers' settings, shared by ``Worker``, ``listen()`` and
their asyncio twins, so that a bad setting fails in the constructor (or in
``listen()``) with a TypeError or ValueError naming the argument, never at
the first claim or the first reap.

Durations take a ``datetime.timedelta`` or a number of seconds (``int`` or
``float``, finite); booleans are not numbers. Counts take an ``int`` (not a
bool, not a float).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from pyqueue.defaults import MAX_POLL_INTERVAL, SHUTDOWN_TIMEOUT

MAX_BATCH_SIZE = 1000  # jobq.claim's cap on n
MAX_CONCURRENCY = 10000  # threads or tasks: anything above is a typo
MIN_LEASE = timedelta(seconds=1)  # jobq's range for a lease
MAX_LEASE = timedelta(days=1)
MAX_WORKER_NAME = 200  # characters jobq keeps for a worker name


def queue_list(queues: str | Sequence[str]) -> list[str]:
    """The queue names as a list; at least one, each a non-empty str."""
    if isinstance(queues, str):
        names = [queues]
    elif isinstance(queues, Sequence):
        names = list(queues)
    else:
        raise TypeError(f"queues must be a queue name or a sequence of them, got {queues!r}")
    if not names:
        raise ValueError("give at least one queue")
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"queues must hold str names, got {name!r}")
    return names


def count(name: str, value: object, *, minimum: int = 1, maximum: int) -> int:
    """An int in [minimum, maximum]."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if not minimum <= value <= maximum:
        raise ValueError(f"{name} must be between {minimum} and {maximum}, got {value}")
    return value


def seconds(name: str, value: object, *, positive: bool = True) -> float:
    """A duration (timedelta or seconds) as seconds: finite, > 0 (or >= 0)."""
    if isinstance(value, timedelta):
        result = value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a timedelta or a number of seconds, got {value!r}")
    else:
        result = float(value)
    if not math.isfinite(result) or result < 0 or (positive and result == 0):
        bound = "positive" if positive else "zero or positive"
        raise ValueError(f"{name} must be a finite, {bound} duration, got {value!r}")
    return result


def optional_seconds(name: str, value: object, *, positive: bool = True) -> float | None:
    return None if value is None else seconds(name, value, positive=positive)


def check_lease(value: object) -> timedelta | None:
    """A lease override: None (the queue's), or 1 second .. 1 day."""
    if value is None:
        return None
    result = value if isinstance(value, timedelta) else timedelta(seconds=seconds("lease", value))
    if not MIN_LEASE <= result <= MAX_LEASE:
        raise ValueError(f"lease must be between 1 second and 1 day, got {value!r}")
    return result


def flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


def worker_name(name: str, value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {value!r}")
    if not value or len(value) > MAX_WORKER_NAME:
        raise ValueError(f"{name} must be 1 to {MAX_WORKER_NAME} characters, got {len(value)}")
    return value


def instance(name: str, value: Any, cls: type, what: str) -> Any:
    if value is not None and not isinstance(value, cls):
        raise TypeError(f"{name} must be {what} or None, got {value!r}")
    return value


@dataclass(frozen=True)
class Checked:
    """The settings common to every worker, checked and normalised."""

    batch_size: int
    concurrency: int
    lease: timedelta | None
    poll_interval: float
    reap_interval: float | None
    shutdown_timeout: float | None
    use_listen: bool
    name: str | None
    run_schedules: bool
    listen_dsn: str | None
    max_poll_interval: float


def listen_dsn_of(value: object, use_listen: bool) -> str | None:
    """A direct connection string for LISTEN, or None (LISTEN on ``dsn``)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"listen_dsn must be a connection string (str) or None, got {type(value).__name__}")
    if not value.strip():
        raise ValueError("listen_dsn must not be empty: give a direct connection string, or None")
    if not use_listen:
        raise ValueError("listen_dsn is for LISTEN: it cannot go with use_listen=False")
    return value


def max_poll_of(value: object, poll_interval: float) -> float:
    """The longest wait between an idle worker's polls: at least poll_interval
    (None: MAX_POLL_INTERVAL, or poll_interval when that is longer)."""
    if value is None:
        return max(poll_interval, MAX_POLL_INTERVAL)
    result = seconds("max_poll_interval", value)
    if result < poll_interval:
        raise ValueError(f"max_poll_interval must be at least poll_interval ({poll_interval:g} s), "
                         f"got {value!r}")
    return result


def check(
    *,
    batch_size: object,
    poll_interval: object,
    concurrency: object = 1,
    lease: object = None,
    reap_interval: object = None,
    shutdown_timeout: object = None,
    use_listen: object = True,
    name: object = None,
    name_argument: str = "name",
    run_schedules: object = True,
    listen_dsn: object = None,
    max_poll_interval: object = None,
) -> Checked:
    """Every setting checked (TypeError / ValueError naming the argument)."""
    polls = seconds("poll_interval", poll_interval)
    listens = flag("use_listen", use_listen)
    return Checked(
        batch_size=count("batch_size", batch_size, maximum=MAX_BATCH_SIZE),
        concurrency=count("concurrency", concurrency, maximum=MAX_CONCURRENCY),
        lease=check_lease(lease),
        poll_interval=polls,
        reap_interval=optional_seconds("reap_interval", reap_interval),
        shutdown_timeout=optional_seconds("shutdown_timeout", shutdown_timeout, positive=False),
        use_listen=listens,
        name=worker_name(name_argument, name),
        run_schedules=flag("run_schedules", run_schedules),
        listen_dsn=listen_dsn_of(listen_dsn, listens),
        max_poll_interval=max_poll_of(max_poll_interval, polls),
    )


@dataclass(frozen=True)
class WorkerSettings:
    """What a consumer needs to know of its worker, checked already (by ``check``)."""

    dsn: str
    queues: list[str]  # listened to, and asked next_run_at for
    lease: timedelta | None
    poll_interval: float
    use_listen: bool
    worker_name: str
    reap_interval: float | None
    shutdown_timeout: float | None = SHUTDOWN_TIMEOUT
    run_schedules: bool = True
    listen_dsn: str | None = None  # a direct connection for LISTEN (dsn goes through a pooler); None: dsn
    max_poll_interval: float | None = None  # empty polls stretch the wait up to this; None: poll_interval

    @property
    def prepare(self) -> bool:
        """Whether the work connections may use prepared statements: not
        through a transaction pooler (use_listen=False, or LISTEN elsewhere)."""
        return self.use_listen and self.listen_dsn is None
