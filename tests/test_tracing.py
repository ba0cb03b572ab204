"""OpenTelemetry traces (issue 27 §2), with the SDK's in-memory exporter:
an enqueue inside a request span is a PRODUCER span child of it, whose
context goes into the job's meta; the job's run is a CONSUMER span child of
that (each attempt a new span of the same trace), with the messaging
attributes and the outcome (completed, failed, dead, timeout, cancelled) —
in the same process (sync Worker, AsyncWorker) and in another one
(``listen()`` and ``aio.listen()``, see test_tracing_processes.py)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import pyqueue
import pyqueue.tracing
from pyqueue import aio
from tests.worker_support import wait_until

Conn = psycopg.Connection[tuple[Any, ...]]


@pytest.fixture
def provider() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    pyqueue.tracing.instrument(tracer_provider=tracer_provider)
    try:
        yield tracer_provider, exporter
    finally:
        pyqueue.tracing.uninstrument()


def by_kind(spans: tuple[ReadableSpan, ...], kind: SpanKind) -> list[ReadableSpan]:
    return [span for span in spans if span.kind is kind]


def parent_id(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def test_a_job_enqueued_in_a_request_is_its_child_and_each_attempt_a_span_of_that_trace(
    conn: Conn, dsn: str, provider: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    tracer_provider, exporter = provider
    conn.execute("SELECT jobq.configure_queue('tr', backoff_base => '1 second', backoff_jitter => 0)")
    with tracer_provider.get_tracer("app").start_as_current_span("POST /orders") as request:
        job_id = pyqueue.enqueue(conn, "tr", {"order": 7}, meta={"tenant": "acme"})
        dead_id = pyqueue.enqueue(conn, "tr", {"order": 8, "boom": True}, max_attempts=1)
    meta = conn.execute("SELECT meta FROM jobq.jobs WHERE id = %s", (job_id,)).fetchone()
    assert meta is not None and meta[0]["tenant"] == "acme", "the caller's meta is kept"
    trace_id = request.get_span_context().trace_id
    assert meta[0]["traceparent"].split("-")[1] == f"{trace_id:032x}"
    worker = pyqueue.Worker(dsn, poll_interval=0.1)
    finished: list[str] = []
    inner: list[int] = []

    @worker.handler("tr")
    def handle(job: pyqueue.Job) -> None:
        with tracer_provider.get_tracer("app").start_as_current_span("charge card") as span:
            inner.append(span.get_span_context().span_id)
        if job.payload.get("boom") or job.attempts == 1:
            finished.append(f"{job.id}:{job.attempts}:raise")
            raise RuntimeError(f"attempt {job.attempts} failed")
        finished.append(f"{job.id}:{job.attempts}:ok")

    thread = threading.Thread(target=worker.run, kwargs={"handle_signals": False})
    thread.start()
    try:
        wait_until(lambda: f"{job_id}:2:ok" in finished and f"{dead_id}:1:raise" in finished, "both jobs ran")
    finally:
        worker.stop()
        thread.join(30)
    spans = exporter.get_finished_spans()
    sends = {int(attrs(s)["messaging.message.id"]): s for s in by_kind(spans, SpanKind.PRODUCER)}
    assert set(sends) == {job_id, dead_id}
    for send in sends.values():
        assert send.name == "send tr" and parent_id(send) == request.get_span_context().span_id
        assert send.context is not None and send.context.trace_id == trace_id
        assert attrs(send)["messaging.system"] == "jobq" and attrs(send)["messaging.destination.name"] == "tr"
        assert attrs(send)["messaging.operation.type"] == "send"
    runs = sorted((s for s in by_kind(spans, SpanKind.CONSUMER)),
                  key=lambda s: (int(attrs(s)["messaging.message.id"]), attrs(s)["messaging.jobq.attempt"]))
    seen = [(attrs(s)["messaging.message.id"], attrs(s)["messaging.jobq.attempt"],
             attrs(s)["messaging.jobq.outcome"]) for s in runs]
    assert seen == [(str(job_id), 1, "failed"), (str(job_id), 2, "completed"), (str(dead_id), 1, "dead")]
    for run in runs:
        assert run.name == "process tr" and run.context is not None and run.context.trace_id == trace_id
        assert parent_id(run) == sends[int(attrs(run)["messaging.message.id"])].context.span_id
        assert attrs(run)["messaging.system"] == "jobq" and attrs(run)["messaging.destination.name"] == "tr"
        assert attrs(run)["messaging.operation.type"] == "process"
    failed, completed, dead = runs
    assert failed.status.status_code is StatusCode.ERROR and attrs(failed)["error.type"] == "RuntimeError"
    assert [e.name for e in failed.events] == ["exception"]
    assert "attempt 1 failed" in str(failed.events[0].attributes)
    assert completed.status.status_code is StatusCode.UNSET and not completed.events
    assert dead.status.status_code is StatusCode.ERROR and attrs(dead)["messaging.jobq.max_attempts"] == 1
    handler_spans = [s for s in spans if s.name == "charge card"]
    assert {parent_id(s) for s in handler_spans} == {r.context.span_id for r in runs}, (
        "a span the handler starts is a child of its job's span")


def test_async_enqueue_and_worker_record_timeouts_and_cancellations(
    conn: Conn, dsn: str, provider: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    tracer_provider, exporter = provider
    started: dict[str, int] = {}

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
            with tracer_provider.get_tracer("app").start_as_current_span("request"):
                slow = await aio.enqueue(aconn, "tra", {"kind": "slow"}, timeout=1, max_attempts=1)
                hold = await aio.enqueue(aconn, "tra", {"kind": "hold"})
        worker = aio.AsyncWorker(dsn, poll_interval=0.1)

        @worker.handler("tra")
        async def handle(job: aio.AsyncJob) -> None:
            started[job.payload["kind"]] = job.id
            await asyncio.sleep(30)

        task = asyncio.create_task(worker.run(handle_signals=False))
        for _ in range(300):
            if "hold" in started:
                break
            await asyncio.sleep(0.1)
        assert pyqueue.cancel(conn, hold) is True
        for _ in range(300):
            done = {int(attrs(s)["messaging.message.id"]) for s in by_kind(exporter.get_finished_spans(),
                                                                         SpanKind.CONSUMER)}
            if {slow, hold} <= done:
                break
            await asyncio.sleep(0.1)
        worker.stop()
        await asyncio.wait_for(task, 30)

    asyncio.run(main())
    spans = exporter.get_finished_spans()
    sends = by_kind(spans, SpanKind.PRODUCER)
    runs = {s.attributes["messaging.message.id"]: s for s in by_kind(spans, SpanKind.CONSUMER)}  # type: ignore[index]
    assert len(sends) == 2 and len(runs) == 2
    slow_run, hold_run = runs[str(started["slow"])], runs[str(started["hold"])]
    assert attrs(slow_run)["messaging.jobq.outcome"] == "timeout"
    assert slow_run.status.status_code is StatusCode.ERROR and attrs(slow_run)["error.type"] == "JobTimeout"
    assert attrs(hold_run)["messaging.jobq.outcome"] == "cancelled"
    assert hold_run.status.status_code is StatusCode.UNSET
    assert {r.context.trace_id for r in runs.values()} == {s.context.trace_id for s in sends}


def test_enqueue_many_and_callbacks_carry_the_context_of_one_span(
    conn: Conn, provider: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    _, exporter = provider
    ids = pyqueue.enqueue_many(conn, "trm", [{"i": 1}, {"i": 2}], metas=[{"a": 1}, {}])
    bare = pyqueue.enqueue_many(conn, "trm", [{"i": 3}])
    callback = pyqueue.enqueue_callback(conn, "trm-done", {}, ids)
    metas: dict[int, dict[str, Any]] = dict(conn.execute("SELECT id, meta FROM jobq.jobs WHERE id = ANY(%s)",
                              (ids + bare + [callback],)).fetchall())
    sends = by_kind(exporter.get_finished_spans(), SpanKind.PRODUCER)
    assert [attrs(s)["messaging.operation.name"] for s in sends] == ["enqueue_many", "enqueue_many",
                                                                      "enqueue_callback"]
    assert attrs(sends[0])["messaging.batch.message_count"] == 2
    first = f"{sends[0].context.span_id:016x}"
    assert metas[ids[0]]["a"] == 1 and first in metas[ids[0]]["traceparent"]
    assert first in metas[ids[1]]["traceparent"]
    assert f"{sends[1].context.span_id:016x}" in metas[bare[0]]["traceparent"]
    assert f"{sends[2].context.span_id:016x}" in metas[callback]["traceparent"]
    assert attrs(sends[2])["messaging.message.id"] == str(callback)


def test_a_failed_enqueue_is_a_failed_span_and_uninstrumented_emits_nothing(
    conn: Conn, provider: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    _, exporter = provider
    with pytest.raises(pyqueue.UnknownJob):
        pyqueue.enqueue(conn, "trx", {}, depends_on=[10**12])
    (send,) = exporter.get_finished_spans()
    assert send.status.status_code is StatusCode.ERROR and attrs(send)["error.type"] == "UnknownJob"
    assert [e.name for e in send.events] == ["exception"]
    pyqueue.tracing.uninstrument()
    assert not pyqueue.tracing.is_instrumented()
    job_id = pyqueue.enqueue(conn, "trx", {}, meta={"tenant": "t"})
    row = conn.execute("SELECT meta FROM jobq.jobs WHERE id = %s", (job_id,)).fetchone()
    assert row == ({"tenant": "t"},), "no trace context added"

    assert len(exporter.get_finished_spans()) == 1, "no span once uninstrumented"


def test_bad_meta_is_refused_the_same_with_tracing_on(
    conn: Conn, provider: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    _, exporter = provider
    with pytest.raises(pyqueue.InvalidPayload, match="meta must be a JSON object, got array"):
        pyqueue.enqueue(conn, "trb", {}, meta=[1])  # type: ignore[arg-type]
    with pytest.raises(pyqueue.InvalidPayload, match=r"metas\[2\]"):
        pyqueue.enqueue_many(conn, "trb", [{}, {}], metas=[{}, None])  # type: ignore[list-item]
    assert [s.status.status_code for s in exporter.get_finished_spans()] == [StatusCode.ERROR] * 2
    assert conn.execute("SELECT count(*) FROM jobq.jobs WHERE queue = 'trb'").fetchone() == (0,)
