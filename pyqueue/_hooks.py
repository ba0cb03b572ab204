"""Where tracing plugs into the core and the workers, without importing it.

``pyqueue.tracing.instrument()`` sets :data:`producer` and :data:`consumer`;
until then both are None and nothing of OpenTelemetry is imported: an
enqueue pays one global read (``producer is None``) and one attribute test
(``Statement.span is None``), a worker one test when ``run()`` starts (its
handlers are wrapped then, not per job). The objects are
``pyqueue.tracing.spans.Producer`` and ``Consumer``; this module knows them
by their methods only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Protocol, TypeVar

H = TypeVar("H", bound=Callable[..., Any])


class SentSpan(Protocol):
    """A PRODUCER span around one enqueue statement: entered while it is sent,
    told its result (the job id or ids), ended on exit (an exception recorded)."""

    def __enter__(self) -> SentSpan: ...

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None: ...

    def done(self, result: object) -> None: ...


class Producer(Protocol):
    """Starts the PRODUCER span of an enqueue and gives the meta that carries its context."""

    def send(self, queue: str, operation: str, meta: Mapping[str, Any] | None
             ) -> tuple[SentSpan, dict[str, Any] | None]:
        """One job: its span, and ``meta`` with the trace context added (None: none to add)."""
        ...

    def send_many(self, queue: str, metas: Sequence[Mapping[str, Any]] | None, count: int
                  ) -> tuple[SentSpan, list[dict[str, Any]] | None]:
        """``count`` jobs of one statement: one span, and their metas with its context."""
        ...


class Consumer(Protocol):
    """Wraps a handler so that each job it runs is a CONSUMER span."""

    def wrap(self, queue: str, handler: H, *, asynchronous: bool) -> H: ...


producer: Producer | None = None
consumer: Consumer | None = None
