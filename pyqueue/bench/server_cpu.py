"""``python -m pyqueue.bench.server_cpu``: the server's CPU per job of a
drain in a cold database (issue 24), jobq against a pgmq-style loop.

Throughput on a shared 2-core machine moves with whatever else runs; the
CPU time the server's backends spend on a drain barely does. So, round
after round (``--rounds``, 5; the systems interleaved, the median counts),
for each system and each W of ``--workers`` (1 and 4):

1. a FRESH database (never analyzed, autovacuum kept off its table
   throughout: every drain runs without statistics), ``--jobs`` (20,000)
   no-op jobs put in at once;
2. W connections (threads of this process) drain it in batches of 100:
   ``pgmq``, pgmq 1.5's read + delete of ``cold_systems``; ``jobq_sql``,
   ``jobq.claim(q, 100)`` + ``jobq.complete_many``; ``pyqueue``, one
   ``pyqueue.Worker`` (concurrency 10, batch 100, a no-op handler) in a
   thread, with everything it asks the server for (claims, acks,
   heartbeats, reap, LISTEN);
3. the backends' CPU time (``/proc/<pid>/schedstat``, nanoseconds) over the
   drain, ÷ the jobs: server µs per job. The SQL loops read their own
   backend before and after; the Worker's backends (all of the database's
   but this program's) are read once the queue is empty, their start-up
   included (a few ms over thousands of jobs).

``--baseline SCRIPT`` (e.g. ``sql/jobq--0.12.0.sql``) adds the same jobq
rows on that install script, interleaved: an A/B of jobq's SQL in one run.
The server runs without ``track_functions`` (its per-call cost would
charge jobq's function layers more than pgmq's two calls; ``--dsn`` runs
on a server as it is). Figures are
printed with jobq ÷ pgmq (CPU: lower is better; the issue's Worker at 1.0 of
pgmq's speed needs jobq's server cost at or below pgmq's). ``make bench``
runs it; ``--quick`` is one round of 10,000 jobs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

import pyqueue
from pyqueue import schema
from pyqueue.bench import cold_systems, sql_loops
from pyqueue.bench.cold_start import fresh_database, server
from pyqueue.bench.harness import BenchError, progress
from pyqueue.bench.report import format_table
from pyqueue.bench.suite import LOCAL_SETTINGS, counts, database, int_list

DEFAULT_JSON = Path("bench-results/server_cpu.json")
DATABASE = "jobq_server_cpu"  # made and dropped for every drain (on --dsn's server too: CREATEDB)
BATCH = 100  # jobs per claim / read
CONCURRENCY = 10  # the Worker's handler threads
DRAIN_TIMEOUT = 600.0  # seconds before a drain counts as stuck
SETTINGS = {k: v for k, v in LOCAL_SETTINGS.items() if k != "track_functions"}
QUEUE = cold_systems.QUEUE


def cpu_seconds(pid: int) -> float:
    """CPU time of a server process so far (Linux /proc): its time on a CPU
    from ``schedstat`` (nanoseconds), else user + system from ``stat``
    (clock ticks, 10 ms)."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class System:
    name: str
    label: str
    table: str
    jobq: bool  # installed from a jobq script


SYSTEMS = (
    System("pgmq", "pgmq-style: read(vt) + delete(ids)", f"pgmq_style.q_{cold_systems.PGMQ_QUEUE}", False),
    System("jobq_sql", "jobq SQL: claim(q, 100) + complete_many", "jobq._job", True),
    System("pyqueue", "pyqueue.Worker (everything it runs on the server)", "jobq._job", True),
)


def setup(conn: sql_loops.Conn, system: System, script: str | None, jobs: int) -> None:
    """The system in a fresh database and the burst in it, autovacuum kept off its table."""
    if not system.jobq:
        cold_systems.pgmq_setup(conn)
    elif script is None:
        schema.install(conn)
    else:
        conn.execute(Path(script).read_text())
        conn.execute("RESET search_path")
    conn.execute(f"ALTER TABLE {system.table} SET (autovacuum_enabled = off)")
    (cold_systems.jobq_fill if system.jobq else cold_systems.pgmq_fill)(conn, jobs)


def sql_loop(dsn: str, system: System, spent: list[float], done: list[int],
             errors: list[BaseException]) -> None:
    """Drain with one connection until a claim comes back empty; add its
    backend's CPU to ``spent`` and the jobs it took to ``done``, from its
    first batch on (that batch's planning and start-up are not a job's)."""
    try:
        with sql_loops.connect(dsn) as conn:
            before: float | None = None
            while True:
                if system.name == "pgmq":
                    read = (cold_systems.PGMQ_QUEUE, cold_systems.PGMQ_VISIBILITY, BATCH)
                    rows = conn.execute(cold_systems.PGMQ_READ, read).fetchall()
                    if rows:
                        conn.execute(cold_systems.PGMQ_DELETE,
                                     (cold_systems.PGMQ_QUEUE, [r[0] for r in rows])).fetchall()
                else:
                    rows = conn.execute(sql_loops.JOBQ_CLAIM, (QUEUE, BATCH, "cpu")).fetchall()
                    if rows:
                        conn.execute(sql_loops.JOBQ_COMPLETE,
                                     ([r[0] for r in rows], [r[1] for r in rows])).fetchone()
                if not rows:
                    break
                if before is None:  # the clock starts after the first batch (start-up is not a job's)
                    before = cpu_seconds(conn.info.backend_pid)
                else:
                    done.append(len(rows))
            if before is not None:
                spent.append(cpu_seconds(conn.info.backend_pid) - before)
    except BaseException as exc:  # re-raised by the caller
        errors.append(exc)


def run_threads(targets: list[Callable[[], None]]) -> None:
    threads = [threading.Thread(target=t, daemon=True) for t in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DRAIN_TIMEOUT)
        if thread.is_alive():
            raise BenchError("a drain did not finish in time")


def left_in(conn: sql_loops.Conn) -> int:
    row = conn.execute(cold_systems.JOBQ_LEFT, {"q": QUEUE}).fetchone()
    return int(row[0]) if row else 0


def backends_cpu(conn: sql_loops.Conn) -> float:
    """CPU so far of the database's client backends but ``conn``'s."""
    pids = [int(r[0]) for r in conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        " AND backend_type = 'client backend'").fetchall()]
    spent = 0.0
    for pid in pids:
        with contextlib.suppress(FileNotFoundError):  # a backend that ended meanwhile
            spent += cpu_seconds(pid)
    return spent


def worker_drain(dsn: str, workers: int, jobs: int) -> tuple[float, int]:
    """``workers`` pyqueue.Workers drain the queue: their backends' CPU
    from the moment each could have taken two batches (start-up is not a
    job's) to the queue's end, and the jobs in between."""
    def noop(job: pyqueue.Job) -> None:
        pass

    fleet = [pyqueue.Worker(dsn, concurrency=CONCURRENCY, batch_size=BATCH, name=f"cpu-{k}")
             for k in range(workers)]
    for worker in fleet:
        worker.register(QUEUE, noop)
    threads = [threading.Thread(target=w.run, kwargs={"handle_signals": False}, daemon=True) for w in fleet]
    with sql_loops.connect(dsn) as watch:
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + DRAIN_TIMEOUT
        start: tuple[int, float] | None = None  # jobs left and CPU so far, once every Worker took a batch
        while (left := left_in(watch)) > 0:
            if time.monotonic() > deadline or not any(t.is_alive() for t in threads):
                raise BenchError("the Workers did not drain the queue")
            if start is None and left <= jobs - 2 * BATCH * workers:
                start = (left, backends_cpu(watch))
            time.sleep(0.005)
        if start is None:  # a drain too short to see: counted from the backends' start
            start = (jobs, 0.0)
        spent = backends_cpu(watch) - start[1]
    for worker in fleet:
        worker.stop()
    for thread in threads:
        thread.join(60)
    return spent, start[0]


def one_drain(admin: sql_loops.Conn, dsn: str, system: System, script: str | None, *, workers: int,
              jobs: int) -> float:
    """Server CPU µs per job of one cold drain."""
    with fresh_database(admin, dsn, DATABASE) as target:
        with sql_loops.connect(target) as conn:
            setup(conn, system, script, jobs)
            conn.execute("CHECKPOINT")
        if system.name == "pyqueue":
            spent, counted = worker_drain(target, workers, jobs)
        else:
            totals: list[float] = []
            done: list[int] = []
            errors: list[BaseException] = []
            run_threads([lambda: sql_loop(target, system, totals, done, errors) for _ in range(workers)])
            if errors:
                raise BenchError(f"{system.name} drain failed: {errors[0]}")
            spent, counted = sum(totals), sum(done)
        with sql_loops.connect(target) as conn:
            left = conn.execute(f"SELECT count(*) FROM {system.table}").fetchone()
            if left != (0,):
                raise BenchError(f"{system.name}: {left} jobs left after the drain")
    return spent / max(counted, 1) * 1e6


def plan(systems: Sequence[str], baseline: str | None) -> list[tuple[System, str | None, str]]:
    """(system, script or None for the packaged one, row label) of each row."""
    rows: list[tuple[System, str | None, str]] = []
    for system in SYSTEMS:
        if system.name not in systems:
            continue
        rows.append((system, None, system.name))
        if system.jobq and baseline:
            rows.append((system, baseline, f"{system.name} @ {Path(baseline).name}"))
    return rows


def measure(dsn: str, jobs: int, workers: Sequence[int], *, rounds: int, systems: Sequence[str],
            baseline: str | None) -> dict[str, Any]:
    rows = plan(systems, baseline)
    figures: dict[str, dict[str, list[float]]] = {}
    with psycopg.connect(dsn, autocommit=True) as admin:
        for number in range(rounds):
            for w in workers:
                shift = (number + w) % len(rows)
                for system, script, label in rows[shift:] + rows[:shift]:
                    value = one_drain(admin, dsn, system, script, workers=w, jobs=jobs)
                    figures.setdefault(f"W={w}", {}).setdefault(label, []).append(round(value, 2))
                    progress(f"server CPU, round {number + 1}, W={w}: {label}: {value:,.1f} µs/job")
    medians = {w: {label: statistics.median(v) for label, v in by.items()} for w, by in figures.items()}
    return {"jobs": jobs, "rounds": rounds, "batch": BATCH, "baseline": baseline,
            "labels": {label: s.label for s, _, label in rows}, "figures": figures, "medians": medians}


def summary(result: dict[str, Any]) -> str:
    labels = list(result["labels"])
    table = []
    for w, by in result["medians"].items():
        pgmq = by.get("pgmq")
        for label in labels:
            if label not in by:
                continue
            versus = f"{by[label] / pgmq:.2f}" if pgmq else "-"
            spread = result["figures"][w][label]
            table.append([w, label, f"{by[label]:,.1f}", versus, f"{min(spread):,.1f} to {max(spread):,.1f}"])
    header = ["W", f"server CPU per job, cold drain of {result['jobs']:,}, median of {result['rounds']}",
              "µs/job", "÷ pgmq", "range"]
    return format_table(header, table, left=2)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyqueue.bench.server_cpu", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", help=f"a server to use instead of a throwaway local one (the program "
                        f"creates and drops the database {DATABASE} there: it needs CREATEDB and the "
                        "server's /proc)")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per drain (20,000)")
    parser.add_argument("--workers", type=int_list, default=(1, 4), metavar="W,W",
                        help="connections (Workers) draining at once (1,4)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds; the median counts (5)")
    parser.add_argument("--systems", default="pgmq,jobq_sql,pyqueue",
                        help="which of pgmq, jobq_sql, pyqueue (all)")
    parser.add_argument("--baseline", metavar="SCRIPT",
                        help="also the jobq rows on this install script (A/B)")
    parser.add_argument("--quick", action="store_true", help="10,000 jobs, one round")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"results file ({DEFAULT_JSON})")
    args = parser.parse_args(argv)
    jobs, rounds = (10_000, 1) if args.quick else (args.jobs, args.rounds)
    systems = [s for s in args.systems.split(",") if s]
    if min(jobs, rounds) < 1 or not set(systems) <= {s.name for s in SYSTEMS}:
        parser.error("--jobs and --rounds must be at least 1; --systems names pgmq, jobq_sql, pyqueue")
    try:
        options: dict[str, Any] = {"rounds": rounds, "systems": systems, "baseline": args.baseline}
        if args.dsn:
            with server(args.dsn) as dsn:
                result = measure(dsn, jobs, args.workers, **options)
        else:
            with database(None, SETTINGS) as (dsn, _mode):
                result = measure(dsn, jobs, args.workers, **options)
    except (BenchError, psycopg.Error) as error:
        print(f"server CPU benchmark failed: {str(error).strip()}", file=sys.stderr)
        return 1
    print(summary(result))
    print(f"(workers: {counts(tuple(args.workers))}; lower is better; "
          "÷ pgmq is jobq's CPU per job over pgmq's)")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"results: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
