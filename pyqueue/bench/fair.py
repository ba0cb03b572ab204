"""``python -m pyqueue.bench.fair``: what a fair queue's claim costs
(issue 28), and that the plain path did not get slower.

On a throwaway durable local server, three databases: the frozen
``sql/jobq--0.8.0.sql`` (the issue's reference), ``sql/jobq--0.12.0.sql``
(the last release) and the current jobq. One connection makes the
calls, timed by its backend's CPU time (``/proc``, user + system), which
other work on a shared machine barely moves. Workloads:

- ``claim + complete_many of 100`` (a worker's batch) and ``claim +
  complete of 1``, on a plain queue of each database (A/B: the current plain
  claim against 0.8.0's and 0.12.0's), and on fair queues of the current one with 1, 10,
  1,000 and 100,000 active keys (the backlog spread evenly over them);
- ``enqueue`` of one plain job (A/B against 0.8.0 and 0.12.0: the enqueue
  fast path).

Figures are server CPU µs per job; the ratios are speeds (the inverse of the
CPU ratio): the current plain path ÷ 0.8.0 (and ÷ 0.12.0, in the 0.12.0
column), and each fair queue ÷ the current plain queue. Goals (issue 28):
plain ≥ 0.95 x 0.8.0, fair with 1 key ≥ 0.9 x plain, with 1,000 keys
≥ 0.7 x plain; 10 and 100,000 keys are
reported to show how the claim scales with the number of keys. Rounds
interleave the configurations; medians count.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb

from pyqueue import _sqlfiles
from pyqueue.bench import sql_loops
from pyqueue.bench.harness import BenchError, progress
from pyqueue.bench.queue_grants import backend_cpu_seconds
from pyqueue.bench.report import format_table
from pyqueue.bench.suite import LOCAL_SETTINGS, database

DEFAULT_JSON = Path("bench-results/fair.json")
BASELINE = "0.8.0"
BEFORE = "0.12.0"  # the last release: the plain path must not be slower than its (issue 28)
PLAIN = "plain"
KEY_COUNTS = (1, 10, 1_000, 100_000)
GOALS = {PLAIN: 0.95, "fair, 1 keys": 0.9, "fair, 1,000 keys": 0.7}  # speed ratios (issue 28)
QUEUE = f"{sql_loops.QUEUE_PREFIX}fair"
CLAIM_1, CLAIM_100, ENQUEUE_1 = "claim + complete of 1", "claim + complete_many of 100", "enqueue of 1"
WORKLOADS = (CLAIM_100, CLAIM_1, ENQUEUE_1)
BATCH = {CLAIM_1: 1, CLAIM_100: 100, ENQUEUE_1: 1}
WARMUP_CALLS = 20  # per measurement, before the clock starts: the session's first calls plan


@dataclass(frozen=True)
class Sizes:
    calls: int  # single-job calls per measurement (a tenth of it for batches of 100)
    key_counts: tuple[int, ...] = KEY_COUNTS


def configs(sizes: Sizes) -> tuple[str, ...]:
    return (f"{BASELINE} plain", f"{BEFORE} plain", PLAIN, *(f"fair, {k:,} keys" for k in sizes.key_counts))


def keys_of(config: str) -> int | None:
    """The number of fair keys of a configuration; None for a plain queue."""
    if not config.startswith("fair, "):
        return None
    return int(config.removeprefix("fair, ").removesuffix(" keys").replace(",", ""))


def install(admin: sql_loops.Conn, dsn: str) -> dict[str, str]:
    """The 0.8.0 and 0.12.0 databases and the current one; the DSN of each, by version."""
    scripts = _sqlfiles.SqlScripts.load()
    targets: dict[str, str] = {}
    for number, version in enumerate((BASELINE, BEFORE, scripts.latest)):
        name = f"jobq_bench_fair_{number}"
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
        target = make_conninfo(dsn, dbname=name)
        with psycopg.connect(target, autocommit=True) as conn:
            conn.execute(scripts.full[version].read())
            conn.execute("RESET search_path")
        targets[version] = target
    return {BASELINE: targets[BASELINE], BEFORE: targets[BEFORE], "current": targets[scripts.latest]}


def prefill(conn: sql_loops.Conn, keys: int | None, count: int, *,
            queue: str = QUEUE, clear: bool = True) -> None:
    """No job left (unless not ``clear``); then ``count`` ready jobs in
    ``queue`` (spread over ``keys`` fair keys, key k for job k mod keys)."""
    if clear:
        conn.execute("DELETE FROM jobq._job")
        conn.execute("DELETE FROM jobq._counter")
    if keys is None:
        conn.execute("SELECT jobq.reset_queue(%s)", (queue,))
        sql_loops.prefill_jobq(conn, queue, count)
    else:
        conn.execute("SELECT jobq.configure_queue(%s, fair => true)", (queue,))
        for start in range(0, count, sql_loops.PREFILL_CHUNK):
            stop = min(count, start + sql_loops.PREFILL_CHUNK)
            conn.execute(
                "SELECT count(*) FROM jobq.enqueue_many(%s,"
                " (SELECT array_agg(jsonb_build_object('n', i) ORDER BY i)"
                "  FROM generate_series(%s::bigint, %s) i),"
                " fair_keys => (SELECT array_agg('tenant-' || (i %% %s) ORDER BY i)"
                "               FROM generate_series(%s::bigint, %s) i))",
                (queue, start, stop - 1, keys, start, stop - 1))
    conn.execute("VACUUM ANALYZE jobq._job")


def one_call(conn: sql_loops.Conn, workload: str, payload: Jsonb) -> None:
    if workload == ENQUEUE_1:
        conn.execute("SELECT jobq.enqueue(%s, %s)", (QUEUE, payload)).fetchone()
        return
    batch = BATCH[workload]
    rows = conn.execute(sql_loops.JOBQ_CLAIM, (QUEUE, batch, "cpu")).fetchall()
    if len(rows) != batch:
        raise BenchError(f"a claim of {batch} found {len(rows)} jobs: the prefill was short")
    if batch == 1:
        conn.execute("SELECT jobq.complete(%s, %s)", (rows[0][0], rows[0][1])).fetchone()
    else:
        conn.execute(sql_loops.JOBQ_COMPLETE, ([r[0] for r in rows], [r[1] for r in rows])).fetchone()


def cpu_per_job(dsn: str, config: str, workload: str, sizes: Sizes) -> float:
    """Server CPU microseconds per job of one connection's calls."""
    batch = BATCH[workload]
    calls = max(1, sizes.calls // 10) if batch == 100 else sizes.calls
    keys = keys_of(config)
    with psycopg.connect(dsn, autocommit=True) as conn:
        needed = 0 if workload == ENQUEUE_1 else (calls + WARMUP_CALLS) * batch
        prefill(conn, keys, max(needed, keys or 0))
        payload = Jsonb(sql_loops.payload(0))
        for _ in range(WARMUP_CALLS):
            one_call(conn, workload, payload)
        before = backend_cpu_seconds(conn)
        for _ in range(calls):
            one_call(conn, workload, payload)
        spent = backend_cpu_seconds(conn) - before
    return spent / (calls * batch) * 1e6


def planned(sizes: Sizes) -> list[tuple[str, str]]:
    """(workload, configuration) pairs: enqueue A/B on the plain queues only."""
    return [(w, c) for w in WORKLOADS for c in configs(sizes) if w != ENQUEUE_1 or keys_of(c) is None]


def measure(dsn: str, sizes: Sizes, *, rounds: int) -> dict[str, Any]:
    """Every workload on every configuration, ``rounds`` times; medians and speed ratios."""
    pairs = planned(sizes)
    figures: dict[str, dict[str, list[float]]] = {}
    with psycopg.connect(dsn, autocommit=True) as admin:
        targets = install(admin, dsn)
        for round_number in range(rounds):
            shift = round_number % len(pairs)
            for workload, config in pairs[shift:] + pairs[:shift]:
                target = targets[config.split(" ")[0]] if config.endswith(" plain") else targets["current"]
                value = cpu_per_job(target, config, workload, sizes)
                figures.setdefault(workload, {}).setdefault(config, []).append(round(value, 2))
                progress(f"fair queue, round {round_number + 1}: {workload}, {config}: "
                         f"{value:,.1f} CPU µs/job")
        for number in range(3):
            admin.execute(f'DROP DATABASE "jobq_bench_fair_{number}" WITH (FORCE)')
    medians = {w: {c: statistics.median(v) for c, v in by.items()} for w, by in figures.items()}
    speeds: dict[str, dict[str, float]] = {}
    for workload, by in medians.items():
        for config, cpu in by.items():
            if config == f"{BASELINE} plain" or not cpu:
                continue
            if config == f"{BEFORE} plain":  # its column: how the current plain path compares with it
                speeds.setdefault(workload, {})[config] = round(cpu / by[PLAIN], 3) if by[PLAIN] else 0.0
                continue
            reference = by[f"{BASELINE} plain"] if config == PLAIN else by[PLAIN]
            speeds.setdefault(workload, {})[config] = round(reference / cpu, 3)
    checked = {config: min(speeds[w][config] for w in (CLAIM_1, CLAIM_100) if config in speeds[w])
               for config in GOALS if config in speeds[CLAIM_100]}
    if PLAIN in speeds.get(ENQUEUE_1, {}):  # none when its CPU time was below one clock tick (a tiny run)
        checked[PLAIN] = min(checked.get(PLAIN, 1e9), speeds[ENQUEUE_1][PLAIN])
    return {"calls": sizes.calls, "rounds": rounds, "figures": figures, "medians": medians, "speeds": speeds,
            "worst_speed": checked, "ok": all(checked[c] >= GOALS[c] for c in checked)}


def summary(result: dict[str, Any]) -> str:
    medians, speeds = result["medians"], result["speeds"]
    columns = list(medians[CLAIM_100])

    def cell(workload: str, config: str) -> str:
        if config not in medians[workload]:
            return "-"
        ratio = speeds[workload].get(config)
        return f"{medians[workload][config]:,.1f}" + (f" ({ratio:.3f})" if ratio is not None else "")

    goals = ", ".join(f"{c} >= {g}" for c, g in GOALS.items())
    worst = ", ".join(f"{c}: {v:.3f}" for c, v in result["worst_speed"].items())
    return "\n".join([
        format_table([f"server CPU µs per job (speed: plain ÷ {BASELINE}, plain ÷ {BEFORE}, fair ÷ plain), "
                      f"median of {result['rounds']}", *columns],
                     [[w, *(cell(w, c) for c in columns)] for w in medians]),
        "",
        f"worst speed ratio per goal ({goals}): {worst}: {'met' if result['ok'] else 'missed'}",
    ])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyqueue.bench.fair",
                                     description="What a fair queue's claim costs, against the plain one.")
    parser.add_argument("--calls", type=int, default=5_000,
                        help="single-job calls per measurement; batches of 100: a tenth (5,000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, configurations interleaved (3)")
    parser.add_argument("--quick", action="store_true", help="1,000 calls, one round")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"results file ({DEFAULT_JSON})")
    args = parser.parse_args(argv)
    calls, rounds = (1_000, 1) if args.quick else (args.calls, args.rounds)
    if min(calls, rounds) < 1:
        parser.error("--calls and --rounds must be at least 1")
    try:
        with database(None, LOCAL_SETTINGS) as (dsn, _mode):
            result = measure(dsn, Sizes(calls), rounds=rounds)
    except BenchError as error:
        print(f"fair queue benchmark failed: {error}", file=sys.stderr)
        return 1
    print(summary(result))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"results: {args.json}")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
