"""Workflows in ``pyqueue bench``: what a batch with a
callback costs the drain, and what a wide fan-in costs to set up and release.

1. Batch drain vs plain drain: the same ``pyqueue.Worker`` drain (W worker
   processes, the largest W of the drain section; N pre-filled no-op jobs,
   N the drain section's) once plain and once with every job a member of
   one batch whose callback waits for them all (``jobq.enqueue_callback``),
   back to back in every round. Each completion then updates the callback's
   gate; the issue asks for at least 0.8 of the plain drain. The callback
   must be released exactly once, with every member counted completed.
2. Fan-in: the time to enqueue a callback over FAN_IN pre-filled members
   (100,000; 10,000 with ``--quick``), and to release it: the completion of
   its last member, which makes the callback ready in the same call.

Ratios are of runs in the same round; nothing here is a timed assertion.
"""

from __future__ import annotations

import time
from typing import Any

from pyqueue.bench import drains, sql_loops, worker_loops
from pyqueue.bench.config import Config
from pyqueue.bench.harness import BenchError, Outcome, progress, ratio
from pyqueue.bench.throughput import Best, statistic_text

Conn = sql_loops.Conn
FAN_IN = 100_000  # members of the wide callback in a full run (issue 15: "a callback with 100,000 parents")
FAN_IN_QUICK = 10_000  # ... with --quick
COMPLETE_CHUNK = 1_000  # fan-in members per claim + complete_many before the release (claim caps n)
BATCH_GOAL = 0.8  # issue 15: the batch drain stays at or above this share of the plain drain
PLAIN_QUEUE = f"{sql_loops.QUEUE_PREFIX}wf-plain"
BATCH_QUEUE = f"{sql_loops.QUEUE_PREFIX}wf-batch"
FAN_QUEUE = f"{sql_loops.QUEUE_PREFIX}wf-fan-in"
CALLBACK_QUEUE = f"{sql_loops.QUEUE_PREFIX}wf-callback"
ENQUEUE_CALLBACK = "SELECT jobq.enqueue_callback(%s, '{\"bench\": true}'::jsonb, %s::bigint[])"
MEMBER_IDS = "SELECT id FROM jobq._job WHERE queue = %s ORDER BY id"


def members_of(conn: Conn, queue: str) -> list[int]:
    return [int(row[0]) for row in conn.execute(MEMBER_IDS, (queue,)).fetchall()]


def enqueue_callback(conn: Conn, members: list[int]) -> int:
    row = conn.execute(ENQUEUE_CALLBACK, (CALLBACK_QUEUE, members)).fetchone()
    if row is None:
        raise BenchError("jobq.enqueue_callback returned no id")
    return int(row[0])


def run_callback(conn: Conn, callback: int, members: int) -> dict[str, Any]:
    """Check that ``callback`` alone was released, with every member counted
    completed, then run it (claim + complete) so the run leaves nothing behind."""
    rows = conn.execute(sql_loops.JOBQ_CLAIM, (CALLBACK_QUEUE, 10, "bench-callback")).fetchall()
    if [int(r[0]) for r in rows] != [callback]:
        raise BenchError(f"expected callback {callback} alone to be ready, claimed {[r[0] for r in rows]}")
    batch: dict[str, Any] = dict(rows[0][2].get("batch", {}))
    expected = {"completed": members, "dead": 0, "cancelled": 0, "members": members}
    if batch != expected:
        raise BenchError(f"callback {callback} counted {batch}, expected {expected}")
    conn.execute("SELECT jobq.complete(%s, %s::uuid)", (rows[0][0], rows[0][1]))
    return batch


def batch_round(dsn: str, conn: Conn, config: Config, workers: int, best: Best) -> None:
    """One round: the plain drain, then the same drain as one batch."""
    jobs = config.drain_jobs
    drains.fill(conn, "jobq_sql", PLAIN_QUEUE, jobs)
    plain = worker_loops.worker_drain(dsn, conn, PLAIN_QUEUE, workers, config, jobs=jobs)
    best.keep("plain", plain.acknowledged, plain)
    progress(f"workflows, plain drain, W={workers}: {plain.acknowledged.jobs_per_s:,.0f} jobs/s")

    drains.fill(conn, "jobq_sql", BATCH_QUEUE, jobs)
    callback = enqueue_callback(conn, members_of(conn, BATCH_QUEUE))
    batch = worker_loops.worker_drain(dsn, conn, BATCH_QUEUE, workers, config, jobs=jobs)
    best.keep("batch", batch.acknowledged, batch)
    run_callback(conn, callback, jobs)
    progress(f"workflows, batch drain (one callback over {jobs:,} members), W={workers}: "
             f"{batch.acknowledged.jobs_per_s:,.0f} jobs/s")


def complete_all_but_one(conn: Conn, members: int) -> Outcome:
    """Claim and complete the fan-in members but the newest, on one connection."""
    started = time.perf_counter()
    done = 0
    while done < members - 1:
        rows = conn.execute(sql_loops.JOBQ_CLAIM, (FAN_QUEUE, min(COMPLETE_CHUNK, members - 1 - done),
                                                   "bench-fan-in")).fetchall()
        if not rows:
            raise BenchError(f"only {done} of {members} fan-in members could be claimed")
        conn.execute(sql_loops.JOBQ_COMPLETE, ([r[0] for r in rows], [r[1] for r in rows])).fetchone()
        done += len(rows)
    return Outcome(done, time.perf_counter() - started)


def fan_in(conn: Conn, members: int) -> dict[str, Any]:
    """Enqueue a callback over ``members`` pre-filled jobs (timed), complete
    all but one, then time the completion of the last, which releases it."""
    sql_loops.prefill_jobq(conn, FAN_QUEUE, members)
    sql_loops.vacuum(conn, "jobq._job")
    ids = members_of(conn, FAN_QUEUE)
    started = time.perf_counter()
    callback = enqueue_callback(conn, ids)
    enqueue_s = time.perf_counter() - started
    completed = complete_all_but_one(conn, members)
    waiting = conn.execute("SELECT jobq.status(%s)", (callback,)).fetchone()
    if waiting != ("waiting",):
        raise BenchError(f"callback {callback} is {waiting} before its last member finished")
    row = conn.execute(sql_loops.JOBQ_CLAIM, (FAN_QUEUE, 1, "bench-fan-in")).fetchone()
    if row is None:
        raise BenchError("the last fan-in member could not be claimed")
    started = time.perf_counter()
    conn.execute("SELECT jobq.complete(%s, %s::uuid)", (row[0], row[1]))
    release_s = time.perf_counter() - started
    run_callback(conn, callback, members)
    result = {"members": members, "enqueue_callback_ms": round(enqueue_s * 1000, 1),
              "release_ms": round(release_s * 1000, 2),
              "members_completed_before": completed.as_dict()}
    progress(f"workflows, fan-in of {members:,}: enqueue_callback {result['enqueue_callback_ms']:,.1f} ms, "
             f"release (last member's complete) {result['release_ms']:.2f} ms")
    return result


def workflow_section(dsn: str, conn: Conn, config: Config) -> dict[str, Any]:
    """Batch drain vs plain drain, ``config.repeat`` interleaved rounds, then the fan-in."""
    workers = max(config.drain_workers)
    best = Best(config.statistic)
    for round_number in range(1, config.repeat + 1):
        progress(f"workflows: plain vs batch drain of {config.drain_jobs:,} jobs, round {round_number} "
                 f"of {config.repeat}")
        batch_round(dsn, conn, config, workers, best)
    outcomes = best.outcomes
    plain, batch = outcomes["plain"].jobs_per_s, outcomes["batch"].jobs_per_s
    return {
        "jobs": config.drain_jobs, "workers": workers, "batch": config.batch,
        "repeat": config.repeat, "statistic": statistic_text(config),
        "plain": best.result("plain"), "batch_with_callback": best.result("batch"),
        "batch_vs_plain": ratio(batch, plain), "goal_min": BATCH_GOAL,
        "fan_in": fan_in(conn, FAN_IN_QUICK if config.quick else FAN_IN),
    }


def rate(row: dict[str, Any]) -> str:
    return f"{row['jobs_per_s']:>9,.0f}"


def workflow_table(results: dict[str, Any]) -> str:
    """The printed lines of the section."""
    wf = results["workflows"]
    ratio_value = wf["batch_vs_plain"]
    met = "met" if ratio_value is not None and ratio_value >= wf["goal_min"] else "NOT met"
    fan = wf["fan_in"]
    shown = "-" if ratio_value is None else f"{ratio_value:.2f}"
    return "\n".join([
        f"Workflows (issue 15): pyqueue.Worker drain of {wf['jobs']:,} pre-filled no-op jobs, "
        f"W={wf['workers']}, batch {wf['batch']}; {wf['statistic']}",
        f"  {'plain drain:':<39}{rate(wf['plain'])} jobs/s",
        f"  {'the same jobs as one batch + callback:':<39}{rate(wf['batch_with_callback'])} jobs/s",
        f"  batch ÷ plain: {shown} (issue 15 asks ≥ {wf['goal_min']:g}: {met})",
        f"  fan-in of {fan['members']:,} members: enqueue_callback {fan['enqueue_callback_ms']:,.1f} ms; "
        f"release (the last member's jobq.complete) {fan['release_ms']:.2f} ms",
    ])
