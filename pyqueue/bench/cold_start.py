"""``python -m pyqueue.bench.cold_start``: a burst of jobs into a fresh
database, and workers started at once — the way users first meet a queue
(a first benchmark, a new deployment, a restore, a major-version upgrade:
no table statistics yet). ``make bench`` runs it after ``pyqueue bench``.

On a throwaway durable local server (or the server of ``--dsn``, where it
creates and drops databases named ``jobq_cold_*``), for each system of
``pyqueue.bench.cold_systems`` (the floor, a pgmq-style loop, jobq through
SQL alone, ``pyqueue.Worker`` processes), for each W of ``--workers`` (4
and 16), round after round (``--rounds``, 3):

1. a FRESH database made for that system in that round: never analyzed,
   no warm-up, nothing ran in it before;
2. a burst of ``--jobs`` (1,000,000; ``--quick``: 20,000) no-op jobs
   enqueued at once (in statements of 50,000), then W processes started at
   once drain it, batches of 100 (the Workers: concurrency 10): **cold**.
   Autovacuum is kept off the table while the burst goes in, so that the
   drain begins never analyzed; from then on it runs as the server has it,
   and when it analyzed the table during the drain the report says so.
   ``--hold-autovacuum`` keeps it off until the cold drain is over, so that
   every cold drain runs without statistics however long it takes;
3. **warm**: the first drain's dead rows vacuumed, the same burst again,
   the table ANALYZEd (with the burst in it, as autovacuum would), and
   drained again by new processes. Cold and warm differ by the statistics
   and by the first drain alone: the jobs of both are freshly inserted.

Drain time comes from the workers' own clocks, first claim to last
acknowledgement (see ``cold_systems``). The median of the rounds counts
(every round is in the JSON); it reports jobs/s, each system ÷ the floor,
÷ the pgmq-style loop, and cold ÷ warm, and judges issue 24's goals:
pyqueue.Worker ÷ the pgmq-style loop ≥ ``--min-vs-pgmq`` (1.0), cold, at
every W; jobq's cold ÷ warm ≥ ``--min-cold-warm`` (0.9) for the Worker and
the bare SQL loop, at every W. It exits 1 when a goal is missed, saying
why; and it shows the plan ``jobq.claim`` takes in a never-analyzed table
(read with auto_explain in a database of its own, when it may be loaded).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import psycopg

from pyqueue import schema
from pyqueue.bench import cold_systems, profiling, sql_loops
from pyqueue.bench.cold_report import summary
from pyqueue.bench.cold_systems import PHASES, SYSTEMS, Drain, System
from pyqueue.bench.config import STEP_TIMEOUT
from pyqueue.bench.harness import BenchError, progress, ratio, sigterm_unwinds
from pyqueue.bench.suite import LOCAL_SETTINGS, counts, database, int_list

DEFAULT_JSON = Path("bench-results/cold_start.json")
DATABASE_PREFIX = "jobq_cold_"
BATCH = 100  # jobs per claim, read, DELETE; the Workers' batch_size
CONCURRENCY = 10  # handler threads per pyqueue.Worker process
MIN_RATE = 200.0  # jobs/s: a drain slower than this over the whole burst counts as stuck
PLAN_JOBS = 100_000  # jobs in the database the cold claim plan is read in (at most --jobs)
JOBQ_SYSTEMS = ("jobq_sql", "pyqueue")  # whose cold ÷ warm is a goal
SETTINGS_REPORTED = ("server_version", "fsync", "synchronous_commit", "shared_buffers", "autovacuum",
                     "autovacuum_naptime", "max_connections")


@dataclass(frozen=True)
class Settings:
    jobs: int = 1_000_000  # the burst (issue 24: 1,000,000 in the full run)
    workers: tuple[int, ...] = (4, 16)  # worker processes started at once
    rounds: int = 3  # interleaved rounds of every system; the median counts
    min_vs_pgmq: float = 1.0  # goal: pyqueue.Worker ÷ pgmq-style, cold, at every W
    min_cold_warm: float = 0.9  # goal: jobq's cold ÷ warm (Worker and SQL loop), at every W
    hold_autovacuum: bool = False  # autovacuum kept off each table until its cold drain is over


QUICK = Settings(jobs=20_000, rounds=1)


# --- the databases -------------------------------------------------------------------------

@contextlib.contextmanager
def server(dsn: str | None) -> Iterator[str]:
    """The DSN of a database on the server to use (a throwaway local one
    without ``dsn``); SIGTERM unwinds, so drivers and the server stop."""
    if dsn:
        with sigterm_unwinds():
            yield dsn
        return
    with database(None, LOCAL_SETTINGS) as (local, _mode):
        yield local


@contextlib.contextmanager
def fresh_database(admin: sql_loops.Conn, dsn: str, name: str) -> Iterator[str]:
    """A new, empty database ``name`` on the server of ``dsn`` (from
    template1), dropped afterwards; its DSN."""
    admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield psycopg.conninfo.make_conninfo(dsn, dbname=name)
    finally:
        try:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        except psycopg.Error as exc:  # said, not raised: it must not hide what ended the run (SIGTERM)
            progress(f"could not drop the database {name}: {str(exc).strip()}")


def server_facts(admin: sql_loops.Conn) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    for name in SETTINGS_REPORTED:
        row = admin.execute("SELECT current_setting(%s, true)", (name,)).fetchone()
        facts[name] = row[0] if row else None
    facts["jobq_version"] = schema.packaged_version()
    return facts


# --- measuring -----------------------------------------------------------------------------

def one_system(admin: sql_loops.Conn, dsn: str, system: System, workers: int, settings: Settings,
               ) -> tuple[Drain, Drain]:
    """A fresh database for ``system``: the burst drained cold, then again warm."""
    jobs = settings.jobs
    timeout = max(STEP_TIMEOUT, jobs / MIN_RATE)
    with fresh_database(admin, dsn, f"{DATABASE_PREFIX}{system.name}_w{workers}") as target, \
            sql_loops.connect(target) as conn:
        system.setup(conn)
        burst(conn, system, jobs)
        released_before = "warm" if settings.hold_autovacuum else "cold"
        measured: list[Drain] = []
        for phase in PHASES:
            if phase == released_before:
                release_autovacuum(conn, system)
            if phase == "warm":  # as a running database: the drain's dead rows vacuumed, statistics
                conn.execute(f"VACUUM {system.table}")
                system.fill(conn, jobs)
                conn.execute(f"ANALYZE {system.table}")
            found = cold_systems.drain(target, conn, system, workers, jobs, batch=BATCH,
                                       concurrency=CONCURRENCY, timeout=timeout)
            measured.append(found)
            progress(f"cold start, {system.name}, W={workers}, {phase}: "
                     f"{found.outcome.jobs_per_s:,.0f} jobs/s{analyzed_note(found)}")
    return measured[0], measured[1]


def burst(conn: sql_loops.Conn, system: System, jobs: int) -> None:
    """The burst, enqueued with autovacuum kept off the table, so that the
    cold drain begins never analyzed (a million jobs take long enough to
    go in for autovacuum to analyze them meanwhile). It comes back with
    ``release_autovacuum``: for the cold drain, or with --hold-autovacuum
    only for the warm one."""
    conn.execute(f"ALTER TABLE {system.table} SET (autovacuum_enabled = off)")
    system.fill(conn, jobs)


def release_autovacuum(conn: sql_loops.Conn, system: System) -> None:
    """The table's own autovacuum settings back (jobq's, for jobq._job)."""
    conn.execute(f"ALTER TABLE {system.table} RESET (autovacuum_enabled)")


def analyzed_note(found: Drain) -> str:
    if found.analyzed_after_s is not None:
        return f" (autovacuum analyzed the table {found.analyzed_after_s:.1f} s into the drain)"
    return ""


def cold_claim_plan(admin: sql_loops.Conn, dsn: str, jobs: int) -> dict[str, Any]:
    """The plan of jobq.claim(q, BATCH) in a never-analyzed table of
    min(jobs, PLAN_JOBS) ready jobs, in a database of its own (reading it
    touches every row, which would warm the table up)."""
    count = min(jobs, PLAN_JOBS)
    with fresh_database(admin, dsn, f"{DATABASE_PREFIX}plan") as target, sql_loops.connect(target) as conn:
        cold_systems.jobq_setup(conn)
        cold_systems.jobq_fill(conn, count)
        try:
            plan = profiling.claim_plan(conn, cold_systems.QUEUE, BATCH)
        except psycopg.Error as exc:
            return {"jobs": count, "unavailable": f"auto_explain could not be used: {str(exc).strip()}"}
    nodes = plan["nodes"]  # of the statement that locks the rows with SKIP LOCKED, root first
    return {"jobs": count, "calls": profiling.PLAN_CALLS, "nodes": nodes, "statements": plan["statements"],
            "lookup_ms": nodes[0]["ms"] if nodes else None}


def median(drains: list[Drain]) -> Drain:
    """The median drain by jobs/s (the lower middle one of an even count)."""
    return sorted(drains, key=lambda d: d.outcome.jobs_per_s)[(len(drains) - 1) // 2]


def measure(dsn: str, settings: Settings) -> dict[str, Any]:
    """Every system at every W, round after round; medians, ratios, goals."""
    runs: dict[tuple[int, str, str], list[Drain]] = {}
    with sql_loops.connect(dsn) as admin:
        facts = server_facts(admin)
        progress(f"cold start: the claim's plan in a never-analyzed table of "
                 f"{min(settings.jobs, PLAN_JOBS):,} jobs")
        plan = cold_claim_plan(admin, dsn, settings.jobs)
        for round_number in range(1, settings.rounds + 1):
            for workers in settings.workers:
                progress(f"cold start, round {round_number} of {settings.rounds}, W={workers}: "
                         f"{settings.jobs:,} jobs into a fresh database per system")
                for system in SYSTEMS:
                    cold, warm = one_system(admin, dsn, system, workers, settings)
                    runs.setdefault((workers, system.name, "cold"), []).append(cold)
                    runs.setdefault((workers, system.name, "warm"), []).append(warm)
    results: dict[str, Any] = {
        "settings": asdict(settings), "batch": BATCH, "concurrency": CONCURRENCY, "server": facts,
        "claim_plan_cold": plan, "systems": {s.name: s.label for s in SYSTEMS},
        "workers": {str(workers): cells(runs, workers) for workers in settings.workers},
    }
    results["goals"] = goals(results, settings)
    results["ok"] = all(goal["met"] for goal in results["goals"].values())
    return results


def cells(runs: dict[tuple[int, str, str], list[Drain]], workers: int) -> dict[str, Any]:
    """Each system's median cold and warm drain at ``workers``, with the
    ratios to the floor and the pgmq-style loop, and cold ÷ warm."""
    chosen = {(name, phase): median(runs[(workers, name, phase)]) for name in cold_systems.BY_NAME
              for phase in PHASES}
    found: dict[str, Any] = {}
    for system in SYSTEMS:
        row: dict[str, Any] = {}
        for phase in PHASES:
            drain, every = chosen[(system.name, phase)], runs[(workers, system.name, phase)]
            rate = drain.outcome.jobs_per_s
            row[phase] = {
                **drain.as_dict(),
                "ratio_to_floor": ratio(rate, chosen[("floor", phase)].outcome.jobs_per_s),
                "ratio_to_pgmq": ratio(rate, chosen[("pgmq", phase)].outcome.jobs_per_s),
                "runs_jobs_per_s": [round(d.outcome.jobs_per_s, 1) for d in every],
                "runs_analyzed_after_s": [d.analyzed_after_s for d in every],
                "runs_analyzed_before": [d.analyzed_before for d in every],
            }
        row["cold_vs_warm"] = ratio(row["cold"]["jobs_per_s"], row["warm"]["jobs_per_s"])
        found[system.name] = row
    return found


def goals(results: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """Issue 24's goals against this run: each with its label, bound, value and whether met."""
    found: dict[str, Any] = {}

    def judge(name: str, label: str, value: float | None, bound: float) -> None:
        found[name] = {"label": label, "value": value, "min": bound,
                       "met": value is not None and value >= bound}

    for w, rows in results["workers"].items():
        judge(f"pyqueue_vs_pgmq_w{w}", f"pyqueue.Worker ÷ pgmq-style, cold, W={w}",
              rows["pyqueue"]["cold"]["ratio_to_pgmq"], settings.min_vs_pgmq)
        for name in JOBQ_SYSTEMS:
            who = "pyqueue.Worker" if name == "pyqueue" else "jobq SQL"
            judge(f"{name}_cold_vs_warm_w{w}", f"{who}: cold ÷ warm, W={w}", rows[name]["cold_vs_warm"],
                  settings.min_cold_warm)
    return found


# --- the program -----------------------------------------------------------------------------

def count(text: str) -> int:
    """A whole number of at least 1 (--jobs, --rounds)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def goal_ratio(text: str) -> float:
    """A ratio of at least 0 (the goals' bounds)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a ratio such as 0.9, got {text!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite ratio of at least 0, got {text}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyqueue.bench.cold_start", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", help="a server to use instead of a throwaway local one (the program creates "
                        f"and drops databases {DATABASE_PREFIX}* there: it needs CREATEDB)")
    parser.add_argument("--quick", action="store_true",
                        help=f"--jobs {QUICK.jobs}, --rounds {QUICK.rounds}")
    parser.add_argument("--jobs", type=count, metavar="N",
                        help=f"jobs in the burst (default {Settings.jobs})")
    parser.add_argument("--workers", type=int_list, metavar="W,W",
                        help=f"worker processes started at once (default {counts(Settings.workers)})")
    parser.add_argument("--rounds", type=count, metavar="N",
                        help=f"interleaved rounds; the median counts (default {Settings.rounds})")
    parser.add_argument("--min-vs-pgmq", type=goal_ratio, metavar="RATIO",
                        help=f"goal: pyqueue.Worker ÷ pgmq-style, cold (default {Settings.min_vs_pgmq:g})")
    parser.add_argument("--min-cold-warm", type=goal_ratio, metavar="RATIO",
                        help=f"goal: jobq's cold ÷ warm (default {Settings.min_cold_warm:g})")
    parser.add_argument("--hold-autovacuum", action="store_true", default=None,
                        help="keep autovacuum off each system's table until its cold drain is over, so that "
                        "every cold drain runs without statistics however long it takes (by default it "
                        "is held off only while the burst goes in, and the report says when it analyzed "
                        "the table during a drain)")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"results file ({DEFAULT_JSON})")
    args = parser.parse_args(argv)
    overrides = {"jobs": args.jobs, "workers": args.workers, "rounds": args.rounds,
                 "min_vs_pgmq": args.min_vs_pgmq, "min_cold_warm": args.min_cold_warm,
                 "hold_autovacuum": args.hold_autovacuum}
    settings = replace(QUICK if args.quick else Settings(),
                       **{k: v for k, v in overrides.items() if v is not None})
    started = time.perf_counter()
    try:
        with server(args.dsn) as dsn:
            results = measure(dsn, settings)
    except (BenchError, psycopg.Error) as error:
        print(f"cold start benchmark failed: {str(error).strip()}", file=sys.stderr)
        return 1
    results["seconds"] = round(time.perf_counter() - started, 1)
    print(summary(results))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2, allow_nan=False) + "\n")
    print(f"results: {args.json}")
    return 0 if results["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
