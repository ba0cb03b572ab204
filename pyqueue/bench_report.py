"""What ``pyqueue bench`` shows: the results table, the JSON file and the
PNG chart of throughput against worker count (matplotlib, optional)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

CHART_SIZE = (8.0, 5.0)  # inches
CHART_DPI = 120  # dots per inch
CHART_HEADROOM = 1.35  # y axis top, as a multiple of the highest value: room for the legend
CHART_EXTRA = "pip install 'pyqueue[bench]' (or: pip install matplotlib)"


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
        f"batch {config['batch']} jobs per statement; {config['jobs']:,} jobs per fixed-size run; "
        f"{config['connections']} connections for the SQL-only runs; {meta['seconds']} s in all",
    ])


def throughput_table(results: dict[str, Any]) -> str:
    floor, jobq, e2e = results["floor"], results["jobq_sql"], results["pyqueue_e2e"]
    conns = floor["connections"]
    rows: list[list[str]] = [
        [f"floor     INSERT, {conns} connections", rate(floor["insert"]["jobs_per_s"]), ""],
        [f"floor     DELETE … SKIP LOCKED drain, {conns} connections", rate(floor["drain"]["jobs_per_s"]),
         ""],
        ["floor     insert, then drain", rate(floor["lifecycle_jobs_per_s"]), ""],
    ]
    rows += [[f"floor     1 producer + {w} consumers", rate(v["jobs_per_s"]), ""]
             for w, v in floor["mixed"].items()]
    rows += [
        [f"jobq SQL  enqueue_many, {conns} connections", rate(jobq["enqueue"]["jobs_per_s"]),
         fraction(jobq["enqueue"]["ratio_to_floor"])],
        [f"jobq SQL  claim + complete_many, {conns} connections", rate(jobq["claim_complete"]["jobs_per_s"]),
         fraction(jobq["claim_complete"]["ratio_to_floor"])],
        ["jobq SQL  enqueue, then claim + complete", rate(jobq["lifecycle_jobs_per_s"]),
         fraction(jobq["lifecycle_ratio_to_floor"])],
    ]
    rows += [[f"jobq SQL  1 producer + {w} consumers", rate(v["jobs_per_s"]), fraction(v["ratio_to_floor"])]
             for w, v in jobq["mixed"].items()]
    rows += [[f"pyqueue   1 producer + {w} worker processes", rate(v["jobs_per_s"]),
              fraction(v["ratio_to_floor"])] for w, v in e2e["runs"].items()]
    rows += [[f"  (pyqueue vs jobq SQL, {w} consumers)", "", fraction(v["ratio_to_jobq_sql"])]
             for w, v in e2e["runs"].items()]
    notes = []
    for w, v in e2e["runs"].items():
        calls = v.get("function_calls") or {}
        claims = sum(c["calls"] for name, c in calls.items() if name.startswith("jobq.claim(text[]"))
        completes = sum(c["calls"] for name, c in calls.items() if name.startswith("jobq.complete_many("))
        if claims and completes:
            notes.append(f"pyqueue with {w} workers: {claims:,} claim calls "
                         f"({v['jobs'] / claims:.1f} jobs each), {completes:,} complete_many calls "
                         f"({v['jobs'] / completes:.1f} jobs each)")
    header = [f"workload (best of {floor['repeat']}; ratios to the floor row of the same shape)", "jobs/s",
              "vs floor"]
    table = format_table(header, rows)
    return "Throughput\n" + table + "".join(f"\n{note}" for note in notes)


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
             f"{s['n_dead_tup']:,}", f"{s['claim_idx_bytes'] // 1024:,}", f"{s['table_bytes'] // 1024:,}",
             str(s["autovacuum_count"])] for s in soak["samples"]]
    title = (f"Soak: {soak['minutes']:g} min, {soak['offered_jobs_per_s']:,.0f} jobs/s offered "
             f"({soak['load_fraction']:.0%} of the best end-to-end run), {soak['workers']} workers")
    header = ["t (s)", "jobs/s", "backlog", "dead tuples", "claim idx kB", "table kB", "autovacuums"]
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
    t = results["targets"]
    labels = {
        "e2e_ratio_to_floor": ("pyqueue end to end vs floor", "≥ {min:.0%}", "{value:.2f}"),
        "pickup_p99_ms": ("pickup latency p99", "< {max:g} ms", "{value:.2f} ms"),
        "throughput_32_vs_4": ("jobq at 32 consumers vs at 4", "≥ {min:.2f} x", "{value:.2f} x"),
    }
    rows = []
    for key, (label, goal, shown) in labels.items():
        entry = t[key]
        value = "not measured" if entry["value"] is None else shown.format(**entry)
        rows.append([label, goal.format(**entry), value, "met" if entry["met"] else "NOT met"])
    return "Targets (issue 6)\n" + format_table(["target", "goal", "this run", ""], rows, left=1)


def format_results(results: dict[str, Any]) -> str:
    """The readable report printed on stdout."""
    parts = [headline(results), throughput_table(results), latency_table(results), scaling_table(results),
             soak_table(results), profile_table(results), targets_table(results)]
    problems = results["meta"].get("cleanup_problems")
    if problems:
        parts.append("Cleanup: " + "; ".join(problems))
    return "\n\n".join(parts)


def write_json(results: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2, allow_nan=False) + "\n")


def write_chart(results: dict[str, Any], path: Path) -> str | None:
    """Draw throughput against consumer count, jobq vs naive (and the
    pyqueue end-to-end runs). Returns why it was skipped, or None."""
    try:
        import matplotlib  # noqa: PLC0415  (optional dependency)

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        return f"matplotlib is not installed; {CHART_EXTRA}"
    points = results["scaling"]["points"]
    workers = [p["workers"] for p in points]
    figure, axes = plt.subplots(figsize=CHART_SIZE)
    axes.plot(workers, [p["jobq_jobs_per_s"] for p in points], marker="o",
              label="jobq: claim + complete_many (SQL)")
    axes.plot(workers, [p["naive_jobs_per_s"] for p in points], marker="s",
              label="naive: SELECT … FOR UPDATE (no SKIP LOCKED) + UPDATE")
    axes.plot(workers, [p["skip_locked_jobs_per_s"] for p in points], marker="x", linestyle=":",
              label="the naive queue with SKIP LOCKED added")
    runs = results["pyqueue_e2e"]["runs"]
    if runs:
        axes.plot([int(w) for w in runs], [v["jobs_per_s"] for v in runs.values()], marker="^",
                  linestyle="none", markersize=9, label="pyqueue end to end (producer + worker processes)")
    axes.axhline(results["floor"]["drain"]["jobs_per_s"], color="grey", linestyle="--", linewidth=1,
                 label="floor: DELETE … SKIP LOCKED drain")
    axes.set_xscale("log", base=2)
    axes.set_xticks(workers, [str(w) for w in workers])
    axes.set_xlabel("consumers (connections / worker processes)")
    axes.set_ylabel("jobs/s")
    plotted = [p[f"{v}_jobs_per_s"] for p in points for v in ("jobq", "naive", "skip_locked")]
    axes.set_ylim(0, max([*plotted, results["floor"]["drain"]["jobs_per_s"]]) * CHART_HEADROOM)
    server = results["meta"]["server"]
    axes.set_title(f"jobq throughput vs consumers — PostgreSQL {server['server_version']}, "
                   f"{results['meta']['client']['cpu_count']} CPUs, batch {results['scaling']['batch']}",
                   fontsize=10)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8, loc="upper right")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, dpi=CHART_DPI)
    plt.close(figure)
    return None
