"""``pyqueue bench``: how fast jobq is, against the floor of the same server.

One run measures, on one server, as ratios to the floor measured in the same
run (the goals of issue 11, "the fast path"):

1. drain of a pre-filled queue by W worker processes (W = 4 and 16), batch
   n: the floor (``DELETE … WHERE id IN (SELECT … FOR UPDATE SKIP LOCKED
   LIMIT n) RETURNING``), a pgmq-style loop (read with a visibility timeout,
   then delete), jobq through SQL (``claim`` + ``complete_many``),
   ``pyqueue.Worker`` with a no-op handler, and its in-transaction mode when
   this pyqueue has it; and the jobq rows again with many long-leased jobs
   ahead in the queue;
2. producers: ``INSERT … SELECT unnest($1::jsonb[])`` vs ``jobq.enqueue_many``;
3. pickup delay with idle listening worker processes: pyqueue, jobq by
   hand and the floor's LISTEN loop;
4. one connection alone: the floor DELETE loop, ``claim`` +
   ``complete_many``, and ``take`` inside a transaction;
5. scaling: throughput at 1…32 consumers with jobq's claim, the naive
   ``SELECT … FOR UPDATE`` claim, and the naive claim with SKIP LOCKED;
6. soak (``--soak MINUTES``): steady load at 80 % of the best pyqueue
   drain, with throughput, backlog, dead tuples and index size over time;
7. workflows (issue 15): the pyqueue drain at the largest W with every
   job a member of one batch with a callback, against the same drain plain
   (the issue asks for at least 0.8 of it), and the time to enqueue and to
   release a callback over 100,000 members;
8. the server's version and settings, the CPU count and the sizes used,
   and a profile: each statement timed alone, the server time of each jobq
   function, and the plan jobq.claim uses.

Comparisons run back to back, round after round (``--repeat``); the median
round of each counts (``--statistic best``: the fastest), and every round's
figure is in the JSON. Without ``--dsn`` it
starts a throwaway local server with PostgreSQL's durable defaults (fsync
and synchronous_commit on), so commits cost what they cost on a normal
server. With ``--dsn`` it works in the scratch schema ``jobq_bench`` and
queues named ``bench.*`` (jobq installed there; up to about 100 connections
with the default sizes), and removes both at the end.
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

from pyqueue import schema
from pyqueue.bench import chart, drains, profiling, report, sql_loops, throughput, worker_loops, workflows
from pyqueue.bench.config import QUICK, Config
from pyqueue.bench.harness import BenchError, progress, sigterm_unwinds
from pyqueue.bench.throughput import STATISTICS
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
# The goals of issue 11 ("the fast path"): name: (goal number, what, bound
# kind, bound). Every figure is a ratio to a row measured in the same run.
GOALS: dict[str, tuple[int, str, str, float]] = {
    "drain_w4_vs_floor": (1, "pyqueue drain, W=4, vs floor", "min", 0.45),
    "drain_w4_vs_pgmq": (1, "pyqueue drain, W=4, vs pgmq-style", "min", 1.2),
    "drain_w16_vs_floor": (2, "pyqueue drain, W=16, vs floor", "min", 0.45),
    "drain_w16_vs_pgmq": (2, "pyqueue drain, W=16, vs pgmq-style", "min", 1.2),
    # "No drop from 4 to 16": a fall of more than the run-to-run noise (10 %).
    "drain_w16_vs_w4": (2, "pyqueue drain, W=16 vs W=4 (no drop)", "min", 0.9),
    "enqueue_vs_floor": (3, "enqueue_many vs INSERT … unnest", "min", 0.9),
    "pickup_p99_vs_floor": (4, "pickup p99, idle worker processes, vs floor LISTEN p99", "max", 1.5),
    "claim_complete_vs_floor": (5, "one connection: claim + complete_many vs floor", "min", 0.5),
    "take_vs_floor": (5, "one connection: take in a transaction vs floor", "min", 0.85),
}
EXIT_OK = 0
EXIT_FAILED = 1

Conn = sql_loops.Conn


# --- command line ------------------------------------------------------------------

def counts(values: Sequence[int]) -> str:
    return ",".join(map(str, values))


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
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
                        help=f"small sizes, under two minutes: --drain-jobs {QUICK.drain_jobs}, "
                        f"--leased-jobs {QUICK.leased_jobs}, --single-jobs {QUICK.single_jobs}, "
                        f"--jobs {QUICK.jobs}, --repeat {QUICK.repeat}, --scaling {counts(QUICK.scaling)}, "
                        f"--window {QUICK.window:g}, --latency-samples {QUICK.latency_samples}, "
                        f"--latency-workers {QUICK.latency_workers}")
    parser.add_argument("--drain-jobs", type=positive_int, metavar="N",
                        help=f"pre-filled jobs per drain measurement (default {Config.drain_jobs})")
    parser.add_argument("--workers", type=int_list, metavar="W,W",
                        help=f"worker processes of the drain rows (default {counts(Config.drain_workers)})")
    parser.add_argument("--leased-jobs", type=non_negative_int, metavar="N",
                        help="long-leased jobs ahead of the queue in the leased-ahead drain, 0 to skip it "
                        f"(default {Config.leased_jobs})")
    parser.add_argument("--leased-workers", type=positive_int, metavar="W",
                        help=f"worker processes of the leased-ahead drain (default {Config.leased_workers})")
    parser.add_argument("--single-jobs", type=positive_int, metavar="N",
                        help=f"pre-filled jobs per one-connection measurement (default {Config.single_jobs})")
    parser.add_argument("--jobs", type=positive_int, metavar="N",
                        help=f"jobs per enqueue measurement (default {Config.jobs})")
    parser.add_argument("--batch", type=positive_int, metavar="N",
                        help="jobs per INSERT, enqueue_many, DELETE, claim, take and complete_many, and the "
                        f"workers' batch_size (default {Config.batch})")
    parser.add_argument("--connections", type=positive_int, metavar="N",
                        help=f"producers in the enqueue measurement (default {Config.connections})")
    parser.add_argument("--repeat", type=positive_int, metavar="N",
                        help="interleaved rounds of each comparison; the best counts "
                        f"(default {Config.repeat})")
    parser.add_argument("--statistic", choices=STATISTICS,
                        help="what counts of the repeated rounds: the median run or the best "
                        f"(default {Config.statistic})")
    parser.add_argument("--scaling", type=int_list, metavar="N,N",
                        help=f"consumer counts for the scaling runs (default {counts(Config.scaling)})")
    parser.add_argument("--scaling-repeat", type=positive_int, metavar="N",
                        help=f"rounds of the scaling runs (default {Config.scaling_repeat})")
    parser.add_argument("--window", type=positive_float, metavar="SECONDS",
                        help=f"measured seconds per scaling point (default {Config.window:g})")
    parser.add_argument("--worker-concurrency", type=positive_int, metavar="N",
                        help="handler threads per pyqueue worker process "
                        f"(default {Config.worker_concurrency}, pyqueue's default)")
    parser.add_argument("--latency-samples", type=positive_int, metavar="N",
                        help="jobs enqueued one by one for the pickup latency "
                        f"(default {Config.latency_samples})")
    parser.add_argument("--latency-workers", type=positive_int, metavar="N",
                        help=f"idle listening worker processes for the pickup latency "
                        f"(default {Config.latency_workers})")
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
        "drain_jobs": args.drain_jobs, "drain_workers": args.workers, "leased_jobs": args.leased_jobs,
        "leased_workers": args.leased_workers, "single_jobs": args.single_jobs, "jobs": args.jobs,
        "batch": args.batch, "connections": args.connections, "repeat": args.repeat,
        "statistic": args.statistic,
        "scaling": args.scaling, "scaling_repeat": args.scaling_repeat, "window": args.window,
        "latency_samples": args.latency_samples, "latency_workers": args.latency_workers,
        "worker_concurrency": args.worker_concurrency, "soak_minutes": args.soak,
        "soak_sample": args.soak_sample,
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
    print(report.format_results(results))
    report.write_json(results, args.json)
    print(f"\nresults: {args.json}")
    chart_problem = chart.write_chart(results, args.chart)
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
    installed), or a throwaway local server, stopped and deleted afterwards
    — also when the program is stopped by SIGTERM (``sigterm_unwinds``)."""
    with sigterm_unwinds():
        yield from _database(dsn, settings)


def _database(dsn: str | None, settings: dict[str, str]) -> Iterator[tuple[str, str]]:
    if dsn:
        with sql_loops.connect(dsn) as conn:
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
        with sql_loops.connect(server.dsn) as conn:
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
    with sql_loops.connect(dsn) as conn:
        sql_loops.cleanup(conn)  # what an interrupted run may have left
        sql_loops.create_schema(conn)
        meta: dict[str, Any] = {
            "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "mode": mode,
            "local_server_settings": local_settings,
            "server": server_facts(conn),
            "client": {"cpu_count": os.cpu_count(), "python": platform.python_version(),
                       "psycopg": psycopg.__version__, "platform": platform.platform()},
            "config": asdict(config),
            "queues": f"{sql_loops.QUEUE_PREFIX}*",
        }
        results: dict[str, Any] = {"meta": meta}
        try:
            throughput.warm_up(dsn, conn, config)
            results["drain"] = drains.drain_section(dsn, conn, config)
            results["enqueue"] = throughput.enqueue_section(dsn, conn, config)
            results["pickup_latency"] = worker_loops.latency_section(dsn, conn, config)
            results["single_connection"] = drains.single_section(dsn, conn, config)
            results["workflows"] = workflows.workflow_section(dsn, conn, config)
            drained = results["drain"]["workers"]
            drain_rate = max(row["jobq_sql"]["jobs_per_s"] for row in drained.values())
            results["scaling"] = throughput.scaling_section(dsn, conn, config, drain_rate)
            worker_rates = {int(w): float(row["pyqueue"]["jobs_per_s"]) for w, row in drained.items()}
            results["soak"] = worker_loops.soak_section(dsn, conn, config, worker_rates)
            results["profile"] = profiling.profile_section(conn, config.batch)
        finally:
            meta["cleanup_problems"] = sql_loops.cleanup(conn)
        meta["seconds"] = round(time.perf_counter() - started, 1)
    results["targets"] = targets(results)
    return results


def figures(results: dict[str, Any]) -> dict[str, float | None]:
    """This run's value of every goal (None when not measured)."""
    drain = results["drain"]["workers"]

    def drained(workers: int, key: str) -> float | None:
        row = drain.get(str(workers), {}).get("pyqueue", {})
        value = row.get(key)
        return float(value) if value is not None else None

    w4, w16 = drained(4, "jobs_per_s"), drained(16, "jobs_per_s")
    latency = results["pickup_latency"]
    floor_p99 = latency["floor"]["p99_ms"]
    single = results["single_connection"]["rows"]
    return {
        "drain_w4_vs_floor": drained(4, "ratio_to_floor"),
        "drain_w4_vs_pgmq": drained(4, "ratio_to_pgmq"),
        "drain_w16_vs_floor": drained(16, "ratio_to_floor"),
        "drain_w16_vs_pgmq": drained(16, "ratio_to_pgmq"),
        "drain_w16_vs_w4": round(w16 / w4, 3) if w4 and w16 is not None else None,
        "enqueue_vs_floor": results["enqueue"]["jobq"]["ratio_to_floor"],
        "pickup_p99_vs_floor": round(latency["p99_ms"] / floor_p99, 3) if floor_p99 > 0 else None,
        "claim_complete_vs_floor": single["jobq_claim_complete"]["ratio_to_floor"],
        "take_vs_floor": single["jobq_take"]["ratio_to_floor"],
    }


def targets(results: dict[str, Any]) -> dict[str, Any]:
    """Issue 11's goals against this run's numbers: each with its goal
    number, what it compares, its bound, this run's value and whether met."""
    values = figures(results)
    found: dict[str, Any] = {}
    for name, (goal, label, kind, bound) in GOALS.items():
        value = values[name]
        met = value is not None and (value >= bound if kind == "min" else value <= bound)
        found[name] = {"goal": goal, "label": label, "value": value, kind: bound, "met": met}
    return found

