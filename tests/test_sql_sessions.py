"""SQL behaviour that one pgTAP transaction cannot see: several real
sessions racing for rows, transactional enqueue, and NOTIFY delivery."""

from __future__ import annotations

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
