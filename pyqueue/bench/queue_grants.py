"""``python -m pyqueue.bench.queue_grants``: what per-queue privileges cost
the claim and enqueue paths (issue 25: at most 5 %).

On a throwaway durable local server, four databases, every measured call
made by the same login role (a jobq_producer and jobq_worker, not an admin):

- ``0.8.0``: the frozen ``sql/jobq--0.8.0.sql``, before per-queue privileges;
- ``no grants``: the current jobq without any grant (a call looks once at
  an empty table);
- ``grants elsewhere``: the current jobq with ``--grants`` grants of each
  privilege on other queues (a call looks at them once and finds none that
  matches its queue);
- ``grants held``: the current jobq with the benchmark queue granted to the
  calling role for produce and consume (every call runs the full check).

Two kinds of figures, each as a ratio to 0.8.0 measured in the same run:

- **throughput**: ``--consumers`` connections draining a prefilled queue
  with ``jobq.claim(queue, 100)`` + ``jobq.complete_many``, and
  ``--producers`` connections adding jobs with ``jobq.enqueue_many`` (100
  per call), in jobs/s;
- **server CPU per job**: one connection making ``--calls`` calls (single
  ``jobq.enqueue``, ``enqueue_many`` of 100, ``claim`` + ``complete`` of 1
  and of 100), timed by its backend's CPU time (``/proc``, user + system),
  which other work on the machine barely moves: on a shared machine the
  throughput rows swing by ±20 % from run to run, the CPU rows by a few %.

The calling login's commits do not wait for the WAL flush (synchronous_commit
off for it alone), so that the calls' own work is what the throughput rows
time. Rounds interleave the databases (in a rotating order) within each
workload; medians count. The goal is judged on the CPU rows.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb

from pyqueue import _sqlfiles
from pyqueue.bench import sql_loops
from pyqueue.bench.config import STEP_TIMEOUT
from pyqueue.bench.harness import BenchError, Role, Run, Task, progress
from pyqueue.bench.report import format_table
from pyqueue.bench.suite import LOCAL_SETTINGS, database

DEFAULT_JSON = Path("bench-results/queue_grants.json")
GOAL = 1.05  # issue 25: no grants, or grants on other queues, cost at most 5 % more CPU per job than 0.8.0
BASELINE = "0.8.0"
LABELS = (BASELINE, "no grants", "grants elsewhere", "grants held")
JUDGED = ("no grants", "grants elsewhere")
APP_ROLE = "jobq_bench_app"  # the login every measured call is made by
OTHER_ROLE = "jobq_bench_other"  # the grantee of the grants on other queues
QUEUE = f"{sql_loops.QUEUE_PREFIX}grants"
DRAIN, PRODUCE = "drain (claim + complete_many of 100)", "produce (enqueue_many of 100)"
THROUGHPUT = (DRAIN, PRODUCE)
ENQUEUE_1, ENQUEUE_100 = "enqueue", "enqueue_many of 100"
CLAIM_1, CLAIM_100 = "claim + complete of 1", "claim + complete_many of 100"
CPU = (ENQUEUE_1, ENQUEUE_100, CLAIM_1, CLAIM_100)
BATCH = {ENQUEUE_1: 1, ENQUEUE_100: 100, CLAIM_1: 1, CLAIM_100: 100}
ENQUEUE_ONE = "SELECT jobq.enqueue(%s, %s)"
COMPLETE_ONE = "SELECT jobq.complete(%s, %s)"
WARMUP_CALLS = 20  # per CPU measurement, before the clock starts: the session's first calls plan


@dataclass(frozen=True)
class Sizes:
    """How much each measurement does."""

    jobs: int  # per throughput measurement
    calls: int  # per CPU measurement of single-job calls (a fiftieth of it for the batches of 100)
    consumers: int
    producers: int


def create_roles(conn: sql_loops.Conn) -> None:
    """The calling login and the other queues' grantee (cluster-wide; kept for
    the next run). The login's commits do not wait for the WAL flush."""
    for role, options in ((APP_ROLE, "LOGIN IN ROLE jobq_producer, jobq_worker"), (OTHER_ROLE, "NOLOGIN")):
        if conn.execute("SELECT FROM pg_roles WHERE rolname = %s", (role,)).fetchone() is None:
            conn.execute(f"CREATE ROLE {role} {options}")
    conn.execute(f"ALTER ROLE {APP_ROLE} SET synchronous_commit = off")


def grant(conn: sql_loops.Conn, label: str, grants: int) -> None:
    """The grants of one configuration."""
    if label == "grants elsewhere":
        for privilege in ("produce", "consume", "read"):
            for k in range(grants):
                pattern = f"other{k}.*" if k % 2 else f"other.q{k}"
                conn.execute("SELECT jobq.grant_queue(%s, %s, %s)", (OTHER_ROLE, pattern, privilege))
    elif label == "grants held":
        for privilege in ("produce", "consume"):
            conn.execute("SELECT jobq.grant_queue(%s, %s, %s)", (APP_ROLE, QUEUE, privilege))


def install(admin: sql_loops.Conn, dsn: str, grants: int) -> dict[str, str]:
    """One database per configuration; the login's DSN of each."""
    scripts = _sqlfiles.SqlScripts.load()
    targets: dict[str, str] = {}
    for number, label in enumerate(LABELS):
        name = f"jobq_bench_grants_{number}"
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
        owner = make_conninfo(dsn, dbname=name)
        version = BASELINE if label == BASELINE else scripts.latest
        with psycopg.connect(owner, autocommit=True) as conn:
            conn.execute(scripts.full[version].read())
            conn.execute("RESET search_path")
            if label != BASELINE:
                grant(conn, label, grants)
        targets[label] = make_conninfo(owner, user=APP_ROLE)
    return targets


def emptied(owner: str, prefill: int) -> None:
    """No job and no counter left; then ``prefill`` ready jobs."""
    with psycopg.connect(owner, autocommit=True) as conn:
        conn.execute("DELETE FROM jobq._job")
        conn.execute("DELETE FROM jobq._counter")
        if prefill:
            sql_loops.prefill_jobq(conn, QUEUE, prefill)
        conn.execute("VACUUM ANALYZE jobq._job")


def throughput(owner: str, dsn: str, workload: str, sizes: Sizes) -> float:
    """Jobs/s of a drain or of producers, batches of 100, as the login of ``dsn``."""
    draining = workload == DRAIN
    emptied(owner, sizes.jobs if draining else 0)
    if draining:
        consumers = [Task(dsn, QUEUE, 100, f"consumer-{k}") for k in range(sizes.consumers)]
        role = Role(sql_loops.jobq_drain, consumers)
    else:
        role = Role(sql_loops.jobq_enqueue,
                    sql_loops.tasks(dsn, QUEUE, 100, sizes.producers, prefix="producer", total=sizes.jobs))
    with Run([role], timeout=STEP_TIMEOUT) as run:
        return run.until_count(sizes.jobs).jobs_per_s


def backend_cpu_seconds(conn: sql_loops.Conn) -> float:
    """User + system CPU time of the connection's server process so far (Linux /proc)."""
    fields = Path(f"/proc/{conn.info.backend_pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_call(conn: sql_loops.Conn, workload: str, batch: int, payloads: list[Jsonb]) -> None:
    if workload == ENQUEUE_1:
        conn.execute(ENQUEUE_ONE, (QUEUE, payloads[0])).fetchone()
    elif workload == ENQUEUE_100:
        conn.execute(sql_loops.JOBQ_ENQUEUE, (QUEUE, payloads)).fetchall()
    else:
        rows = conn.execute(sql_loops.JOBQ_CLAIM, (QUEUE, batch, "cpu")).fetchall()
        if len(rows) != batch:
            raise BenchError(f"a claim of {batch} found {len(rows)} jobs: the prefill was short")
        if batch == 1:
            conn.execute(COMPLETE_ONE, (rows[0][0], rows[0][1])).fetchone()
        else:
            conn.execute(sql_loops.JOBQ_COMPLETE, ([r[0] for r in rows], [r[1] for r in rows])).fetchone()


def cpu_per_job(owner: str, dsn: str, workload: str, sizes: Sizes) -> float:
    """Server CPU microseconds per job of one connection's calls, as the login of ``dsn``."""
    batch = BATCH[workload]
    calls = max(1, sizes.calls // 50) if batch == 100 else sizes.calls
    emptied(owner, (calls + WARMUP_CALLS) * batch if workload in (CLAIM_1, CLAIM_100) else 0)
    payloads = [Jsonb(sql_loops.payload(n)) for n in range(batch)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(WARMUP_CALLS):
            one_call(conn, workload, batch, payloads)
        before = backend_cpu_seconds(conn)
        for _ in range(calls):
            one_call(conn, workload, batch, payloads)
        spent = backend_cpu_seconds(conn) - before
    return spent / (calls * batch) * 1e6


def measure(dsn: str, sizes: Sizes, *, rounds: int, grants: int) -> dict[str, Any]:
    """Every workload on every database, ``rounds`` times; medians and ratios to 0.8.0."""
    workloads = THROUGHPUT + CPU
    figures: dict[str, dict[str, list[float]]] = {w: {label: [] for label in LABELS} for w in workloads}
    with psycopg.connect(dsn, autocommit=True) as admin:
        create_roles(admin)
        targets = install(admin, dsn, grants)
        for round_number in range(rounds):
            # A rotating order: no configuration always runs first (or last) in a round.
            order = LABELS[round_number % len(LABELS):] + LABELS[:round_number % len(LABELS)]
            for workload in workloads:
                for label in order:
                    owner = make_conninfo(targets[label], user=admin.info.user)
                    if workload in THROUGHPUT:
                        value, unit = throughput(owner, targets[label], workload, sizes), "jobs/s"
                    else:
                        value, unit = cpu_per_job(owner, targets[label], workload, sizes), "CPU µs/job"
                    figures[workload][label].append(round(value, 2))
                    progress(f"queue grants, round {round_number + 1}: {workload}, {label}: "
                             f"{value:,.1f} {unit}")
        for number in range(len(LABELS)):
            admin.execute(f'DROP DATABASE "jobq_bench_grants_{number}" WITH (FORCE)')
    medians = {w: {label: statistics.median(v) for label, v in by.items()} for w, by in figures.items()}
    ratios = {w: {label: round(m[label] / m[BASELINE], 3) if m[BASELINE] else 0.0 for label in LABELS}
              for w, m in medians.items()}
    worst = max(ratios[w][label] for w in CPU for label in JUDGED)
    return {"jobs": sizes.jobs, "calls": sizes.calls, "consumers": sizes.consumers,
            "producers": sizes.producers, "rounds": rounds, "grants_per_privilege": grants,
            "figures": figures, "medians": medians, "ratios_to_080": ratios, "worst_cpu_ratio": worst,
            "ok": worst <= GOAL}


def summary(result: dict[str, Any]) -> str:
    medians, ratios = result["medians"], result["ratios_to_080"]

    def rows(workloads: Sequence[str], digits: int) -> list[list[str]]:
        return [[w, *(f"{medians[w][label]:,.{digits}f} ({ratios[w][label]:.3f})" for label in LABELS)]
                for w in workloads]

    verdict = "met" if result["ok"] else "missed"
    return "\n".join([
        format_table([f"jobs/s (÷ {BASELINE}), median of {result['rounds']}", *LABELS],
                     rows(THROUGHPUT, 0)),
        "",
        format_table([f"server CPU µs per job (÷ {BASELINE})", *LABELS], rows(CPU, 1)),
        "",
        f"throughput: {result['consumers']} draining / {result['producers']} enqueueing connections; "
        f"grants elsewhere: {result['grants_per_privilege']} per privilege",
        f"worst CPU per job of {' or '.join(JUDGED)} ÷ {BASELINE}: {result['worst_cpu_ratio']:.3f} "
        f"(goal <= {GOAL}): {verdict}",
    ])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyqueue.bench.queue_grants",
                                     description="What per-queue privileges cost claim and enqueue.")
    parser.add_argument("--jobs", type=int, default=50_000, help="jobs per throughput measurement (50,000)")
    parser.add_argument("--calls", type=int, default=10_000,
                        help="single-job calls per CPU measurement; batches of 100: a fiftieth (10,000)")
    parser.add_argument("--consumers", type=int, default=4, help="draining connections (4)")
    parser.add_argument("--producers", type=int, default=4, help="enqueueing connections (4)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds, databases interleaved (5)")
    parser.add_argument("--grants", type=int, default=10, help="grants per privilege on other queues (10)")
    parser.add_argument("--quick", action="store_true", help="5,000 jobs, 1,000 calls, one round")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"results file ({DEFAULT_JSON})")
    args = parser.parse_args(argv)
    jobs, calls, rounds = (5_000, 1_000, 1) if args.quick else (args.jobs, args.calls, args.rounds)
    if min(jobs, calls, args.consumers, args.producers, rounds, args.grants) < 1:
        parser.error("--jobs, --calls, --consumers, --producers, --rounds and --grants must be at least 1")
    try:
        with database(None, LOCAL_SETTINGS) as (dsn, _mode):
            result = measure(dsn, Sizes(jobs, calls, args.consumers, args.producers), rounds=rounds,
                             grants=args.grants)
    except BenchError as error:
        print(f"queue grants benchmark failed: {error}", file=sys.stderr)
        return 1
    print(summary(result))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"results: {args.json}")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
