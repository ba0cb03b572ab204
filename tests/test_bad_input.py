"""Hostile and broken input, through SQL and through pyqueue.

Every argument of every public function gets its bad values: NULL, empty,
too long, the wrong JSON type, ``'null'::jsonb``, payloads over the size
cap, nesting deeper than PostgreSQL's stack, ``\\u0000``, negative / huge /
NULL batch sizes, priorities and attempt counts out of range, infinite and
absurd times and intervals, SQL injection in queue names, unknown and
finished job ids, wrong lease tokens. Each case asserts the documented
SQLSTATE (jobq's ``JQ…``, or PostgreSQL's own where PostgreSQL rejects the
value before jobq sees it), a message that names the argument, a HINT for
jobq's errors, and that no jobq table changed (their whole contents and the
job id sequence, before and after). Calls that are not errors by contract
(unknown ids, wrong tokens) return false / 0 and change nothing either.

Hostile input that is valid (quotes in job keys, deep but legal nesting)
is stored verbatim and works.
"""

from __future__ import annotations

import json
import secrets
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from pytest_postgresql.executors import PostgreSQLExecutor

import pyqueue
from pyqueue import errors
from tests.chaos_support import install_script, report, snapshot
from tests.worker_support import InThread, scalar, wait_until

# Its module-scoped fixture is built once: under pytest-xdist (--dist loadgroup)
# every test of this module runs on the same worker.
pytestmark = pytest.mark.xdist_group("bad_input")

Conn = psycopg.Connection[Any]

INJECTION = "q'; DROP TABLE jobq._job; --"
QUOTED_KEY = "k'\"; DELETE FROM jobq._job; -- \\ $$ %s %(x)s"
DEEP_OK = 10_000  # levels of nesting PostgreSQL's jsonb parser accepts
DEEP_TOO_MUCH = 100_000  # levels that exceed PostgreSQL's max_stack_depth (54001)


@dataclass(frozen=True)
class Seed:
    """Jobs in every state, to aim the bad calls at."""

    ready: int
    scheduled: int
    held: int
    token: uuid.UUID
    completed: int
    dead: int
    cancelled: int

    def params(self) -> dict[str, Any]:
        return {
            "ready": self.ready, "scheduled": self.scheduled, "held": self.held, "token": self.token,
            "completed": self.completed, "dead": self.dead, "cancelled": self.cancelled,
            "unknown": 987654321, "other_token": uuid.uuid4(), "inject": INJECTION,
        }


@pytest.fixture(scope="module")
def bad_db(postgresql_proc: PostgreSQLExecutor) -> Iterator[Conn]:
    """One database for all the bad-input cases of this module (none of them
    may change it, and each checks that it did not): jobq installed, seeded."""
    name = f"jobq_bad_input_{secrets.token_hex(4)}"
    admin_dsn = make_conninfo(host=postgresql_proc.host, port=postgresql_proc.port,
                              user=postgresql_proc.user, dbname="postgres")
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
        try:
            dsn = make_conninfo(admin_dsn, dbname=name)
            with psycopg.connect(dsn, autocommit=True) as installer:
                installer.execute(install_script().encode())
            with psycopg.connect(dsn, autocommit=True) as conn:
                yield conn
        finally:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.fixture(scope="module")
def seed(bad_db: Conn) -> Seed:
    """A job in every state and a row in every jobq table."""
    return make_seed(bad_db)


def make_seed(conn: Conn) -> Seed:
    pyqueue.configure_queue(conn, "tiny", max_payload_bytes=64)
    pyqueue.configure_queue(conn, "rated", rate_limit=1000)
    pyqueue.pause(conn, "frozen")
    pyqueue.enqueue(conn, "rated", {})
    assert len(pyqueue.claim(conn, "rated")) == 1  # a row in jobq._rate_start
    ready = pyqueue.enqueue(conn, "seed", {"state": "ready"}, key="seed-key")
    scheduled = pyqueue.enqueue(conn, "later", {"state": "scheduled"}, delay=3600)
    completed = pyqueue.enqueue(conn, "done", {"state": "completed"})
    assert pyqueue.claim(conn, "done")[0].complete()
    dead = pyqueue.enqueue(conn, "dead", {"state": "dead"}, max_attempts=1)
    assert pyqueue.claim(conn, "dead")[0].fail("boom")
    cancelled = pyqueue.enqueue(conn, "gone", {"state": "cancelled"})
    assert pyqueue.cancel(conn, cancelled)
    held_id = pyqueue.enqueue(conn, "held", {"state": "running"})
    [held] = pyqueue.claim(conn, "held", lease=timedelta(minutes=30))
    assert held.id == held_id
    return Seed(ready, scheduled, held.id, held.lease_token, completed, dead, cancelled)


@dataclass(frozen=True)
class Bad:
    """A SQL call and what it must do: raise ``sqlstate`` with ``names`` in the
    message, or (``sqlstate=None``) return ``returns``."""

    sql: str
    sqlstate: str | None
    names: str | None = None
    returns: object = None


def jq(sql: str, sqlstate: str, names: str) -> Bad:
    return Bad(sql, sqlstate, names)


def pg(sql: str, sqlstate: str) -> Bad:
    """PostgreSQL itself rejects the value, before jobq runs."""
    return Bad(sql, sqlstate)


def no_op(sql: str, returns: object) -> Bad:
    return Bad(sql, None, returns=returns)


def deep(levels: int) -> str:
    return '{"a":' * levels + "1" + "}" * levels


LONG = "repeat('x', {n})"
E = "SELECT jobq.enqueue"
EM = "SELECT count(*) FROM jobq.enqueue_many"
C = "SELECT count(*) FROM jobq.claim"
CFG = "SELECT * FROM jobq.configure_queue"
CB = "SELECT jobq.enqueue_callback"

SQL_CASES: dict[str, Bad] = {
    # --- enqueue: queue
    "enqueue queue NULL": jq(f"{E}(NULL, '{{}}')", "JQ001", "queue"),
    "enqueue queue empty": jq(f"{E}('', '{{}}')", "JQ001", "queue"),
    "enqueue queue 129 chars": jq(f"{E}(repeat('q', 129), '{{}}')", "JQ001", "queue"),
    "enqueue queue with a space": jq(f"{E}('no spaces', '{{}}')", "JQ001", "queue"),
    "enqueue queue injection": jq(f"{E}(%(inject)s, '{{}}')", "JQ001", "queue"),
    "enqueue queue non-ASCII": jq(f"{E}('émails', '{{}}')", "JQ001", "queue"),
    "enqueue queue trailing newline": jq(f"{E}(E'emails\\n', '{{}}')", "JQ001", "queue"),
    "enqueue queue NUL-free control char": jq(f"{E}(E'em\\tails', '{{}}')", "JQ001", "queue"),
    # --- enqueue: payload
    "enqueue payload NULL": jq(f"{E}('seed', NULL)", "JQ002", "payload"),
    "enqueue payload 'null'": jq(f"{E}('seed', 'null'::jsonb)", "JQ002", "payload"),
    "enqueue payload array": jq(f"{E}('seed', '[1, 2]')", "JQ002", "payload"),
    "enqueue payload string": jq(f"{E}('seed', '\"text\"')", "JQ002", "payload"),
    "enqueue payload number": jq(f"{E}('seed', '42')", "JQ002", "payload"),
    "enqueue payload boolean": jq(f"{E}('seed', 'true')", "JQ002", "payload"),
    "enqueue payload over the default 1 MiB cap": jq(
        f"{E}('seed', jsonb_build_object('blob', (SELECT string_agg(md5(i::text), '') "
        "FROM generate_series(1, 40000) AS i)))", "JQ003", "payload"),
    "enqueue payload over the queue's cap": jq(f"{E}('tiny', jsonb_build_object('x', repeat('y', 100)))",
                                               "JQ003", "payload"),
    "enqueue payload with \\u0000": pg(f"{E}('seed', '{{\"a\": \"\\u0000\"}}')", "22P05"),
    "enqueue payload not JSON": pg(f"{E}('seed', '{{\"a\":')", "22P02"),
    f"enqueue payload nested {DEEP_TOO_MUCH} levels": pg(f"{E}('seed', '{deep(DEEP_TOO_MUCH)}')", "54001"),
    # --- enqueue: run_at
    "enqueue run_at NULL": jq(f"{E}('seed', '{{}}', run_at => NULL)", "JQ006", "run_at"),
    "enqueue run_at infinity": jq(f"{E}('seed', '{{}}', run_at => 'infinity')", "JQ006", "run_at"),
    "enqueue run_at -infinity": jq(f"{E}('seed', '{{}}', run_at => '-infinity')", "JQ006", "run_at"),
    "enqueue run_at in 11 years": jq(f"{E}('seed', '{{}}', run_at => now() + interval '11 years')",
                                     "JQ006", "run_at"),
    "enqueue run_at 11 years ago": jq(f"{E}('seed', '{{}}', run_at => now() - interval '11 years')",
                                      "JQ006", "run_at"),
    "enqueue run_at year 294276": jq(f"{E}('seed', '{{}}', run_at => '294276-12-31 23:59:59+00')",
                                     "JQ006", "run_at"),
    "enqueue run_at NaN": pg(f"{E}('seed', '{{}}', run_at => 'NaN')", "22007"),
    # --- enqueue: priority, max_attempts
    "enqueue priority NULL": jq(f"{E}('seed', '{{}}', priority => NULL)", "JQ004", "priority"),
    "enqueue priority 32768": jq(f"{E}('seed', '{{}}', priority => 32768)", "JQ004", "priority"),
    "enqueue priority -32769": jq(f"{E}('seed', '{{}}', priority => -32769)", "JQ004", "priority"),
    "enqueue priority int max": jq(f"{E}('seed', '{{}}', priority => 2147483647)", "JQ004", "priority"),
    "enqueue priority over int": pg(f"{E}('seed', '{{}}', priority => 2147483648)", "42883"),
    "enqueue priority not a number": pg(f"{E}('seed', '{{}}', priority => 'high')", "22P02"),
    "enqueue max_attempts 0": jq(f"{E}('seed', '{{}}', max_attempts => 0)", "JQ005", "max_attempts"),
    "enqueue max_attempts -1": jq(f"{E}('seed', '{{}}', max_attempts => -1)", "JQ005", "max_attempts"),
    "enqueue max_attempts 1001": jq(f"{E}('seed', '{{}}', max_attempts => 1001)", "JQ005", "max_attempts"),
    "enqueue max_attempts int max": jq(f"{E}('seed', '{{}}', max_attempts => 2147483647)",
                                       "JQ005", "max_attempts"),
    # --- enqueue: job_key, group_key
    "enqueue job_key empty": jq(f"{E}('seed', '{{}}', job_key => '')", "JQ009", "job_key"),
    "enqueue job_key 513 chars": jq(f"{E}('seed', '{{}}', job_key => repeat('k', 513))", "JQ009", "job_key"),
    "enqueue group_key empty": jq(f"{E}('seed', '{{}}', group_key => '')", "JQ009", "group_key"),
    "enqueue group_key 513 chars": jq(f"{E}('seed', '{{}}', group_key => repeat('g', 513))",
                                      "JQ009", "group_key"),
    # --- enqueue_many
    "enqueue_many queue NULL": jq(f"{EM}(NULL, ARRAY['{{}}']::jsonb[])", "JQ001", "queue"),
    "enqueue_many queue injection": jq(f"{EM}(%(inject)s, ARRAY['{{}}']::jsonb[])", "JQ001", "queue"),
    "enqueue_many payloads NULL": jq(f"{EM}('seed', NULL)", "JQ002", "payloads"),
    "enqueue_many a NULL payload": jq(f"{EM}('seed', ARRAY['{{}}', NULL]::jsonb[])", "JQ002", "payloads[2]"),
    "enqueue_many a 'null' payload": jq(f"{EM}('seed', ARRAY['{{}}', 'null']::jsonb[])", "JQ002",
                                        "payloads[2]"),
    "enqueue_many an array payload": jq(f"{EM}('seed', ARRAY['{{}}', '{{}}', '[1]']::jsonb[])", "JQ002",
                                        "payloads[3]"),
    "enqueue_many a payload over the cap": jq(
        f"{EM}('tiny', ARRAY[jsonb_build_object('x', repeat('y', 100))])", "JQ003", "payloads[1]"),
    "enqueue_many 100001 payloads": jq(f"{EM}('seed', array_fill('{{}}'::jsonb, ARRAY[100001]))", "JQ007",
                                       "payloads"),
    "enqueue_many a payload with \\u0000": pg(f"{EM}('seed', ARRAY['{{\"a\": \"\\u0000\"}}']::jsonb[])",
                                              "22P05"),
    "enqueue_many run_at infinity": jq(f"{EM}('seed', ARRAY['{{}}']::jsonb[], run_at => 'infinity')",
                                       "JQ006", "run_at"),
    "enqueue_many priority 40000": jq(f"{EM}('seed', ARRAY['{{}}']::jsonb[], priority => 40000)",
                                      "JQ004", "priority"),
    "enqueue_many max_attempts 0": jq(f"{EM}('seed', ARRAY['{{}}']::jsonb[], max_attempts => 0)",
                                      "JQ005", "max_attempts"),
    "enqueue_many job_keys shorter than payloads": jq(
        f"{EM}('seed', ARRAY['{{}}', '{{}}']::jsonb[], job_keys => ARRAY['a'])", "JQ009", "job_keys"),
    "enqueue_many an empty job key": jq(
        f"{EM}('seed', ARRAY['{{}}', '{{}}']::jsonb[], job_keys => ARRAY['a', ''])", "JQ009", "job_keys[2]"),
    "enqueue_many a 513-char job key": jq(
        f"{EM}('seed', ARRAY['{{}}']::jsonb[], job_keys => ARRAY[repeat('k', 513)])", "JQ009", "job_keys[1]"),
    "enqueue_many group_key empty": jq(f"{EM}('seed', ARRAY['{{}}']::jsonb[], group_key => '')", "JQ009",
                                       "group_key"),
    # --- claim (one queue)
    "claim queue NULL": jq(f"{C}(NULL::text)", "JQ001", "queue"),
    "claim queue empty": jq(f"{C}('')", "JQ001", "queue"),
    "claim queue injection": jq(f"{C}(%(inject)s::text)", "JQ001", "queue"),
    "claim n NULL": jq(f"{C}('seed', NULL)", "JQ007", "n"),
    "claim n -1": jq(f"{C}('seed', -1)", "JQ007", "n"),
    "claim n 1001": jq(f"{C}('seed', 1001)", "JQ007", "n"),
    "claim n int max": jq(f"{C}('seed', 2147483647)", "JQ007", "n"),
    "claim worker 201 chars": jq(f"{C}('seed', 1, repeat('w', 201))", "JQ011", "worker"),
    "claim lease 0": jq(f"{C}('seed', 1, NULL, interval '0')", "JQ008", "lease"),
    "claim lease 999 ms": jq(f"{C}('seed', 1, NULL, interval '999 milliseconds')", "JQ008", "lease"),
    "claim lease negative": jq(f"{C}('seed', 1, NULL, interval '-1 hour')", "JQ008", "lease"),
    "claim lease 25 hours": jq(f"{C}('seed', 1, NULL, interval '25 hours')", "JQ008", "lease"),
    "claim lease 1000 years": jq(f"{C}('seed', 1, NULL, interval '1000 years')", "JQ008", "lease"),
    "claim lease infinity": pg(f"{C}('seed', 1, NULL, 'infinity')", "22007"),
    # --- claim (several queues)
    "claim queues NULL": jq(f"{C}(NULL::text[])", "JQ001", "queues"),
    "claim queues empty": jq(f"{C}('{{}}'::text[])", "JQ001", "queues"),
    "claim queues with a NULL": jq(f"{C}(ARRAY['seed', NULL])", "JQ001", "queues[2]"),
    "claim queues with a bad name": jq(f"{C}(ARRAY['seed', 'bad name'])", "JQ001", "queues[2]"),
    "claim queues with an injection": jq(f"{C}(ARRAY[%(inject)s::text])", "JQ001", "queues[1]"),
    "claim 101 queues": jq(f"{C}(array_fill('seed'::text, ARRAY[101]))", "JQ001", "queues"),
    "claim queues n NULL": jq(f"{C}(ARRAY['seed'], NULL)", "JQ007", "n"),
    # --- take
    "take queue NULL": jq("SELECT count(*) FROM jobq.take(NULL)", "JQ001", "queue"),
    "take n NULL": jq("SELECT count(*) FROM jobq.take('seed', NULL)", "JQ007", "n"),
    "take n -1": jq("SELECT count(*) FROM jobq.take('seed', -1)", "JQ007", "n"),
    "take n 1001": jq("SELECT count(*) FROM jobq.take('seed', 1001)", "JQ007", "n"),
    # --- hold, complete_held, fail_held (0.3.0)
    "hold queue NULL": jq("SELECT count(*) FROM jobq.hold(NULL)", "JQ001", "queue"),
    "hold queue with a space": jq("SELECT count(*) FROM jobq.hold('bad name')", "JQ001", "queue"),
    "hold n NULL": jq("SELECT count(*) FROM jobq.hold('seed', NULL)", "JQ007", "n"),
    "hold n -1": jq("SELECT count(*) FROM jobq.hold('seed', -1)", "JQ007", "n"),
    "hold n 1001": jq("SELECT count(*) FROM jobq.hold('seed', 1001)", "JQ007", "n"),
    "hold writes nothing": no_op("SELECT count(*) FROM jobq.hold('seed', 10)", 1),
    "hold of an unknown queue": no_op("SELECT count(*) FROM jobq.hold('nowhere', 10)", 0),
    "complete_held ids NULL": jq("SELECT jobq.complete_held(NULL)", "JQ010", "ids"),
    "complete_held a NULL id": jq("SELECT jobq.complete_held(ARRAY[%(ready)s, NULL])", "JQ010", "ids"),
    "complete_held 10,001 ids": jq(
        "SELECT jobq.complete_held(ARRAY(SELECT generate_series(1, 10001)::bigint))", "JQ007", "ids"),
    "complete_held a leased job": no_op("SELECT jobq.complete_held(ARRAY[%(held)s]::bigint[])", 0),
    "complete_held an unknown id": no_op("SELECT jobq.complete_held(ARRAY[%(unknown)s]::bigint[])", 0),
    "complete_held a dead job": no_op("SELECT jobq.complete_held(ARRAY[%(dead)s]::bigint[])", 0),
    "fail_held id NULL": jq("SELECT jobq.fail_held(NULL, 'e')", "JQ010", "id"),
    "fail_held retry_at infinity": jq("SELECT jobq.fail_held(%(ready)s, 'e', 'infinity')", "JQ006",
                                      "retry_at"),
    "fail_held a leased job": no_op("SELECT jobq.fail_held(%(held)s, 'e')", False),
    "fail_held an unknown id": no_op("SELECT jobq.fail_held(%(unknown)s, 'e')", False),
    "fail_held a completed job": no_op("SELECT jobq.fail_held(%(completed)s, 'e')", False),
    # --- complete, complete_many
    "complete id NULL": jq("SELECT jobq.complete(NULL, %(token)s)", "JQ010", "id"),
    "complete lease_token NULL": jq("SELECT jobq.complete(%(held)s, NULL)", "JQ010", "lease_token"),
    "complete an unknown id": no_op("SELECT jobq.complete(%(unknown)s, %(other_token)s)", False),
    "complete a completed job": no_op("SELECT jobq.complete(%(completed)s, %(token)s)", False),
    "complete with another worker's token": no_op("SELECT jobq.complete(%(held)s, %(other_token)s)", False),
    "complete a ready job": no_op("SELECT jobq.complete(%(ready)s, %(token)s)", False),
    "complete_many ids NULL": jq("SELECT jobq.complete_many(NULL, ARRAY[%(token)s])", "JQ010", "ids"),
    "complete_many tokens NULL": jq("SELECT jobq.complete_many(ARRAY[%(held)s], NULL)", "JQ010",
                                    "lease_tokens"),
    "complete_many lengths differ": jq("SELECT jobq.complete_many(ARRAY[%(held)s, 1], ARRAY[%(token)s])",
                                       "JQ010", "ids"),
    "complete_many a NULL id": jq("SELECT jobq.complete_many(ARRAY[%(held)s, NULL], "
                                  "ARRAY[%(token)s, %(token)s])", "JQ010", "ids"),
    "complete_many 10001 ids": jq("SELECT jobq.complete_many(array_fill(1::bigint, ARRAY[10001]), "
                                  "array_fill(%(token)s::uuid, ARRAY[10001]))", "JQ007", "ids"),
    "complete_many unknown ids": no_op("SELECT jobq.complete_many(ARRAY[%(unknown)s, %(completed)s], "
                                       "ARRAY[%(other_token)s, %(token)s])", 0),
    # --- jobq 0.4.0: what trying to break 0.3.0 found, and the new arguments
    "fail error NULL": jq("SELECT jobq.fail(%(held)s, NULL, %(token)s)", "JQ017", "error"),
    "fail_held error NULL": jq("SELECT jobq.fail_held(%(ready)s, NULL)", "JQ017", "error"),
    # jobq 0.11: the token is a uuid parameter (one overload, so typed drivers can pass what claim
    # returned): PostgreSQL rejects a malformed one, as it does a payload that is not JSON.
    "complete lease_token not a UUID": pg("SELECT jobq.complete(%(held)s, 'not-a-uuid')", "22P02"),
    "fail lease_token not a UUID": pg("SELECT jobq.fail(%(held)s, 'e', '7f9c-lease-token')", "22P02"),
    "heartbeat lease_token not a UUID": pg("SELECT jobq.heartbeat(%(held)s, 'x')", "22P02"),
    "release lease_token not a UUID": pg("SELECT jobq.release(%(held)s, '')", "22P02"),
    "snooze lease_token not a UUID": pg("SELECT jobq.snooze(%(held)s, 'x', now())", "22P02"),
    "claim lease 1 mon -30 days 1 second": jq(C + "('seed', 1, NULL, interval '1 mon -30 days 1 second')",
                                              "JQ008", "lease"),
    "claim lease 1 day -23:59:59": jq(C + "('seed', 1, NULL, interval '1 day -23:59:59')", "JQ008", "lease"),
    "heartbeat extend 1 day -23:59:00": jq(
        "SELECT jobq.heartbeat(%(held)s, %(token)s, interval '1 day -23:59')", "JQ008", "extend"),
    "configure_queue lease 1 mon -29 days": jq(CFG + "('seed', lease => interval '1 mon -29 days')", "JQ012",
                                               "lease"),
    "configure_queue timeout 2 days": jq(CFG + "('seed', timeout => interval '2 days')", "JQ012", "timeout"),
    "claim a malformed queue array literal": jq(C + "('{seed,\"x}', 1)", "JQ001", "queue"),
    "enqueue timeout 0": jq(E + "('seed', '{}', timeout => interval '0')", "JQ008", "timeout"),
    "enqueue timeout 2 days": jq(E + "('seed', '{}', timeout => interval '2 days')", "JQ008", "timeout"),
    "enqueue timeout 1 mon": jq(E + "('seed', '{}', timeout => interval '1 mon -29 days')", "JQ008",
                                "timeout"),
    "enqueue unique_for without job_key": jq(E + "('seed', '{}', unique_for => interval '1 hour')", "JQ009",
                                             "unique_for"),
    "enqueue unique_for 367 days": jq(E + "('seed', '{}', job_key => 'k', unique_for => interval '367 days')",
                                      "JQ008", "unique_for"),
    "enqueue_many unique_for without job_keys": jq(EM + "('seed', ARRAY['{}']::jsonb[], "
                                                   "unique_for => interval '1 hour')", "JQ009", "unique_for"),
    # jobq 0.12.0: on_duplicate (issue 28)
    "enqueue on_duplicate unknown": jq(E + "('seed', '{}', job_key => 'k', on_duplicate => 'merge')", "JQ017",
                                       "on_duplicate"),
    "enqueue on_duplicate NULL": jq(E + "('seed', '{}', on_duplicate => NULL)", "JQ017", "on_duplicate"),
    "enqueue replace without job_key": jq(E + "('seed', '{}', on_duplicate => 'replace')", "JQ009",
                                          "job_key"),
    "enqueue replace with a bad payload": jq(E + "('seed', '[1]', job_key => 'k', on_duplicate => 'replace')",
                                             "JQ002", "payload"),
    "enqueue_many replace_payload without job_keys": jq(
        EM + "('seed', ARRAY['{}']::jsonb[], on_duplicate => 'replace_payload')", "JQ009", "job_keys"),
    "enqueue_many on_duplicate unknown": jq(
        EM + "('seed', ARRAY['{}']::jsonb[], job_keys => ARRAY['k'], on_duplicate => 'Replace')", "JQ017",
        "on_duplicate"),
    "enqueue_many timeout negative": jq(
        EM + "('seed', ARRAY['{}']::jsonb[], timeout => interval '-1 second')", "JQ008", "timeout"),
    "cancel_jobs queue NULL": jq("SELECT jobq.cancel_jobs(NULL)", "JQ001", "queue"),
    "cancel_jobs status dead": jq("SELECT jobq.cancel_jobs('seed', 'dead')", "JQ017", "status"),
    "cancel_jobs payload_contains an array": jq("SELECT jobq.cancel_jobs('seed', NULL, '[1]')", "JQ017",
                                                "payload_contains"),
    "cancel_jobs nothing matches": no_op("SELECT jobq.cancel_jobs('seed', NULL, '{\"nope\": 1}')", 0),
    "cancel_jobs of an unknown queue": no_op("SELECT jobq.cancel_jobs('nowhere')", 0),
    "discard_dead queue NULL": jq("SELECT jobq.discard_dead(NULL)", "JQ001", "queue"),
    "discard_dead older_than negative": jq("SELECT jobq.discard_dead('seed', interval '-1 day')", "JQ008",
                                           "older_than"),
    "discard_dead of an unknown queue": no_op("SELECT jobq.discard_dead('nowhere')", 0),
    "run_schedules with nothing due": no_op("SELECT jobq.run_schedules() IS NULL", True),
    "every runner unknown": jq("SELECT jobq.every('x', '* * * * *', 'seed', runner => 'cron')", "JQ017",
                               "runner"),
    "every schedule the workers cannot run": jq(
        "SELECT jobq.every('x', '* * *', 'seed', runner => 'workers')", "JQ012", "schedule"),
    "every schedule that never fires": jq("SELECT jobq.every('x', '0 0 30 2 *', 'seed', runner => 'workers')",
                                          "JQ012", "schedule"),
    "unschedule an unknown name": no_op("SELECT jobq.unschedule('nosuch')", False),
    # --- fail
    "fail id NULL": jq("SELECT jobq.fail(NULL, 'e', %(token)s)", "JQ010", "id"),
    "fail lease_token NULL": jq("SELECT jobq.fail(%(held)s, 'e', NULL)", "JQ010", "lease_token"),
    "fail retry_at infinity": jq("SELECT jobq.fail(%(held)s, 'e', %(token)s, 'infinity')", "JQ006",
                                 "retry_at"),
    "fail retry_at in 11 years": jq("SELECT jobq.fail(%(held)s, 'e', %(token)s, now() + interval '11 years')",
                                    "JQ006", "retry_at"),
    "fail with another worker's token": no_op("SELECT jobq.fail(%(held)s, 'e', %(other_token)s)", False),
    "fail an unknown id": no_op("SELECT jobq.fail(%(unknown)s, 'e', %(token)s)", False),
    "fail a dead job": no_op("SELECT jobq.fail(%(dead)s, 'e', %(token)s)", False),
    # --- heartbeat, release, snooze
    "heartbeat id NULL": jq("SELECT jobq.heartbeat(NULL, %(token)s)", "JQ010", "id"),
    "heartbeat lease_token NULL": jq("SELECT jobq.heartbeat(%(held)s, NULL)", "JQ010", "lease_token"),
    "heartbeat extend 0": jq("SELECT jobq.heartbeat(%(held)s, %(token)s, interval '0')", "JQ008", "extend"),
    "heartbeat extend 2 days": jq("SELECT jobq.heartbeat(%(held)s, %(token)s, interval '2 days')",
                                  "JQ008", "extend"),
    "heartbeat with another worker's token": no_op("SELECT jobq.heartbeat(%(held)s, %(other_token)s)", False),
    "heartbeat a cancelled job": no_op("SELECT jobq.heartbeat(%(cancelled)s, %(token)s)", False),
    "progress id NULL": jq("SELECT jobq.progress(NULL, %(token)s, '1')", "JQ010", "id"),
    "progress lease_token NULL": jq("SELECT jobq.progress(%(held)s, NULL, '1')", "JQ010", "lease_token"),
    "progress over the cap": jq(
        "SELECT jobq.progress(%(held)s, %(token)s, jsonb_build_object('blob', "
        "(SELECT string_agg(md5(i::text), '') FROM generate_series(1, 40000) AS i)))", "JQ003", "progress"),
    "progress with another worker's token": no_op(
        "SELECT jobq.progress(%(held)s, %(other_token)s, '1')", False),
    "progress of a cancelled job": no_op("SELECT jobq.progress(%(cancelled)s, %(token)s, '1')", False),
    "progress of an unknown id": no_op("SELECT jobq.progress(%(unknown)s, %(token)s, '1')", False),
    "release id NULL": jq("SELECT jobq.release(NULL, %(token)s)", "JQ010", "id"),
    "release with another worker's token": no_op("SELECT jobq.release(%(held)s, %(other_token)s)", False),
    "snooze run_at NULL": jq("SELECT jobq.snooze(%(held)s, %(token)s, NULL)", "JQ006", "run_at"),
    "snooze run_at infinity": jq("SELECT jobq.snooze(%(held)s, %(token)s, 'infinity')", "JQ006", "run_at"),
    "snooze lease_token NULL": jq("SELECT jobq.snooze(%(held)s, NULL, now())", "JQ010", "lease_token"),
    "snooze with another worker's token": no_op(
        "SELECT jobq.snooze(%(held)s, %(other_token)s, now() + interval '1 hour')", False),
    # --- reap, next_run_at
    "reap n NULL": jq("SELECT jobq.reap(NULL)", "JQ007", "n"),
    "reap n -1": jq("SELECT jobq.reap(-1)", "JQ007", "n"),
    "reap n 1000001": jq("SELECT jobq.reap(1000001)", "JQ007", "n"),
    "next_run_at queues NULL": jq("SELECT jobq.next_run_at(NULL)", "JQ001", "queues"),
    "next_run_at queues empty": jq("SELECT jobq.next_run_at('{}')", "JQ001", "queues"),
    "next_run_at 101 queues": jq("SELECT jobq.next_run_at(array_fill('seed'::text, ARRAY[101]))", "JQ001",
                                 "queues"),
    # --- operator calls
    "retry id NULL": jq("SELECT jobq.retry(NULL)", "JQ010", "id"),
    "retry an unknown id": no_op("SELECT jobq.retry(%(unknown)s)", False),
    "retry a completed job": no_op("SELECT jobq.retry(%(completed)s)", False),
    "retry a running job": no_op("SELECT jobq.retry(%(held)s)", False),
    "run_now id NULL": jq("SELECT jobq.run_now(NULL)", "JQ010", "id"),
    "run_now an unknown id": no_op("SELECT jobq.run_now(%(unknown)s)", False),
    "run_now a running job": no_op("SELECT jobq.run_now(%(held)s)", False),
    "retry_dead queue NULL": jq("SELECT jobq.retry_dead(NULL)", "JQ001", "queue"),
    "retry_dead queue injection": jq("SELECT jobq.retry_dead(%(inject)s)", "JQ001", "queue"),
    "cancel id NULL": jq("SELECT jobq.cancel(NULL)", "JQ010", "id"),
    "cancel an unknown id": no_op("SELECT jobq.cancel(%(unknown)s)", False),
    "cancel a completed job": no_op("SELECT jobq.cancel(%(completed)s)", False),
    "cancel a dead job": no_op("SELECT jobq.cancel(%(dead)s)", False),
    "prune n NULL": jq("SELECT jobq.prune(NULL)", "JQ007", "n"),
    "prune n -1": jq("SELECT jobq.prune(-1)", "JQ007", "n"),
    "prune n over its cap": jq("SELECT jobq.prune(10000001)", "JQ007", "n"),
    "pause queue empty": jq("SELECT jobq.pause('')", "JQ001", "queue"),
    "resume queue injection": jq("SELECT jobq.resume(%(inject)s)", "JQ001", "queue"),
    # --- per-queue privileges (0.9.0)
    "grant_queue role NULL": jq("SELECT jobq.grant_queue(NULL, 'q', 'read')", "JQ021", "role"),
    "grant_queue role unknown": jq("SELECT jobq.grant_queue('no_such_role_bad', 'q', 'read')", "JQ021",
                                   "role"),
    "grant_queue queue_pattern injection": jq("SELECT jobq.grant_queue('jobq_worker', %(inject)s, 'read')",
                                              "JQ001", "queue_pattern"),
    "grant_queue queue_pattern a*b": jq("SELECT jobq.grant_queue('jobq_worker', 'a*b', 'read')", "JQ001",
                                        "queue_pattern"),
    "grant_queue privilege write": jq("SELECT jobq.grant_queue('jobq_worker', 'q', 'write')", "JQ017",
                                      "privilege"),
    "revoke_queue role empty": jq("SELECT jobq.revoke_queue('', 'q', 'read')", "JQ021", "role"),
    "revoke_queue privilege NULL": jq("SELECT jobq.revoke_queue('jobq_worker', 'q', NULL)", "JQ017",
                                      "privilege"),
    "revoke_queue a grant never made": no_op("SELECT jobq.revoke_queue('jobq_worker', 'q', 'read')", False),
    "reset_queue queue NULL": jq("SELECT jobq.reset_queue(NULL)", "JQ001", "queue"),
    "enqueue_periodic name NULL": jq("SELECT jobq.enqueue_periodic(NULL)", "JQ016", "name"),
    "enqueue_periodic name injection": jq("SELECT jobq.enqueue_periodic(%(inject)s)", "JQ016", "name"),
    "enqueue_periodic an unknown name": jq("SELECT jobq.enqueue_periodic('nope')", "JQ016", "name"),
    # --- configure_queue: every setting out of range (on a configured queue and a new one)
    "configure_queue queue NULL": jq(f"{CFG}(NULL, max_attempts => 3)", "JQ001", "queue"),
    "configure_queue queue injection": jq(f"{CFG}(%(inject)s, max_attempts => 3)", "JQ001", "queue"),
    "configure_queue max_attempts 0": jq(f"{CFG}('tiny', max_attempts => 0)", "JQ012", "max_attempts"),
    "configure_queue max_attempts 1001": jq(f"{CFG}('fresh', max_attempts => 1001)", "JQ012", "max_attempts"),
    "configure_queue backoff_base negative": jq(f"{CFG}('tiny', backoff_base => interval '-1 second')",
                                                "JQ012", "backoff_base"),
    "configure_queue backoff_cap 31 days": jq(f"{CFG}('fresh', backoff_cap => interval '31 days')",
                                              "JQ012", "backoff_cap"),
    "configure_queue backoff_jitter 1.5": jq(f"{CFG}('tiny', backoff_jitter => 1.5)", "JQ012",
                                             "backoff_jitter"),
    "configure_queue backoff_jitter -0.1": jq(f"{CFG}('tiny', backoff_jitter => -0.1)", "JQ012",
                                              "backoff_jitter"),
    "configure_queue backoff_jitter NaN": jq(f"{CFG}('tiny', backoff_jitter => 'NaN')", "JQ012",
                                             "backoff_jitter"),
    "configure_queue backoff_jitter Infinity": jq(f"{CFG}('fresh', backoff_jitter => 'Infinity')", "JQ012",
                                                  "backoff_jitter"),
    "configure_queue lease 0": jq(f"{CFG}('tiny', lease => interval '0')", "JQ012", "lease"),
    "configure_queue lease 2 days": jq(f"{CFG}('fresh', lease => interval '2 days')", "JQ012", "lease"),
    "configure_queue retention negative": jq(f"{CFG}('tiny', retention => interval '-1 day')", "JQ012",
                                             "retention"),
    "configure_queue dead_retention 0": jq(f"{CFG}('tiny', dead_retention => interval '0')", "JQ012",
                                           "dead_retention"),
    "configure_queue max_payload_bytes 0": jq(f"{CFG}('tiny', max_payload_bytes => 0)", "JQ012",
                                              "max_payload_bytes"),
    "configure_queue max_payload_bytes over 100 MiB": jq(f"{CFG}('fresh', max_payload_bytes => 104857601)",
                                                         "JQ012", "max_payload_bytes"),
    "configure_queue concurrency -1": jq(f"{CFG}('tiny', concurrency => -1)", "JQ012", "concurrency"),
    "configure_queue rate_limit -1": jq(f"{CFG}('rated', rate_limit => -1)", "JQ012", "rate_limit"),
    "configure_queue rate_interval 0": jq(f"{CFG}('rated', rate_interval => interval '0')", "JQ012",
                                          "rate_interval"),
    "configure_queue result_retention negative": jq(f"{CFG}('tiny', result_retention => interval '-1 day')",
                                                    "JQ012", "result_retention"),
    # --- workflows (0.6.0): parents, results, a job's state
    "enqueue depends_on with NULL": jq(f"{E}('seed', '{{}}', depends_on => ARRAY[%(ready)s, NULL]::bigint[])",
                                       "JQ018", "depends_on"),
    "enqueue depends_on duplicate": jq(
        f"{E}('seed', '{{}}', depends_on => ARRAY[%(ready)s, %(ready)s]::bigint[])", "JQ018", "depends_on"),
    "enqueue depends_on 100,001 ids": jq(
        f"{E}('seed', '{{}}', depends_on => ARRAY(SELECT generate_series(1, 100001))::bigint[])", "JQ018",
        "depends_on"),
    "enqueue depends_on unknown id": jq(
        f"{E}('seed', '{{}}', depends_on => ARRAY[%(ready)s, %(unknown)s]::bigint[])", "JQ019", "depends_on"),
    "enqueue depends_on id 0": jq(f"{E}('seed', '{{}}', depends_on => ARRAY[0]::bigint[])", "JQ019",
                                  "depends_on"),
    "enqueue on_parent_failure unknown": jq(f"{E}('seed', '{{}}', depends_on => ARRAY[%(ready)s]::bigint[], "
                                            "on_parent_failure => 'ignore')", "JQ017", "on_parent_failure"),
    "enqueue on_parent_failure NULL": jq(f"{E}('seed', '{{}}', on_parent_failure => NULL)", "JQ017",
                                         "on_parent_failure"),
    "enqueue_many depends_on duplicate": jq(
        f"{EM}('seed', ARRAY['{{}}']::jsonb[], depends_on => ARRAY[%(dead)s, %(dead)s]::bigint[])", "JQ018",
        "depends_on"),
    "enqueue_many depends_on unknown id": jq(
        f"{EM}('seed', ARRAY['{{}}']::jsonb[], depends_on => ARRAY[%(unknown)s]::bigint[])", "JQ019",
        "depends_on"),
    "enqueue_callback members NULL": jq(f"{CB}('seed', '{{}}', NULL)", "JQ018", "members"),
    "enqueue_callback members unknown id": jq(f"{CB}('seed', '{{}}', ARRAY[%(unknown)s]::bigint[])", "JQ019",
                                              "members"),
    "enqueue_callback payload array": jq(f"{CB}('seed', '[1]', ARRAY[%(ready)s]::bigint[])", "JQ002",
                                         "payload"),
    "enqueue_callback queue injection": jq(f"{CB}(%(inject)s, '{{}}', ARRAY[]::bigint[])", "JQ001", "queue"),
    "complete result over the cap": jq(
        "SELECT jobq.complete(%(held)s, %(token)s, jsonb_build_object('blob', "
        "(SELECT string_agg(md5(i::text), '') FROM generate_series(1, 40000) AS i)))", "JQ003", "result"),
    "complete_many results of another length": jq(
        "SELECT jobq.complete_many(ARRAY[%(held)s]::bigint[], ARRAY[%(token)s]::uuid[], "
        "ARRAY['1', '2']::jsonb[])", "JQ010", "results"),
    "status NULL": jq("SELECT jobq.status(NULL)", "JQ010", "id"),
    "status unknown id": jq("SELECT jobq.status(%(unknown)s)", "JQ019", "unknown"),
    "result unknown id": jq("SELECT jobq.result(%(unknown)s)", "JQ019", "unknown"),
    "result NULL": jq("SELECT jobq.result(NULL)", "JQ010", "id"),
    "parent_results unknown id": jq("SELECT count(*) FROM jobq.parent_results(%(unknown)s)", "JQ019",
                                    "unknown"),
    "watch unknown id": jq("SELECT jobq.watch(%(unknown)s)", "JQ019", "unknown"),
    "result of a running job": no_op("SELECT jobq.result(%(held)s)", None),
    # --- array arguments are lists (0.9.0): one dimension; any lower bound, an element named by its subscript
    "enqueue depends_on two-dimensional": jq(
        f"{E}('seed', '{{}}', depends_on => ARRAY[[%(ready)s, %(dead)s], [%(completed)s, %(cancelled)s]])",
        "JQ018", "depends_on must be a one-dimensional array"),
    "enqueue depends_on a NULL at subscript 0": jq(
        f"{E}('seed', '{{}}', depends_on => ('[0:1]={{' || %(ready)s || ',NULL}}')::bigint[])", "JQ018",
        "depends_on[1] is NULL"),
    "enqueue_many depends_on two-dimensional": jq(
        f"{EM}('seed', ARRAY['{{}}']::jsonb[], depends_on => ARRAY[[%(ready)s], [%(dead)s]])", "JQ018",
        "depends_on must be a one-dimensional array"),
    "enqueue_callback members two-dimensional": jq(
        f"{CB}('seed', '{{}}', ARRAY[[%(ready)s, %(dead)s], [%(completed)s, %(cancelled)s]])", "JQ018",
        "members must be a one-dimensional array"),
    "enqueue_callback members a NULL at subscript -1": jq(
        f"{CB}('seed', '{{}}', ('[-1:0]={{NULL,' || %(ready)s || '}}')::bigint[])", "JQ018",
        "members[-1] is NULL"),
    "enqueue_many payloads two-dimensional": jq(
        f"{EM}('seed', ARRAY[['{{}}', '{{}}'], ['{{}}', '{{}}']]::jsonb[])", "JQ002",
        "payloads must be a one-dimensional array"),
    "enqueue_many a bad payload at subscript 1 of [0:2]": jq(
        f"{EM}('seed', '[0:2]={{\"{{}}\",1,\"{{}}\"}}'::jsonb[])", "JQ002", "payloads[1] must be"),
    "enqueue_many job_keys two-dimensional": jq(
        f"{EM}('seed', ARRAY['{{}}', '{{}}']::jsonb[], job_keys => ARRAY[['a', 'b']])", "JQ009",
        "job_keys must be a one-dimensional array"),
    "enqueue_many an empty job key at subscript 6 of [5:6]": jq(
        f"{EM}('seed', ARRAY['{{}}', '{{}}']::jsonb[], job_keys => '[5:6]={{a,\"\"}}'::text[])", "JQ009",
        "job_keys[6] must be"),
    "claim queues two-dimensional": jq(f"{C}(ARRAY[['seed', 'later']])", "JQ001",
                                       "queues must be a one-dimensional array"),
    "claim queues a bad name at subscript 0": jq(f"{C}('[0:1]={{\"bad name\",seed}}'::text[])", "JQ001",
                                                 "queues[0] must be"),
    "next_run_at queues two-dimensional": jq("SELECT jobq.next_run_at(ARRAY[['seed'], ['later']])", "JQ001",
                                             "queues must be a one-dimensional array"),
    "next_run_at queues a bad name at subscript 0": jq(
        "SELECT jobq.next_run_at('[0:1]={\"bad name\",seed}'::text[])", "JQ001", "queues[0] must be"),
    "complete_many ids two-dimensional": jq(
        "SELECT jobq.complete_many(ARRAY[[%(held)s]], ARRAY[[%(token)s]]::uuid[])", "JQ010",
        "ids must be a one-dimensional array"),
    "complete_many lease_tokens two-dimensional": jq(
        "SELECT jobq.complete_many(ARRAY[%(held)s], ARRAY[[%(token)s]]::uuid[])", "JQ010",
        "lease_tokens must be a one-dimensional array"),
    "complete_many results two-dimensional": jq(
        "SELECT jobq.complete_many(ARRAY[%(held)s], ARRAY[%(token)s]::uuid[], ARRAY[['1']]::jsonb[])",
        "JQ010", "results must be a one-dimensional array"),
    "complete_held ids two-dimensional": jq("SELECT jobq.complete_held(ARRAY[[%(ready)s]])", "JQ010",
                                            "ids must be a one-dimensional array"),
}


def test_there_are_enough_sql_cases_and_every_public_function_has_some(bad_db: Conn) -> None:
    conn = bad_db
    assert len(SQL_CASES) >= 40
    public = {str(r[0]) for r in conn.execute(
        "SELECT DISTINCT p.proname FROM pg_proc AS p WHERE p.pronamespace = 'jobq'::regnamespace "
        "AND p.proname !~ '^_'")}
    # pg_cron's maintenance functions fail with JQ014 here (test_periodic.py covers them);
    # version() and metrics() take nothing.
    untested = {"schedule_maintenance", "unschedule_maintenance", "version", "metrics"}
    covered = {name for name in public if any(f"jobq.{name}(" in case.sql for case in SQL_CASES.values())}
    assert public - untested - covered == set()


@pytest.mark.parametrize("case", sorted(SQL_CASES))
def test_bad_sql_input_is_refused_and_changes_nothing(bad_db: Conn, seed: Seed, case: str) -> None:
    conn, bad = bad_db, SQL_CASES[case]
    before = snapshot(conn)
    if bad.sqlstate is None:
        assert scalar(conn, bad.sql, seed.params()) == bad.returns
    else:
        with pytest.raises(psycopg.Error) as caught:
            conn.execute(bad.sql, seed.params())
        error = caught.value
        assert error.sqlstate == bad.sqlstate, error
        message = error.diag.message_primary or ""
        if bad.sqlstate.startswith("JQ"):
            assert message.startswith("jobq: "), message
            assert bad.names is not None and bad.names in message, message
            assert error.diag.message_hint, f"no HINT: {message}"
    assert snapshot(conn) == before


# --- the same through pyqueue ------------------------------------------------------

@dataclass(frozen=True)
class PyBad:
    """A pyqueue call and the exception it must raise (``names`` in its message
    for jobq's errors), or the value it must return."""

    call: Callable[[Conn, Seed], object]
    raises: type[BaseException] | None
    names: str | None = None
    returns: object = None


def deep_dict(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {"a": 1}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


FAR = datetime(3000, 1, 1, tzinfo=UTC)
YEAR_ONE = datetime(1, 1, 1, tzinfo=UTC)
NAIVE = datetime(2030, 1, 1)  # the point: no time zone

PY_CASES: dict[str, PyBad] = {
    "enqueue queue None": PyBad(lambda c, s: pyqueue.enqueue(c, None, {}),  # type: ignore[arg-type]
                                errors.InvalidQueueName, "queue"),
    "enqueue queue empty": PyBad(lambda c, s: pyqueue.enqueue(c, "", {}), errors.InvalidQueueName, "queue"),
    "enqueue queue injection": PyBad(lambda c, s: pyqueue.enqueue(c, INJECTION, {}), errors.InvalidQueueName,
                                     "queue"),
    "enqueue queue 129 chars": PyBad(lambda c, s: pyqueue.enqueue(c, "q" * 129, {}), errors.InvalidQueueName,
                                     "queue"),
    "enqueue payload None": PyBad(lambda c, s: pyqueue.enqueue(c, "q", None),  # type: ignore[arg-type]
                                  errors.InvalidPayload, "payload"),
    "enqueue payload list": PyBad(lambda c, s: pyqueue.enqueue(c, "q", [1, 2]),  # type: ignore[arg-type]
                                  errors.InvalidPayload, "payload"),
    "enqueue payload str": PyBad(lambda c, s: pyqueue.enqueue(c, "q", "text"),  # type: ignore[arg-type]
                                 errors.InvalidPayload, "payload"),
    "enqueue payload with NUL": PyBad(lambda c, s: pyqueue.enqueue(c, "q", {"a": "\x00"}),
                                      errors.InvalidPayload, "payload"),
    "enqueue payload over the cap": PyBad(lambda c, s: pyqueue.enqueue(c, "tiny", {"x": "y" * 100}),
                                          errors.PayloadTooLarge, "payload"),
    "enqueue payload nested too deep for Python": PyBad(
        lambda c, s: pyqueue.enqueue(c, "q", deep_dict(DEEP_OK)), errors.InvalidPayload, "payload"),
    "enqueue priority 40000": PyBad(lambda c, s: pyqueue.enqueue(c, "q", {}, priority=40000),
                                    errors.InvalidPriority, "priority"),
    "enqueue priority 2**31": PyBad(lambda c, s: pyqueue.enqueue(c, "q", {}, priority=2**31),
                                    errors.InvalidPriority, "priority"),
    "enqueue max_attempts 0": PyBad(lambda c, s: pyqueue.enqueue(c, "q", {}, max_attempts=0),
                                    errors.InvalidMaxAttempts, "max_attempts"),
    "enqueue key empty": PyBad(lambda c, s: pyqueue.enqueue(c, "q", {}, key=""), errors.InvalidJobKey,
                               "job_key"),
    "enqueue key 513 chars": PyBad(lambda c, s: pyqueue.enqueue(c, "q", {}, key="k" * 513),
                                   errors.InvalidJobKey, "job_key"),
    "enqueue group_key empty": PyBad(lambda c, s: pyqueue.enqueue(c, "q", {}, group_key=""),
                                     errors.InvalidJobKey, "group_key"),
    "enqueue run_at year 3000": PyBad(lambda c, s: pyqueue.enqueue(c, "q", {}, run_at=FAR),
                                      errors.InvalidTime, "run_at"),
    "enqueue run_at year 1": PyBad(lambda c, s: pyqueue.enqueue(c, "q", {}, run_at=YEAR_ONE),
                                   errors.InvalidTime, "run_at"),
    "enqueue delay 11 years": PyBad(lambda c, s: pyqueue.enqueue(c, "q", {}, delay=timedelta(days=4020)),
                                    errors.InvalidTime, "run_at"),
    "enqueue delay -1e9 s": PyBad(lambda c, s: pyqueue.enqueue(c, "q", {}, delay=-1e9), errors.InvalidTime,
                                  "delay"),
    "enqueue delay NaN": PyBad(lambda c, s: pyqueue.enqueue(c, "q", {}, delay=float("nan")),
                               errors.InvalidTime, "delay"),
    "enqueue delay inf": PyBad(lambda c, s: pyqueue.enqueue(c, "q", {}, delay=float("inf")),
                               errors.InvalidTime, "delay"),
    "enqueue naive run_at": PyBad(lambda c, s: pyqueue.enqueue(c, "q", {}, run_at=NAIVE), errors.InvalidTime,
                                  "run_at"),
    "enqueue delay and run_at": PyBad(lambda c, s: pyqueue.enqueue(c, "q", {}, delay=1, run_at=FAR),
                                      errors.InvalidTime, "delay"),
    "enqueue_many a None payload": PyBad(
        lambda c, s: pyqueue.enqueue_many(c, "q", [{}, None]),  # type: ignore[list-item]
        errors.InvalidPayload, "payloads[2]"),
    "enqueue_many keys shorter than payloads": PyBad(
        lambda c, s: pyqueue.enqueue_many(c, "q", [{}, {}], keys=["a"]), errors.InvalidJobKey, "job_keys"),
    "enqueue_many an empty key": PyBad(lambda c, s: pyqueue.enqueue_many(c, "q", [{}], keys=[""]),
                                       errors.InvalidJobKey, "job_keys[1]"),
    "enqueue_many queue injection": PyBad(lambda c, s: pyqueue.enqueue_many(c, INJECTION, [{}]),
                                          errors.InvalidQueueName, "queue"),
    "claim n -1": PyBad(lambda c, s: pyqueue.claim(c, "q", -1), errors.InvalidBatchSize, "n"),
    "claim n None": PyBad(lambda c, s: pyqueue.claim(c, "q", None),  # type: ignore[arg-type]
                          errors.InvalidBatchSize, "n"),
    "claim n 1001": PyBad(lambda c, s: pyqueue.claim(c, "q", 1001), errors.InvalidBatchSize, "n"),
    "claim n 2**40": PyBad(lambda c, s: pyqueue.claim(c, "q", 2**40), errors.InvalidBatchSize, "n"),
    "claim lease 0": PyBad(lambda c, s: pyqueue.claim(c, "q", lease=timedelta(0)), errors.InvalidInterval,
                           "lease"),
    "claim lease 2 days": PyBad(lambda c, s: pyqueue.claim(c, "q", lease=timedelta(days=2)),
                                errors.InvalidInterval, "lease"),
    "claim worker 201 chars": PyBad(lambda c, s: pyqueue.claim(c, "q", worker="w" * 201),
                                    errors.InvalidWorkerName, "worker"),
    "claim no queues": PyBad(lambda c, s: pyqueue.claim(c, []), errors.InvalidQueueName, "queues"),
    "claim a bad queue among several": PyBad(lambda c, s: pyqueue.claim(c, ["q", "bad name"]),
                                             errors.InvalidQueueName, "queues[2]"),
    "complete None": PyBad(lambda c, s: pyqueue.complete(c, None, None),  # type: ignore[arg-type]
                           errors.MissingLease, "id"),
    "complete unknown id": PyBad(lambda c, s: pyqueue.complete(c, 987654321, uuid.uuid4()), None,
                                 returns=False),
    "complete with a wrong token": PyBad(lambda c, s: pyqueue.complete(c, s.held, uuid.uuid4()), None,
                                         returns=False),
    "complete a finished job": PyBad(lambda c, s: pyqueue.complete(c, s.completed, s.token), None,
                                     returns=False),
    "fail with a wrong token": PyBad(lambda c, s: pyqueue.fail(c, s.held, uuid.uuid4(), "e"), None,
                                     returns=False),
    "fail the held job, retry_at year 3000": PyBad(
        lambda c, s: pyqueue.fail(c, s.held, s.token, "e", retry_at=FAR), errors.InvalidTime, "retry_at"),
    "fail a naive retry_at": PyBad(lambda c, s: pyqueue.fail(c, s.held, s.token, "e", retry_at=NAIVE),
                                   errors.InvalidTime, "retry_at"),
    "heartbeat extend 0": PyBad(lambda c, s: pyqueue.heartbeat(c, s.held, s.token, timedelta(0)),
                                errors.InvalidInterval, "extend"),
    "heartbeat with a wrong token": PyBad(lambda c, s: pyqueue.heartbeat(c, s.held, uuid.uuid4()), None,
                                          returns=False),
    "release with a wrong token": PyBad(lambda c, s: pyqueue.release(c, s.held, uuid.uuid4()), None,
                                        returns=False),
    "snooze the held job to year 3000": PyBad(lambda c, s: pyqueue.snooze(c, s.held, s.token, run_at=FAR),
                                              errors.InvalidTime, "run_at"),
    "snooze without a time": PyBad(lambda c, s: pyqueue.snooze(c, s.held, s.token), errors.InvalidTime,
                                   "snooze"),
    "reap -1": PyBad(lambda c, s: pyqueue.reap(c, -1), errors.InvalidBatchSize, "n"),
    "retry None": PyBad(lambda c, s: pyqueue.retry(c, None),  # type: ignore[arg-type]
                        errors.MissingLease, "id"),
    "retry a completed job": PyBad(lambda c, s: pyqueue.retry(c, s.completed), None, returns=False),
    "cancel None": PyBad(lambda c, s: pyqueue.cancel(c, None),  # type: ignore[arg-type]
                         errors.MissingLease, "id"),
    "cancel an unknown id": PyBad(lambda c, s: pyqueue.cancel(c, 987654321), None, returns=False),
    "retry_dead queue empty": PyBad(lambda c, s: pyqueue.retry_dead(c, ""), errors.InvalidQueueName, "queue"),
    "pause a bad queue": PyBad(lambda c, s: pyqueue.pause(c, "bad name"), errors.InvalidQueueName, "queue"),
    "resume queue None": PyBad(lambda c, s: pyqueue.resume(c, None),  # type: ignore[arg-type]
                               errors.InvalidQueueName, "queue"),
    "configure_queue jitter NaN": PyBad(
        lambda c, s: pyqueue.configure_queue(c, "tiny", backoff_jitter=float("nan")),
        errors.InvalidSetting, "backoff_jitter"),
    "configure_queue max_attempts 0": PyBad(lambda c, s: pyqueue.configure_queue(c, "tiny", max_attempts=0),
                                            errors.InvalidSetting, "max_attempts"),
    "configure_queue lease inf": PyBad(lambda c, s: pyqueue.configure_queue(c, "tiny", lease=float("inf")),
                                       errors.InvalidSetting, "lease"),
    "configure_queue unknown setting": PyBad(lambda c, s: pyqueue.configure_queue(c, "tiny", speed=11),
                                             TypeError),
    "configure_queue queue injection": PyBad(lambda c, s: pyqueue.configure_queue(c, INJECTION, lease=60),
                                             errors.InvalidQueueName, "queue"),
}


@pytest.mark.parametrize("case", sorted(PY_CASES))
def test_bad_python_input_raises_a_typed_error_and_changes_nothing(
    bad_db: Conn, seed: Seed, case: str
) -> None:
    conn, bad = bad_db, PY_CASES[case]
    before = snapshot(conn)
    if bad.raises is None:
        assert bad.call(conn, seed) == bad.returns
    else:
        with pytest.raises(bad.raises) as caught:
            bad.call(conn, seed)
        error = caught.value
        assert type(error) is bad.raises or not issubclass(bad.raises, errors.JobqError)
        if isinstance(error, errors.JobqError):
            assert error.sqlstate == type(error).SQLSTATE
            assert bad.names is not None and bad.names in error.message, error.message
            assert error.hint
    assert snapshot(conn) == before


def test_figures(tmp_path: Path) -> None:
    """The count of bad-input cases, for the report (each runs as its own test above)."""
    refused = sum(1 for b in SQL_CASES.values() if b.sqlstate) + sum(1 for b in PY_CASES.values() if b.raises)
    report("bad input", {
        "sql_cases": len(SQL_CASES), "python_cases": len(PY_CASES), "refused_with_an_error": refused,
        "false_or_zero_no_ops": len(SQL_CASES) + len(PY_CASES) - refused,
        "jobq_sqlstates_exercised": len({b.sqlstate for b in SQL_CASES.values() if b.sqlstate
                                         and b.sqlstate.startswith("JQ")}),
        "tables_changed": 0,
    }, tmp_path)
    assert len(SQL_CASES) + len(PY_CASES) >= 80


# --- hostile but valid input is stored verbatim and works ----------------------------

def test_quotes_and_injection_in_a_job_key_are_stored_verbatim_and_deduplicate(conn: Conn) -> None:
    first = pyqueue.enqueue(conn, "keys", {"n": 1}, key=QUOTED_KEY)
    again = pyqueue.enqueue(conn, "keys", {"n": 2}, key=QUOTED_KEY)
    other = pyqueue.enqueue(conn, "keys", {"n": 3}, key=INJECTION)
    assert again == first != other
    assert scalar(conn, "SELECT job_key FROM jobq._job WHERE id = %s", (first,)) == QUOTED_KEY
    assert scalar(conn, "SELECT count(*) FROM jobq._job WHERE queue = 'keys'") == 2
    [job] = pyqueue.claim(conn, "keys")
    assert (job.id, job.job_key, job.payload) == (first, QUOTED_KEY, {"n": 1})
    assert job.complete()
    # The key is free again once its job completed.
    assert pyqueue.enqueue(conn, "keys", {"n": 4}, key=QUOTED_KEY) not in (first, other)
    assert scalar(conn, "SELECT to_regclass('jobq._job') IS NOT NULL") is True


def test_hostile_payload_strings_round_trip(conn: Conn) -> None:
    payload = {
        "sql": "'; DROP TABLE jobq._job; --", "percent": "%s %(x)s %%", "dollar": "$$ $1 $tag$",
        "backslash": "\\\\ \\x00", "unicode": "żółć ✓ 🚀 \u202e", "big": 2**63, "float": 0.1,
        "nested": {"list": [None, True, {"k": "v"}]}, "": "empty key",
    }
    job_id = pyqueue.enqueue(conn, "hostile", payload)
    [job] = pyqueue.claim(conn, "hostile")
    assert job.id == job_id and job.payload == payload
    assert job.complete()


def test_a_queue_name_of_exactly_128_allowed_characters_works(conn: Conn) -> None:
    name = ("Az09_.:-" * 16)[:128]
    job_id = pyqueue.enqueue(conn, name, {})
    [job] = pyqueue.claim(conn, name)
    assert job.id == job_id and job.queue == name


def test_deep_but_legal_nesting_is_stored_and_read_back_in_sql(conn: Conn) -> None:
    """PostgreSQL accepts 10,000 levels of nesting: so does jobq (it is a JSON
    object within the size cap), and SQL reads it back intact."""
    job_id = scalar(conn, "SELECT jobq.enqueue('deep', %s::jsonb)", (deep(DEEP_OK),))
    depth = scalar(conn, "SELECT length(payload::text) FROM jobq._job WHERE id = %s", (job_id,))
    assert depth == len(deep(DEEP_OK).replace(":", ": "))
    rows = conn.execute("SELECT id, payload::text FROM jobq.claim('deep', 1)").fetchall()
    assert [r[0] for r in rows] == [job_id]


@pytest.fixture
def stop() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def test_a_deeply_nested_payload_does_not_crash_a_worker(conn: Conn, dsn: str, stop: threading.Event) -> None:
    """A payload PostgreSQL accepts but Python's json cannot load (deeper than
    the interpreter's recursion limit) is a poison pill: it may cost the
    worker that one job (failed with the decoding error, so that it ends in
    the dead letter), never the worker itself, nor the other jobs of its batch."""
    before = pyqueue.enqueue(conn, "poison", {"n": 1})
    poison = scalar(conn, "SELECT jobq.enqueue('poison', %s::jsonb)", (deep(DEEP_OK),))
    after = pyqueue.enqueue(conn, "poison", {"n": 2})
    handled: list[int] = []
    worker = InThread(lambda: pyqueue.listen(dsn, "poison", lambda job: handled.append(job.id), stop=stop,
                                             handle_signals=False, batch_size=10, poll_interval=0.5))

    def settled() -> bool:
        if not worker.thread.is_alive():
            return True
        status, last_error = conn.execute("SELECT status, last_error FROM jobq.jobs WHERE id = %s",
                                          (poison,)).fetchone() or (None, None)
        poison_settled = status == "completed" or (status != "running" and last_error is not None)
        return poison_settled and before in handled and after in handled

    try:
        wait_until(settled, "the healthy jobs handled, the poison job settled (or the worker dead)")
        alive = worker.thread.is_alive()
    finally:
        stop.set()
        worker.thread.join(60)
    assert alive, f"the worker died: {worker.error!r}"
    assert worker.error is None


def test_json_round_trip_helper() -> None:
    """deep() builds valid JSON, nested as deep as asked."""
    assert json.loads(deep(3)) == {"a": {"a": {"a": 1}}}
