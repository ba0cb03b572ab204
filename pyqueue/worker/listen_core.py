"""What the sync and async ``listen()`` share, written once: their options
(names, types, defaults and checks) and the bookkeeping of a job iterator
(the jobs claimed and not yet handed out, the one in the caller's hands, and
what becomes of each when the loop goes on or is closed)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Generic, TypedDict, TypeVar

from pyqueue._queries import default_worker_name
from pyqueue.defaults import BATCH_SIZE, POLL_INTERVAL, REAP_INTERVAL, SHUTDOWN_TIMEOUT
from pyqueue.job import Event, JobRecord
from pyqueue.worker import settings as _settings
from pyqueue.worker import startup
from pyqueue.worker.settings import WorkerSettings, queue_list

J = TypeVar("J", bound=JobRecord)


class ListenOptions(TypedDict, total=False):
    """The keyword options of ``pyqueue.listen()`` and ``pyqueue.aio.listen()``
    besides ``stop`` and ``in_transaction``; the defaults are in LISTEN_DEFAULTS.

    ``batch_size`` (int 1..1000, default 10); ``lease`` (timedelta or
    seconds, 1 second .. 1 day; None: the queue's); ``poll_interval``
    (seconds or timedelta, > 0); ``max_poll_interval`` (seconds or timedelta,
    >= poll_interval; None: 30 s): empty polls stretch the wait up to it;
    ``use_listen`` (False: poll only, no prepared statements, for PgBouncer
    in transaction mode); ``listen_dsn`` (a direct connection for LISTEN
    while ``dsn`` goes through such a pooler); ``worker_name`` (None: host and
    pid); ``handle_signals`` (stop on SIGTERM/SIGINT); ``reap_interval``
    (seconds, None: never); ``shutdown_timeout`` (seconds, >= 0; None: no
    limit); ``run_schedules`` (run the worker-run periodic jobs).
    """

    batch_size: int
    lease: timedelta | float | None
    poll_interval: float | timedelta
    max_poll_interval: float | timedelta | None
    use_listen: bool
    listen_dsn: str | None
    worker_name: str | None
    handle_signals: bool
    reap_interval: float | timedelta | None
    shutdown_timeout: float | timedelta | None
    run_schedules: bool


LISTEN_DEFAULTS: dict[str, object] = {
    "batch_size": BATCH_SIZE,
    "lease": None,
    "poll_interval": POLL_INTERVAL,
    "max_poll_interval": None,
    "use_listen": True,
    "listen_dsn": None,
    "worker_name": None,
    "handle_signals": True,
    "reap_interval": REAP_INTERVAL,
    "shutdown_timeout": SHUTDOWN_TIMEOUT,
    "run_schedules": True,
}


@dataclass(frozen=True)
class ListenSetup:
    """A ``listen()`` call's options, checked."""

    settings: WorkerSettings
    batch_size: int
    handle_signals: bool

    def started(self, database: startup.Database) -> None:
        """The first connection worked (``database``): say what starts."""
        startup.report(database, "pyqueue listen", list(self.settings.queues),
                       f"batch size {self.batch_size}")


def check_listen(dsn: str, queues: str | Sequence[str], handler: object, options: Mapping[str, object], *,
                 in_transaction: object, stop: object, event: type, event_name: str) -> ListenSetup:
    """Every argument of a ``listen()`` call checked (TypeError / ValueError
    naming it), the defaults filled in."""
    for key in options:
        if key not in LISTEN_DEFAULTS:
            raise TypeError(f"listen() got an unexpected keyword argument {key!r}")
    values = {**LISTEN_DEFAULTS, **options}
    names = queue_list(queues)
    _settings.flag("in_transaction", in_transaction)
    if handler is not None and not callable(handler):
        raise TypeError(f"handler must be callable, got {handler!r}")
    if in_transaction and handler is None:
        raise ValueError("in_transaction=True needs a handler")
    checked = _settings.check(batch_size=values["batch_size"], poll_interval=values["poll_interval"],
                              lease=values["lease"], reap_interval=values["reap_interval"],
                              shutdown_timeout=values["shutdown_timeout"], use_listen=values["use_listen"],
                              name=values["worker_name"], name_argument="worker_name",
                              run_schedules=values["run_schedules"], listen_dsn=values["listen_dsn"],
                              max_poll_interval=values["max_poll_interval"])
    handle_signals = _settings.flag("handle_signals", values["handle_signals"])
    _settings.instance("stop", stop, event, event_name)
    settings = WorkerSettings(dsn, names, checked.lease, checked.poll_interval, checked.use_listen,
                              checked.name or default_worker_name(), checked.reap_interval,
                              checked.shutdown_timeout, checked.run_schedules, listen_dsn=checked.listen_dsn,
                              max_poll_interval=checked.max_poll_interval)
    return ListenSetup(settings, checked.batch_size, handle_signals)


class HandOut(Generic[J]):
    """The jobs of a job iterator: claimed and waiting (``held``), and the one
    in the caller's hands (``current``).

    ``watch``/``unwatch`` are the consumer's: they start and end the
    execution timeout of a job in the caller's hands.
    """

    def __init__(self, watch: Callable[[J], None], unwatch: Callable[[J], None]) -> None:
        self.held: deque[J] = deque()
        self.current: J | None = None
        self._watch = watch
        self._unwatch = unwatch

    def next(self) -> J | None:
        """The next job to hand out (RUNNING from now on; its lease not lost), or None."""
        while self.held:
            job = self.held.popleft()
            if job._on(Event.START):
                self.current = job
                self._watch(job)
                return job
        return None

    def returned(self, job: J) -> bool:
        """The caller asked for the next job: True when ``job`` is still to be
        acknowledged (the loop body finished without raising: complete it)."""
        self._unwatch(job)
        self.current = None
        return not job.acknowledged

    def left(self) -> list[J]:
        """The iterator is closed: the jobs to release (the one in the caller's
        hands, unacknowledged, and those never handed out)."""
        jobs = []
        if self.current is not None:
            self._unwatch(self.current)
            jobs.append(self.current)
            self.current = None
        jobs.extend(job for job in self.held if not job.lease_lost)
        self.held.clear()
        return jobs
