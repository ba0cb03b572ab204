"""``python -m pyqueue.bench.soak``: the hot table under long load.

On a throwaway durable local server (or ``--dsn``), with ``--workers``
``pyqueue.Worker`` processes (8):

1. capacity: jobs/s handled with a producer going as fast as it can;
2. the soak: a producer offers ``--load`` (70 %) of that capacity, steadily
   (paced ``enqueue_many`` batches), for ``--duration`` seconds (600), and
   every ``--sample`` seconds (10) the run records jobs handled per second,
   the ready backlog, ``jobq._job``'s size (table, and with its indexes), its
   live and dead tuples and autovacuum runs, and the pickup delay (enqueue
   call to handler start) p50/p99 of the jobs started in that sample;
3. the verdict against issue 16: throughput drift under 10 % (the first
   minute against the last), ``_job``'s size and dead tuples bounded (the
   last minute's peak at most twice the first minute's, after the first
   sample), p99 pickup stable (the last minute's at most twice the first's,
   or under 50 ms).

It prints the series as a table, writes it as JSON (``--json``) and draws a
chart (``--chart``, matplotlib: the ``bench`` extra). ``make bench`` runs it
after ``pyqueue bench`` (``SOAK_SECONDS``, default 600).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pyqueue
from pyqueue.bench import sql_loops, worker_loops
from pyqueue.bench.config import STEP_TIMEOUT, Config
from pyqueue.bench.harness import BenchError, Role, Run, Signals, Task, progress
from pyqueue.bench.report import format_table
from pyqueue.bench.suite import LOCAL_SETTINGS, database

DEFAULT_JSON = Path("bench-results/soak.json")
DEFAULT_CHART = Path("bench-results/soak.png")
QUEUE = f"{sql_loops.QUEUE_PREFIX}soak"
CAPACITY_WARMUP = 5.0  # seconds producer and workers run before capacity is counted
CAPACITY_WINDOW = 20.0  # seconds counted
QUOTA_MARGIN = 2.0  # the producer may offer up to this many times its planned jobs
MINUTE = 60.0
DRIFT_BOUND = 0.10  # issue 16: throughput drift under 10 %, first minute vs last
GROWTH_BOUND = 2.0  # the last minute's peak size / dead tuples / p99 at most this many times the first's
P99_FLOOR_MS = 50.0  # a p99 under this counts as stable whatever the ratio (noise on a fast machine)
CHART_SIZE = (13.0, 7.5)  # inches
CHART_DPI = 110

STATS = """
SELECT s.n_live_tup, s.n_dead_tup, s.autovacuum_count,
       pg_relation_size('jobq._job') AS table_bytes,
       pg_total_relation_size('jobq._job') AS total_bytes,
       (SELECT count(*) FROM jobq._job AS j WHERE j.queue = %s AND j.status = 'ready') AS backlog
FROM pg_stat_user_tables AS s
WHERE s.relid = 'jobq._job'::regclass
"""


@dataclass(frozen=True)
class Settings:
    """One soak: how long, how hard, how often it looks."""

    duration: float = 600.0
    workers: int = 8
    load: float = 0.70
    sample: float = 10.0
    batch: int = 100


# --- the processes ----------------------------------------------------------------------

def soak_producer(task: Task, signals: Signals) -> None:
    """enqueue_many at task.rate jobs/s; each payload carries its enqueue time."""
    sql_loops.produce(task, signals, lambda conn, numbers: pyqueue.enqueue_many(
        conn, task.queue, [{"n": n, "t": time.time()} for n in numbers]))


def soak_worker(task: Task, signals: Signals) -> None:
    """A worker whose handler reports its job's pickup delay (ms) and counts."""

    def handle(job: pyqueue.Job) -> None:
        sent = job.payload.get("t")
        if isinstance(sent, float):
            signals.sample((time.time() - sent) * 1000)
        signals.add(1)

    worker_loops.run_worker(task, signals, handle)


# --- measuring ---------------------------------------------------------------------------

def table_stats(conn: sql_loops.Conn) -> dict[str, int]:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    cursor = conn.execute(STATS, (QUEUE,))
    row = cursor.fetchone()
    if row is None:
        raise BenchError("pg_stat_user_tables has no row for jobq._job")
    names = [column.name for column in cursor.description or []]
    return {name: int(value or 0) for name, value in zip(names, row, strict=True)}


def capacity(dsn: str, conn: sql_loops.Conn, settings: Settings, config: Config) -> float:
    """Jobs/s end to end: a producer as fast as it can go and
    ``settings.workers`` workers, handled jobs counted over CAPACITY_WINDOW
    seconds after CAPACITY_WARMUP (the producer shares the machine with the
    workers, as it does in the soak; a drain of a pre-filled queue alone
    would promise more than producer and workers reach together)."""
    producer = Role(soak_producer, [Task(dsn, QUEUE, settings.batch, "producer", quota=10**9)], counted=False)
    consumers = Role(soak_worker, worker_loops.worker_tasks(dsn, QUEUE, settings.workers, config))
    with Run([producer, consumers], timeout=CAPACITY_WARMUP + CAPACITY_WINDOW + STEP_TIMEOUT) as run:
        outcome = run.for_duration(CAPACITY_WINDOW, warmup=CAPACITY_WARMUP)
        run.drain_samples()
    conn.execute("DELETE FROM jobq._job WHERE queue = %s", (QUEUE,))
    return outcome.jobs_per_s


def pickup(delays: list[float]) -> dict[str, float | None]:
    ordered = sorted(delays)
    if not ordered:
        return {"p50_ms": None, "p99_ms": None}
    return {"p50_ms": round(worker_loops.percentile(ordered, 0.5), 2),
            "p99_ms": round(worker_loops.percentile(ordered, 0.99), 2)}


def soak(dsn: str, conn: sql_loops.Conn, settings: Settings) -> dict[str, Any]:
    """Measure capacity, then run the steady load and sample it."""
    config = Config(batch=settings.batch)
    most = capacity(dsn, conn, settings, config)
    rate = most * settings.load
    progress(f"soak: capacity {most:,.0f} jobs/s with {settings.workers} workers; offering "
             f"{rate:,.0f} jobs/s ({settings.load:.0%}) for {settings.duration:g} s, "
             f"a sample every {settings.sample:g} s")
    sql_loops.vacuum(conn, "jobq._job")
    producer = Role(soak_producer, [Task(dsn, QUEUE, settings.batch, "producer",
                                         quota=int(rate * settings.duration * QUOTA_MARGIN) + 1, rate=rate)],
                    counted=False)
    consumers = Role(soak_worker, worker_loops.worker_tasks(dsn, QUEUE, settings.workers, config))
    samples: list[dict[str, Any]] = []
    with Run([producer, consumers], timeout=settings.duration + STEP_TIMEOUT) as run:
        last_count, last_time = 0, run.started_at
        while (elapsed := time.perf_counter() - run.started_at) < settings.duration - 0.01:
            run.sleep(min(settings.sample, settings.duration - elapsed))
            count, now = run.counted(), time.perf_counter()
            delays = [float(cast("float", d)) for d in run.drain_samples()]
            sample: dict[str, Any] = {"t_s": round(now - run.started_at, 1), "jobs": count - last_count,
                                      "jobs_per_s": round((count - last_count) / (now - last_time), 1),
                                      **table_stats(conn), **pickup(delays)}
            samples.append(sample)
            progress(f"soak: t={sample['t_s']:.0f}s {sample['jobs_per_s']:,.0f} jobs/s, backlog "
                     f"{sample['backlog']:,}, _job {sample['total_bytes'] // 1024:,} kB, "
                     f"{sample['n_dead_tup']:,} dead tuples, pickup p99 {sample['p99_ms']} ms")
            last_count, last_time = count, now
    conn.execute("DELETE FROM jobq._job WHERE queue = %s", (QUEUE,))
    return {"capacity_jobs_per_s": round(most, 1), "offered_jobs_per_s": round(rate, 1),
            "settings": settings.__dict__, "samples": samples, "verdict": verdict(samples, settings.sample)}


# --- the verdict -----------------------------------------------------------------------------

def window(samples: list[dict[str, Any]], first: bool, sample_seconds: float) -> list[dict[str, Any]]:
    """The samples of the first minute (after the first sample, which holds
    the workers' start) or of the last minute."""
    per_minute = max(1, round(MINUTE / sample_seconds))
    return samples[1:per_minute + 1] if first else samples[-per_minute:]


def peak(rows: list[dict[str, Any]], key: str) -> float:
    return max((float(r[key]) for r in rows if r[key] is not None), default=0.0)


def verdict(samples: list[dict[str, Any]], sample_seconds: float) -> dict[str, Any]:
    """The issue's criteria, each with its figures and whether it held."""
    if len(samples) < 3:
        return {"ok": False, "reason": f"{len(samples)} samples: too few for a verdict"}
    first, last = window(samples, True, sample_seconds), window(samples, False, sample_seconds)
    rate_first = statistics.fmean(float(r["jobs_per_s"]) for r in first)
    rate_last = statistics.fmean(float(r["jobs_per_s"]) for r in last)
    drift = (rate_last - rate_first) / rate_first if rate_first else 0.0
    checks: dict[str, dict[str, Any]] = {
        "throughput_drift": {"first_minute_jobs_per_s": round(rate_first, 1),
                             "last_minute_jobs_per_s": round(rate_last, 1), "drift": round(drift, 3),
                             "ok": abs(drift) < DRIFT_BOUND},
    }
    for key in ("total_bytes", "n_dead_tup", "p99_ms"):
        before, after = peak(first, key), peak(last, key)
        bounded = after <= max(before, 1.0) * GROWTH_BOUND or (key == "p99_ms" and after < P99_FLOOR_MS)
        checks[key] = {"first_minute_peak": before, "last_minute_peak": after, "ok": bounded}
    return {"ok": all(c["ok"] for c in checks.values()), **checks}


# --- output ---------------------------------------------------------------------------

def series_table(result: dict[str, Any]) -> str:
    rows = [[f"{s['t_s']:.0f}", f"{s['jobs_per_s']:,.0f}", f"{s['backlog']:,}",
             f"{s['table_bytes'] // 1024:,}", f"{s['total_bytes'] // 1024:,}",
             f"{s['n_live_tup']:,}", f"{s['n_dead_tup']:,}", str(s["autovacuum_count"]),
             str(s["p50_ms"]), str(s["p99_ms"])] for s in result["samples"]]
    return format_table(["t (s)", "jobs/s", "backlog", "_job kB", "with indexes kB", "live", "dead",
                         "autovacuums", "pickup p50 ms", "p99 ms"], rows)


def verdict_lines(result: dict[str, Any]) -> str:
    found = result["verdict"]
    if "reason" in found:
        return f"verdict: {found['reason']}"
    drift = found["throughput_drift"]
    lines = [f"throughput drift {drift['drift']:+.1%} (first minute {drift['first_minute_jobs_per_s']:,.0f} "
             f"jobs/s, last {drift['last_minute_jobs_per_s']:,.0f}; bound ±{DRIFT_BOUND:.0%}): "
             f"{'ok' if drift['ok'] else 'FAILED'}"]
    for key, what in (("total_bytes", "_job size with indexes"), ("n_dead_tup", "dead tuples"),
                      ("p99_ms", "pickup p99 (ms)")):
        check = found[key]
        lines.append(f"{what}: first-minute peak {check['first_minute_peak']:,.0f}, last-minute peak "
                     f"{check['last_minute_peak']:,.0f} (bound {GROWTH_BOUND:g} times): "
                     f"{'ok' if check['ok'] else 'FAILED'}")
    lines.append(f"verdict: {'ok' if found['ok'] else 'FAILED'}")
    return "\n".join(lines)


def write_chart(result: dict[str, Any], path: Path) -> str | None:
    """Throughput, size and dead tuples, and pickup p99 over time. Returns why
    the chart was skipped, or None."""
    try:
        import matplotlib  # noqa: PLC0415  (optional dependency)

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        return "matplotlib is not installed; pip install 'jobq[bench]' (or: pip install matplotlib)"
    samples = result["samples"]
    t = [s["t_s"] for s in samples]
    figure, (rate, size, delay) = plt.subplots(3, 1, figsize=CHART_SIZE, sharex=True)
    rate.plot(t, [s["jobs_per_s"] for s in samples], label="jobs handled/s")
    rate.axhline(result["offered_jobs_per_s"], linestyle="--", color="grey", label="offered")
    rate.set_ylabel("jobs/s")
    rate.set_ylim(bottom=0)
    rate.legend(loc="lower right")
    size.plot(t, [s["total_bytes"] / 1024 for s in samples], label="_job with indexes (kB)", color="tab:blue")
    size.set_ylabel("kB")
    size.set_ylim(bottom=0)
    dead = size.twinx()
    dead.plot(t, [s["n_dead_tup"] for s in samples], color="tab:red", label="dead tuples")
    dead.set_ylabel("dead tuples")
    dead.set_ylim(bottom=0)
    size.legend(handles=[*size.get_lines(), *dead.get_lines()], loc="upper left")
    delay.plot(t, [s["p99_ms"] for s in samples], label="pickup p99")
    delay.plot(t, [s["p50_ms"] for s in samples], label="pickup p50")
    delay.set_ylabel("ms")
    delay.set_xlabel("seconds")
    delay.set_ylim(bottom=0)
    delay.legend(loc="upper right")
    settings = result["settings"]
    figure.suptitle(f"jobq soak: {settings['workers']} workers, {result['offered_jobs_per_s']:,.0f} jobs/s "
                    f"offered ({settings['load']:.0%} of {result['capacity_jobs_per_s']:,.0f}), "
                    f"{settings['duration']:g} s")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=CHART_DPI)
    plt.close(figure)
    return None


# --- command line -------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyqueue.bench.soak",
                                     description="The hot table under long load (issue 16).")
    parser.add_argument("--dsn", help="a database with jobq installed (default: a throwaway local server)")
    parser.add_argument("--duration", type=float, default=Settings.duration,
                        help="seconds of steady load (600)")
    parser.add_argument("--workers", type=int, default=Settings.workers, help="worker processes (8)")
    parser.add_argument("--load", type=float, default=Settings.load,
                        help="fraction of capacity offered (0.7)")
    parser.add_argument("--sample", type=float, default=Settings.sample, help="seconds per sample (10)")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"results file ({DEFAULT_JSON})")
    parser.add_argument("--chart", type=Path, default=DEFAULT_CHART, help=f"PNG chart ({DEFAULT_CHART})")
    args = parser.parse_args(argv)
    if args.duration < 3 * args.sample or args.sample <= 0 or args.workers < 1 or not 0 < args.load <= 1:
        parser.error("need --duration >= 3 samples, --sample > 0, --workers >= 1 and 0 < --load <= 1")
    settings = Settings(duration=args.duration, workers=args.workers, load=args.load, sample=args.sample)
    try:
        with database(args.dsn, LOCAL_SETTINGS) as (dsn, _mode), sql_loops.connect(dsn) as conn:
            sql_loops.cleanup(conn)
            sql_loops.create_schema(conn)
            try:
                result = soak(dsn, conn, settings)
            finally:
                sql_loops.cleanup(conn)
    except BenchError as error:
        print(f"soak failed: {error}", file=sys.stderr)
        return 1
    print(series_table(result))
    print(verdict_lines(result))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    skipped = write_chart(result, args.chart)
    print(f"results: {args.json}; chart: {skipped or args.chart}")
    return 0 if result["verdict"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
