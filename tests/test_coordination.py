"""The coordination guarantees of jobq 0.2.0 under real concurrency: many
sessions (threads with their own connections, and processes killed with
SIGKILL) against the SQL API directly.

- a concurrency limit k is never exceeded, and is reached;
- serial groups never overlap and keep enqueue order, with producers racing,
  while different groups run in parallel;
- a rate limit of N starts per second holds over every 1-second window;
- a worker killed while holding a slot frees it (lease expiry + reap, or at
  once when it died inside its claim transaction);
- take(): commit makes the job done with the caller's writes, rollback puts
  it back untouched, and concurrent takers process each job exactly once;
- claim and take refuse to run outside READ COMMITTED (JQ015);
- an acknowledgement behind a stuck row lock gives up (lock_timeout 5 s).

Every time compared is the database clock (clock_timestamp()).
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from tests.coord_support import (
    IDLE_PAUSE,
    WAIT_TIMEOUT,
    Conn,
    Row,
    Threads,
    count_live,
    db_now,
    enqueue,
    enqueue_many,
    max_in_window,
    max_overlap,
    scalar,
    wait_until,
)

ROOT = Path(__file__).resolve().parent.parent
CLAIMERS = 8


@dataclass(frozen=True)
class Execution:
    """One job run by a claimer, timed by the database clock."""

    job_id: int
    group_key: str | None
    worker: str
    claim_began: datetime  # just before the claim statement
    started: datetime  # after the claim returned (the job is running)
    finished: datetime  # before the complete statement (the job still runs)


@dataclass(frozen=True)
class Work:
    """How a claimer behaves: claim 1..max_batch jobs, work a random time."""

    max_batch: int
    seconds: tuple[float, float]


class Recorder:
    """Executions collected from many threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.executions: list[Execution] = []

    def add(self, execution: Execution) -> None:
        with self._lock:
            self.executions.append(execution)

    def done(self) -> int:
        with self._lock:
            return len(self.executions)


@dataclass(frozen=True)
class Crew:
    """What the claimer threads of one test share."""

    dsn: str
    queue: str
    work: Work
    recorder: Recorder
    finished: threading.Event


def claimer(stop: threading.Event, crew: Crew, name: str, seed: int) -> None:
    """Loop claim → work (sleep) → complete until the crew is finished (or ``stop`` is set)."""
    rng = random.Random(seed)
    queue, work, recorder = crew.queue, crew.work, crew.recorder
    with psycopg.connect(crew.dsn, autocommit=True) as conn:
        while not (crew.finished.is_set() or stop.is_set()):
            began = db_now(conn)
            jobs = conn.execute(
                "SELECT id, lease_token, group_key FROM jobq.claim(%s, %s, %s)",
                (queue, rng.randint(1, work.max_batch), name),
            ).fetchall()
            if not jobs:
                time.sleep(IDLE_PAUSE)
                continue
            started = db_now(conn)
            time.sleep(rng.uniform(*work.seconds))
            for job_id, lease_token, group_key in jobs:
                end = db_now(conn)
                completed = scalar(conn, "SELECT jobq.complete(%s, %s)", (job_id, lease_token))
                assert completed is True, f"{name} lost the lease of job {job_id}"
                recorder.add(Execution(int(job_id), group_key, name, began, started, end))


def run_claimers(dsn: str, queue: str, total: int, *, work: Work, recorder: Recorder,
                 threads: Threads | None = None) -> None:
    """CLAIMERS threads (plus any already started in ``threads``) work
    ``queue`` until ``total`` jobs are done, recording into ``recorder``."""
    threads = threads or Threads()
    finished = threading.Event()
    crew = Crew(dsn, queue, work, recorder, finished)

    def watch(stop: threading.Event) -> None:
        wait_until(lambda: recorder.done() >= total or stop.is_set(), f"{total} jobs to complete")
        finished.set()

    for i in range(CLAIMERS):
        threads.start(f"claimer-{i}", claimer, crew, f"claimer-{i}", i)
    threads.start("watch", watch)
    try:
        threads.join()
    finally:
        finished.set()


def keep_history(conn: Conn, queue: str) -> None:
    """Completed jobs leave no history unless their queue keeps it (jobq 0.3.0): keep a day."""
    conn.execute("SELECT jobq.configure_queue(%s, retention => interval '1 day')", (queue,))


def completed_ids(conn: Conn, queue: str) -> list[int]:
    rows = conn.execute(
        "SELECT id FROM jobq._job_archive WHERE queue = %s AND status = 'completed' ORDER BY id", (queue,)
    ).fetchall()
    return [int(r[0]) for r in rows]


def job_json(conn: Conn, job_id: int) -> object:
    """The live row of a job, as JSON (to compare before and after)."""
    return scalar(conn, "SELECT to_jsonb(j) FROM jobq._job AS j WHERE id = %s", (job_id,))


# (a) concurrency limit ---------------------------------------------------------------------------

def test_concurrency_limit_is_never_exceeded_by_concurrent_claimers(conn: Conn, dsn: str) -> None:
    keep_history(conn, "limited")
    limit, total = 3, 60
    conn.execute("SELECT jobq.configure_queue('limited', concurrency => %s)", (limit,))
    ids = enqueue_many(conn, "limited", total)
    recorder = Recorder()
    samples: list[int] = []
    threads = Threads()

    def sample(stop: threading.Event) -> None:
        # Continuously count running jobs from a session of its own.
        with psycopg.connect(dsn, autocommit=True) as watcher:
            while not stop.is_set() and recorder.done() < total:
                running = scalar(
                    watcher, "SELECT count(*) FROM jobq._job WHERE queue = 'limited' AND status = 'running'")
                samples.append(int(running))

    threads.start("sampler", sample)
    run_claimers(dsn, "limited", total, work=Work(max_batch=3, seconds=(0.01, 0.04)), recorder=recorder,
                 threads=threads)

    assert sorted(e.job_id for e in recorder.executions) == ids, "every job ran exactly once"
    assert completed_ids(conn, "limited") == ids, "every job completed"
    overlap = max_overlap((e.started, e.finished) for e in recorder.executions)
    assert overlap <= limit, f"{overlap} executions overlapped under concurrency = {limit}"
    assert overlap == limit, f"the claimers never filled the {limit} slots (max overlap {overlap})"
    assert samples, "the sampler took no sample"
    assert max(samples) <= limit, f"sampled {max(samples)} running jobs under concurrency = {limit}"
    assert len({e.worker for e in recorder.executions}) > limit, "more claimers than slots took part"


# (b) serial groups -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Enqueued:
    job_id: int
    group_key: str
    producer: int
    committed_by: datetime  # database clock after the enqueue committed


def test_serial_groups_never_overlap_and_keep_order_with_racing_producers(conn: Conn, dsn: str) -> None:
    keep_history(conn, "serial")
    groups = [f"customer-{g}" for g in range(6)]
    producers, per_group = 2, 4
    total = len(groups) * producers * per_group
    enqueued: list[Enqueued] = []
    lock = threading.Lock()
    recorder = Recorder()
    threads = Threads()

    def produce(stop: threading.Event, producer: int) -> None:
        rng = random.Random(100 + producer)
        with psycopg.connect(dsn, autocommit=True) as pconn:
            for seq in range(per_group):
                for group in groups:
                    payload: dict[str, object] = {"producer": producer, "seq": seq, "group": group}
                    job_id = enqueue(pconn, "serial", payload, group_key=group)
                    committed = db_now(pconn)
                    with lock:
                        enqueued.append(Enqueued(job_id, group, producer, committed))
                    time.sleep(rng.uniform(0, 0.01))

    for p in range(producers):
        threads.start(f"producer-{p}", produce, p)
    run_claimers(dsn, "serial", total, work=Work(max_batch=3, seconds=(0.005, 0.02)), recorder=recorder,
                 threads=threads)

    by_id = {e.job_id: e for e in enqueued}
    runs = recorder.executions
    assert len(by_id) == total, "every enqueue added a job"
    assert sorted(e.job_id for e in runs) == sorted(by_id), "every job ran exactly once"
    assert completed_ids(conn, "serial") == sorted(by_id), "every job completed"
    per_group_runs: dict[str, list[Execution]] = defaultdict(list)
    for run in runs:
        assert run.group_key == by_id[run.job_id].group_key, "claim returned the job's group_key"
        per_group_runs[by_id[run.job_id].group_key].append(run)

    checked_pairs = 0
    for group, group_runs in per_group_runs.items():
        group_runs.sort(key=lambda r: r.started)
        overlap = max_overlap((r.started, r.finished) for r in group_runs)
        assert overlap == 1, f"{overlap} jobs of {group} ran at once"
        for producer in range(producers):
            mine = [r.job_id for r in group_runs if by_id[r.job_id].producer == producer]
            assert mine == sorted(mine), f"{group}: producer {producer}'s jobs ran out of order: {mine}"
        # No job overtook a job of its group with a lower id that had already
        # committed when it was claimed (a job not yet committed is invisible).
        for later in group_runs:
            for earlier in group_runs:
                if earlier.job_id < later.job_id and by_id[earlier.job_id].committed_by < later.claim_began:
                    checked_pairs += 1
                    assert earlier.started < later.started, (
                        f"{group}: job {later.job_id} ran before job {earlier.job_id}, "
                        "which has a lower id and was committed before the claim"
                    )
    assert checked_pairs > total, "the ordering check compared too few pairs to mean anything"
    assert max_overlap((r.started, r.finished) for r in runs) > 1, "different groups never ran in parallel"


# (c) rate limit ------------------------------------------------------------------------------------

def test_rate_limit_holds_over_every_window(conn: Conn, dsn: str) -> None:
    rate, window, duration = 5, timedelta(seconds=1), 3.5  # seconds of hammering
    conn.execute(
        "SELECT jobq.configure_queue('rated', rate_limit => %s, rate_interval => %s, "
        "retention => interval '1 hour')",
        (rate, window),
    )
    enqueue_many(conn, "rated", 100)
    threads = Threads()
    deadline = time.monotonic() + duration

    def hammer(stop: threading.Event, seed: int) -> None:
        rng = random.Random(seed)
        with psycopg.connect(dsn, autocommit=True) as wconn:
            while time.monotonic() < deadline and not stop.is_set():
                jobs = wconn.execute("SELECT id, lease_token FROM jobq.claim('rated', %s)",
                                     (rng.randint(1, 3),)).fetchall()
                for job_id, lease_token in jobs:
                    assert scalar(wconn, "SELECT jobq.complete(%s, %s)", (job_id, lease_token)) is True
                if not jobs:
                    time.sleep(IDLE_PAUSE)

    for i in range(CLAIMERS):
        threads.start(f"hammer-{i}", hammer, i)
    threads.join()

    starts = [r[0] for r in conn.execute(
        "SELECT started_at FROM jobq.jobs WHERE queue = 'rated' AND started_at IS NOT NULL").fetchall()]
    completed = scalar(conn, "SELECT count(*) FROM jobq.jobs WHERE queue = 'rated' AND status = 'completed'")
    assert completed == len(starts), "every started job completed and was kept (retention 1 hour)"
    busiest, where = max_in_window(starts, window)
    assert busiest <= rate, f"{busiest} jobs started in the 1-second window from {where} (rate_limit {rate})"
    assert busiest == rate, f"the claimers never used a full window ({busiest} < {rate})"
    assert len(starts) > 2 * rate, "the test ran for several windows"


def test_rate_limit_holds_when_a_claim_stalls_before_the_queue_lock(conn: Conn, dsn: str) -> None:
    # A claim that began before a newer claim deleted the window's old starts
    # must not count that window without them. The stall is made real: the
    # claim of ['a_side', 'rated'] counts 'a_side' (a concurrency-limited
    # queue, whose count reads jobq._taken) before 'rated', and another
    # session holds jobq._taken's ACCESS EXCLUSIVE lock, so it waits there.
    # Meanwhile, one window later, a claim of 'rated' that finds its jobs
    # row-locked starts none but deletes the first window's starts. Before
    # jobq 0.12.0 the stalled claim then counted (and stamped started_at) at
    # the time it began: it found the first window empty and started 5 more
    # jobs in it.
    rate, window = 5, timedelta(seconds=1)
    conn.execute("SELECT jobq.configure_queue('rated', rate_limit => %s, rate_interval => %s, "
                 "retention => interval '1 hour')", (rate, window))
    conn.execute("SELECT jobq.configure_queue('a_side', concurrency => 1)")
    enqueue_many(conn, "rated", 2 * rate)
    assert len(conn.execute("SELECT id FROM jobq.claim('rated', %s)", (rate,)).fetchall()) == rate
    first_start = db_now(conn)

    with psycopg.connect(dsn) as locker, psycopg.connect(dsn) as blocker, \
            psycopg.connect(dsn, autocommit=True) as stalled:
        assert len(locker.execute("SELECT id FROM jobq._job WHERE queue = 'rated' AND status = 'ready' "
                                  "FOR UPDATE").fetchall()) == rate
        blocker.execute("LOCK TABLE jobq._taken IN ACCESS EXCLUSIVE MODE")
        stalled_pid = scalar(stalled, "SELECT pg_backend_pid()")
        took: list[int] = []
        threads = Threads()
        threads.start("stalled", lambda stop: took.extend(
            r[0] for r in stalled.execute(
                "SELECT id FROM jobq.claim(ARRAY['a_side', 'rated'], %s)", (rate,)).fetchall()))
        waits = "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s"
        wait_until(lambda: scalar(conn, waits, (stalled_pid,)) is True,
                   "the stalled claim waits for jobq._taken")
        wait_until(lambda: db_now(conn) > first_start + window + timedelta(milliseconds=100),
                   "one window has passed")
        assert conn.execute("SELECT id FROM jobq.claim('rated', %s)", (rate,)).fetchall() == [], \
            "the newer claim finds every ready job row-locked"
        newer_claim = db_now(conn)
        locker.rollback()
        blocker.rollback()
        threads.join()

    assert len(took) == rate, "the stalled claim goes on once the lock is gone, and the window is free"
    starts = [r[0] for r in conn.execute(
        "SELECT started_at FROM jobq.jobs WHERE queue = 'rated' AND started_at IS NOT NULL").fetchall()]
    busiest, where = max_in_window(starts, window)
    assert busiest <= rate, f"{busiest} jobs started in the 1-second window from {where} (rate_limit {rate})"
    assert scalar(conn, "SELECT min(started_at) FROM jobq.jobs WHERE id = ANY (%s)", (took,)) > newer_claim, \
        "the stalled claim's jobs start when it counted them, after the lock"


# (d) a worker killed while holding a slot -----------------------------------------------------------

def spawn_holder(dsn: str, mode: str, queue: str, *extra: str) -> tuple[subprocess.Popen[str], int]:
    """Start a worker process that claims one job and hangs; returns it and the job id."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.coord_programs", mode, dsn, queue, *extra],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.isdigit():
        sigkill(proc)
    assert line.isdigit(), f"the {mode} worker claimed nothing (said {line!r})"
    return proc, int(line)


def sigkill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=WAIT_TIMEOUT) == -signal.SIGKILL
    if proc.stdout is not None:
        proc.stdout.close()


def claim_ids(conn: Conn, queue: str, n: int = 10) -> list[int]:
    rows = conn.execute("SELECT id FROM jobq.claim(%s, %s, 'survivor')", (queue, n)).fetchall()
    return [int(r[0]) for r in rows]


def test_worker_killed_after_its_claim_frees_its_slot_after_lease_and_reap(conn: Conn, dsn: str) -> None:
    keep_history(conn, "slot")
    conn.execute("SELECT jobq.configure_queue('slot', concurrency => 1)")
    ids = enqueue_many(conn, "slot", 4)
    proc, held = spawn_holder(dsn, "committed", "slot", "2")  # lease: 2 seconds
    try:
        assert held == ids[0]
        assert claim_ids(conn, "slot") == [], "the only slot is held by the worker"
    finally:
        sigkill(proc)
    status = scalar(conn, "SELECT status FROM jobq._job WHERE id = %s", (held,))
    assert status == "running", "a committed claim survives its worker"
    assert claim_ids(conn, "slot") == [], "until its lease expires and it is reaped, its job holds the slot"
    wait_until(lambda: scalar(conn, "SELECT jobq.reap()") == 1, "the dead worker's lease to expire (reap)")
    assert scalar(conn, "SELECT status FROM jobq._job WHERE id = %s", (held,)) == "ready"

    recorder = Recorder()
    run_claimers(dsn, "slot", len(ids), work=Work(max_batch=2, seconds=(0.0, 0.01)), recorder=recorder)
    assert sorted(e.job_id for e in recorder.executions) == ids, "the others proceed: every job ran"
    assert max_overlap((e.started, e.finished) for e in recorder.executions) == 1, "still one at a time"
    row = conn.execute("SELECT attempts, last_error FROM jobq._job_archive WHERE id = %s", (held,)).fetchone()
    assert row is not None and row[0] == 2 and "lease expired" in str(row[1]), (
        f"the reaped job ran a second attempt, with the expiry recorded: {row}"
    )


def test_worker_killed_inside_its_claim_transaction_frees_the_slot_at_once(conn: Conn, dsn: str) -> None:
    conn.execute("SELECT jobq.configure_queue('slot2', concurrency => 1)")
    ids = enqueue_many(conn, "slot2", 3)
    proc, held = spawn_holder(dsn, "open", "slot2")
    try:
        assert held == ids[0]
        assert claim_ids(conn, "slot2") == [], "while its claim transaction is open, the slot is taken"
    finally:
        sigkill(proc)
    # The server ends the dead session and rolls its transaction back: the
    # advisory lock and the row lock vanish, no reap needed.
    got: list[int] = []

    def slot_free() -> bool:
        got.extend(claim_ids(conn, "slot2", 1))
        return bool(got)

    wait_until(slot_free, "the slot to come free")
    assert got == [held], "the job the dead worker had claimed is claimed again, first"
    attempts = scalar(conn, "SELECT attempts FROM jobq._job WHERE id = %s", (held,))
    assert attempts == 1, "its rolled-back claim spent no attempt"
    assert scalar(conn, "SELECT jobq.reap()") == 0, "there was nothing to reap"


# (e) take(): exactly once inside the caller's transaction ------------------------------------------

@pytest.fixture
def invoices(conn: Conn) -> Conn:
    """A business table that take() processing writes to."""
    conn.execute(
        "CREATE TABLE invoices (job_id bigint PRIMARY KEY, customer text NOT NULL, amount int NOT NULL)")
    return conn


class Boom(Exception):
    """Raised inside a take() transaction to roll it back."""


def test_take_commit_makes_the_job_done_together_with_the_business_row(invoices: Conn, dsn: str) -> None:
    keep_history(invoices, "billing")
    job = enqueue(invoices, "billing", {"customer": "acme", "amount": 42})
    with psycopg.connect(dsn) as worker, worker.transaction():
        rows = worker.execute("SELECT id, payload, lease_token FROM jobq.take('billing', 1)").fetchall()
        assert [(r[0], r[2]) for r in rows] == [(job, None)], "take returned the job, without a lease"
        payload = rows[0][1]
        worker.execute("INSERT INTO invoices VALUES (%s, %s, %s)",
                       (job, payload["customer"], payload["amount"]))
        # Not committed yet: other sessions still see the job live and no invoice.
        assert count_live(invoices, "billing") == 1
        assert scalar(invoices, "SELECT count(*) FROM invoices") == 0
        assert claim_ids(invoices, "billing") == [], "nobody else can claim a job being taken"
    assert invoices.execute("SELECT * FROM invoices").fetchall() == [(job, "acme", 42)]
    status = invoices.execute("SELECT status FROM jobq._job_archive WHERE id = %s", (job,)).fetchone()
    assert status == ("completed",), "committed: the job is done"
    assert count_live(invoices, "billing") == 0


def test_take_rollback_puts_the_job_back_untouched_and_writes_nothing(invoices: Conn, dsn: str) -> None:
    job = enqueue(invoices, "billing", {"customer": "acme", "amount": 42})
    before = job_json(invoices, job)
    with psycopg.connect(dsn) as worker, pytest.raises(Boom), worker.transaction():
        (taken,) = worker.execute("SELECT id FROM jobq.take('billing', 1)").fetchall()
        worker.execute("INSERT INTO invoices VALUES (%s, 'acme', 42)", (taken[0],))
        raise Boom("the handler failed after writing")
    assert scalar(invoices, "SELECT count(*) FROM invoices") == 0, "no business row"
    assert job_json(invoices, job) == before, "the job is back untouched: ready, attempts unchanged"
    assert scalar(invoices, "SELECT count(*) FROM jobq._job_archive") == 0, "nothing archived"
    with psycopg.connect(dsn) as worker, worker.transaction():
        again = [r[0] for r in worker.execute("SELECT id FROM jobq.take('billing', 5)").fetchall()]
        assert again == [job], "and can be taken again"


def test_concurrent_takes_process_each_job_exactly_once(invoices: Conn, dsn: str) -> None:
    keep_history(invoices, "bulk")
    total = 150
    ids = enqueue_many(invoices, "bulk", total)
    threads = Threads()
    rolled_back: list[int] = []
    lock = threading.Lock()

    def taker(stop: threading.Event, seed: int) -> None:
        rng = random.Random(seed)
        first = True  # each taker rolls its first batch back
        with psycopg.connect(dsn) as worker:
            while not stop.is_set():
                rows: list[Row] = []
                try:
                    with worker.transaction():
                        rows = worker.execute("SELECT id, payload FROM jobq.take('bulk', %s)",
                                              (rng.randint(1, 5),)).fetchall()
                        for job_id, payload in rows:
                            worker.execute("INSERT INTO invoices VALUES (%s, %s, %s)",
                                           (job_id, f"c{seed}", payload["i"]))
                        if rows and (first or rng.random() < 0.15):
                            first = False
                            raise Boom
                except Boom:
                    with lock:
                        rolled_back.extend(int(r[0]) for r in rows)
                    continue
                if not rows:
                    if count_live(worker, "bulk") == 0:
                        return
                    worker.rollback()
                    time.sleep(IDLE_PAUSE)

    for i in range(CLAIMERS):
        threads.start(f"taker-{i}", taker, i)
    threads.join()

    rows = invoices.execute("SELECT job_id FROM invoices ORDER BY job_id").fetchall()
    processed = [int(r[0]) for r in rows]
    assert processed == ids, "every job produced exactly one business row (the primary key forbids two)"
    assert completed_ids(invoices, "bulk") == ids, "and is archived as completed"
    assert count_live(invoices, "bulk") == 0
    assert rolled_back, "some takes were rolled back, and their jobs were still processed once"
    assert set(rolled_back) <= set(processed)


# (f) claim / take outside READ COMMITTED ------------------------------------------------------------

@pytest.mark.parametrize(
    "level", [psycopg.IsolationLevel.REPEATABLE_READ, psycopg.IsolationLevel.SERIALIZABLE],
    ids=["repeatable-read", "serializable"],
)
@pytest.mark.parametrize("call", [
    "SELECT * FROM jobq.claim('iso', 1)",
    "SELECT * FROM jobq.claim(ARRAY['iso'], 1)",
    "SELECT * FROM jobq.take('iso', 1)",
], ids=["claim", "claim-array", "take"])
def test_claim_and_take_refuse_to_run_outside_read_committed(
    conn: Conn, dsn: str, level: psycopg.IsolationLevel, call: str
) -> None:
    job = enqueue(conn, "iso", {"n": 1})
    before = job_json(conn, job)
    with psycopg.connect(dsn) as worker:
        worker.isolation_level = level
        with pytest.raises(psycopg.Error) as raised:
            worker.execute(call)
        assert raised.value.sqlstate == "JQ015"
        level_name = level.name.replace("_", " ").lower()
        assert level_name in str(raised.value.diag.message_primary), "the message names the isolation level"
        assert "READ COMMITTED" in str(raised.value.diag.message_hint), "the HINT says what to do"
        worker.rollback()
        assert job_json(conn, job) == before, "the refused call changed nothing"
        # The same session at READ COMMITTED may claim.
        worker.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
        assert len(worker.execute(call).fetchall()) == 1
        worker.rollback()
    assert job_json(conn, job) == before


def test_jq015_also_for_a_session_default_of_repeatable_read(conn: Conn, dsn: str) -> None:
    enqueue(conn, "iso", {"n": 1})
    with psycopg.connect(dsn, autocommit=True) as worker:
        worker.execute("SET default_transaction_isolation = 'repeatable read'")
        with pytest.raises(psycopg.Error) as raised:
            worker.execute("SELECT * FROM jobq.claim('iso', 1)")
        assert raised.value.sqlstate == "JQ015"
    assert scalar(conn, "SELECT count(*) FROM jobq._job WHERE status = 'ready'") == 1


# (g) lock_timeout: an acknowledgement never hangs behind a stuck lock ------------------------------------

def test_complete_behind_a_stuck_row_lock_gives_up_with_lock_timeout(conn: Conn, dsn: str) -> None:
    job = enqueue(conn, "stuck", {"n": 1})
    row = conn.execute("SELECT id, lease_token FROM jobq.claim('stuck', 1, 'w')").fetchone()
    assert row is not None and row[0] == job
    with psycopg.connect(dsn) as blocker, psycopg.connect(dsn, autocommit=True) as worker:
        # Someone holds the job's row lock and never lets go (an operator's
        # forgotten transaction). The worker's own setting would wait a minute.
        blocker.execute("SELECT 1 FROM jobq._job WHERE id = %s FOR UPDATE", (job,))
        worker.execute("SET lock_timeout = 0")
        worker.execute("SET statement_timeout = '60s'")
        with pytest.raises(psycopg.Error) as raised:
            worker.execute("SELECT jobq.complete(%s, %s)", row)
        assert raised.value.sqlstate == "55P03", (
            f"complete should give up after its pinned lock_timeout: {raised.value.sqlstate} {raised.value}"
        )
        assert scalar(worker, "SHOW lock_timeout") == "0", "the pinned setting does not leak into the session"
        blocker.rollback()
        assert scalar(worker, "SELECT jobq.complete(%s, %s)", row) is True, "once the lock is gone it works"
