"""The ``pyqueue`` command line, run as a real subprocess (``python -m
pyqueue``) against the test databases."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from pytest_postgresql.executors import PostgreSQLExecutor

from pyqueue.cli import COMMANDS
from pyqueue.cli import main as cli_main
from tests.cli_handlers import INSTANCE_QUEUE
from tests.conftest import ROOT, default_version, proc_dsn

Conn = psycopg.Connection[tuple[object, ...]]
CLI_TIMEOUT = 60  # seconds any one CLI run may take
WORKER_WAIT = 30  # seconds to wait for a worker subprocess to finish the test's jobs
LIBPQ_ENV = ("DATABASE_URL", "PGHOST", "PGPORT", "PGUSER", "PGDATABASE", "PGPASSWORD", "PGSERVICE",
             "PGHOSTADDR", "PGOPTIONS", "PGAPPNAME")


def cli_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment without any connection settings, plus extra."""
    env = {key: value for key, value in os.environ.items() if key not in LIBPQ_ENV}
    env.update(extra or {})
    return env


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pyqueue", *args], cwd=ROOT, env=cli_env(env),
                          capture_output=True, text=True, timeout=CLI_TIMEOUT, check=False)


def ok(*args: str, env: dict[str, str] | None = None) -> str:
    done = cli(*args, env=env)
    assert done.returncode == 0, f"pyqueue {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def status(conn: Conn, job_id: int) -> object:
    row = conn.execute("SELECT status FROM jobq.jobs WHERE id = %s", (job_id,)).fetchone()
    return None if row is None else row[0]


@pytest.fixture
def empty_dsn(postgresql_proc: PostgreSQLExecutor) -> Iterator[str]:
    """A fresh database without jobq, dropped afterwards."""
    name = f"jobq_cli_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(proc_dsn(postgresql_proc, "postgres"), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield proc_dsn(postgresql_proc, name)
    with psycopg.connect(proc_dsn(postgresql_proc, "postgres"), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def help_in_process(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """What ``pyqueue ARGS --help`` prints, from cli.main in this process (no
    interpreter and import of pyqueue per command); exit code 0."""
    with pytest.raises(SystemExit) as exited:
        cli_main([*args, "--help"])
    assert exited.value.code == 0, args
    return capsys.readouterr().out


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    overview = ok("--help")  # the command itself, once
    for command in COMMANDS:
        assert command.name in overview
        detail = help_in_process(capsys, command.name)
        assert command.description.split()[0] in detail
    for name in ("install", "upgrade", "enqueue", "worker", "stats", "retry", "cancel", "demo", "version"):
        assert name in overview


def test_install_on_an_empty_database_then_again(empty_dsn: str) -> None:
    before = ok("version", "--installed", "--dsn", empty_dsn)
    assert before.splitlines()[-1] == "jobq in database: not installed"
    assert ok("install", "--dsn", empty_dsn).strip().startswith(f"installed jobq {default_version()}")
    assert "already installed; nothing to do" in ok("install", "--dsn", empty_dsn)
    assert "already installed; nothing to do" in ok("upgrade", "--dsn", empty_dsn)
    assert f"jobq in database: {default_version()}" in ok("version", "--installed", "--dsn", empty_dsn)
    with psycopg.connect(empty_dsn) as conn:
        assert conn.execute("SELECT version FROM jobq._migration").fetchall() == [(default_version(),)]


def test_upgrade_refuses_an_unknown_version_and_a_downgrade(dsn: str) -> None:
    unknown = cli("upgrade", "--to", "9.9.9", "--dsn", dsn)
    assert unknown.returncode == 2
    assert "error: jobq 9.9.9 is not in the SQL scripts" in unknown.stderr
    assert "hint: Known versions:" in unknown.stderr
    down = cli("upgrade", "--to", "0.0.9", "--dsn", dsn)
    assert down.returncode == 2
    assert f"error: jobq {default_version()} is installed; refusing to downgrade to 0.0.9" in down.stderr
    garbled = cli("install", "--version", "latest", "--dsn", dsn)
    assert garbled.returncode == 2
    assert "error: 'latest' is not a jobq version" in garbled.stderr


def test_enqueue_prints_the_id_and_stats_show_the_job(dsn: str, conn: Conn) -> None:
    job_id = int(ok("enqueue", "emails", '{"to": "ana@example.com"}', "--dsn", dsn))
    later = int(ok("--dsn", dsn, "enqueue", "emails", "{}", "--delay", "600", "--priority", "-5",
                   "--max-attempts", "3"))
    row = conn.execute("SELECT queue, payload, status FROM jobq.jobs WHERE id = %s", (job_id,)).fetchone()
    assert row == ("emails", {"to": "ana@example.com"}, "ready")
    row = conn.execute("SELECT status, priority, max_attempts FROM jobq.jobs WHERE id = %s",
                       (later,)).fetchone()
    assert row == ("scheduled", -5, 3)

    table = ok("stats", "--dsn", dsn).splitlines()
    assert table[0].split() == ["queue", "ready", "scheduled", "running", "dead", "waiting", "oldest",
                                "ready"]
    assert set(table[1]) <= {"-", " "}
    emails = next(line for line in table if line.startswith("emails"))
    assert emails.split()[:5] == ["emails", "1", "1", "0", "0"]
    # Aligned: every number ends in the header's column.
    assert len({len(line) for line in table[:2]}) == 1

    stats = json.loads(ok("stats", "--json", "--dsn", dsn))
    assert [(s["queue"], s["ready"], s["scheduled"], s["dead"]) for s in stats] == [("emails", 1, 1, 0)]
    assert stats[0]["oldest_ready_age"] >= 0


def test_enqueue_with_a_key_and_an_absolute_time(dsn: str, conn: Conn) -> None:
    first = ok("enqueue", "reports", '{"day": 1}', "--key", "report:1",
               "--run-at", "2031-01-01T09:00:00+00:00", "--dsn", dsn)
    again = ok("enqueue", "reports", '{"day": 1}', "--key", "report:1", "--dsn", dsn)
    assert first == again
    row = conn.execute("SELECT run_at = '2031-01-01T09:00:00+00' FROM jobq.jobs WHERE id = %s",
                       (int(first),)).fetchone()
    assert row == (True,)


def test_a_bad_queue_name_exits_2_with_the_error_and_its_hint(dsn: str, conn: Conn) -> None:
    done = cli("enqueue", "no spaces allowed", "{}", "--dsn", dsn)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert lines[0].startswith("error: jobq: queue must be a queue name")
    assert lines[1].startswith("hint: Use names such as")
    assert conn.execute("SELECT count(*) FROM jobq.jobs").fetchone() == (0,)


def test_a_payload_that_is_not_json_exits_2(dsn: str) -> None:
    done = cli("enqueue", "q", "{to: nobody}", "--dsn", dsn)
    assert done.returncode == 2
    assert "error: PAYLOAD_JSON is not valid JSON" in done.stderr
    done = cli("enqueue", "q", "[1, 2]", "--dsn", dsn)  # JSON, but not an object: refused before SQL
    assert done.returncode == 2
    assert "error: PAYLOAD_JSON must be a JSON object, got an array" in done.stderr


def test_cancel_and_retry(dsn: str, conn: Conn) -> None:
    job_id = ok("enqueue", "q", "{}", "--dsn", dsn).strip()
    assert ok("cancel", "--id", job_id, "--dsn", dsn).strip() == f"job {job_id} cancelled"
    assert status(conn, int(job_id)) == "cancelled"
    again = cli("cancel", "--id", job_id, "--dsn", dsn)
    assert again.returncode == 1
    assert "not cancelled" in again.stderr

    assert ok("retry", job_id, "--dsn", dsn).strip() == f"job {job_id} will run again"
    assert status(conn, int(job_id)) == "ready"
    unknown = cli("retry", "999999", "--dsn", dsn)
    assert unknown.returncode == 1
    assert "not retried" in unknown.stderr


def test_retry_dead_brings_back_every_dead_job_of_a_queue(dsn: str, conn: Conn) -> None:
    for _ in range(2):
        conn.execute("SELECT jobq.enqueue('q', '{}', max_attempts => 1)")
    for job_id, token in conn.execute("SELECT id, lease_token FROM jobq.claim('q', 10)").fetchall():
        conn.execute("SELECT jobq.fail(%s, 'boom', %s)", (job_id, token))
    assert conn.execute("SELECT count(*) FROM jobq.jobs WHERE status = 'dead'").fetchone() == (2,)
    assert ok("retry", "--dead", "q", "--dsn", dsn).strip() == "2 dead jobs of queue q will run again"
    assert conn.execute("SELECT count(*) FROM jobq.jobs WHERE status = 'ready'").fetchone() == (2,)
    assert cli("retry", "--dsn", dsn).returncode == 2  # ID or --dead is required


def test_the_connection_comes_from_dsn_then_database_url_then_pg_environment(dsn: str) -> None:
    ok("enqueue", "where", "{}", "--dsn", dsn)
    assert "where" in ok("stats", env={"DATABASE_URL": dsn})
    parts = conninfo_to_dict(dsn)
    pg_env = {"PGHOST": str(parts["host"]), "PGPORT": str(parts["port"]), "PGUSER": str(parts["user"]),
              "PGDATABASE": str(parts["dbname"])}
    assert "where" in ok("stats", env=pg_env)
    # --dsn wins over DATABASE_URL, which wins over PG*.
    assert "where" in ok("stats", "--dsn", dsn, env={"DATABASE_URL": "host=/nonexistent port=1"})
    assert "where" in ok("stats", env={"DATABASE_URL": dsn, "PGHOST": "/nonexistent", "PGPORT": "1"})


def test_no_database_exits_1_with_a_clear_message() -> None:
    done = cli("stats", "--dsn", "host=/nonexistent port=1 user=nobody password=secret")
    assert done.returncode == 1
    assert done.stderr.startswith(
        "error: cannot connect to PostgreSQL (host=/nonexistent port=1 user=nobody, from --dsn)")
    assert "secret" not in done.stderr
    assert "hint: Check the --dsn value" in done.stderr  # not "Pass --dsn": it was passed (issue 29)


def wait_until_finished(conn: Conn, ids: list[int]) -> list[tuple[object, ...]]:
    """Rows (id, status, attempts, last_error) once no job of ids is live."""
    deadline = time.monotonic() + WORKER_WAIT
    while True:
        rows = conn.execute("SELECT id, status, attempts, last_error FROM jobq.jobs WHERE id = ANY(%s) "
                            "ORDER BY id", (ids,)).fetchall()
        if all(row[1] in ("completed", "dead") for row in rows) or time.monotonic() > deadline:
            return rows
        time.sleep(0.1)


def stop_worker(worker: subprocess.Popen[str]) -> tuple[int, str]:
    worker.send_signal(signal.SIGTERM)
    try:
        _, stderr = worker.communicate(timeout=WORKER_WAIT)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    return worker.returncode, stderr


def start_worker(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "pyqueue", "worker", *args], cwd=ROOT, env=cli_env(env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_worker_runs_a_handler_function_and_exits_0_on_sigterm(dsn: str, conn: Conn) -> None:
    # History is opt-in since jobq 0.3.0: keep it to see the jobs completed.
    conn.execute("SELECT jobq.configure_queue('q', retention => interval '1 day')")
    ids = [int(ok("enqueue", "q", json.dumps({"n": n}), "--dsn", dsn)) for n in range(5)]
    failing = int(ok("enqueue", "q", '{"fail": "on purpose"}', "--max-attempts", "1", "--dsn", dsn))
    elsewhere = int(ok("enqueue", "other", "{}", "--dsn", dsn))
    worker = start_worker("tests.cli_handlers:handle", "--queue", "q", "--concurrency", "2",
                          "--poll-interval", "0.5", "--name", "cli-test", "--dsn", dsn)
    try:
        rows = wait_until_finished(conn, [*ids, failing])
    finally:
        code, stderr = stop_worker(worker)
    assert code == 0, stderr
    assert [row[1] for row in rows[:5]] == ["completed"] * 5
    assert rows[5][1:3] == ("dead", 1)
    assert "RuntimeError: asked to fail: on purpose" in str(rows[5][3])
    assert status(conn, elsewhere) == "ready"  # not one of its queues
    done = conn.execute("SELECT DISTINCT worker FROM jobq.jobs WHERE id = ANY(%s)", (ids,)).fetchall()
    assert len(done) == 1 and str(done[0][0]).startswith("cli-test")


def test_a_worker_runs_a_configured_worker_instance(dsn: str, conn: Conn) -> None:
    conn.execute("SELECT jobq.configure_queue(%s, retention => interval '1 day')", (INSTANCE_QUEUE,))
    ids = [int(ok("enqueue", INSTANCE_QUEUE, "{}", "--dsn", dsn)) for _ in range(3)]
    worker = start_worker("tests.cli_handlers:worker", env={"CLI_HANDLERS_DSN": dsn})
    try:
        rows = wait_until_finished(conn, ids)
    finally:
        code, stderr = stop_worker(worker)
    assert code == 0, stderr
    assert [row[1] for row in rows] == ["completed"] * 3


def test_worker_arguments_are_checked(dsn: str) -> None:
    no_queue = cli("worker", "tests.cli_handlers:handle", "--dsn", dsn)
    assert no_queue.returncode == 2
    assert "name its queues with --queue" in no_queue.stderr
    configured = cli("worker", "tests.cli_handlers:worker", "--queue", "q", "--dsn", dsn)
    assert configured.returncode == 2
    assert "is a configured Worker" in configured.stderr
    with_dsn = cli("worker", "tests.cli_handlers:worker", "--dsn", dsn)
    assert with_dsn.returncode == 2
    missing = cli("worker", "tests.no_such_module:handle", "--queue", "q", "--dsn", dsn)
    assert missing.returncode == 2
    assert "cannot import tests.no_such_module" in missing.stderr
    assert cli("worker", "tests.cli_handlers", "--queue", "q", "--dsn", dsn).returncode == 2


def test_version_names_the_package_and_the_sql() -> None:
    lines = ok("version").splitlines()
    assert lines[0].startswith("pyqueue ")
    assert lines[1] == f"jobq SQL {default_version()} (packaged)"
