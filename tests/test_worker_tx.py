"""In-transaction queues (``in_transaction=True``, jobq 0.3 hold/complete_held/
fail_held): the handler's writes commit with the job's removal, a failing
handler's writes roll back alone, a killed worker leaves everything as it
was, and SIGTERM lets the batch finish."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import pyqueue
from pyqueue import aio
from tests.worker_support import (
    EXECUTIONS_DDL,
    LEDGER_DDL,
    InThread,
    WorkerProcess,
    scalar,
    wait_until,
)

Conn = psycopg.Connection[tuple[object, ...]]

IDLE_POLL = 60.0  # seconds: only NOTIFY (or run_at) explains a pickup


@pytest.fixture
def ledger(conn: Conn) -> Conn:
    conn.execute(LEDGER_DDL)
    conn.execute(EXECUTIONS_DDL)
    return conn


@pytest.fixture
def spawn() -> Iterator[list[WorkerProcess]]:
    started: list[WorkerProcess] = []
    yield started
    for worker in started:
        worker.kill()


def post(job: pyqueue.TxJob) -> None:
    """Write through the job's transaction; fail (after writing) when asked."""
    job.conn.execute("INSERT INTO ledger (job_id, pid, note) VALUES (%s, 0, %s)",
                     (job.id, f"attempt {job.attempts}"))
    if job.payload.get("fail"):
        raise RuntimeError(f"asked to fail job {job.id}")


async def apost(job: pyqueue.AsyncTxJob) -> None:
    await job.conn.execute("INSERT INTO ledger (job_id, pid, note) VALUES (%s, 0, %s)",
                           (job.id, f"attempt {job.attempts}"))
    if job.payload.get("fail"):
        raise RuntimeError(f"asked to fail job {job.id}")


def live(conn: Conn, queue: str) -> int:
    return int(scalar(conn, "SELECT count(*) FROM jobq._job WHERE queue = %s", (queue,)))


def ledger_ids(conn: Conn) -> list[int]:
    return [int(str(r[0])) for r in conn.execute("SELECT job_id FROM ledger ORDER BY job_id").fetchall()]


def check_outcome(conn: Conn, queue: str, good: list[int], retried: list[int], dead: list[int]) -> None:
    """Good jobs: gone, their writes committed once. Failed jobs: none of their
    writes, a failed attempt recorded (backoff, or dead when out of attempts)."""
    assert ledger_ids(conn) == sorted(good)
    assert scalar(conn, "SELECT completed_total FROM jobq.stats WHERE queue = %s", (queue,)) == len(good)
    rows = conn.execute("SELECT id, status, attempts, last_error, run_at > now() FROM jobq.jobs "
                        "WHERE queue = %s AND status <> 'completed' ORDER BY id", (queue,)).fetchall()
    assert [r[0] for r in rows] == sorted(retried + dead)
    for job_id, status, attempts, error, later in rows:
        assert attempts == 1
        assert str(error).startswith("Traceback")
        assert f"RuntimeError: asked to fail job {job_id}" in str(error)
        if job_id in dead:
            assert status == "dead"
        else:
            assert status == "scheduled" and later  # backoff


def test_worker_commits_writes_with_the_job_and_rolls_back_only_a_failing_one(ledger: Conn, dsn: str) -> None:
    good = pyqueue.enqueue_many(ledger, "ledger", [{"n": i} for i in range(40)])
    retried = pyqueue.enqueue_many(ledger, "ledger", [{"fail": True}] * 3)
    dead = pyqueue.enqueue_many(ledger, "ledger", [{"fail": True}] * 2, max_attempts=1)
    worker = pyqueue.Worker(dsn, concurrency=3, batch_size=7, poll_interval=IDLE_POLL)
    worker.register("ledger", post, in_transaction=True)
    runner = InThread(lambda: worker.run(handle_signals=False))
    wait_until(lambda: live(ledger, "ledger") == len(retried), "every job handled")
    # And one picked up on NOTIFY alone (the poll interval is a minute).
    late = pyqueue.enqueue(ledger, "ledger", {"n": "late"})
    wait_until(lambda: late in ledger_ids(ledger), "the late job")
    worker.stop()
    runner.join()
    check_outcome(ledger, "ledger", [*good, late], retried, dead)


def test_decorator_and_leased_queues_side_by_side(ledger: Conn, dsn: str) -> None:
    worker = pyqueue.Worker(dsn, concurrency=2, batch_size=5, poll_interval=IDLE_POLL)
    leased: list[int] = []
    lock = threading.Lock()

    @worker.handler("tx", in_transaction=True)
    def handle_tx(job: pyqueue.TxJob) -> None:
        post(job)

    @worker.handler("plain")
    def handle_plain(job: pyqueue.Job) -> None:
        with lock:
            leased.append(job.id)

    assert worker.queues == ["tx", "plain"]
    with pytest.raises(ValueError, match="already has a handler"):
        worker.register("tx", handle_plain)
    tx_ids = pyqueue.enqueue_many(ledger, "tx", [{}] * 12)
    plain_ids = pyqueue.enqueue_many(ledger, "plain", [{}] * 12)
    runner = InThread(lambda: worker.run(handle_signals=False))
    wait_until(lambda: len(ledger_ids(ledger)) == 12 and len(leased) == 12, "both queues drained")
    worker.stop()
    runner.join()
    assert ledger_ids(ledger) == tx_ids and sorted(leased) == plain_ids
    assert live(ledger, "tx") == 0 and live(ledger, "plain") == 0


def test_listen_in_transaction(ledger: Conn, dsn: str) -> None:
    good = pyqueue.enqueue_many(ledger, "l", [{"n": i} for i in range(9)])
    retried = pyqueue.enqueue_many(ledger, "l", [{"fail": True}])
    stop = threading.Event()
    runner = InThread(lambda: pyqueue.listen(dsn, "l", post, batch_size=4, poll_interval=IDLE_POLL,
                                             stop=stop, handle_signals=False, in_transaction=True))
    wait_until(lambda: live(ledger, "l") == 1, "every job handled")
    stop.set()
    runner.join()
    check_outcome(ledger, "l", good, retried, [])
    with pytest.raises(ValueError, match="needs a handler"):
        pyqueue.listen(dsn, "l", in_transaction=True)  # type: ignore[call-overload]


def test_a_handler_that_swallows_a_database_error_fails_its_job(ledger: Conn, dsn: str) -> None:
    """The transaction is aborted although the handler returned: its job fails, the others commit."""
    ids = pyqueue.enqueue_many(ledger, "s", [{"n": i} for i in range(3)])

    def sloppy(job: pyqueue.TxJob) -> None:
        job.conn.execute("INSERT INTO ledger (job_id, pid) VALUES (%s, 0)", (job.id,))
        if job.id == ids[1]:
            with contextlib.suppress(psycopg.errors.DivisionByZero):
                job.conn.execute("SELECT 1 / 0")

    stop = threading.Event()
    runner = InThread(lambda: pyqueue.listen(dsn, "s", sloppy, batch_size=10, poll_interval=IDLE_POLL,
                                             stop=stop, handle_signals=False, in_transaction=True))
    wait_until(lambda: len(ledger_ids(ledger)) == 2, "the two good jobs committed")
    stop.set()
    runner.join()
    assert ledger_ids(ledger) == [ids[0], ids[2]]
    error = scalar(ledger, "SELECT last_error FROM jobq._job WHERE id = %s", (ids[1],))
    assert "left its transaction aborted" in error


def test_async_worker_and_listen_in_transaction(ledger: Conn, dsn: str) -> None:
    good = pyqueue.enqueue_many(ledger, "aw", [{"n": i} for i in range(20)])
    retried = pyqueue.enqueue_many(ledger, "aw", [{"fail": True}] * 2)
    dead = pyqueue.enqueue_many(ledger, "aw", [{"fail": True}], max_attempts=1)
    good_l = pyqueue.enqueue_many(ledger, "al", [{"n": i} for i in range(5)])
    retried_l = pyqueue.enqueue_many(ledger, "al", [{"fail": True}])

    async def main() -> None:
        worker = aio.AsyncWorker(dsn, concurrency=3, batch_size=6, poll_interval=IDLE_POLL)

        @worker.handler("aw", in_transaction=True)
        async def handle(job: pyqueue.AsyncTxJob) -> None:
            await apost(job)

        stop = asyncio.Event()
        tasks = [asyncio.create_task(worker.run(handle_signals=False)),
                 asyncio.create_task(aio.listen(dsn, "al", apost, batch_size=2, poll_interval=IDLE_POLL,
                                                stop=stop, handle_signals=False, in_transaction=True))]
        # Worked through: only the retries are left in the live table, waiting out
        # their backoff (the dead job is in the archive).
        for _ in range(600):
            if await asyncio.to_thread(lambda: live(ledger, "aw") + live(ledger, "al")) == 3:
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the jobs were not all worked within 60 s")
        worker.stop()
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 60)

    asyncio.run(main())
    assert ledger_ids(ledger) == sorted(good + good_l)
    rows = ledger.execute("SELECT queue, status, count(*) FROM jobq.jobs WHERE status <> 'completed' "
                          "GROUP BY 1, 2 ORDER BY 1, 2").fetchall()
    assert rows == [("al", "scheduled", len(retried_l)), ("aw", "dead", len(dead)),
                    ("aw", "scheduled", len(retried))]


# --- worker processes ------------------------------------------------------------

@pytest.mark.parametrize("mode", ["tx-worker", "tx-listen"])
def test_a_killed_worker_leaves_every_job_ready_and_none_of_its_writes(
    ledger: Conn, dsn: str, tmp_path: Path, spawn: list[WorkerProcess], mode: str
) -> None:
    payloads: list[dict[str, object]] = [{"n": i} for i in range(4)]
    payloads += [{"block_first": True}, *[{}] * 5]
    ids = pyqueue.enqueue_many(ledger, "work", payloads)
    worker = WorkerProcess(dsn, tmp_path, "--mode", mode, "--batch-size", "10", "--concurrency", "1")
    spawn.append(worker)
    # Its own autocommit connection records each start: the 5th job blocks mid-batch.
    wait_until(lambda: scalar(ledger, "SELECT count(*) FROM executions") == 5, "the batch reaching job 5")
    assert ledger_ids(ledger) == []  # nothing committed yet
    worker.proc.send_signal(signal.SIGKILL)
    worker.proc.wait()

    def all_free() -> bool:
        with psycopg.connect(dsn) as probe:
            free = probe.execute("SELECT id FROM jobq._job FOR UPDATE SKIP LOCKED").fetchall()
            return len(free) == len(ids)

    wait_until(all_free, "the dead worker's transaction rolled back")
    rows = ledger.execute("SELECT id, status, attempts, last_error FROM jobq._job ORDER BY id").fetchall()
    assert rows == [(i, "ready", 0, None) for i in ids]
    assert ledger_ids(ledger) == []


@pytest.mark.parametrize("mode", ["tx-worker", "tx-listen"])
def test_sigterm_finishes_the_batch_and_exits_0(
    ledger: Conn, dsn: str, tmp_path: Path, spawn: list[WorkerProcess], mode: str
) -> None:
    ids = pyqueue.enqueue_many(ledger, "work", [{"sleep": 0.2}] * 5)
    worker = WorkerProcess(dsn, tmp_path, "--mode", mode, "--batch-size", "5", "--concurrency", "1")
    spawn.append(worker)
    wait_until(lambda: scalar(ledger, "SELECT count(*) FROM executions") >= 1, "the batch started")
    worker.signal(signal.SIGTERM)
    code = worker.wait()
    assert code == 0, worker.output()
    assert ledger_ids(ledger) == ids  # the whole batch ran and committed
    assert live(ledger, "work") == 0
    assert "worker exits normally" in worker.output()


def test_a_handler_that_never_touches_the_database_needs_no_savepoint(ledger: Conn, dsn: str) -> None:
    """A job's savepoint opens on its handler's first use of job.conn: handlers
    that write and handlers that do not, failing or not, mixed in one batch."""
    ids = pyqueue.enqueue_many(ledger, "m", [{"n": i, "write": i % 2 == 0, "fail": i % 3 == 0}
                                             for i in range(12)])
    conn_seen: list[bool] = []

    def mixed(job: pyqueue.TxJob) -> None:
        if job.payload["write"]:
            job.conn.execute("INSERT INTO ledger (job_id, pid) VALUES (%s, 0)", (job.id,))
            conn_seen.append(job.conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS)
        if job.payload["fail"]:
            raise RuntimeError(f"asked to fail job {job.id}")

    stop = threading.Event()
    runner = InThread(lambda: pyqueue.listen(dsn, "m", mixed, batch_size=20, poll_interval=IDLE_POLL,
                                             stop=stop, handle_signals=False, in_transaction=True))
    failed = [ids[i] for i in range(12) if i % 3 == 0]
    wait_until(lambda: live(ledger, "m") == len(failed), "the good jobs left the queue")
    stop.set()
    runner.join()
    writers = [ids[i] for i in range(12) if i % 2 == 0 and i % 3 != 0]
    assert ledger_ids(ledger) == sorted(writers), "failed writers rolled back alone, good writers kept"
    assert conn_seen == [True] * 6
    rows = ledger.execute("SELECT id, attempts, last_error LIKE '%%asked to fail%%' FROM jobq._job "
                          "WHERE queue = 'm' ORDER BY id").fetchall()
    assert rows == [(i, 1, True) for i in failed], "each failure recorded once, writer or not"
