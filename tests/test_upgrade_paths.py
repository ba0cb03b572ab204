"""Upgrade == fresh install (SPEC §1, STYLE "a schema-equality test").

For every full install script older than the default version: install it,
apply the upgrade scripts in order, and compare the catalog fingerprint with
a fresh install of the default version, on both install paths (plain SQL as
psql -f / pyqueue run it, and CREATE EXTENSION … ALTER EXTENSION UPDATE).
Data made under the old version keeps working after the upgrade. An upgrade
script applied to the wrong version fails with JQ000 and changes nothing.
"""

from __future__ import annotations

import re
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta

import psycopg
import pytest
from psycopg import sql
from psycopg.types.json import Jsonb
from pytest_postgresql.executors import PostgreSQLExecutor

from pyqueue.localserver import find_bindir
from tests.conftest import SQL_DIR, default_version, proc_dsn
from tests.coord_support import Conn, scalar
from tests.schema_fingerprint import fingerprint

INSTALL = re.compile(r"^jobq--(\d+\.\d+\.\d+)\.sql$")
STEP = re.compile(r"^jobq--(\d+\.\d+\.\d+)--(\d+\.\d+\.\d+)\.sql$")


def key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def step_versions(name: str) -> tuple[str, str]:
    """(from, to) of an upgrade script name."""
    found = STEP.match(name)
    assert found, f"unexpected upgrade script name {name}"
    return found.group(1), found.group(2)


@dataclass(frozen=True)
class Chain:
    """An old full install script and the upgrade steps from it to the default version."""

    start: str
    steps: tuple[str, ...]  # file names, in the order they apply

    def __str__(self) -> str:
        return self.start


def discover_steps() -> dict[str, str]:
    """from-version → upgrade script name (one step per from-version)."""
    steps: dict[str, str] = {}
    for path in SQL_DIR.glob("jobq--*--*.sql"):
        old, new = step_versions(path.name)
        assert key(old) < key(new), f"{path.name} does not go forward"
        assert old not in steps, f"two upgrade scripts start at {old}: {steps[old]} and {path.name}"
        steps[old] = path.name
    return steps


def discover_chains() -> list[Chain]:
    """Every full install older than the default, with its path to the default."""
    target = default_version()
    steps = discover_steps()
    chains = []
    for path in sorted(SQL_DIR.glob("jobq--*.sql")):
        found = INSTALL.match(path.name)
        if not found or key(found.group(1)) >= key(target):
            continue
        version, names = found.group(1), []
        while version != target:
            assert version in steps, f"no upgrade script from {version} (on the way from {found.group(1)})"
            names.append(steps[version])
            version = step_versions(steps[version])[1]
        chains.append(Chain(found.group(1), tuple(names)))
    return chains


CHAINS = discover_chains()


def test_there_is_at_least_one_upgrade_chain() -> None:
    # An empty parametrization would silently skip every test below.
    assert CHAINS, f"no full install script older than {default_version()} in {SQL_DIR}"
    assert (SQL_DIR / f"jobq--{default_version()}.sql").is_file()
    assert all(chain.steps for chain in CHAINS)


def script(name: str) -> bytes:
    return (SQL_DIR / name).read_bytes()


@pytest.fixture
def new_db(postgresql_proc: PostgreSQLExecutor) -> Iterator[Callable[[str], Conn]]:
    """Creates empty databases (autocommit connections to them), dropped afterwards."""
    admin_dsn = proc_dsn(postgresql_proc, "postgres")
    made: list[tuple[str, Conn]] = []

    def make(tag: str) -> Conn:
        name = f"jobq_up_{tag}_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
            admin.execute(f'CREATE DATABASE "{name}"')
        conn = psycopg.connect(proc_dsn(postgresql_proc, name), autocommit=True)
        made.append((name, conn))
        return conn

    yield make
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        for name, conn in made:
            conn.close()
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def install_by_script(conn: Conn, chain: Chain) -> None:
    conn.execute(script(f"jobq--{chain.start}.sql"))
    assert scalar(conn, "SELECT jobq.version()") == chain.start


def upgrade_by_script(conn: Conn, chain: Chain) -> None:
    for name in chain.steps:
        conn.execute(script(name))
    conn.execute("RESET search_path")  # the scripts SET it for the session


def install_extension(conn: Conn, chain: Chain) -> None:
    available = {r[0] for r in conn.execute(
        "SELECT version FROM pg_available_extension_versions WHERE name = 'jobq'").fetchall()}
    assert {chain.start, default_version()} <= available, (
        f"the server has jobq versions {sorted(available)}: run `make install`"
    )
    conn.execute(sql.SQL("CREATE EXTENSION jobq VERSION {}").format(sql.Literal(chain.start)))
    assert scalar(conn, "SELECT jobq.version()") == chain.start


def upgrade_extension(conn: Conn) -> None:
    conn.execute("ALTER EXTENSION jobq UPDATE")
    assert scalar(conn, "SELECT extversion FROM pg_extension WHERE extname = 'jobq'") == default_version()


def assert_same_schema(upgraded: Conn, fresh: Conn, how: str) -> None:
    want = fingerprint(fresh)
    have = fingerprint(upgraded)
    assert want["functions"], "the fingerprint saw no jobq functions"
    for section, rows in want.items():
        missing = [r for r in rows if r not in have[section]]
        extra = [r for r in have[section] if r not in rows]
        assert have[section] == rows, (
            f"{section} differ after {how}:\n  only in the fresh install: {missing}\n"
            f"  only in the upgraded one: {extra}"
        )


def extension_members(conn: Conn) -> list[str]:
    rows = conn.execute(
        "SELECT pg_describe_object(d.classid, d.objid, d.objsubid) FROM pg_depend AS d "
        "JOIN pg_extension AS e ON e.oid = d.refobjid "
        "WHERE e.extname = 'jobq' AND d.deptype = 'e' ORDER BY 1").fetchall()
    return [str(r[0]) for r in rows]


def extension_config(conn: Conn) -> list[str]:
    rows = conn.execute(
        "SELECT c::regclass::text FROM pg_extension AS e, unnest(e.extconfig) AS c "
        "WHERE e.extname = 'jobq' ORDER BY 1").fetchall()
    return [str(r[0]) for r in rows]


# upgrade == fresh install ---------------------------------------------------------------------------

@pytest.mark.parametrize("chain", CHAINS, ids=str)
def test_script_upgrade_equals_fresh_script_install(
    chain: Chain, conn: Conn, new_db: Callable[[str], Conn]
) -> None:
    upgraded = new_db("script")
    install_by_script(upgraded, chain)
    upgrade_by_script(upgraded, chain)
    assert scalar(upgraded, "SELECT jobq.version()") == default_version()
    # conn: this test's database, a fresh script install of the default version
    assert scalar(conn, "SELECT jobq.version()") == default_version()
    assert_same_schema(upgraded, conn, f"{chain.start} + {' + '.join(chain.steps)}")
    recorded = sorted((r[0] for r in upgraded.execute("SELECT version FROM jobq._migration")), key=key)
    assert recorded == [chain.start, *(step_versions(s)[1] for s in chain.steps)], (
        "jobq._migration records the install and every step"
    )


@pytest.mark.parametrize("chain", CHAINS, ids=str)
def test_extension_update_equals_fresh_create_extension(chain: Chain, new_db: Callable[[str], Conn]) -> None:
    upgraded = new_db("ext_old")
    install_extension(upgraded, chain)
    upgrade_extension(upgraded)
    fresh = new_db("ext_new")
    fresh.execute("CREATE EXTENSION jobq")
    how = f"CREATE EXTENSION jobq VERSION '{chain.start}' + ALTER EXTENSION jobq UPDATE"
    assert_same_schema(upgraded, fresh, how)
    assert extension_members(upgraded) == extension_members(fresh), "the same objects belong to the extension"
    assert extension_config(upgraded) == extension_config(fresh), "the same tables are dumped by pg_dump"


# data survives ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class OldData:
    claimed: int
    lease_token: object
    ready: int
    dead: int
    scheduled: int


def make_old_data(conn: Conn) -> OldData:
    """Jobs and settings made with the API every version has (0.1.0's)."""
    conn.execute("SELECT jobq.configure_queue('legacy', max_attempts => 7, lease => interval '10 minutes', "
                 "backoff_base => interval '5 seconds', retention => interval '2 days')")

    def enqueue(payload: dict[str, object], max_attempts: int | None = None, delay: str = "0") -> int:
        return int(scalar(conn, "SELECT jobq.enqueue('legacy', %s, now() + %s::interval, 0, %s, NULL)",
                          (Jsonb(payload), delay, max_attempts)))

    claimed = enqueue({"n": "claimed"})
    dead = enqueue({"n": "dead"}, max_attempts=1)
    row = conn.execute("SELECT id, lease_token FROM jobq.claim('legacy', 2, 'old-worker')").fetchall()
    tokens = {int(r[0]): r[1] for r in row}
    assert set(tokens) == {claimed, dead}
    assert scalar(conn, "SELECT jobq.fail(%s, 'fatal', %s)", (dead, tokens[dead])) is True
    assert scalar(conn, "SELECT status FROM jobq._job_archive WHERE id = %s", (dead,)) == "dead"
    ready = enqueue({"n": "ready"})
    scheduled = enqueue({"n": "scheduled"}, delay="1 hour")
    return OldData(claimed, tokens[claimed], ready, dead, scheduled)


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def check_old_data_works(conn: Conn, old: OldData, start: str) -> None:
    settings = conn.execute(
        "SELECT max_attempts, lease, backoff_base, retention, concurrency, rate_limit, paused "
        "FROM jobq.queues WHERE queue = 'legacy'").fetchone()
    kept = (7, timedelta(minutes=10), timedelta(seconds=5), timedelta(days=2))
    # jobq.queues shows "no limit" as 0 (since 0.4.0, what configure_queue takes to remove one).
    assert settings == (*kept, 0, 0, False), "the settings are kept, and no new limit appears by itself"
    assert scalar(conn, "SELECT count(*) FROM jobq._job WHERE group_key IS NOT NULL") == 0

    assert conn.execute("SELECT worker, jobs, last_heartbeat_at FROM jobq.workers").fetchall() == [
        ("old-worker", 1, None)], "jobq.workers (0.5.0) shows the lease taken before the upgrade"
    assert scalar(conn, "SELECT jobq.heartbeat(%s, %s)", (old.claimed, old.lease_token)) is True, (
        "the job claimed before the upgrade is still held under its old lease token"
    )
    beat = scalar(conn, "SELECT heartbeat_at IS NOT NULL FROM jobq.jobs WHERE id = %s", (old.claimed,))
    assert beat is True, "its heartbeat is recorded (heartbeat_at, 0.5.0)"
    assert scalar(conn, "SELECT jobq.complete(%s, %s)", (old.claimed, old.lease_token)) is True, (
        "and completes with it"
    )
    assert scalar(conn, "SELECT status FROM jobq._job_archive WHERE id = %s", (old.claimed,)) == "completed"

    got = conn.execute("SELECT id, attempts, max_attempts FROM jobq.claim('legacy', 10, 'new')").fetchall()
    assert [tuple(r) for r in got] == [(old.ready, 1, 7)], "the ready job is claimable, with its settings"
    assert scalar(conn, "SELECT jobq.retry(%s)", (old.dead,)) is True, "the dead job can be retried"
    retried = conn.execute("SELECT id, payload, last_error FROM jobq.claim('legacy', 10)").fetchall()
    assert [tuple(r) for r in retried] == [(old.dead, {"n": "dead"}, "fatal")], "and runs again"
    # The error history exists since 0.5.0: an error made before it is in last_error only.
    before = [(1, "fatal")] if version_key(start) >= version_key("0.5.0") else []
    errors = "SELECT attempt, error FROM jobq.job_errors WHERE job_id = %s ORDER BY failed_at"
    history = conn.execute(errors, (old.dead,)).fetchall()
    assert history == before, "the error history made before the upgrade is kept as it was"
    token = scalar(conn, "SELECT lease_token FROM jobq._job WHERE id = %s", (old.dead,))
    assert scalar(conn, "SELECT jobq.fail(%s, 'after the upgrade', %s)", (old.dead, token)) is True
    history = conn.execute(errors, (old.dead,)).fetchall()
    assert history == [*before, (1, "after the upgrade")], (
        "a failure after the upgrade joins the error history"
    )
    assert scalar(conn, "SELECT status FROM jobq.jobs WHERE id = %s", (old.scheduled,)) == "scheduled"
    # A job made before the upgrade can be a parent (0.6.0): its child waits, then follows its fate.
    child = int(scalar(conn, "SELECT jobq.enqueue('legacy', '{}', depends_on => ARRAY[%s]::bigint[])",
                       (old.scheduled,)))
    assert scalar(conn, "SELECT status FROM jobq.jobs WHERE id = %s", (child,)) == "waiting"
    assert scalar(conn, "SELECT jobq.cancel(%s)", (old.scheduled,)) is True
    assert conn.execute("SELECT status, cancelled_by FROM jobq.jobs WHERE id = %s", (child,)).fetchone() == (
        "cancelled", old.scheduled), "cancelling the old parent cancels the new child"
    assert scalar(conn, "SELECT jobq.retry(%s)", (old.scheduled,)) is True
    assert scalar(conn, "SELECT status FROM jobq.jobs WHERE id = %s", (child,)) == "waiting", (
        "retrying it puts the child back to waiting"
    )
    new_id = int(scalar(conn, "SELECT jobq.enqueue('legacy', '{}')"))
    assert new_id > max(old.claimed, old.ready, old.dead, old.scheduled), "ids continue after the old ones"


@pytest.mark.parametrize("chain", CHAINS, ids=str)
@pytest.mark.parametrize("path", ["script", "extension"])
def test_data_made_before_the_upgrade_keeps_working(
    chain: Chain, path: str, new_db: Callable[[str], Conn]
) -> None:
    conn = new_db("data")
    if path == "script":
        install_by_script(conn, chain)
    else:
        install_extension(conn, chain)
    old = make_old_data(conn)
    if path == "script":
        upgrade_by_script(conn, chain)
    else:
        upgrade_extension(conn)
    assert scalar(conn, "SELECT jobq.version()") == default_version()
    check_old_data_works(conn, old, chain.start)


# the wrong version ----------------------------------------------------------------------------------------

def all_steps() -> list[str]:
    return sorted(discover_steps().values())


def database_state(conn: Conn) -> tuple[object, ...]:
    return (
        fingerprint(conn),
        conn.execute("SELECT version FROM jobq._migration ORDER BY 1").fetchall(),
        conn.execute("SELECT to_jsonb(j) FROM jobq._job AS j ORDER BY id").fetchall(),
        conn.execute("SELECT to_jsonb(q) FROM jobq._queue AS q ORDER BY queue").fetchall(),
    )


@pytest.mark.parametrize("step", all_steps())
def test_an_upgrade_script_on_the_wrong_version_fails_with_jq000_and_changes_nothing(
    step: str, conn: Conn
) -> None:
    # conn has the default version: every upgrade script is for an older one.
    conn.execute("SELECT jobq.enqueue('kept', '{}')")
    before = database_state(conn)
    with pytest.raises(psycopg.Error) as raised:
        conn.execute(script(step))
    assert raised.value.sqlstate == "JQ000", f"{step} on {default_version()}: {raised.value}"
    assert "installed" in str(raised.value.diag.message_primary)
    assert raised.value.diag.message_hint, "JQ000 has a HINT"
    conn.execute("RESET search_path")
    assert database_state(conn) == before, "nothing changed"


@pytest.mark.parametrize("step", all_steps())
def test_psql_stops_at_the_guard_of_an_upgrade_script_on_the_wrong_version(
    step: str, conn: Conn, postgresql_proc: PostgreSQLExecutor
) -> None:
    # The documented manual path: psql -v ON_ERROR_STOP=1 -f <script>.
    before = database_state(conn)
    dsn = proc_dsn(postgresql_proc, conn.info.dbname)
    done = subprocess.run(
        [str(find_bindir() / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", dsn,
         "-f", str(SQL_DIR / step)],
        capture_output=True, text=True, check=False,
    )
    assert done.returncode == 3, f"psql should stop at the error: {done.returncode} {done.stderr}"
    assert "this script upgrades" in done.stderr, done.stderr
    assert database_state(conn) == before, "nothing changed"


@pytest.mark.parametrize("chain", CHAINS, ids=str)
def test_an_upgrade_step_cannot_be_applied_twice(chain: Chain, new_db: Callable[[str], Conn]) -> None:
    conn = new_db("twice")
    install_by_script(conn, chain)
    upgrade_by_script(conn, chain)
    before = database_state(conn)
    with pytest.raises(psycopg.Error) as raised:
        conn.execute(script(chain.steps[-1]))
    assert raised.value.sqlstate == "JQ000"
    conn.execute("RESET search_path")
    assert database_state(conn) == before, "nothing changed"


# 0.2.0 → 0.3.0 with jobs running across the upgrade ------------------------------------------------------

CHAINS_FROM_0_2 = [chain for chain in CHAINS if chain.start == "0.2.0"]


@pytest.mark.parametrize("chain", CHAINS_FROM_0_2, ids=str)
@pytest.mark.parametrize("path", ["script", "extension"])
def test_leases_granted_by_0_2_0_come_out_parked_and_still_finish(
    chain: Chain, path: str, new_db: Callable[[str], Conn]
) -> None:
    # 0.3.0's claim index leaves out parked rows only: a running job from
    # 0.2.0 must come out parked, or claims would step over it by status
    # forever and a limited queue's parked count would miss it.
    conn = new_db("live")
    if path == "script":
        install_by_script(conn, chain)
    else:
        install_extension(conn, chain)
    conn.execute("SELECT jobq.configure_queue('lim', concurrency => 3)")
    conn.execute("SELECT jobq.enqueue_many('plain', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 5)), "
                 "max_attempts => 1)")
    conn.execute("SELECT jobq.enqueue_many('lim', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 5)))")
    lease = "SELECT id, lease_token FROM jobq.claim(%s, %s, 'old')"
    plain = {int(r[0]): r[1] for r in conn.execute(lease, ("plain", 3))}
    limited = {int(r[0]): r[1] for r in conn.execute(lease, ("lim", 2))}
    assert len(plain) == 3 and len(limited) == 2
    if path == "script":
        upgrade_by_script(conn, chain)
    else:
        upgrade_extension(conn)
    assert scalar(conn, "SELECT jobq.version()") == default_version()

    rows = conn.execute(
        "SELECT status, parked, count(*) FROM jobq._job GROUP BY 1, 2 ORDER BY 1, 2").fetchall()
    assert [tuple(r) for r in rows] == [("ready", False, 5), ("running", True, 5)], (
        "the 5 leases are parked, the 5 ready jobs are not"
    )
    assert scalar(conn, "SELECT count(*) FROM jobq.claim('lim', 10, 'new')") == 1, (
        "the limited queue counts its 2 old leases: 1 slot of 3 left"
    )
    (p1, t1), (p2, t2), (p3, _) = sorted(plain.items())
    assert scalar(conn, "SELECT jobq.complete(%s, %s)", (p1, t1)) is True, "an old lease completes"
    assert scalar(conn, "SELECT jobq.fail(%s, 'after upgrade', %s)", (p2, t2)) is True, "an old lease fails"
    assert scalar(conn, "SELECT status FROM jobq._job_archive WHERE id = %s", (p2,)) == "dead"
    conn.execute("UPDATE jobq._job SET lease_expires_at = now() - interval '1 second' WHERE id = %s", (p3,))
    assert scalar(conn, "SELECT jobq.reap()") == 1, "an old lease that expires is reaped"
    assert scalar(conn, "SELECT status FROM jobq._job_archive WHERE id = %s", (p3,)) == "dead", (
        "out of attempts (max_attempts 1): dead-lettered"
    )
    lim_ids = sorted(limited)
    assert scalar(conn, "SELECT jobq.heartbeat(%s, %s)", (lim_ids[0], limited[lim_ids[0]])) is True
    assert scalar(conn, "SELECT jobq.release(%s, %s)", (lim_ids[1], limited[lim_ids[1]])) is True
    assert conn.execute("SELECT status, parked FROM jobq._job WHERE id = %s", (lim_ids[1],)).fetchone() == (
        "ready", False), "a released old lease is un-parked"
    totals = conn.execute(
        "SELECT completed_total, failed_total, dead_total FROM jobq.stats WHERE queue = 'plain'").fetchone()
    assert totals == (1, 2, 2), "finishing after the upgrade is counted (history before it is not)"
    assert scalar(conn, "SELECT count(*) FROM jobq._job WHERE parked AND status <> 'running'") == 0
