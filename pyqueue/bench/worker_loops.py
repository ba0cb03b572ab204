"""pyqueue-level workloads of ``pyqueue bench``: ``pyqueue.Worker``
processes draining a pre-filled queue (in the default mode, and in the
in-transaction mode when this pyqueue has it), pickup latency with idle
listening workers (and the same for the floor queue), and the soak.

Workers run in their own processes with a no-op handler that only counts
(and, for the latency, reports which job it started when). Both ends of a
latency read ``time.time()`` on this machine.
"""

from __future__ import annotations

import inspect
import random
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from psycopg.types.json import Jsonb

import pyqueue
from pyqueue.bench import profiling, sql_loops
from pyqueue.bench.config import STEP_TIMEOUT, Config
from pyqueue.bench.harness import BenchError, Outcome, Role, Run, Signals, Task, progress

ACK_POLL = 0.005  # seconds between looks for the last acknowledgements
LATENCY_SETTLE = 1.0  # seconds idle workers get to connect and LISTEN before the first job
LATENCY_POLL_INTERVAL = 30.0  # seconds: the workers' polling fallback, kept out of the way of NOTIFY
LATENCY_TIMEOUT = 30.0  # seconds to wait for the last latency sample
LATENCY_SEED = 6  # of the interval jitter, so runs send at the same moments
SOAK_LOAD = 0.8  # fraction of the measured maximum the soak producer offers
SOAK_QUOTA_MARGIN = 2.0  # the soak producer may offer up to this many times its planned jobs

Conn = sql_loops.Conn


# --- driver loops (run in their own processes) ------------------------------------------------

REGISTER_OPTIONS = ("in_transaction",)  # task options for Worker.register; the rest go to Worker()


def in_transaction_supported() -> bool:
    """Whether this pyqueue's ``Worker.register`` has the in-transaction mode
    (``in_transaction=True``: handlers run inside the claiming transaction)."""
    return "in_transaction" in inspect.signature(pyqueue.Worker.register).parameters


def run_worker(task: Task, signals: Signals, handler: Callable[[pyqueue.Job], None]) -> None:
    """Run a pyqueue.Worker on task.queue with ``handler`` until stopped."""
    options = dict(task.options)
    register = {name: options.pop(name) for name in REGISTER_OPTIONS if name in options}
    worker = pyqueue.Worker(task.dsn, batch_size=task.batch, name=task.worker, **options)
    worker.register(task.queue, handler, **register)

    def stop_when_told() -> None:
        signals.stop.wait()
        worker.stop()

    threading.Thread(target=stop_when_told, name="bench-stop", daemon=True).start()
    signals.ready()
    worker.run(handle_signals=False)


def pyqueue_worker(task: Task, signals: Signals) -> None:
    """A worker whose handler does nothing but count."""

    def handle(job: pyqueue.Job) -> None:
        signals.add(1)

    run_worker(task, signals, handle)


def latency_worker(task: Task, signals: Signals) -> None:
    """A worker whose handler reports when it started which job."""

    def handle(job: pyqueue.Job) -> None:
        signals.sample((int(job.payload["n"]), time.time()))
        signals.add(1)

    run_worker(task, signals, handle)


def pyqueue_producer(task: Task, signals: Signals) -> None:
    """pyqueue.enqueue_many in batches, as fast as it can or at task.rate jobs/s."""
    sql_loops.produce(task, signals, lambda conn, numbers: pyqueue.enqueue_many(
        conn, task.queue, [sql_loops.payload(n) for n in numbers]))


def floor_listener(task: Task, signals: Signals) -> None:
    """The floor queue's idle worker: LISTEN, and on each notification take
    jobs one by one with DELETE … SKIP LOCKED, reporting when it got which."""
    with sql_loops.listening(sql_loops.connect(task.dsn), sql_loops.FLOOR_CHANNEL) as conn:
        signals.ready()
        while not signals.stopped:
            while rows := conn.execute(sql_loops.FLOOR_DRAIN, (1,)).fetchall():
                signals.sample((int(rows[0][1]["n"]), time.time()))
                signals.add(1)
            sql_loops.wait_for_work(conn)


def jobq_listener(task: Task, signals: Signals) -> None:
    """jobq's idle worker by hand, without pyqueue: LISTEN jobq, and on each
    notification jobq.claim(queue, 1) until empty, reporting when it got
    which job, completing each right after."""
    with sql_loops.listening(sql_loops.connect(task.dsn), sql_loops.JOBQ_CHANNEL) as conn:
        signals.ready()
        while not signals.stopped:
            while rows := conn.execute(sql_loops.JOBQ_CLAIM, (task.queue, 1, task.worker)).fetchall():
                signals.sample((int(rows[0][2]["n"]), time.time()))
                signals.add(1)
                conn.execute(sql_loops.JOBQ_COMPLETE, ([rows[0][0]], [rows[0][1]])).fetchone()
            sql_loops.wait_for_work(conn)


# --- draining a pre-filled queue ----------------------------------------------------------

@dataclass(frozen=True)
class Drained:
    """One drain by worker processes: when every job was handled, when every
    job was acknowledged (gone from the live table), and the jobq function
    calls the workers made (None without track_functions)."""

    handled: Outcome
    acknowledged: Outcome
    calls: dict[str, Any] | None


def wait_until_acknowledged(conn: Conn, queue: str, deadline: float, left: int = 0) -> None:
    """Block until at most ``left`` jobs of ``queue`` are in the live table."""
    statement = "SELECT (SELECT count(*) FROM jobq._job WHERE queue = %s) > %s"
    while conn.execute(statement, (queue, left)).fetchone() == (True,):
        if time.perf_counter() > deadline:
            raise BenchError(f"jobs of {queue} were still not acknowledged at the deadline")
        time.sleep(ACK_POLL)


def worker_tasks(dsn: str, queue: str, workers: int, config: Config, **options: Any) -> list[Task]:
    options = {"concurrency": config.worker_concurrency, **options}
    return [Task(dsn, queue, config.batch, f"worker-{k + 1}", options=options) for k in range(workers)]


def worker_drain(dsn: str, conn: Conn, queue: str, workers: int, config: Config, *, jobs: int,
                 left: int = 0, in_transaction: bool = False) -> Drained:
    """``workers`` pyqueue.Worker processes (batch_size ``config.batch``, a
    no-op handler) take ``jobs`` jobs from the pre-filled ``queue``; timed
    from their start until the last handler call and until at most
    ``left`` jobs (ones leased by someone else) remain."""
    options = {"in_transaction": True} if in_transaction else {}
    role = Role(pyqueue_worker, worker_tasks(dsn, queue, workers, config, **options))
    before = profiling.function_stats(conn)
    with Run([role], timeout=STEP_TIMEOUT) as run:
        handled = run.until_count(jobs)
        wait_until_acknowledged(conn, queue, run.started_at + STEP_TIMEOUT, left)
        acknowledged = Outcome(jobs, time.perf_counter() - run.started_at, usage=run.client_usage())
    return Drained(handled, acknowledged, profiling.function_calls_since(conn, before))


# --- pickup latency --------------------------------------------------------------------

def percentile(sorted_values: list[float], fraction: float) -> float:
    """Linear-interpolated percentile of already sorted values."""
    if len(sorted_values) == 1:
        return sorted_values[0]
    position = fraction * (len(sorted_values) - 1)
    low = int(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def distribution(values_ms: list[float]) -> dict[str, float]:
    """p50, p95, p99, max and mean of millisecond values."""
    ordered = sorted(values_ms)
    return {
        "p50_ms": round(percentile(ordered, 0.50), 3),
        "p95_ms": round(percentile(ordered, 0.95), 3),
        "p99_ms": round(percentile(ordered, 0.99), 3),
        "max_ms": round(ordered[-1], 3),
        "mean_ms": round(statistics.fmean(ordered), 3),
    }


Delays = dict[str, list[float]]  # "total", "enqueue_call", "after_commit": milliseconds per job


def pickups(role: Role, enqueue: Callable[[int], object], samples: int, config: Config, seed: int) -> Delays:
    """Start the idle listeners of ``role``, send ``samples`` single jobs one
    at a time at jittered intervals, and time each from the start of its
    enqueue call to its handler's start (also split at the call's return)."""
    rng = random.Random(seed)
    sent: dict[int, tuple[float, float]] = {}
    timeout = LATENCY_TIMEOUT + samples * config.latency_interval * 2
    with Run([role], timeout=timeout) as run:
        run.sleep(LATENCY_SETTLE)
        for k in range(samples):
            before = time.time()
            enqueue(k)
            sent[k] = (before, time.time())
            run.sleep(config.latency_interval * rng.uniform(0.5, 1.5))
        deadline = time.perf_counter() + LATENCY_TIMEOUT
        while run.counted() < samples:
            if time.perf_counter() > deadline:
                raise BenchError(f"only {run.counted()} of {samples} latency jobs were picked up")
            run.sleep(0.01)
        # A job is counted in shared memory at once; its sample comes through a
        # pipe (a multiprocessing queue's feeder thread), later on a busy machine.
        started: dict[int, float] = {}
        while True:
            for sample in run.drain_samples():
                number, at = cast("tuple[int, float]", sample)
                started[number] = at
            if set(sent) <= set(started) or time.perf_counter() > deadline:
                break
            run.sleep(0.01)
    missing = set(sent) - set(started)
    if missing:
        raise BenchError(f"{len(missing)} latency jobs reported no handler start")
    return {
        "total": [(started[k] - before) * 1000 for k, (before, _) in sent.items()],
        "enqueue_call": [(after - before) * 1000 for before, after in sent.values()],
        "after_commit": [(started[k] - after) * 1000 for k, (_, after) in sent.items()],
    }


def summary(delays: Delays) -> dict[str, Any]:
    return {**distribution(delays["total"]), "enqueue_call": distribution(delays["enqueue_call"]),
            "after_commit": distribution(delays["after_commit"])}


def latency_section(dsn: str, conn: Conn, config: Config) -> dict[str, Any]:
    """Pickup latency, each with ``config.latency_workers`` idle listener
    processes, one job per transaction: pyqueue workers (pyqueue.enqueue);
    the floor queue (INSERT + NOTIFY; LISTEN + DELETE … SKIP LOCKED); and
    jobq by hand (jobq.enqueue; LISTEN + jobq.claim(q, 1)). The samples are
    sent in ``config.repeat`` interleaved rounds and pooled."""
    queue = f"{sql_loops.QUEUE_PREFIX}latency"
    sql_queue = f"{sql_loops.QUEUE_PREFIX}latency-sql"
    options = {"concurrency": config.worker_concurrency, "use_listen": True,
               "poll_interval": LATENCY_POLL_INTERVAL}
    workers = range(1, config.latency_workers + 1)
    variants: dict[str, tuple[Role, Callable[[int], object]]] = {
        "pyqueue": (Role(latency_worker, [Task(dsn, queue, config.batch, f"listener-{k}", options=options)
                                          for k in workers]),
                    lambda k: pyqueue.enqueue(conn, queue, {"n": k})),
        "floor": (Role(floor_listener, [Task(dsn, "", 1, f"floor-listener-{k}") for k in workers]),
                  lambda k: conn.execute(sql_loops.FLOOR_ENQUEUE_ONE, (Jsonb({"n": k}),))),
        "jobq_sql": (Role(jobq_listener, [Task(dsn, sql_queue, 1, f"sql-listener-{k}") for k in workers]),
                     lambda k: conn.execute("SELECT jobq.enqueue(%s, %s)", (sql_queue, Jsonb({"n": k})))),
    }
    rounds = max(1, min(config.repeat, config.latency_samples))
    pooled: dict[str, Delays] = {name: {"total": [], "enqueue_call": [], "after_commit": []}
                                 for name in variants}
    for round_number in range(rounds):
        samples = len(range(round_number, config.latency_samples, rounds))  # the samples split evenly
        for name, (role, enqueue) in variants.items():
            delays = pickups(role, enqueue, samples, config, LATENCY_SEED + round_number)
            for key, values in delays.items():
                pooled[name][key] += values
        progress(f"pickup latency, round {round_number + 1} of {rounds}: " + ", ".join(
            f"{name} p99 {summary(pooled[name])['p99_ms']:.2f} ms" for name in variants))
    return {
        **summary(pooled["pyqueue"]),
        "samples": config.latency_samples,
        "rounds": rounds,
        "workers": config.latency_workers,
        "interval_ms": round(config.latency_interval * 1000, 1),
        "wake_up": f"LISTEN/NOTIFY (polling fallback every {LATENCY_POLL_INTERVAL:g} s)",
        "jobq_sql": summary(pooled["jobq_sql"]),
        "floor": summary(pooled["floor"]),
    }


# --- soak ----------------------------------------------------------------------------

SOAK_STATS = """
SELECT s.n_dead_tup, s.n_live_tup, s.autovacuum_count, s.vacuum_count,
       pg_indexes_size('jobq._job') AS index_bytes,
       pg_relation_size('jobq._job') AS table_bytes,
       (SELECT count(*) FROM jobq._job AS j WHERE j.queue = %s AND j.status = 'ready') AS backlog
FROM pg_stat_user_tables AS s
WHERE s.relid = 'jobq._job'::regclass
"""


def soak_stats(conn: Conn, queue: str) -> dict[str, int]:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    cursor = conn.execute(SOAK_STATS, (queue,))
    row = cursor.fetchone()
    if row is None:
        raise BenchError("pg_stat_user_tables has no row for jobq._job")
    names = [column.name for column in cursor.description or []]
    return {name: int(value or 0) for name, value in zip(names, row, strict=True)}


def soak_section(dsn: str, conn: Conn, config: Config, worker_rates: dict[int, float]) -> dict[str, Any]:
    """Steady load at SOAK_LOAD of the best pyqueue drain (``worker_rates``:
    jobs/s by worker processes), with the workers of that run, sampled every
    config.soak_sample seconds: jobs/s, backlog, dead tuples and size of
    jobq._job and its indexes."""
    if config.soak_minutes <= 0:
        return {"ran": False, "reason": "not requested (pass --soak MINUTES)"}
    workers = max(worker_rates, key=lambda w: worker_rates[w])
    maximum = worker_rates[workers]
    rate = maximum * SOAK_LOAD
    duration = config.soak_minutes * 60
    queue = f"{sql_loops.QUEUE_PREFIX}soak"
    sql_loops.vacuum(conn, "jobq._job")
    producer = Role(pyqueue_producer, [Task(dsn, queue, config.batch, "producer",
                                            quota=int(rate * duration * SOAK_QUOTA_MARGIN) + 1, rate=rate)],
                    counted=False)
    consumers = Role(pyqueue_worker, worker_tasks(dsn, queue, workers, config))
    samples: list[dict[str, Any]] = [dict(soak_stats(conn, queue), t_s=0.0, jobs=0, jobs_per_s=0.0)]
    progress(f"soak: {config.soak_minutes:g} min at {rate:,.0f} jobs/s offered ({SOAK_LOAD:.0%} of "
             f"{maximum:,.0f}) with {workers} workers")
    with Run([producer, consumers], timeout=duration + STEP_TIMEOUT) as run:
        last_count, last_time = 0, run.started_at
        while (elapsed := time.perf_counter() - run.started_at) < duration - 0.01:
            run.sleep(min(config.soak_sample, duration - elapsed))
            count, now = run.counted(), time.perf_counter()
            done = count - last_count
            sample = dict(soak_stats(conn, queue), t_s=round(now - run.started_at, 1), jobs=done,
                          jobs_per_s=round(done / (now - last_time), 1))
            samples.append(sample)
            progress(f"soak: t={sample['t_s']:.0f}s {sample['jobs_per_s']:,.0f} jobs/s, "
                     f"{sample['n_dead_tup']:,} dead tuples, "
                     f"indexes {sample['index_bytes'] // 1024:,} kB, backlog {sample['backlog']:,}")
            last_count, last_time = count, now
    conn.execute("DELETE FROM jobq._job WHERE queue = %s", (queue,))
    rates = [s["jobs_per_s"] for s in samples[1:]]
    return {
        "ran": True,
        "minutes": config.soak_minutes,
        "sample_seconds": config.soak_sample,
        "workers": workers,
        "offered_jobs_per_s": round(rate, 1),
        "load_fraction": SOAK_LOAD,
        "samples": samples,
        "summary": {
            "mean_jobs_per_s": round(statistics.fmean(rates), 1) if rates else 0.0,
            "min_jobs_per_s": min(rates, default=0.0),
            "max_jobs_per_s": max(rates, default=0.0),
            "drift": round((rates[-1] - rates[0]) / rates[0], 3) if len(rates) > 1 and rates[0] > 0 else 0.0,
            "max_dead_tuples": max(s["n_dead_tup"] for s in samples),
            "index_bytes_first": samples[0]["index_bytes"],
            "index_bytes_last": samples[-1]["index_bytes"],
            "max_backlog": max(s["backlog"] for s in samples),
        },
    }
