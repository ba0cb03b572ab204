"""``pyqueue worker`` as a newcomer meets it (issue 12): it says what it
starts, says when a job goes dead, imports the handler from --app-dir, and
its --shutdown-timeout gives up a hung handler."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psycopg

from tests.conftest import ROOT, default_version
from tests.test_cli import cli, cli_env, ok, start_worker, stop_worker, wait_until_finished
from tests.worker_support import wait_until

Conn = psycopg.Connection[tuple[object, ...]]


def test_the_worker_logs_what_it_starts_and_which_jobs_go_dead(dsn: str, conn: Conn) -> None:
    conn.execute("SELECT jobq.configure_queue('q', retention => interval '1 day')")
    dead = int(ok("enqueue", "q", json.dumps({"fail": "on purpose\nsecond line"}), "--max-attempts", "1",
                  "--dsn", dsn))
    worker = start_worker("tests.cli_handlers:handle", "--queue", "q", "--queue", "r", "--concurrency", "3",
                          "--batch-size", "7", "--poll-interval", "0.5", "--dsn", dsn + " password=sekrit")
    try:
        rows = wait_until_finished(conn, [dead])
    finally:
        code, stderr = stop_worker(worker)
    assert code == 0, stderr
    assert rows[0][1] == "dead"
    [start] = [line for line in stderr.splitlines() if "pyqueue worker starting" in line]
    assert " INFO pyqueue.worker: " in start
    assert "queues q, r; concurrency 3; batch size 7; database host=" in start
    assert f"dbname={psycopg.conninfo.conninfo_to_dict(dsn)['dbname']}" in start
    assert f"jobq {default_version()} installed; pyqueue " in start
    assert "sekrit" not in stderr
    [dead_line] = [line for line in stderr.splitlines() if f"job {dead} of queue q is dead" in line]
    assert " ERROR pyqueue" in dead_line
    assert dead_line.endswith(f"job {dead} of queue q is dead after 1 of 1 attempts: "
                              "RuntimeError: asked to fail: on purpose")


def test_the_handler_module_is_imported_from_app_dir(dsn: str, conn: Conn, tmp_path: Path) -> None:
    conn.execute("SELECT jobq.configure_queue('appdir', retention => interval '1 day')")
    app = tmp_path / "app"
    (app / "newcomer_app").mkdir(parents=True)
    (app / "newcomer_app" / "__init__.py").write_text("")
    (app / "newcomer_app" / "jobs.py").write_text("def handle(job):\n    pass\n")
    job = int(ok("enqueue", "appdir", "{}", "--dsn", dsn))

    # From the repository root, the module is not found: the error says where it looked.
    missing = cli("worker", "newcomer_app.jobs:handle", "--queue", "appdir", "--dsn", dsn)
    assert missing.returncode == 2
    assert f"cannot import newcomer_app.jobs (looked for {ROOT}/newcomer_app/jobs.py" in missing.stderr
    assert "--app-dir" in missing.stderr
    # With --app-dir it is.
    worker = start_worker("newcomer_app.jobs:handle", "--app-dir", str(app), "--queue", "appdir",
                          "--poll-interval", "0.5", "--dsn", dsn)
    try:
        rows = wait_until_finished(conn, [job])
    finally:
        code, stderr = stop_worker(worker)
    assert code == 0, stderr
    assert rows[0][1] == "completed"
    # And from the current directory, by default.
    done = subprocess.run([sys.executable, "-m", "pyqueue", "worker", "newcomer_app.jobs:nothing", "--queue",
                           "appdir", "--dsn", dsn], cwd=app, env=cli_env({"PYTHONPATH": str(ROOT)}),
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and "newcomer_app.jobs has no attribute nothing" in done.stderr
    assert "--app-dir" in ok("worker", "--help")
    assert "--shutdown-timeout" in ok("worker", "--help")


def test_shutdown_timeout_gives_up_a_hung_handler(dsn: str, conn: Conn, tmp_path: Path) -> None:
    conn.execute("SELECT jobq.configure_queue('hang', retention => '1 day', lease => '3 s')")
    started = tmp_path / "started"
    (tmp_path / "hung_handlers.py").write_text(
        f"import pathlib, time\n\ndef handle(job):\n    pathlib.Path({str(started)!r}).touch()\n"
        "    time.sleep(10**6)\n")
    hung = int(ok("enqueue", "hang", "{}", "--priority", "-1", "--dsn", dsn))
    waiting = [int(ok("enqueue", "hang", "{}", "--dsn", dsn)) for _ in range(2)]
    worker = start_worker("hung_handlers:handle", "--app-dir", str(tmp_path), "--queue", "hang",
                          "--concurrency", "1", "--shutdown-timeout", "1", "--dsn", dsn)
    try:
        wait_until(lambda: conn.execute("SELECT count(*) FROM jobq.jobs WHERE queue = 'hang' "
                                        "AND status = 'running'").fetchone() == (3,), "the jobs claimed")
        # The handler is running, not just claimed (stopped before it starts,
        # the job would be released instead: a race on a loaded machine).
        wait_until(started.exists, "the hung handler started")
    finally:
        code, stderr = stop_worker(worker)
    assert code == 0, stderr
    rows = {r[0]: r[1:] for r in conn.execute(
        "SELECT id, status, attempts, last_error FROM jobq.jobs WHERE queue = 'hang'").fetchall()}
    assert rows[hung][0] in ("ready", "scheduled") and rows[hung][1] == 1
    assert "shutdown timeout" in str(rows[hung][2])
    assert [rows[i][:2] for i in waiting] == [("ready", 0), ("ready", 0)]
    assert f"job {hung} of queue hang failed (attempt 1 of" in stderr
