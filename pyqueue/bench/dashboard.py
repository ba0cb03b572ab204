"""``python -m pyqueue.bench.dashboard``: how fast the dashboard renders its
pages over a big database — 1M archived jobs and 100k live ones by default.

It starts a throwaway PostgreSQL server (or uses ``--dsn``, a scratch
database with jobq installed and no jobs), loads the jobs straight into
jobq's tables with ``INSERT … SELECT generate_series`` (as the superuser:
minutes, not hours), starts ``pyqueue dashboard`` as a process of its own,
requests every page ``--requests`` times over one keep-alive connection and
prints the median and 95th percentile of each, in milliseconds, against the
300 ms goal of issue 14. A program, not a test: nothing fails when a page is
slow. Nothing in pyqueue imports this module.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import psycopg

from pyqueue import schema
from pyqueue.localserver import LocalServer, temporary_directory

Conn = psycopg.Connection[tuple[Any, ...]]

GOAL_MS = 300.0  # issue 14: every page under 300 ms with 1M archived and 100k live jobs
LOCAL_PORT = 55436  # the throwaway server's socket (in its own directory)
START_TIMEOUT = 30.0  # seconds for the dashboard to answer its first request
QUEUES = ("emails", "billing.invoices", "reports", "webhooks", "thumbnails", "search.index",
          "notifications", "exports")
WORKERS = 16  # worker names holding the running jobs
ERRORS = (
    "TimeoutError: the SMTP server did not answer within 30 s",
    "ConnectionResetError: [Errno 104] Connection reset by peer",
    "ValueError: invoice total is negative",
    "psycopg.errors.UniqueViolation: duplicate key value violates unique constraint",
    "HTTPError: 503 Service Unavailable from https://hooks.example.com/receive",
)
TRACEBACK = ("Traceback (most recent call last):\n  File \"app/tasks.py\", line 42, in handle\n"
             "    send(job.payload)\n  File \"app/mail.py\", line 17, in send\n    raise error\n")

# Archived ids are 1..archived (newest last), live ones follow. 90 % of the
# archive completed, 7 % dead after all their attempts, 3 % cancelled.
LOAD_ARCHIVE = """
INSERT INTO jobq._job_archive (id, queue, payload, status, priority, run_at, attempts, max_attempts,
                               job_key, worker, last_error, created_at, started_at, finished_at,
                               prune_after)
SELECT g, (%(queues)s::text[])[1 + g %% %(nqueues)s],
       jsonb_build_object('user_id', g %% 50000, 'order', 'order-' || g, 'amount', (g %% 997) * 1.5),
       s.status, 0, t.at, CASE s.status WHEN 'dead' THEN 5 ELSE 1 END, 5,
       CASE WHEN g %% 10 = 0 THEN 'order-' || g END,
       'worker-' || (g %% %(workers)s) || '@app-' || (g %% 3),
       CASE s.status WHEN 'dead' THEN (%(errors)s::text[])[1 + g %% %(nerrors)s] || E'\\n' || %(tb)s END,
       t.at, t.at + interval '1 second', t.at + interval '2 seconds', now() + interval '7 days'
FROM generate_series(1, %(archived)s::bigint) AS g,
     LATERAL (SELECT now() - (%(archived)s::bigint - g) * interval '500 milliseconds'
                     - interval '10 minutes' AS at) AS t,
     LATERAL (SELECT CASE WHEN g %% 100 < 90 THEN 'completed' WHEN g %% 100 < 97 THEN 'dead'
                          ELSE 'cancelled' END AS status) AS s
"""
# Live: one in 499 running (leased by one of the workers), one in five
# scheduled for later, the rest ready — one in twenty after a failed attempt.
LOAD_LIVE = """
INSERT INTO jobq._job (id, queue, payload, status, priority, run_at, attempts, max_attempts, job_key,
                       lease_token, lease_expires_at, worker, last_error, created_at, started_at)
SELECT g, (%(queues)s::text[])[1 + g %% %(nqueues)s],
       jsonb_build_object('user_id', g %% 50000, 'order', 'order-' || g, 'amount', (g %% 997) * 1.5),
       CASE WHEN r.running THEN 'running' ELSE 'ready' END, (g %% 3)::smallint,
       CASE WHEN g %% 5 = 0 AND NOT r.running THEN now() + (g %% 3600) * interval '1 second'
            ELSE now() - (%(last)s::bigint - g) * interval '20 milliseconds' END,
       CASE WHEN r.running OR g %% 20 = 1 THEN 1 ELSE 0 END, 5,
       CASE WHEN g %% 10 = 0 THEN 'order-' || g END,
       CASE WHEN r.running THEN gen_random_uuid() END,
       CASE WHEN r.running THEN now() + interval '5 minutes' END,
       CASE WHEN r.running THEN 'worker-' || (g %% %(workers)s) || '@app-' || (g %% 3) END,
       CASE WHEN g %% 20 = 1 THEN (%(errors)s::text[])[1 + g %% %(nerrors)s] END,
       now() - (%(last)s::bigint - g) * interval '20 milliseconds' - interval '1 minute',
       CASE WHEN r.running THEN now() - (g %% 60) * interval '1 second' END
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS g,
     LATERAL (SELECT g %% 499 = 7 AS running) AS r
"""
# The last hour of each queue's per-minute counters (the chart), and totals before it.
LOAD_COUNTERS = """
INSERT INTO jobq._counter (queue, bucket, completed, failed, dead)
SELECT q, date_trunc('minute', now()) - m * interval '1 minute', 200 + (m * 37 + length(q)) %% 150,
       (m * 7 + length(q)) %% 13, (m + length(q)) %% 3
FROM unnest(%(queues)s::text[]) AS q, generate_series(0, 59) AS m
UNION ALL
SELECT q, '-infinity', %(archived)s::bigint / %(nqueues)s, %(archived)s::bigint / 40,
       %(archived)s::bigint / 100
FROM unnest(%(queues)s::text[]) AS q
"""
# jobq 0.5.0 keeps every failed attempt: each dead job's five, one per retrying live job.
LOAD_ERRORS = """
INSERT INTO jobq._job_error (job_id, attempt, error, failed_at, worker)
SELECT j.id, a, (%(errors)s::text[])[1 + (j.id + a) %% %(nerrors)s] || E'\\n' || %(tb)s,
       j.created_at + a * interval '1 second', j.worker
FROM (SELECT id, attempts, created_at, worker FROM jobq._job_archive WHERE status = 'dead'
      UNION ALL SELECT id, attempts, created_at, worker FROM jobq._job WHERE last_error IS NOT NULL) AS j,
     generate_series(1, j.attempts) AS a
"""


def load(conn: Conn, archived: int, live: int) -> dict[str, int]:
    """Fill an empty jobq with archived and live jobs, counters, error
    history (when this jobq keeps it), three schedules, a paused queue and
    a limited one; ANALYZE. The ids worth requesting, by name."""
    busy = conn.execute("SELECT (SELECT count(*) FROM jobq._job) + (SELECT count(*) FROM jobq._job_archive)"
                        ).fetchone()
    if busy is None or busy[0] != 0:
        raise SystemExit("the database already holds jobs: give a scratch database (or no --dsn)")
    params: dict[str, Any] = {"queues": list(QUEUES), "nqueues": len(QUEUES), "errors": list(ERRORS),
                              "nerrors": len(ERRORS), "tb": TRACEBACK, "workers": WORKERS,
                              "archived": archived, "first": archived + 1, "last": archived + live}
    conn.execute("SET synchronous_commit = off")
    with conn.transaction():
        conn.execute(LOAD_ARCHIVE, params)
        conn.execute(LOAD_LIVE, params)
        conn.execute("SELECT setval('jobq._job_id_seq', %s)", (archived + live,))
        conn.execute(LOAD_COUNTERS, params)
        if conn.execute("SELECT to_regclass('jobq._job_error')").fetchone() != (None,):
            conn.execute(LOAD_ERRORS, params)
        for name, cron, queue in (("nightly-report", "0 3 * * *", "reports"),
                                  ("reindex", "*/15 * * * *", "search.index"),
                                  ("invoices", "0 6 1 * *", "billing.invoices")):
            conn.execute("SELECT jobq.every(%s, %s, %s, '{}'::jsonb, runner => 'workers')",
                         (name, cron, queue))
        conn.execute("SELECT jobq.pause('exports')")
        conn.execute("SELECT jobq.configure_queue('webhooks', concurrency => 20)")
    conn.execute("VACUUM ANALYZE jobq._job")
    conn.execute("VACUUM ANALYZE jobq._job_archive")
    dead = conn.execute("SELECT max(id) FROM jobq._job_archive WHERE status = 'dead' AND queue = %s",
                        (QUEUES[0],)).fetchone()
    oldest = conn.execute("SELECT min(id) FROM jobq.jobs WHERE queue = %s", (QUEUES[0],)).fetchone()
    keyed = conn.execute("SELECT max(id) FROM jobq._job_archive WHERE queue = %s AND job_key IS NOT NULL "
                         "AND id < %s", (QUEUES[0], archived // 2)).fetchone()
    assert dead is not None and oldest is not None and keyed is not None
    return {"dead_job": int(dead[0]), "deep_cursor": int(oldest[0]) + 200 * len(QUEUES),
            "keyed_job": int(keyed[0])}


def error_word(conn: Conn) -> str:
    """The exception name of the first queue's dead jobs (an error filter that matches)."""
    row = conn.execute("SELECT split_part(last_error, ':', 1) FROM jobq._job_archive "
                       "WHERE queue = %s AND status = 'dead' ORDER BY id DESC LIMIT 1",
                       (QUEUES[0],)).fetchone()
    assert row is not None
    return str(row[0])


def pages(ids: dict[str, int], error: str) -> dict[str, str]:
    """Each page measured, by name: its path. The error filters: one that
    matches the dead jobs, one that matches nothing (every row read)."""
    queue = f"/queues/{QUEUES[0]}"
    return {
        "overview": "/",
        "queue": queue,
        "queue, deep page": f"{queue}?{urlencode({'before': ids['deep_cursor']})}",
        "queue, state=dead": f"{queue}?state=dead",
        "queue, key": f"{queue}?{urlencode({'key': 'order-' + str(ids['keyed_job'])})}",
        "queue, error text": f"{queue}?{urlencode({'error': error})}",
        "queue, error, none": f"{queue}?{urlencode({'error': 'no such error text'})}",
        "job": f"/jobs/{ids['dead_job']}",
        "schedules": "/schedules",
        "workers": "/workers",
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def dashboard(dsn: str) -> Iterator[int]:
    """``pyqueue dashboard`` on a free loopback port, stopped afterwards; the port."""
    port = free_port()
    argv = [sys.executable, "-m", "pyqueue", "dashboard", "--dsn", dsn, "--port", str(port),
            "--log-level", "warning"]
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + START_TIMEOUT
            while True:
                if process.poll() is not None:
                    log.seek(0)
                    raise SystemExit(f"pyqueue dashboard exited ({process.returncode}): {log.read()}")
                with contextlib.suppress(OSError):
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                if time.monotonic() > deadline:
                    raise SystemExit(f"pyqueue dashboard did not listen on {port} in {START_TIMEOUT:.0f} s")
                time.sleep(0.1)
            yield port
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def measure(port: int, paths: dict[str, str], requests: int) -> dict[str, dict[str, Any]]:
    """Each page requested once to warm up, then ``requests`` times: the
    status, the body size, and p50/p95/max in ms."""
    client = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    results: dict[str, dict[str, Any]] = {}
    try:
        for name, path in paths.items():
            timings: list[float] = []
            status, size = 0, 0
            for i in range(requests + 1):
                started = time.perf_counter()
                client.request("GET", path)
                response = client.getresponse()
                body = response.read()
                elapsed = (time.perf_counter() - started) * 1000
                status, size = response.status, len(body)
                if status != 200:
                    raise SystemExit(f"{path} answered {status}: {body[:500]!r}")
                if i:
                    timings.append(elapsed)
            timings.sort()
            p95 = timings[min(len(timings) - 1, round(0.95 * (len(timings) - 1)))]
            results[name] = {"path": path, "status": status, "bytes": size, "requests": requests,
                             "p50_ms": statistics.median(timings), "p95_ms": p95, "max_ms": timings[-1],
                             "under_goal": p95 < GOAL_MS}
    finally:
        client.close()
    return results


def report(results: dict[str, dict[str, Any]], archived: int, live: int) -> str:
    """The table printed at the end."""
    requests = next(iter(results.values()))["requests"]
    lines = [f"Dashboard pages over {archived:,} archived and {live:,} live jobs "
             f"(ms, {requests} requests each; goal: p95 under {GOAL_MS:.0f} ms)",
             f"{'page':<20} {'p50':>8} {'p95':>8} {'max':>8} {'KiB':>7}  under {GOAL_MS:.0f} ms"]
    for name, r in results.items():
        lines.append(f"{name:<20} {r['p50_ms']:8.1f} {r['p95_ms']:8.1f} {r['max_ms']:8.1f} "
                     f"{r['bytes'] / 1024:7.1f}  {'yes' if r['under_goal'] else 'NO'}")
    return "\n".join(lines)


@contextlib.contextmanager
def database(dsn: str | None) -> Iterator[str]:
    """The given scratch database, or a throwaway server with jobq installed, stopped afterwards."""
    if dsn:
        yield dsn
        return
    directory = temporary_directory("jobq-bench-dash-")
    server = LocalServer(directory, port=LOCAL_PORT, database="jobq",
                         settings={"shared_buffers": "'512MB'", "max_wal_size": "'4GB'"})
    try:
        print(f"starting a throwaway PostgreSQL server in {directory}", file=sys.stderr)
        server.start()
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            schema.install(conn)
        yield server.dsn
    finally:
        try:
            server.stop()
        finally:
            shutil.rmtree(directory, ignore_errors=True)


def count(text: str) -> int:
    value = int(text.replace("_", ""))
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyqueue.bench.dashboard", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", help="a scratch database with jobq installed and no jobs "
                                      "(default: a throwaway local server)")
    parser.add_argument("--archived", type=count, default=1_000_000, help="archived jobs (default 1,000,000)")
    parser.add_argument("--live", type=count, default=100_000, help="live jobs (default 100,000)")
    parser.add_argument("--requests", type=count, default=20, help="requests per page (default 20)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    with database(args.dsn) as dsn:
        started = time.perf_counter()
        with psycopg.connect(dsn, autocommit=True) as conn:
            ids = load(conn, args.archived, args.live)
            error = error_word(conn)
        print(f"loaded {args.archived:,} archived and {args.live:,} live jobs in "
              f"{time.perf_counter() - started:.0f} s", file=sys.stderr)
        with dashboard(dsn) as port:
            results = measure(port, pages(ids, error), args.requests)
    print(report(results, args.archived, args.live))
    if args.json:
        args.json.write_text(json.dumps({"archived": args.archived, "live": args.live, "pages": results},
                                        indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
