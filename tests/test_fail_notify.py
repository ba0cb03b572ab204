"""jobq.fail wakes its queue's workers (NOTIFY jobq, '<queue>') only when that helps a claim: the retry
is due now (retry_at not in the future, or no backoff), or the failure freed a concurrency slot or a
serial group's turn. A retry waiting out its backoff sends nothing: before jobq 0.11 every idle worker
woke for a claim that found nothing (issue 29). A real LISTEN session reads what each fail sent; a
NOTIFY the test sends afterwards from the same session marks the end, since PostgreSQL delivers one
session's notifications in order."""

from __future__ import annotations

import psycopg
import pytest

Conn = psycopg.Connection[tuple[object, ...]]
MARK = "end-of-test-step"
WAIT = 30.0  # seconds for the mark to arrive: never a bound on the database, the machine is shared


def notified(listener: Conn, conn: Conn) -> list[str]:
    """The payloads on channel jobq up to the mark, which ``conn`` sends now."""
    conn.execute("SELECT pg_notify('jobq', %s)", (MARK,))
    payloads: list[str] = []
    for note in listener.notifies(timeout=WAIT):
        if note.payload == MARK:
            return payloads
        payloads.append(note.payload)
    raise AssertionError(f"the mark did not arrive within {WAIT:.0f} s; got {payloads}")


def claim_one(conn: Conn, queue: str) -> tuple[int, str]:
    row = conn.execute("SELECT id, lease_token::text FROM jobq.claim(%s)", (queue,)).fetchone()
    assert row is not None
    return int(str(row[0])), str(row[1])


@pytest.fixture
def listener(dsn: str) -> psycopg.Connection[tuple[object, ...]]:
    connection = psycopg.connect(dsn, autocommit=True)
    connection.execute("LISTEN jobq")
    return connection


@pytest.mark.parametrize(("settings", "retry_at", "wakes"), [
    ("backoff_base => '1 hour'", None, False),  # in backoff: nothing to claim for an hour
    ("backoff_base => '1 hour'", "now() + interval '10 minutes'", False),  # a worker's own retry_at
    ("backoff_base => '1 hour'", "now() - interval '1 second'", True),  # due at once
    ("backoff_base => '0'", None, True),  # no backoff: due at once
    ("backoff_base => '1 hour', concurrency => 1", None, True),  # its concurrency slot is free
], ids=["backoff", "retry_at-later", "retry_at-past", "no-backoff", "slot-freed"])
def test_fail_notifies_only_when_a_claim_can_gain(
    conn: Conn, listener: Conn, settings: str, retry_at: str | None, wakes: bool
) -> None:
    conn.execute(f"SELECT jobq.configure_queue('fq', {settings})")
    conn.execute("SELECT jobq.enqueue('fq', '{}')")
    assert notified(listener, conn) == ["fq"], "the enqueue's NOTIFY"
    job, token = claim_one(conn, "fq")
    retry = retry_at or "NULL"
    assert conn.execute(f"SELECT jobq.fail(%s, 'boom', %s, {retry})", (job, token)).fetchone() == (True,)
    assert notified(listener, conn) == (["fq"] if wakes else [])
    listener.close()


def test_fail_of_a_serial_group_job_notifies(conn: Conn, listener: Conn) -> None:
    """The next job of its group may run now, whatever the failed one's backoff."""
    conn.execute("SELECT jobq.configure_queue('fg', backoff_base => '1 hour')")
    conn.execute("SELECT jobq.enqueue('fg', '{}', group_key => 'g1') FROM generate_series(1, 2)")
    assert notified(listener, conn) == ["fg"]
    job, token = claim_one(conn, "fg")
    conn.execute("SELECT jobq.fail(%s, 'boom', %s)", (job, token))
    assert notified(listener, conn) == ["fg"]
    listener.close()


def test_fail_held_in_backoff_notifies_nothing(conn: Conn, listener: Conn) -> None:
    conn.execute("SELECT jobq.configure_queue('fh', backoff_base => '1 hour')")
    conn.execute("SELECT jobq.enqueue('fh', '{}')")
    assert notified(listener, conn) == ["fh"]
    with conn.transaction():
        job = conn.execute("SELECT id FROM jobq.hold('fh')").fetchone()
        assert job is not None
        conn.execute("SELECT jobq.fail_held(%s, 'boom')", (job[0],))
    assert notified(listener, conn) == []
    listener.close()
