"""``python -m pyqueue.bench.python_side``: what pyqueue's Python adds to
jobq's SQL (issue 24, items 3 and 4).

On a throwaway durable local server (or ``--dsn``), each comparison run
back to back, round after round (``--rounds``, 5), the median round of each
row counting:

1. one process draining ``--jobs`` (50,000) pre-filled no-op jobs in
   batches of ``--batch`` (100): a bare loop of ``jobq.claim(q, n)`` +
   ``jobq.complete_many`` on one connection (psycopg, nothing else), one
   ``pyqueue.Worker`` process (``--concurrency`` threads, 10) and one
   ``pyqueue.aio.AsyncWorker`` process (as many tasks); the workers are
   timed until every job is acknowledged. Goal: each worker at least 0.8 of
   the bare loop. Beside the jobs/s, each drain row gives its client CPU
   µs and context switches per job (all the threads of its processes, from
   ``/proc``, medians over the rounds): on a small machine the client's
   CPU is taken from the server's;
2. the same drain by W=4 and by W=16 ``pyqueue.Worker`` processes. Goal:
   W=16 at least 0.9 of W=4;
3. producers (``--producers``, 4) enqueueing ``--enqueue-jobs`` (30,000)
   jobs in batches: a raw ``INSERT … SELECT unnest($1::jsonb[])`` (and its
   NOTIFY) into a minimal queue table, written the plain psycopg way,
   against ``pyqueue.enqueue_many``. Goal: at least 0.9 of the raw INSERT;
4. one connection enqueueing ``--single-jobs`` (2,000) jobs one at a time,
   each its own transaction: a raw ``INSERT`` + ``NOTIFY`` against
   ``pyqueue.enqueue``. Goal: at most 1.2 times the raw INSERT's time per job.

Beside 3 and 4, without a goal, ``jobq.enqueue_many`` and ``jobq.enqueue``
called by hand through psycopg: what of a gap is jobq's SQL, what pyqueue's
Python.

Every row is warmed up once before the rounds. It prints the rows, every
round's figure and the goals, writes the JSON (``--json``), and exits 1
when a goal is missed. ``make bench`` runs it after ``pyqueue bench``;
``--quick`` scales it down (a minute or two).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from psycopg.types.json import Jsonb

import pyqueue
from pyqueue.aio import AsyncJob, AsyncWorker
from pyqueue.bench import sql_loops, worker_loops
from pyqueue.bench.config import STEP_TIMEOUT, Config
from pyqueue.bench.harness import BenchError, Outcome, Role, Run, Signals, Task, progress, ratio
from pyqueue.bench.report import format_table, fraction
from pyqueue.bench.suite import LOCAL_SETTINGS, database
from pyqueue.bench.throughput import Best

DEFAULT_JSON = Path("bench-results/python_side.json")
QUEUE = f"{sql_loops.QUEUE_PREFIX}python-side"
FLOOR_TABLE = f"{sql_loops.BENCH_SCHEMA}.floor_job"
# Goals: name -> (what, "min" or "max", bound). Each is a ratio of two rows of the same run.
GOALS: dict[str, tuple[str, str, float]] = {
    "worker_vs_sql_loop": ("one pyqueue.Worker process ÷ the bare claim + complete_many loop", "min", 0.8),
    "async_worker_vs_sql_loop": ("one AsyncWorker process ÷ the bare claim + complete_many loop", "min", 0.8),
    "w16_vs_w4": ("W=16 pyqueue.Worker processes ÷ W=4", "min", 0.9),
    "enqueue_many_vs_insert": ("pyqueue.enqueue_many ÷ raw INSERT … unnest($1::jsonb[])", "min", 0.9),
    "enqueue_time_vs_insert": ("time per pyqueue.enqueue ÷ per raw INSERT + NOTIFY", "max", 1.2),
}
ROWS = {  # row -> what it is, as printed
    "sql_loop": "bare loop: jobq.claim(q, n) + jobq.complete_many, one connection",
    "worker": "one pyqueue.Worker process (threads), no-op handler",
    "async_worker": "one pyqueue.aio.AsyncWorker process (tasks), no-op handler",
    "fleet_small": "W={} pyqueue.Worker processes",  # the fleets' W: Settings.fleets
    "fleet_large": "W={} pyqueue.Worker processes",
    "insert": "raw INSERT … SELECT unnest($1::jsonb[]) + NOTIFY",
    "sql_many": "(no goal) SELECT jobq.enqueue_many($1, $2::jsonb[]) by hand",
    "enqueue_many": "pyqueue.enqueue_many(conn, q, payloads)",
    "insert_one": "raw INSERT … VALUES ($1) + NOTIFY, one per transaction",
    "sql_one": "(no goal) SELECT jobq.enqueue($1, $2) by hand, one per transaction",
    "enqueue_one": "pyqueue.enqueue(conn, q, payload), one per transaction",
}
MANY_ROWS = ("insert", "sql_many", "enqueue_many")
ONE_ROWS = ("insert_one", "sql_one", "enqueue_one")


@dataclass(frozen=True)
class Settings:
    """The sizes of one run."""

    jobs: int = 50_000  # pre-filled jobs per drain
    batch: int = 100  # jobs per claim / complete_many / enqueue_many / INSERT, and the workers' batch_size
    concurrency: int = 10  # threads (tasks) per worker process
    enqueue_jobs: int = 30_000  # jobs per enqueue_many / INSERT measurement
    producers: int = 4  # connections enqueueing at once
    single_jobs: int = 2_000  # jobs enqueued one by one
    rounds: int = 5
    fleets: tuple[int, int] = (4, 16)  # worker processes of the two fleet rows (the W=16 ÷ W=4 goal)


QUICK = Settings(jobs=10_000, enqueue_jobs=10_000, single_jobs=500, rounds=3)
SIZE_OPTIONS = {  # command-line option: what it sets
    "jobs": "pre-filled jobs per drain", "batch": "jobs per statement and batch_size",
    "concurrency": "threads (tasks) per worker process", "enqueue-jobs": "jobs per enqueue_many measurement",
    "producers": "producer connections of the enqueue_many rows", "single-jobs": "jobs enqueued one by one",
    "rounds": "interleaved rounds",
}


# --- driver loops (run in their own processes) ------------------------------------------

def async_worker(task: Task, signals: Signals) -> None:
    """An AsyncWorker on task.queue whose handler does nothing but count."""

    async def handle(job: AsyncJob) -> None:
        signals.add(1)

    async def work() -> None:
        worker = AsyncWorker(task.dsn, batch_size=task.batch, name=task.worker, **task.options)
        worker.register(task.queue, handle)
        loop = asyncio.get_running_loop()

        def stop_when_told() -> None:
            signals.stop.wait()
            loop.call_soon_threadsafe(worker.stop)

        threading.Thread(target=stop_when_told, name="bench-stop", daemon=True).start()
        signals.ready()
        await worker.run(handle_signals=False)

    asyncio.run(work())


def insert_one(task: Task, signals: Signals) -> None:
    """One job per transaction into the floor queue, waking its listeners."""
    sql_loops.produce(task, signals, lambda conn, numbers: conn.execute(
        sql_loops.FLOOR_ENQUEUE_ONE, (Jsonb(sql_loops.payload(numbers[0])),)))


def sql_one(task: Task, signals: Signals) -> None:
    """jobq.enqueue of one job per transaction, through psycopg alone."""
    sql_loops.produce(task, signals, lambda conn, numbers: conn.execute(
        "SELECT jobq.enqueue(%s, %s)", (task.queue, Jsonb(sql_loops.payload(numbers[0])))).fetchone())


def enqueue_one(task: Task, signals: Signals) -> None:
    """pyqueue.enqueue of one job per transaction."""
    sql_loops.produce(task, signals, lambda conn, numbers: pyqueue.enqueue(
        conn, task.queue, sql_loops.payload(numbers[0])))


# --- one measurement ----------------------------------------------------------------------

def drain(dsn: str, conn: sql_loops.Conn, row: str, settings: Settings, jobs: int) -> Outcome:
    """Pre-fill ``jobs`` jobs, then time ``row`` taking them all."""
    conn.execute("DELETE FROM jobq._job WHERE queue = %s", (QUEUE,))
    sql_loops.prefill_jobq(conn, QUEUE, jobs)
    sql_loops.vacuum(conn, "jobq._job")
    if row == "sql_loop":
        role = Role(sql_loops.jobq_drain, sql_loops.tasks(dsn, QUEUE, settings.batch, 1, prefix="consumer"))
        with Run([role], timeout=STEP_TIMEOUT) as run:
            done = run.until_count(jobs)
            return replace(done, usage=run.client_usage())
    config = Config(batch=settings.batch, worker_concurrency=settings.concurrency)
    if row == "async_worker":
        tasks = worker_loops.worker_tasks(dsn, QUEUE, 1, config)
        with Run([Role(async_worker, tasks)], timeout=STEP_TIMEOUT) as run:
            run.until_count(jobs)
            worker_loops.wait_until_acknowledged(conn, QUEUE, run.started_at + STEP_TIMEOUT)
            return Outcome(jobs, time.perf_counter() - run.started_at, usage=run.client_usage())
    drained = worker_loops.worker_drain(dsn, conn, QUEUE, processes(row, settings), config, jobs=jobs)
    return drained.acknowledged


def processes(row: str, settings: Settings) -> int:
    """The worker processes of a drain row."""
    return {"fleet_small": settings.fleets[0], "fleet_large": settings.fleets[1]}.get(row, 1)


def produce(dsn: str, conn: sql_loops.Conn, row: str, settings: Settings, jobs: int) -> Outcome:
    """Time ``row``'s producers enqueueing ``jobs`` jobs (the tables emptied first)."""
    conn.execute(f"TRUNCATE {FLOOR_TABLE}")
    conn.execute("DELETE FROM jobq._job WHERE queue = %s", (QUEUE,))
    sql_loops.vacuum(conn, "jobq._job", FLOOR_TABLE)
    loops: dict[str, Callable[[Task, Signals], None]] = {
        "insert": sql_loops.floor_insert, "sql_many": sql_loops.jobq_enqueue,
        "enqueue_many": worker_loops.pyqueue_producer, "insert_one": insert_one, "sql_one": sql_one,
        "enqueue_one": enqueue_one}
    one = row in ONE_ROWS
    size = sql_loops.Size(jobs, 1 if one else settings.batch, STEP_TIMEOUT)
    return sql_loops.produce_outcome(dsn, loops[row], QUEUE, 1 if one else settings.producers, size)


def measure(dsn: str, conn: sql_loops.Conn, row: str, settings: Settings, *, warm_up: bool = False
            ) -> Outcome:
    """One figure of ``row`` (a tenth of the size, unreported, when warming up)."""
    share = 10 if warm_up else 1
    if row in MANY_ROWS or row in ONE_ROWS:
        jobs = settings.single_jobs if row in ONE_ROWS else settings.enqueue_jobs
        return produce(dsn, conn, row, settings, max(1, jobs // share))
    return drain(dsn, conn, row, settings, max(settings.batch, settings.jobs // share))


# --- the run -----------------------------------------------------------------------------

def python_side(dsn: str, conn: sql_loops.Conn, settings: Settings) -> dict[str, Any]:
    """Every row, warmed up, then ``settings.rounds`` rounds; the medians and the goals."""
    sql_loops.create_schema(conn)
    progress("python side: warming up every row (not measured)")
    for row in ROWS:
        measure(dsn, conn, row, settings, warm_up=True)
    best = Best("median")
    for round_number in range(1, settings.rounds + 1):
        for row in ROWS:
            outcome = best.keep(row, measure(dsn, conn, row, settings))
            progress(f"python side, round {round_number} of {settings.rounds}: {row}: "
                     f"{outcome.jobs_per_s:,.0f} jobs/s")
    conn.execute("DELETE FROM jobq._job WHERE queue = %s", (QUEUE,))
    goals = judged({row: best.outcomes[row].jobs_per_s for row in ROWS})
    rows = {row: best.result(row, about=ROWS[row].format(processes(row, settings)), **client_cost(best, row))
            for row in ROWS}
    rates = {row: best.outcomes[row].jobs_per_s for row in ROWS}
    by_hand = {  # no goal: pyqueue against the same SQL called through psycopg alone
        "enqueue_many_vs_by_hand": ratio(rates["enqueue_many"], rates["sql_many"]),
        "enqueue_time_vs_by_hand": ratio(rates["sql_one"], rates["enqueue_one"]),
    }
    return {"settings": asdict(settings), "rows": rows, "goals": goals, "by_hand": by_hand,
            "ok": all(goal["met"] for goal in goals.values())}


def client_cost(best: Best, row: str) -> dict[str, float]:
    """The median over the rounds of a drain row's client CPU µs and context
    switches per job (every thread of its processes); nothing for the rows
    that do not read them (the enqueue rows)."""
    outcomes = [outcome for outcome, _ in best.runs[row] if outcome.usage is not None]
    cpu = [value for o in outcomes if (value := o.cpu_us_per_job) is not None]
    switches = [value for o in outcomes if (value := o.switches_per_job) is not None]
    if not cpu or not switches:
        return {}
    return {"client_cpu_us_per_job_median": round(statistics.median(cpu), 2),
            "context_switches_per_job_median": round(statistics.median(switches), 3)}


def judged(rates: dict[str, float]) -> dict[str, dict[str, Any]]:
    """Each goal with its value (a ratio of two rows' jobs/s) and whether it is met."""
    values = {
        "worker_vs_sql_loop": ratio(rates["worker"], rates["sql_loop"]),
        "async_worker_vs_sql_loop": ratio(rates["async_worker"], rates["sql_loop"]),
        "w16_vs_w4": ratio(rates["fleet_large"], rates["fleet_small"]),
        "enqueue_many_vs_insert": ratio(rates["enqueue_many"], rates["insert"]),
        # Time per job is the inverse of jobs/s.
        "enqueue_time_vs_insert": ratio(rates["insert_one"], rates["enqueue_one"]),
    }
    goals = {}
    for name, (label, kind, bound) in GOALS.items():
        value = values[name]
        met = value is not None and (value >= bound if kind == "min" else value <= bound)
        goals[name] = {"label": label, "value": value, kind: bound, "met": met}
    return goals


def summary(result: dict[str, Any]) -> str:
    """The rows and the goals, as printed."""
    settings = result["settings"]
    rows = [[row["about"], f"{row['jobs_per_s']:,.0f}", _cost(row, "client_cpu_us_per_job_median", ".1f"),
             _cost(row, "context_switches_per_job_median", ".2f"),
             ", ".join(f"{r:,.0f}" for r in row["runs_jobs_per_s"])] for row in result["rows"].values()]
    goals = []
    for goal in result["goals"].values():
        bound = f"≥ {goal['min']:g}" if "min" in goal else f"≤ {goal['max']:g}"
        value = "-" if goal["value"] is None else f"{goal['value']:.2f}"
        goals.append([goal["label"], bound, value, "met" if goal["met"] else "NOT met"])
    return "\n".join([
        f"Python side (issue 24): drains of {settings['jobs']:,} pre-filled no-op jobs, batch "
        f"{settings['batch']}, {settings['concurrency']} threads (tasks) per worker; enqueue of "
        f"{settings['enqueue_jobs']:,} jobs by {settings['producers']} producers, and of "
        f"{settings['single_jobs']:,} one by one; median of {settings['rounds']} interleaved rounds",
        format_table(["row", "jobs/s", "client CPU µs/job", "switches/job", "every round"], rows),
        "(client CPU µs/job and switches/job: the medians over the rounds, every thread of the row's "
        "processes, read from /proc)",
        "",
        format_table(["goal (ratios of rows of this run)", "goal", "this run", ""], goals),
        "(no goal) pyqueue against the same SQL by hand: enqueue_many "
        f"{fraction(result['by_hand']['enqueue_many_vs_by_hand'])} of its jobs/s, enqueue "
        f"{fraction(result['by_hand']['enqueue_time_vs_by_hand'])} times its time per job",
    ])


def _cost(row: dict[str, Any], key: str, spec: str) -> str:
    return "-" if key not in row else format(row[key], spec)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyqueue.bench.python_side",
                                     description="What pyqueue's Python adds to jobq's SQL (issue 24).")
    parser.add_argument("--dsn", help="a database with jobq installed (default: a throwaway local server)")
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK.jobs:,} jobs per drain, {QUICK.enqueue_jobs:,} enqueued, "
                        f"{QUICK.single_jobs:,} one by one, {QUICK.rounds} rounds")
    for name, about in SIZE_OPTIONS.items():
        default = getattr(Settings(), name.replace("-", "_"))
        parser.add_argument(f"--{name}", type=int, help=f"{about} ({default:,})")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"results file ({DEFAULT_JSON})")
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else Settings()
    overrides = {name.replace("-", "_"): getattr(args, name.replace("-", "_")) for name in SIZE_OPTIONS}
    overrides = {name: value for name, value in overrides.items() if value is not None}
    if any(value < 1 for value in overrides.values()):
        parser.error("sizes, --concurrency and --rounds must be at least 1")
    settings = replace(settings, **overrides)
    try:
        with database(args.dsn, LOCAL_SETTINGS) as (dsn, _mode), sql_loops.connect(dsn) as conn:
            sql_loops.cleanup(conn)
            try:
                result = python_side(dsn, conn, settings)
            finally:
                sql_loops.cleanup(conn)
    except (BenchError, RuntimeError) as error:
        print(f"python side benchmark failed: {error}", file=sys.stderr)
        return 1
    print(summary(result))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"results: {args.json}")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
