"""``python -m pyqueue.bench.tracing_cost``: what tracing costs a worker's
drain (issue 27 §2), A/B in one run.

On a throwaway durable local server (or ``--dsn``), one worker process
(``pyqueue.Worker``, threads, and ``pyqueue.aio.AsyncWorker``, tasks; a
no-op handler that counts) drains ``--jobs`` (20,000) pre-filled jobs in
batches of ``--batch`` (100), in these variants, the variants alternating
round after round (``--rounds``, 5), the median round of each counting:

- ``before`` (with ``--before DIR``: a checkout of the version to compare
  with, e.g. ``git archive main | tar -x -C DIR``): that checkout's pyqueue
  (on ``PYTHONPATH``) draining a database of its own, where that checkout's
  SQL is installed (``psql -f DIR/sql/jobq--X.sql``);
- ``off``: this pyqueue, tracing not instrumented;
- ``on``: this pyqueue after ``pyqueue.tracing.instrument()`` with the
  OpenTelemetry SDK (a ``TracerProvider`` whose ``BatchSpanProcessor``
  hands the spans to an exporter that drops them: the cost of making the
  spans, not of shipping them), every job carrying a ``traceparent`` in its
  meta as a traced producer leaves it.

Each drain is timed in its worker process, from ``run()`` to its return
after the last job's acknowledgement (a stop as soon as the handler counted
the last job). It prints jobs/s per variant, every round's figure and the
ratios ``off ÷ before`` and ``on ÷ off``, writes the JSON (``--json``);
no goal, it exits 0 unless a drain failed. ``--quick`` scales it down.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from pyqueue.bench import sql_loops
from pyqueue.bench.harness import BenchError, progress, ratio
from pyqueue.bench.report import format_table
from pyqueue.bench.suite import LOCAL_SETTINGS, database

DEFAULT_JSON = Path("bench-results/tracing_cost.json")
QUEUE = f"{sql_loops.QUEUE_PREFIX}tracing"
BEFORE_DATABASE = "jobq_before"
DRAIN_TIMEOUT = 600  # seconds one drain may take
ROOT = Path(__file__).resolve().parent.parent.parent  # this checkout (its pyqueue on PYTHONPATH)

# One drain in its own process: argv dsn, queue, jobs, tracing (on/off), kind (sync/async),
# concurrency, batch; prints {"seconds": …}.
DRAIN = '''
import asyncio, json, sys, threading, time
dsn, queue, jobs, tracing, kind, concurrency, batch = sys.argv[1:8]
jobs, concurrency, batch = int(jobs), int(concurrency), int(batch)
import pyqueue
from pyqueue import aio
if tracing == "on":
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    import pyqueue.tracing

    class Dropped(SpanExporter):
        def export(self, spans):
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropped()))
    pyqueue.tracing.instrument(tracer_provider=provider)
count = 0
lock = threading.Lock()
options = dict(concurrency=concurrency, batch_size=batch, poll_interval=1.0, reap_interval=None,
               run_schedules=False)
if kind == "sync":
    worker = pyqueue.Worker(dsn, **options)

    def handle(job):
        global count
        with lock:
            count += 1
            if count == jobs:
                worker.stop()

    worker.register(queue, handle)
    started = time.perf_counter()
    worker.run(handle_signals=False)
else:
    async def main():
        worker = aio.AsyncWorker(dsn, **options)

        async def handle(job):
            global count
            count += 1
            if count == jobs:
                worker.stop()

        worker.register(queue, handle)
        await worker.run(handle_signals=False)

    started = time.perf_counter()
    asyncio.run(main())
seconds = time.perf_counter() - started
if tracing == "on":
    provider.shutdown()
print(json.dumps({"seconds": seconds, "count": count}))
'''
# What a traced producer leaves in a job's meta (a valid W3C traceparent per job).
TRACED_META = ("UPDATE jobq._job SET meta = jsonb_build_object('traceparent', '00-' || md5(id::text) || '-' "
               "|| left(md5(id::text || 's'), 16) || '-01') WHERE queue = %s")


@dataclass(frozen=True)
class Settings:
    """The sizes of one run."""

    jobs: int = 20_000
    batch: int = 100
    concurrency: int = 10
    rounds: int = 5
    warm_up: bool = True  # one drain of a tenth of the jobs per variant and worker first, not counted


QUICK = Settings(jobs=5_000, rounds=3)


@dataclass(frozen=True)
class Variant:
    name: str  # before / off / on
    source: Path  # the checkout whose pyqueue runs
    dsn: str
    tracing: bool


def dsn_of(dsn: str, dbname: str) -> str:
    return f"{dsn} dbname={dbname}"


def prepare_before(dsn: str, before: Path) -> str:
    """A database of its own with the ``before`` checkout's SQL installed; its DSN."""
    control = (before / "sql" / "jobq.control").read_text(encoding="utf-8")
    version = next(line.split("'")[1] for line in control.splitlines() if line.startswith("default_version"))
    with sql_loops.connect(dsn) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {BEFORE_DATABASE}")
        conn.execute(f"CREATE DATABASE {BEFORE_DATABASE}")
    target = dsn_of(dsn, BEFORE_DATABASE)
    done = subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", target, "-f",
                           str(before / "sql" / f"jobq--{version}.sql")],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BenchError(f"installing {before}'s jobq {version} failed: {done.stderr.strip()}")
    return target


def drain(variant: Variant, kind: str, settings: Settings) -> float:
    """Pre-fill, then one drain by a worker process of ``variant``; its jobs/s."""
    with sql_loops.connect(variant.dsn) as conn:
        conn.execute("DELETE FROM jobq._job WHERE queue = %s", (QUEUE,))
        sql_loops.prefill_jobq(conn, QUEUE, settings.jobs)
        if variant.tracing:
            conn.execute(TRACED_META, (QUEUE,))
        sql_loops.vacuum(conn, "jobq._job")
    env = {**os.environ, "PYTHONPATH": str(variant.source)}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(DRAIN), variant.dsn, QUEUE, str(settings.jobs),
         "on" if variant.tracing else "off", kind, str(settings.concurrency), str(settings.batch)],
        cwd=variant.source, env=env, capture_output=True, text=True, timeout=DRAIN_TIMEOUT, check=False)
    if done.returncode != 0:
        raise BenchError(f"the {variant.name} {kind} drain failed: {done.stderr.strip()[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if result["count"] != settings.jobs:
        raise BenchError(f"the {variant.name} {kind} drain handled {result['count']} of {settings.jobs} jobs")
    return float(settings.jobs / result["seconds"])


def run(dsn: str, before: Path | None, settings: Settings) -> dict[str, Any]:
    """Every variant and kind, warmed up, then ``settings.rounds`` alternating rounds."""
    variants = [Variant("off", ROOT, dsn, False), Variant("on", ROOT, dsn, True)]
    if before is not None:
        variants.insert(0, Variant("before", before.resolve(), prepare_before(dsn, before), False))
    try:
        return _rounds(variants, settings, before)
    finally:
        with sql_loops.connect(dsn) as conn:
            conn.execute("DELETE FROM jobq._job WHERE queue = %s", (QUEUE,))
            if before is not None:
                conn.execute(f"DROP DATABASE IF EXISTS {BEFORE_DATABASE}")


def _rounds(variants: list[Variant], settings: Settings, before: Path | None) -> dict[str, Any]:
    kinds = ("sync", "async")
    if settings.warm_up:
        progress("tracing cost: warming up every variant (not measured)")
        for variant in variants:
            for kind in kinds:
                drain(variant, kind, replace(settings, jobs=max(settings.batch, settings.jobs // 10)))
    rates: dict[str, list[float]] = {f"{v.name}/{k}": [] for v in variants for k in kinds}
    for round_number in range(1, settings.rounds + 1):
        for kind in kinds:
            for variant in variants:
                rate = drain(variant, kind, settings)
                rates[f"{variant.name}/{kind}"].append(rate)
                progress(f"round {round_number} of {settings.rounds}: {variant.name}, {kind}: "
                         f"{rate:,.0f} jobs/s")
    medians = {row: statistics.median(values) for row, values in rates.items()}
    ratios = {}
    for kind in kinds:
        if before is not None:
            ratios[f"off/{kind} ÷ before/{kind}"] = ratio(medians[f"off/{kind}"], medians[f"before/{kind}"])
        ratios[f"on/{kind} ÷ off/{kind}"] = ratio(medians[f"on/{kind}"], medians[f"off/{kind}"])
    return {"settings": asdict(settings), "before": str(before) if before else None,
            "rates": rates, "medians": medians, "ratios": ratios}


def summary(result: dict[str, Any]) -> str:
    rows = [[row, f"{result['medians'][row]:,.0f}", ", ".join(f"{r:,.0f}" for r in values)]
            for row, values in result["rates"].items()]
    table = format_table(["variant/worker", "median jobs/s", "rounds"], rows)
    ratios = "\n".join(f"{name}: {value}" for name, value in result["ratios"].items())
    return f"{table}\n\n{ratios}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyqueue.bench.tracing_cost",
                                     description="What tracing costs a worker's drain (issue 27).")
    parser.add_argument("--dsn", help="a database with jobq installed (default: a throwaway local server)")
    parser.add_argument("--before", type=Path, help="a checkout to compare with (its pyqueue and SQL)")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK.jobs:,} jobs, {QUICK.rounds} rounds")
    parser.add_argument("--jobs", type=int)
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"results file ({DEFAULT_JSON})")
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else Settings()
    settings = Settings(jobs=args.jobs or settings.jobs, rounds=args.rounds or settings.rounds)
    try:
        with database(args.dsn, LOCAL_SETTINGS) as (dsn, _mode):
            result = run(dsn, args.before, settings)
    except (BenchError, RuntimeError, subprocess.TimeoutExpired) as error:
        print(f"tracing cost benchmark failed: {error}", file=sys.stderr)
        return 1
    print(summary(result))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"results: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
