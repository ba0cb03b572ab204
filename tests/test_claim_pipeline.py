"""A worker's pending completions ride along with its next claim (issue 24):
one round trip and one transaction for both, seen in the database as one
transaction id on the archived jobs and on the newly leased ones. Through a
transaction pooler (no prepared statements, no pipeline) they wait for
their own statement as before; a claim that fails puts them back, and the
next one sends them."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

import pyqueue
from pyqueue.defaults import WORKER_APPLICATION_NAME
from pyqueue.worker.connections import DedicatedConnection
from pyqueue.worker.settings import WorkerSettings
from pyqueue.worker.sync_consumer import Consumer
from pyqueue.worker.wakeup import Wakeup
from tests.worker_support import backend_pids, keep_history, scalar

Conn = psycopg.Connection[tuple[object, ...]]
QUEUE = "ride"


def consumer(dsn: str, *, use_listen: bool) -> Consumer:
    settings = WorkerSettings(dsn, [QUEUE], None, 0.5, use_listen, "test-worker", None, run_schedules=False)
    return Consumer(settings, wakeup=Wakeup(),
                    work=DedicatedConnection(dsn, WORKER_APPLICATION_NAME, prepare=settings.prepare),
                    heartbeat=DedicatedConnection(dsn, "test-heartbeat", prepare=settings.prepare))


@pytest.fixture
def jobs(conn: Conn) -> list[int]:
    keep_history(conn, [QUEUE])  # completed jobs stay in the archive, with the xmin of their completion
    return pyqueue.enqueue_many(conn, QUEUE, [{"n": n} for n in range(4)])


@pytest.fixture
def direct(dsn: str) -> Iterator[Consumer]:
    made = consumer(dsn, use_listen=True)
    yield made
    made.close()


def xmins(conn: Conn, table: str, ids: list[int]) -> set[str]:
    rows = conn.execute(f"SELECT xmin::text FROM {table} WHERE id = ANY(%s)", (ids,)).fetchall()
    assert len(rows) == len(ids), (table, ids, rows)
    return {str(row[0]) for row in rows}


def test_the_completions_and_the_next_claim_are_one_transaction(conn: Conn, direct: Consumer,
                                                                jobs: list[int]) -> None:
    first = direct.claim(2) or []
    for job in first:
        direct.complete_later(job)
    second = direct.claim(2) or []
    assert direct.acks.pending() == 0
    done, leased = [job.id for job in first], [job.id for job in second]
    assert sorted(done + leased) == sorted(jobs)
    assert scalar(conn, "SELECT count(*) FROM jobq.jobs WHERE id = ANY(%s) AND status = 'completed'",
                  (done,)) == 2
    assert xmins(conn, "jobq._job_archive", done) == xmins(conn, "jobq._job", leased)
    assert len(direct.book) == 2  # the completed jobs need no more heartbeats


def test_through_a_pooler_the_completions_wait_for_their_own_statement(conn: Conn, dsn: str,
                                                                        jobs: list[int]) -> None:
    pooled = consumer(dsn, use_listen=False)  # what a worker behind PgBouncer uses: no pipeline
    try:
        first = pooled.claim(2) or []
        for job in first:
            pooled.complete_later(job)
        second = pooled.claim(2) or []
        assert pooled.acks.pending() == 2 and len(second) == 2
        assert pooled.flush()
        done, leased = [job.id for job in first], [job.id for job in second]
        assert xmins(conn, "jobq._job_archive", done).isdisjoint(xmins(conn, "jobq._job", leased))
    finally:
        pooled.close()


def test_a_claim_that_fails_puts_the_completions_back(conn: Conn, direct: Consumer, jobs: list[int]) -> None:
    first = direct.claim(2) or []
    for job in first:
        direct.complete_later(job)
    for pid in backend_pids(conn, WORKER_APPLICATION_NAME):
        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
    assert direct.claim(2) is None  # the connection was gone: backed off, nothing taken
    assert direct.acks.pending() == 2
    assert scalar(conn, "SELECT count(*) FROM jobq.jobs WHERE queue = %s AND status = 'running'",
                  (QUEUE,)) == 2
    second = direct.claim(2) or []
    assert direct.acks.pending() == 0 and len(second) == 2
    assert scalar(conn, "SELECT count(*) FROM jobq.jobs WHERE id = ANY(%s) AND status = 'completed'",
                  ([job.id for job in first],)) == 2
