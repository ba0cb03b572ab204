"""What jobq.stats, jobq.workers and jobq.reap know without reading a
backlog (0.9.0): counts exact up to 10,000 jobs of a queue and estimated
above, running jobs always exact, parked leases found by their expiry, and
leases in place found at the head of their queue's claim order."""

from __future__ import annotations

import time

import psycopg

Conn = psycopg.Connection[tuple[object, ...]]

EXACT_LIMIT = 10_000  # jobq._queue_counts counts up to this many jobs per queue and index
WALK_STEP = 1_000  # jobq._leased_in_place gives up after this many unleased due jobs in a row


def fill(conn: Conn, queue: str, n: int, run_at: str = "now()") -> None:
    conn.execute("SELECT count(*) FROM jobq.enqueue_many(%s, ARRAY(SELECT '{}'::jsonb "
                 f"FROM generate_series(1, %s)), run_at => {run_at})", (queue, n))


def stats(conn: Conn, queue: str) -> tuple[object, ...]:
    row = conn.execute("SELECT ready, scheduled, running, waiting, dead, estimated FROM jobq.stats "
                       "WHERE queue = %s", (queue,)).fetchone()
    assert row is not None
    return tuple(row)


def truth(conn: Conn, queue: str) -> tuple[object, ...]:
    """The same counts, read from every row."""
    row = conn.execute("""
        SELECT count(*) FILTER (WHERE status = 'ready' AND run_at <= now()),
               count(*) FILTER (WHERE status = 'ready' AND run_at > now()),
               count(*) FILTER (WHERE status = 'running'), count(*) FILTER (WHERE status = 'waiting'),
               (SELECT count(*) FROM jobq._job_archive WHERE queue = %(q)s AND status = 'dead')
        FROM jobq._job WHERE queue = %(q)s""", {"q": queue}).fetchone()
    assert row is not None
    return tuple(row)


def test_stats_is_exact_up_to_ten_thousand_jobs_and_an_estimate_above(conn: Conn) -> None:
    conn.execute("SELECT count(*) FROM jobq.enqueue_many('counted', ARRAY(SELECT '{}'::jsonb "
                 "FROM generate_series(1, 7)), run_at => now() - interval '1 hour', max_attempts => 1)")
    for job in conn.execute("SELECT id, lease_token FROM jobq.claim('counted', 7, 'w')").fetchall():
        conn.execute("SELECT jobq.fail(%s, 'boom', %s)", job)  # dead: their one attempt is used up
    fill(conn, "counted", 8_000)
    fill(conn, "counted", 500, "now() + interval '1 hour'")
    parent = conn.execute("SELECT jobq.enqueue('parents', '{}')").fetchone()
    assert parent is not None
    conn.execute("SELECT count(*) FROM jobq.enqueue_many('counted', ARRAY(SELECT '{}'::jsonb "
                 "FROM generate_series(1, 200)), depends_on => ARRAY[%s::bigint])", (parent[0],))
    conn.execute("SELECT count(*) FROM jobq.claim('counted', 300, 'w', interval '1 hour')")
    expected = truth(conn, "counted")
    assert expected == (7_700, 500, 300, 200, 7)
    assert stats(conn, "counted") == (*expected, False)
    # Over the limit: the backlog is an estimate, running jobs are still exact.
    fill(conn, "counted", 3_000)
    ready, scheduled, running, waiting, dead, estimated = stats(conn, "counted")
    exact = truth(conn, "counted")
    assert (running, dead, estimated) == (300, 7, True)
    assert abs(int(str(ready)) - int(str(exact[0]))) < 0.1 * int(str(exact[0])), (ready, exact)
    assert abs(int(str(scheduled)) - 500) < 500, scheduled
    assert waiting == 200  # the parked jobs are few: counted exactly


def test_workers_shows_leases_in_place_and_parked_ones(conn: Conn) -> None:
    fill(conn, "w", 3_000)
    conn.execute("SELECT count(*) FROM jobq.claim('w', 50, 'in-place')")
    job = conn.execute("SELECT id, lease_token FROM jobq.claim('w', 1, 'parked')").fetchone()
    assert job is not None
    assert conn.execute("SELECT jobq.heartbeat(%s, %s)", job).fetchone() == (True,)  # parks it
    rows = conn.execute("SELECT worker, queues, jobs, last_heartbeat_at IS NOT NULL FROM jobq.workers "
                        "ORDER BY worker").fetchall()
    assert rows == [("in-place", ["w"], 50, False), ("parked", ["w"], 1, True)]


def test_reap_finds_expired_leases_in_place_and_parked(conn: Conn) -> None:
    fill(conn, "r", 3_000)
    conn.execute("SELECT count(*) FROM jobq.claim('r', 4, 'w', interval '1 second')")
    job = conn.execute("SELECT id, lease_token FROM jobq.claim('r', 1, 'w', interval '1 hour')").fetchone()
    assert job is not None
    conn.execute("SELECT jobq.heartbeat(%s, %s, interval '1 second')", job)
    row = conn.execute("SELECT parked, parked_expires_at = lease_expires_at FROM jobq._job WHERE id = %s",
                       (job[0],)).fetchone()
    assert row == (True, True)
    time.sleep(1.2)
    assert conn.execute("SELECT jobq.reap()").fetchone() == (5,)
    left = conn.execute("SELECT count(*) FROM jobq._job "
                        "WHERE status = 'running' OR parked_expires_at IS NOT NULL").fetchone()
    assert left == (0,)


def test_reap_parks_leases_in_place_held_over_ten_seconds(conn: Conn) -> None:
    fill(conn, "p", 3_000)
    conn.execute("SELECT count(*) FROM jobq.claim('p', 10, 'w')")
    conn.execute("UPDATE jobq._job SET started_at = now() - interval '11 seconds' WHERE status = 'running'")
    assert conn.execute("SELECT jobq.reap()").fetchone() == (0,)
    row = conn.execute("SELECT count(*) FILTER (WHERE parked AND parked_expires_at = lease_expires_at) "
                       "FROM jobq._job WHERE status = 'running'").fetchone()
    assert row == (10,)


def test_a_lease_behind_more_than_a_step_of_unleased_jobs_is_reaped_once_claims_reach_it(conn: Conn) -> None:
    """The documented limit of the walk: jobs enqueued while the lease ran,
    with an older run_at, sit ahead of it in claim order; behind more than
    1,000 of them it is found once claims have reached it (as its job would
    only have run after them anyway)."""
    fill(conn, "late", 10)
    lease = conn.execute("SELECT id FROM jobq.claim('late', 1, 'w', interval '1 second')").fetchone()
    assert lease is not None
    fill(conn, "late", WALK_STEP + 500, "now() - interval '1 hour'")
    time.sleep(1.2)
    assert conn.execute("SELECT jobq.reap()").fetchone() == (0,)
    for job in conn.execute("SELECT id, lease_token FROM jobq.claim('late', 1000, 'w')").fetchall():
        conn.execute("SELECT jobq.complete(%s, %s)", job)
    assert conn.execute("SELECT jobq.reap()").fetchone() == (1,)
    assert conn.execute("SELECT status FROM jobq._job WHERE id = %s", lease).fetchone() == ("ready",)
