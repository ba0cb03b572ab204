"""``python -m pyqueue.bench.pooler``: a thousand workers through PgBouncer.

On a throwaway durable local server (or ``--dsn``, a database with jobq
installed that this program may fill and empty), with a real PgBouncer
(Debian's ``pgbouncer``) it starts in front of it in transaction pooling
mode with ``--pool-size`` server connections (20):

1. the pooled drain: ``--consumers`` (1,000) asyncio consumers
   (``pyqueue.aio.listen``, each its own client connection) in
   ``--processes`` (4) processes take ``--jobs`` (100,000) pre-filled jobs
   through PgBouncer, claims and acks without prepared statements, polling
   (``use_listen=False``: a direct LISTEN connection each would be a
   thousand server connections again; ``listen_dsn`` is for fewer, bigger
   workers, and tests/test_pooler_fleet.py tests it);
2. the direct drain: the same jobs taken by 16 consumers connected straight
   to the server (prepared statements, LISTEN on the same connection string);
3. idle load: the thousand consumers idle (queue empty) through PgBouncer
   without LISTEN (``use_listen=False``: polling alone, the worst case),
   statements per second reaching the server over a window, with the
   jittered polling backoff (``max_poll_interval``, 30 s) and with a fixed
   5-second interval.

Every job is counted by id: lost (never handled) and duplicated (handled
twice) jobs are reported and must be 0, as must connection errors (every
WARNING the workers log, and every consumer that raised). The drain ratio
pooled / direct is issue 16's goal (at least 0.8). ``make bench`` runs it
after ``pyqueue bench``; ``--quick`` scales everything down.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import shutil
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import psycopg

import pyqueue.aio
from pyqueue.bench import sql_loops
from pyqueue.bench.config import STEP_TIMEOUT
from pyqueue.bench.harness import BenchError, Role, Run, Signals, Task, progress
from pyqueue.bench.pgbouncer import PgBouncer
from pyqueue.bench.report import format_table
from pyqueue.bench.suite import LOCAL_SETTINGS, database
from pyqueue.bench.worker_loops import wait_until_acknowledged
from pyqueue.localserver import temporary_directory

DEFAULT_JSON = Path("bench-results/pooler.json")
QUEUE = f"{sql_loops.QUEUE_PREFIX}pooler"
DIRECT_CONSUMERS = 16  # issue 16: "the same drain with 16 direct connections"
GOAL = 0.8  # pooled drain / direct drain
PROGRESS_POLL = 0.02  # seconds between looks at the drain's progress
STEADY_FROM, STEADY_TO = 0.1, 0.9  # the part of a drain its steady rate is taken from
FIXED_POLL = 5.0  # seconds: the idle comparison without backoff (pyqueue's default poll_interval)


@dataclass(frozen=True)
class Settings:
    consumers: int = 1000
    processes: int = 4
    jobs: int = 100_000
    pool_size: int = 20
    batch: int = 10
    idle_settle: float = 40.0  # seconds idle consumers get before the window (backoff reaches its cap)
    idle_window: float = 20.0  # seconds of idle load measured


QUICK = Settings(consumers=200, processes=2, jobs=20_000, idle_settle=10.0, idle_window=10.0)


# --- the consumer processes ------------------------------------------------------------------

class Warnings(logging.Handler):
    """Counts what the workers log at WARNING or above (lost connections,
    failed claims): each is a connection error for this benchmark."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def consumers(task: Task, signals: Signals) -> None:
    """task.options["consumers"] pyqueue.aio.listen loops on task.dsn (with
    task.options' listen settings) until stopped; then report the ids they
    handled and the errors they saw as one sample."""
    asyncio.run(_consume(task, signals))


async def _consume(task: Task, signals: Signals) -> None:
    warnings = Warnings()
    logging.getLogger("pyqueue.worker").addHandler(warnings)
    handled: list[int] = []
    stop = asyncio.Event()
    options = dict(task.options)
    count = int(options.pop("consumers"))
    report = Path(str(options.pop("report")))

    async def handle(job: pyqueue.aio.AsyncJob) -> None:
        handled.append(job.id)
        signals.add(1)

    signals.ready()
    loops = [asyncio.create_task(pyqueue.aio.listen(
        task.dsn, task.queue, handle, stop=stop, batch_size=task.batch, handle_signals=False,
        reap_interval=None, run_schedules=False, worker_name=f"{task.worker}-{k}", **options))
        for k in range(count)]
    while not signals.stopped:
        await asyncio.sleep(0.05)
    # Report first, to a file of its own (a sample through the harness's
    # queue was lost when a process with hundreds of connections took longer
    # to close them than the harness waits): the jobs were all handled and
    # acknowledged before the stop.
    done = [loop for loop in loops if loop.done()]
    raised = [repr(loop.exception()) for loop in done if not loop.cancelled() and loop.exception()]
    report.write_text(json.dumps({"handled": handled, "errors": warnings.messages + raised}))
    stop.set()
    await asyncio.gather(*loops, return_exceptions=True)


def consumer_role(dsn: str, settings: Settings, consumers_total: int, processes: int,
                  options: dict[str, Any]) -> Role:
    per_process = [consumers_total // processes + (1 if k < consumers_total % processes else 0)
                   for k in range(processes)]
    reports = temporary_directory("jobq-bench-pooler-")
    tasks = [Task(dsn, QUEUE, settings.batch, f"consumer-{k + 1}",
                  options={"consumers": n, "report": str(reports / f"consumer-{k + 1}.json"), **options})
             for k, n in enumerate(per_process) if n]
    return Role(consumers, tasks)


def reports_of(role: Role) -> list[Path]:
    return [Path(str(task.options["report"])) for task in role.tasks]


# --- measuring -------------------------------------------------------------------------------

def statements(conn: sql_loops.Conn) -> int:
    """Transactions the server has committed in this database so far (each
    poll of an idle worker is one)."""
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()").fetchone()
    return int(row[0]) if row else 0


def idle_load(run: Run, conn: sql_loops.Conn, settings: Settings) -> float:
    """Transactions per second reaching the server while the consumers idle."""
    run.sleep(settings.idle_settle)
    before, started = statements(conn), time.perf_counter()
    run.sleep(settings.idle_window)
    time.sleep(1.0)  # backends report their counts at most once a second
    return (statements(conn) - before - 2) / (time.perf_counter() - started - 1.0)  # -2: our own reads


def collect(reports: list[Path]) -> tuple[Counter[int], list[str]]:
    """Every job id the consumer processes handled (with how often) and every
    error they saw, from the report each wrote as it stopped."""
    handled: Counter[int] = Counter()
    errors: list[str] = []
    for path in reports:
        if not path.exists():
            errors.append(f"{path.stem} reported nothing")
            continue
        found = cast("dict[str, Any]", json.loads(path.read_text()))
        handled.update(found["handled"])
        errors += found["errors"]
    return handled, errors


def steady_rate(points: list[tuple[float, int]], jobs: int) -> float:
    """Jobs/s between the moments 10 % and 90 % of the jobs had been handled:
    the drain without its start (a thousand consumers connecting) and its
    tail (the last acknowledgements)."""
    low = next(t for t, n in points if n >= jobs * STEADY_FROM)
    high = next(t for t, n in points if n >= jobs * STEADY_TO)
    return jobs * (STEADY_TO - STEADY_FROM) / (high - low) if high > low else 0.0


def drain(dsn: str, conn: sql_loops.Conn, role: Role, settings: Settings) -> dict[str, Any]:
    """Pre-fill, start ``role``'s consumers, time them through every job
    (handled, then acknowledged), then check every job was handled exactly
    once."""
    row = conn.execute("SELECT coalesce(max(id), 0) FROM jobq._job").fetchone()
    first_id = int(row[0]) if row else 0
    sql_loops.prefill_jobq(conn, QUEUE, settings.jobs)
    ids = {int(r[0]) for r in conn.execute("SELECT id FROM jobq._job WHERE queue = %s AND id > %s",
                                             (QUEUE, first_id)).fetchall()}
    sql_loops.vacuum(conn, "jobq._job")
    progress_points: list[tuple[float, int]] = []
    with Run([role], timeout=STEP_TIMEOUT) as run:
        while (count := run.counted()) < settings.jobs:
            if time.perf_counter() - run.started_at > STEP_TIMEOUT:
                raise BenchError(f"only {count:,} of {settings.jobs:,} jobs handled in {STEP_TIMEOUT:g} s")
            progress_points.append((time.perf_counter() - run.started_at, count))
            run.sleep(PROGRESS_POLL)
        handled_at = time.perf_counter() - run.started_at
        progress_points.append((handled_at, settings.jobs))
        wait_until_acknowledged(conn, QUEUE, run.started_at + STEP_TIMEOUT)
        acknowledged = time.perf_counter() - run.started_at
        run.close()
    handled, errors = collect(reports_of(role))
    shutil.rmtree(reports_of(role)[0].parent, ignore_errors=True)
    duplicated = sum(n - 1 for n in handled.values() if n > 1)
    return {
        "consumers": sum(int(t.options["consumers"]) for t in role.tasks),
        "processes": len(role.tasks),
        "jobs": settings.jobs,
        "seconds": round(acknowledged, 2),
        "jobs_per_s": round(settings.jobs / acknowledged, 1),
        "steady_jobs_per_s": round(steady_rate(progress_points, settings.jobs), 1),
        "handled_seconds": round(handled_at, 2),
        "lost": len(ids - set(handled)),
        "duplicated": duplicated,
        "strangers": len(set(handled) - ids),
        "connection_errors": len(errors),
        "errors_seen": errors[:5],
    }


def idle_only(conn: sql_loops.Conn, role: Role, settings: Settings) -> float:
    """Statements per second ``role``'s consumers send while the queue is empty."""
    try:
        with Run([role], timeout=STEP_TIMEOUT) as run:
            return idle_load(run, conn, settings)
    finally:
        shutil.rmtree(reports_of(role)[0].parent, ignore_errors=True)


@contextmanager
def bouncer(dsn: str, settings: Settings) -> Iterator[PgBouncer]:
    """PgBouncer in front of the benchmark's database."""
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    directory = temporary_directory("jobq-bench-pgbouncer-")
    running = PgBouncer(directory, host=str(info.get("host", "127.0.0.1")),
                        port=int(str(info.get("port", 5432))),
                        dbname=str(info["dbname"]), pool_size=settings.pool_size,
                        max_client_conn=settings.consumers + 100)
    try:
        yield running.start()
    finally:
        running.stop()


def pooler(dsn: str, conn: sql_loops.Conn, settings: Settings) -> dict[str, Any]:
    with bouncer(dsn, settings) as pgb:
        progress(f"pooler: PgBouncer {pgb.port} (transaction mode, {settings.pool_size} server connections)")
        # Polling, not LISTENing: a direct LISTEN connection each would be
        # 1,000 server connections, which is what the pooler is there to avoid.
        pooled_role = consumer_role(pgb.dsn, settings, settings.consumers, settings.processes,
                                    {"use_listen": False})
        progress(f"pooler: {settings.consumers} consumers in {settings.processes} processes draining "
                 f"{settings.jobs:,} jobs through PgBouncer")
        pooled = drain(dsn, conn, pooled_role, settings)
        progress(f"pooler: through PgBouncer {pooled['steady_jobs_per_s']:,.0f} jobs/s (10-90 %)")
        direct_role = consumer_role(dsn, settings, DIRECT_CONSUMERS,
                                    min(settings.processes, DIRECT_CONSUMERS), {})
        direct = drain(dsn, conn, direct_role, settings)
        progress(f"pooler: {DIRECT_CONSUMERS} direct connections {direct['steady_jobs_per_s']:,.0f} jobs/s "
                 "(10-90 %)")
        polling = {"use_listen": False}
        progress(f"pooler: idle load of {settings.consumers} polling consumers through PgBouncer")
        backoff = idle_only(conn, consumer_role(pgb.dsn, settings, settings.consumers,
                                                     settings.processes, polling), settings)
        fixed = idle_only(conn, consumer_role(
            pgb.dsn, settings, settings.consumers, settings.processes,
            {**polling, "poll_interval": FIXED_POLL, "max_poll_interval": FIXED_POLL}),
            replace(settings, idle_settle=min(settings.idle_settle, 2 * FIXED_POLL)))
        pools = pgb.show("POOLS")
    ratio = pooled["steady_jobs_per_s"] / direct["steady_jobs_per_s"] if direct["steady_jobs_per_s"] else 0.0
    whole = pooled["jobs_per_s"] / direct["jobs_per_s"] if direct["jobs_per_s"] else 0.0
    checks = {
        "ratio": round(ratio, 3),
        "whole_drain_ratio": round(whole, 3),
        "ratio_ok": ratio >= GOAL,
        "exactly_once": pooled["lost"] == pooled["duplicated"] == direct["lost"] == direct["duplicated"] == 0,
        "no_connection_errors": pooled["connection_errors"] == direct["connection_errors"] == 0,
    }
    return {
        "settings": settings.__dict__,
        "pooled": pooled,
        "direct": direct,
        "idle_statements_per_s": {"backoff": round(backoff, 1), "fixed_5s": round(fixed, 1),
                                  "consumers": settings.consumers},
        "pgbouncer_pools": [{k: v for k, v in p.items() if k in ("database", "cl_active", "cl_waiting",
                                                                  "sv_active", "sv_idle", "maxwait")}
                            for p in pools if p.get("database") != "pgbouncer"],
        "checks": {**checks, "ok": all(v for k, v in checks.items() if not k.endswith("ratio"))},
    }


def summary(result: dict[str, Any]) -> str:
    rows = []
    for name, label in (("pooled", "through PgBouncer"), ("direct", "direct")):
        found = result[name]
        rows.append([label, str(found["consumers"]), str(found["processes"]),
                     f"{found['steady_jobs_per_s']:,.0f}", f"{found['jobs_per_s']:,.0f}", str(found["lost"]),
                     str(found["duplicated"]), str(found["connection_errors"])])
    idle = result["idle_statements_per_s"]
    checks = result["checks"]
    return "\n".join([
        format_table(["drain", "consumers", "processes", "jobs/s (10-90 %)", "jobs/s (whole)", "lost",
                      "duplicated", "connection errors"], rows),
        f"pooled / direct, 10-90 % of the drain: {checks['ratio']:.2f} (goal >= {GOAL}): "
        f"{'ok' if checks['ratio_ok'] else 'FAILED'}; the whole drain, with a thousand connections "
        f"opening: {checks['whole_drain_ratio']:.2f}",
        f"idle load, {idle['consumers']} polling consumers through PgBouncer: {idle['backoff']:,.1f} "
        f"statements/s with the polling backoff (30 s cap), {idle['fixed_5s']:,.1f} with a fixed 5 s "
        "interval",
        f"exactly once: {'ok' if checks['exactly_once'] else 'FAILED'}; no connection errors: "
        f"{'ok' if checks['no_connection_errors'] else 'FAILED'}",
    ])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyqueue.bench.pooler",
                                     description="A thousand workers through PgBouncer (issue 16).")
    parser.add_argument("--dsn", help="a database with jobq installed (default: a throwaway local server)")
    parser.add_argument("--quick", action="store_true", help="200 consumers, 20,000 jobs, short idle windows")
    parser.add_argument("--consumers", type=int, help="consumers through PgBouncer (1000)")
    parser.add_argument("--processes", type=int, help="processes they run in (4)")
    parser.add_argument("--jobs", type=int, help="jobs per drain (100000)")
    parser.add_argument("--batch", type=int, help="jobs per claim, both drains (100)")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"results file ({DEFAULT_JSON})")
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else Settings()
    overrides = {k: v for k, v in (("consumers", args.consumers), ("processes", args.processes),
                                   ("jobs", args.jobs), ("batch", args.batch)) if v is not None}
    if any(v < 1 for v in overrides.values()):
        parser.error("--consumers, --processes, --jobs and --batch must be at least 1")
    settings = replace(settings, **overrides)
    try:
        with database(args.dsn, LOCAL_SETTINGS) as (dsn, _mode), sql_loops.connect(dsn) as conn:
            sql_loops.cleanup(conn)
            try:
                result = pooler(dsn, conn, settings)
            finally:
                sql_loops.cleanup(conn)
    except (BenchError, RuntimeError) as error:
        print(f"pooler benchmark failed: {error}", file=sys.stderr)
        return 1
    print(summary(result))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"results: {args.json}")
    return 0 if result["checks"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
