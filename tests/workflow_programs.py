"""The worker program of tests/test_workflow_concurrency.py, run as real
processes (and SIGKILLed) by the diamond-graph test:

    python -m tests.workflow_programs DSN [--queue Q] [--concurrency N] [--batch-size N]
                                          [--lease SECONDS] [--reap-interval SECONDS]

A plain ``pyqueue.Worker`` (the existing API: the handler returns nothing).
Its handler records every run in ``wf_runs`` on its own connection with the
database clock: a row when it starts, ``finished`` when it returns. It fails
(raises) while the job's attempt is at most the payload's ``"fail"``, unless
``wf_phase.healed`` is set (the test's second drain, after retrying the dead
jobs); ``"sleep"`` seconds of work stretch the run so a SIGKILL finds jobs
in hand.
"""

from __future__ import annotations

import argparse
import logging
import os
import threading
import time
from datetime import timedelta
from typing import Any

import psycopg

import pyqueue

_local = threading.local()

# One row per handler run; and a one-row switch that turns the planned failures off.
RUNS_DDL = """
CREATE TABLE wf_runs (
    id        bigserial PRIMARY KEY,
    job_id    bigint NOT NULL,
    pid       integer NOT NULL,
    attempt   integer NOT NULL,
    started   timestamptz NOT NULL,
    finished  timestamptz
);
CREATE INDEX ON wf_runs (job_id);
CREATE TABLE wf_phase (healed boolean NOT NULL);
INSERT INTO wf_phase VALUES (false);
"""


class PlannedFailure(Exception):
    """The failure a job's payload asked for."""


def connection(dsn: str) -> psycopg.Connection[Any]:
    """This handler thread's own autocommit connection for the recordings."""
    conn: psycopg.Connection[Any] | None = getattr(_local, "conn", None)
    if conn is None or conn.closed:
        conn = _local.conn = psycopg.connect(dsn, autocommit=True, application_name="wf-recorder")
    return conn


def make_handler(dsn: str) -> pyqueue.worker.Handler:
    def handle(job: pyqueue.Job) -> None:
        conn = connection(dsn)
        row = conn.execute(
            "INSERT INTO wf_runs (job_id, pid, attempt, started) VALUES (%s, %s, %s, clock_timestamp()) "
            "RETURNING id, (SELECT healed FROM wf_phase)", (job.id, os.getpid(), job.attempts),
        ).fetchone()
        assert row is not None
        run_id, healed = row
        pause = float(job.payload.get("sleep", 0))
        if pause:
            time.sleep(pause)
        if not healed and job.attempts <= int(job.payload.get("fail", 0)):
            raise PlannedFailure(f"planned failure of job {job.id}, attempt {job.attempts}")
        conn.execute("UPDATE wf_runs SET finished = clock_timestamp() WHERE id = %s", (run_id,))

    return handle


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dsn")
    parser.add_argument("--queue", default="wf")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=5)
    parser.add_argument("--lease", type=float, default=None, help="seconds")
    parser.add_argument("--poll-interval", type=float, default=1.0)
    parser.add_argument("--reap-interval", type=float, default=1.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {os.getpid()} %(name)s: %(message)s")
    lease = None if args.lease is None else timedelta(seconds=args.lease)
    worker = pyqueue.Worker(args.dsn, concurrency=args.concurrency, batch_size=args.batch_size, lease=lease,
                            poll_interval=args.poll_interval, reap_interval=args.reap_interval,
                            shutdown_timeout=10.0)
    worker.register(args.queue, make_handler(args.dsn))
    worker.run()
    logging.getLogger("tests.workflow_programs").info("worker exits normally")


if __name__ == "__main__":
    main()
