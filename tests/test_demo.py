"""``pyqueue demo`` (what ``make demo`` runs), as a real subprocess: it
tells the story it promises and leaves no server or files behind, also
when it is interrupted."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import ROOT
from tests.process_support import processes_mentioning, running

DEMO_TIMEOUT = 180  # seconds the quick demo may take, server start and stop included
STOP_TIMEOUT = 60  # seconds an interrupted demo may take to clean up
SERVER_DIR = re.compile(r"starting a throwaway PostgreSQL in (\S+)")


def demo_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "pyqueue", "demo", *args]


def server_dir(output: str) -> Path:
    found = SERVER_DIR.search(output)
    assert found, f"the demo does not say where its server lives:\n{output}"
    return Path(found[1])


def stats_rows(output: str) -> dict[str, list[str]]:
    """The jobq.stats table the demo printed, by queue."""
    lines = output.split("jobq.stats:\n", 1)[1].splitlines()
    assert lines[0].split() == ["queue", "ready", "scheduled", "running", "dead", "waiting", "oldest",
                                 "ready"]
    rows = {}
    for line in lines[2:]:
        if not line.strip():
            break
        cells = line.split()
        rows[cells[0]] = cells[1:]
    return rows


def test_the_quick_demo_tells_its_story_and_cleans_up() -> None:
    done = subprocess.run(demo_command("--small"), cwd=ROOT, capture_output=True, text=True,
                          timeout=DEMO_TIMEOUT, check=False)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    output = done.stdout

    rows = stats_rows(output)
    assert set(rows) == {"emails", "thumbnails", "invoices"}
    assert rows["invoices"][:4] == ["0", "0", "0", "1"], "the poison invoice is the one dead job"
    assert rows["emails"][:4] == ["0", "0", "0", "0"]
    # The flaky email: two failures, each with its backoff, then success.
    assert re.search(r"weekly report email \(job \d+\): attempt 1/\d+ failed, retry in \d\.\d\d s", output)
    assert re.search(r"weekly report email \(job \d+\): succeeded on attempt 3", output)
    assert re.search(r"retry: .* was retried after \d\.\d\d s, then \d\.\d\d s .* and completed on attempt 3",
                     output.replace("\n    ", " "))
    # The poison invoice: three attempts, then the dead letter with its error.
    assert re.search(r"invoice 1042 \(job \d+\): attempt 3/3 failed: dead letter", output)
    assert "unsupported currency 'XXX'" in output
    # The delayed report ran, and not before its time.
    story = output.replace("\n    ", " ")
    scheduled = re.search(r"delayed by (\d+) s at enqueue, started (\d+\.\d\d) s after", story)
    assert scheduled and float(scheduled[2]) >= float(scheduled[1])

    directory = server_dir(output)
    assert f"stopped PostgreSQL and removed {directory}" in output
    # Nothing suggests a command on a job of the server the demo has just
    # removed (issue 29): the retry hint is for the reader's own server.
    assert not re.search(r"pyqueue retry \d+", story), "suggests retrying a job of the removed server"
    assert "`pyqueue retry JOB_ID` on your own server" in story
    assert not directory.exists()
    assert processes_mentioning(str(directory)) == []


def test_an_interrupted_demo_still_stops_its_server_and_removes_its_files() -> None:
    demo = subprocess.Popen(demo_command(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert demo.stdout is not None
        seen = ""
        for line in demo.stdout:  # until the workers run
            seen += line
            if line.startswith("starting") and "workers" in line:
                break
        directory = server_dir(seen)
        postmaster = int((directory / "data" / "postmaster.pid").read_text().split()[0])
        time.sleep(1)  # some jobs in flight
        demo.send_signal(signal.SIGTERM)
        rest, stderr = demo.communicate(timeout=STOP_TIMEOUT)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.communicate()
    assert demo.returncode == 130, stderr
    assert "interrupted" in stderr
    assert f"stopped PostgreSQL and removed {directory}" in rest
    assert not directory.exists()
    assert processes_mentioning(str(directory)) == []
    assert not running(postmaster)
