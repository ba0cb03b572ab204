"""A producer's open transaction never holds up a worker (issue 25, item 1).

In jobq 0.8.0, naming a job in ``depends_on``, in ``enqueue_callback``'s
members or in ``jobq.watch`` row-locked that job until the naming
transaction ended: claims skipped it, and its worker's heartbeat, complete
and fail waited 5 s and failed with ``lock_timeout``. Since 0.9.0 nothing
is locked or written on a named job before the commit
(``jobq._settle_at_commit``).

Here 4 real ``pyqueue.Worker`` processes drain 100 parents twice: once
alone, and once while a producer holds a transaction open (up to 30 s) in
which it names every parent — half while they are ready, before the
workers may claim them, and half while they run (their heartbeats and
acknowledgements must go through) — with children, a batch callback over
all 100 and watches. The second drain must end while the producer's
transaction is still open, with every parent run once and no worker
error; after the commit, every child and the callback are released and
every watch is notified. The two drains' times are reported (``pytest
-s``), not asserted.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from tests.chaos_fleet import ProgramProcess
from tests.chaos_support import report
from tests.worker_support import scalar, wait_until
from tests.workflow_programs import RUNS_DDL

Conn = psycopg.Connection[Any]

QUEUE = "named-parents"
CHILD_QUEUE = "named-children"  # no worker: the children stay where the commit put them
CALLBACK_QUEUE = "named-callback"
PARENTS = 100
WORKERS = 4
WORK = 0.2  # seconds each parent's handler runs: heartbeats (every lease / 3) happen in it
WORKER_OPTIONS = ("--queue", QUEUE, "--concurrency", "2", "--batch-size", "4", "--lease", "1.2",
                  "--reap-interval", "1", "--poll-interval", "0.2")
HOLD = 30.0  # seconds: the longest the producer keeps its transaction open
WORKER_ERRORS = ("lock timeout", "canceling statement", "could not acknowledge", "Traceback", "ERROR")


def enqueue_parents(conn: Conn) -> list[int]:
    rows = conn.execute("SELECT jobq.enqueue_many(%s, %s::jsonb[])",
                        (QUEUE, [Jsonb({"sleep": WORK}) for _ in range(PARENTS)])).fetchall()
    return [int(r[0]) for r in rows]


def finished(conn: Conn, ids: list[int]) -> int:
    return int(scalar(conn, "SELECT count(*) FROM jobq.jobs WHERE id = ANY (%s) AND status = 'completed'",
                      (ids,)))


def drain_seconds(conn: Conn, ids: list[int]) -> float:
    """From the first handler start to the last handler end of these jobs (database clock)."""
    return float(scalar(conn, "SELECT extract(epoch FROM max(finished) - min(started)) FROM wf_runs "
                              "WHERE job_id = ANY (%s)", (ids,)))


def name_parents(producer: Conn, parents: list[int], watched: set[int]) -> list[int]:
    """In the producer's open transaction: a child of each parent, one child of
    all of them, and a watch on each (those not finished then go to
    ``watched``); the children's ids."""
    children = [int(scalar(producer, "SELECT jobq.enqueue(%s, %s, depends_on => %s::bigint[])",
                           (CHILD_QUEUE, Jsonb({"of": p}), [p]))) for p in parents]
    children.append(int(scalar(producer, "SELECT jobq.enqueue(%s, '{}', depends_on => %s::bigint[])",
                               (CHILD_QUEUE, parents))))
    for parent in parents:
        state = scalar(producer, "SELECT jobq.watch(%s)", (parent,))
        assert state in ("ready", "running", "completed")
        if state != "completed":
            watched.add(parent)
    return children


def test_an_open_producer_transaction_holds_up_no_worker(dsn: str, conn: Conn, tmp_path: Path) -> None:
    conn.execute(RUNS_DDL)
    conn.execute("SELECT jobq.configure_queue(%s, retention => interval '1 day')", (QUEUE,))
    logs = tmp_path / "workers"
    logs.mkdir()
    workers = [ProgramProcess("tests.workflow_programs", dsn, logs, *WORKER_OPTIONS) for _ in range(WORKERS)]
    try:
        # The drain alone.
        alone = enqueue_parents(conn)
        wait_until(lambda: finished(conn, alone) == PARENTS, "the first drain", timeout=HOLD)
        alone_s = drain_seconds(conn, alone)

        # The same drain under a producer's open transaction that names every parent.
        conn.execute("SELECT jobq.pause(%s)", (QUEUE,))
        parents = enqueue_parents(conn)
        early, late = parents[: PARENTS // 2], parents[PARENTS // 2:]
        with psycopg.connect(dsn) as producer:
            producer.execute("LISTEN jobq_finished")
            watched: set[int] = set()
            children = name_parents(producer, early, watched)  # ready parents, before any claim
            callback = int(scalar(producer, "SELECT jobq.enqueue_callback(%s, '{}', %s::bigint[])",
                                  (CALLBACK_QUEUE, parents)))
            opened = time.monotonic()
            conn.execute("SELECT jobq.resume(%s)", (QUEUE,))
            wait_until(lambda: scalar(conn, "SELECT count(*) FROM jobq.jobs WHERE id = ANY (%s) "
                                            "AND status = 'running'", (late,)) > 0,
                       "a late parent running", timeout=HOLD)
            children += name_parents(producer, late, watched)  # some of these are running now
            wait_until(lambda: finished(conn, parents) == PARENTS,
                       "every parent completed while the producer's transaction is open",
                       timeout=max(1.0, HOLD - (time.monotonic() - opened)))
            held_open_s = time.monotonic() - opened
            assert producer.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
            # Nothing of the transaction is visible yet: the children wait for its commit.
            assert scalar(conn, "SELECT count(*) FROM jobq.jobs WHERE queue = %s", (CHILD_QUEUE,)) == 0
            producer.commit()
            notified = {int(n.payload) for n in producer.notifies(timeout=10.0, stop_after=len(watched))}
        under_s = drain_seconds(conn, parents)

        # Every parent ran once, first time, and no worker hit a lock.
        runs = dict(conn.execute("SELECT job_id, count(*) FROM wf_runs WHERE job_id = ANY (%s) "
                                 "AND finished IS NOT NULL GROUP BY job_id", (parents,)).fetchall())
        assert runs == dict.fromkeys(parents, 1)
        assert scalar(conn, "SELECT max(attempts) FROM jobq.jobs WHERE id = ANY (%s)", (parents,)) == 1
        for worker in workers:
            log = worker.output()
            assert not [e for e in WORKER_ERRORS if e in log], f"worker {worker.pid}:\n{log}"

        # The commit found every parent completed: it released what waited for them.
        states = dict(conn.execute("SELECT id, status FROM jobq.jobs WHERE id = ANY (%s)",
                                   (children,)).fetchall())
        assert states == dict.fromkeys(children, "ready")
        batch = scalar(conn, "SELECT payload -> 'batch' FROM jobq.jobs WHERE id = %s AND status = 'ready'",
                       (callback,))
        assert batch == {"members": PARENTS, "completed": PARENTS, "dead": 0, "cancelled": 0}
        # Each watched parent finished before the watcher's commit: the commit notified it.
        assert len(watched) > PARENTS // 2
        assert notified == watched
        assert scalar(conn, "SELECT count(*) FROM jobq._at_commit") == 0
    finally:
        for worker in workers:
            worker.kill()
    report("open_producer", {
        "parents": PARENTS, "workers": WORKERS, "drain_alone_s": round(alone_s, 3),
        "drain_under_open_producer_s": round(under_s, 3), "ratio": round(under_s / alone_s, 3),
        "producer_open_s": round(held_open_s, 3),
    }, tmp_path)
