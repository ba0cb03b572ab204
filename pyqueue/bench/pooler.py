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
   the two drains run back to back for ``--rounds`` (3) rounds, and the
   round with the median ratio counts (a shared machine's slow spells hit
   both drains of a round);
3. idle load: the thousand consumers idle (queue empty) through PgBouncer
   without LISTEN (``use_listen=False``: polling alone, the worst case),
   statements per second reaching the server over a window, with the
   jittered polling backoff (``max_poll_interval``, 30 s) and with a fixed
   5-second interval.

Every job is counted by id: lost (never handled) and duplicated (handled
twice) jobs are reported and must be 0, as must connection errors (every
WARNING the workers log, and every consumer that raised). Once a second
during each drain the leases are counted: those in the claim index (leased
in place, which every claim steps over) and those parked out of it (jobq
0.8 parks the leases of a claim behind older ones). The drain ratio
pooled / direct is issue 16's goal (at least 0.8). ``make bench`` runs it
after ``pyqueue bench``; ``--quick`` scales everything down.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import median_low
from typing import Any

import psycopg

from pyqueue.bench import pooled_consumers, sql_loops
from pyqueue.bench.config import STEP_TIMEOUT
from pyqueue.bench.harness import BenchError, Role, Run, progress
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
LEASE_SAMPLE = 1.0  # seconds between counts of the leases in and out of the claim index
LEASES = ("SELECT count(*) FILTER (WHERE NOT parked), count(*) FILTER (WHERE parked) "
          "FROM jobq._job WHERE queue = %s AND status = 'running'")
STEADY_FROM, STEADY_TO = 0.1, 0.9  # the part of a drain its steady rate is taken from
FIXED_POLL = 5.0  # seconds: the idle comparison without backoff (pyqueue's default poll_interval)


@dataclass(frozen=True)
class Settings:
    consumers: int = 1000
    processes: int = 4
    jobs: int = 100_000
    pool_size: int = 20
    batch: int = 10
    rounds: int = 3  # of the pooled and the direct drain, back to back; the median ratio counts
    idle_settle: float = 40.0  # seconds idle consumers get before the window (backoff reaches its cap)
    idle_window: float = 20.0  # seconds of idle load measured


QUICK = Settings(consumers=200, processes=2, jobs=20_000, rounds=1, idle_settle=10.0, idle_window=10.0)


def consumer_role(dsn: str, settings: Settings, consumers_total: int, processes: int,
                  options: dict[str, Any]) -> Role:
    """``consumers_total`` asyncio consumers of the benchmark's queue in
    ``processes`` processes (``pyqueue.bench.pooled_consumers``)."""
    return pooled_consumers.role(dsn, QUEUE, settings.batch, consumers_total=consumers_total,
                                 processes=processes, options=options)


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
    leases: list[tuple[int, int]] = []  # (in the claim index, parked), once a second
    with Run([role], timeout=STEP_TIMEOUT) as run:
        while (count := run.counted()) < settings.jobs:
            now = time.perf_counter() - run.started_at
            if now > STEP_TIMEOUT:
                raise BenchError(f"only {count:,} of {settings.jobs:,} jobs handled in {STEP_TIMEOUT:g} s")
            progress_points.append((now, count))
            if now >= LEASE_SAMPLE * len(leases):
                row = conn.execute(LEASES, (QUEUE,)).fetchone()
                leases.append((int(row[0]), int(row[1])) if row else (0, 0))
            run.sleep(PROGRESS_POLL)
        handled_at = time.perf_counter() - run.started_at
        progress_points.append((handled_at, settings.jobs))
        wait_until_acknowledged(conn, QUEUE, run.started_at + STEP_TIMEOUT)
        acknowledged = time.perf_counter() - run.started_at
        run.close()
    handled, errors = pooled_consumers.collect(pooled_consumers.reports_of(role))
    shutil.rmtree(pooled_consumers.reports_of(role)[0].parent, ignore_errors=True)
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
        "leases_in_claim_index": spread([n for n, _ in leases]),
        "leases_parked": spread([n for _, n in leases]),
    }


def spread(counts: list[int]) -> dict[str, int]:
    """The median and the largest of a drain's per-second lease counts."""
    return {"median": median_low(counts), "max": max(counts)} if counts else {"median": 0, "max": 0}


def lease_counts(found: dict[str, Any]) -> str:
    """One drain's lease counts for the summary."""
    inside, parked = found["leases_in_claim_index"], found["leases_parked"]
    return (f"{inside['median']:,} / {inside['max']:,} in the claim index, "
            f"{parked['median']:,} / {parked['max']:,} parked")


def idle_only(conn: sql_loops.Conn, role: Role, settings: Settings) -> float:
    """Statements per second ``role``'s consumers send while the queue is empty."""
    try:
        with Run([role], timeout=STEP_TIMEOUT) as run:
            return idle_load(run, conn, settings)
    finally:
        shutil.rmtree(pooled_consumers.reports_of(role)[0].parent, ignore_errors=True)


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


def drain_rounds(dsn: str, pooled_dsn: str, conn: sql_loops.Conn, settings: Settings) -> list[dict[str, Any]]:
    """``settings.rounds`` rounds of the pooled drain, then the direct one."""
    rounds = []
    for k in range(settings.rounds):
        progress(f"pooler: round {k + 1} of {settings.rounds}: {settings.consumers} consumers in "
                 f"{settings.processes} processes draining {settings.jobs:,} jobs through PgBouncer")
        # Polling, not LISTENing: a direct LISTEN connection each would be
        # 1,000 server connections, which is what the pooler is there to avoid.
        pooled = drain(dsn, conn, consumer_role(pooled_dsn, settings, settings.consumers, settings.processes,
                                                {"use_listen": False}), settings)
        direct = drain(dsn, conn, consumer_role(dsn, settings, DIRECT_CONSUMERS,
                                                min(settings.processes, DIRECT_CONSUMERS), {}), settings)
        rate = direct["steady_jobs_per_s"]
        rounds.append({"pooled": pooled, "direct": direct,
                       "ratio": round(pooled["steady_jobs_per_s"] / rate, 3) if rate else 0.0})
        progress(f"pooler: through PgBouncer {pooled['steady_jobs_per_s']:,.0f} jobs/s, {DIRECT_CONSUMERS} "
                 f"direct connections {rate:,.0f} jobs/s (10-90 %): {rounds[-1]['ratio']:.2f}")
    return rounds


def median_round(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The round whose pooled / direct ratio is the median (the lower of the
    two middle ones of an even count). Pooled and direct run back to back in
    each round, so a slower spell of a shared machine hits both."""
    return sorted(rounds, key=lambda r: float(r["ratio"]))[(len(rounds) - 1) // 2]


def pooler(dsn: str, conn: sql_loops.Conn, settings: Settings) -> dict[str, Any]:
    with bouncer(dsn, settings) as pgb:
        progress(f"pooler: PgBouncer {pgb.port} (transaction mode, {settings.pool_size} server connections)")
        rounds = drain_rounds(dsn, pgb.dsn, conn, settings)
        polling = {"use_listen": False}
        progress(f"pooler: idle load of {settings.consumers} polling consumers through PgBouncer")
        backoff = idle_only(conn, consumer_role(pgb.dsn, settings, settings.consumers,
                                                     settings.processes, polling), settings)
        fixed = idle_only(conn, consumer_role(
            pgb.dsn, settings, settings.consumers, settings.processes,
            {**polling, "poll_interval": FIXED_POLL, "max_poll_interval": FIXED_POLL}),
            replace(settings, idle_settle=min(settings.idle_settle, 2 * FIXED_POLL)))
        pools = pgb.show("POOLS")
    middle = median_round(rounds)
    pooled, direct = middle["pooled"], middle["direct"]
    whole = pooled["jobs_per_s"] / direct["jobs_per_s"] if direct["jobs_per_s"] else 0.0
    every = [r[name] for r in rounds for name in ("pooled", "direct")]
    checks = {
        "ratio": middle["ratio"],
        "whole_drain_ratio": round(whole, 3),
        "ratio_ok": middle["ratio"] >= GOAL,
        "exactly_once": all(d["lost"] == d["duplicated"] == 0 for d in every),
        "no_connection_errors": all(d["connection_errors"] == 0 for d in every),
    }
    return {
        "settings": settings.__dict__,
        "pooled": pooled,
        "direct": direct,
        "rounds": [{"pooled_jobs_per_s": r["pooled"]["steady_jobs_per_s"],
                    "direct_jobs_per_s": r["direct"]["steady_jobs_per_s"], "ratio": r["ratio"]}
                   for r in rounds],
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
        "pooled / direct, 10-90 % of the drain, round by round: "
        + ", ".join(f"{r['ratio']:.2f}" for r in result["rounds"]) + "; the median round's (above): "
        f"{checks['ratio']:.2f} (goal >= {GOAL}): "
        f"{'ok' if checks['ratio_ok'] else 'FAILED'}; the whole drain, with a thousand connections "
        f"opening: {checks['whole_drain_ratio']:.2f}",
        f"idle load, {idle['consumers']} polling consumers through PgBouncer: {idle['backoff']:,.1f} "
        f"statements/s with the polling backoff (30 s cap), {idle['fixed_5s']:,.1f} with a fixed 5 s "
        "interval",
        "leases during the drains (median / max of the per-second counts): "
        f"through PgBouncer {lease_counts(result['pooled'])}; direct {lease_counts(result['direct'])}",
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
    parser.add_argument("--batch", type=int, help="jobs per claim, both drains (10)")
    parser.add_argument("--rounds", type=int, help="rounds of the two drains, the median counts (3)")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"results file ({DEFAULT_JSON})")
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else Settings()
    overrides = {k: v for k, v in (("consumers", args.consumers), ("processes", args.processes),
                                   ("jobs", args.jobs), ("batch", args.batch), ("rounds", args.rounds))
                 if v is not None}
    if any(v < 1 for v in overrides.values()):
        parser.error("--consumers, --processes, --jobs, --batch and --rounds must be at least 1")
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
