"""The PNG chart of ``pyqueue bench`` (matplotlib, optional): the drain rows
side by side at each W (and with long leases ahead), and the scaling runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

CHART_SIZE = (13.0, 5.5)  # inches
CHART_DPI = 110  # dots per inch
CHART_HEADROOM = 1.25  # y axis top, as a multiple of the highest value: room for the legend
BAR_GROUP_WIDTH = 0.84  # of the space between two groups of bars
CHART_EXTRA = "pip install 'jobq[bench]' (or: pip install matplotlib)"
DRAIN_BARS = {  # drain row: legend label
    "floor": "floor: DELETE … SKIP LOCKED",
    "pgmq": "pgmq-style: UPDATE vt + DELETE",
    "jobq_sql": "jobq SQL: claim + complete_many",
    "pyqueue": "pyqueue.Worker (default)",
    "pyqueue_in_txn": "pyqueue.Worker (in transaction)",
}


def drain_groups(results: dict[str, Any]) -> tuple[list[str], dict[str, list[float]]]:
    """Group labels (one per W, and the leased-ahead drain) and, per drain
    row, its jobs/s in each group (0 where it did not run)."""
    drain = results["drain"]
    groups = [f"W={w}" for w in drain["workers"]]
    values: dict[str, list[float]] = {row: [] for row in DRAIN_BARS}
    for found in drain["workers"].values():
        for row in DRAIN_BARS:
            entry = found.get(row, {})
            values[row].append(float(entry["jobs_per_s"]) if entry.get("available", True) else 0.0)
    leased = drain["leased_ahead"]
    if leased["ran"]:
        groups.append(f"W={leased['workers']}, {leased['leased_jobs']:,}\nlong leases ahead")
        for row in DRAIN_BARS:
            values[row].append(float(leased[row]["jobs_per_s"]) if row in leased else 0.0)
    return groups, values


def write_chart(results: dict[str, Any], path: Path) -> str | None:
    """Draw the drain rows and the scaling runs. Returns why the chart was
    skipped, or None."""
    try:
        import matplotlib  # noqa: PLC0415  (optional dependency)

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        return f"matplotlib is not installed; {CHART_EXTRA}"
    figure, (bars, lines) = plt.subplots(1, 2, figsize=CHART_SIZE, gridspec_kw={"width_ratios": [3, 2]})
    groups, values = drain_groups(results)
    shown = [row for row in DRAIN_BARS if any(values[row])]
    width = BAR_GROUP_WIDTH / max(len(shown), 1)
    for k, row in enumerate(shown):
        offsets = [g + (k - (len(shown) - 1) / 2) * width for g in range(len(groups))]
        drawn = bars.bar(offsets, values[row], width, label=DRAIN_BARS[row])
        bars.bar_label(drawn, labels=[f"{v / 1000:.0f}k" if v else "" for v in values[row]], fontsize=7)
    bars.set_xticks(range(len(groups)), groups)
    bars.set_ylabel("jobs/s")
    top = max((v for row in shown for v in values[row]), default=1.0)
    bars.set_ylim(0, top * CHART_HEADROOM)
    drain = results["drain"]
    bars.set_title(f"Drain of {drain['jobs']:,} pre-filled jobs by W processes, batch {drain['batch']} "
                   f"({drain['statistic']})", fontsize=9)
    bars.legend(fontsize=7, loc="upper right", ncol=2)
    bars.grid(True, axis="y", alpha=0.3)

    points = results["scaling"]["points"]
    workers = [p["workers"] for p in points]
    lines.plot(workers, [p["jobq_jobs_per_s"] for p in points], marker="o",
               label="jobq: claim + complete_many")
    lines.plot(workers, [p["naive_jobs_per_s"] for p in points], marker="s",
               label="naive: SELECT … FOR UPDATE + UPDATE")
    lines.plot(workers, [p["skip_locked_jobs_per_s"] for p in points], marker="x", linestyle=":",
               label="naive + SKIP LOCKED")
    lines.set_xscale("log", base=2)
    lines.set_xticks(workers, [str(w) for w in workers])
    lines.set_xlabel("consumer connections")
    lines.set_ylabel("jobs/s")
    plotted = [p[f"{v}_jobs_per_s"] for p in points for v in ("jobq", "naive", "skip_locked")]
    lines.set_ylim(0, max([*plotted, 1.0]) * CHART_HEADROOM)
    lines.set_title(f"Scaling: SQL consumers on a full queue, {results['scaling']['window_seconds']:g} s "
                    "per point", fontsize=9)
    lines.legend(fontsize=7, loc="upper right")
    lines.grid(True, alpha=0.3)

    server = results["meta"]["server"]
    figure.suptitle(f"jobq {server['jobq_version']} — PostgreSQL {server['server_version']}, fsync "
                    f"{server['fsync']}, {results['meta']['client']['cpu_count']} CPUs", fontsize=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, dpi=CHART_DPI)
    plt.close(figure)
    return None
