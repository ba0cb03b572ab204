"""When a claim of more than 10 jobs parks behind a crowd (jobq 0.14.0,
issue 24).

A plain claim leases in place (a HOT update) unless the lease at the head
of its queue's claim index is over 50 ms old (jobq._crowded_queues). A
claim of up to 10 jobs then parks its leases, as since 0.8.0. A claim of
more than 10 parks only when the pile it steps over is large for its size:
its session's last claim of the same queues read more than 20 rows of the
claim index per job (kept in ``jobq.claim_pile``), or it has not measured
yet. The head is made old (or young) by moving its leases' start back (or
ahead), and each claim forgets its session's calm verdict first
(tests/test_crowd_memory.py), so that nothing depends on how fast the
machine runs.
"""

from __future__ import annotations

import psycopg

Conn = psycopg.Connection[tuple[object, ...]]


def claim_parked(worker: Conn, n: int) -> list[bool]:
    """Claim n jobs of 'crowd' (no calm verdict remembered); whether each lease was parked."""
    worker.execute("SELECT set_config('jobq.calm_queues', '', false)")
    ids = [r[0] for r in worker.execute("SELECT id FROM jobq.claim('crowd', %s, 'w')", (n,)).fetchall()]
    assert len(ids) == n
    return [bool(r[0]) for r in worker.execute(
        "SELECT parked FROM jobq._job WHERE id = ANY(%s) ORDER BY id", (ids,)).fetchall()]


def pile(worker: Conn) -> str:
    row = worker.execute("SELECT coalesce(current_setting('jobq.claim_pile', true), '')").fetchone()
    assert row is not None
    return str(row[0])


def age_leases(conn: Conn) -> None:
    """The leases held now started a second ago: a crowd at the head."""
    conn.execute("UPDATE jobq._job SET started_at = now() - interval '1 second' WHERE status = 'running'")


def young_leases(conn: Conn) -> None:
    """The leases held now start in an hour: a calm head, however long the
    machine takes between two claims (the crowd is leases over 50 ms old)."""
    conn.execute("UPDATE jobq._job SET started_at = now() + interval '1 hour' WHERE status = 'running'")


def test_a_large_claim_that_measured_a_small_pile_leases_in_place_over_a_crowd(conn: Conn, dsn: str) -> None:
    # Fails on 0.13.0, whose claims of every size parked behind every crowd.
    conn.execute("SELECT jobq.enqueue_many('crowd', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 500)))")
    with psycopg.connect(dsn, autocommit=True) as worker:
        assert claim_parked(worker, 5) == [False] * 5
        young_leases(conn)
        assert claim_parked(worker, 100) == [False] * 100, "a calm head: in place"
        assert pile(worker) == "crowd|1", "it read its 100 jobs and the 5 leases ahead: 1 row a job"
        age_leases(conn)
        assert claim_parked(worker, 100) == [False] * 100, "a crowd, but a small pile: in place"
        assert claim_parked(worker, 10) == [True] * 10, "a claim of 10 parks behind every crowd"
        worker.execute("SELECT set_config('jobq.claim_pile', 'other|1', false)")
        assert claim_parked(worker, 50) == [True] * 50, "a pile measured on other queues does not count"


def test_a_large_claim_parks_behind_a_crowd_until_it_measured_the_pile(conn: Conn, dsn: str) -> None:
    conn.execute("SELECT jobq.enqueue_many('crowd', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 500)))")
    with psycopg.connect(dsn, autocommit=True) as holder, psycopg.connect(dsn, autocommit=True) as worker:
        assert claim_parked(holder, 5) == [False] * 5
        age_leases(conn)
        assert pile(worker) == ""
        assert claim_parked(worker, 100) == [True] * 100, "nothing measured yet: parked, as in 0.13.0"


def test_a_large_claim_parks_behind_a_pile_of_over_20_rows_a_job(conn: Conn, dsn: str) -> None:
    conn.execute("SELECT jobq.enqueue_many('crowd', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 3000)))")
    with psycopg.connect(dsn, autocommit=True) as holder, psycopg.connect(dsn, autocommit=True) as worker:
        for _ in range(25):  # 2,500 leases in place (a forged small pile: however slow the machine)
            holder.execute("SELECT set_config('jobq.claim_pile', 'crowd|1', false)")
            assert claim_parked(holder, 100) == [False] * 100
        age_leases(conn)
        worker.execute("SELECT set_config('jobq.claim_pile', 'crowd|1', false)")
        assert claim_parked(worker, 100) == [False] * 100, "a small pile measured: in place"
        assert pile(worker) == "crowd|26", "this claim read the 2,500 leases ahead and its own 100"
        assert claim_parked(worker, 100) == [True] * 100, "26 rows a job: parked"
        assert claim_parked(worker, 100) == [True] * 100, "and again (its parked leases are out of the index)"
