"""Faults with real processes and real signals on the session server:
worker processes SIGKILLed at random moments while thousands of jobs flow
(a Jepsen-style queue check), a long-running transaction holding back
vacuum, and connection limits (a role's CONNECTION LIMIT below a Worker's
pool, 50 listen() workers starting at once).

Figures are printed at the end of each test (``pytest -s``) and recorded as
JSON (see tests/chaos_support.py); ``JOBQ_CHAOS_SCALE`` scales them up.
"""

from __future__ import annotations

import re
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import pyqueue
from pyqueue.defaults import HEARTBEAT_APPLICATION_NAME, LISTEN_APPLICATION_NAME, WORKER_APPLICATION_NAME
from tests.chaos_fleet import Fleet, judge
from tests.chaos_support import drop_login_role, elapsed, keep_history, report, rng, scaled
from tests.worker_support import EXECUTIONS_DDL, InThread, backend_pids, scalar, wait_until

Conn = psycopg.Connection[Any]

CRASH_QUEUE = "chaos"
CRASH_JOBS = 2000  # jobs of the quick tier (times the chaos scale)
CRASH_WORKERS = 4  # worker processes running at any time (2 cores)
CRASH_PRODUCE_SECONDS = 6.0  # the producer spreads its jobs over this long (times the scale)
CRASH_CHUNK = 50  # jobs per enqueue_many, each chunk its own transaction
KILL_EVERY = (10, 60)  # jobs completed between two kills, uniformly drawn (about 57 kills)
KILL_POLL = 0.1  # seconds between two looks at the completed count
CRASH_OPTIONS = (
    "--queue", CRASH_QUEUE,
    "--lease", "2",  # seconds: a killed worker's jobs come back quickly
    "--reap-interval", "1",  # no pg_cron here: the workers reap each other's jobs
    "--poll-interval", "1",
)
DRAIN_TIMEOUT = 300.0  # seconds: generous, the machine is shared


@pytest.fixture
def fleet_logs(tmp_path: Path) -> Path:
    logs = tmp_path / "workers"
    logs.mkdir()
    return logs


class Producer:
    """Enqueues ``total`` jobs in chunks, each chunk committed on its own, and
    remembers the ids whose commit it saw."""

    def __init__(self, dsn: str, queue: str, total: int, seconds: float, payload: dict[str, Any]) -> None:
        self.dsn = dsn
        self.queue = queue
        self.total = total
        self.pause = seconds / max(1, total // CRASH_CHUNK)
        self.payload = payload
        self.ids: list[int] = []
        self.thread = InThread(self._run)

    def _run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            sent = 0
            while sent < self.total:
                n = min(CRASH_CHUNK, self.total - sent)
                self.ids.extend(pyqueue.enqueue_many(
                    conn, self.queue, [{**self.payload, "n": sent + i} for i in range(n)]))
                sent += n
                time.sleep(self.pause)

    @property
    def done(self) -> bool:
        return not self.thread.thread.is_alive()


def test_workers_sigkilled_at_random_moments_lose_no_job(
    conn: Conn, dsn: str, fleet_logs: Path, tmp_path: Path
) -> None:
    rand, seed = rng("worker-crashes")
    conn.execute(EXECUTIONS_DDL)
    keep_history(conn, CRASH_QUEUE)
    total = scaled(CRASH_JOBS)
    started = time.monotonic()
    fleet = Fleet(dsn, fleet_logs, rand, *CRASH_OPTIONS)
    fleet.start(CRASH_WORKERS)
    stop_killing = threading.Event()
    kills: list[float] = []

    def killer() -> None:
        # Kill at random moments of the work (after a random number of completed
        # jobs, not seconds: on a loaded machine kills by the clock outpaced the
        # workers' start-ups and the fleet did less and less), and start a
        # replacement for every victim. The victim is a worker that has run a
        # job: one still starting up (importing, connecting) holds none.
        with psycopg.connect(dsn, autocommit=True) as watching:
            def completed() -> int:
                return int(str(scalar(watching, "SELECT count(*) FROM jobq._job_archive "
                                      "WHERE queue = %s AND status = 'completed'", (CRASH_QUEUE,))))

            next_kill = rand.randint(*KILL_EVERY)
            while not stop_killing.wait(KILL_POLL):
                if completed() < next_kill:
                    continue
                rows = watching.execute("SELECT DISTINCT pid FROM executions").fetchall()
                if fleet.kill_one(among={int(str(row[0])) for row in rows}) is not None:
                    kills.append(time.monotonic() - started)
                    fleet.start(1)
                    next_kill = completed() + rand.randint(*KILL_EVERY)

    try:
        producer = Producer(dsn, CRASH_QUEUE, total, CRASH_PRODUCE_SECONDS * (total / CRASH_JOBS),
                            {"sleep": 0.005})
        killing = InThread(killer)

        def all_done() -> bool:
            if fleet.crashed():
                raise AssertionError(f"a worker died on its own:\n{fleet.crashed()[0].output()}")
            return producer.done and scalar(
                conn, "SELECT count(*) FROM jobq._job_archive WHERE queue = %s AND status = 'completed'",
                (CRASH_QUEUE,)) >= total

        wait_until(all_done, f"{total} jobs completed while workers are being killed", timeout=DRAIN_TIMEOUT)
        producer.thread.join()
        stop_killing.set()
        killing.join()
        # SIGTERM only workers that are up (a process still importing dies of it).
        wait_until(lambda: len(backend_pids(conn, LISTEN_APPLICATION_NAME)) == len(fleet.running),
                   "every surviving worker listening")
        unclean = fleet.stop()
    finally:
        stop_killing.set()
        fleet.kill_all()

    verdict = judge(conn, CRASH_QUEUE, producer.ids, fleet.killed_pids)
    report("worker crashes", {
        "jobs": verdict.enqueued,
        "workers_started": len(fleet.started),
        "kills": len(kills),
        "handler_runs_cut_by_a_kill": verdict.interrupted_runs,
        "jobs_run_again": verdict.run_again,
        "duplicates": len(verdict.duplicated),
        "unexplained_duplicates": len(verdict.unexplained),
        "lost": len(verdict.lost),
        "unexpected": len(verdict.unexpected),
        "seconds": elapsed(started),
        "seed": seed,
    }, tmp_path)
    assert unclean == [], f"workers that did not exit 0 on SIGTERM: {unclean}"
    assert len(producer.ids) == total
    assert verdict.lost == []
    assert verdict.unexpected == []
    assert verdict.unexplained == [], {j: verdict.duplicated[j] for j in verdict.unexplained}
    assert verdict.acked_without_run == []
    # The run really was chaotic: kills happened throughout, some in the
    # middle of a handler, and their jobs came back through reaping.
    assert len(kills) >= 3, kills
    assert verdict.interrupted_runs > 0
    assert verdict.run_again > 0
    # Nothing is left behind: no live job, nothing dead.
    assert scalar(conn, "SELECT count(*) FROM jobq._job WHERE queue = %s", (CRASH_QUEUE,)) == 0
    assert scalar(conn, "SELECT count(*) FROM jobq._job_archive WHERE queue = %s AND status <> 'completed'",
                  (CRASH_QUEUE,)) == 0


# --- a long-running transaction holds back vacuum ------------------------------

LONG_TX_JOBS = 3000  # jobs run while the old snapshot is held (times the scale)
LONG_TX_CHUNK = 200


def vacuum(conn: Conn, table: str) -> dict[str, int]:
    """VACUUM (VERBOSE) ``table``; its tuple counts: removed, remain, not yet removable."""
    lines: list[str] = []

    def collect(diag: psycopg.errors.Diagnostic) -> None:
        lines.append(diag.message_primary or "")

    conn.add_notice_handler(collect)
    try:
        conn.execute(f"VACUUM (VERBOSE) {table}")
    finally:
        conn.remove_notice_handler(collect)
    text = "\n".join(lines)
    found = re.search(r"tuples: (\d+) removed, (\d+) remain, (\d+) are dead but not yet removable", text)
    assert found, text
    removed, remain, held = (int(g) for g in found.groups())
    return {"removed": removed, "remain": remain, "dead_not_yet_removable": held}


def dead_tuples(conn: Conn) -> int:
    return int(scalar(conn, "SELECT n_dead_tup FROM pg_stat_user_tables "
                            "WHERE relid = 'jobq._job'::regclass"))


def run_jobs(dsn: str, conn: Conn, queue: str, total: int) -> float:
    """Enqueue ``total`` jobs in chunks while a Worker (4 threads) runs them;
    seconds until all completed."""
    keep_history(conn, queue)
    seen: list[int] = []
    worker = pyqueue.Worker(dsn, concurrency=4, batch_size=20, poll_interval=0.5)
    worker.register(queue, lambda job: seen.append(job.id))
    running = InThread(lambda: worker.run(handle_signals=False))
    started = time.monotonic()
    try:
        for offset in range(0, total, LONG_TX_CHUNK):
            size = min(LONG_TX_CHUNK, total - offset)
            pyqueue.enqueue_many(conn, queue, [{"n": offset + i} for i in range(size)])
        wait_until(lambda: scalar(conn, "SELECT count(*) FROM jobq._job_archive WHERE queue = %s "
                                        "AND status = 'completed'", (queue,)) == total,
                   f"{total} jobs completed", timeout=DRAIN_TIMEOUT)
        seconds = time.monotonic() - started
    finally:
        worker.stop()
    running.join()
    assert sorted(seen) == sorted(set(seen)) and len(seen) == total
    return seconds


def test_claim_keeps_working_while_a_long_transaction_holds_back_vacuum(
    conn: Conn, dsn: str, tmp_path: Path
) -> None:
    total = scaled(LONG_TX_JOBS)
    with psycopg.connect(dsn) as old:
        # An open REPEATABLE READ transaction that has read something: its
        # snapshot keeps every row version deleted after it from vacuum.
        old.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        assert scalar(old, "SELECT count(*) FROM jobq._job") == 0
        held_seconds = run_jobs(dsn, conn, "held", total)
        held = vacuum(conn, "jobq._job")
        dead_while_held = dead_tuples(conn)
        live = scalar(conn, "SELECT count(*) FROM jobq._job WHERE queue = 'held'")
        # The old snapshot still sees none of it (it is really old).
        assert scalar(old, "SELECT count(*) FROM jobq._job") == 0
        old.rollback()
    released = vacuum(conn, "jobq._job")
    free_seconds = run_jobs(dsn, conn, "free", total)
    report("long-running transaction", {
        "jobs_while_held": total,
        "dead_not_yet_removable_while_held": held["dead_not_yet_removable"],
        "n_dead_tup_while_held": dead_while_held,
        "removed_after_release": released["removed"],
        "seconds_while_held": round(held_seconds, 1),
        "seconds_after_release": round(free_seconds, 1),
    }, tmp_path)
    # Every job completed while vacuum was held back, and the queue is empty.
    assert live == 0
    # The transaction really held vacuum back: the deleted rows of the run
    # could not be removed until it ended, and then they were.
    assert held["dead_not_yet_removable"] > 0
    assert held["removed"] == 0
    assert released["dead_not_yet_removable"] == 0
    assert released["removed"] > 0


# --- connection limits ------------------------------------------------------------

@pytest.fixture
def limited_role(conn: Conn) -> Iterator[Callable[[int], str]]:
    """LOGIN roles, members of jobq_worker, with a CONNECTION LIMIT; dropped at the end."""
    made: list[str] = []

    def make(limit: int) -> str:
        name = f"jobq_limited_{secrets.token_hex(4)}"
        conn.execute(f"CREATE ROLE {name} LOGIN CONNECTION LIMIT {limit} IN ROLE jobq_worker")
        made.append(name)
        return name

    yield make
    for name in made:
        drop_login_role(conn, name)


LIMITED_JOBS = 300
LIMITED_CONCURRENCY = 8  # the Worker's pool may grow to concurrency + 2 = 10 connections


@pytest.mark.parametrize("limit", [3, 2])
def test_a_worker_whose_role_allows_fewer_connections_than_its_pool_still_works(
    conn: Conn, dsn: str, tmp_path: Path, limited_role: Callable[[int], str], limit: int
) -> None:
    """Worker has no pool-size option: its pool may grow to concurrency + 2
    connections, plus one for LISTEN. A role whose CONNECTION LIMIT is below
    that must still get every job done (LISTEN is an optimisation: without a
    connection for it, polling does the job), never sit there forever."""
    role = limited_role(limit)
    role_dsn = make_conninfo(dsn, user=role)
    total = scaled(LIMITED_JOBS)
    ids = pyqueue.enqueue_many(conn, "limited", [{"n": i} for i in range(total)])
    seen: list[int] = []
    lock = threading.Lock()

    def handle(job: pyqueue.Job) -> None:
        time.sleep(0.002)
        with lock:
            seen.append(job.id)

    worker = pyqueue.Worker(role_dsn, concurrency=LIMITED_CONCURRENCY, batch_size=10, poll_interval=0.5)
    worker.register("limited", handle)
    running = InThread(lambda: worker.run(handle_signals=False))
    most = 0
    started = time.monotonic()
    try:
        def done() -> bool:
            nonlocal most
            most = max(most, int(scalar(conn, "SELECT count(*) FROM pg_stat_activity WHERE usename = %s",
                                        (role,))))
            return len(seen) >= total

        wait_until(done, f"{total} jobs done by a worker limited to {limit} connections")
    finally:
        worker.stop()
        running.join()
    report(f"worker under a connection limit of {limit}", {
        "jobs": total, "concurrency": LIMITED_CONCURRENCY, "pool_max": LIMITED_CONCURRENCY + 2,
        "connection_limit": limit, "most_connections_seen": most, "seconds": elapsed(started),
    }, tmp_path)
    assert sorted(seen) == sorted(ids)
    assert most <= limit


STAMPEDE_WORKERS = 50
STAMPEDE_JOBS = 1000
CONNECTIONS_PER_LISTEN = {  # what one listen() may open, by application_name
    LISTEN_APPLICATION_NAME: 1,
    WORKER_APPLICATION_NAME: 1,
    HEARTBEAT_APPLICATION_NAME: 1,  # only while it holds a job long enough to heartbeat
}


def test_fifty_listen_workers_starting_at_once_stay_within_their_connection_budget(
    conn: Conn, dsn: str, tmp_path: Path
) -> None:
    total = scaled(STAMPEDE_JOBS)
    stop = threading.Event()
    gate = threading.Barrier(STAMPEDE_WORKERS + 1)
    runs: Counter[int] = Counter()
    lock = threading.Lock()

    def handle(job: pyqueue.Job) -> None:
        time.sleep(0.001)
        with lock:
            runs[job.id] += 1

    def one_worker() -> None:
        gate.wait(30)
        pyqueue.listen(dsn, "stampede", handle, stop=stop, handle_signals=False, batch_size=5,
                       poll_interval=2.0)

    workers = [InThread(one_worker) for _ in range(STAMPEDE_WORKERS)]
    peak: Counter[str] = Counter()

    def sample() -> dict[str, int]:
        counts = {str(r[0]): int(r[1]) for r in conn.execute(
            "SELECT application_name, count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name LIKE 'pyqueue-%%' GROUP BY 1")}
        for name, n in counts.items():
            peak[name] = max(peak[name], n)
        peak["total"] = max(peak["total"], sum(counts.values()))
        return counts

    started = time.monotonic()
    try:
        gate.wait(30)  # all fifty start together
        ids = pyqueue.enqueue_many(conn, "stampede", [{"n": i} for i in range(total)])
        wait_until(lambda: sample() is not None and sum(runs.values()) >= total and
                   peak[LISTEN_APPLICATION_NAME] == STAMPEDE_WORKERS,
                   f"{total} jobs done by {STAMPEDE_WORKERS} workers", timeout=120)
    finally:
        stop.set()
        for worker in workers:
            worker.join()
    wait_until(lambda: not sample(), "every worker connection closed")
    report("fifty listen() workers at once", {
        "workers": STAMPEDE_WORKERS, "jobs": total, **{f"peak_{k}": v for k, v in sorted(peak.items())},
        "budget": STAMPEDE_WORKERS * sum(CONNECTIONS_PER_LISTEN.values()),
        "seconds": elapsed(started),
    }, tmp_path)
    assert sorted(runs) == sorted(ids) and set(runs.values()) == {1}
    for name, per_worker in CONNECTIONS_PER_LISTEN.items():
        assert peak[name] <= STAMPEDE_WORKERS * per_worker, (name, peak[name])
    assert set(peak) <= {*CONNECTIONS_PER_LISTEN, "total"}, peak
    assert peak["total"] <= STAMPEDE_WORKERS * sum(CONNECTIONS_PER_LISTEN.values())
