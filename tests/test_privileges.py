"""The role matrix, for real: LOGIN roles that are members of jobq_producer,
jobq_worker, jobq_admin, jobq_viewer (0.5.0: the views and metrics() only;
0.6.0: producers and workers also read a job's state and results; 0.9.0:
admins grant per-queue privileges, viewers see them),
and one of none of them, connect and try every
public function (with valid arguments), every view, direct SELECT / INSERT /
UPDATE / DELETE / TRUNCATE on every jobq table, the job id sequence and a
few private helpers. Exactly what README's roles table allows succeeds;
everything else fails with 42501. (pgTAP checks the same grants in the
catalog; this test goes through real sessions.)

Each call runs in its own transaction, rolled back, so the calls do not
depend on each other.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import pyqueue
from tests.chaos_support import drop_login_role, report

Conn = psycopg.Connection[Any]

PRODUCER, WORKER, ADMIN, VIEWER, OUTSIDER = "producer", "worker", "admin", "viewer", "outsider"
ROLES = {PRODUCER: "jobq_producer", WORKER: "jobq_worker", ADMIN: "jobq_admin", VIEWER: "jobq_viewer",
         OUTSIDER: None}
DENIED = "42501"


@dataclass(frozen=True)
class Call:
    """A call with valid arguments; who may make it; and, for an allowed call
    that fails for another reason here (no pg_cron in this database, an
    unknown periodic job), the SQLSTATE that proves it got past the privilege
    check."""

    sql: str
    allowed: frozenset[str]
    allowed_error: str | None = None


def may(*roles: str) -> frozenset[str]:
    return frozenset(roles)


PRODUCE = may(PRODUCER, ADMIN)
WORK = may(WORKER, ADMIN)
OPERATE = may(ADMIN)
EVERYONE = may(PRODUCER, WORKER, ADMIN, VIEWER)
READ = may(ADMIN, VIEWER)
NOBODY = may()

# Keyed by the function's signature as PostgreSQL prints it (regprocedure),
# so that a public function added without a row here fails the test.
FUNCTIONS: dict[str, Call] = {
    "jobq.version()": Call("SELECT jobq.version()", EVERYONE),
    "jobq.enqueue(text,jsonb,timestamp with time zone,integer,integer,text,text,interval,interval,"
    "bigint[],text,jsonb,text,text)":
        Call("SELECT jobq.enqueue('priv', '{}', depends_on => ARRAY[%(ready)s]::bigint[])", PRODUCE),
    "jobq.enqueue_many(text,jsonb[],timestamp with time zone,integer,integer,text[],text,interval,interval,"
    "bigint[],text,jsonb[],text[],text)":
        Call("SELECT count(*) FROM jobq.enqueue_many('priv', ARRAY['{}', '{}']::jsonb[], "
             "depends_on => ARRAY[%(ready)s]::bigint[])", PRODUCE),
    "jobq.enqueue_callback(text,jsonb,bigint[],timestamp with time zone,integer,integer,jsonb)":
        Call("SELECT jobq.enqueue_callback('priv', '{}', ARRAY[%(ready)s]::bigint[])", PRODUCE),
    "jobq.status(bigint)": Call("SELECT jobq.status(%(ready)s)", may(PRODUCER, WORKER, ADMIN)),
    "jobq.result(bigint)": Call("SELECT jobq.result(%(ready)s)", may(PRODUCER, WORKER, ADMIN)),
    "jobq.parent_results(bigint)":
        Call("SELECT count(*) FROM jobq.parent_results(%(ready)s)", may(PRODUCER, WORKER, ADMIN)),
    "jobq.watch(bigint)": Call("SELECT jobq.watch(%(ready)s)", may(PRODUCER, WORKER, ADMIN)),
    "jobq.claim(text,bigint,text,interval)": Call("SELECT count(*) FROM jobq.claim('priv', 1)", WORK),
    "jobq.claim(text[],bigint,text,interval)":
        Call("SELECT count(*) FROM jobq.claim(ARRAY['priv'], 1)", WORK),
    "jobq.take(text,bigint)": Call("SELECT count(*) FROM jobq.take('priv', 1)", WORK),
    "jobq.hold(text,bigint)": Call("SELECT count(*) FROM jobq.hold('priv', 1)", WORK),
    "jobq.complete_held(bigint[],jsonb[])":
        Call("SELECT jobq.complete_held(ARRAY(SELECT id FROM jobq.hold('priv', 1)), ARRAY['1']::jsonb[])",
             WORK),
    "jobq.fail_held(bigint,text,timestamp with time zone)":
        Call("SELECT jobq.fail_held(h.id, 'error') FROM jobq.hold('priv', 1) AS h", WORK),
    "jobq.complete(bigint,uuid,jsonb)": Call("SELECT jobq.complete(%(held)s, %(token)s, '[1]')", WORK),
    "jobq.complete_many(bigint[],uuid[],jsonb[])":
        Call("SELECT jobq.complete_many(ARRAY[%(held)s]::bigint[], ARRAY[%(token)s]::uuid[], "
             "ARRAY['{}']::jsonb[])", WORK),
    "jobq.fail(bigint,text,uuid,timestamp with time zone)":
        Call("SELECT jobq.fail(%(held)s, 'error', %(token)s)", WORK),
    "jobq.heartbeat(bigint,uuid,interval)": Call("SELECT jobq.heartbeat(%(held)s, %(token)s)", WORK),
    "jobq.progress(bigint,uuid,jsonb)": Call("SELECT jobq.progress(%(held)s, %(token)s, '1')", WORK),
    "jobq.release(bigint,uuid)": Call("SELECT jobq.release(%(held)s, %(token)s)", WORK),
    "jobq.snooze(bigint,uuid,timestamp with time zone)":
        Call("SELECT jobq.snooze(%(held)s, %(token)s, now() + interval '1 hour')", WORK),
    "jobq.run_schedules()": Call("SELECT jobq.run_schedules()", WORK),
    "jobq.reap(integer)": Call("SELECT jobq.reap()", WORK),
    "jobq.next_run_at(text[])": Call("SELECT jobq.next_run_at(ARRAY['priv'])", WORK),
    "jobq.retry(bigint)": Call("SELECT jobq.retry(%(dead)s)", OPERATE),
    "jobq.retry_dead(text)": Call("SELECT jobq.retry_dead('dead')", OPERATE),
    "jobq.run_now(bigint)": Call("SELECT jobq.run_now(%(scheduled)s)", OPERATE),
    "jobq.metrics()": Call("SELECT count(*) FROM jobq.metrics()", may(WORKER, ADMIN, VIEWER)),
    "jobq.cancel(bigint)": Call("SELECT jobq.cancel(%(ready)s)", OPERATE),
    "jobq.cancel_jobs(text,text,jsonb,jsonb)": Call("SELECT jobq.cancel_jobs('priv', 'scheduled')", OPERATE),
    "jobq.discard_dead(text,interval)": Call("SELECT jobq.discard_dead('priv', interval '1 day')", OPERATE),
    "jobq.prune(integer)": Call("SELECT jobq.prune()", WORK),
    "jobq.configure_queue(text,integer,interval,interval,double precision,interval,interval,interval,integer,"
    "integer,integer,interval,interval,interval,boolean,jsonb,integer)":
        Call("SELECT * FROM jobq.configure_queue('priv', lease => '1 minute')", OPERATE),
    "jobq.reset_queue(text)": Call("SELECT jobq.reset_queue('priv')", OPERATE),
    "jobq.pause(text)": Call("SELECT jobq.pause('priv')", OPERATE),
    "jobq.resume(text)": Call("SELECT jobq.resume('priv')", OPERATE),
    "jobq.every(text,text,text,jsonb,integer,integer,text)":
        Call("SELECT jobq.every('nightly', '0 3 * * *', 'priv', runner => 'workers')", OPERATE),
    "jobq.unschedule(text)": Call("SELECT jobq.unschedule('nightly')", OPERATE),
    "jobq.enqueue_periodic(text)": Call("SELECT jobq.enqueue_periodic('nightly')", OPERATE,
                                        allowed_error="JQ016"),
    "jobq.schedule_maintenance(text,text)": Call("SELECT * FROM jobq.schedule_maintenance()", OPERATE,
                                                 allowed_error="JQ014"),
    "jobq.unschedule_maintenance()": Call("SELECT jobq.unschedule_maintenance()", OPERATE,
                                          allowed_error="JQ014"),
    "jobq.grant_queue(name,text,text)":
        Call("SELECT jobq.grant_queue('jobq_worker', 'priv*', 'read')", OPERATE),
    "jobq.revoke_queue(name,text,text)":
        Call("SELECT jobq.revoke_queue('jobq_worker', 'priv*', 'read')", OPERATE),
}

PRIVATE_HELPERS: dict[str, Call] = {
    "jobq._finish":
        Call("SELECT count(*) FROM jobq._finish(ARRAY[%(held)s]::bigint[], NULL, 'completed', NULL)", NOBODY),
    "jobq._insert_job": Call("SELECT jobq._insert_job('priv', '{}', now(), 0, 1, NULL, NULL, NULL, NULL)",
                             NOBODY),
    # The row lock limited claims count under: no role but jobq's functions may take it
    # (any role could take the advisory lock 0.3.0 used, and stall the queue).
    "lock jobq._queue rows": Call("SELECT count(*) FROM (SELECT FROM jobq._queue FOR NO KEY UPDATE) AS q",
                                  NOBODY),
    "jobq._check_queue": Call("SELECT jobq._check_queue('priv', 'queue')", NOBODY),
    "jobq._backoff_delay": Call("SELECT jobq._backoff_delay(1, '1 s', '1 h', 0.5, 0.5)", NOBODY),
    "jobq._finish_dependents": Call("SELECT jobq._finish_dependents(ARRAY[%(ready)s]::bigint[], 'completed')",
                                    NOBODY),
    "jobq._restore_descendants": Call("SELECT jobq._restore_descendants(%(dead)s)", NOBODY),
    # What jobq.stats and jobq.workers read (0.9.0): their readers may call them.
    "jobq._queue_counts": Call("SELECT count(*) FROM jobq._queue_counts()", READ),
    "jobq._running": Call("SELECT count(*) FROM jobq._running()", READ),
    "jobq._leased_in_place": Call("SELECT count(*) FROM jobq._leased_in_place(now())", NOBODY),
    "jobq._live_sample": Call("SELECT count(*) FROM jobq._live_sample(now())", NOBODY),
}

TABLES = ("_job", "_job_archive", "_queue", "_rate_start", "_periodic", "_migration", "_counter", "_key_done",
          "_taken", "_job_error", "_job_dep", "_job_wait", "_queue_grant", "_at_commit")
VIEWS = ("stats", "jobs", "queues", "schedules", "workers", "throughput", "job_errors", "job_dependencies",
         "archive_partitions", "queue_grants", "fair_keys")
PRIVATE_VIEWS = ("_queue_defaults", "_live_queues", "_dead_queues", "_read_pattern")
# The archive's partitions (since 0.7.0): read through jobq._job_archive only.
# The default one comes with the install; day partitions (_job_archive_pYYYYMMDD)
# with jobq.prune().
PARTITIONS = ("_job_archive_kept",)


def table_calls(conn: Conn) -> dict[str, Call]:
    """Direct access to every jobq table, view and the sequence."""
    tables = {str(r[0]) for r in conn.execute(
        "SELECT relname FROM pg_class WHERE relnamespace = 'jobq'::regnamespace AND relkind IN ('r', 'p')"
        " AND NOT relispartition")}
    partitions = {str(r[0]) for r in conn.execute(
        "SELECT relname FROM pg_class WHERE relnamespace = 'jobq'::regnamespace AND relkind = 'r'"
        " AND relispartition")}
    views = {str(r[0]) for r in conn.execute(
        "SELECT relname FROM pg_class WHERE relnamespace = 'jobq'::regnamespace AND relkind = 'v'")}
    assert tables == set(TABLES) and views == set(VIEWS) | set(PRIVATE_VIEWS), (tables, views)
    assert set(PARTITIONS) <= partitions and all(
        re.fullmatch(r"_job_archive_p\d{8}", name) for name in partitions - set(PARTITIONS)), partitions
    calls: dict[str, Call] = {}
    for table in TABLES:
        column = conn.execute("SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum = 1",
                              (f"jobq.{table}",)).fetchone()
        assert column is not None
        calls[f"SELECT jobq.{table}"] = Call(f"SELECT count(*) FROM jobq.{table}", OPERATE)
        calls[f"INSERT jobq.{table}"] = Call(f"INSERT INTO jobq.{table} DEFAULT VALUES", NOBODY)
        calls[f"UPDATE jobq.{table}"] = Call(f"UPDATE jobq.{table} SET {column[0]} = {column[0]}", NOBODY)
        calls[f"DELETE jobq.{table}"] = Call(f"DELETE FROM jobq.{table}", NOBODY)
        calls[f"TRUNCATE jobq.{table}"] = Call(f"TRUNCATE jobq.{table} CASCADE", NOBODY)
    for partition in sorted(partitions):
        calls[f"SELECT jobq.{partition}"] = Call(f"SELECT count(*) FROM jobq.{partition}", NOBODY)
        calls[f"DELETE jobq.{partition}"] = Call(f"DELETE FROM jobq.{partition}", NOBODY)
    for view in VIEWS:
        calls[f"SELECT jobq.{view}"] = Call(f"SELECT count(*) FROM jobq.{view}", READ)
    for view in PRIVATE_VIEWS:
        calls[f"SELECT jobq.{view}"] = Call(f"SELECT count(*) FROM jobq.{view}", OPERATE)
    calls["nextval jobq._job_id_seq"] = Call("SELECT nextval('jobq._job_id_seq')", NOBODY)
    calls["SELECT jobq._job_id_seq"] = Call("SELECT last_value FROM jobq._job_id_seq", NOBODY)
    calls["setval jobq._job_id_seq"] = Call("SELECT setval('jobq._job_id_seq', 1)", NOBODY)
    return calls


@pytest.fixture
def logins(conn: Conn) -> Iterator[dict[str, str]]:
    """A LOGIN role per column of the matrix; dropped at the end."""
    suffix = secrets.token_hex(4)
    names = {kind: f"jobq_matrix_{kind}_{suffix}" for kind in ROLES}
    for kind, name in names.items():
        member = ROLES[kind]
        conn.execute(f"CREATE ROLE {name} LOGIN" + (f" IN ROLE {member}" if member else ""))
    try:
        yield names
    finally:
        for name in names.values():
            drop_login_role(conn, name)


def outcome(session: Conn, sql: str, params: dict[str, Any]) -> str:
    """'ok', or the SQLSTATE of the error; always rolled back."""
    try:
        session.execute(sql, params).fetchall()
    except psycopg.Error as error:
        return error.sqlstate or "?"
    else:
        return "ok"
    finally:
        session.rollback()


def test_every_role_can_do_exactly_what_the_readme_allows(
    conn: Conn, dsn: str, logins: dict[str, str], tmp_path: Path
) -> None:
    public = {str(r[0]) for r in conn.execute(
        "SELECT p.oid::regprocedure::text FROM pg_proc AS p "
        "WHERE p.pronamespace = 'jobq'::regnamespace AND p.proname !~ '^_'")}
    assert public == set(FUNCTIONS), ("functions missing from the matrix", public - set(FUNCTIONS),
                                      "rows for functions that do not exist", set(FUNCTIONS) - public)
    # Something for every call to act on.
    ready = pyqueue.enqueue(conn, "priv", {"n": 1})
    pyqueue.enqueue(conn, "priv", {"n": 2})
    scheduled = pyqueue.enqueue(conn, "priv", {"n": 3}, delay=timedelta(hours=1))
    dead_id = pyqueue.enqueue(conn, "dead", {}, max_attempts=1)
    [dying] = pyqueue.claim(conn, "dead")
    assert dying.fail("boom")
    held_id = pyqueue.enqueue(conn, "held", {})
    [held] = pyqueue.claim(conn, "held")
    assert held.id == held_id
    pyqueue.configure_queue(conn, "priv", rate_limit=100)
    params = {"ready": ready, "dead": dead_id, "held": held.id, "token": held.lease_token,
              "scheduled": scheduled}

    calls = {**FUNCTIONS, **PRIVATE_HELPERS, **table_calls(conn)}
    wrong: list[tuple[str, str, str, str]] = []
    tried = 0
    for kind, login in logins.items():
        with psycopg.connect(make_conninfo(dsn, user=login)) as session:
            assert session.execute("SELECT current_user").fetchone() == (login,)
            for name, call in calls.items():
                got = outcome(session, call.sql, params)
                tried += 1
                if kind in call.allowed:
                    fine = got == "ok" or (call.allowed_error is not None and got == call.allowed_error)
                    want = "ok" if call.allowed_error is None else f"ok or {call.allowed_error}"
                else:
                    fine, want = got == DENIED, DENIED
                if not fine:
                    wrong.append((kind, name, want, got))
    allowed = sum(len(call.allowed) for call in calls.values())
    report("role matrix", {
        "roles": len(logins), "objects": len(calls), "checks": tried, "allowed": allowed,
        "denied_with_42501": tried - allowed, "mismatches": len(wrong),
    }, tmp_path)
    assert wrong == [], "\n".join(f"{kind:9} {name}: wanted {want}, got {got}"
                                  for kind, name, want, got in wrong)
    # The denied calls changed nothing; the allowed ones were rolled back.
    assert conn.execute("SELECT status FROM jobq.jobs WHERE id = %s", (held.id,)).fetchone() == ("running",)
    assert conn.execute("SELECT count(*) FROM jobq._job").fetchone() == (4,)
    still = conn.execute("SELECT status FROM jobq.jobs WHERE id = %s", (scheduled,)).fetchone()
    assert still == ("scheduled",), "run_now was rolled back (or denied)"
