"""``python -m pyqueue.bench.queue_partitions``: would partitioning the live
table by queue help?

On a throwaway durable local server, two databases with the current jobq:
one as installed, one whose ``jobq._job`` is swapped for a copy partitioned
``BY LIST (queue)``: one partition per benchmark queue and a default one,
the primary key ``(queue, id)`` (a partitioned table's must include the
partition key) with an index on ``id`` for the calls that name a job by id
alone (without it they run 20 times slower), every index of ``_job``
recreated on the parent, and each
partition with ``_job``'s storage settings. jobq's functions name
``jobq._job``, so they run unchanged on it (checked: an enqueue, a claim and
a completion before measuring).

Each round pre-fills ``--queues`` (8) queues with ``--jobs`` jobs each and
drains them with ``--consumers`` (32) connections spread over the queues,
each looping ``jobq.claim(queue, 100)`` + ``jobq.complete_many``; rounds
alternate between the two databases (A B A B …) and the median of each
counts. jobq would adopt the partitioned layout only if it won by at least
1.3 times (issue 16).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg

from pyqueue import _sqlfiles
from pyqueue.bench import sql_loops
from pyqueue.bench.config import STEP_TIMEOUT
from pyqueue.bench.harness import BenchError, Role, Run, Task, progress
from pyqueue.bench.report import format_table
from pyqueue.bench.suite import LOCAL_SETTINGS, database

DEFAULT_JSON = Path("bench-results/queue_partitions.json")
ADOPT_AT = 1.3  # issue 16: adopt partitioning by queue only if it wins by this much
BATCH = 100
STORAGE = ("fillfactor = 40, autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000, "
           "autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.02, "
           "autovacuum_vacuum_cost_delay = 0")


def queue_names(queues: int) -> list[str]:
    return [f"{sql_loops.QUEUE_PREFIX}q{k}" for k in range(queues)]


def partition_by_queue(conn: sql_loops.Conn, queues: list[str]) -> None:
    """Swap jobq._job for a copy partitioned by queue (the old table stays,
    empty and renamed: the views still read it, the functions do not)."""
    conn.execute("ALTER TABLE jobq._job RENAME TO _job_plain")
    conn.execute("CREATE TABLE jobq._job (LIKE jobq._job_plain INCLUDING DEFAULTS INCLUDING CONSTRAINTS) "
                 "PARTITION BY LIST (queue)")
    conn.execute("ALTER TABLE jobq._job ALTER COLUMN id SET DEFAULT nextval('jobq._job_id_seq')")
    conn.execute("ALTER TABLE jobq._job ADD PRIMARY KEY (queue, id)")
    # complete, fail, heartbeat name a job by id alone: without an index that
    # leads with id, each would scan every partition's (queue, id) index.
    conn.execute("CREATE INDEX _jobp_id_idx ON jobq._job (id)")
    indexes = conn.execute("SELECT indexdef FROM pg_indexes WHERE schemaname = 'jobq' "
                           "AND tablename = '_job_plain' AND indexname <> '_job_pkey'").fetchall()
    for (definition,) in indexes:
        statement = str(definition).replace("ON jobq._job_plain", "ON jobq._job")
        conn.execute(statement.replace("CREATE INDEX _job_", "CREATE INDEX _jobp_")
                     .replace("CREATE UNIQUE INDEX _job_", "CREATE UNIQUE INDEX _jobp_"))
    for k, queue in enumerate(queues):
        conn.execute(f"CREATE TABLE jobq._job_q{k} PARTITION OF jobq._job FOR VALUES IN ('{queue}') "
                     f"WITH ({STORAGE})")
    conn.execute(f"CREATE TABLE jobq._job_other PARTITION OF jobq._job DEFAULT WITH ({STORAGE})")
    conn.execute("GRANT SELECT ON jobq._job TO jobq_admin")
    # jobq works on it: enqueue, claim, complete.
    job = conn.execute("SELECT jobq.enqueue(%s, '{}')", (queues[0],)).fetchone()
    claimed = conn.execute("SELECT id, lease_token FROM jobq.claim(%s, 1)", (queues[0],)).fetchone()
    if job is None or claimed is None or claimed[0] != job[0]:
        raise BenchError("jobq.claim did not find the job enqueued into the partitioned _job")
    done = conn.execute("SELECT jobq.complete(%s, %s)", (claimed[0], claimed[1])).fetchone()
    left = conn.execute("SELECT count(*) FROM jobq._job").fetchone()
    if done != (True,) or left != (0,):
        raise BenchError("jobq.complete did not finish the job on the partitioned _job")


def drained(dsn: str, conn: sql_loops.Conn, queues: list[str], jobs: int, consumers: int) -> float:
    """Jobs/s of ``consumers`` connections draining ``jobs`` jobs from each queue."""
    for queue in queues:
        sql_loops.prefill_jobq(conn, queue, jobs)
    conn.execute("VACUUM ANALYZE jobq._job")
    tasks = [Task(dsn, queues[k % len(queues)], BATCH, f"consumer-{k}") for k in range(consumers)]
    with Run([Role(sql_loops.jobq_drain, tasks)], timeout=STEP_TIMEOUT) as run:
        outcome = run.until_count(jobs * len(queues))
    return outcome.jobs_per_s


def measure(dsn: str, queues: int, jobs: int, consumers: int, rounds: int) -> dict[str, Any]:
    names = queue_names(queues)
    script = _sqlfiles.SqlScripts.load()
    install = script.full[script.latest].read()
    targets: dict[str, str] = {}
    with psycopg.connect(dsn, autocommit=True) as admin:
        for label in ("plain", "by_queue"):
            name = f"jobq_bench_{label}"
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{name}"')
            targets[label] = psycopg.conninfo.make_conninfo(dsn, dbname=name)
            with psycopg.connect(targets[label], autocommit=True) as conn:
                conn.execute(install)
                conn.execute("RESET search_path")
                if label == "by_queue":
                    partition_by_queue(conn, names)
        rates: dict[str, list[float]] = {"plain": [], "by_queue": []}
        for round_number in range(rounds):
            for label in ("plain", "by_queue"):
                with psycopg.connect(targets[label], autocommit=True) as conn:
                    rate = drained(targets[label], conn, names, jobs, consumers)
                rates[label].append(round(rate, 1))
                progress(f"queue partitions, round {round_number + 1}: {label} {rate:,.0f} jobs/s")
        for label in targets:
            admin.execute(f'DROP DATABASE "jobq_bench_{label}" WITH (FORCE)')
    plain, by_queue = statistics.median(rates["plain"]), statistics.median(rates["by_queue"])
    ratio = by_queue / plain if plain else 0.0
    return {"queues": queues, "jobs_per_queue": jobs, "consumers": consumers, "rounds": rounds,
            "rates": rates, "plain_jobs_per_s": plain, "by_queue_jobs_per_s": by_queue,
            "ratio": round(ratio, 3), "adopt": ratio >= ADOPT_AT}


def summary(result: dict[str, Any]) -> str:
    rows = [[label, f"{result[f'{label}_jobs_per_s']:,.0f}",
             ", ".join(f"{r:,.0f}" for r in result["rates"][label])] for label in ("plain", "by_queue")]
    verdict = "adopt" if result["adopt"] else "do not adopt"
    return "\n".join([
        format_table([f"{result['consumers']} consumers, {result['queues']} queues", "median jobs/s",
                      "rounds"], rows),
        f"partitioned by queue / as installed: {result['ratio']:.2f} (adopt at >= {ADOPT_AT}): {verdict}",
    ])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyqueue.bench.queue_partitions",
                                     description="Partitioning jobq._job by queue: measured (issue 16).")
    parser.add_argument("--queues", type=int, default=8, help="busy queues (8)")
    parser.add_argument("--jobs", type=int, default=25_000, help="jobs per queue and round (25,000)")
    parser.add_argument("--consumers", type=int, default=32, help="draining connections (32)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per layout, alternating (3)")
    parser.add_argument("--quick", action="store_true", help="5,000 jobs per queue, one round")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"results file ({DEFAULT_JSON})")
    args = parser.parse_args(argv)
    jobs, rounds = (5_000, 1) if args.quick else (args.jobs, args.rounds)
    if min(args.queues, jobs, args.consumers, rounds) < 1:
        parser.error("--queues, --jobs, --consumers and --rounds must be at least 1")
    try:
        with database(None, LOCAL_SETTINGS) as (dsn, _mode):
            result = measure(dsn, args.queues, jobs, args.consumers, rounds)
    except BenchError as error:
        print(f"queue partitions benchmark failed: {error}", file=sys.stderr)
        return 1
    print(summary(result))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"results: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
