"""What drivers that do not cast get from jobq's signatures. node-postgres sends every parameter
untyped (psycopg does for a str): PostgreSQL chooses the overload and the parameter types. asyncpg and
postgres.js prepare a statement, read the parameter types PostgreSQL inferred, and encode each value for
that type: they need the one overload whose types take what claim returned (a uuid lease token, as a
Python or JS object). docs/sql.md's "Typed drivers" table lists the casts where no signature can help."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg  # type: ignore[import-untyped]
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

Conn = psycopg.Connection[tuple[object, ...]]


def scalar(conn: Conn, sql: str, params: tuple[object, ...] | dict[str, object] = ()) -> object:
    row = conn.execute(sql, params).fetchone()
    assert row is not None
    return row[0]


def test_untyped_parameters_claim_across_queues_and_get_errors(conn: Conn) -> None:
    # psycopg sends a str untyped, as node-postgres sends every parameter: PostgreSQL resolves
    # claim($1, $2) to the text overload, which 0.3.0 refused ("got '{q,r}'").
    conn.execute("SELECT jobq.enqueue('uq', '{}'), jobq.enqueue('ur', '{}')")
    rows = conn.execute("SELECT queue, lease_token FROM jobq.claim(%s, %s)", ("{uq,ur}", 5)).fetchall()
    assert sorted(str(r[0]) for r in rows) == ["uq", "ur"]
    job = scalar(conn, "SELECT id FROM jobq._job WHERE queue = 'uq'")
    with pytest.raises(psycopg.Error) as raised:  # jobq 0.11: the token is a uuid parameter
        conn.execute("SELECT jobq.complete(%s, %s)", (job, "7f9c…-lease-token"))
    assert raised.value.sqlstate == "22P02"
    assert "uuid" in str(raised.value.diag.message_primary)
    with pytest.raises(psycopg.Error) as raised:
        conn.execute("SELECT jobq.complete(%s, %s)", (job, None))
    assert raised.value.sqlstate == "JQ010"
    token = next(str(r[1]) for r in rows if r[0] == "uq")
    assert scalar(conn, "SELECT jobq.complete(%s, %s)", (job, token)) is True, "a token as text works"
    with pytest.raises(psycopg.Error) as raised:
        conn.execute("SELECT count(*) FROM jobq.claim(%s, %s)", ('{uq,"ur}', 5))
    assert raised.value.sqlstate == "JQ001"


# The statements of the examples, as a describe-based driver prepares them (no casts), and the
# parameter types PostgreSQL must infer for them.
PREPARED = {
    "SELECT jobq.complete($1, $2)": "{bigint,uuid}",
    "SELECT jobq.complete($1, $2, $3)": "{bigint,uuid,jsonb}",
    "SELECT jobq.fail($1, $2, $3)": "{bigint,text,uuid}",
    "SELECT jobq.heartbeat($1, $2)": "{bigint,uuid}",
    "SELECT jobq.release($1, $2)": "{bigint,uuid}",
    "SELECT jobq.snooze($1, $2, $3)": "{bigint,uuid,\"timestamp with time zone\"}",
    "SELECT jobq.complete_many($1, $2)": "{bigint[],uuid[]}",
    "SELECT * FROM jobq.claim($1, $2, $3, $4)": "{text,bigint,text,interval}",
    "SELECT jobq.enqueue($1, $2)": "{text,jsonb}",
    "SELECT jobq.next_run_at($1)": "{text[]}",
}


@pytest.mark.parametrize("statement", list(PREPARED))
def test_prepared_statements_infer_the_types_claim_returns(conn: Conn, statement: str) -> None:
    conn.execute(f"PREPARE s AS {statement}")
    assert scalar(conn, "SELECT parameter_types::text FROM pg_prepared_statements WHERE name = 's'") \
        == PREPARED[statement]


async def acknowledge_with_asyncpg(dsn: str) -> list[object]:
    """Claim with asyncpg and pass the lease token back as it came: asyncpg's own UUID object."""
    params = conninfo_to_dict(dsn)
    db = await asyncpg.connect(host=params["host"], port=params["port"], user=params["user"],
                               database=params["dbname"])
    try:
        await db.execute("SELECT jobq.enqueue('apg', '{}') FROM generate_series(1, 5)")
        jobs = await db.fetch("SELECT id, lease_token FROM jobq.claim($1, $2)", "apg", 5)
        assert all(isinstance(job["lease_token"], uuid.UUID) for job in jobs)
        first, second, third, fourth, fifth = jobs
        return [
            await db.fetchval("SELECT jobq.heartbeat($1, $2)", first["id"], first["lease_token"]),
            await db.fetchval("SELECT jobq.complete($1, $2)", first["id"], first["lease_token"]),
            await db.fetchval("SELECT jobq.fail($1, $2, $3)", second["id"], "boom", second["lease_token"]),
            await db.fetchval("SELECT jobq.release($1, $2)", third["id"], third["lease_token"]),
            await db.fetchval("SELECT jobq.complete_many($1, $2)", [fourth["id"], fifth["id"]],
                              [fourth["lease_token"], fifth["lease_token"]]),
            await db.fetchval("SELECT jobq.complete($1, $2)", first["id"], uuid.uuid4()),
        ]
    finally:
        await db.close()


def test_asyncpg_passes_the_lease_token_claim_returned(conn: Conn, dsn: str) -> None:
    # Before 0.11 the text-token overloads won the resolution of an untyped $2, and asyncpg refused the
    # UUID for a text parameter: "invalid input for query argument $2 (expected str, got UUID)".
    assert asyncio.run(acknowledge_with_asyncpg(dsn)) == [True, True, True, True, 2, False]
    left = conn.execute("SELECT status, count(*) FROM jobq.jobs WHERE queue = 'apg' GROUP BY 1 ORDER BY 1")
    assert left.fetchall() == [("ready", 1), ("scheduled", 1)], "released, and failed into a backoff"


@pytest.mark.parametrize("statement", [
    "SELECT count(*) FROM jobq.claim('nq', %s::bigint)",  # JDBC's setLong, a BigInt in postgres.js
    "SELECT count(*) FROM jobq.claim(ARRAY['nq'], %s::bigint)",
    "SELECT count(*) FROM jobq.take('nq', %s::bigint)",
    "SELECT count(*) FROM jobq.hold('nq', %s::bigint)",
])
def test_n_takes_any_integer_type(conn: Conn, statement: str) -> None:
    """n is a bigint (jobq 0.11): an int8 parameter was `42883 function jobq.claim(text, bigint) does not
    exist`. Out of range it is still JQ007, never "integer out of range"."""
    conn.execute("SELECT jobq.enqueue('nq', '{}') FROM generate_series(1, 3)")
    assert scalar(conn, statement, (2,)) == 2
    with pytest.raises(psycopg.Error) as raised:
        conn.execute(statement, (2**40,))
    assert raised.value.sqlstate == "JQ007"
    assert "n must be between 0 and 1000, got 1099511627776" in str(raised.value.diag.message_primary)
