"""jobq 0.4.0 against what broke 0.3.0 when we tried: limits a session could
switch off or another role could stall, untyped parameters (as node-postgres
sends them), and the new enqueue options and operator verbs, in real
sessions. Each test here failed on jobq 0.3.0."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg.types.json import Jsonb
from pytest_postgresql.executors import PostgreSQLExecutor

from tests.chaos_support import drop_login_role, install_script
from tests.conftest import proc_dsn

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


# --- a limit nobody but jobq can change ------------------------------------------------------------

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


# --- what drivers that send untyped parameters get ----------------------------------------------------

def test_untyped_parameters_claim_across_queues_and_get_jq_errors(conn: Conn) -> None:
    # psycopg sends a str untyped, as node-postgres sends every parameter: PostgreSQL resolves
    # claim($1, $2) to the text overload, which 0.3.0 refused ("got '{q,r}'").
    conn.execute("SELECT jobq.enqueue('uq', '{}'), jobq.enqueue('ur', '{}')")
    rows = conn.execute("SELECT queue, lease_token FROM jobq.claim(%s, %s)", ("{uq,ur}", 5)).fetchall()
    assert sorted(str(r[0]) for r in rows) == ["uq", "ur"]
    job = scalar(conn, "SELECT id FROM jobq._job WHERE queue = 'uq'")
    with pytest.raises(psycopg.Error) as raised:
        conn.execute("SELECT jobq.complete(%s, %s)", (job, "7f9c…-lease-token"))
    assert raised.value.sqlstate == "JQ010"
    assert "lease_token" in str(raised.value.diag.message_primary)
    token = next(str(r[1]) for r in rows if r[0] == "uq")
    assert scalar(conn, "SELECT jobq.complete(%s, %s)", (job, token)) is True, "a token as text works"
    with pytest.raises(psycopg.Error) as raised:
        conn.execute("SELECT count(*) FROM jobq.claim(%s, %s)", ('{uq,"ur}', 5))
    assert raised.value.sqlstate == "JQ001"


# --- unique_for ----------------------------------------------------------------------------------------

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


# --- timeout -------------------------------------------------------------------------------------------

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


# --- operator verbs ------------------------------------------------------------------------------------

def test_cancel_jobs_by_status_and_payload(conn: Conn) -> None:
    for i in range(4):
        conn.execute("SELECT jobq.enqueue('cj', %s)", (Jsonb({"customer": i % 2}),))
    conn.execute("SELECT jobq.enqueue('cj', '{\"customer\": 1}', run_at => now() + interval '1 hour')")
    conn.execute("SELECT jobq.enqueue('other', '{\"customer\": 1}')")
    running = conn.execute("SELECT id, lease_token FROM jobq.claim('cj', 1)").fetchone()
    assert running is not None
    assert scalar(conn, "SELECT jobq.cancel_jobs('cj', 'scheduled')") == 1
    assert scalar(conn, "SELECT jobq.cancel_jobs('cj', 'ready', '{\"customer\": 1}')") == 2
    assert scalar(conn, "SELECT jobq.cancel_jobs('cj', 'running')") == 1
    assert scalar(conn, "SELECT jobq.complete(%s, %s)", running) is False, "its holder lost the lease"
    assert scalar(conn, "SELECT jobq.cancel_jobs('cj')") == 1
    statuses = conn.execute(
        "SELECT queue, status, count(*) FROM jobq.jobs GROUP BY 1, 2 ORDER BY 1, 2").fetchall()
    assert statuses == [("cj", "cancelled", 5), ("other", "ready", 1)]


def test_discard_dead_by_age(conn: Conn) -> None:
    ids = enqueue_many(conn, "dd", 3, max_attempts=1)
    conn.execute("SELECT jobq.fail(c.id, 'x', c.lease_token) FROM jobq.claim('dd', 3) AS c")
    conn.execute("UPDATE jobq._job_archive SET finished_at = now() - interval '8 days' WHERE id = %s",
                 (ids[0],))
    assert scalar(conn, "SELECT jobq.discard_dead('dd', interval '7 days')") == 1
    assert scalar(conn, "SELECT jobq.retry(%s)", (ids[0],)) is False, "gone for good"
    row = conn.execute("SELECT dead, dead_total FROM jobq.stats WHERE queue = 'dd'").fetchone()
    assert row == (2, 3), "two dead left; the total still counts the one discarded"
    assert scalar(conn, "SELECT jobq.discard_dead('dd')") == 2
    assert scalar(conn, "SELECT count(*) FROM jobq.jobs WHERE queue = 'dd'") == 0


# --- views ---------------------------------------------------------------------------------------------

def test_views_say_null_and_zero_as_documented(conn: Conn) -> None:
    conn.execute("SELECT jobq.enqueue('v', '{}', run_at => now() + interval '1 hour')")
    row = conn.execute("SELECT ready, oldest_ready_age FROM jobq.stats WHERE queue = 'v'").fetchone()
    assert row == (0, None), "nothing ready: no age"
    row = conn.execute(
        "SELECT updated_at, concurrency, rate_limit FROM jobq.queues WHERE queue = 'v'").fetchone()
    assert row == (None, 0, 0), "never configured; 0 = no limit, as configure_queue takes it"


# --- installing leaves the session as it was ---------------------------------------------------------

def test_the_install_script_gives_the_callers_search_path_back(postgresql_proc: PostgreSQLExecutor) -> None:
    """psql -f / \\i / pyqueue install run the script in the reader's session: its own
    search_path (pg_catalog first, for safety) must not outlive it, or the reader's next
    CREATE TABLE lands in pg_catalog. (CREATE EXTENSION: tests/test_docs.py.)"""
    admin_dsn = proc_dsn(postgresql_proc, "postgres")
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute("DROP DATABASE IF EXISTS search_path_kept WITH (FORCE)")
        admin.execute("CREATE DATABASE search_path_kept")
    try:
        with psycopg.connect(proc_dsn(postgresql_proc, "search_path_kept"), autocommit=True) as session:
            session.execute("SET search_path = app, public")
            session.execute(install_script().encode())
            assert scalar(session, "SHOW search_path") == "app, public"
            session.execute("CREATE TABLE orders (id int)")
            assert scalar(session, "SELECT relnamespace::regnamespace::text FROM pg_class "
                                   "WHERE relname = 'orders'") == "public"
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute("DROP DATABASE IF EXISTS search_path_kept WITH (FORCE)")
