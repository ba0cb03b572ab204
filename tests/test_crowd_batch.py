"""How old a crowd must be before a plain claim parks, by the claim's size
(jobq 0.14.0, issue 24).

A plain claim leases in place (a HOT update) unless the lease at the head
of its queue's claim index is older than its tolerance: 50 ms for a claim
of up to 10 jobs (0.8.0's measure), 5 ms a job above that, so 500 ms for a
claim of 100. A claim steps over the leases ahead of it, and a claim of 100
pays a tenth per job of what a claim of 10 pays for the same pile. Each
claim here first forgets its session's calm verdict, so that none
(tests/test_crowd_memory.py) answers for the probe; the leases at the head
are made old by moving their start back, so that nothing depends on how
fast the machine runs (the tolerances are at least 100 ms away from the
ages tested where a lease must stay in place).
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


def crowd_aged(conn: Conn, worker: Conn, ago: str) -> None:
    """500 jobs in 'crowd', the first five leased in place, then made ``ago`` old."""
    conn.execute("SELECT jobq.enqueue_many('crowd', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 500)))")
    assert claim_parked(worker, 5) == [False] * 5
    conn.execute("UPDATE jobq._job SET started_at = started_at - %s::interval WHERE status = 'running'",
                 (ago,))


def test_a_claim_of_100_leases_in_place_behind_leases_200_ms_old(conn: Conn, dsn: str) -> None:
    # Fails on 0.13.0, whose claims of every size parked behind leases over 50 ms old.
    with psycopg.connect(dsn, autocommit=True) as worker:
        crowd_aged(conn, worker, "200 milliseconds")
        assert claim_parked(worker, 100) == [False] * 100, "tolerance 500 ms: in place (HOT)"
        assert claim_parked(worker, 30) == [True] * 30, "tolerance 150 ms: parked"
        assert claim_parked(worker, 10) == [True] * 10, "tolerance 50 ms: parked"


def test_a_claim_of_100_parks_behind_leases_a_second_old(conn: Conn, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as worker:
        crowd_aged(conn, worker, "1 second")
        assert claim_parked(worker, 100) == [True] * 100, "over 500 ms: the crowd parks even large claims"


def test_a_claim_of_one_keeps_the_50_ms_tolerance(conn: Conn, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as worker:
        crowd_aged(conn, worker, "60 milliseconds")
        assert claim_parked(worker, 1) == [True], "60 ms is over 50 ms: parked"
        assert claim_parked(worker, 40) == [False] * 40, "tolerance 200 ms: in place"
