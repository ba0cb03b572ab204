"""The two install paths of SPEC §1 give the same jobq: CREATE EXTENSION
(after `make install`) and the plain script (psql -f / managed Postgres).
Also: an extension install survives pg_dump/pg_restore with its jobs,
settings and per-queue grants; and the plain script hands the caller's
search_path back."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import psycopg
import pytest
from psycopg.types.json import Jsonb
from pytest_postgresql.executors import PostgreSQLExecutor

from pyqueue.localserver import find_bindir
from tests.chaos_support import install_script
from tests.conftest import default_version, proc_dsn
from tests.schema_fingerprint import fingerprint
from tests.worker_support import scalar

Conn = psycopg.Connection[tuple[object, ...]]


def create_database(proc: PostgreSQLExecutor, name: str) -> str:
    with psycopg.connect(proc_dsn(proc, "postgres"), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    return proc_dsn(proc, name)


@pytest.fixture
def extension_db(postgresql_proc: PostgreSQLExecutor) -> Iterator[Conn]:
    """A database with jobq installed by CREATE EXTENSION."""
    dsn = create_database(postgresql_proc, "jobq_as_extension")
    with psycopg.connect(dsn, autocommit=True) as conn:
        available = conn.execute(
            "SELECT default_version FROM pg_available_extensions WHERE name = 'jobq'"
        ).fetchone()
        assert available == (default_version(),), (
            "the jobq extension files are not installed on this server (or are stale): run `make install`"
        )
        conn.execute("CREATE EXTENSION jobq")
        yield conn


def test_extension_and_script_installs_are_identical(conn: Conn, extension_db: Conn) -> None:
    from_script = fingerprint(conn)
    from_extension = fingerprint(extension_db)
    assert from_script["functions"], "the fingerprint saw no jobq functions"
    for section, rows in from_script.items():
        assert from_extension[section] == rows, f"{section} differ between install paths"


def test_extension_owns_every_object_and_drops_cleanly(extension_db: Conn) -> None:
    members = extension_db.execute(
        "SELECT count(*) FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid "
        "WHERE e.extname = 'jobq' AND d.deptype = 'e'"
    ).fetchone()
    functions = extension_db.execute(
        "SELECT count(*) FROM pg_proc WHERE pronamespace = 'jobq'::regnamespace"
    ).fetchone()
    assert members is not None and functions is not None
    assert int(str(members[0])) > int(str(functions[0])), (
        "tables, views and functions belong to the extension")
    extension_db.execute("DROP EXTENSION jobq")
    assert extension_db.execute("SELECT to_regnamespace('jobq')").fetchone() == (None,)


def test_jobs_and_settings_survive_pg_dump_of_an_extension_install(
    extension_db: Conn, postgresql_proc: PostgreSQLExecutor, tmp_path_factory: pytest.TempPathFactory
) -> None:
    ids = [
        extension_db.execute("SELECT jobq.enqueue('mail', %s)", (Jsonb({"n": n}),)).fetchone()
        for n in range(3)
    ]
    extension_db.execute("SELECT jobq.configure_queue('mail', max_attempts => 7)")
    extension_db.execute("SELECT jobq.grant_queue('jobq_worker', 'mail*', 'consume')")
    dump = tmp_path_factory.mktemp("dump") / "jobq.dump"
    source = proc_dsn(postgresql_proc, "jobq_as_extension")
    subprocess.run([str(find_bindir() / "pg_dump"), "-Fc", "-f", str(dump), "-d", source], check=True)
    target = create_database(postgresql_proc, "jobq_restored")
    subprocess.run([str(find_bindir() / "pg_restore"), "-d", target, str(dump)], check=True)
    with psycopg.connect(target, autocommit=True) as restored:
        rows = restored.execute("SELECT id FROM jobq._job ORDER BY id").fetchall()
        assert rows == [row for row in ids]
        settings = restored.execute("SELECT max_attempts FROM jobq.queues WHERE queue = 'mail'").fetchone()
        assert settings == (7,)
        grants = restored.execute("SELECT role, queue_pattern, privilege FROM jobq.queue_grants").fetchall()
        assert grants == [("jobq_worker", "mail*", "consume")], "per-queue privileges are settings too"
        # The identity sequence came along: new jobs do not collide with restored ones.
        new_id = restored.execute("SELECT jobq.enqueue('mail', '{}')").fetchone()
        assert new_id is not None and new_id not in rows


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
