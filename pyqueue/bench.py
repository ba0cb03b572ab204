"""``pyqueue bench``: how fast jobq is, against the floor of the same server.

One run measures, on one server:

1. floor: plain SQL, no jobq: batched INSERT into a minimal queue table, a
   batched ``DELETE … WHERE id IN (SELECT … FOR UPDATE SKIP LOCKED LIMIT n)``
   drain, and both at once (one producer, W consumers);
2. jobq through SQL alone: ``jobq.enqueue_many``, ``jobq.claim(n)`` +
   ``jobq.complete_many`` from several connections, as ratios to the floor;
3. pyqueue end to end: one producer and W ``pyqueue.Worker`` processes
   with a no-op handler, as a ratio to the floor of the same shape;
4. pickup latency: idle listening workers, single jobs enqueued at
   intervals, enqueue → handler start (and the same for the floor queue);
5. scaling: throughput at 1…32 consumers with jobq's claim, the naive
   ``SELECT … FOR UPDATE`` (no SKIP LOCKED) claim, and the naive claim with
   SKIP LOCKED added, side by side;
6. soak (``--soak MINUTES``): steady load at 80 % of the best end-to-end
   run, with throughput, backlog, dead tuples and claim index size over time;
7. the server's version and settings, the CPU count and the sizes used,
   and a profile: each statement timed alone, the server time of each jobq
   function, and the plan jobq.claim uses.

Comparisons run back to back and repeat (``--repeat``); the best of each
counts. Without ``--dsn`` it starts a throwaway local server with
PostgreSQL's durable defaults (fsync and synchronous_commit on), so commits
cost what they cost on a normal server. With ``--dsn`` it works in the
scratch schema ``jobq_bench`` and queues named ``bench.*`` (jobq installed
there; up to about 70 connections with the default sizes), and removes
both at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psycopg

from pyqueue import bench_profile, bench_pyqueue, bench_report, bench_sql, bench_throughput, schema
from pyqueue.bench_config import QUICK, Config
from pyqueue.bench_harness import BenchError, progress
from pyqueue.localserver import LocalServer, temporary_directory

DEFAULT_JSON = Path("bench-results/bench.json")
DEFAULT_CHART = Path("bench-results/bench.png")
LOCAL_DATABASE = "jobq_bench"
LOCAL_PORT = 54329  # the socket lives in the server's private directory
LOCAL_SETTINGS = {
    # A normal server's durability: LocalServer turns fsync off for throwaway
    # data, but commits that skip the WAL flush would flatter every number.
    "fsync": "on",
    "synchronous_commit": "on",
    "full_page_writes": "on",
    # Calls and server time per jobq function, for the profile.
    "track_functions": "all",
}
SETTINGS_REPORTED = ("server_version", "synchronous_commit", "fsync", "full_page_writes", "shared_buffers",
                     "wal_level", "max_wal_size", "max_connections", "work_mem", "autovacuum",
                     "track_functions")
TARGETS = {  # from issue 6
    "e2e_ratio_to_floor_min": 0.5,
    "pickup_p99_ms_max": 5.0,
    "throughput_32_vs_4_min": 1.0,
}
EXIT_OK = 0
EXIT_FAILED = 1

Conn = bench_sql.Conn


# --- command line ------------------------------------------------------------------

def counts(values: Sequence[int]) -> str:
    return ",".join(map(str, values))


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from exc
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated counts of at least 1, got {text!r}")
    return tuple(sorted(set(values)))


def setting(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name.strip(), value.strip()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``pyqueue bench`` (and ``python -m pyqueue.bench``)."""
    with contextlib.suppress(argparse.ArgumentError):  # the pyqueue CLI may have given --dsn already
        parser.add_argument("--dsn", metavar="DSN",
                            help="benchmark this database (jobq installed) instead of a throwaway local "
                            "server; works in schema jobq_bench and queues bench.*, removed afterwards")
    parser.add_argument("--quick", action="store_true",
                        help=f"small sizes, under a minute: --jobs {QUICK.jobs}, "
                        f"--workers {counts(QUICK.workers)}, --repeat {QUICK.repeat}, "
                        f"--scaling {counts(QUICK.scaling)}, --window {QUICK.window:g}, "
                        f"--latency-samples {QUICK.latency_samples}")
    parser.add_argument("--jobs", type=positive_int, metavar="N",
                        help=f"jobs per throughput measurement (default {Config.jobs})")
    parser.add_argument("--batch", type=positive_int, metavar="N",
                        help="jobs per INSERT, enqueue_many, DELETE, claim and complete_many, and the "
                        f"workers' batch_size (default {Config.batch})")
    parser.add_argument("--connections", type=positive_int, metavar="N",
                        help=f"connections for the one-phase SQL measurements (default {Config.connections})")
    parser.add_argument("--workers", type=int_list, metavar="W,W",
                        help=f"consumers in the end-to-end runs (default {counts(Config.workers)})")
    parser.add_argument("--repeat", type=positive_int, metavar="N",
                        help=f"runs of each throughput comparison; the best counts (default {Config.repeat})")
    parser.add_argument("--scaling", type=int_list, metavar="N,N",
                        help=f"consumer counts for the scaling runs (default {counts(Config.scaling)})")
    parser.add_argument("--window", type=positive_float, metavar="SECONDS",
                        help=f"measured seconds per scaling point (default {Config.window:g})")
    parser.add_argument("--worker-concurrency", type=positive_int, metavar="N",
                        help="handler threads per pyqueue worker process "
                        f"(default {Config.worker_concurrency}, pyqueue's default)")
    parser.add_argument("--latency-samples", type=positive_int, metavar="N",
                        help="jobs enqueued one by one for the pickup latency "
                        f"(default {Config.latency_samples})")
    parser.add_argument("--soak", type=positive_float, metavar="MINUTES",
                        help="also run a soak: steady load at 80%% of the best end-to-end throughput")
    parser.add_argument("--soak-sample", type=positive_float, metavar="SECONDS",
                        help=f"seconds per soak sample (default {Config.soak_sample:g}: per minute)")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, metavar="PATH",
                        help=f"where to write the results as JSON (default {DEFAULT_JSON})")
    parser.add_argument("--chart", type=Path, default=DEFAULT_CHART, metavar="PATH",
                        help=f"where to draw throughput against consumers, PNG, needs matplotlib "
                        f"(default {DEFAULT_CHART})")
    parser.add_argument("--server-setting", type=setting, action="append", default=[], metavar="NAME=VALUE",
                        help="a setting for the local server (repeatable), e.g. synchronous_commit=off; "
                        f"defaults: {', '.join(f'{k}={v}' for k, v in LOCAL_SETTINGS.items())}")


def config_from(args: argparse.Namespace) -> Config:
    """The run's sizes: --quick or the full defaults, then explicit options."""
    base = QUICK if args.quick else Config()
    overrides: dict[str, Any] = {
        "jobs": args.jobs, "batch": args.batch, "connections": args.connections, "workers": args.workers,
        "repeat": args.repeat, "scaling": args.scaling, "window": args.window,
        "latency_samples": args.latency_samples, "worker_concurrency": args.worker_concurrency,
        "soak_minutes": args.soak, "soak_sample": args.soak_sample,
    }
    return replace(base, **{k: v for k, v in overrides.items() if v is not None})


def run(args: argparse.Namespace) -> int:
    """Run the benchmark; print the table, write the JSON and the chart. Exit code."""
    config = config_from(args)
    settings = dict(LOCAL_SETTINGS, **dict(args.server_setting))
    dsn = getattr(args, "dsn", None)
    try:
        with database(dsn, settings) as (target_dsn, mode):
            results = run_benchmark(target_dsn, config, mode=mode, local_settings=None if dsn else settings)
    except (BenchError, psycopg.Error) as exc:
        print(f"error: {str(exc).strip()}", file=sys.stderr)
        return EXIT_FAILED
    print(bench_report.format_results(results))
    bench_report.write_json(results, args.json)
    print(f"\nresults: {args.json}")
    chart_problem = bench_report.write_chart(results, args.chart)
    print(f"chart skipped: {chart_problem}" if chart_problem else f"chart:   {args.chart}")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pyqueue bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return run(parser.parse_args(argv))


# --- the database under test ------------------------------------------------------------

@contextlib.contextmanager
def database(dsn: str | None, settings: dict[str, str]) -> Iterator[tuple[str, str]]:
    """The DSN to benchmark and the mode: the given database (jobq must be
    installed), or a throwaway local server, stopped and deleted afterwards."""
    if dsn:
        with bench_sql.connect(dsn) as conn:
            if conn.execute("SELECT to_regproc('jobq.version')").fetchone() == (None,):
                raise BenchError("jobq is not installed in that database; "
                                 "run `pyqueue install --dsn …` first")
        yield dsn, "dsn"
        return
    directory = temporary_directory("jobq-bench-")
    server = LocalServer(directory, port=LOCAL_PORT, database=LOCAL_DATABASE, settings=settings)
    try:
        progress(f"starting a throwaway PostgreSQL server in {directory}")
        server.start()
        with bench_sql.connect(server.dsn) as conn:
            schema.install(conn)
        yield server.dsn, "local"
    finally:
        try:
            server.stop()
        finally:
            shutil.rmtree(directory, ignore_errors=True)


def server_facts(conn: Conn) -> dict[str, Any]:
    """The server's version and the settings that matter to these numbers."""
    facts: dict[str, Any] = {}
    for name in SETTINGS_REPORTED:
        row = conn.execute("SELECT current_setting(%s, true)", (name,)).fetchone()
        facts[name] = row[0] if row else None
    row = conn.execute("SELECT jobq.version()").fetchone()
    facts["jobq_version"] = row[0] if row else None
    return facts


# --- the run ---------------------------------------------------------------------

def run_benchmark(dsn: str, config: Config, *, mode: str, local_settings: dict[str, str] | None,
                  ) -> dict[str, Any]:
    """Every section, in order; the results as one JSON-ready dict."""
    started = time.perf_counter()
    with bench_sql.connect(dsn) as conn:
        bench_sql.cleanup(conn)  # what an interrupted run may have left
        bench_sql.create_schema(conn)
        meta: dict[str, Any] = {
            "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "mode": mode,
            "local_server_settings": local_settings,
            "server": server_facts(conn),
            "client": {"cpu_count": os.cpu_count(), "python": platform.python_version(),
                       "psycopg": psycopg.__version__, "platform": platform.platform()},
            "config": asdict(config),
            "queues": f"{bench_sql.QUEUE_PREFIX}*",
        }
        results: dict[str, Any] = {"meta": meta}
        try:
            bench_throughput.warm_up(dsn, conn, config)
            results.update(bench_throughput.throughput_sections(dsn, conn, config))
            results["pickup_latency"] = bench_pyqueue.latency_section(dsn, conn, config)
            drain_rate = results["jobq_sql"]["claim_complete"]["jobs_per_s"]
            results["scaling"] = bench_throughput.scaling_section(dsn, conn, config, drain_rate)
            results["soak"] = bench_pyqueue.soak_section(dsn, conn, config, results["pyqueue_e2e"]["runs"])
            results["profile"] = bench_profile.profile_section(conn, config.batch)
        finally:
            meta["cleanup_problems"] = bench_sql.cleanup(conn)
        meta["seconds"] = round(time.perf_counter() - started, 1)
    results["targets"] = targets(results)
    return results


def targets(results: dict[str, Any]) -> dict[str, Any]:
    """The issue's targets against this run's numbers."""
    ratios = [e["ratio_to_floor"] for e in results["pyqueue_e2e"]["runs"].values() if e["ratio_to_floor"]]
    e2e = max(ratios) if ratios else None
    p99 = results["pickup_latency"]["p99_ms"]
    points = {p["workers"]: p["jobq_jobs_per_s"] for p in results["scaling"]["points"]}
    scale = round(points[32] / points[4], 3) if 32 in points and 4 in points and points[4] > 0 else None
    return {
        "e2e_ratio_to_floor": {"value": e2e, "min": TARGETS["e2e_ratio_to_floor_min"],
                               "met": e2e is not None and e2e >= TARGETS["e2e_ratio_to_floor_min"]},
        "pickup_p99_ms": {"value": p99, "max": TARGETS["pickup_p99_ms_max"],
                          "met": p99 < TARGETS["pickup_p99_ms_max"]},
        "throughput_32_vs_4": {"value": scale, "min": TARGETS["throughput_32_vs_4_min"],
                               "met": scale is not None and scale >= TARGETS["throughput_32_vs_4_min"]},
    }


if __name__ == "__main__":
    sys.exit(main())
