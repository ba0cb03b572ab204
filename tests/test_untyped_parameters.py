"""What a driver that sends every parameter untyped (node-postgres does;
psycopg does for a str) gets: claim() across several queues, and jobq's own
SQLSTATEs for a malformed lease token or queue list."""

from __future__ import annotations

import psycopg
import pytest

Conn = psycopg.Connection[tuple[object, ...]]


def scalar(conn: Conn, sql: str, params: tuple[object, ...] | dict[str, object] = ()) -> object:
    row = conn.execute(sql, params).fetchone()
    assert row is not None
    return row[0]



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
