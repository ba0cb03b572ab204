"""What ``pyqueue bench`` prints: the results tables and the goals of
issue 11 met or not; and the JSON file. The chart is ``bench.chart``."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pyqueue.bench.workflows import workflow_table

ROW_LABELS = {  # drain rows as printed
    "floor": "floor: DELETE … SKIP LOCKED LIMIT n",
    "pgmq": "pgmq-style: UPDATE vt (visibility), then DELETE",
    "jobq_sql": "jobq SQL: claim(n) + complete_many",
    "pyqueue": "pyqueue.Worker(batch_size=n), default mode",
    "pyqueue_in_txn": "pyqueue.Worker, in_transaction=True",
}
SINGLE_LABELS = {
    "floor": "floor: DELETE … SKIP LOCKED LIMIT n",
    "jobq_claim_complete": "jobq: claim(n) + complete_many",
    "jobq_take": "jobq: BEGIN; take(q, n); COMMIT",
}


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> str:
    """Columns under a header and a rule: the first ``left`` columns
    aligned to the left (labels), the rest to the right (numbers)."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(cell.ljust(width) if k < left else cell.rjust(width)
                         for k, (cell, width) in enumerate(zip(cells, widths, strict=True))).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(row) for row in rows)])


def rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def fraction(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.2f}"


def headline(results: dict[str, Any]) -> str:
    meta = results["meta"]
    server = meta["server"]
    config = meta["config"]
    where = "throwaway local server" if meta["mode"] == "local" else "the database given with --dsn"
    return "\n".join([
        f"jobq {server['jobq_version']} benchmark on {where}: PostgreSQL {server['server_version']}, "
        f"fsync={server['fsync']}, synchronous_commit={server['synchronous_commit']}, "
        f"shared_buffers={server['shared_buffers']}; client CPUs: {meta['client']['cpu_count']}",
        f"batch {config['batch']} jobs per statement; every comparison: {config['statistic']} of "
        f"{config['repeat']} interleaved rounds; {meta['seconds']} s in all",
    ])


def short_signature(name: str) -> str:
    """``jobq.claim(text[],integer,text,interval)`` → ``jobq.claim(text[])``."""
    return name.split(",", 1)[0].rstrip(")") + ")" if "(" in name else name


def drain_table(results: dict[str, Any]) -> str:
    drain = results["drain"]
    by_workers = drain["workers"]
    header = ["drain row"]
    for w in by_workers:
        header += [f"W={w} jobs/s", "÷ floor", "÷ pgmq"]
    rows = []
    for row, label in ROW_LABELS.items():
        cells = [label]
        for found in by_workers.values():
            entry = found[row]
            if not entry.get("available", True):
                cells += ["n/a", "", ""]
                continue
            cells += [rate(entry["jobs_per_s"]), fraction(entry["ratio_to_floor"]),
                      fraction(entry["ratio_to_pgmq"])]
        rows.append(cells)
    title = (f"Drain: {drain['jobs']:,} pre-filled no-op jobs, batch {drain['batch']}, W processes "
             f"(pyqueue: one Worker of {drain['concurrency_per_process']} threads per process, timed until "
             f"every job is acknowledged); {drain['statistic']}")
    lines = [title, format_table(header, rows)]
    for w, found in by_workers.items():
        for row in ("pyqueue", "pyqueue_in_txn"):
            entry = found[row]
            if entry.get("available", True) and entry.get("handled_jobs_per_s"):
                calls = "".join(
                    f"; {short_signature(name)}: {c['calls']:,} calls, {c['jobs_per_call']:g} jobs each"
                    for name, c in entry.get("function_calls", {}).items())
                lines.append(f"  {ROW_LABELS[row]}, W={w}: {rate(entry['handled_jobs_per_s'])} jobs/s "
                             f"until the last handler call{calls}")
    if not drain["in_transaction_worker"]:
        lines.append("  in-transaction worker: not in this pyqueue (Worker.register has no in_transaction)")
    leased = drain["leased_ahead"]
    if leased["ran"]:
        lines.append(f"The same drain, W={leased['workers']}, with {leased['leased_jobs']:,} jobs leased "
                     f"({leased['lease']}) and never finished, ahead in the queue:")
        leased_rows = [[ROW_LABELS[row], rate(leased[row]["jobs_per_s"]),
                        fraction(leased[row]["ratio_to_floor"]), fraction(leased[row]["ratio_to_plain"])]
                       for row in ("jobq_sql", "pyqueue")]
        lines.append(format_table(["leased ahead", "jobs/s", "÷ floor", "÷ plain drain"], leased_rows))
    return "\n".join(lines)


def enqueue_table(results: dict[str, Any]) -> str:
    enq = results["enqueue"]
    rows = [["floor: INSERT … SELECT unnest($1::jsonb[]) + NOTIFY", rate(enq["floor"]["jobs_per_s"]), ""],
            ["jobq: enqueue_many(q, $1::jsonb[])", rate(enq["jobq"]["jobs_per_s"]),
             fraction(enq["jobq"]["ratio_to_floor"])]]
    title = (f"Enqueue: {enq['jobs']:,} jobs in batches of {enq['batch']}, {enq['connections']} producers; "
             f"{enq['statistic']}")
    return title + "\n" + format_table(["producer", "jobs/s", "÷ floor"], rows)


def single_table(results: dict[str, Any]) -> str:
    single = results["single_connection"]
    floor = single["rows"]["floor"]["jobs_per_s"]
    rows = [[SINGLE_LABELS[name], rate(v["jobs_per_s"]), fraction(v["ratio_to_floor"])]
            for name, v in single["rows"].items()]
    title = (f"One connection alone: {single['jobs']:,} pre-filled jobs, batch {single['batch']}; "
             f"{single['statistic']} (floor {rate(floor)} jobs/s)")
    return title + "\n" + format_table(["loop", "jobs/s", "÷ floor"], rows)


def latency_table(results: dict[str, Any]) -> str:
    lat = results["pickup_latency"]
    title = (f"Pickup latency: {lat['samples']} single jobs, one every ~{lat['interval_ms']:g} ms, "
             f"{lat['workers']} idle workers woken by {lat['wake_up']}")
    keys = ("p50_ms", "p95_ms", "p99_ms", "max_ms")

    def cells(values: dict[str, Any]) -> list[str]:
        return [f"{values[k]:.2f}" for k in keys]

    rows = []
    for label, values in (("pyqueue: pyqueue.enqueue → handler start", lat),
                          ("jobq by hand: jobq.enqueue → LISTEN + claim(1) returns", lat["jobq_sql"]),
                          ("floor: INSERT + NOTIFY → LISTEN + DELETE … SKIP LOCKED returns", lat["floor"])):
        rows += [[label, *cells(values)],
                 ["  the enqueue call alone (includes its commit)", *cells(values["enqueue_call"])],
                 ["  its return → job in hand", *cells(values["after_commit"])]]
    return title + "\n" + format_table(["ms", "p50", "p95", "p99", "max"], rows)


def scaling_table(results: dict[str, Any]) -> str:
    scaling = results["scaling"]
    rows = []
    for p in scaling["points"]:
        naive = p["naive_jobs_per_s"]
        server = p.get("jobq_server_ms_per_call") or {}
        rows.append([str(p["workers"]), rate(p["jobq_jobs_per_s"]), rate(naive),
                     str(p.get("naive_deadlocks", 0)), rate(p["skip_locked_jobs_per_s"]),
                     fraction(p["jobq_jobs_per_s"] / naive) if naive else "-",
                     *(f"{server[name]:.2f}" if name in server else "-"
                       for name in ("jobq.claim", "jobq.complete_many"))])
    title = (f"Scaling, jobs/s: consumers taking batches of {scaling['batch']} from a full queue, "
             f"{scaling['window_seconds']:g} s per point\n"
             + "".join(f"  {name}: {about}\n" for name, about in scaling["variants"].items()))
    header = ["consumers", "jobq", "naive", "naive deadlocks", "skip_locked", "jobq/naive",
              "claim ms (server)", "complete_many ms"]
    return title + format_table(header, rows)


def soak_table(results: dict[str, Any]) -> str:
    soak = results["soak"]
    if not soak.get("ran"):
        return f"Soak: {soak['reason']}"
    rows = [[f"{s['t_s']:.0f}", rate(s["jobs_per_s"]) if s["t_s"] else "-", f"{s['backlog']:,}",
             f"{s['n_dead_tup']:,}", f"{s['index_bytes'] // 1024:,}", f"{s['table_bytes'] // 1024:,}",
             str(s["autovacuum_count"])] for s in soak["samples"]]
    title = (f"Soak: {soak['minutes']:g} min, {soak['offered_jobs_per_s']:,.0f} jobs/s offered "
             f"({soak['load_fraction']:.0%} of the best pyqueue drain), {soak['workers']} workers")
    header = ["t (s)", "jobs/s", "backlog", "dead tuples", "indexes kB", "table kB", "autovacuums"]
    return title + "\n" + format_table(header, rows)


def profile_table(results: dict[str, Any]) -> str:
    profile = results["profile"]
    rows = []
    for name, v in profile["round_trips"].items():
        top = list(v.get("server_us_per_call", {}).items())[:3]
        where = ", ".join(f"{fn.split('(')[0]} {us:,.0f}" for fn, us in top)
        rows.append([name, where, f"{v['mean_ms']:.3f}", f"{v['us_per_job']:.1f}"])
    header = ["statement (one connection, alone)", "server µs per call, top jobq functions (self time)",
              "ms/call", "µs/job"]
    text = "Profile\n" + format_table(header, rows, left=2)
    plan = profile["claim_plan"]
    if "unavailable" in plan:
        return text + f"\nclaim plan: {plan['unavailable']}"
    scans = ", ".join(f"{s['node']}{' using ' + s['index'] if s['index'] else ''}"
                      for s in plan["scans_on_job"])
    return text + f"\njobq.claim(n={plan['claim_n']}) finds its rows with: {scans or 'no scan found'}"


def targets_table(results: dict[str, Any]) -> str:
    rows = []
    for t in results["targets"].values():
        bound = f"≥ {t['min']:g}" if "min" in t else f"≤ {t['max']:g}"
        value = "not measured" if t["value"] is None else f"{t['value']:.2f}"
        rows.append([str(t["goal"]), t["label"], bound, value, "met" if t["met"] else "NOT met"])
    leased = results["drain"]["leased_ahead"]
    note = ""
    if leased["ran"]:
        note = (f"\n(no goal) drain with {leased['leased_jobs']:,} long leases ahead, W={leased['workers']}: "
                f"jobq SQL {fraction(leased['jobq_sql']['ratio_to_plain'])}, pyqueue "
                f"{fraction(leased['pyqueue']['ratio_to_plain'])} of the plain drain")
    header = ["#", "goal of issue 11 (ratios to rows of this run)", "goal", "this run", ""]
    return "Goals (issue 11, the fast path)\n" + format_table(header, rows, left=2) + note


def format_results(results: dict[str, Any]) -> str:
    """The readable report printed on stdout."""
    parts = [headline(results), drain_table(results), enqueue_table(results), latency_table(results),
             single_table(results), workflow_table(results), scaling_table(results), soak_table(results),
             profile_table(results), targets_table(results)]
    problems = results["meta"].get("cleanup_problems")
    if problems:
        parts.append("Cleanup: " + "; ".join(problems))
    return "\n\n".join(parts)


def write_json(results: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2, allow_nan=False) + "\n")
