"""The sync workers in this process (threads): acknowledgement semantics,
NOTIFY and scheduled wake-ups, heartbeats, opportunistic reaping, polling
without LISTEN, and recovery after the database drops the connections."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import pyqueue
from pyqueue.defaults import HEARTBEAT_APPLICATION_NAME, LISTEN_APPLICATION_NAME, WORKER_APPLICATION_NAME
from pyqueue.worker.cancel_watch import CancelWatch
from tests.worker_support import (
    WAIT_TIMEOUT,
    InThread,
    backend_pids,
    job_status,
    keep_history,
    mapping,
    scalar,
    wait_until,
)

Conn = psycopg.Connection[tuple[object, ...]]


@pytest.fixture(autouse=True)
def history(conn: Conn) -> None:
    keep_history(conn, ["a", "b", "chain", "d", "fan", "h", "it", "long", "mail", "n", "other", "p", "q", "r",
                        "s", "t", "w"])

IDLE_POLL = 60.0  # seconds: a poll interval long enough that only NOTIFY (or run_at) can explain a pickup
PICKUP_LIMIT = 10.0  # seconds: a generous bound for a pickup that polling cannot explain


@pytest.fixture
def stop() -> Iterator[threading.Event]:
    """The stop event of this test's workers; set at the end even when the test fails."""
    event = threading.Event()
    yield event
    event.set()


@pytest.fixture
def make_worker(dsn: str) -> Iterator[Callable[..., pyqueue.Worker]]:
    """Workers for this test's database; stopped at the end even when the test fails."""
    made: list[pyqueue.Worker] = []

    def make(**options: Any) -> pyqueue.Worker:
        worker = pyqueue.Worker(dsn, **options)
        made.append(worker)
        return worker

    yield make
    for worker in made:
        worker.stop()


class Recorder:
    """A handler that remembers what it ran, and when (monotonic clock)."""

    def __init__(self, fail_when: str | None = None) -> None:
        self.fail_when = fail_when
        self.lock = threading.Lock()
        self.runs: list[tuple[int, int, float]] = []  # job id, attempt, monotonic start

    def __call__(self, job: pyqueue.Job) -> None:
        with self.lock:
            self.runs.append((job.id, job.attempts, time.monotonic()))
        if self.fail_when and job.payload.get(self.fail_when):
            raise RuntimeError(f"asked to fail job {job.id}")

    def ids(self) -> list[int]:
        with self.lock:
            return [r[0] for r in self.runs]

    def started(self, job_id: int) -> float:
        with self.lock:
            return next(r[2] for r in self.runs if r[0] == job_id)


def listen_in_thread(dsn: str, queues: str | list[str], handler: Any, stop: threading.Event,
                     **options: Any) -> InThread:
    options.setdefault("handle_signals", False)
    return InThread(lambda: pyqueue.listen(dsn, queues, handler, stop=stop, **options))


def test_listen_completes_returns_and_fails_exceptions_with_the_traceback(
    conn: Conn, dsn: str, stop: threading.Event
) -> None:
    ids = pyqueue.enqueue_many(conn, "mail", [{"n": i, "fail": i % 5 == 0} for i in range(20)])
    recorder = Recorder(fail_when="fail")
    worker = listen_in_thread(dsn, "mail", recorder, stop, batch_size=7, poll_interval=0.5)
    wait_until(lambda: len(recorder.ids()) == 20, "20 jobs handled")
    stop.set()
    worker.join()
    assert sorted(recorder.ids()) == ids
    statuses = mapping(conn, "SELECT id, status FROM jobq.jobs")
    assert statuses == {i: "scheduled" if n % 5 == 0 else "completed" for n, i in enumerate(ids)}
    errors = [str(r[0]) for r in conn.execute("SELECT last_error FROM jobq._job").fetchall()]
    assert len(errors) == 4
    assert all(e.startswith("Traceback") and "RuntimeError: asked to fail job" in e for e in errors)
    assert all("in __call__" in e for e in errors)  # the handler's own frame is in it


def test_iterator_acknowledgements(conn: Conn, dsn: str) -> None:
    # Priorities fix the order the jobs come in.
    raised, failed, implicit, explicit, broke, prefetched = (
        pyqueue.enqueue(conn, "it", {"n": n}, priority=n) for n in range(6)
    )
    with pyqueue.listen(dsn, "it", batch_size=10, handle_signals=False) as jobs:
        for job in jobs:
            if job.id == raised:
                with job:
                    raise ValueError("in a with block")  # failed, logged, swallowed
            elif job.id == failed:
                assert job.fail("explicit failure") is True
            elif job.id == implicit:
                pass  # completed when the loop asks for the next job
            elif job.id == explicit:
                assert job.complete() is True
            else:
                assert job.id == broke
                break  # unacknowledged at close: released
    rows = {r[0]: r[1:] for r in conn.execute("SELECT id, status, attempts FROM jobq._job").fetchall()}
    done = mapping(conn, "SELECT id, status FROM jobq._job_archive")
    assert done == {implicit: "completed", explicit: "completed"}
    assert rows[raised] == ("ready", 1) and rows[failed] == ("ready", 1)
    assert rows[broke] == ("ready", 0) and rows[prefetched] == ("ready", 0)
    error = scalar(conn, "SELECT last_error FROM jobq._job WHERE id = %s", (raised,))
    assert "ValueError: in a with block" in error
    assert scalar(conn, "SELECT last_error FROM jobq._job WHERE id = %s", (failed,)) == "explicit failure"


def test_iterator_stops_when_asked_and_releases_what_it_holds(conn: Conn, dsn: str) -> None:
    ids = pyqueue.enqueue_many(conn, "it", [{"n": i} for i in range(5)])
    seen: list[int] = []
    jobs = pyqueue.listen(dsn, "it", batch_size=5, handle_signals=False)
    for job in jobs:
        seen.append(job.id)
        jobs.stop()  # finish this one, then end the iteration
    jobs.close()
    assert seen == ids[:1]
    assert job_status(conn, ids[0]) == "completed"
    rows = conn.execute("SELECT status, attempts FROM jobq._job ORDER BY id").fetchall()
    assert rows == [("ready", 0)] * 4


def test_stop_event_releases_prefetched_jobs(
    conn: Conn, dsn: str, stop: threading.Event
) -> None:
    ids = pyqueue.enqueue_many(conn, "q", [{"n": i} for i in range(6)])

    def handler(job: pyqueue.Job) -> None:
        stop.set()  # the loop ends after this job

    pyqueue.listen(dsn, "q", handler, batch_size=6, stop=stop, handle_signals=False)
    assert job_status(conn, ids[0]) == "completed"
    assert conn.execute("SELECT status, attempts FROM jobq._job ORDER BY id").fetchall() == [("ready", 0)] * 5


def test_an_idle_worker_wakes_on_notify(
    conn: Conn, dsn: str, stop: threading.Event
) -> None:
    recorder = Recorder()
    warmup = pyqueue.enqueue(conn, "n", {})
    worker = listen_in_thread(dsn, "n", recorder, stop, poll_interval=IDLE_POLL, reap_interval=None)
    wait_until(lambda: recorder.ids() == [warmup], "the warm-up job")
    time.sleep(0.5)  # the worker is now asleep, for up to IDLE_POLL seconds
    # A job for another queue does not wake it for nothing, one for its queue does.
    pyqueue.enqueue(conn, "other", {})
    enqueued_at = time.monotonic()
    job_id = pyqueue.enqueue(conn, "n", {})
    wait_until(lambda: job_id in recorder.ids(), "the notified job", timeout=PICKUP_LIMIT)
    assert recorder.started(job_id) - enqueued_at < PICKUP_LIMIT
    stop.set()
    worker.join()
    assert job_status(conn, job_id) == "completed"


RESPONDER_LOCKS = """
SELECT l.pid FROM pg_locks AS l
WHERE l.locktype = 'advisory' AND l.classid = 1785684596 AND l.objid::bigint = (hashtext(%s) & 4294967295)
  AND l.granted
"""


def responders(conn: Conn, queues: str) -> list[int]:
    return [int(str(r[0])) for r in conn.execute(RESPONDER_LOCKS, (queues,)).fetchall()]


def test_one_idle_worker_of_a_queue_is_its_first_responder(
    conn: Conn, dsn: str, stop: threading.Event
) -> None:
    """Of the idle workers LISTENing for the same queues, exactly one holds the
    first-responder lock (the others claim FOLLOWER_DELAY after a NOTIFY);
    when it goes away, another idle worker takes the duty over."""
    recorder = Recorder()
    others = threading.Event()
    first = listen_in_thread(dsn, ["fr", "fr2"], recorder, stop, poll_interval=IDLE_POLL, reap_interval=None)
    wait_until(lambda: len(responders(conn, "fr,fr2")) == 1, "the first worker takes the duty")
    holder = responders(conn, "fr,fr2")
    more = [listen_in_thread(dsn, ["fr2", "fr"], recorder, others, poll_interval=IDLE_POLL,
                             reap_interval=None) for _ in range(2)]
    time.sleep(1.0)
    assert responders(conn, "fr,fr2") == holder, "one responder per queue set, whatever the order given"
    job_id = pyqueue.enqueue(conn, "fr", {})
    wait_until(lambda: job_id in recorder.ids(), "the notified job", timeout=PICKUP_LIMIT)
    stop.set()
    first.join()
    later = pyqueue.enqueue(conn, "fr2", {})
    wait_until(lambda: later in recorder.ids(), "a follower picks the next job", timeout=PICKUP_LIMIT)
    wait_until(lambda: len(responders(conn, "fr,fr2")) == 1, "a follower took the duty over")
    assert responders(conn, "fr,fr2") != holder
    others.set()
    for worker in more:
        worker.join()
    assert responders(conn, "fr,fr2") == [], "the lock goes with the worker"


def test_a_scheduled_job_is_picked_up_when_due_not_before(
    conn: Conn, dsn: str, stop: threading.Event
) -> None:
    started: dict[int, datetime] = {}

    def handler(job: pyqueue.Job) -> None:
        with psycopg.connect(dsn) as own:
            started[job.id] = scalar(own, "SELECT clock_timestamp()")

    worker = listen_in_thread(dsn, "s", handler, stop, poll_interval=IDLE_POLL, reap_interval=None)
    wait_until(lambda: backend_pids(conn, LISTEN_APPLICATION_NAME), "the worker listening")
    time.sleep(0.5)
    job_id = pyqueue.enqueue(conn, "s", {}, delay=2.0)
    run_at = scalar(conn, "SELECT run_at FROM jobq._job WHERE id = %s", (job_id,))
    wait_until(lambda: job_id in started, "the scheduled job", timeout=PICKUP_LIMIT + 2)
    stop.set()
    worker.join()
    assert started[job_id] >= run_at  # never before it is due
    assert started[job_id] - run_at < timedelta(seconds=PICKUP_LIMIT)  # and not at the next poll


def test_heartbeats_keep_a_long_job_s_lease(
    conn: Conn, dsn: str, stop: threading.Event
) -> None:
    job_id = pyqueue.enqueue(conn, "long", {})
    seen: list[tuple[datetime, datetime]] = []

    def handler(job: pyqueue.Job) -> None:
        time.sleep(5.0)  # 2.5 leases
        with psycopg.connect(dsn) as own:
            seen.append((job.lease_expires_at,
                         scalar(own, "SELECT lease_expires_at FROM jobq._job WHERE id = %s", (job.id,))))

    # The worker reaps every half second itself, and so does the test: a lapsed
    # lease would be taken away at once.
    worker = listen_in_thread(dsn, "long", handler, stop, lease=timedelta(seconds=2), reap_interval=0.5)
    reaped = 0
    while job_status(conn, job_id) != "completed":
        reaped += pyqueue.reap(conn)
        assert scalar(conn, "SELECT now() - created_at FROM jobq._job_archive WHERE id = %s UNION ALL "
                            "SELECT now() - created_at FROM jobq._job WHERE id = %s",
                      (job_id, job_id)) < timedelta(seconds=60)
        time.sleep(0.2)
    stop.set()
    worker.join()
    assert reaped == 0
    assert len(seen) == 1
    claimed_expiry, expiry_at_end = seen[0]
    assert expiry_at_end - claimed_expiry >= timedelta(seconds=3)  # extended several times
    assert scalar(conn, "SELECT attempts FROM jobq.jobs WHERE id = %s", (job_id,)) == 1


def test_a_completion_waiting_in_its_batch_keeps_its_lease(conn: Conn, dsn: str) -> None:
    quick, slow = pyqueue.enqueue_many(conn, "b", [{"n": 1}, {"n": 2}])
    reaped = 0
    with pyqueue.listen(dsn, "b", batch_size=2, lease=timedelta(seconds=1), handle_signals=False,
                        reap_interval=None) as jobs:
        for job in jobs:
            if job.id == quick:
                continue  # completed, but sent with the batch, after the slow one
            deadline = time.monotonic() + 3.0  # 3 leases
            while time.monotonic() < deadline:
                reaped += pyqueue.reap(conn)
                time.sleep(0.1)
            assert job.id == slow
            jobs.stop()
    assert reaped == 0
    rows = conn.execute("SELECT id, status, attempts FROM jobq.jobs ORDER BY id").fetchall()
    assert rows == [(quick, "completed", 1), (slow, "completed", 1)]


def test_a_bad_queue_name_stops_the_worker_with_its_typed_error(dsn: str) -> None:
    with pytest.raises(pyqueue.InvalidQueueName):
        pyqueue.listen(dsn, "not a queue", print, handle_signals=False)
    worker = pyqueue.Worker(dsn)
    worker.register("not/a/queue", print)
    with pytest.raises(pyqueue.InvalidQueueName):
        worker.run(handle_signals=False)


def test_the_worker_reaps_a_dead_holder_s_job(
    conn: Conn, dsn: str, stop: threading.Event
) -> None:
    job_id = pyqueue.enqueue(conn, "r", {})
    [abandoned] = pyqueue.claim(conn, "r", lease=timedelta(seconds=1), worker="gone")
    recorder = Recorder()
    worker = listen_in_thread(dsn, "r", recorder, stop, poll_interval=IDLE_POLL, reap_interval=0.5)
    wait_until(lambda: job_id in recorder.ids(), "the abandoned job to run again")
    stop.set()
    worker.join()
    assert recorder.runs[0][:2] == (job_id, 2)
    assert abandoned.complete() is False


def test_polling_without_listen(
    conn: Conn, dsn: str, stop: threading.Event
) -> None:
    recorder = Recorder()
    thresholds: list[int | None] = []

    def handler(job: pyqueue.Job) -> None:
        recorder(job)
        with job._connection() as own:  # the worker's connection: PgBouncer-safe settings
            thresholds.append(own.prepare_threshold)

    worker = listen_in_thread(dsn, "p", handler, stop, use_listen=False, poll_interval=0.3)
    wait_until(lambda: backend_pids(conn, WORKER_APPLICATION_NAME), "the worker connected")
    ids = [pyqueue.enqueue(conn, "p", {"n": i}) for i in range(3)]
    wait_until(lambda: sorted(recorder.ids()) == ids, "the jobs, found by polling")
    assert backend_pids(conn, LISTEN_APPLICATION_NAME) == []
    stop.set()
    worker.join()
    assert scalar(conn, "SELECT count(*) FROM jobq.jobs WHERE status = 'completed'") == 3
    assert thresholds == [None, None, None]  # no prepared statements


def test_recovers_when_the_listen_connection_is_terminated(
    conn: Conn, dsn: str, stop: threading.Event
) -> None:
    recorder = Recorder()
    worker = listen_in_thread(dsn, "t", recorder, stop, poll_interval=IDLE_POLL, reap_interval=None)
    wait_until(lambda: len(backend_pids(conn, LISTEN_APPLICATION_NAME)) == 1, "the worker listening")
    [old] = backend_pids(conn, LISTEN_APPLICATION_NAME)
    assert scalar(conn, "SELECT pg_terminate_backend(%s)", (old,)) is True
    # Enqueued right away: its NOTIFY may well be lost with the connection. The worker claims as
    # soon as it sees the connection broken (whichever of its threads reads it first), long
    # before its next poll.
    job_id = pyqueue.enqueue(conn, "t", {})
    wait_until(lambda: job_id in recorder.ids(), "the job enqueued while the worker was down",
               timeout=IDLE_POLL / 2)
    # The job may come by a poll before the new LISTEN connection is up: wait for it.
    wait_until(lambda: backend_pids(conn, LISTEN_APPLICATION_NAME) not in ([], [old]),
               "a new LISTEN connection")
    new = backend_pids(conn, LISTEN_APPLICATION_NAME)
    assert len(new) == 1 and new != [old]
    stop.set()
    worker.join()


class WatchedConsumer:
    """What a CancelWatch reads: a real LISTEN connection; records being woken."""

    def __init__(self, dsn: str) -> None:
        self.listen_lock = threading.RLock()
        self._listen: psycopg.Connection[Any] | None = psycopg.connect(
            dsn, autocommit=True, application_name="watch-test")
        self._listen.execute("LISTEN watch_test")
        self.woken = threading.Event()

    def read_notes(self) -> bool:
        with self.listen_lock:
            assert self._listen is not None
            return bool(list(self._listen.notifies(timeout=0)))

    def noted_by_watch(self) -> None:
        self.woken.set()


def test_the_cancel_watch_wakes_the_loop_when_the_listen_connection_breaks(conn: Conn, dsn: str) -> None:
    """listen()'s cancel watch reads the LISTEN connection while a handler
    runs; when it is the one to find the connection broken, it wakes the loop
    (which reopens it and claims what a lost NOTIFY announced) instead of
    leaving the loop asleep until its next poll."""
    consumer = WatchedConsumer(dsn)
    watch = CancelWatch(consumer)
    watch.start()
    try:
        [pid] = backend_pids(conn, "watch-test")
        assert not consumer.woken.wait(0.3)  # nothing to say yet
        assert scalar(conn, "SELECT pg_terminate_backend(%s)", (pid,)) is True
        assert consumer.woken.wait(WAIT_TIMEOUT)
    finally:
        watch.close()
        assert consumer._listen is not None
        consumer._listen.close()


def test_recovers_after_the_database_refused_connections(
    conn: Conn, dsn: str, stop: threading.Event
) -> None:
    recorder = Recorder()
    warmup = pyqueue.enqueue(conn, "d", {})
    worker = listen_in_thread(dsn, "d", recorder, stop, poll_interval=IDLE_POLL, reap_interval=None,
                              lease=timedelta(seconds=30))
    dbname = conn.info.dbname
    # ALTER DATABASE ... ALLOW_CONNECTIONS applies to superusers too, but not from inside that database.
    with psycopg.connect(make_conninfo(dsn, dbname="postgres"), autocommit=True) as admin:
        try:
            wait_until(lambda: recorder.ids() == [warmup], "the warm-up job")
            admin.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS false')
            killed = scalar(conn, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                  "WHERE datname = current_database() AND application_name LIKE 'pyqueue-%%'")
            assert killed >= 2  # the LISTEN and the work connections
            ids = pyqueue.enqueue_many(conn, "d", [{"n": i} for i in range(5)])
            time.sleep(1.5)  # the worker retries and is refused meanwhile
            assert recorder.ids() == [warmup]
            assert backend_pids(conn, LISTEN_APPLICATION_NAME) == []
            admin.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS true')
            wait_until(lambda: sorted(recorder.ids()) == sorted([warmup, *ids]),
                       "the jobs enqueued while down")
        finally:
            admin.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS true')
            stop.set()
            worker.join()
    assert scalar(conn, "SELECT count(*) FROM jobq.jobs WHERE status = 'completed'") == 6
    assert len(backend_pids(conn, LISTEN_APPLICATION_NAME)) == 0  # closed when the worker stopped


def test_a_handler_that_enqueues_jobs(
    conn: Conn, dsn: str, stop: threading.Event
) -> None:
    with psycopg.connect(dsn, autocommit=True) as producer:

        def handler(job: pyqueue.Job) -> None:
            n = int(job.payload["n"])
            if n < 30:  # a chain, each job enqueueing the next one, and a fan-out
                pyqueue.enqueue(producer, "chain", {"n": n + 1})
            if n < 30 and n % 10 == 0:
                pyqueue.enqueue_many(producer, "chain", [{"n": 100}, {"n": 100}])

        worker = listen_in_thread(dsn, "chain", handler, stop, poll_interval=IDLE_POLL, reap_interval=None)
        pyqueue.enqueue(conn, "chain", {"n": 0})
        wait_until(lambda: scalar(conn, "SELECT count(*) FROM jobq.jobs WHERE status = 'completed'") == 37,
                   "the chain and its fan-out")
        stop.set()
        worker.join()
    assert scalar(conn, "SELECT count(*) FROM jobq.jobs") == 37


# --- Worker ------------------------------------------------------------------

def test_worker_runs_handlers_per_queue_concurrently(
    conn: Conn, dsn: str, make_worker: Callable[..., pyqueue.Worker]
) -> None:
    worker = make_worker(concurrency=4, batch_size=3, poll_interval=0.5)
    barrier = threading.Barrier(4, timeout=30)
    ran: dict[str, list[int]] = {"a": [], "b": []}
    lock = threading.Lock()

    @worker.handler("a")
    def handle_a(job: pyqueue.Job) -> None:
        if job.payload.get("together"):
            barrier.wait()  # passes only when 4 handlers run at the same time
        with lock:
            ran["a"].append(job.id)

    def handle_b(job: pyqueue.Job) -> None:
        with lock:
            ran["b"].append(job.id)
        if job.payload.get("fail"):
            raise RuntimeError("b failed")

    worker.register("b", handle_b)
    with pytest.raises(ValueError, match="already has a handler"):
        worker.register("b", handle_b)
    assert worker.queues == ["a", "b"]

    together = pyqueue.enqueue_many(conn, "a", [{"together": True}] * 4)
    a_ids = together + pyqueue.enqueue_many(conn, "a", [{"n": i} for i in range(50)])
    b_ids = pyqueue.enqueue_many(conn, "b", [{"fail": i == 0} for i in range(30)])
    runner = InThread(lambda: worker.run(handle_signals=False))
    wait_until(lambda: len(ran["a"]) + len(ran["b"]) == 84, "every job handled")
    worker.stop()
    runner.join()
    assert sorted(ran["a"]) == a_ids and sorted(ran["b"]) == b_ids
    assert not barrier.broken
    assert scalar(conn, "SELECT count(*) FROM jobq.jobs WHERE status = 'completed'") == 83
    assert "RuntimeError: b failed" in scalar(conn, "SELECT last_error FROM jobq._job WHERE id = %s",
                                              (b_ids[0],))
    # The pool is closed (a backend leaves pg_stat_activity shortly after its client).
    wait_until(lambda: backend_pids(conn, WORKER_APPLICATION_NAME) == [], "the pool's connections closed")


def test_worker_stop_finishes_running_jobs_and_releases_queued_ones(
    conn: Conn, dsn: str, make_worker: Callable[..., pyqueue.Worker]
) -> None:
    worker = make_worker(concurrency=2, batch_size=6, poll_interval=IDLE_POLL)
    started = threading.Semaphore(0)
    release = threading.Event()
    done: list[int] = []

    @worker.handler("w")
    def handle(job: pyqueue.Job) -> None:
        started.release()
        release.wait(30)
        done.append(job.id)

    ids = pyqueue.enqueue_many(conn, "w", [{"n": i} for i in range(6)])
    runner = InThread(lambda: worker.run(handle_signals=False))
    assert started.acquire(timeout=30) and started.acquire(timeout=30)
    assert scalar(conn, "SELECT count(*) FROM jobq._job WHERE status = 'running'") == 6
    worker.stop()
    release.set()
    runner.join()
    assert len(done) == 2
    assert scalar(conn, "SELECT count(*) FROM jobq.jobs WHERE status = 'completed' AND id = ANY(%s)",
                  (done,)) == 2
    rows = conn.execute("SELECT status, attempts FROM jobq._job WHERE id <> ALL(%s)", (done,)).fetchall()
    assert rows == [("ready", 0)] * 4
    assert set(done) <= set(ids)


def test_worker_handler_enqueues_and_heartbeats_through_the_pool(
    conn: Conn, dsn: str, make_worker: Callable[..., pyqueue.Worker]
) -> None:
    worker = make_worker(concurrency=3, poll_interval=IDLE_POLL, reap_interval=None)
    seen: list[int] = []

    @worker.handler("fan")
    def handle(job: pyqueue.Job) -> None:
        assert job.heartbeat() is True  # the job's own calls use the worker's pool
        seen.append(job.id)
        if job.payload["depth"] < 3:
            with psycopg.connect(dsn) as own:  # the handler's own transaction
                pyqueue.enqueue_many(own, "fan", [{"depth": job.payload["depth"] + 1}] * 2)

    pyqueue.enqueue(conn, "fan", {"depth": 0})
    runner = InThread(lambda: worker.run(handle_signals=False))
    wait_until(lambda: len(seen) == 15, "a tree of 15 jobs")
    worker.stop()
    runner.join()
    assert scalar(conn, "SELECT count(*) FROM jobq.jobs WHERE status = 'completed'") == 15


def test_worker_checks_its_settings(dsn: str) -> None:
    with pytest.raises(ValueError, match="concurrency"):
        pyqueue.Worker(dsn, concurrency=0)
    with pytest.raises(ValueError, match="batch_size"):
        pyqueue.listen(dsn, "q", batch_size=0)
    with pytest.raises(ValueError, match="at least one queue"):
        pyqueue.listen(dsn, [])
    with pytest.raises(ValueError, match="register a handler"):
        pyqueue.Worker(dsn).run()


def test_heartbeat_connection_is_used_only_when_needed(
    conn: Conn, dsn: str, stop: threading.Event
) -> None:
    recorder = Recorder()
    worker = listen_in_thread(dsn, "h", recorder, stop, poll_interval=0.5)
    pyqueue.enqueue(conn, "h", {})
    wait_until(lambda: len(recorder.ids()) == 1, "the job")
    # Short jobs under a 5-minute lease never need a heartbeat.
    assert backend_pids(conn, HEARTBEAT_APPLICATION_NAME) == []
    stop.set()
    worker.join()
