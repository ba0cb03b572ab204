"""Queues that isolate roles from each other (issue 25, item 4), in real
sessions of real LOGIN roles.

On jobq 0.8.0 any jobq_producer login could read the result of any job
(`jobq.result(id)`, ids are sequential), watch any job, squat any job_key
(a far-future job of that key makes the real enqueue return the squatter's
id and drop its payload), and block a serial group for years by enqueueing
its head far in the future. 0.9.0 adds per-queue privileges as an opt-in
(`jobq.grant_queue`): a queue that grants of a privilege match allows it
only to their roles (directly, through group roles, after SET ROLE) and
jobq_admin; and a group member scheduled for later that never started no
longer holds back the members behind it. Each test here fails on 0.8.0.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb

import pyqueue
from tests.chaos_support import drop_login_role

Conn = psycopg.Connection[Any]

DENIED = "JQ020"
UNKNOWN = "JQ019"


@dataclass(frozen=True)
class Roles:
    """The roles of one test: ``team`` a NOLOGIN group role (a producer and a
    worker), ``member`` a login of that team, ``stranger`` a producer and
    worker of no team, ``gateway`` a login member of both team and stranger
    (as a connection pooler's login is of the roles it SET ROLEs to),
    ``watcher`` a jobq_viewer, ``team_viewer`` a jobq_viewer of the team."""

    team: str
    member: str
    stranger: str
    gateway: str
    watcher: str
    team_viewer: str


@pytest.fixture
def roles(conn: Conn) -> Iterator[Roles]:
    suffix = secrets.token_hex(4)
    made = Roles(*(f"{kind}_{suffix}" for kind in Roles.__dataclass_fields__))
    conn.execute(f"CREATE ROLE {made.team} NOLOGIN IN ROLE jobq_producer, jobq_worker")
    conn.execute(f"CREATE ROLE {made.member} LOGIN IN ROLE {made.team}")
    conn.execute(f"CREATE ROLE {made.stranger} LOGIN IN ROLE jobq_producer, jobq_worker")
    conn.execute(f"CREATE ROLE {made.gateway} LOGIN IN ROLE {made.team}, {made.stranger}")
    conn.execute(f"CREATE ROLE {made.watcher} LOGIN IN ROLE jobq_viewer")
    conn.execute(f"CREATE ROLE {made.team_viewer} LOGIN IN ROLE jobq_viewer, {made.team}")
    try:
        yield made
    finally:
        for name in (made.team_viewer, made.watcher, made.gateway, made.stranger, made.member, made.team):
            drop_login_role(conn, name)


@pytest.fixture
def login(dsn: str) -> Iterator[Any]:
    """Opens autocommit sessions as a given login role; closes them at the end."""
    opened: list[Conn] = []

    def connect(role: str) -> Conn:
        session = psycopg.connect(make_conninfo(dsn, user=role), autocommit=True)
        opened.append(session)
        return session

    yield connect
    for session in opened:
        session.close()


def scalar(session: Conn, sql: str, params: tuple[Any, ...] = ()) -> Any:
    row = session.execute(sql, params).fetchone()
    assert row is not None
    return row[0]


def refused(session: Conn, sql: str, params: tuple[Any, ...] = ()) -> psycopg.Error:
    """The error a statement raised (it must raise one); the session stays usable."""
    with pytest.raises(psycopg.Error) as caught:
        session.execute(sql, params)
    if not session.autocommit:
        session.rollback()
    return caught.value


def grant(conn: Conn, role: str, pattern: str, privilege: str) -> None:
    assert scalar(conn, "SELECT jobq.grant_queue(%s, %s, %s)", (role, pattern, privilege)) is True


def live_rows(conn: Conn) -> list[tuple[Any, ...]]:
    """Every live job, in full: what "nothing changed" compares."""
    return conn.execute("SELECT * FROM jobq._job ORDER BY id").fetchall()


def completed_with(conn: Conn, queue: str, result: dict[str, Any]) -> int:
    """A job of queue that completed with result (kept for result_retention)."""
    job_id = pyqueue.enqueue(conn, queue, {"secret": True})
    [job] = pyqueue.claim(conn, queue)
    assert job.id == job_id and job.complete(result)
    return job_id


def unknown_alike(error: psycopg.Error, unknown: psycopg.Error, job_id: int, unknown_id: int) -> bool:
    """Whether error says exactly what the answer for an unknown id says, but for the id."""
    return (error.sqlstate == unknown.sqlstate == UNKNOWN
            and error.diag.message_primary
            == str(unknown.diag.message_primary).replace(str(unknown_id), str(job_id))
            and error.diag.message_hint == unknown.diag.message_hint
            and error.diag.message_detail == unknown.diag.message_detail)


# --- read: result, status, parent_results, watch ---------------------------------------------------

def test_a_read_grant_makes_other_roles_see_its_jobs_as_unknown_ids(
    conn: Conn, roles: Roles, login: Any
) -> None:
    invoice = completed_with(conn, "billing.invoices", {"total": 4200})
    child = pyqueue.enqueue(conn, "billing.invoices", {"step": 2}, depends_on=[invoice], delay=3600)
    waiting = pyqueue.enqueue(conn, "billing.mail", {}, depends_on=[child])
    public = completed_with(conn, "newsletter", {"sent": 3})
    never = scalar(conn, "SELECT last_value + 1000 FROM jobq._job_id_seq")
    grant(conn, roles.team, "billing.*", "read")

    stranger, member = login(roles.stranger), login(roles.member)
    for call in ("result", "status", "parent_results", "watch"):
        sql = f"SELECT * FROM jobq.{call}(%s)"
        unknown = refused(stranger, sql, (never,))
        assert unknown.sqlstate == UNKNOWN
        for job_id in (invoice, child, waiting):
            error = refused(stranger, sql, (job_id,))
            assert unknown_alike(error, unknown, job_id, never), (call, job_id, error.diag.message_primary)
    watched = scalar(conn, "SELECT bool_or(watched) FROM jobq._job WHERE id IN (%s, %s)", (child, waiting))
    assert watched is False, "the refused watch marked nothing"
    # Queues without read grants keep the role-level rules.
    assert scalar(stranger, "SELECT jobq.result(%s)", (public,)) == {"sent": 3}
    assert scalar(stranger, "SELECT jobq.status(%s)", (public,)) == "completed"

    # The team reads its own, through its group role.
    assert scalar(member, "SELECT jobq.result(%s)", (invoice,)) == {"total": 4200}
    assert scalar(member, "SELECT jobq.status(%s)", (child,)) == "scheduled"
    assert member.execute("SELECT * FROM jobq.parent_results(%s)", (child,)).fetchall() == [
        (invoice, {"total": 4200})]
    assert scalar(member, "SELECT jobq.watch(%s)", (waiting,)) == "waiting"
    assert scalar(conn, "SELECT watched FROM jobq._job WHERE id = %s", (waiting,)) is True


def test_a_job_of_an_unreadable_queue_cannot_be_named_as_a_parent(
    conn: Conn, roles: Roles, login: Any
) -> None:
    invoice = pyqueue.enqueue(conn, "billing.invoices", {})
    public = pyqueue.enqueue(conn, "newsletter", {})
    grant(conn, roles.team, "billing.*", "read")
    stranger = login(roles.stranger)
    never = scalar(conn, "SELECT last_value + 1000 FROM jobq._job_id_seq")
    before = live_rows(conn)
    for sql in ("SELECT jobq.enqueue('mine', '{}', depends_on => ARRAY[%s, %s]::bigint[])",
                "SELECT jobq.enqueue_many('mine', ARRAY['{}']::jsonb[], "
                "depends_on => ARRAY[%s, %s]::bigint[])",
                "SELECT jobq.enqueue_callback('mine', '{}', ARRAY[%s, %s]::bigint[])"):
        unknown = refused(stranger, sql, (public, never))
        error = refused(stranger, sql, (public, invoice))
        assert unknown.sqlstate == error.sqlstate == UNKNOWN
        assert error.diag.message_primary == str(unknown.diag.message_primary).replace(
            str(never), str(invoice))
        assert error.diag.message_hint == unknown.diag.message_hint
    assert live_rows(conn) == before, "the refused enqueues changed nothing"
    # A parent in a readable queue is fine, and the team may link to its own.
    assert scalar(stranger, "SELECT jobq.enqueue('mine', '{}', depends_on => ARRAY[%s]::bigint[])", (public,))
    assert scalar(login(roles.member),
                  "SELECT jobq.enqueue('billing.mail', '{}', depends_on => ARRAY[%s]::bigint[])", (invoice,))


def test_the_views_show_the_rows_of_read_restricted_queues_only_to_their_readers(
    conn: Conn, roles: Roles, login: Any
) -> None:
    conn.execute("SELECT jobq.configure_queue('billing.invoices', retention => '1 day')")
    parent = pyqueue.enqueue(conn, "billing.invoices", {"card": "4242"})
    [job] = pyqueue.claim(conn, "billing.invoices")
    assert job.fail("card 4242 declined")
    child = pyqueue.enqueue(conn, "billing.invoices", {}, depends_on=[parent])
    free = pyqueue.enqueue(conn, "newsletter", {})
    [news] = pyqueue.claim(conn, "newsletter")
    assert news.fail("smtp down")
    free_child = pyqueue.enqueue(conn, "newsletter", {}, depends_on=[free])
    grant(conn, roles.team, "billing.invoices", "read")

    def seen(session: Conn) -> dict[str, set[int]]:
        return {
            "jobs": {int(r[0]) for r in session.execute("SELECT id FROM jobq.jobs")},
            "job_errors": {int(r[0]) for r in session.execute("SELECT job_id FROM jobq.job_errors")},
            "job_dependencies": {int(r[0])
                                 for r in session.execute("SELECT child_id FROM jobq.job_dependencies")},
        }

    everything = {"jobs": {parent, child, free, free_child}, "job_errors": {parent, free},
                  "job_dependencies": {child, free_child}}
    assert seen(conn) == everything, "a superuser (as jobq_admin) sees every row"
    assert seen(login(roles.team_viewer)) == everything
    assert seen(login(roles.watcher)) == {"jobs": {free, free_child}, "job_errors": {free},
                                          "job_dependencies": {free_child}}
    # Counts are per queue, for every queue: jobq.stats (and metrics) show them to every viewer.
    assert scalar(login(roles.watcher), "SELECT ready + scheduled + waiting FROM jobq.stats "
                                        "WHERE queue = 'billing.invoices'") == 2


# --- produce: job_key squatting --------------------------------------------------------------------

def test_a_produce_grant_stops_a_stranger_squatting_a_job_key(conn: Conn, roles: Roles, login: Any) -> None:
    grant(conn, roles.team, "billing.invoices", "produce")
    stranger, member = login(roles.stranger), login(roles.member)
    parent = pyqueue.enqueue(conn, "newsletter", {})
    before = live_rows(conn)
    squats = (
        "SELECT jobq.enqueue('billing.invoices', '{\"evil\": 1}', now() + interval '9 years', "
        "job_key => 'invoice-7')",
        "SELECT jobq.enqueue_many('billing.invoices', ARRAY['{\"evil\": 1}']::jsonb[], "
        "now() + interval '9 years', job_keys => ARRAY['invoice-7'])",
        f"SELECT jobq.enqueue_callback('billing.invoices', '{{}}', ARRAY[{parent}]::bigint[])",
    )
    for sql in squats:
        error = refused(stranger, sql)
        assert error.sqlstate == DENIED, error
        assert error.diag.message_primary == (
            f'jobq: role {roles.stranger} lacks the produce privilege on queue \'billing.invoices\'')
        assert error.diag.message_hint == (
            f"A jobq_admin can allow it: SELECT jobq.grant_queue('{roles.stranger}', 'billing.invoices', "
            "'produce');")
    assert live_rows(conn) == before, "the refused enqueues changed nothing"

    real = scalar(member, "SELECT jobq.enqueue('billing.invoices', %s, job_key => 'invoice-7')",
                  (Jsonb({"amount": 100}),))
    assert scalar(conn, "SELECT payload FROM jobq._job WHERE id = %s", (real,)) == {"amount": 100}
    # Other queues keep the role-level rules; jobq_admin may produce everywhere.
    assert scalar(stranger, "SELECT jobq.enqueue('newsletter', '{}', job_key => 'invoice-7')")
    assert pyqueue.enqueue(conn, "billing.invoices", {}, key="invoice-8")


# --- consume ------------------------------------------------------------------------------------------

def test_a_consume_grant_keeps_other_workers_off_the_queue(conn: Conn, roles: Roles, login: Any) -> None:
    jobs = pyqueue.enqueue_many(conn, "billing.invoices", [{"n": n} for n in range(3)])
    free = pyqueue.enqueue(conn, "newsletter", {})
    grant(conn, roles.team, "billing.*", "consume")
    stranger = login(roles.stranger)
    before = live_rows(conn)
    for sql in ("SELECT * FROM jobq.claim('billing.invoices', 10)",
                "SELECT * FROM jobq.claim(ARRAY['newsletter', 'billing.invoices'], 10)",
                "SELECT * FROM jobq.claim('{newsletter,billing.invoices}', 10)",
                "SELECT * FROM jobq.take('billing.invoices', 10)",
                "SELECT * FROM jobq.hold('billing.invoices', 10)"):
        error = refused(stranger, sql)
        assert error.sqlstate == DENIED, error
        assert "consume privilege on queue 'billing.invoices'" in str(error), error
    # complete_held and fail_held act on ready jobs by id: a stranger's leave them alone, as unknown ids.
    assert scalar(stranger, "SELECT jobq.complete_held(%s)", (jobs,)) == 0
    assert scalar(stranger, "SELECT jobq.fail_held(%s, 'x')", (jobs[0],)) is False
    assert live_rows(conn) == before, "nothing was claimed, taken or finished, not even the newsletter job"

    assert [j.id for j in pyqueue.claim(conn, "newsletter")] == [free]
    member = login(roles.member)
    assert [int(r[0]) for r in member.execute("SELECT id FROM jobq.claim('billing.invoices', 1)")] == jobs[:1]
    with member.transaction():
        held = [int(r[0]) for r in member.execute("SELECT id FROM jobq.hold('billing.invoices', 1)")]
        assert held == jobs[1:2]
        assert scalar(member, "SELECT jobq.fail_held(%s, 'retry')", (jobs[1],)) is True
    assert [j.id for j in pyqueue.claim(conn, "billing.invoices")] == jobs[2:], "jobq_admin consumes anywhere"


def test_a_worker_without_the_consume_grant_stops_with_the_error(conn: Conn, dsn: str, roles: Roles) -> None:
    """Like a missing EXECUTE grant, a missing queue grant does not get better
    by retrying: the worker raises it at its first claim."""
    grant(conn, roles.team, "billing.*", "consume")
    job_id = pyqueue.enqueue(conn, "billing.invoices", {})
    with pytest.raises(pyqueue.QueuePrivilegeDenied) as caught:
        for job in pyqueue.listen(make_conninfo(dsn, user=roles.stranger), ["billing.invoices"],
                                  poll_interval=0.1):
            pytest.fail(f"job {job.id} was handed to a worker without the grant")
    assert caught.value.sqlstate == DENIED and "consume" in caught.value.message
    assert scalar(conn, "SELECT status FROM jobq.jobs WHERE id = %s", (job_id,)) == "ready"


# --- who the caller is: group roles and SET ROLE --------------------------------------------------------

def test_the_role_set_with_set_role_is_what_is_checked(conn: Conn, roles: Roles, login: Any) -> None:
    grant(conn, roles.team, "billing.*", "produce")
    gateway = login(roles.gateway)
    enqueue = "SELECT jobq.enqueue('billing.invoices', '{}')"
    assert scalar(gateway, enqueue), "the login inherits the team's grant"
    gateway.execute(f"SET ROLE {roles.stranger}")
    error = refused(gateway, enqueue)
    assert error.sqlstate == DENIED and f"role {roles.stranger} lacks" in str(error), \
        "after SET ROLE the session acts for that role, whatever its login may"
    gateway.execute(f"SET ROLE {roles.team}")
    assert scalar(gateway, enqueue)
    gateway.execute("RESET ROLE")
    with gateway.transaction():
        gateway.execute(f"SET LOCAL ROLE {roles.stranger}")
        with pytest.raises(psycopg.Error) as caught:
            gateway.execute(enqueue)
        assert caught.value.sqlstate == DENIED
    assert scalar(gateway, enqueue), "SET LOCAL ROLE ended with its transaction"
    assert scalar(conn, "SELECT count(*) FROM jobq._job WHERE queue = 'billing.invoices'") == 3


def test_revoking_the_last_grant_restores_the_role_level_rules(conn: Conn, roles: Roles, login: Any) -> None:
    stranger = login(roles.stranger)
    enqueue = "SELECT jobq.enqueue('billing.invoices', '{}')"
    grant(conn, roles.team, "billing.*", "produce")
    again = scalar(conn, "SELECT jobq.grant_queue(%s, 'billing.*', 'produce')", (roles.team,))
    assert again is False, "granted once"
    conn.execute(f"CREATE ROLE gone_{roles.team} NOLOGIN")
    grant(conn, f"gone_{roles.team}", "billing.invoices", "produce")
    conn.execute(f"DROP ROLE gone_{roles.team}")
    rows = conn.execute("SELECT role, queue_pattern, privilege, role_exists FROM jobq.queue_grants "
                        "ORDER BY 2").fetchall()
    assert rows == [(roles.team, "billing.*", "produce", True),
                    (f"gone_{roles.team}", "billing.invoices", "produce", False)]
    assert refused(stranger, enqueue).sqlstate == DENIED
    assert scalar(conn, "SELECT jobq.revoke_queue(%s, 'billing.*', 'produce')", (roles.team,)) is True
    assert refused(stranger, enqueue).sqlstate == DENIED, "the dropped role's grant still restricts the queue"
    gone = f"gone_{roles.team}"
    assert scalar(conn, "SELECT jobq.revoke_queue(%s, 'billing.invoices', 'produce')", (gone,)) is True
    assert scalar(stranger, enqueue), "no grant left: every jobq_producer may produce there again"
    assert scalar(conn, "SELECT jobq.revoke_queue(%s, 'billing.*', 'produce')", (roles.team,)) is False


# --- serial groups: a head far in the future ------------------------------------------------------------

def test_a_group_head_scheduled_for_years_does_not_block_the_group(
    conn: Conn, roles: Roles, login: Any
) -> None:
    squatter = scalar(login(roles.stranger),
                      "SELECT jobq.enqueue('ledger', '{\"evil\": 1}', now() + interval '9 years', "
                      "group_key => 'acct-1')")
    real = scalar(login(roles.member),
                  "SELECT jobq.enqueue('ledger', '{\"debit\": 5}', group_key => 'acct-1')")
    claimed = conn.execute("SELECT id, payload FROM jobq.claim('ledger', 10)").fetchall()
    assert claimed == [(real, {"debit": 5})], \
        "the due member runs; the one scheduled for later waits for its time"
    assert scalar(conn, "SELECT status FROM jobq.jobs WHERE id = %s", (squatter,)) == "scheduled"


def test_a_member_falling_due_is_not_claimed_beside_one_that_went_ahead(conn: Conn, dsn: str) -> None:
    """The race the rule brings: a claim goes ahead of a member not yet due;
    that member falls due while the first is still held. Every claim of a
    group locks the group's oldest member, so the second claimer skips it."""
    first = scalar(conn, "SELECT jobq.enqueue('ledger', '{}', clock_timestamp() + interval '1.5 seconds', "
                         "group_key => 'acct-2')")
    second = scalar(conn, "SELECT jobq.enqueue('ledger', '{}', group_key => 'acct-2')")
    with psycopg.connect(dsn) as holder, psycopg.connect(dsn, autocommit=True) as other:
        taken = [int(r[0]) for r in holder.execute("SELECT id FROM jobq.take('ledger', 10)")]
        assert taken == [second], "the due member goes ahead of the one scheduled for later"
        deadline = time.monotonic() + 30
        while not scalar(other, "SELECT run_at <= now() FROM jobq._job WHERE id = %s", (first,)):
            assert time.monotonic() < deadline, "the first member never fell due"
            time.sleep(0.1)
        assert other.execute("SELECT id FROM jobq.claim('ledger', 10)").fetchall() == [], \
            "the first member is due now, but the second is still held: no claim may take it"
        with other.transaction():
            assert other.execute("SELECT id FROM jobq.take('ledger', 10)").fetchall() == []
        holder.commit()
    assert [int(r[0]) for r in conn.execute("SELECT id FROM jobq.claim('ledger', 10)")] == [first]


# --- bad input --------------------------------------------------------------------------------------------

def test_bad_grants_are_refused_with_jobq_errors_and_change_nothing(conn: Conn, roles: Roles) -> None:
    grant(conn, roles.team, "billing.*", "read")
    before = conn.execute("SELECT * FROM jobq._queue_grant").fetchall()
    bad = [
        ((None, "billing", "read"), "JQ021", "role must be the name of a role, got NULL"),
        (("", "billing", "read"), "JQ021", "role must be the name of a role, got ''"),
        (("no_such_role_x", "billing", "read"), "JQ021",
         "role must be an existing role, got 'no_such_role_x'"),
        ((roles.team, None, "read"), "JQ001", "queue_pattern must be a queue name"),
        ((roles.team, "", "read"), "JQ001", "queue_pattern must be a queue name"),
        ((roles.team, "bill ing", "read"), "JQ001", "got 'bill ing'"),
        ((roles.team, "bill*ing", "read"), "JQ001", "got 'bill*ing'"),
        ((roles.team, "billing**", "read"), "JQ001", "got 'billing**'"),
        ((roles.team, "billing%", "read"), "JQ001", "got 'billing%'"),
        ((roles.team, "billing", None), "JQ017",
         "privilege must be 'produce', 'consume' or 'read', got NULL"),
        ((roles.team, "billing", "write"), "JQ017", "got 'write'"),
    ]
    for call in ("grant_queue", "revoke_queue"):
        for args, sqlstate, words in bad:
            error = refused(conn, f"SELECT jobq.{call}(%s, %s, %s)", args)
            assert error.sqlstate == sqlstate and words in str(error), (call, args, error)
            assert error.diag.message_hint, (call, args)
    assert conn.execute("SELECT * FROM jobq._queue_grant").fetchall() == before
    assert re.search(r"^jobq: ", str(refused(conn, "SELECT jobq.grant_queue(NULL, 'q', 'read')")))
