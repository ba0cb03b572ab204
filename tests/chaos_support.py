"""Helpers of the reliability suite (tests/test_faults.py, test_restart.py,
test_fencing.py, test_pgbouncer.py, test_bad_input.py, test_privileges.py):
the chaos scale, the figures each test prints and records, snapshots of
every jobq table, and the external processes (PgBouncer) some tests run.

The quick tier (``make test``) always runs at scale 1. ``make chaos`` sets
``JOBQ_CHAOS_SCALE`` (say 10) to multiply job counts, rounds and
durations, and ``JOBQ_CHAOS_REPORT`` to a JSON file that collects the
figures of every test of the run.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from pyqueue.bench.pgbouncer import PgBouncer, server_user_kwargs
from pyqueue.localserver import temporary_directory

__all__ = ["PgBouncer", "server_user_kwargs"]  # re-exported: the tests import them from here
from tests.ports import free_port
from tests.worker_support import wait_until

Conn = psycopg.Connection[Any]

ROOT = Path(__file__).resolve().parent.parent
SQL_DIR = ROOT / "sql"

REPORT_ENV = "JOBQ_CHAOS_REPORT"  # a JSON file collecting every test's figures
SCALE_ENV = "JOBQ_CHAOS_SCALE"  # multiplies job counts, rounds and durations
SEED_ENV = "JOBQ_CHAOS_SEED"  # replays the random choices (kill moments, orders) of a run


def scale() -> float:
    """The chaos scale: 1 in the quick tier, more under ``make chaos``."""
    value = float(os.environ.get(SCALE_ENV, "1"))
    if not value >= 1:
        raise ValueError(f"{SCALE_ENV} must be a number >= 1, got {value}")
    return value


def scaled(n: int) -> int:
    """``n`` times the chaos scale."""
    return max(1, round(n * scale()))


def rng(name: str) -> tuple[random.Random, int]:
    """A random generator for one test and its seed (printed, so a run can be replayed)."""
    seed = int(os.environ.get(SEED_ENV, "0")) or random.SystemRandom().randrange(1, 2**31)
    return random.Random(f"{name}:{seed}"), seed


def report(name: str, figures: dict[str, Any], tmp_path: Path) -> None:
    """Print a test's figures (seen with ``pytest -s``) and record them as JSON:
    in ``$JOBQ_CHAOS_REPORT`` (merged with the other tests of the run) or in
    the test's tmp dir."""
    line = ", ".join(f"{key}={value}" for key, value in figures.items())
    print(f"\n[jobq reliability] {name}: {line}", flush=True)
    target = Path(os.environ.get(REPORT_ENV) or tmp_path / "chaos-report.json")
    existing: dict[str, Any] = {}
    if target.exists():
        try:
            existing = json.loads(target.read_text())
        except ValueError:
            existing = {}
    existing[name] = {**figures, "scale": scale()}
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(existing, indent=2, sort_keys=True, default=str) + "\n")


# --- the whole state of jobq, to prove that a call changed nothing -------------

SNAPSHOT_TABLES = {  # table -> its key, for a stable order
    "jobq._job": "id",
    "jobq._job_archive": "id",
    "jobq._queue": "queue",
    "jobq._periodic": "name",
    "jobq._rate_start": "queue, started_at, n",
    "jobq._migration": "version",
    "jobq._counter": "queue, bucket, completed, failed, dead",
    "jobq._key_done": "queue, job_key",
    "jobq._taken": "xact, queue, n",
    "jobq._job_error": "job_id, failed_at, attempt, error",
    "jobq._queue_grant": "role, queue_pattern, privilege",
}


def keep_history(conn: Conn, queue: str) -> None:
    """Keep a day of completed jobs in the archive (history is opt-in since jobq 0.3.0):
    the chaos suites count completed jobs there."""
    conn.execute("SELECT jobq.configure_queue(%s, retention => interval '1 day')", (queue,))


def snapshot(conn: Conn) -> dict[str, Any]:
    """The contents of every jobq table and the job id sequence."""
    state: dict[str, Any] = {}
    for table, key in SNAPSHOT_TABLES.items():
        row = conn.execute(
            f"SELECT coalesce(jsonb_agg(to_jsonb(t) ORDER BY {key}), '[]'::jsonb) FROM {table} AS t"
        ).fetchone()
        assert row is not None
        state[table] = row[0]
    seq = conn.execute("SELECT last_value, is_called FROM jobq._job_id_seq").fetchone()
    state["jobq._job_id_seq"] = seq
    return state


def drop_login_role(conn: Conn, name: str) -> None:
    """End a test role's sessions, then drop it (roles outlive test databases)."""

    def gone() -> bool:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE usename = %s", (name,)).fetchone()
        return row == (0,)

    conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (name,))
    wait_until(gone, f"the sessions of {name} gone")
    conn.execute(f"DROP ROLE {name}")


# --- servers and ports ------------------------------------------------------------

def install_script() -> str:
    """The full install script of the version jobq.control installs by default."""
    control = (SQL_DIR / "jobq.control").read_text()
    version = next(line.split("'")[1] for line in control.splitlines()
                   if line.strip().startswith("default_version"))
    return (SQL_DIR / f"jobq--{version}.sql").read_text()


@contextmanager
def pgbouncer(*, host: str, port: int, dbname: str, pool_size: int,
              max_client_conn: int = 500) -> Iterator[PgBouncer]:
    """A running PgBouncer (pyqueue.bench.pgbouncer) in a fresh directory
    under /tmp (readable by the server user even when the tests run as
    root); stopped and removed after."""
    directory = temporary_directory("jobq-pgbouncer-")
    try:
        bouncer = PgBouncer(directory, host=host, port=port, dbname=dbname, pool_size=pool_size,
                            max_client_conn=max_client_conn, listen_port=free_port())
        try:
            yield bouncer.start()
        finally:
            bouncer.stop()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def elapsed(start: float) -> float:
    return round(time.monotonic() - start, 1)
