"""A worker program for the tests of running jobs (tests/test_running_jobs.py):

    python -m tests.running_programs DSN --mode MODE [--lease S] [--listen-dsn DSN]

MODE: worker, listen, aio-worker, aio-listen (one handler at a time).

Payloads: ``{"wait": true}`` runs until the job is cancelled (a sync handler
waits on ``job.sleep()``, an async one sleeps until its task is cancelled);
``{"report": N}`` reports progress 1..N every 20 ms, then waits 1.5 s (so
that the last value is sent) and returns; anything else returns at once.
Each run is recorded in ``runs`` (see RUNS_DDL) with database timestamps:
when it started, when its handler exited, whether it saw the cancellation.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import time
from datetime import timedelta
from typing import Any

import psycopg

import pyqueue
from pyqueue import aio

RUNS_DDL = """
CREATE TABLE runs (
    job_id    bigint NOT NULL,
    pid       integer NOT NULL,
    started   timestamptz NOT NULL DEFAULT clock_timestamp(),
    exited    timestamptz,
    cancelled boolean
)
"""
WAIT_LIMIT = 120.0  # seconds: a "wait" handler never waits longer (the test would have failed by then)
REPORT_EVERY = 0.02  # seconds between two progress reports of a "report" handler


def record_start(conn: psycopg.Connection[Any], job_id: int) -> None:
    conn.execute("INSERT INTO runs (job_id, pid) VALUES (%s, %s)", (job_id, os.getpid()))


def record_exit(conn: psycopg.Connection[Any], job_id: int, cancelled: bool) -> None:
    conn.execute("UPDATE runs SET exited = clock_timestamp(), cancelled = %s WHERE job_id = %s AND pid = %s",
                 (cancelled, job_id, os.getpid()))


def sync_handler(dsn: str) -> pyqueue.worker.Handler:
    conn = psycopg.connect(dsn, autocommit=True, application_name="test-recorder")

    def handle(job: pyqueue.Job) -> None:
        record_start(conn, job.id)
        if job.payload.get("wait"):
            cancelled = job.sleep(WAIT_LIMIT)
            assert cancelled == job.cancel_requested and job.cancelled_event.is_set() == cancelled
            record_exit(conn, job.id, cancelled)
            return
        for k in range(1, int(job.payload.get("report", 0)) + 1):
            job.report_progress({"done": k})
            time.sleep(REPORT_EVERY)
        if job.payload.get("report"):
            time.sleep(1.5)
        record_exit(conn, job.id, job.cancel_requested)

    return handle


class AsyncHandler:
    """The same for the asyncio modes (the recordings on a sync connection: a test program)."""

    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True, application_name="test-recorder")

    async def __call__(self, job: aio.AsyncJob) -> None:
        record_start(self.conn, job.id)
        if job.payload.get("wait"):
            try:
                await asyncio.sleep(WAIT_LIMIT)
            except asyncio.CancelledError:
                record_exit(self.conn, job.id, job.cancel_requested)
                raise
            record_exit(self.conn, job.id, False)
            return
        for k in range(1, int(job.payload.get("report", 0)) + 1):
            await job.report_progress({"done": k})
            await asyncio.sleep(REPORT_EVERY)
        if job.payload.get("report"):
            await asyncio.sleep(1.5)
        record_exit(self.conn, job.id, job.cancel_requested)


async def run_async(args: argparse.Namespace, options: dict[str, Any]) -> None:
    handler = AsyncHandler(args.dsn)
    if args.mode == "aio-listen":
        await aio.listen(args.dsn, "work", handler, batch_size=1, **options)
    else:
        worker = aio.AsyncWorker(args.dsn, concurrency=1, batch_size=1, **options)
        worker.register("work", handler)
        await worker.run()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dsn")
    parser.add_argument("--mode", choices=["worker", "listen", "aio-worker", "aio-listen"], required=True)
    parser.add_argument("--lease", type=float, default=None, help="seconds")
    parser.add_argument("--listen-dsn", default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {os.getpid()} %(name)s: %(message)s")
    options: dict[str, Any] = {"poll_interval": 1.0, "max_poll_interval": 1.0, "listen_dsn": args.listen_dsn,
                               "lease": None if args.lease is None else timedelta(seconds=args.lease)}
    if args.mode.startswith("aio-"):
        asyncio.run(run_async(args, options))
    elif args.mode == "listen":
        pyqueue.listen(args.dsn, "work", sync_handler(args.dsn), batch_size=1, **options)
    else:
        worker = pyqueue.Worker(args.dsn, concurrency=1, batch_size=1, **options)
        worker.register("work", sync_handler(args.dsn))
        worker.run()


if __name__ == "__main__":
    main()
