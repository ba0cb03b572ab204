"""Where the time goes, for ``pyqueue bench``: each statement the benchmark
drives, timed alone from one connection, with the server time of every jobq
function it called (``track_functions``); and the plan ``jobq.claim`` really
uses to find its rows, read with auto_explain from the function itself (no
copy of its SQL)."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from pyqueue.bench.sql_loops import (
    BENCH_SCHEMA,
    FLOOR_DRAIN,
    FLOOR_INSERT,
    JOBQ_CLAIM,
    JOBQ_COMPLETE,
    JOBQ_ENQUEUE,
    JOBQ_TAKE,
    QUEUE_PREFIX,
    Conn,
    payload,
    prefill_jobq,
    vacuum,
)

# --- function statistics (track_functions) -------------------------------------------

STATS_SETTLE = 0.5  # seconds for ended backends to flush their statistics
FUNCTION_STATS = """
SELECT funcid::regprocedure::text, calls, total_time, self_time
FROM pg_stat_user_functions WHERE schemaname = 'jobq'
"""
FunctionStats = dict[str, tuple[int, float, float]]


def function_stats(conn: Conn) -> FunctionStats | None:
    """Calls and milliseconds (total, self) per jobq function so far, or
    None when track_functions is off (nothing is recorded)."""
    row = conn.execute("SELECT current_setting('track_functions'), current_setting('server_version_num')::int"
                       ).fetchone()
    if row is None or row[0] == "none":
        return None
    if int(row[1]) >= 150000:
        conn.execute("SELECT pg_stat_force_next_flush()")  # this session's own calls, too
        conn.execute("SELECT 1")
    conn.execute("SELECT pg_stat_clear_snapshot()")
    return {str(r[0]): (int(r[1]), float(r[2]), float(r[3])) for r in conn.execute(FUNCTION_STATS).fetchall()}


def function_calls_since(conn: Conn, before: FunctionStats | None, settle: float = STATS_SETTLE,
                         ) -> dict[str, Any] | None:
    """Per jobq function called since ``before``: calls, and server
    milliseconds per call (total, and self: without nested jobq calls).
    ``settle``: seconds to let other sessions that just ended flush theirs."""
    if before is None:
        return None
    time.sleep(settle)
    after = function_stats(conn) or {}
    found: dict[str, Any] = {}
    for name, (calls, total, own) in sorted(after.items()):
        old_calls, old_total, old_own = before.get(name, (0, 0.0, 0.0))
        if calls > old_calls:
            n = calls - old_calls
            found[name] = {"calls": n, "total_ms_per_call": round((total - old_total) / n, 4),
                           "self_ms_per_call": round((own - old_own) / n, 4)}
    return found


REPETITIONS = 30  # timed calls per statement
PLAN_CALLS = 8  # claim calls before reading its plan: plpgsql may switch to a generic plan after 5
PLAN_QUEUE_DEPTH = 10_000  # ready jobs in the queue whose claim plan is read
AUTO_EXPLAIN_SETTINGS = {
    "auto_explain.log_min_duration": "0",
    "auto_explain.log_nested_statements": "on",
    "auto_explain.log_analyze": "on",
    "auto_explain.log_timing": "on",
    "auto_explain.log_format": "json",
    "client_min_messages": "log",
}
ENQUEUE_ONE = "SELECT jobq.enqueue(%s, %s)"
NEXT_RUN_AT = "SELECT jobq.next_run_at(ARRAY[%s])"


def timed(conn: Conn, statement: str, params: Sequence[tuple[object, ...]], jobs_per_call: int,
          ) -> tuple[dict[str, Any], list[Any]]:
    """Run ``statement`` once per parameter tuple, one connection, one at a
    time. Returns milliseconds per call (mean, median), µs per job, the
    server µs per call of each jobq function it ran (self time, without
    nested jobq calls), and every call's rows."""
    before = function_stats(conn)
    durations: list[float] = []
    results: list[Any] = []
    for args in params:
        start = time.perf_counter()
        results.append(conn.execute(statement, args).fetchall())
        durations.append((time.perf_counter() - start) * 1000)
    mean = statistics.fmean(durations)
    stats: dict[str, Any] = {"mean_ms": round(mean, 3), "p50_ms": round(statistics.median(durations), 3),
                             "us_per_job": round(mean * 1000 / jobs_per_call, 1)}
    calls = function_calls_since(conn, before, settle=0.0)
    if calls:
        stats["server_us_per_call"] = {
            name: round(c["self_ms_per_call"] * 1000 * c["calls"] / len(params), 1)
            for name, c in sorted(calls.items(), key=lambda kv: -kv[1]["self_ms_per_call"] * kv[1]["calls"])
        }
    return stats, results


def acks(claimed: Sequence[Any]) -> list[tuple[object, ...]]:
    """complete_many parameters for each claimed batch."""
    return [([r[0] for r in rows], [r[1] for r in rows]) for rows in claimed]


def round_trips(conn: Conn, batch: int, repetitions: int = REPETITIONS) -> dict[str, Any]:
    """Every statement the benchmark drives, ``batch`` jobs per call, timed
    alone; plus complete_many on a queue that keeps no history (retention
    0), and the calls an idle worker makes for nothing (claim on an empty
    queue, next_run_at)."""
    queue, bare = QUEUE_PREFIX + "profile", QUEUE_PREFIX + "profile-no-history"
    empty = QUEUE_PREFIX + "empty"
    payloads = [Jsonb(payload(k)) for k in range(batch)]
    found: dict[str, Any] = {}
    found["floor_insert"], _ = timed(conn, FLOOR_INSERT, [(payloads,)] * repetitions, batch)
    found["floor_delete_skip_locked"], _ = timed(conn, FLOOR_DRAIN, [(batch,)] * repetitions, batch)
    found["jobq_enqueue_many"], _ = timed(conn, JOBQ_ENQUEUE, [(queue, payloads)] * repetitions, batch)
    found["jobq_claim"], claimed = timed(conn, JOBQ_CLAIM, [(queue, batch, "profile")] * repetitions, batch)
    found["jobq_complete_many"], _ = timed(conn, JOBQ_COMPLETE, acks(claimed), batch)
    prefill_jobq(conn, queue, batch * repetitions)
    found["jobq_take"], _ = timed(conn, JOBQ_TAKE, [(queue, batch)] * repetitions, batch)  # autocommit
    conn.execute("SELECT jobq.configure_queue(%s, retention => interval '0')", (bare,))
    try:
        prefill_jobq(conn, bare, batch * repetitions)
        _, claimed = timed(conn, JOBQ_CLAIM, [(bare, batch, "profile")] * repetitions, batch)
        found["jobq_complete_many_retention_0"], _ = timed(conn, JOBQ_COMPLETE, acks(claimed), batch)
    finally:
        conn.execute("SELECT jobq.reset_queue(%s)", (bare,))
    found["jobq_enqueue_one"], _ = timed(conn, ENQUEUE_ONE,
                                         [(queue, Jsonb(payload(k))) for k in range(repetitions)], 1)
    idle = [(empty, 1, "idle")] * repetitions
    found["jobq_claim_one_from_empty_queue"], _ = timed(conn, JOBQ_CLAIM, idle, 1)
    found["jobq_next_run_at"], _ = timed(conn, NEXT_RUN_AT, [(empty,)] * repetitions, 1)
    found["select_1"], _ = timed(conn, "SELECT 1", [()] * repetitions, 1)
    conn.execute(f"TRUNCATE {BENCH_SCHEMA}.floor_job")
    conn.execute("DELETE FROM jobq._job WHERE queue = %s", (queue,))
    return found


def nested_plans(conn: Conn, statement: str, params: tuple[object, ...], calls: int = 1,
                 ) -> list[dict[str, Any]]:
    """The plans auto_explain logs for every statement run by the last of
    ``calls`` executions of ``statement`` (nested ones included), parsed,
    each with its ``duration_ms``. Needs the right to LOAD auto_explain
    (superuser); raises psycopg.Error otherwise."""
    messages: list[str] = []

    def keep(diag: psycopg.errors.Diagnostic) -> None:
        if diag.message_primary and "plan:" in diag.message_primary:
            messages.append(diag.message_primary)

    conn.execute("LOAD 'auto_explain'")
    for name, value in AUTO_EXPLAIN_SETTINGS.items():
        conn.execute("SELECT set_config(%s, %s, false)", (name, value))
    conn.add_notice_handler(keep)
    try:
        for _ in range(calls):
            messages.clear()
            conn.execute(statement, params).fetchall()
    finally:
        conn.remove_notice_handler(keep)
        conn.execute("SET auto_explain.log_min_duration = -1")
        conn.execute("RESET client_min_messages")
    plans: list[dict[str, Any]] = []
    for message in messages:
        head, _, body = message.partition("plan:")
        plan = json.loads(body)
        plan["duration_ms"] = float(head.replace("duration:", "").replace("ms", "").strip())
        plans.append(plan)
    return plans


def plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Every node of a plan tree, depth first."""
    found: list[dict[str, Any]] = []
    stack = [plan.get("Plan", plan)]
    while stack:
        node = stack.pop()
        found.append(node)
        stack.extend(reversed(node.get("Plans", [])))
    return found


def query_text(plan: dict[str, Any]) -> str:
    """A plan's statement on one line, comments dropped, cut short."""
    lines = [line.split("--")[0] for line in str(plan.get("Query Text", "")).splitlines()]
    return " ".join(" ".join(lines).split())[:100]


def claim_plan(conn: Conn, queue: str, n: int, calls: int = PLAN_CALLS) -> dict[str, Any]:
    """How jobq.claim(queue, n) finds its rows, from the function's own
    nested plans (rolled back): the scans on jobq._job of the statement
    that row-locks with SKIP LOCKED, the indexes they use (whatever their
    names in this jobq version), that statement's plan nodes, and the server
    time of every statement the call ran."""
    with conn.transaction(force_rollback=True):
        plans = nested_plans(conn, "SELECT * FROM jobq.claim(%s, %s, 'plan')", (queue, n), calls)
    lookup = [p for p in plans if "SKIP LOCKED" in str(p.get("Query Text", "")).upper()
              and "jobq._job" in str(p.get("Query Text", ""))]
    nodes = [node for plan in lookup for node in plan_nodes(plan)]
    scans = [
        {"node": node["Node Type"], "relation": node.get("Relation Name"), "index": node.get("Index Name"),
         "rows": node.get("Actual Rows")}
        for node in nodes
        if "Scan" in node["Node Type"] and str(node.get("Relation Name", "")).startswith("_job")
    ]
    return {
        "claim_n": n,
        "scans_on_job": scans,
        "indexes": sorted({str(s["index"]) for s in scans if s["index"]}),
        "uses_index": any(s["index"] for s in scans),
        "seq_scan_on_job": any(s["node"] == "Seq Scan" for s in scans),
        "nodes": [{"node": node["Node Type"], "on": node.get("Index Name") or node.get("Relation Name"),
                   "rows": node.get("Actual Rows"), "ms": node.get("Actual Total Time")} for node in nodes],
        "statements": [{"query": query_text(p), "ms": round(p["duration_ms"], 3)} for p in plans],
    }


def profile_section(conn: Conn, batch: int) -> dict[str, Any]:
    """Round trips per statement; and, when auto_explain may be loaded, the
    claim's plan on a queue of PLAN_QUEUE_DEPTH ready jobs."""
    found: dict[str, Any] = {"round_trips": round_trips(conn, batch)}
    queue = QUEUE_PREFIX + "plan"
    prefill_jobq(conn, queue, max(PLAN_QUEUE_DEPTH, batch * 20))
    vacuum(conn, "jobq._job")
    try:
        found["claim_plan"] = claim_plan(conn, queue, batch)
    except psycopg.Error as exc:
        found["claim_plan"] = {"unavailable": f"auto_explain could not be used: {str(exc).strip()}"}
    conn.execute("DELETE FROM jobq._job WHERE queue = %s", (queue,))
    return found
