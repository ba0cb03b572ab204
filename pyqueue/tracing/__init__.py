"""OpenTelemetry traces of jobs: ``pip install 'jobq[otel]'``, then
``pyqueue.tracing.instrument()``.

Once instrumented, every enqueue (``pyqueue.enqueue``, ``enqueue_many``,
``enqueue_callback``, sync and asyncio) is a PRODUCER span, child of the
span current at the call, and writes that span's W3C trace context
(``traceparent``, ``tracestate``) into the job's ``meta``. Every job a
worker runs (``Worker``, ``AsyncWorker``, ``listen`` and ``aio.listen`` with
a handler) is a CONSUMER span whose parent is that context, so a job shows
up in the trace of the request that enqueued it, in whichever process runs
it; each attempt (a retry) is a new span of the same trace. Spans follow
OpenTelemetry's messaging conventions (``messaging.system = "jobq"``, the
queue as destination, the job id as message id) and carry the attempt and
the outcome (``completed``, ``failed``, ``dead``, ``timeout``,
``cancelled``); a failure records its exception.

Not instrumented (the default), pyqueue imports nothing of OpenTelemetry
and emits nothing; this package is loaded only by whoever imports it. See
docs/tracing.md.
"""

from __future__ import annotations

from pyqueue import _hooks

try:
    from pyqueue.tracing.spans import Consumer, Producer, processing
except ImportError as error:  # the extra is missing: say which
    if not (error.name or "").startswith("opentelemetry"):
        raise
    raise ImportError("pyqueue.tracing needs opentelemetry-api, which is not installed: "
                      "pip install 'jobq[otel]'", name=error.name) from error

__all__ = ["instrument", "is_instrumented", "processing", "uninstrument"]


def instrument(tracer_provider: object | None = None) -> None:
    """Trace enqueues and jobs from now on, with ``tracer_provider``'s tracer
    (None: OpenTelemetry's global provider, the one the SDK's
    ``trace.set_tracer_provider`` sets). Workers trace the jobs of handlers
    they run from their next ``run()`` on. Calling it again replaces the provider."""
    from opentelemetry import trace  # noqa: PLC0415  (spans imported it already)

    from pyqueue import __version__  # noqa: PLC0415  (pyqueue imports nothing of this package)

    tracer = trace.get_tracer("pyqueue", __version__, tracer_provider=tracer_provider)  # type: ignore[arg-type]
    _hooks.producer = Producer(tracer)
    _hooks.consumer = Consumer(tracer)


def uninstrument() -> None:
    """Stop tracing: later enqueues and workers started afterwards emit nothing."""
    _hooks.producer = None
    _hooks.consumer = None


def is_instrumented() -> bool:
    return _hooks.producer is not None
