"""``python -m pyqueue.bench.fair_ab``: the fair claim of the current jobq
against an earlier release's, A/B, call by call (issue 28).

On one throwaway durable local server, two databases: jobq ``--against``
(A, by default 0.13.0) and the current jobq (B). In each, a plain queue and
a fair queue with ``--keys`` active keys (the backlog spread evenly over
them), each claimed by a session of its own: four sessions whose calls
(a claim of ``--batch`` jobs, then ``complete_many`` or ``complete``) are
interleaved in a new random order every step, so that the load of a shared
machine falls on all four alike. Each call is timed by its backend's CPU
time from ``/proc/PID/schedstat`` (nanoseconds, read around the call).

Figures are server CPU µs per job, medians over ``--rounds``; the speeds
are inverse CPU ratios: fair ÷ plain in each database, and B's fair claim ÷
A's. Nothing is asserted: the goals of issue 28 (fair with 1 key at least
0.9 x plain, with 1,000 keys at least 0.7 x plain) are printed beside the figures.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from pyqueue import _sqlfiles
from pyqueue.bench import sql_loops
from pyqueue.bench.fair import prefill
from pyqueue.bench.harness import BenchError, progress
from pyqueue.bench.report import format_table
from pyqueue.bench.suite import LOCAL_SETTINGS, database

DEFAULT_JSON = Path("bench-results/fair_ab.json")
AGAINST = "0.13.0"  # the fair claim before issue 28's second round of work on it
KEY_COUNTS = (1, 1_000)
PLAIN_QUEUE, FAIR_QUEUE = f"{sql_loops.QUEUE_PREFIX}ab_plain", f"{sql_loops.QUEUE_PREFIX}ab_fair"
WARMUP_CALLS = 20  # per session and round, before the clock starts
SESSIONS = ("A plain", "A fair", "B plain", "B fair")


def backend_cpu_ns(pid: int) -> int:
    """CPU time of a server process so far (its scheduler's clock, ns; Linux)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


def one_call(conn: sql_loops.Conn, queue: str, batch: int) -> None:
    rows = conn.execute(sql_loops.JOBQ_CLAIM, (queue, batch, "ab")).fetchall()
    if len(rows) != batch:
        raise BenchError(f"a claim of {batch} on {queue} found {len(rows)} jobs: the prefill was short")
    if batch == 1:
        conn.execute("SELECT jobq.complete(%s, %s)", (rows[0][0], rows[0][1])).fetchone()
    else:
        conn.execute(sql_loops.JOBQ_COMPLETE, ([r[0] for r in rows], [r[1] for r in rows])).fetchone()


def one_round(targets: dict[str, str], keys: int, batch: int, calls: int) -> dict[str, float]:
    """CPU µs per job of each session over ``calls`` interleaved calls."""
    needed = (calls + WARMUP_CALLS) * batch
    sessions: dict[str, tuple[sql_loops.Conn, str]] = {}
    try:
        for side in ("A", "B"):
            plain = psycopg.connect(targets[side], autocommit=True)
            sessions[f"{side} plain"] = (plain, PLAIN_QUEUE)
            plain.execute("DELETE FROM jobq._job")
            prefill(plain, None, needed, queue=PLAIN_QUEUE)
            prefill(plain, keys, max(needed, keys), queue=FAIR_QUEUE, clear=False)
            plain.execute("VACUUM ANALYZE jobq._job")
            sessions[f"{side} fair"] = (psycopg.connect(targets[side], autocommit=True), FAIR_QUEUE)
        for conn, queue in sessions.values():
            for _ in range(WARMUP_CALLS):
                one_call(conn, queue, batch)
        spent = dict.fromkeys(sessions, 0)
        order = list(sessions)
        for _ in range(calls):
            random.shuffle(order)
            for name in order:
                conn, queue = sessions[name]
                pid = conn.info.backend_pid
                before = backend_cpu_ns(pid)
                one_call(conn, queue, batch)
                spent[name] += backend_cpu_ns(pid) - before
    finally:
        for conn, _ in sessions.values():
            conn.close()
    return {name: ns / 1000 / (calls * batch) for name, ns in spent.items()}


def measure(dsn: str, against: str, key_counts: Sequence[int], *, batch: int, calls: int,
            rounds: int) -> dict[str, Any]:
    scripts = _sqlfiles.SqlScripts.load()
    if against not in scripts.full:
        raise BenchError(f"no install script of jobq {against}; known: {', '.join(sorted(scripts.full))}")
    targets: dict[str, str] = {}
    figures: dict[str, dict[str, list[float]]] = {}
    with psycopg.connect(dsn, autocommit=True) as admin:
        for side, version in (("A", against), ("B", scripts.latest)):
            name = f"jobq_bench_fair_ab_{side.lower()}"
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{name}"')
            targets[side] = make_conninfo(dsn, dbname=name)
            with psycopg.connect(targets[side], autocommit=True) as conn:
                conn.execute(scripts.full[version].read())
        try:
            for keys in key_counts:
                for number in range(rounds):
                    cpu = one_round(targets, keys, batch, calls)
                    for name, value in cpu.items():
                        figures.setdefault(f"{keys:,} keys", {}).setdefault(name, []).append(round(value, 2))
                    progress(f"fair A/B, {keys:,} keys, batch {batch}, round {number + 1}: "
                             + ", ".join(f"{n} {v:,.1f}" for n, v in cpu.items()) + " CPU µs/job")
        finally:
            for side in targets:
                admin.execute(f'DROP DATABASE IF EXISTS "jobq_bench_fair_ab_{side.lower()}" WITH (FORCE)')
    medians = {k: {n: statistics.median(v) for n, v in by.items()} for k, by in figures.items()}
    speeds = {k: {"A fair ÷ plain": round(m["A plain"] / m["A fair"], 3),
                  "B fair ÷ plain": round(m["B plain"] / m["B fair"], 3),
                  "B fair ÷ A fair": round(m["A fair"] / m["B fair"], 3)} for k, m in medians.items()}
    return {"against": against, "current": scripts.latest, "batch": batch, "calls": calls, "rounds": rounds,
            "figures": figures, "medians": medians, "speeds": speeds}


def summary(result: dict[str, Any]) -> str:
    speed_names = ("A fair ÷ plain", "B fair ÷ plain", "B fair ÷ A fair")
    header = [f"claim of {result['batch']}: server CPU µs per job, median of {result['rounds']} "
              f"(A = jobq {result['against']}, B = jobq {result['current']})", *SESSIONS, *speed_names]
    rows = [[keys, *(f"{result['medians'][keys][s]:,.1f}" for s in SESSIONS),
             *(f"{result['speeds'][keys][s]:.3f}" for s in speed_names)] for keys in result["medians"]]
    goals = "goals (issue 28): fair with 1 key >= 0.9 x plain, with 1,000 keys >= 0.7 x plain"
    return format_table(header, rows) + "\n\n" + goals


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pyqueue.bench.fair_ab",
        description="The fair claim of the current jobq against an earlier one's, A/B, call by call.")
    parser.add_argument("--against", default=AGAINST, help=f"jobq version of side A ({AGAINST})")
    parser.add_argument("--keys", default=",".join(str(k) for k in KEY_COUNTS),
                        help="active keys of the fair queue, comma-separated (1,1000)")
    parser.add_argument("--batch", type=int, default=100, help="jobs per claim (100)")
    parser.add_argument("--calls", type=int, default=150, help="calls per session and round (150)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per key count (3)")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"results file ({DEFAULT_JSON})")
    args = parser.parse_args(argv)
    try:
        key_counts = [int(k) for k in args.keys.split(",")]
    except ValueError:
        parser.error(f"--keys must be whole numbers separated by commas, got {args.keys!r}")
    if min(args.batch, args.calls, args.rounds, *key_counts) < 1:
        parser.error("--keys, --batch, --calls and --rounds must be at least 1")
    try:
        with database(None, LOCAL_SETTINGS) as (dsn, _mode):
            result = measure(dsn, args.against, key_counts, batch=args.batch, calls=args.calls,
                             rounds=args.rounds)
    except BenchError as error:
        print(f"fair A/B benchmark failed: {error}", file=sys.stderr)
        return 1
    print(summary(result))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"results: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
