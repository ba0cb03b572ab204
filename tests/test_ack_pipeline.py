"""The acks of a batch and the claim of the next, in one round trip (issue
24), read from the server.

``pyqueue._db.pipelined`` sends its statements in psycopg's pipeline mode
with one Sync: the server runs them as one implicit transaction, so that an
error in the claim undoes the acks sent with it (the worker puts them back,
see ``test_consumer_pipeline``), never half of them.

A Worker and an AsyncWorker send the acks of the batch they worked ahead of
their next claim: a statement trigger on ``jobq._job`` records, for every
statement that leases jobs (a claim), how many jobs were already leased
when it ran. Every job of the test's queue is leased by the one worker
under test, so that count is the worker's held jobs (at most its
concurrency at a claim) plus the finished jobs whose ack it had not sent.
Sent with the claim, the ready acks keep it under twice the concurrency;
claiming first leaves most of the previous batch leased (about a batch).
Nothing here is timed: the bound holds whatever the handlers' speed."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import pytest

import pyqueue
from pyqueue import _arrays as arrays
from pyqueue import _queries as q
from pyqueue import aio
from pyqueue._db import Claimed, pipelined
from tests.worker_support import InThread, scalar, wait_until

Conn = psycopg.Connection[tuple[object, ...]]

JOBS = 600
BATCH = 50
CONCURRENCY = 2

CLAIM_LOG_DDL = """
CREATE TABLE public.claim_log (
    id            bigserial PRIMARY KEY,
    claimed       integer NOT NULL,  -- jobs this statement leased
    leased_before integer NOT NULL   -- jobs of the queue leased before it ran
);
CREATE FUNCTION public.log_claims() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    claimed integer;
    leased integer;
BEGIN
    SELECT count(*) INTO claimed
    FROM new_rows n JOIN old_rows o USING (id)
    WHERE n.queue = 'ord' AND n.status = 'running' AND o.status <> 'running';
    IF claimed > 0 THEN
        SELECT count(*) INTO leased FROM jobq._job WHERE queue = 'ord' AND status = 'running';
        INSERT INTO public.claim_log (claimed, leased_before) VALUES (claimed, leased - claimed);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER log_claims AFTER UPDATE ON jobq._job
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION public.log_claims();
"""


def drained(conn: Conn) -> bool:
    return bool(scalar(conn, "SELECT count(*) FROM jobq._job WHERE queue = 'ord'") == 0)


def claims(conn: Conn) -> list[tuple[int, int]]:
    rows = conn.execute("SELECT claimed, leased_before FROM claim_log ORDER BY id").fetchall()
    return [(int(str(c)), int(str(b))) for c, b in rows]


def check_order(conn: Conn) -> None:
    logged = claims(conn)
    assert sum(c for c, _ in logged) == JOBS  # each job leased once: the log saw every claim
    assert len(logged) >= JOBS // BATCH
    # At a claim the worker holds at most CONCURRENCY jobs; the acks it did
    # not send first are fewer than min(BATCH, CONCURRENCY). Claiming before
    # acking leaves about BATCH - CONCURRENCY finished jobs leased instead.
    bound = CONCURRENCY + min(BATCH, CONCURRENCY) - 1  # Rounds.acks_with_claim
    assert max(b for _, b in logged) <= bound, logged


def claim_three(conn: Conn) -> tuple[str, str]:
    pyqueue.enqueue_many(conn, "pipe", [{"n": i} for i in range(3)])
    rows = conn.execute("SELECT id, lease_token FROM jobq.claim('pipe', 3)").fetchall()
    assert len(rows) == 3
    return arrays.bigints([int(str(i)) for i, _ in rows]), arrays.uuids([uuid.UUID(str(t)) for _, t in rows])


def running(conn: Conn) -> int:
    query = "SELECT count(*) FROM jobq._job WHERE queue = 'pipe' AND status = 'running'"
    return int(str(scalar(conn, query)))


def test_a_pipeline_is_one_transaction_an_error_in_the_claim_undoes_the_acks(conn: Conn, dsn: str) -> None:
    ids_and_tokens = claim_three(conn)
    claim, params = q.claim_query(["pipe"], 10, "w", None)
    with psycopg.connect(dsn, autocommit=True) as work:
        with pytest.raises(psycopg.errors.DivisionByZero):
            pipelined(work, [(q.COMPLETE_MANY, ids_and_tokens, "scalar"), ("SELECT 1 / 0", None, "scalar")])
        assert running(conn) == 3  # the completions were undone with the failed statement
        completed, rows = pipelined(work, [(q.COMPLETE_MANY, ids_and_tokens, "scalar"),
                                           (claim, params, "claimed")])
    assert completed == 3 and isinstance(rows, Claimed) and len(rows) == 0  # the claim saw them gone
    assert running(conn) == 0


@pytest.fixture
def ord_queue(conn: Conn) -> None:
    conn.execute(CLAIM_LOG_DDL)
    pyqueue.enqueue_many(conn, "ord", [{"n": i} for i in range(JOBS)])


@pytest.mark.usefixtures("ord_queue")
def test_the_worker_sends_the_acks_of_a_batch_with_its_next_claim(conn: Conn, dsn: str) -> None:
    worker = pyqueue.Worker(dsn, concurrency=CONCURRENCY, batch_size=BATCH, reap_interval=None,
                            run_schedules=False)
    worker.register("ord", lambda job: None)
    running = InThread(lambda: worker.run(handle_signals=False))
    try:
        wait_until(lambda: drained(conn), "the worker to drain the queue")
    finally:
        worker.stop()
        running.join()
    check_order(conn)


@pytest.mark.usefixtures("ord_queue")
def test_the_async_worker_sends_the_acks_of_a_batch_with_its_next_claim(conn: Conn, dsn: str) -> None:
    async def main() -> None:
        worker = aio.AsyncWorker(dsn, concurrency=CONCURRENCY, batch_size=BATCH, reap_interval=None,
                                 run_schedules=False)
        handled = 0

        @worker.handler("ord")
        async def handle(job: aio.AsyncJob) -> None:
            nonlocal handled
            handled += 1
            if handled == JOBS:
                worker.stop()

        await asyncio.wait_for(worker.run(handle_signals=False), 120)

    asyncio.run(main())  # the last job stops it; stopping sends the pending acks
    assert drained(conn)
    check_order(conn)
