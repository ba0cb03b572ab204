"""jobq through PgBouncer in transaction pooling mode (Debian's pgbouncer,
started here on a free loopback port in front of the test's database, with
fewer server connections than clients).

Producers enqueue through it (alone, in batches, and inside a transaction
with a business write); polling workers (``use_listen=False``: no LISTEN, no
prepared statements) run every job exactly once through it. LISTEN itself
does not work through transaction pooling: a notification reaches the
server connection, which PgBouncer has already handed back to its pool, not
the client that asked to listen. Workers need a direct connection for
LISTEN, or poll.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pytest_postgresql.executors import PostgreSQLExecutor

import pyqueue
from tests.chaos_support import PgBouncer, elapsed, keep_history, pgbouncer, report, scaled
from tests.worker_support import InThread, scalar, wait_until

Conn = psycopg.Connection[Any]

POOL_SIZE = 4  # server connections PgBouncer keeps for the database
PRODUCERS = 3
POLLING_LISTENERS = 3  # pyqueue.listen(use_listen=False)
WORKER_CONCURRENCY = 3  # plus one pyqueue.Worker(use_listen=False)
JOBS_PER_PRODUCER = 400  # times the chaos scale
POLL = 0.2  # seconds
SERVER_STATES = ("sv_active", "sv_idle", "sv_used", "sv_tested", "sv_login")  # columns of SHOW POOLS


@pytest.fixture
def bouncer(conn: Conn, postgresql_proc: PostgreSQLExecutor) -> Iterator[PgBouncer]:
    with pgbouncer(host=postgresql_proc.host, port=postgresql_proc.port, dbname=conn.info.dbname,
                   pool_size=POOL_SIZE) as running:
        yield running


def through(bouncer: PgBouncer, **kwargs: Any) -> Conn:
    """A client connection through PgBouncer: no prepared statements (transaction pooling)."""
    return psycopg.connect(bouncer.dsn, prepare_threshold=None, **kwargs)


def produce(bouncer: PgBouncer, tag: int, total: int, ids: list[int]) -> tuple[int, int]:
    """Enqueue ``total`` jobs three ways in turn; how many transactions were
    committed, and how many of them wrote a business row."""
    orders = 0
    with through(bouncer) as conn:
        sent = step = 0
        while sent < total:
            kind = step % 3
            step += 1
            if kind == 0:  # one job, its own transaction
                ids.append(pyqueue.enqueue(conn, "bounced", {"p": tag, "n": sent}))
                sent += 1
            elif kind == 1:  # a batch
                n = min(5, total - sent)
                batch = [{"p": tag, "n": sent + i} for i in range(n)]
                ids.extend(pyqueue.enqueue_many(conn, "bounced", batch))
                sent += n
            else:  # with a business write, in one transaction
                conn.execute("INSERT INTO orders (producer, n) VALUES (%s, %s)", (tag, sent))
                ids.append(pyqueue.enqueue(conn, "bounced", {"p": tag, "n": sent, "order": True}))
                sent += 1
                orders += 1
            conn.commit()
    return step, orders


def test_producers_and_polling_workers_through_pgbouncer_transaction_pooling(
    conn: Conn, bouncer: PgBouncer, tmp_path: Path
) -> None:
    conn.execute("CREATE TABLE orders (producer int, n int)")
    keep_history(conn, "bounced")
    total = PRODUCERS * scaled(JOBS_PER_PRODUCER)
    runs: Counter[int] = Counter()
    lock = threading.Lock()

    def handle(job: pyqueue.Job) -> None:
        with lock:
            runs[job.id] += 1

    stop = threading.Event()
    workers = [
        InThread(lambda: pyqueue.listen(bouncer.dsn, "bounced", handle, use_listen=False, poll_interval=POLL,
                                        stop=stop, handle_signals=False, batch_size=10))
        for _ in range(POLLING_LISTENERS)
    ]
    pool_worker = pyqueue.Worker(bouncer.dsn, concurrency=WORKER_CONCURRENCY, use_listen=False,
                                 poll_interval=POLL, batch_size=10)
    pool_worker.register("bounced", handle)
    workers.append(InThread(lambda: pool_worker.run(handle_signals=False)))
    ids_by_producer: list[list[int]] = [[] for _ in range(PRODUCERS)]
    done: list[tuple[int, int]] = []
    started = time.monotonic()
    peak = {"clients": 0, "servers": 0}

    def sample() -> None:
        for pool in bouncer.show("POOLS"):
            if pool["database"] == conn.info.dbname:
                clients = int(pool["cl_active"]) + int(pool["cl_waiting"])
                servers = sum(int(pool[k]) for k in SERVER_STATES)
                peak["clients"] = max(peak["clients"], clients)
                peak["servers"] = max(peak["servers"], servers)

    def transactions() -> int:
        stats = bouncer.show("STATS")
        return next(int(s["total_xact_count"]) for s in stats if s["database"] == conn.info.dbname)

    try:
        def run_producer(i: int) -> None:
            done.append(produce(bouncer, i, total // PRODUCERS, ids_by_producer[i]))

        producers = [InThread(partial(run_producer, i)) for i in range(PRODUCERS)]

        def finished() -> bool:
            sample()
            return all(not p.thread.is_alive() for p in producers) and sum(runs.values()) >= total \
                and scalar(conn, "SELECT count(*) FROM jobq._job_archive WHERE queue = 'bounced' "
                                 "AND status = 'completed'") >= total

        wait_until(finished, f"{total} jobs enqueued and completed through pgbouncer", timeout=120)
        for producer in producers:
            producer.join()
        ids = [i for part in ids_by_producer for i in part]
        # Each producer transaction went through PgBouncer (its totals lag by stats_period).
        committed = sum(steps for steps, _ in done)
        wait_until(lambda: transactions() >= committed,
                   "PgBouncer's statistics to count the producers' transactions", timeout=30)
        counted = transactions()
    finally:
        stop.set()
        pool_worker.stop()
        for worker in workers:
            worker.join()
    report("pgbouncer transaction pooling", {
        "jobs": total, "producers": PRODUCERS, "polling_workers": POLLING_LISTENERS + 1,
        "pool_size": POOL_SIZE, "peak_clients": peak["clients"], "peak_servers": peak["servers"],
        "producer_transactions": committed, "transactions_through_pgbouncer": counted,
        "duplicates": sum(1 for n in runs.values() if n > 1), "lost": len(set(ids) - set(runs)),
        "seconds": elapsed(started),
    }, tmp_path)
    # Every job ran exactly once, on its first attempt.
    assert len(ids) == total
    assert sorted(runs) == sorted(ids) and set(runs.values()) == {1}
    assert scalar(conn, "SELECT count(*) FROM jobq._job_archive WHERE queue = 'bounced' "
                        "AND status = 'completed' AND attempts = 1") == total
    orders = sum(n for _, n in done)
    assert len(done) == PRODUCERS and orders > 0
    assert scalar(conn, "SELECT count(*) FROM orders") == orders
    assert scalar(conn, "SELECT count(*) FROM jobq._job_archive WHERE queue = 'bounced' "
                        "AND payload ? 'order'") == orders
    # It all went through PgBouncer: more clients than server connections at once.
    assert counted >= committed
    assert peak["clients"] > POOL_SIZE >= peak["servers"] > 0


def test_listen_through_transaction_pooling_receives_nothing(conn: Conn, bouncer: PgBouncer) -> None:
    """Why workers need a direct connection for LISTEN (or use_listen=False)."""
    with through(bouncer, autocommit=True) as pooled, \
            psycopg.connect(conn.info.dsn, autocommit=True) as direct:
        pooled.execute("LISTEN jobq")
        direct.execute("LISTEN jobq")
        pyqueue.enqueue(conn, "bounced", {})  # its statement-level NOTIFY jobq, 'bounced'
        assert [n.payload for n in direct.notifies(timeout=2.0)] == ["bounced"]
        assert [n.payload for n in pooled.notifies(timeout=2.0)] == []
