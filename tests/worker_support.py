"""Helpers of the worker tests: waiting on a condition, running a worker in a
thread or a process, and the table where handlers record their executions."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
Conn = psycopg.Connection[tuple[object, ...]]

WAIT_TIMEOUT = 60.0  # seconds: generous, the machine is shared and noisy
EXIT_TIMEOUT = 60.0  # seconds a worker process may take to exit

# One row per handler run: which job, where, which attempt, and when (database clock).
EXECUTIONS_DDL = """
CREATE TABLE executions (
    id        bigserial PRIMARY KEY,
    job_id    bigint NOT NULL,
    pid       integer NOT NULL,
    attempt   integer NOT NULL,
    started   timestamptz NOT NULL,
    finished  timestamptz
)
"""

# One row per job an in-transaction handler committed; the key refuses a second.
LEDGER_DDL = "CREATE TABLE ledger (job_id bigint PRIMARY KEY, pid integer NOT NULL, note text)"


def wait_until(predicate: Callable[[], object], what: str, timeout: float = WAIT_TIMEOUT) -> None:
    """Poll ``predicate`` until it is true; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)


def scalar(conn: Conn, query: str, params: Any = None) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def mapping(conn: Conn, query: str, params: Any = None) -> dict[Any, Any]:
    """A two-column query as a dict."""
    return {row[0]: row[1] for row in conn.execute(query, params).fetchall()}


def backend_pids(conn: Conn, application_name: str) -> list[int]:
    """Backends of this test's database with that application_name."""
    rows = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = %s",
        (application_name,),
    ).fetchall()
    return sorted(int(str(r[0])) for r in rows)


def job_status(conn: Conn, job_id: int) -> str | None:
    row = conn.execute("SELECT status FROM jobq.jobs WHERE id = %s", (job_id,)).fetchone()
    return None if row is None else str(row[0])


class InThread:
    """Run a callable in a thread; ``join()`` re-raises what it raised."""

    def __init__(self, target: Callable[[], object]) -> None:
        self.error: BaseException | None = None
        self._target = target
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self._target()
        except BaseException as error:
            self.error = error

    def join(self, timeout: float = EXIT_TIMEOUT) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the worker thread did not stop"
        if self.error is not None:
            raise self.error


class WorkerProcess:
    """``python -m tests.worker_programs`` as a child process; its log goes to a file."""

    def __init__(self, dsn: str, log_dir: Path, *args: str) -> None:
        self.log = log_dir / f"worker-{time.monotonic_ns()}.log"
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1")
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.worker_programs", dsn, *args],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def signal(self, signum: signal.Signals) -> None:
        self.proc.send_signal(signum)

    def wait(self, timeout: float = EXIT_TIMEOUT) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"worker {self.pid} did not exit; log:\n{self.output()}") from None

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def keep_history(conn: Conn, queues: list[str]) -> None:
    """Keep completed jobs of these queues in jobq.jobs (jobq 0.3 keeps none by
    default), so that tests can read each job's final status."""
    for queue in queues:
        conn.execute("SELECT jobq.configure_queue(%s, retention => interval '1 day')", (queue,))
