"""``python -m pyqueue.bench.prune``: pruning history, partition drop against DELETE.

On a throwaway durable local server (fsync and full_page_writes on), two
databases: jobq 0.6.0 (the frozen ``sql/jobq--0.6.0.sql``, whose prune
deletes expired archive rows in batches of its ``n``) and the current jobq
(0.7.0 on: the archive is partitioned by expiry day, and prune drops a past
day's partition whole). Each archive gets the same ``--rows`` (1,000,000)
finished jobs, all expired (payload of about 200 bytes, one in ten with an
error), put there with one INSERT … SELECT of the columns ``_finish`` writes.
After a CHECKPOINT, ``SELECT jobq.prune()`` runs until it returns 0; the
run reports seconds and WAL bytes written (``pg_current_wal_lsn()`` before
and after), and for the DELETE also the VACUUM that its dead rows need
before their space can be used again. ``make bench`` runs it after the suite.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg

from pyqueue import _sqlfiles
from pyqueue.bench import sql_loops
from pyqueue.bench.harness import BenchError, progress
from pyqueue.bench.report import format_table
from pyqueue.bench.suite import LOCAL_SETTINGS, database

DEFAULT_JSON = Path("bench-results/prune.json")
OLD_VERSION = "0.6.0"  # the last jobq whose prune deleted rows
ROWS = 1_000_000
QUICK_ROWS = 100_000

FILL = """
INSERT INTO jobq._job_archive (id, queue, payload, status, priority, run_at, attempts, max_attempts, worker,
                               last_error, created_at, started_at, finished_at, prune_after)
SELECT g, 'bench.prune',
       jsonb_build_object('n', g, 'to', 'user' || g || '@example.com', 'pad', repeat('x', 150)),
       'completed', 0, %(day)s::timestamptz, 1, 25, 'bench', CASE WHEN g %% 10 = 0 THEN 'boom ' || g END,
       %(day)s::timestamptz, %(day)s::timestamptz, %(day)s::timestamptz,
       %(day)s::timestamptz + (g %% 86000) * interval '1 second'
FROM generate_series(1, %(rows)s) AS g
"""


def wal_lsn(conn: sql_loops.Conn) -> str:
    row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    return str(row[0]) if row else "0/0"


def wal_since(conn: sql_loops.Conn, lsn: str) -> int:
    row = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s::pg_lsn)::bigint", (lsn,)).fetchone()
    return int(row[0]) if row else 0


def measured(conn: sql_loops.Conn, statement: str, *, repeat_until_zero: bool) -> dict[str, Any]:
    """Seconds and WAL bytes of ``statement`` (again and again until it
    returns 0, when asked)."""
    conn.execute("CHECKPOINT")
    lsn, started, calls, total = wal_lsn(conn), time.perf_counter(), 0, 0
    while True:
        cursor = conn.execute(statement)
        row = cursor.fetchone() if cursor.description else None
        calls += 1
        done = int(row[0]) if row and row[0] is not None else 0
        total += done
        if not repeat_until_zero or done == 0:
            break
    seconds = time.perf_counter() - started
    return {"seconds": round(seconds, 2), "wal_bytes": wal_since(conn, lsn), "calls": calls, "rows": total}


def prepared(admin: sql_loops.Conn, dsn: str, name: str, script: str, rows: int) -> str:
    """A database ``name`` with ``script`` installed and ``rows`` expired
    archive rows (in a partition of a past day where the archive has them)."""
    admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.execute(f'CREATE DATABASE "{name}"')
    target = psycopg.conninfo.make_conninfo(dsn, dbname=name)
    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute(script)
        conn.execute("RESET search_path")
        row = conn.execute("SELECT date_trunc('day', now() AT TIME ZONE 'UTC' - interval '3 days') "
                           "AT TIME ZONE 'UTC'").fetchone()
        day = row[0] if row else None
        if conn.execute("SELECT to_regproc('jobq._archive_add')").fetchone() != (None,):
            conn.execute("SELECT jobq._archive_add((%(d)s::timestamptz AT TIME ZONE 'UTC')::date, "
                         "(%(d)s::timestamptz AT TIME ZONE 'UTC')::date + 1)", {"d": day})
        conn.execute(FILL, {"day": day, "rows": rows})
        conn.execute("SELECT setval('jobq._job_id_seq', %s)", (rows,))
        conn.execute("VACUUM ANALYZE jobq._job_archive")
    return target


def prune_section(dsn: str, rows: int) -> dict[str, Any]:
    scripts = _sqlfiles.SqlScripts.load()
    old_script = scripts.full[OLD_VERSION].read()
    new_script = scripts.full[scripts.latest].read()
    results: dict[str, Any] = {"rows": rows}
    with psycopg.connect(dsn, autocommit=True) as admin:
        for label, script in (("delete", old_script), ("partition_drop", new_script)):
            name = f"jobq_bench_prune_{label}"
            progress(f"prune: {rows:,} expired rows into {name}")
            target = prepared(admin, dsn, name, script, rows)
            with psycopg.connect(target, autocommit=True) as conn:
                found = measured(conn, "SELECT jobq.prune()", repeat_until_zero=True)
                left = conn.execute("SELECT count(*) FROM jobq._job_archive").fetchone()
                if found["rows"] != rows or left != (0,):
                    raise BenchError(f"{label}: prune removed {found['rows']:,} of {rows:,} rows, "
                                     f"{left} left")
                if label == "delete":
                    found["vacuum"] = measured(conn, "VACUUM jobq._job_archive", repeat_until_zero=False)
                size = conn.execute("SELECT pg_total_relation_size('jobq._job_archive')").fetchone()
                found["archive_bytes_after"] = int(size[0]) if size and size[0] is not None else 0
            results[label] = found
            progress(f"prune ({label}): {found['seconds']:.2f} s, "
                     f"{found['wal_bytes'] / 2**20:,.1f} MB of WAL")
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    delete, drop = results["delete"], results["partition_drop"]
    results["time_ratio"] = round(delete["seconds"] / max(drop["seconds"], 1e-3), 1)
    results["wal_ratio"] = round(delete["wal_bytes"] / max(drop["wal_bytes"], 1), 1)
    return results


def summary(result: dict[str, Any]) -> str:
    delete, drop = result["delete"], result["partition_drop"]
    vacuum = delete["vacuum"]
    rows = [
        [f"DELETE (jobq {OLD_VERSION})", f"{delete['seconds']:.2f}", f"{delete['wal_bytes'] / 2**20:,.1f}",
         str(delete["calls"])],
        ["  + the VACUUM its dead rows need", f"{vacuum['seconds']:.2f}",
         f"{vacuum['wal_bytes'] / 2**20:,.1f}", "1"],
        ["partition drop (this jobq)", f"{drop['seconds']:.2f}", f"{drop['wal_bytes'] / 2**20:,.2f}",
         str(drop["calls"])],
    ]
    return "\n".join([
        format_table([f"prune of {result['rows']:,} expired jobs", "seconds", "WAL MB", "prune calls"], rows),
        f"partition drop: {result['time_ratio']:g}x faster, {result['wal_ratio']:g}x less WAL "
        "(without the VACUUM)",
    ])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyqueue.bench.prune",
                                     description="Pruning history: partition drop against DELETE (issue 16).")
    parser.add_argument("--rows", type=int, default=ROWS, help=f"expired jobs in each archive ({ROWS:,})")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_ROWS:,} rows")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"results file ({DEFAULT_JSON})")
    args = parser.parse_args(argv)
    rows = QUICK_ROWS if args.quick else args.rows
    if rows < 1:
        parser.error("--rows must be at least 1")
    try:
        with database(None, LOCAL_SETTINGS) as (dsn, _mode):
            result = prune_section(dsn, rows)
    except BenchError as error:
        print(f"prune benchmark failed: {error}", file=sys.stderr)
        return 1
    print(summary(result))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"results: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
