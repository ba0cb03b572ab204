"""The command line's diagnoses, as a newcomer trips on them (issue 29, items
6 and 7): the hint fits the mistake, and a queue name with a typo does not
pass silently."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from pyqueue.cli import main
from tests.test_cli import cli_env

Conn = psycopg.Connection[tuple[object, ...]]


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str


def in_process(capsys: pytest.CaptureFixture[str], *args: str) -> Done:
    """``pyqueue ARGS`` run by main() in this process (a subprocess costs a second or more)."""
    code = main(list(args))
    out, err = capsys.readouterr()
    return Done(code, out, err)


def worker_in(directory: Path, target: str, dsn: str) -> subprocess.CompletedProcess[str]:
    """``pyqueue worker TARGET`` in a subprocess from directory (it imports TARGET's module)."""
    return subprocess.run([sys.executable, "-m", "pyqueue", "worker", target, "--queue", "q", "--dsn", dsn],
                          cwd=directory, env=cli_env(), capture_output=True, text=True, timeout=60,
                          check=False)


def test_a_module_that_fails_inside_shows_its_traceback(dsn: str, tmp_path: Path) -> None:
    (tmp_path / "worker.py").write_text("import not_installed_anywhere_29\n\ndef worker(job):\n    pass\n")
    done = worker_in(tmp_path, "worker:worker", dsn)
    assert done.returncode == 2
    assert "Traceback (most recent call last)" in done.stderr
    assert f'File "{tmp_path}/worker.py", line 1' in done.stderr
    assert "error: importing worker failed: No module named 'not_installed_anywhere_29'" in done.stderr
    assert "--app-dir" not in done.stderr  # the module was found: where it is imported from is fine


def test_a_file_path_for_module_gets_the_module_name(dsn: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "worker.py").write_text("def worker(job):\n    pass\n")
    done = worker_in(tmp_path, "worker.py:worker", dsn)
    assert done.returncode == 2
    assert "worker/py.py" not in done.stderr
    assert "not a file path" in done.stderr
    assert "hint: For ./worker.py: pyqueue worker worker:worker" in done.stderr
    nested = in_process(capsys, "worker", "app/jobs.py:handle", "--queue", "q", "--dsn", dsn)
    assert "pyqueue worker app.jobs:handle" in nested.stderr and "--app-dir app" in nested.stderr


def test_a_bad_dsn_value_is_not_answered_pass_dsn(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    done = in_process(capsys, "stats", "--dsn", f"host={tmp_path} port=1 dbname=nothing")
    assert done.returncode == 1
    assert "from --dsn" in done.stderr
    assert "hint: Check the --dsn value" in done.stderr and "Pass --dsn" not in done.stderr
    monkeypatch.setenv("DATABASE_URL", f"postgresql:///nothing?host={tmp_path}&port=1")
    from_env = in_process(capsys, "stats")
    assert "hint: Check $DATABASE_URL" in from_env.stderr


def test_a_payload_that_is_not_an_object_is_refused_with_a_json_hint(
        dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    done = in_process(capsys, "enqueue", "q", "[1,2]", "--dsn", dsn)
    assert done.returncode == 2
    assert "error: PAYLOAD_JSON must be a JSON object, got an array: [1,2]" in done.stderr
    assert """hint: Put it under a key, e.g. '{"items": [1, 2]}'""" in done.stderr
    assert "cast" not in done.stderr


def test_a_queue_jobq_has_never_seen_is_warned_with_the_known_ones(
        dsn: str, conn: Conn, capsys: pytest.CaptureFixture[str]) -> None:
    conn.execute("SELECT jobq.enqueue('payments', '{}'), jobq.configure_queue('emails', max_attempts => 3)")
    for command in (["retry", "--dead", "paymnets"], ["cancel", "paymnets"], ["discard-dead", "paymnets"]):
        done = in_process(capsys, *command, "--dsn", dsn)
        assert done.returncode == 1, (command, done.stdout, done.stderr)
        assert done.stdout.startswith("0 "), command
        assert ("warning: jobq has never seen queue 'paymnets' (no job, setting or count): a typo? "
                "Known queues: emails, payments") in done.stderr, command
    # A queue jobq knows with nothing to act on: exit 0 as before, no warning.
    for command in (["retry", "--dead", "emails"], ["discard-dead", "payments"], ["cancel", "emails"]):
        done = in_process(capsys, *command, "--dsn", dsn)
        assert done.returncode == 0 and "warning" not in done.stderr, (command, done.stderr)
