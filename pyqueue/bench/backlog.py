"""``python -m pyqueue.bench.backlog``: what must not cost more with a
backlog (issue 24, items 1 and 5).

On a throwaway durable local server, two databases: jobq 0.8.0 (the frozen
``sql/jobq--0.8.0.sql``) and the current jobq. Each gets the same backlog,
``--jobs`` ready jobs (1,000,000; 100,000 with ``--quick``) put in through
jobq's own ``enqueue_many`` in batches of 100,000, beside three small queues
with running jobs, then VACUUM ANALYZE (statistics present). In interleaved
rounds, one call each per round, the median of ``--rounds`` calls of:

- ``jobq.reap()`` with nothing expired (goal: at most 5 ms);
- ``SELECT * FROM`` the views ``jobq.queues``, ``jobq.stats``,
  ``jobq.workers`` and ``jobq.metrics()`` (goal: at most 50 ms each);
- the dashboard's overview page through the real app (``pyqueue
  dashboard`` as a process of its own; goal: at most 50 ms).

And the plans that do not depend on statistics: a claim of 100 (rolled back,
so the backlog stays the same) in a database whose ``jobq._job`` holds
100,000 ready jobs and was never analyzed, against one analyzed after the
same fill, claims interleaved (goal: never analyzed at most 2 times
analyzed).

The goals apply to the current jobq; jobq 0.8.0 is the "before" of the same
run. The program exits 1 when a goal is missed. ``make bench`` runs it.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg

from pyqueue import _sqlfiles
from pyqueue.bench.dashboard import dashboard
from pyqueue.bench.harness import BenchError, progress
from pyqueue.bench.report import format_table
from pyqueue.bench.suite import LOCAL_SETTINGS, database

Conn = psycopg.Connection[tuple[Any, ...]]

DEFAULT_JSON = Path("bench-results/backlog.json")
OLD_VERSION = "0.8.0"  # the "before": its reap and views read the whole backlog
JOBS = 1_000_000
QUICK_JOBS = 100_000
ROUNDS = 15
QUICK_ROUNDS = 7
COLD_JOBS = 100_000  # ready jobs behind the cold claim
COLD_CLAIMS = 20  # claims of CLAIM_N per measurement (medians)
CLAIM_N = 100
ENQUEUE_BATCH = 100_000  # enqueue_many's largest batch
QUEUE = "bench.backlog"
SMALL_QUEUES = ("bench.mail", "bench.sms", "bench.push")  # 100 jobs each, 40 of them running
COLD_RATIO_GOAL = 2.0  # a claim on a never-analyzed table, at most this times one after ANALYZE
GOALS_MS = {  # at most, median of the rounds, with the backlog in place
    "reap, nothing expired": 5.0,
    "jobq.queues": 50.0,
    "jobq.stats": 50.0,
    "jobq.metrics()": 50.0,
    "jobq.workers": 50.0,
    "dashboard overview page": 50.0,
}
STATEMENTS = {
    "reap, nothing expired": "SELECT jobq.reap()",
    "jobq.queues": "SELECT * FROM jobq.queues",
    "jobq.stats": "SELECT * FROM jobq.stats",
    "jobq.metrics()": "SELECT * FROM jobq.metrics()",
    "jobq.workers": "SELECT * FROM jobq.workers",
}
FILL = "SELECT count(*) FROM jobq.enqueue_many(%s, ARRAY(SELECT jsonb_build_object('n', g, 'to', " \
       "'user' || g || '@example.com') FROM generate_series(1, %s) AS g))"
CLAIM = f"SELECT id, lease_token FROM jobq.claim(%s, {CLAIM_N}, 'bench')"


def fill(conn: Conn, queue: str, jobs: int) -> None:
    """``jobs`` ready jobs in ``queue``, through jobq's own insert path."""
    left = jobs
    while left > 0:
        batch = min(left, ENQUEUE_BATCH)
        conn.execute(FILL, (queue, batch))
        left -= batch


def prepared(admin: Conn, dsn: str, name: str, script: str) -> str:
    """A new database ``name`` with ``script`` installed; its DSN."""
    admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.execute(f'CREATE DATABASE "{name}"')
    target = psycopg.conninfo.make_conninfo(dsn, dbname=name)
    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute(script)
        conn.execute("RESET search_path")
    return target


def load_backlog(conn: Conn, jobs: int) -> None:
    """The backlog, the small queues (some of their jobs running, as
    workers would hold them), and the statistics."""
    conn.execute("SET synchronous_commit = off")
    fill(conn, QUEUE, jobs)
    for k, queue in enumerate(SMALL_QUEUES):
        fill(conn, queue, 100)
        conn.execute("SELECT count(*) FROM jobq.claim(%s, 40, %s)", (queue, f"worker-{k}@bench"))
    conn.execute("VACUUM ANALYZE jobq._job")


def median_ms(samples: Sequence[float]) -> float:
    return round(statistics.median(samples), 2)


def sql_ms(conn: Conn, statement: str) -> float:
    """The ms of one statement and the fetch of its rows."""
    started = time.perf_counter()
    conn.execute(statement).fetchall()
    return (time.perf_counter() - started) * 1000


def timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1000


def page_getter(port: int) -> Callable[[], None]:
    """A call that GETs the dashboard's ``/`` on a connection of its own (the
    app closes a keep-alive connection idle for 5 s, and the other version's
    round can take longer)."""

    def get() -> None:
        client = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            client.request("GET", "/")
            response = client.getresponse()
            body = response.read()
        finally:
            client.close()
        if response.status != 200:
            raise BenchError(f"the dashboard's overview answered {response.status}: {body[:300]!r}")

    return get


@contextlib.contextmanager
def overview_page(dsn: str) -> Iterator[Callable[[], None]]:
    """``pyqueue dashboard`` on ``dsn``: a call that GETs its overview page."""
    with dashboard(dsn) as port:
        yield page_getter(port)


def costs(targets: dict[str, str], rounds: int) -> dict[str, dict[str, float]]:
    """Per version: the median ms of every measured call, in interleaved
    rounds (one call of each, version after version, per round)."""
    samples: dict[str, dict[str, list[float]]] = {v: {name: [] for name in GOALS_MS} for v in targets}
    with contextlib.ExitStack() as stack:
        conns = {v: stack.enter_context(psycopg.connect(dsn, autocommit=True)) for v, dsn in targets.items()}
        pages = {v: stack.enter_context(overview_page(dsn)) for v, dsn in targets.items()}
        for version in targets:  # warm up: plans cached, the app's pool open, pages in memory
            for statement in STATEMENTS.values():
                conns[version].execute(statement).fetchall()
            pages[version]()
        for r in range(rounds):
            for version in targets:
                conn = conns[version]
                for name, statement in STATEMENTS.items():
                    samples[version][name].append(sql_ms(conn, statement))
                samples[version]["dashboard overview page"].append(timed(pages[version]))
            progress(f"backlog costs: round {r + 1} of {rounds}")
    return {v: {name: median_ms(s) for name, s in by_name.items()} for v, by_name in samples.items()}


def claim_ms(conn: Conn, queue: str) -> float:
    """The ms of one claim of CLAIM_N, in a transaction rolled back (the
    backlog stays as it is, and no commit is timed)."""
    with conn.transaction(force_rollback=True):
        started = time.perf_counter()
        conn.execute(CLAIM, (queue,)).fetchall()
        return (time.perf_counter() - started) * 1000


COLD_REGIMES = ("never_analyzed", "analyzed")
COLD_WARMUP = 3  # claims per database before the measured ones (plans made, pages read)


def cold_claims(admin: Conn, dsn: str, scripts: dict[str, str], jobs: int) -> dict[str, dict[str, float]]:
    """Per version: a claim of CLAIM_N with ``jobs`` ready jobs, in a
    jobq._job never analyzed (autovacuum off for it, so that it stays so)
    and in one analyzed after the fill; a database each, claims interleaved
    round by round."""
    names = {(v, r): f"jobq_bench_cold_{v.replace('.', '_')}_{r}" for v in scripts for r in COLD_REGIMES}
    samples: dict[tuple[str, str], list[float]] = {key: [] for key in names}
    with contextlib.ExitStack() as stack:
        conns = {}
        for (version, regime), name in names.items():
            conn = stack.enter_context(psycopg.connect(prepared(admin, dsn, name, scripts[version]),
                                                       autocommit=True))
            conn.execute("ALTER TABLE jobq._job SET (autovacuum_enabled = false)")
            fill(conn, QUEUE, jobs)
            if regime == "analyzed":
                conn.execute("ANALYZE jobq._job")
            for _ in range(COLD_WARMUP):
                claim_ms(conn, QUEUE)
            conns[version, regime] = conn
        for _ in range(COLD_CLAIMS):
            for key, conn in conns.items():
                samples[key].append(claim_ms(conn, QUEUE))
    for name in names.values():
        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    found: dict[str, dict[str, float]] = {}
    for version in scripts:
        never = median_ms(samples[version, "never_analyzed"])
        analyzed = median_ms(samples[version, "analyzed"])
        found[version] = {"never_analyzed_ms": never, "analyzed_ms": analyzed,
                          "ratio": round(never / max(analyzed, 1e-3), 2)}
        progress(f"cold claim ({version}): {never:.2f} ms never analyzed, {analyzed:.2f} ms analyzed")
    return found


def backlog_section(dsn: str, jobs: int, rounds: int, cold_jobs: int = COLD_JOBS) -> dict[str, Any]:
    scripts = _sqlfiles.SqlScripts.load()
    current = scripts.latest
    versions = {OLD_VERSION: scripts.full[OLD_VERSION].read(), current: scripts.full[current].read()}
    results: dict[str, Any] = {"jobs": jobs, "rounds": rounds, "cold_jobs": cold_jobs,
                               "versions": [OLD_VERSION, current]}
    with psycopg.connect(dsn, autocommit=True) as admin:
        targets = {}
        for version, script in versions.items():
            name = f"jobq_bench_backlog_{version.replace('.', '_')}"
            progress(f"backlog: {jobs:,} ready jobs into jobq {version} ({name})")
            targets[version] = prepared(admin, dsn, name, script)
            with psycopg.connect(targets[version], autocommit=True) as conn:
                load_backlog(conn, jobs)
        results["costs_ms"] = costs(targets, rounds)
        for version in versions:
            admin.execute(f'DROP DATABASE "jobq_bench_backlog_{version.replace(".", "_")}" WITH (FORCE)')
        results["cold_claim"] = cold_claims(admin, dsn, versions, cold_jobs)
    now = results["costs_ms"][current]
    results["goals"] = {name: {"goal_ms": goal, "ms": now[name], "met": now[name] <= goal}
                        for name, goal in GOALS_MS.items()}
    cold = results["cold_claim"][current]
    results["goals"]["claim, never analyzed / analyzed"] = {
        "goal_ratio": COLD_RATIO_GOAL, "ratio": cold["ratio"], "met": cold["ratio"] <= COLD_RATIO_GOAL}
    return results


def summary(result: dict[str, Any]) -> str:
    old, new = result["versions"]
    rows = []
    for name, goal in GOALS_MS.items():
        met = result["goals"][name]["met"]
        rows.append([name, f"{result['costs_ms'][old][name]:,.2f}", f"{result['costs_ms'][new][name]:,.2f}",
                     f"<= {goal:g}", "yes" if met else "NO"])
    table = format_table([f"with {result['jobs']:,} ready jobs (ms, median of {result['rounds']})",
                          f"jobq {old}", f"jobq {new}", "goal", "met"], rows)
    cold_rows = [[f"jobq {v}", f"{c['never_analyzed_ms']:.2f}", f"{c['analyzed_ms']:.2f}",
                  f"{c['ratio']:.2f}"] for v, c in result["cold_claim"].items()]
    cold_goal = result["goals"]["claim, never analyzed / analyzed"]
    cold = format_table([f"claim of {CLAIM_N}, {result['cold_jobs']:,} ready (ms, median of {COLD_CLAIMS})",
                         "never analyzed", "after ANALYZE", "ratio"], cold_rows)
    return "\n".join([table, "", cold,
                      f"goal: never analyzed <= {COLD_RATIO_GOAL:g} x analyzed: "
                      f"{'met' if cold_goal['met'] else 'NOT met'}"])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyqueue.bench.backlog", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=JOBS, help=f"ready jobs in the backlog ({JOBS:,})")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"calls of each per version ({ROUNDS})")
    parser.add_argument("--cold-jobs", type=int, default=COLD_JOBS,
                        help=f"ready jobs behind the cold claim ({COLD_JOBS:,})")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_JOBS:,} jobs, {QUICK_ROUNDS} rounds")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"results file ({DEFAULT_JSON})")
    args = parser.parse_args(argv)
    jobs, rounds = (QUICK_JOBS, QUICK_ROUNDS) if args.quick else (args.jobs, args.rounds)
    if jobs < 1 or rounds < 1 or args.cold_jobs < 1:
        parser.error("--jobs, --rounds and --cold-jobs must be at least 1")
    try:
        with database(None, LOCAL_SETTINGS) as (dsn, _mode):
            result = backlog_section(dsn, jobs, rounds, args.cold_jobs)
    except BenchError as error:
        print(f"backlog benchmark failed: {error}", file=sys.stderr)
        return 1
    print(summary(result))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    print(f"results: {args.json}")
    return 0 if all(goal["met"] for goal in result["goals"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
