"""What ``python -m pyqueue.bench.cold_start`` prints: a table per W of
every system's cold and warm drain with its ratios, the Worker's start-up,
the plan ``jobq.claim`` took in a never-analyzed table, and issue 24's
goals with a line on why each missed one was missed."""

from __future__ import annotations

from typing import Any

from pyqueue.bench.cold_systems import PHASES
from pyqueue.bench.harness import ratio
from pyqueue.bench.report import format_table


def number(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def analyzed_cell(entry: dict[str, Any]) -> str:
    """When the table was analyzed, round by round: before the drain, s seconds into it, both, or not."""
    rounds = []
    for before, after in zip(entry["runs_analyzed_before"], entry["runs_analyzed_after_s"], strict=True):
        when = (["before"] if before else []) + ([f"{after:.1f} s"] if after is not None else [])
        rounds.append(" & ".join(when) or "-")
    return ", ".join(rounds)


def plan_text(plan: dict[str, Any], batch: int) -> str:
    """How the cold claim found its rows: its scans of jobq._job and their rows, and its time."""
    if "unavailable" in plan:
        return f"jobq.claim's plan in a never-analyzed table: {plan['unavailable']}"
    scans = [f"{n['node']} on {n['on']} ({n['rows']:,} rows)" for n in plan["nodes"]
             if str(n["on"] or "").startswith("_job")]
    ms = plan["lookup_ms"]
    return (f"jobq.claim(q, {batch}) in a never-analyzed table of {plan['jobs']:,} ready jobs (auto_explain, "
            f"call {plan['calls']} of one session): {', '.join(scans) or 'no scan of jobq._job found'}"
            + (f"; {ms:,.1f} ms for the statement that locks the rows" if ms is not None else ""))


def summary(results: dict[str, Any]) -> str:
    settings, server_ = results["settings"], results["server"]
    lines = [
        f"Cold start: {settings['jobs']:,} no-op jobs enqueued at once into a fresh database per system and "
        f"round (never analyzed, no warm-up), W processes started at once, batches of {results['batch']} "
        f"(pyqueue.Worker: concurrency {results['concurrency']}); warm: the same burst again once the "
        f"database drained it, VACUUMed, refilled and ANALYZEd; median of {settings['rounds']} interleaved "
        "round(s)",
        f"jobq {server_['jobq_version']}, PostgreSQL {server_['server_version']}, fsync={server_['fsync']}, "
        f"synchronous_commit={server_['synchronous_commit']}, shared_buffers={server_['shared_buffers']}, "
        f"autovacuum={server_['autovacuum']} (naptime {server_['autovacuum_naptime']})"
        + ("; held off each table until its cold drain was over" if settings["hold_autovacuum"] else ""),
    ]
    header = ["", "cold jobs/s", "÷ floor", "÷ pgmq", "warm jobs/s", "÷ floor", "÷ pgmq", "cold ÷ warm",
              "cold: autovacuum ANALYZE"]
    for w, rows in results["workers"].items():
        table = []
        for name, label in results["systems"].items():
            row = rows[name]
            cold, warm = row["cold"], row["warm"]
            table.append([label, number(cold["jobs_per_s"], 0), number(cold["ratio_to_floor"]),
                          number(cold["ratio_to_pgmq"]), number(warm["jobs_per_s"], 0),
                          number(warm["ratio_to_floor"]), number(warm["ratio_to_pgmq"]),
                          number(row["cold_vs_warm"]), analyzed_cell(cold)])
        lines += ["", format_table([f"W={w} processes", *header[1:]], table)]
        cold_ms, warm_ms = (rows["pyqueue"][phase]["startup_s"] * 1000 for phase in PHASES)
        lines.append(f"  pyqueue.Worker start-up, run() to its first job in hand (before its drain time): "
                     f"cold {cold_ms:,.0f} ms, warm {warm_ms:,.0f} ms")
    lines += ["", plan_text(results["claim_plan_cold"], results["batch"]), "", goals_text(results)]
    return "\n".join(lines)


def goals_text(results: dict[str, Any]) -> str:
    rows = [[g["label"], f"≥ {g['min']:g}", number(g["value"]), "met" if g["met"] else "NOT met"]
            for g in results["goals"].values()]
    text = "Goals (issue 24)\n" + format_table(["goal", "bound", "this run", ""], rows)
    why = reasons(results)
    return text + ("\n" + "\n".join(why) if why else "")


def reasons(results: dict[str, Any]) -> list[str]:
    """For every missed goal, what this run says about why."""
    found: list[str] = []
    for name, goal in results["goals"].items():
        if goal["met"]:
            continue
        w = name.rsplit("_w", 1)[1]
        rows = results["workers"][w]
        sql_, worker = rows["jobq_sql"], rows["pyqueue"]
        missed = f"NOT met, {goal['label']}: {number(goal['value'])} (goal ≥ {goal['min']:g})"
        if name.startswith("pyqueue_vs_pgmq"):
            python = {phase: ratio(worker[phase]["jobs_per_s"], sql_[phase]["jobs_per_s"])
                      for phase in PHASES}
            found.append(
                f"{missed}. jobq's SQL alone drained the cold burst at "
                f"{number(sql_['cold']['ratio_to_pgmq'])} of the pgmq-style loop, and the Worker at "
                f"{number(python['cold'])} of jobq's SQL (warm: {number(sql_['warm']['ratio_to_pgmq'])} "
                f"and {number(python['warm'])}).")
        else:
            row = rows[name.split("_cold_vs_warm")[0]]
            cold, warm = row["cold"], row["warm"]
            analyzed = [a for a in cold["runs_analyzed_after_s"] if a is not None]
            when = f" (after {', '.join(f'{a:.1f}' for a in analyzed)} s)" if analyzed else ""
            before = sum(1 for b in cold["runs_analyzed_before"] if b)
            found.append(
                f"{missed}: {number(cold['jobs_per_s'], 0)} jobs/s cold against "
                f"{number(warm['jobs_per_s'], 0)} warm, where the floor keeps "
                f"{number(rows['floor']['cold_vs_warm'])} and the pgmq-style loop "
                f"{number(rows['pgmq']['cold_vs_warm'])}; autovacuum analyzed jobq._job during "
                f"{len(analyzed)} of {len(cold['runs_analyzed_after_s'])} cold drain(s){when}"
                + (f", and before {before} of them began" if before else "")
                + ". See the claim's plan above.")
    return found
