"""A queue's concurrency limit and a group's one-at-a-time hold against
what other sessions can do: a session setting cannot switch a limit off,
jobs taken in a transaction hold their slots, a role without grants cannot
stall a limited queue, a group or the folding of the counters, and a limited
claim skips a queue another claimer is counting instead of waiting."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest

from tests.chaos_support import drop_login_role

Conn = psycopg.Connection[tuple[object, ...]]


def scalar(conn: Conn, sql: str, params: tuple[object, ...] | dict[str, object] = ()) -> object:
    row = conn.execute(sql, params).fetchone()
    assert row is not None
    return row[0]


def enqueue_many(conn: Conn, queue: str, n: int, **options: object) -> list[int]:
    named = "".join(f", {name} => %({name})s" for name in options)
    rows = conn.execute(
        f"SELECT jobq.enqueue_many(%(queue)s, array_fill('{{}}'::jsonb, ARRAY[%(n)s]){named})",
        {"queue": queue, "n": n, **options}).fetchall()
    return [int(str(r[0])) for r in rows]


@pytest.fixture
def stranger(conn: Conn, dsn: str) -> Iterator[Conn]:
    """A session of a login role with no jobq grant at all."""
    name = f"stranger_{uuid.uuid4().hex[:8]}"
    conn.execute(f"CREATE ROLE {name} LOGIN")
    with psycopg.connect(dsn, user=name, autocommit=True) as session:
        yield session
    drop_login_role(conn, name)


def test_a_session_setting_cannot_switch_off_a_concurrency_limit(conn: Conn) -> None:
    conn.execute("SELECT jobq.configure_queue('lim', concurrency => 1)")
    enqueue_many(conn, "lim", 6)
    assert scalar(conn, "SELECT count(*) FROM jobq.claim('lim', 5)") == 1
    # 0.3.0 subtracted jobq.taken, a setting any session may set, from the running count.
    conn.execute("SET jobq.taken = '{\"lim\": -1000}'")
    assert scalar(conn, "SELECT count(*) FROM jobq.claim('lim', 5)") == 0, "the limit still holds"
    conn.execute("SET jobq.taken = 'garbage'")
    assert scalar(conn, "SELECT count(*) FROM jobq.claim('lim', 5)") == 0, "and garbage is no error"
    assert scalar(conn, "SELECT count(*) FROM jobq._job WHERE queue = 'lim' AND status = 'running'") == 1


def test_jobs_taken_in_a_transaction_still_hold_their_slots(conn: Conn, dsn: str) -> None:
    conn.execute("SELECT jobq.configure_queue('tl', concurrency => 2)")
    enqueue_many(conn, "tl", 5)
    with psycopg.connect(dsn) as tx:
        assert scalar(tx, "SELECT count(*) FROM jobq.take('tl', 1)") == 1
        tx.execute("SET LOCAL jobq.taken = '{}'")  # what 0.3.0 read; now nothing
        assert scalar(tx, "SELECT count(*) FROM jobq.take('tl', 5)") == 1, "one slot left of two"
        assert scalar(tx, "SELECT count(*) FROM jobq.claim('tl', 5)") == 0
        tx.commit()
    assert scalar(conn, "SELECT count(*) FROM jobq._job WHERE queue = 'tl'") == 3
    # The bookkeeping of that finished transaction goes with the next reap.
    conn.execute("SELECT jobq.reap()")
    assert scalar(conn, "SELECT count(*) FROM jobq._taken") == 0


def test_a_role_without_grants_cannot_stall_a_limited_queue_or_a_group(conn: Conn, stranger: Conn) -> None:
    conn.execute("SELECT jobq.configure_queue('lim2', concurrency => 3)")
    enqueue_many(conn, "lim2", 4)
    conn.execute("SELECT jobq.enqueue('grp', '{}', group_key => 'g')")
    # The advisory locks 0.3.0 counted under: any role can take them.
    stranger.execute("SELECT pg_advisory_lock(1785684593, hashtext('lim2'))")
    stranger.execute("SELECT pg_advisory_lock(1785684594, hashtext('grp' || chr(31) || 'g'))")
    assert scalar(conn, "SELECT count(*) FROM jobq.claim('lim2', 3)") == 3
    assert scalar(conn, "SELECT count(*) FROM jobq.claim('grp', 1)") == 1
    # What limited claims lock now is the queue's own row: out of reach.
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        stranger.execute("SELECT FROM jobq._queue WHERE queue = 'lim2' FOR NO KEY UPDATE")


def test_a_role_without_grants_cannot_stop_the_counters_folding(conn: Conn, dsn: str, stranger: Conn) -> None:
    for _ in range(3):  # three finishing statements: three counter rows
        conn.execute("SELECT jobq.enqueue('fold', '{}')")
        conn.execute("SELECT jobq.complete(c.id, c.lease_token) FROM jobq.claim('fold') AS c")
    assert scalar(conn, "SELECT count(*) FROM jobq._counter WHERE queue = 'fold'") == 3
    stranger.execute("SELECT pg_advisory_lock(1785684595, 0)")  # what 0.3.0 folded under
    with psycopg.connect(dsn) as other:
        # Another folder holds some rows: this one neither waits nor counts them twice.
        other.execute("SELECT FROM jobq._counter WHERE queue = 'fold' LIMIT 1 FOR UPDATE")
        conn.execute("SET lock_timeout = '2s'")
        conn.execute("SELECT jobq.reap()")
        assert scalar(conn, "SELECT count(*) FROM jobq._counter WHERE queue = 'fold'") == 2
        other.rollback()
    conn.execute("SELECT jobq.prune()")
    row = conn.execute("SELECT count(*), sum(completed) FROM jobq._counter WHERE queue = 'fold'").fetchone()
    assert row == (1, 3)
    assert scalar(conn, "SELECT completed_total FROM jobq.stats WHERE queue = 'fold'") == 3


def test_a_limited_claim_skips_a_queue_another_claimer_is_counting(conn: Conn, dsn: str) -> None:
    conn.execute("SELECT jobq.configure_queue('busy', concurrency => 5)")
    enqueue_many(conn, "busy", 4)
    with psycopg.connect(dsn) as first:
        assert scalar(first, "SELECT count(*) FROM jobq.take('busy', 1)") == 1  # holds the row lock
        conn.execute("SET lock_timeout = '2s'")
        assert scalar(conn, "SELECT count(*) FROM jobq.claim('busy', 5)") == 0, "no wait, no jobs"
        first.rollback()
    assert scalar(conn, "SELECT count(*) FROM jobq.claim('busy', 5)") == 4
