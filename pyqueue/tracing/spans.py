"""The spans of ``pyqueue.tracing``: a PRODUCER span per enqueue statement
whose W3C trace context goes into the jobs' meta, and a CONSUMER span per
job run whose parent is the context its meta carries.

Attributes follow OpenTelemetry's messaging semantic conventions:
``messaging.system`` (``jobq``), ``messaging.operation.type`` (``send`` /
``process``), ``messaging.operation.name`` (the call: ``enqueue``,
``enqueue_many``, ``enqueue_callback``, ``process``),
``messaging.destination.name`` (the queue), ``messaging.message.id`` (the
job id), ``messaging.batch.message_count`` (enqueue_many), ``error.type``;
and, jobq's own (the conventions have no delivery attempt), under
``messaging.jobq.``: ``attempt``, ``max_attempts`` and ``outcome``.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar, cast

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from pyqueue import _hooks
from pyqueue.errors import JobTimeout
from pyqueue.job import JobRecord

__all__ = ["CONTEXT_KEYS", "SYSTEM", "Consumer", "Producer", "SentSpan", "processing"]

SYSTEM = "jobq"  # messaging.system
CONTEXT_KEYS = ("traceparent", "tracestate")  # what a job's meta carries of the trace context
H = TypeVar("H", bound=Callable[..., Any])
_PROPAGATOR = TraceContextTextMapPropagator()


class SentSpan:
    """The PRODUCER span of one enqueue statement (see ``pyqueue._hooks.SentSpan``):
    current while the statement is sent, so that a database span nests in it."""

    def __init__(self, span: Span) -> None:
        self.span = span
        self._token: object | None = None

    def __enter__(self) -> SentSpan:
        self._token = otel_context.attach(trace.set_span_in_context(self.span))
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._token is not None:
            otel_context.detach(self._token)  # type: ignore[arg-type]
        if exc is not None:
            _record_error(self.span, exc)
        self.span.end()

    def done(self, result: object) -> None:
        """The statement returned ``result``: a job id (enqueue) or the ids of a batch."""
        if isinstance(result, int):
            self.span.set_attribute("messaging.message.id", str(result))


class Producer:
    """Starts the PRODUCER spans of enqueues (``pyqueue._hooks.producer``)."""

    def __init__(self, tracer: Tracer) -> None:
        self.tracer = tracer

    def _start(self, queue: str, operation: str, extra: Mapping[str, int]) -> tuple[SentSpan, dict[str, str]]:
        span = self.tracer.start_span(
            f"send {queue}", kind=SpanKind.PRODUCER,
            attributes={"messaging.system": SYSTEM, "messaging.operation.type": "send",
                        "messaging.operation.name": operation, "messaging.destination.name": queue, **extra})
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
        return SentSpan(span), carrier

    def send(self, queue: str, operation: str, meta: Mapping[str, Any] | None
             ) -> tuple[SentSpan, dict[str, Any] | None]:
        """One job: its span, and ``meta`` with the span's context (None when
        the span has none to give: a tracer that records nothing)."""
        span, carrier = self._start(queue, operation, {})
        if not carrier or not (meta is None or isinstance(meta, Mapping)):
            return span, None  # nothing to add, or a bad meta the database refuses as it is
        return span, {**(meta or {}), **carrier}

    def send_many(self, queue: str, metas: Sequence[Mapping[str, Any]] | None, count: int
                  ) -> tuple[SentSpan, list[dict[str, Any]] | None]:
        """``count`` jobs of one enqueue_many: one span, each job's meta with its context."""
        span, carrier = self._start(queue, "enqueue_many", {"messaging.batch.message_count": count})
        if not carrier:
            return span, None
        if metas is None:
            return span, [dict(carrier) for _ in range(count)]
        if isinstance(metas, str | bytes | Mapping) or not all(isinstance(meta, Mapping) for meta in metas):
            return span, None  # bad metas: the database refuses them as they are
        return span, [{**meta, **carrier} for meta in metas]


class Consumer:
    """Wraps handlers so that each job is a CONSUMER span (``pyqueue._hooks.consumer``)."""

    def __init__(self, tracer: Tracer) -> None:
        self.tracer = tracer

    def wrap(self, queue: str, handler: H, *, asynchronous: bool) -> H:
        """``handler``, each job it runs inside the job's span."""
        tracer = self.tracer
        if asynchronous:
            ahandler = cast(Callable[[JobRecord], Awaitable[object]], handler)

            @functools.wraps(handler)
            async def traced_async(job: JobRecord) -> object:
                with _process(tracer, job):
                    return await ahandler(job)

            return cast(H, traced_async)

        @functools.wraps(handler)
        def traced(job: JobRecord) -> object:
            with _process(tracer, job):
                return handler(job)

        return cast(H, traced)


def processing(job: JobRecord) -> contextlib.AbstractContextManager[object]:
    """The CONSUMER span of a job you run yourself (a job of ``listen()``
    without a handler), current inside the block; nothing when tracing is
    off. Put it inside ``with job:`` so that it sees the exception::

        for job in jobs:
            with job, pyqueue.tracing.processing(job):
                work(job.payload)
    """
    consumer = _hooks.consumer
    if not isinstance(consumer, Consumer):
        return contextlib.nullcontext()
    return _process(consumer.tracer, job)


def parent_context(meta: Mapping[str, Any] | None) -> Context | None:
    """The trace context a job's meta carries (None: none, the span's parent
    is then the current context)."""
    if not meta:
        return None
    carrier = {key: value for key in CONTEXT_KEYS if isinstance(value := meta.get(key), str)}
    return _PROPAGATOR.extract(carrier) if carrier else None


@contextlib.contextmanager
def _process(tracer: Tracer, job: JobRecord) -> Iterator[Span]:
    attributes: dict[str, str | int] = {"messaging.system": SYSTEM, "messaging.operation.type": "process",
                                        "messaging.operation.name": "process",
                                        "messaging.destination.name": job.queue,
                                        "messaging.message.id": str(job.id),
                                        "messaging.jobq.attempt": job.attempts,
                                        "messaging.jobq.max_attempts": job.max_attempts}
    with tracer.start_as_current_span(f"process {job.queue}", context=parent_context(job.meta),
                                      kind=SpanKind.CONSUMER, attributes=attributes,
                                      record_exception=False, set_status_on_exception=False) as span:
        try:
            yield span
        except BaseException as exc:
            _ended(span, job, exc)
            raise
        _ended(span, job, None)


def outcome(job: JobRecord, exc: BaseException | None) -> str:
    """What became of a job's attempt, as its handler left it."""
    if job.timed_out or isinstance(exc, JobTimeout):
        return "timeout"
    if job.cancel_requested:
        return "cancelled"
    if exc is None:
        return "completed"
    return "dead" if job.attempts >= job.max_attempts else "failed"


def _ended(span: Span, job: JobRecord, exc: BaseException | None) -> None:
    result = outcome(job, exc)
    span.set_attribute("messaging.jobq.outcome", result)
    if result == "timeout":  # the handler may see only its cancellation (async) or nothing (a thread)
        if isinstance(exc, Exception):
            span.record_exception(exc)
        span.set_attribute("error.type", JobTimeout.__name__)
        span.set_status(Status(StatusCode.ERROR, f"{JobTimeout.__name__}: job ran longer than {job.timeout}"))
    elif exc is not None and result != "cancelled":
        _record_error(span, exc)


def _record_error(span: Span, exc: BaseException) -> None:
    span.record_exception(exc)
    span.set_attribute("error.type", type(exc).__qualname__)
    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
