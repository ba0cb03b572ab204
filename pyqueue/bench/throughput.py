"""Throughput sections of ``pyqueue bench``: the warm-up, producers
(INSERT vs ``jobq.enqueue_many``) and the scaling runs; and ``Best``, the
best of repeated runs that every comparison keeps.

A shared machine drifts, so every comparison runs back to back: the floor,
then jobq, for the same shape of load, ``config.repeat`` times over, and the
best of each counts (interference only ever slows a run down).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyqueue.bench import profiling, sql_loops, worker_loops
from pyqueue.bench.config import STEP_TIMEOUT, Config
from pyqueue.bench.harness import Outcome, progress, ratio

FLOOR_LOOPS = (sql_loops.floor_insert, sql_loops.floor_drain)  # producer, consumer
JOBQ_LOOPS = (sql_loops.jobq_enqueue, sql_loops.jobq_drain)
WARM_UP_JOBS = 10_000  # jobs through the floor and jobq before anything is measured
SCALING_VARIANTS = {  # name: (consumer loop, what it does)
    "jobq": (sql_loops.jobq_drain, "jobq.claim(n) + jobq.complete_many"),
    "naive": (sql_loops.naive_drain, "BEGIN; SELECT … FOR UPDATE; UPDATE status; COMMIT; then DELETE"),
    "skip_locked": (sql_loops.skip_locked_drain, "the naive queue with SKIP LOCKED added, nothing else"),
}

Conn = sql_loops.Conn
FLOOR_TABLE = f"{sql_loops.BENCH_SCHEMA}.floor_job"


def warm_up(dsn: str, conn: Conn, config: Config) -> None:
    """Run the floor, jobq and pyqueue's workers once, unmeasured: a fresh
    server pays for cold caches, plan caches and its first WAL segments here."""
    size = sql_loops.Size(min(config.jobs, WARM_UP_JOBS), config.batch, STEP_TIMEOUT)
    progress("warming up (not measured)")
    sql_loops.mixed_outcome(dsn, FLOOR_LOOPS, "", 2, size)
    sql_loops.mixed_outcome(dsn, JOBQ_LOOPS, sql_loops.QUEUE_PREFIX + "warm-up", 2, size)
    queue = sql_loops.QUEUE_PREFIX + "warm-up-workers"
    sql_loops.prefill_jobq(conn, queue, size.jobs)
    worker_loops.worker_drain(dsn, conn, queue, 2, config, jobs=size.jobs)
    conn.execute(f"TRUNCATE {FLOOR_TABLE}")
    sql_loops.vacuum(conn, "jobq._job", FLOOR_TABLE)


STATISTICS = ("median", "best")  # how repeated rounds become one figure


class Best:
    """Repeated runs under each key: the one that stands for them (the
    median run, or the fastest), every rate seen, and the incidents
    (deadlocks) of all of them. The median run is the lower middle one of
    an even count, so it is always a run that happened."""

    def __init__(self, statistic: str = "best") -> None:
        if statistic not in STATISTICS:
            raise ValueError(f"statistic must be one of {STATISTICS}, got {statistic!r}")
        self.statistic = statistic
        self.runs: dict[str, list[tuple[Outcome, Any]]] = {}
        self.incidents: dict[str, int] = {}

    def keep(self, key: str, outcome: Outcome, extra: Any = None) -> Outcome:
        self.runs.setdefault(key, []).append((outcome, extra))
        self.incidents[key] = self.incidents.get(key, 0) + outcome.incidents
        return outcome

    def chosen(self, key: str) -> tuple[Outcome, Any]:
        ordered = sorted(self.runs[key], key=lambda run: run[0].jobs_per_s)
        return ordered[-1] if self.statistic == "best" else ordered[(len(ordered) - 1) // 2]

    @property
    def outcomes(self) -> dict[str, Outcome]:
        return {key: self.chosen(key)[0] for key in self.runs}

    @property
    def extra(self) -> dict[str, Any]:
        return {key: self.chosen(key)[1] for key in self.runs}

    @property
    def rates(self) -> dict[str, list[float]]:
        return {key: [round(run[0].jobs_per_s, 1) for run in runs] for key, runs in self.runs.items()}

    def result(self, key: str, **more: Any) -> dict[str, Any]:
        return dict(self.chosen(key)[0].as_dict(), runs_jobs_per_s=self.rates[key], **more)


def statistic_text(config: Config) -> str:
    """How the rounds of a comparison became its figure, in words."""
    if config.repeat == 1:
        return "one round"
    return f"{config.statistic} of {config.repeat} interleaved rounds"


def measure(label: str, step: Callable[..., Outcome], *args: Any) -> Outcome:
    """Run one measurement and report it."""
    outcome = step(*args)
    progress(f"{label}: {outcome.jobs_per_s:,.0f} jobs/s")
    return outcome


def enqueue_section(dsn: str, conn: Conn, config: Config) -> dict[str, Any]:
    """``config.connections`` producers inserting ``config.jobs`` jobs in
    batches: the floor's INSERT … SELECT unnest($1::jsonb[]) (with its one
    NOTIFY per statement, as jobq sends) against jobq.enqueue_many,
    back to back, ``config.repeat`` rounds; the best of each counts."""
    queue = sql_loops.QUEUE_PREFIX + "enqueue"
    size = sql_loops.Size(config.jobs, config.batch, STEP_TIMEOUT)
    conns = config.connections
    best = Best(config.statistic)
    for round_number in range(1, config.repeat + 1):
        progress(f"enqueue, round {round_number} of {config.repeat}")
        conn.execute(f"TRUNCATE {FLOOR_TABLE}")
        conn.execute("DELETE FROM jobq._job WHERE queue = %s", (queue,))
        sql_loops.vacuum(conn, "jobq._job", FLOOR_TABLE)
        best.keep("floor", measure("floor: INSERT … unnest", sql_loops.produce_outcome,
                                   dsn, sql_loops.floor_insert, "", conns, size))
        best.keep("jobq", measure("jobq: enqueue_many", sql_loops.produce_outcome,
                                  dsn, sql_loops.jobq_enqueue, queue, conns, size))
    conn.execute(f"TRUNCATE {FLOOR_TABLE}")
    conn.execute("DELETE FROM jobq._job WHERE queue = %s", (queue,))
    floor = best.outcomes["floor"].jobs_per_s
    return {"floor": best.result("floor"),
            "jobq": best.result("jobq", ratio_to_floor=ratio(best.outcomes["jobq"].jobs_per_s, floor)),
            "connections": conns, "jobs": config.jobs, "batch": config.batch, "repeat": config.repeat,
            "statistic": statistic_text(config)}


def server_ms_per_call(conn: Conn, before: profiling.FunctionStats | None) -> dict[str, float] | None:
    """Server milliseconds per call of jobq.claim and jobq.complete_many
    since ``before`` (None without track_functions): does a claim get
    dearer as consumers are added?"""
    calls = profiling.function_calls_since(conn, before)
    if not calls:
        return None
    return {name.split("(")[0]: c["total_ms_per_call"] for name, c in calls.items()
            if name.startswith(("jobq.claim(text,", "jobq.complete_many("))}


def scaling_section(dsn: str, conn: Conn, config: Config, drain_rate: float) -> dict[str, Any]:
    """Throughput against consumers for jobq's claim, the naive claim and the
    naive claim with SKIP LOCKED, interleaved point by point and variant by
    variant, each taking from a full queue during a time window; the best
    of ``config.scaling_repeat`` rounds counts."""
    queue = sql_loops.QUEUE_PREFIX + "scale"
    naive_table = f"{sql_loops.BENCH_SCHEMA}.naive_job"
    # Enough jobs that no window runs dry: twice the fastest drain seen so
    # far over a whole window, plus a batch in flight per consumer.
    fastest = max(drain_rate, config.jobs / 10)
    depth = int(fastest * (config.window + config.warmup) * 2) + config.batch * max(config.scaling)
    best = Best()
    for round_number in range(1, config.scaling_repeat + 1):
        for consumers in config.scaling:
            for variant, (loop, _) in SCALING_VARIANTS.items():
                if variant == "jobq":
                    sql_loops.top_up_jobq(conn, queue, depth)
                    sql_loops.vacuum(conn, "jobq._job")
                else:
                    sql_loops.top_up_naive(conn, depth)
                    sql_loops.vacuum(conn, naive_table)
                before = profiling.function_stats(conn) if variant == "jobq" else None
                outcome = sql_loops.windowed_outcome(dsn, loop, queue, consumers, batch=config.batch,
                                                     seconds=config.window, warmup=config.warmup)
                best.keep(f"{variant}_{consumers}", outcome, server_ms_per_call(conn, before))
            rates = ", ".join(f"{variant} {best.rates[f'{variant}_{consumers}'][-1]:,.0f}"
                              for variant in SCALING_VARIANTS)
            progress(f"scaling, round {round_number} of {config.scaling_repeat}: {consumers:>2} consumers: "
                     f"{rates} jobs/s")
    conn.execute("DELETE FROM jobq._job WHERE queue = %s", (queue,))
    conn.execute(f"TRUNCATE {naive_table}")
    points: list[dict[str, Any]] = []
    for consumers in config.scaling:
        point: dict[str, Any] = {"workers": consumers}
        for variant in SCALING_VARIANTS:
            key = f"{variant}_{consumers}"
            point[f"{variant}_jobs_per_s"] = round(best.outcomes[key].jobs_per_s, 1)
            point[f"{variant}_runs_jobs_per_s"] = best.rates[key]
            if variant != "jobq":
                point[f"{variant}_deadlocks"] = best.incidents[key]
            elif best.extra[key]:
                point["jobq_server_ms_per_call"] = best.extra[key]
        points.append(point)
    return {"points": points, "variants": {name: about for name, (_, about) in SCALING_VARIANTS.items()},
            "batch": config.batch, "window_seconds": config.window, "warmup_seconds": config.warmup,
            "repeat": config.scaling_repeat, "queue_depth": depth}
