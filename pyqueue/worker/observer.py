"""What a worker tells an observer about the jobs its handlers run: the hook
that Prometheus metrics (``pyqueue.metrics``) plug into.

A worker holds one :class:`Observer`. Without ``metrics_port`` it is
:data:`NO_OBSERVER`, which does nothing and imports nothing: handlers are
registered as they are, a claim costs one empty method call, and neither
``pyqueue.metrics`` nor prometheus_client is loaded. With ``metrics_port``
it is ``pyqueue.metrics.worker.WorkerMetrics``, imported here only then;
that module imports nothing of the worker (no import circle): it is an
Observer by its methods, and raises :class:`pyqueue.errors.MetricsError`.

The hooks: ``wrap`` (at ``register``: the handler the worker will call for
a queue's leased jobs), ``claimed`` (after every claim: the rows carry the
database's clock) and ``serving`` (around ``run()``: the HTTP server).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol, TypeVar

from pyqueue.errors import MetricsError
from pyqueue.job import JobRecord

__all__ = ["METRICS_HOST", "NO_OBSERVER", "MetricsError", "NoObserver", "Observer", "make_observer"]

METRICS_HOST = "127.0.0.1"  # where a worker serves /metrics by default: this host only
H = TypeVar("H", bound=Callable[..., Any])
_NOTHING: AbstractContextManager[None] = nullcontext()


class Observer(Protocol):
    """Hears what a worker's handlers do."""

    def wrap(self, queue: str, handler: H, *, asynchronous: bool) -> H:
        """The handler to call for ``queue``'s leased jobs (async when ``asynchronous``)."""
        ...

    def claimed(self, jobs: Sequence[JobRecord]) -> None:
        """A claim returned ``jobs`` (maybe none)."""
        ...

    def serving(self) -> AbstractContextManager[None]:
        """Held while the worker runs (its metrics are served meanwhile)."""
        ...


class NoObserver:
    """The observer of a worker without metrics: it does nothing."""

    def wrap(self, queue: str, handler: H, *, asynchronous: bool) -> H:
        """The handler to call for ``queue``'s leased jobs (async when ``asynchronous``)."""
        return handler

    def claimed(self, jobs: Sequence[JobRecord]) -> None:
        """A claim returned ``jobs`` (maybe none)."""

    def serving(self) -> AbstractContextManager[None]:
        """Held while the worker runs (its metrics are served meanwhile)."""
        return _NOTHING


NO_OBSERVER: Observer = NoObserver()


def make_observer(dsn: str, port: object, host: object) -> Observer:
    """The observer of a worker made with ``metrics_port=port, metrics_host=host``.

    TypeError / ValueError for a bad port or host; ImportError naming the
    extra to install when prometheus-client is missing.
    """
    if not isinstance(host, str) or not host:
        raise TypeError(f"metrics_host must be a host name or address (str), got {host!r}")
    if port is None:
        if host != METRICS_HOST:
            raise ValueError("metrics_host is set but metrics_port is not: give the port to serve on")
        return NO_OBSERVER
    if isinstance(port, bool) or not isinstance(port, int):
        raise TypeError(f"metrics_port must be an int (a TCP port, 0: any free one), got {port!r}")
    if not 0 <= port <= 65535:
        raise ValueError(f"metrics_port must be between 0 and 65535, got {port}")
    try:
        from pyqueue.metrics.worker import WorkerMetrics  # noqa: PLC0415  (only when metrics are asked for)
    except ImportError as error:
        if (error.name or "").split(".")[0] != "prometheus_client":
            raise
        raise ImportError("metrics_port needs prometheus-client, which is not installed: "
                          "pip install 'jobq[metrics]'", name=error.name) from error
    return WorkerMetrics(dsn, port=port, host=host)
