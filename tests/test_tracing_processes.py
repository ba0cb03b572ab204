"""Traces across processes (issue 27 §2): a job enqueued inside a request
span in this process runs in another one — ``pyqueue.listen()`` or
``aio.listen()`` with a handler, its own TracerProvider and in-memory
exporter — and its CONSUMER span there is a child of this process's
PRODUCER span, in the request's trace. And without OpenTelemetry
installed, pyqueue enqueues and runs jobs as ever."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import psycopg
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

import pyqueue
import pyqueue.tracing
from tests.conftest import ROOT
from tests.worker_support import wait_until

Conn = psycopg.Connection[tuple[Any, ...]]
RUN_TIMEOUT = 120  # seconds the worker process may take

# A worker process: traces with its own provider, runs one job with
# listen() (sync) or aio.listen(), then writes the spans it finished.
WORKER = '''
import asyncio, json, sys, threading
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
import pyqueue, pyqueue.tracing
from pyqueue import aio

dsn, queue, mode, out = sys.argv[1:5]
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
pyqueue.tracing.instrument(tracer_provider=provider)
tracer = provider.get_tracer("worker-app")

if mode == "sync":
    stop = threading.Event()

    def handle(job):
        with tracer.start_as_current_span("inside handler"):
            pass
        stop.set()

    pyqueue.listen(dsn, queue, handle, stop=stop, poll_interval=0.2, handle_signals=False)
else:
    async def main():
        stop = asyncio.Event()

        async def handle(job):
            with tracer.start_as_current_span("inside handler"):
                pass
            stop.set()

        await aio.listen(dsn, queue, handle, stop=stop, poll_interval=0.2, handle_signals=False)

    asyncio.run(main())
spans = [{"name": s.name, "kind": s.kind.name, "trace_id": s.context.trace_id, "span_id": s.context.span_id,
          "parent_id": s.parent.span_id if s.parent else None, "attributes": dict(s.attributes)}
         for s in exporter.get_finished_spans()]
with open(out, "w") as file:
    json.dump(spans, file)
'''


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_job_enqueued_in_a_request_span_runs_as_its_child_in_another_process(
    conn: Conn, dsn: str, tmp_path: Path, mode: str
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    pyqueue.tracing.instrument(tracer_provider=provider)
    try:
        with provider.get_tracer("web-app").start_as_current_span("POST /signup") as request:
            job_id = pyqueue.enqueue(conn, f"xp-{mode}", {"user": 1})
    finally:
        pyqueue.tracing.uninstrument()
    (send,) = [span for span in exporter.get_finished_spans() if span.kind is SpanKind.PRODUCER]
    out = tmp_path / "spans.json"
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(WORKER), dsn, f"xp-{mode}", mode, str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False)
    assert done.returncode == 0, done.stderr
    spans = {span["name"]: span for span in json.loads(out.read_text())}
    run = spans[f"process xp-{mode}"]
    assert run["kind"] == SpanKind.CONSUMER.name
    assert run["trace_id"] == request.get_span_context().trace_id, "the job's span is in the request's trace"
    assert send.context is not None
    assert run["parent_id"] == send.context.span_id, "a child of the enqueue's span"
    assert send.parent is not None and send.parent.span_id == request.get_span_context().span_id
    assert run["attributes"]["messaging.message.id"] == str(job_id)
    assert run["attributes"]["messaging.jobq.outcome"] == "completed"
    assert spans["inside handler"]["parent_id"] == run["span_id"]


WITHOUT_OTEL = '''
import sys
sys.modules["opentelemetry"] = None  # as if not installed: any import of it fails
import threading
import psycopg
import pyqueue

dsn = sys.argv[1]
with psycopg.connect(dsn, autocommit=True) as conn:
    job_id = pyqueue.enqueue(conn, "no-otel", {"n": 1}, meta={"tenant": "t"})
seen = []
stop = threading.Event()

def handle(job):
    seen.append(job.meta)
    stop.set()

pyqueue.listen(dsn, "no-otel", handle, stop=stop, poll_interval=0.2, handle_signals=False)
assert seen == [{"tenant": "t"}], seen
try:
    import pyqueue.tracing
except ImportError as error:
    print(error)
else:
    sys.exit("pyqueue.tracing imported without opentelemetry")
'''


def test_without_opentelemetry_jobs_run_as_ever_and_tracing_says_what_to_install(dsn: str) -> None:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(WITHOUT_OTEL), dsn], cwd=ROOT,
                          capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False)
    assert done.returncode == 0, done.stderr
    assert "pip install 'jobq[otel]'" in done.stdout


# A handler module for `pyqueue worker --otel`: it sets up the global tracer
# provider (as an application would) with an exporter that appends each span to a file.
CLI_HANDLER = '''
import json, os
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult


class ToFile(SpanExporter):
    def export(self, spans):
        with open(os.environ["SPANS_OUT"], "a") as file:
            for s in spans:
                file.write(json.dumps({"name": s.name, "trace_id": s.context.trace_id,
                                       "parent_id": s.parent.span_id if s.parent else None}) + "\\n")
        return SpanExportResult.SUCCESS


provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(ToFile()))
trace.set_tracer_provider(provider)


def handle(job):
    pass
'''


def test_pyqueue_worker_otel_traces_its_jobs(conn: Conn, dsn: str, tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    pyqueue.tracing.instrument(tracer_provider=provider)
    try:
        with provider.get_tracer("web-app").start_as_current_span("POST /import"):
            pyqueue.enqueue(conn, "xp-cli", {})
    finally:
        pyqueue.tracing.uninstrument()
    (send,) = [span for span in exporter.get_finished_spans() if span.kind is SpanKind.PRODUCER]
    (tmp_path / "otel_cli_handler.py").write_text(textwrap.dedent(CLI_HANDLER))
    out = tmp_path / "spans.jsonl"
    worker = subprocess.Popen(
        [sys.executable, "-m", "pyqueue", "worker", "otel_cli_handler:handle", "--queue", "xp-cli", "--otel",
         "--app-dir", str(tmp_path), "--poll-interval", "0.2", "--dsn", dsn],
        cwd=ROOT, env={**os.environ, "SPANS_OUT": str(out)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    try:
        wait_until(lambda: out.exists() and "process xp-cli" in out.read_text(), "the worker's span")
    finally:
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=RUN_TIMEOUT)
    assert worker.returncode == 0, stderr
    (run,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert send.context is not None
    assert (run["trace_id"], run["parent_id"]) == (send.context.trace_id, send.context.span_id)
