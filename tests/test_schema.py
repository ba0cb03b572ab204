"""pyqueue.schema: installing and upgrading jobq from Python (SPEC §1, path 2).

Only jobq 0.1.0 exists, so the upgrade machinery runs against a directory of
fake versions: the real 0.1.0 install script plus upgrade steps that log
what they did, in which order and in which transaction."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
import tomllib
from pytest_postgresql.executors import PostgreSQLExecutor

import pyqueue
from pyqueue import schema
from pyqueue._sqlfiles import SqlScripts
from pyqueue.schema import SchemaError
from tests.conftest import ROOT, SQL_DIR, default_version, proc_dsn
from tests.schema_fingerprint import fingerprint

Conn = psycopg.Connection[tuple[object, ...]]
FIRST_RELEASE = "0.1.0"  # the fake versions build on its (frozen) install script
WAIT_LIMIT = 30.0  # seconds: how long to wait for other sessions to queue up on the lock


@pytest.fixture
def empty_dsn(postgresql_proc: PostgreSQLExecutor) -> Iterator[str]:
    """A fresh database without jobq, dropped afterwards."""
    name = f"jobq_empty_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(proc_dsn(postgresql_proc, "postgres"), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield proc_dsn(postgresql_proc, name)
    with psycopg.connect(proc_dsn(postgresql_proc, "postgres"), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.fixture
def empty(empty_dsn: str) -> Iterator[Conn]:
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        yield conn


def step_sql(source: str, target: str, *, fail: bool = False, set_version: bool = True) -> str:
    """An upgrade step that logs itself (order and transaction id), then
    optionally fails, and (re)defines jobq.version() like a real one must."""
    lines = [
        "CREATE TABLE IF NOT EXISTS jobq.upgrade_log (seq serial PRIMARY KEY, step text NOT NULL,"
        " txid bigint NOT NULL DEFAULT pg_catalog.txid_current());",
        f"INSERT INTO jobq.upgrade_log (step) VALUES ('{source}--{target}');",
        f"CREATE TABLE jobq.marker_{target.replace('.', '_')} (id int);",
    ]
    if fail:
        lines.append("SELECT 1 / 0;")
    if set_version:
        lines.append(
            "CREATE OR REPLACE FUNCTION jobq.version() RETURNS text LANGUAGE sql IMMUTABLE "
            f"SET search_path = pg_catalog, pg_temp AS $$ SELECT '{target}'::text $$;"
        )
    lines.append(f"INSERT INTO jobq._migration (version) VALUES ('{target}');")
    return "\n".join(lines) + "\n"


MakeSqlDir = Callable[..., Path]


@pytest.fixture
def make_sql_dir(tmp_path: Path) -> MakeSqlDir:
    """A directory with the real 0.1.0 install script plus fake steps:
    make_sql_dir(("0.1.0", "0.2.0"), ("0.2.0", "0.3.0", {"fail": True}))."""

    def make(*steps: tuple[str, str] | tuple[str, str, dict[str, bool]]) -> Path:
        directory = tmp_path / f"sql-{uuid.uuid4().hex[:6]}"
        directory.mkdir()
        shutil.copy(SQL_DIR / f"jobq--{FIRST_RELEASE}.sql", directory)
        for step in steps:
            source, target = step[0], step[1]
            options = step[2] if len(step) == 3 else {}
            (directory / f"jobq--{source}--{target}.sql").write_text(step_sql(source, target, **options))
        return directory

    return make


def upgrade_log(conn: Conn) -> list[tuple[object, ...]]:
    return conn.execute("SELECT step, txid FROM jobq.upgrade_log ORDER BY seq").fetchall()


def migrations(conn: Conn) -> list[tuple[object, ...]]:
    return conn.execute("SELECT version, applied_at FROM jobq._migration ORDER BY version").fetchall()


def exists(conn: Conn, relation: str) -> bool:
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (relation,)).fetchone()
    return row == (True,)


# --- the real scripts ---------------------------------------------------------------

def test_the_packaged_version_is_the_control_files_default() -> None:
    assert schema.packaged_version() == default_version()
    assert default_version() in SqlScripts.load().full


def test_inside_a_wheel_the_sql_comes_from_the_package(tmp_path: Path) -> None:
    # The wheel force-includes sql/ as pyqueue/sql (pyproject.toml): lay out
    # the package that way and ask a fresh interpreter where the SQL is.
    package = tmp_path / "pyqueue"
    shutil.copytree(ROOT / "pyqueue", package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(SQL_DIR, package / "sql")
    (package / "sql" / "jobq--0.1.0--9.9.9.sql").write_text("-- only in this copy\n")
    probe = ("from pyqueue._sqlfiles import SqlScripts; s = SqlScripts.load(); "
             "print(s.location); print(s.latest); print(' '.join(s.versions))")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env,
                          capture_output=True, text=True, check=True)
    location, latest, versions = done.stdout.splitlines()
    assert Path(location) == package / "sql"
    assert latest == default_version()  # from the copied jobq.control
    assert versions.split()[-1] == "9.9.9"


def test_install_into_an_empty_database_records_the_version(empty: Conn) -> None:
    assert schema.installed_version(empty) is None
    change = schema.install(empty)
    assert (change.action, change.version, change.previous) == ("installed", default_version(), None)
    assert change.scripts == [f"jobq--{default_version()}.sql"]
    assert schema.installed_version(empty) == default_version()
    assert schema.installed(empty) == schema.Installed(default_version(), extension=False)
    assert [row[0] for row in migrations(empty)] == [default_version()]
    # And it works: a job goes in.
    assert empty.execute("SELECT jobq.enqueue('q', '{}') > 0").fetchone() == (True,)


def test_a_second_install_is_a_no_op(empty: Conn) -> None:
    schema.install(empty)
    job = empty.execute("SELECT jobq.enqueue('q', '{\"keep\": true}')").fetchone()
    change = schema.install(empty)
    assert change.action == "unchanged"
    assert "already installed" in change.describe()
    assert len(migrations(empty)) == 1
    assert empty.execute("SELECT id FROM jobq._job").fetchall() == [job]


def test_install_puts_back_the_callers_search_path(empty: Conn) -> None:
    empty.execute("CREATE SCHEMA app")
    empty.execute("SET search_path TO app, public")
    schema.install(empty)
    assert empty.execute("SHOW search_path").fetchone() == ("app, public",)


def test_install_joins_an_open_transaction_and_rolls_back_with_it(empty_dsn: str) -> None:
    with psycopg.connect(empty_dsn) as conn:  # not autocommit: the caller's transaction
        conn.execute("SELECT 1")
        schema.install(conn)
        assert schema.installed_version(conn) == default_version()
        conn.rollback()
        assert schema.installed_version(conn) is None


def test_a_foreign_jobq_schema_is_refused(empty: Conn) -> None:
    empty.execute("CREATE SCHEMA jobq")
    with pytest.raises(SchemaError, match="not a jobq installation"):
        schema.install(empty)
    assert empty.execute("SELECT to_regclass('jobq._job')").fetchone() == (None,)


def test_upgrade_without_an_install_is_refused(empty: Conn) -> None:
    with pytest.raises(SchemaError, match="not installed") as raised:
        schema.upgrade(empty)
    assert raised.value.hint is not None and "pyqueue install" in raised.value.hint


def test_concurrent_installs_end_with_one_install(empty_dsn: str) -> None:
    results: list[schema.SchemaChange] = []
    errors: list[BaseException] = []

    def install() -> None:
        try:
            with psycopg.connect(empty_dsn, autocommit=True) as conn:
                results.append(schema.install(conn))
        except BaseException as exc:
            errors.append(exc)

    with psycopg.connect(empty_dsn) as holder:
        # Hold the install lock so that both installs are sure to queue up on it.
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (schema.SCHEMA_LOCK_KEY,))
        threads = [threading.Thread(target=install) for _ in range(2)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + WAIT_LIMIT
        while True:
            waiting = holder.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            ).fetchone()
            if waiting == (2,) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert waiting == (2,), "both installs should be waiting for the lock"
        holder.commit()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(change.action for change in results) == ["installed", "unchanged"]
    with psycopg.connect(empty_dsn) as conn:
        assert len(migrations(conn)) == 1


# --- upgrades, with fake versions -------------------------------------------------------

def test_install_applies_the_install_script_then_every_step_in_one_transaction(
    empty: Conn, make_sql_dir: MakeSqlDir
) -> None:
    sql_dir = make_sql_dir(("0.1.0", "0.2.0"), ("0.2.0", "0.3.0"))
    change = schema.install(empty, sql_dir=sql_dir)
    assert (change.action, change.version) == ("installed", "0.3.0")
    assert change.scripts == ["jobq--0.1.0.sql", "jobq--0.1.0--0.2.0.sql", "jobq--0.2.0--0.3.0.sql"]
    log = upgrade_log(empty)
    assert [step for step, _ in log] == ["0.1.0--0.2.0", "0.2.0--0.3.0"]
    assert len({txid for _, txid in log}) == 1
    # All three scripts recorded themselves at the same transaction timestamp.
    rows = migrations(empty)
    assert [version for version, _ in rows] == ["0.1.0", "0.2.0", "0.3.0"]
    assert len({applied for _, applied in rows}) == 1


def test_upgrade_applies_the_steps_in_order_in_one_transaction(empty: Conn, make_sql_dir: MakeSqlDir) -> None:
    sql_dir = make_sql_dir(("0.1.0", "0.2.0"), ("0.2.0", "0.3.0"), ("0.3.0", "0.4.0"))
    schema.install(empty, "0.1.0", sql_dir=sql_dir)
    assert schema.installed_version(empty) == "0.1.0"
    assert not exists(empty, "jobq.upgrade_log")

    change = schema.upgrade(empty, sql_dir=sql_dir)
    assert (change.action, change.previous, change.version) == ("upgraded", "0.1.0", "0.4.0")
    log = upgrade_log(empty)
    assert [step for step, _ in log] == ["0.1.0--0.2.0", "0.2.0--0.3.0", "0.3.0--0.4.0"]
    assert len({txid for _, txid in log}) == 1
    assert schema.installed_version(empty) == "0.4.0"
    assert schema.upgrade(empty, sql_dir=sql_dir).action == "unchanged"


def test_upgrade_stops_at_the_requested_version(empty: Conn, make_sql_dir: MakeSqlDir) -> None:
    sql_dir = make_sql_dir(("0.1.0", "0.2.0"), ("0.2.0", "0.3.0"))
    schema.install(empty, "0.1.0", sql_dir=sql_dir)
    change = schema.upgrade(empty, "0.2.0", sql_dir=sql_dir)
    assert change.scripts == ["jobq--0.1.0--0.2.0.sql"]
    assert schema.installed_version(empty) == "0.2.0"
    assert not exists(empty, "jobq.marker_0_3_0")


def test_install_over_an_older_version_upgrades_it(empty: Conn, make_sql_dir: MakeSqlDir) -> None:
    sql_dir = make_sql_dir(("0.1.0", "0.2.0"))
    schema.install(empty, "0.1.0", sql_dir=sql_dir)
    change = schema.install(empty, sql_dir=sql_dir)
    assert (change.action, change.previous, change.version) == ("upgraded", "0.1.0", "0.2.0")
    assert change.scripts == ["jobq--0.1.0--0.2.0.sql"]


def test_a_failing_step_rolls_back_the_whole_upgrade(empty: Conn, make_sql_dir: MakeSqlDir) -> None:
    sql_dir = make_sql_dir(("0.1.0", "0.2.0"), ("0.2.0", "0.3.0", {"fail": True}))
    schema.install(empty, "0.1.0", sql_dir=sql_dir)
    with pytest.raises(SchemaError, match=r"jobq--0\.2\.0--0\.3\.0\.sql failed") as raised:
        schema.upgrade(empty, sql_dir=sql_dir)
    assert "division by zero" in str(raised.value)
    # The first step had succeeded; it is gone with the second.
    assert schema.installed_version(empty) == "0.1.0"
    assert not exists(empty, "jobq.marker_0_2_0")
    assert not exists(empty, "jobq.upgrade_log")
    assert [row[0] for row in migrations(empty)] == ["0.1.0"]


def test_a_failing_step_rolls_back_the_whole_install(empty: Conn, make_sql_dir: MakeSqlDir) -> None:
    sql_dir = make_sql_dir(("0.1.0", "0.2.0", {"fail": True}))
    with pytest.raises(SchemaError, match="nothing was changed"):
        schema.install(empty, sql_dir=sql_dir)
    assert empty.execute("SELECT to_regnamespace('jobq')").fetchone() == (None,)
    assert schema.installed_version(empty) is None
    # The connection stays usable, with its own search_path.
    assert empty.execute("SHOW search_path").fetchone() == ('"$user", public',)


def test_a_step_that_does_not_report_its_version_is_rolled_back(
    empty: Conn, make_sql_dir: MakeSqlDir
) -> None:
    sql_dir = make_sql_dir(("0.1.0", "0.2.0", {"set_version": False}))
    schema.install(empty, "0.1.0", sql_dir=sql_dir)
    with pytest.raises(SchemaError, match=r"reports 0\.1\.0 instead of 0\.2\.0"):
        schema.upgrade(empty, sql_dir=sql_dir)
    assert not exists(empty, "jobq.marker_0_2_0")


def test_install_starts_from_the_newest_full_script(empty: Conn, make_sql_dir: MakeSqlDir) -> None:
    sql_dir = make_sql_dir(("0.1.0", "0.2.0"), ("0.2.0", "0.3.0"))
    # A full 0.2.0 script: what 0.1.0 plus its upgrade step produce.
    full = (sql_dir / "jobq--0.1.0.sql").read_text() + (sql_dir / "jobq--0.1.0--0.2.0.sql").read_text()
    (sql_dir / "jobq--0.2.0.sql").write_text(full)
    change = schema.install(empty, sql_dir=sql_dir)
    assert change.scripts == ["jobq--0.2.0.sql", "jobq--0.2.0--0.3.0.sql"]
    assert schema.installed_version(empty) == "0.3.0"


def test_a_downgrade_is_refused(empty: Conn, make_sql_dir: MakeSqlDir) -> None:
    sql_dir = make_sql_dir(("0.1.0", "0.2.0"))
    schema.install(empty, sql_dir=sql_dir)
    (sql_dir / "jobq--0.2.0--0.1.0.sql").write_text("DROP SCHEMA jobq CASCADE;\n")  # never used
    refusal = r"jobq 0\.2\.0 is installed; refusing to downgrade to 0\.1\.0"
    with pytest.raises(SchemaError, match=refusal):
        schema.upgrade(empty, "0.1.0", sql_dir=sql_dir)
    with pytest.raises(SchemaError, match=refusal):
        schema.install(empty, "0.1.0", sql_dir=sql_dir)
    assert schema.installed_version(empty) == "0.2.0"


def test_a_database_newer_than_the_package_is_refused(empty: Conn, make_sql_dir: MakeSqlDir) -> None:
    schema.install(empty, sql_dir=make_sql_dir(("0.1.0", "0.2.0")))
    with pytest.raises(SchemaError, match="refusing to downgrade"):
        schema.upgrade(empty, sql_dir=make_sql_dir())  # a package that only knows 0.1.0
    assert schema.installed_version(empty) == "0.2.0"


def test_a_gap_in_the_upgrade_chain_is_refused(empty: Conn, make_sql_dir: MakeSqlDir) -> None:
    sql_dir = make_sql_dir(("0.2.0", "0.3.0"))
    schema.install(empty, "0.1.0", sql_dir=sql_dir)
    with pytest.raises(SchemaError, match=r"no upgrade path from jobq 0\.1\.0 to 0\.3\.0"):
        schema.upgrade(empty, sql_dir=sql_dir)
    with pytest.raises(SchemaError, match=r"not in the SQL scripts"):
        schema.upgrade(empty, "9.9.9", sql_dir=sql_dir)
    assert schema.installed_version(empty) == "0.1.0"


def test_the_shortest_upward_path_is_chosen(make_sql_dir: MakeSqlDir) -> None:
    sql_dir = make_sql_dir(("0.1.0", "0.2.0"), ("0.2.0", "0.3.0"), ("0.1.0", "0.3.0"), ("0.3.0", "0.2.1"))
    scripts = SqlScripts.load(sql_dir)
    path = scripts.upgrade_path("0.1.0", "0.3.0")
    assert path is not None and [s.name for s in path] == ["jobq--0.1.0--0.3.0.sql"]
    assert scripts.upgrade_path("0.3.0", "0.2.1") is None  # steps never go down
    assert scripts.upgrade_path("0.2.0", "0.2.0") == []


# --- the released scripts -------------------------------------------------------------

def test_the_released_upgrade_chain_gives_the_same_schema_as_a_fresh_install(empty: Conn, conn: Conn) -> None:
    schema.install(empty, FIRST_RELEASE)
    change = schema.upgrade(empty)
    assert schema.installed_version(empty) == default_version()
    if default_version() != FIRST_RELEASE:
        assert change.scripts[0] == f"jobq--{FIRST_RELEASE}--{change.scripts[0].split('--')[2]}"
    # conn's database got the packaged version's install script (conftest).
    fresh, upgraded = fingerprint(conn), fingerprint(empty)
    for section, rows in fresh.items():
        assert upgraded[section] == rows, f"{section} differ between a fresh install and the upgrades"


# --- an extension install -----------------------------------------------------------------

def extension_versions(conn: Conn) -> set[str]:
    """The jobq versions the server has extension scripts for (make install)."""
    rows = conn.execute("SELECT version FROM pg_available_extension_versions WHERE name = 'jobq'").fetchall()
    return {str(row[0]) for row in rows}


def test_an_extension_install_is_detected_and_left_to_alter_extension(
    empty: Conn, make_sql_dir: MakeSqlDir
) -> None:
    assert default_version() in extension_versions(empty), (
        "the jobq extension files are not installed on this server: run `make install`")
    empty.execute("CREATE EXTENSION jobq")
    assert schema.installed(empty) == schema.Installed(default_version(), extension=True)
    change = schema.install(empty)
    assert (change.action, change.extension) == ("unchanged", True)
    # A version the server has no extension script for: pyqueue asks
    # PostgreSQL (ALTER EXTENSION), never runs the scripts itself, and
    # reports the refusal.
    with pytest.raises(SchemaError, match=r"ALTER EXTENSION jobq UPDATE TO '9\.0\.0' failed") as raised:
        schema.upgrade(empty, sql_dir=make_sql_dir((default_version(), "9.0.0")))
    assert raised.value.hint is not None and "make install" in raised.value.hint
    assert schema.installed(empty) == schema.Installed(default_version(), extension=True)
    assert not exists(empty, "jobq.upgrade_log")


def test_an_old_extension_is_upgraded_with_alter_extension(empty: Conn) -> None:
    assert default_version() != FIRST_RELEASE, "there is no upgrade to test yet"
    assert {FIRST_RELEASE, default_version()} <= extension_versions(empty), (
        "the server lacks the extension scripts of both versions: run `make install`")
    empty.execute(f"CREATE EXTENSION jobq VERSION '{FIRST_RELEASE}'")
    change = schema.upgrade(empty)
    assert (change.action, change.previous, change.version, change.extension) == (
        "upgraded", FIRST_RELEASE, default_version(), True)
    assert schema.installed(empty) == schema.Installed(default_version(), extension=True)


def test_pyqueue_is_released_with_the_jobq_version_it_installs() -> None:
    """pyqueue X.Y.Z installs jobq X.Y.Z by default: pyproject, pyqueue.__version__ and
    sql/jobq.control move together (CHANGELOG lists them under one heading)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert project == pyqueue.__version__ == default_version()
