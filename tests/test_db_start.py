"""`make db-start` while its server already runs (issue 29, item 8): it says
"already running", prints the export line and exits 0 — no traceback, no old
log lines."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyqueue.localserver import LocalServer, temporary_directory

ROOT = Path(__file__).resolve().parent.parent


def running(directory: Path) -> bool:
    return (directory / "data" / "postmaster.pid").exists()


@pytest.fixture
def db_dir() -> Iterator[Path]:
    parent = temporary_directory("jq-dbstart-")  # short: the socket lives in there
    directory = parent / "db"
    yield directory
    done = subprocess.run(["make", "-s", "-C", str(ROOT), "db-stop", f"DB_DIR={directory}"],
                          capture_output=True, text=True, check=False, timeout=120)
    if running(directory):  # make db-stop failed: stop it anyway
        LocalServer(directory).stop()
    shutil.rmtree(parent, ignore_errors=True)
    assert done.returncode == 0, done.stdout + done.stderr


def db_start(directory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["make", "-s", "-C", str(ROOT), "db-start", f"DB_DIR={directory}"],
                          capture_output=True, text=True, check=False, timeout=180)


def test_db_start_twice_says_already_running_and_prints_the_export_line(db_dir: Path) -> None:
    first = db_start(db_dir)
    assert first.returncode == 0, first.stdout + first.stderr
    assert running(db_dir)

    again = db_start(db_dir)
    output = again.stdout + again.stderr
    assert again.returncode == 0, output
    assert "already running" in output
    assert f'export DATABASE_URL="postgresql://postgres@/jobq?host={db_dir}"' in again.stdout
    assert "Traceback" not in output
    assert "LOG:" not in output  # no lines of the server's log
    assert running(db_dir)
