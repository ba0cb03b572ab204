"""Draining a pre-filled queue, for ``pyqueue bench`` (the figures of the
fast-path issue): the floor, a pgmq-style reference loop, jobq through SQL
alone and pyqueue's workers, at W worker processes each; the same drain
with many long-leased jobs ahead in the queue; and one connection alone.

Every row drains the same number of pre-filled no-op jobs in batches of the
same size. A round measures every row back to back (the machine is shared
and drifts); the median (or best, ``--statistic``) of ``config.repeat``
rounds counts, and every round's figure is kept in the JSON.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyqueue.bench import sql_loops, worker_loops
from pyqueue.bench.config import STEP_TIMEOUT, Config
from pyqueue.bench.harness import BenchError, Outcome, Signals, Task, progress, ratio
from pyqueue.bench.throughput import Best, statistic_text

Conn = sql_loops.Conn
SCHEMA = sql_loops.BENCH_SCHEMA
PGMQ_VISIBILITY = "30 seconds"  # the pgmq-style loop's visibility timeout
# pgmq's read: lock the oldest visible messages, push their visibility time
# out and count the read, in one statement; the consumer deletes them after.
PGMQ_READ = f"""
UPDATE {SCHEMA}.pgmq_job
SET vt = clock_timestamp() + interval '{PGMQ_VISIBILITY}', read_ct = read_ct + 1
WHERE id IN (SELECT id FROM {SCHEMA}.pgmq_job WHERE vt <= clock_timestamp()
             ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED)
RETURNING id, payload
"""
PGMQ_DELETE = f"DELETE FROM {SCHEMA}.pgmq_job WHERE id = ANY(%s)"
HOLD_LEASE = "1 hour"  # the lease of the long-running jobs ahead: never runs out during a run
HOLD_CLAIM = "SELECT id, lease_token FROM jobq.claim(%s, %s, 'bench-holder', %s::interval)"
HOLD_BEAT = ("SELECT count(*) FROM unnest(%s::bigint[], %s::uuid[]) AS h(id, lease_token) "
             "WHERE jobq.heartbeat(h.id, h.lease_token, %s::interval)")
HOLD_CHUNK = 1000  # jobs per claim / complete_many call when leasing and releasing them

ROWS = {  # drain rows, in the order they run and print: what each does
    "floor": "DELETE … WHERE id IN (SELECT … ORDER BY id LIMIT n FOR UPDATE SKIP LOCKED) RETURNING",
    "pgmq": f"pgmq-style: UPDATE … SET vt = now() + {PGMQ_VISIBILITY}, read_ct + 1 "
            "WHERE id IN (… SKIP LOCKED); DELETE … WHERE id = ANY(ids)",
    "jobq_sql": "jobq.claim(q, n) + jobq.complete_many, one connection per process",
    "pyqueue": "pyqueue.Worker(batch_size=n), no-op handler, one Worker per process",
    "pyqueue_in_txn": "pyqueue.Worker, register(q, fn, in_transaction=True)",
}
LEASED_ROWS = ("jobq_sql", "pyqueue")
CALLS_SHOWN = ("claim", "complete_many", "take", "hold", "complete_held", "next_run_at", "reap")  # jobq.name
SINGLE_ROWS = {  # one connection alone: what each does
    "floor": "DELETE … SKIP LOCKED LIMIT n RETURNING (autocommit)",
    "jobq_claim_complete": "jobq.claim(q, n) + jobq.complete_many (autocommit)",
    "jobq_take": "BEGIN; SELECT * FROM jobq.take(q, n); COMMIT",
}


# --- driver loops (run in their own processes) -----------------------------------------

def pgmq_drain(task: Task, signals: Signals) -> None:
    """The pgmq-style consumer: read with a visibility timeout, then delete."""
    with sql_loops.connect(task.dsn) as conn:
        signals.ready()
        while not signals.stopped:
            rows = conn.execute(PGMQ_READ, (task.batch,)).fetchall()
            if rows:
                conn.execute(PGMQ_DELETE, ([r[0] for r in rows],))
                signals.add(len(rows))
            else:
                signals.stop.wait(sql_loops.IDLE_WAIT)


def take_drain(task: Task, signals: Signals) -> None:
    """In-transaction consumer: BEGIN; jobq.take(q, n); COMMIT (the ack)."""
    with sql_loops.connect(task.dsn) as conn:
        signals.ready()
        while not signals.stopped:
            with conn.transaction():
                rows = conn.execute(sql_loops.JOBQ_TAKE, (task.queue, task.batch)).fetchall()
            if rows:
                signals.add(len(rows))
            else:
                signals.stop.wait(sql_loops.IDLE_WAIT)


# --- one measurement -------------------------------------------------------------------

def fill(conn: Conn, row: str, queue: str, jobs: int) -> None:
    """Pre-fill the table or queue a row drains, and VACUUM ANALYZE it (not measured)."""
    if row in ("floor", "pgmq"):
        table = "floor_job" if row == "floor" else "pgmq_job"
        conn.execute(f"TRUNCATE {SCHEMA}.{table}")
        sql_loops.prefill_floor(conn, table, jobs)
        sql_loops.vacuum(conn, f"{SCHEMA}.{table}")
    else:
        sql_loops.prefill_jobq(conn, queue, jobs)
        sql_loops.vacuum(conn, "jobq._job")


def drain_once(dsn: str, conn: Conn, row: str, workers: int, config: Config, *, jobs: int, queue: str,
               left: int = 0) -> tuple[Outcome, worker_loops.Drained | None]:
    """Pre-fill, then time ``workers`` processes of ``row`` taking ``jobs``
    jobs. Returns the outcome (for pyqueue: until acknowledged) and, for
    pyqueue, the whole drain (until the last handler call; its calls)."""
    fill(conn, row, queue, jobs)
    if row.startswith("pyqueue"):
        drained = worker_loops.worker_drain(dsn, conn, queue, workers, config, jobs=jobs, left=left,
                                             in_transaction=row == "pyqueue_in_txn")
        return drained.acknowledged, drained
    loops: dict[str, Callable[[Task, Signals], None]] = {
        "floor": sql_loops.floor_drain, "pgmq": pgmq_drain, "jobq_sql": sql_loops.jobq_drain,
        "jobq_claim_complete": sql_loops.jobq_drain, "jobq_take": take_drain,
    }
    size = sql_loops.Size(jobs, config.batch, STEP_TIMEOUT)
    return sql_loops.drain_outcome(dsn, loops[row], queue, workers, size), None


def keep(best: Best, key: str, label: str, measured: tuple[Outcome, worker_loops.Drained | None]) -> None:
    outcome, drained = measured
    best.keep(key, outcome, drained)
    progress(f"{label}: {outcome.jobs_per_s:,.0f} jobs/s")


# --- many long-leased jobs ahead ---------------------------------------------------------

def lease_ahead(conn: Conn, queue: str, count: int) -> list[tuple[Any, Any]]:
    """Enqueue ``count`` jobs and lease them all for HOLD_LEASE, first in
    the queue's order: long-running jobs nobody finishes during the run,
    held the way workers hold them — claimed, then heart-beaten once (a
    worker beats after a third of the lease), which parks them out of the
    claim index."""
    sql_loops.prefill_jobq(conn, queue, count)
    held: list[tuple[Any, Any]] = []
    while len(held) < count:
        rows = conn.execute(HOLD_CLAIM, (queue, min(HOLD_CHUNK, count - len(held)), HOLD_LEASE)).fetchall()
        if not rows:
            raise BenchError(f"could lease only {len(held)} of {count} jobs ahead in {queue}")
        held += [(r[0], r[1]) for r in rows]
    for start in range(0, len(held), HOLD_CHUNK):
        chunk = held[start:start + HOLD_CHUNK]
        conn.execute(HOLD_BEAT, ([h[0] for h in chunk], [h[1] for h in chunk], HOLD_LEASE)).fetchone()
    return held


def release(conn: Conn, held: list[tuple[Any, Any]]) -> None:
    """Complete the held jobs (they leave the queue)."""
    for start in range(0, len(held), HOLD_CHUNK):
        chunk = held[start:start + HOLD_CHUNK]
        conn.execute(sql_loops.JOBQ_COMPLETE, ([h[0] for h in chunk], [h[1] for h in chunk])).fetchone()


def leased_round(dsn: str, conn: Conn, config: Config, best: Best) -> None:
    """The jobq rows of the drain at ``config.leased_workers`` processes,
    with ``config.leased_jobs`` long-leased jobs ahead of the ready ones."""
    queue = f"{sql_loops.QUEUE_PREFIX}drain-leased"
    held = lease_ahead(conn, queue, config.leased_jobs)
    try:
        for row in LEASED_ROWS:
            measured = drain_once(dsn, conn, row, config.leased_workers, config, jobs=config.drain_jobs,
                                  queue=queue, left=len(held))
            keep(best, f"leased_{row}", f"drain, {len(held):,} leased ahead, {row}, "
                 f"W={config.leased_workers}", measured)
    finally:
        release(conn, held)


# --- the sections --------------------------------------------------------------------------

def entry(best: Best, key: str, floor: float | None = None, **more: Any) -> dict[str, Any]:
    """One row's JSON: the best run, every run, its ratio to ``floor``."""
    outcome = best.outcomes[key]
    found = best.result(key, **more)
    if floor is not None:
        found["ratio_to_floor"] = ratio(outcome.jobs_per_s, floor)
    drained = best.extra.get(key)
    if isinstance(drained, worker_loops.Drained):
        found["handled_jobs_per_s"] = round(drained.handled.jobs_per_s, 1)
        found.update(call_counts(drained.calls, outcome.jobs))
    return found


def call_counts(calls: dict[str, Any] | None, jobs: int) -> dict[str, Any]:
    """How the workers of a drain talked to jobq: calls of each claim- and
    acknowledge-like function, and jobs per call (empty without
    track_functions)."""
    found: dict[str, Any] = {}
    for name, c in (calls or {}).items():  # name: the signature, e.g. jobq.claim(text[],integer,…)
        if name.split("(")[0].removeprefix("jobq.") in CALLS_SHOWN:
            found[name] = {"calls": c["calls"], "jobs_per_call": round(jobs / c["calls"], 1)}
    return {"function_calls": found} if found else {}


def drain_section(dsn: str, conn: Conn, config: Config) -> dict[str, Any]:
    """Every drain row at every W of ``config.drain_workers``, round by
    round, then the leased-ahead rows; ratios to the floor and pgmq rows."""
    in_txn = worker_loops.in_transaction_supported()
    rows = [row for row in ROWS if row != "pyqueue_in_txn" or in_txn]
    best = Best(config.statistic)
    for round_number in range(1, config.repeat + 1):
        progress(f"drain of {config.drain_jobs:,} pre-filled jobs, round {round_number} of {config.repeat}")
        for workers in config.drain_workers:
            for row in rows:
                queue = f"{sql_loops.QUEUE_PREFIX}drain-{row}-{workers}"
                measured = drain_once(dsn, conn, row, workers, config, jobs=config.drain_jobs, queue=queue)
                keep(best, f"{row}_{workers}", f"drain, {row}, W={workers}", measured)
        if config.leased_jobs > 0:
            leased_round(dsn, conn, config, best)
    by_workers: dict[str, Any] = {}
    for workers in config.drain_workers:
        floor = best.outcomes[f"floor_{workers}"].jobs_per_s
        pgmq = best.outcomes[f"pgmq_{workers}"].jobs_per_s
        found: dict[str, Any] = {}
        for row in ROWS:
            key = f"{row}_{workers}"
            if key not in best.outcomes:
                found[row] = {"available": False, "why": "Worker.register has no in_transaction"}
                continue
            found[row] = entry(best, key, floor, available=True,
                               ratio_to_pgmq=ratio(best.outcomes[key].jobs_per_s, pgmq))
        by_workers[str(workers)] = found
    leased: dict[str, Any] = {"ran": config.leased_jobs > 0, "leased_jobs": config.leased_jobs,
                              "workers": config.leased_workers, "lease": HOLD_LEASE}
    if config.leased_jobs > 0:
        plain = by_workers.get(str(config.leased_workers), {})
        floor_key = f"floor_{config.leased_workers}"
        leased_floor = best.outcomes[floor_key].jobs_per_s if floor_key in best.outcomes else None
        for row in LEASED_ROWS:
            key = f"leased_{row}"
            plain_rate = plain.get(row, {}).get("jobs_per_s")
            leased[row] = entry(best, key, leased_floor, ratio_to_plain=ratio(best.outcomes[key].jobs_per_s,
                                                                       plain_rate) if plain_rate else None)
    return {"jobs": config.drain_jobs, "batch": config.batch, "repeat": config.repeat,
            "statistic": statistic_text(config),
            "concurrency_per_process": config.worker_concurrency, "in_transaction_worker": in_txn,
            "rows": ROWS, "workers": by_workers, "leased_ahead": leased}


def single_section(dsn: str, conn: Conn, config: Config) -> dict[str, Any]:
    """One connection alone: the floor DELETE loop, claim + complete_many
    and take in a transaction, back to back, best of ``config.repeat``."""
    best = Best(config.statistic)
    for round_number in range(1, config.repeat + 1):
        progress(f"one connection, {config.single_jobs:,} pre-filled jobs, round {round_number} "
                 f"of {config.repeat}")
        for row in SINGLE_ROWS:
            queue = f"{sql_loops.QUEUE_PREFIX}single-{row}"
            measured = drain_once(dsn, conn, row, 1, config, jobs=config.single_jobs, queue=queue)
            keep(best, row, f"one connection, {row}", measured)
    floor = best.outcomes["floor"].jobs_per_s
    return {"jobs": config.single_jobs, "batch": config.batch, "repeat": config.repeat,
            "statistic": statistic_text(config), "about": SINGLE_ROWS,
            "rows": {row: entry(best, row, floor) for row in SINGLE_ROWS}}
