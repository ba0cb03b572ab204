"""Two enqueue options in SQL: unique_for (a job key also deduplicates
against a job completed within the window; a dead or cancelled job does
not count) and timeout (fixed on the job when it is enqueued, from the
option or the queue's default, handed out with the claim, kept on retry)."""

from __future__ import annotations

import psycopg

Conn = psycopg.Connection[tuple[object, ...]]


def scalar(conn: Conn, sql: str, params: tuple[object, ...] | dict[str, object] = ()) -> object:
    row = conn.execute(sql, params).fetchone()
    assert row is not None
    return row[0]



def test_unique_for_deduplicates_against_a_job_completed_within_the_window(conn: Conn) -> None:
    first = scalar(conn, "SELECT jobq.enqueue('uf', '{}', job_key => 'daily', unique_for => '1 hour')")
    again = scalar(conn, "SELECT jobq.enqueue('uf', '{}', job_key => 'daily', unique_for => '1 hour')")
    assert again == first, "an active job holds the key"
    assert scalar(conn, "SELECT jobq.complete(c.id, c.lease_token) FROM jobq.claim('uf') AS c") is True
    assert scalar(conn, "SELECT count(*) FROM jobq.jobs WHERE queue = 'uf'") == 0, "no history kept"
    daily = "SELECT jobq.enqueue('uf', '{}', job_key => 'daily', unique_for => '1 hour')"
    assert scalar(conn, daily) == first
    ids = conn.execute("SELECT * FROM jobq.enqueue_many('uf', ARRAY['{}', '{}']::jsonb[], "
                       "job_keys => ARRAY['daily', 'other'], unique_for => '1 hour')").fetchall()
    assert ids[0][0] == first and ids[1][0] != first
    assert scalar(conn, "SELECT count(*) FROM jobq._job WHERE queue = 'uf'") == 1, "only 'other' was added"
    # Outside the window (the completion moved back two hours), or without unique_for: a new job.
    conn.execute("UPDATE jobq._key_done SET finished_at = finished_at - interval '2 hours'")
    newer = scalar(conn, "SELECT jobq.enqueue('uf', '{}', job_key => 'daily', unique_for => '1 hour')")
    assert newer != first
    # Old completions go with prune after the longest window.
    conn.execute("UPDATE jobq._key_done SET finished_at = now() - interval '367 days'")
    conn.execute("SELECT jobq.prune()")
    assert scalar(conn, "SELECT count(*) FROM jobq._key_done") == 0


def test_a_dead_or_cancelled_job_does_not_count_for_unique_for(conn: Conn) -> None:
    conn.execute("SELECT jobq.enqueue('ud', '{}', job_key => 'k', max_attempts => 1)")
    conn.execute("SELECT jobq.fail(c.id, 'boom', c.lease_token) FROM jobq.claim('ud') AS c")
    dead = scalar(conn, "SELECT id FROM jobq.jobs WHERE queue = 'ud' AND status = 'dead'")
    fresh = scalar(conn, "SELECT jobq.enqueue('ud', '{}', job_key => 'k', unique_for => '1 hour')")
    assert fresh != dead


def test_a_timeout_is_fixed_on_the_job_and_comes_with_the_claim(conn: Conn) -> None:
    conn.execute("SELECT jobq.configure_queue('to', timeout => '30 seconds')")
    conn.execute("SELECT jobq.enqueue('to', '{\"own\": true}', timeout => '2 seconds')")
    conn.execute("SELECT jobq.enqueue('to', '{\"own\": false}')")
    conn.execute("SELECT jobq.configure_queue('to', timeout => '0')")  # removed: later jobs have none
    conn.execute("SELECT jobq.enqueue('to', '{\"own\": null}')")
    rows = conn.execute("SELECT payload->'own', extract(epoch FROM timeout) FROM jobq.claim('to', 3) "
                        "ORDER BY id").fetchall()
    assert [(r[0], None if r[1] is None else float(str(r[1]))) for r in rows] == [
        (True, 2.0), (False, 30.0), (None, None)]
    assert scalar(conn, "SELECT timeout FROM jobq.queues WHERE queue = 'to'") is None


def test_a_dead_job_keeps_its_timeout_when_retried(conn: Conn) -> None:
    job = scalar(conn, "SELECT jobq.enqueue('tr', '{}', max_attempts => 1, timeout => '5 seconds')")
    conn.execute("SELECT jobq.fail(c.id, 'slow', c.lease_token) FROM jobq.claim('tr') AS c")
    assert scalar(conn, "SELECT jobq.retry(%s)", (job,)) is True
    assert str(scalar(conn, "SELECT timeout FROM jobq.claim('tr')")) == "0:00:05"
