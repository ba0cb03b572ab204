"""SQL behaviour that one pgTAP transaction cannot see: several real
sessions racing for rows, transactional enqueue, and NOTIFY delivery."""

from __future__ import annotations

import time

import psycopg
from psycopg.types.json import Jsonb

Conn = psycopg.Connection[tuple[object, ...]]


def enqueue(conn: Conn, queue: str, payload: dict[str, object]) -> int:
    row = conn.execute("SELECT jobq.enqueue(%s, %s)", (queue, Jsonb(payload))).fetchone()
    assert row is not None
    return int(str(row[0]))


def test_a_row_leased_by_one_transaction_is_skipped_by_another(conn: Conn, dsn: str) -> None:
    first = enqueue(conn, "q", {"n": 1})
    second = enqueue(conn, "q", {"n": 2})
    with psycopg.connect(dsn) as a, psycopg.connect(dsn) as b:
        # a claims inside an open transaction: its row stays locked.
        a_rows = a.execute("SELECT id FROM jobq.claim('q', 1, 'a')").fetchall()
        assert [r[0] for r in a_rows] == [first]
        # b must neither wait nor take a's row: lock_timeout turns a wait into an error.
        b.execute("SET lock_timeout = '2s'")
        b_rows = b.execute("SELECT id FROM jobq.claim('q', 5, 'b')").fetchall()
        assert [r[0] for r in b_rows] == [second]
        b.commit()
        a.rollback()
    # a rolled back: its job is ready again, with no attempt spent.
    row = conn.execute("SELECT status, attempts FROM jobq._job WHERE id = %s", (first,)).fetchone()
    assert row == ("ready", 0)


def test_enqueue_joins_the_callers_transaction(conn: Conn, dsn: str) -> None:
    with psycopg.connect(dsn) as producer:
        job = enqueue(producer, "tx", {"n": 1})
        # Not committed yet: invisible to everyone else.
        assert conn.execute("SELECT count(*) FROM jobq._job WHERE id = %s", (job,)).fetchone() == (0,)
        producer.rollback()
    assert conn.execute("SELECT count(*) FROM jobq._job").fetchone() == (0,)
    with psycopg.connect(dsn) as producer:
        job = enqueue(producer, "tx", {"n": 2})
        producer.commit()
    assert conn.execute("SELECT count(*) FROM jobq._job WHERE id = %s", (job,)).fetchone() == (1,)


def test_one_notify_per_queue_per_statement(conn: Conn, dsn: str) -> None:
    conn.execute("LISTEN jobq")
    with psycopg.connect(dsn) as producer:
        producer.execute(
            "SELECT jobq.enqueue_many(q, array_agg(jsonb_build_object('i', i))) "
            "FROM generate_series(1, 50) AS i, unnest(ARRAY['alpha', 'beta']) AS q GROUP BY q"
        )
        producer.commit()
    received = [n.payload for n in conn.notifies(timeout=1.0)]
    assert sorted(received) == ["alpha", "beta"]


def test_notify_is_sent_only_on_commit(conn: Conn, dsn: str) -> None:
    conn.execute("LISTEN jobq")
    with psycopg.connect(dsn) as producer:
        enqueue(producer, "gamma", {"n": 1})
        producer.rollback()
    assert [n.payload for n in conn.notifies(timeout=0.5)] == []


# jobq 0.3.0: HOT leases, hold across sessions, NOTIFY from every inserting path ---------------------------

def one(conn: Conn, query: str, params: tuple[object, ...] | None = None) -> object:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def job_table_updates(conn: Conn) -> tuple[int, int]:
    """(n_tup_upd, n_tup_hot_upd) of jobq._job as the statistics system has them now."""
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
                       "WHERE relid = 'jobq._job'::regclass").fetchone()
    assert row is not None
    return int(str(row[0])), int(str(row[1]))


def flush_stats(conn: Conn) -> None:
    # The backend reports its counts when it next goes idle, before it says
    # ReadyForQuery: once this returns, they are in the shared statistics.
    conn.execute("SELECT pg_stat_force_next_flush()")
    conn.execute("SELECT 1")


def test_a_claim_of_a_plain_queue_is_a_hot_update_across_commits(conn: Conn, dsn: str) -> None:
    # A leased row (lease token, expiry, worker, started_at) is larger than
    # the ready row; when every row of a page is leased (a pre-filled queue
    # drained in order), fillfactor 40 still leaves room for every new version.
    # Two queues interleaved on the same pages, one claim each: the second
    # claim leases rows on the pages the first one filled, and its queue's
    # head is ready (a head of leases older than 50 ms would have it park:
    # jobq 0.8, pgtap/crowded_queues.sql).
    conn.execute("SELECT jobq.enqueue(CASE WHEN g % 2 = 0 THEN 'hot' ELSE 'hot2' END, "
                 "jsonb_build_object('i', g)) FROM generate_series(1, 400) AS g")
    conn.execute("SELECT jobq.configure_queue('cold', concurrency => 1000)")
    conn.execute("SELECT jobq.enqueue_many('cold', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 50)))")
    with psycopg.connect(dsn, autocommit=True) as worker:
        flush_stats(worker)
        upd0, hot0 = job_table_updates(conn)
        claimed = worker.execute("SELECT id FROM jobq.claim('hot', 100, 'w')").fetchall()
        claimed += worker.execute("SELECT id FROM jobq.claim('hot2', 100, 'w')").fetchall()
        assert len(claimed) == 200
        ids = [int(str(r[0])) for r in claimed]
        shared = one(conn, "SELECT count(*) FROM (SELECT (ctid::text::point)[0] FROM jobq._job "
                           "WHERE id = ANY(%s) GROUP BY 1 HAVING count(DISTINCT queue) = 2) AS pages", (ids,))
        assert int(str(shared)) > 0, "the two claims leased rows on the same pages"
        flush_stats(worker)
        upd1, hot1 = job_table_updates(conn)
        assert (upd1 - upd0, hot1 - hot0) == (200, 200), "200 leases, every one a HOT update"
        parked = worker.execute("SELECT id FROM jobq.claim('cold', 50, 'w')").fetchall()
        assert len(parked) == 50
        flush_stats(worker)
        upd2, hot2 = job_table_updates(conn)
        assert (upd2 - upd1, hot2 - hot1) == (50, 0), "the full path parks: an indexed column, no HOT"


def test_held_jobs_are_invisible_to_other_sessions_and_fail_held_does_not_wait(conn: Conn, dsn: str) -> None:
    ids = [int(str(r[0])) for r in conn.execute(
        "SELECT jobq.enqueue_many('hq', ARRAY['{}', '{}', '{}']::jsonb[])").fetchall()]
    with psycopg.connect(dsn) as a, psycopg.connect(dsn) as b:
        [held] = [int(str(r[0])) for r in a.execute("SELECT id FROM jobq.hold('hq', 1)").fetchall()]
        assert held == ids[0]
        b.execute("SET lock_timeout = '10s'")
        started = time.monotonic()
        assert one(b, "SELECT jobq.fail_held(%s, 'not mine')", (held,)) is False, "another session holds it"
        assert time.monotonic() - started < 2.0, "NOWAIT: false at once, not after a lock wait"
        others = [int(str(r[0])) for r in b.execute("SELECT id FROM jobq.hold('hq', 5)").fetchall()]
        assert others == ids[1:], "a second session's hold skips the held job"
        assert [r[0] for r in conn.execute("SELECT id FROM jobq.claim('hq', 5)").fetchall()] == [], (
            "and so does a third session's claim: every ready job is held"
        )
        b.rollback()
        assert one(a, "SELECT jobq.fail_held(%s, 'boom')", (held,)) is True
        a.commit()
    row = conn.execute("SELECT status, attempts, last_error, run_at > now() FROM jobq._job WHERE id = %s",
                       (held,)).fetchone()
    assert row == ("ready", 1, "boom", True), "the holder's fail_held committed: backing off, attempt 1"
    assert one(conn, "SELECT failed_total FROM jobq.stats WHERE queue = 'hq'") == 1


def test_a_holder_that_dies_leaves_its_jobs_untouched(conn: Conn, dsn: str) -> None:
    conn.execute("SELECT jobq.enqueue_many('hc', ARRAY['{}', '{}']::jsonb[])")
    before = conn.execute("SELECT to_jsonb(j) FROM jobq._job AS j ORDER BY id").fetchall()
    holder = psycopg.connect(dsn)
    try:
        pid = holder.info.backend_pid
        assert len(holder.execute("SELECT * FROM jobq.hold('hc', 2)").fetchall()) == 2
        holder.execute("SELECT jobq.complete_held(ARRAY(SELECT id FROM jobq._job WHERE queue = 'hc'))")
        assert one(conn, "SELECT pg_terminate_backend(%s)", (pid,)) is True
        for _ in range(50):
            if one(conn, "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)) == 0:
                break
            time.sleep(0.1)
    finally:
        holder.close()
    assert conn.execute("SELECT to_jsonb(j) FROM jobq._job AS j ORDER BY id").fetchall() == before, (
        "the crashed transaction's acknowledgements rolled back: both jobs ready, attempts 0"
    )
    assert one(conn, "SELECT count(*) FROM jobq._counter") == 0
    assert len(conn.execute("SELECT * FROM jobq.hold('hc', 5)").fetchall()) == 2, "and can be held again"


def test_complete_held_of_a_job_another_session_holds_returns_0_at_once(conn: Conn, dsn: str) -> None:
    # complete_held skips a job another transaction holds (it must not wait for
    # that holder's row lock, nor delete the job once that holder rolls back),
    # as fail_held answers false at once (NOWAIT) for the same case.
    [job] = [int(str(r[0])) for r in conn.execute("SELECT jobq.enqueue_many('hn', ARRAY['{}']::jsonb[])")]
    with psycopg.connect(dsn) as a, psycopg.connect(dsn) as b:
        assert [r[0] for r in a.execute("SELECT id FROM jobq.hold('hn', 1)").fetchall()] == [job]
        started = time.monotonic()
        assert one(b, "SELECT jobq.complete_held(ARRAY[%s]::bigint[])", (job,)) == 0
        assert time.monotonic() - started < 2.0
        b.commit()
        a.rollback()
    assert one(conn, "SELECT status FROM jobq._job WHERE id = %s", (job,)) == "ready"


def notifications(conn: Conn) -> list[str]:
    return [n.payload for n in conn.notifies(timeout=0.5)]


def test_every_inserting_path_notifies_its_queue_with_the_queue_name_only(conn: Conn, dsn: str) -> None:
    conn.execute("LISTEN jobq")
    with psycopg.connect(dsn, autocommit=True) as other:
        other.execute("SELECT jobq.enqueue('n-one', '{\"secret\": \"s1\"}')")
        assert notifications(conn) == ["n-one"], "enqueue"
        other.execute("SELECT jobq.enqueue_many('n-many', ARRAY['{\"secret\": 1}', '{}']::jsonb[])")
        assert notifications(conn) == ["n-many"], "enqueue_many: once per call"
        other.execute("SELECT jobq.enqueue_many('n-keys', ARRAY['{}', '{}', '{}']::jsonb[], "
                      "job_keys => ARRAY['a', 'b', 'c'])")
        assert notifications(conn) == ["n-keys"], "enqueue_many with job_keys: folded to one per transaction"
        with other.transaction():
            other.execute("SELECT jobq.enqueue('n-tx', '{}')")
            other.execute("SELECT jobq.enqueue('n-tx', '{}')")
            other.execute("SELECT jobq.enqueue('n-tx2', '{}')")
        assert sorted(notifications(conn)) == ["n-tx", "n-tx2"], "one per queue per transaction"
        cancelled = one(other, "SELECT jobq.enqueue('n-retry', '{}')")
        other.execute("SELECT jobq.cancel(%s)", (cancelled,))
        notifications(conn)
        assert one(other, "SELECT jobq.retry(%s)", (cancelled,)) is True
        assert notifications(conn) == ["n-retry"], "retry of an archived job"
        other.execute("SELECT jobq.enqueue('n-dead', '{}', max_attempts => 1)")
        other.execute("SELECT jobq.fail(c.id, 'x', c.lease_token) FROM jobq.claim('n-dead') AS c")
        notifications(conn)
        assert one(other, "SELECT jobq.retry_dead('n-dead')") == 1
        assert notifications(conn) == ["n-dead"], "retry_dead that moved jobs"
        assert one(other, "SELECT jobq.retry_dead('n-dead')") == 0
        assert notifications(conn) == [], "retry_dead that moved nothing is silent"
        other.execute("SELECT jobq._periodic_save('n-tick', '* * * * *', 'n-periodic', "
                      "'{\"secret\": 2}', 0, NULL, 'pg_cron')")
        other.execute("SELECT jobq.enqueue_periodic('n-tick')")
        assert notifications(conn) == ["n-periodic"], "enqueue_periodic"
        other.execute("SELECT jobq.enqueue_periodic('n-tick')")
        assert notifications(conn) == [], "a tick whose previous run is active inserts nothing, says nothing"
        other.execute("SELECT count(*) FROM jobq.claim('n-one', 10)")
        other.execute("SELECT count(*) FROM jobq.hold('n-many', 10)")
        assert notifications(conn) == [], "claim and hold say nothing"
